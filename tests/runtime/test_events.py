"""The event recorder: recording never blocks or fails the caller; correlation, spam filter, a bounded
queue, and a writer task that flushes within a bound when stopped."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from controller.runtime.errors import NotFound, ServerError
from controller.runtime.events import COMBINED_PREFIX, EventRecorder
from tests.scrape import series
from tfjob_sim.testing.waiting import eventually


class FakeEventsClient:
    """Records event writes; ``gate`` (when set) holds every write until it is set."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.gate: anyio.Event | None = None
        self.fail_with: Exception | None = None
        self.missing: set[str] = set()  # names whose PATCH answers 404 (expired)
        self.stored: dict[str, dict[str, Any]] = {}

    async def _wait(self) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise self.fail_with

    async def create(self, resource: Any, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        await self._wait()
        self.calls.append(("create", body["metadata"]["name"], body))
        self.stored[body["metadata"]["name"]] = dict(body)
        return body

    async def patch(self, resource: Any, name: str, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        await self._wait()
        self.calls.append(("patch", name, body))
        if name in self.missing:
            raise NotFound(404, "NotFound", "events not found")
        self.stored[name].update(body)
        return self.stored[name]


def job(name: str = "j", uid: str = "uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "7"},
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recorder(client: FakeEventsClient, registry: CollectorRegistry | None = None, **kwargs: Any) -> EventRecorder:
    kwargs.setdefault("qps", 0)  # no pacing unless a test asks for it
    return EventRecorder(
        client, "tfjob-controller", registry, now=lambda: "2026-01-01T00:00:00Z", instance="test", **kwargs
    )


def dropped(registry: CollectorRegistry, reason: str) -> float:
    return series(registry, "events_dropped_total", {"reason": reason})


async def test_record_returns_at_once_and_the_writer_creates_the_event():
    client = FakeEventsClient()
    rec = recorder(client)
    rec.record(job(), "Normal", "SuccessfulCreatePod", "Created pod: j-worker-0")
    assert client.calls == [] and rec.queued == 1  # nothing written by record() itself
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: rec.queued == 0 and client.calls, what="the event to be written")
        tg.cancel_scope.cancel()
    [(verb, name, body)] = client.calls
    assert verb == "create" and name.startswith("j.")
    assert body["involvedObject"] == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "name": "j",
        "namespace": "ns",
        "uid": "uid-1",
        "resourceVersion": "7",
    }
    assert (body["type"], body["reason"], body["message"], body["count"]) == (
        "Normal",
        "SuccessfulCreatePod",
        "Created pod: j-worker-0",
        1,
    )
    assert body["source"] == {"component": "tfjob-controller"} and body["reportingInstance"] == "test"


async def test_exact_repeats_merge_while_queued_and_patch_the_count_once_written():
    client = FakeEventsClient()
    rec = recorder(client)
    for _ in range(3):
        rec.record(job(), "Warning", "WorkerFailover", "worker 1 was deleted")
    assert rec.queued == 1
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: rec.queued == 0 and client.calls, what="the first write")
        rec.record(job(), "Warning", "WorkerFailover", "worker 1 was deleted")
        await eventually(lambda: rec.queued == 0 and len(client.calls) == 2, what="the count patch")
        tg.cancel_scope.cancel()
    (verb1, name1, body1), (verb2, name2, body2) = client.calls
    assert (verb1, body1["count"]) == ("create", 3)
    assert (verb2, name2, body2["count"]) == ("patch", name1, 4)


async def test_similar_events_beyond_the_limit_are_combined_into_one():
    client = FakeEventsClient()
    rec = recorder(client, aggregate_max_events=10)
    for i in range(14):
        rec.record(job(), "Normal", "SuccessfulCreatePod", f"Created pod: j-worker-{i}")
    assert rec.queued == 11  # ten distinct events, then one combined
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: rec.queued == 0, what="the queue to drain")
        tg.cancel_scope.cancel()
    messages = [body["message"] for _, _, body in client.calls]
    assert messages[:10] == [f"Created pod: j-worker-{i}" for i in range(10)]
    assert messages[10] == COMBINED_PREFIX + "Created pod: j-worker-13"
    assert client.calls[10][2]["count"] == 4


async def test_the_spam_filter_drops_the_excess_per_object_and_type_and_refills():
    client = FakeEventsClient()
    registry = CollectorRegistry()
    clock = Clock()
    rec = recorder(client, registry, spam_burst=3, spam_refill_seconds=300, aggregate_max_events=1000, clock=clock)
    for i in range(5):
        rec.record(job(), "Normal", "R", f"m{i}")
    rec.record(job(), "Warning", "R", "w")  # another type: its own bucket
    rec.record(job("other", "uid-2"), "Normal", "R", "m")  # another object: its own bucket
    assert rec.queued == 5 and dropped(registry, "SpamFilter") == 2
    clock.now += 300  # one token back
    rec.record(job(), "Normal", "R", "m5")
    rec.record(job(), "Normal", "R", "m6")
    assert rec.queued == 6 and dropped(registry, "SpamFilter") == 3


async def test_a_full_queue_drops_instead_of_blocking_and_counts():
    client = FakeEventsClient()
    client.gate = anyio.Event()  # the API server does not answer
    registry = CollectorRegistry()
    rec = recorder(client, registry, max_queued=100, flush_timeout=0.1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        # record() never waits for the writer: it is synchronous, so the loop cannot yield to it.
        for i in range(250):
            rec.record(job(f"j{i}", f"uid-{i}"), "Normal", "SuccessfulCreatePod", "Created pod")
        assert rec.queued == 100
        assert dropped(registry, "QueueFull") == 150
        # a repeat of a queued event is merged, not dropped
        rec.record(job("j0", "uid-0"), "Normal", "SuccessfulCreatePod", "Created pod")
        assert dropped(registry, "QueueFull") == 150
        tg.cancel_scope.cancel()
    # stopped while the server hangs: the flush gives up after flush_timeout and counts the rest
    assert dropped(registry, "Shutdown") == 100 and rec.queued == 0


async def test_stopping_flushes_queued_events_without_pacing():
    client = FakeEventsClient()
    registry = CollectorRegistry()
    rec = recorder(client, registry, qps=0.001, burst=1, flush_timeout=10)  # one write, then ~17 min apart
    for i in range(20):
        rec.record(job(f"j{i}", f"uid-{i}"), "Normal", "R", "m")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: len(client.calls) == 1, what="the first, unpaced write")
        tg.cancel_scope.cancel()
    assert len(client.calls) == 20 and rec.queued == 0
    assert dropped(registry, "Shutdown") == 0


async def test_concurrent_writers_share_one_pace():
    """qps 50, burst 1: the 8 writers reserve their turns, so 5 writes take at least 4/50 s (not one
    refill for all of them at once)."""
    client = FakeEventsClient()
    rec = recorder(client, qps=50, burst=1)
    for i in range(5):
        rec.record(job(f"j{i}", f"uid-{i}"), "Normal", "R", "m")
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: len(client.calls) == 5, what="the five paced writes")
        elapsed = time.monotonic() - started
        tg.cancel_scope.cancel()
    assert elapsed >= 4 / 50


async def test_write_errors_are_counted_and_never_raised():
    client = FakeEventsClient()
    client.fail_with = ServerError(500, "InternalError", "etcd is sad")
    registry = CollectorRegistry()
    rec = recorder(client, registry)
    rec.record(job(), "Normal", "R", "m")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: rec.queued == 0, what="the failed write to be given up")
        tg.cancel_scope.cancel()
    assert dropped(registry, "ServerError") == 1


async def test_an_expired_event_is_written_afresh_with_its_count():
    client = FakeEventsClient()
    rec = recorder(client)
    rec.record(job(), "Normal", "R", "m")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: rec.queued == 0 and client.calls, what="the first write")
        client.missing.add(client.calls[0][1])  # the server's TTL removed it
        rec.record(job(), "Normal", "R", "m")
        await eventually(lambda: rec.queued == 0 and len(client.calls) == 3, what="patch, then a fresh create")
        tg.cancel_scope.cancel()
    assert [c[0] for c in client.calls] == ["create", "patch", "create"]
    assert client.calls[2][1] != client.calls[0][1] and client.calls[2][2]["count"] == 2


async def test_writers_write_concurrently_but_one_event_object_at_a_time():
    """A burst is written by ``writers`` concurrent writes (not one at a time, not paced), never two at
    once for the same Event object: a repeat recorded while its create is in flight waits for it."""
    client = FakeEventsClient()
    client.gate = anyio.Event()
    in_flight: list[int] = []
    create = client.create

    async def counting_create(resource: Any, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        in_flight.append(1)
        try:
            return await create(resource, body, namespace=namespace)
        finally:
            in_flight.pop()

    client.create = counting_create  # type: ignore[method-assign]
    rec = recorder(client, writers=4)
    for i in range(3):
        rec.record(job(f"j{i}", uid=f"uid-{i}"), "Normal", "SuccessfulCreatePod", f"Created pod: j{i}-worker-0")
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: len(in_flight) == 3, what="three writes at once")
        # The fourth writer is idle; the repeat wakes it, and it must leave j0 to the writer writing it.
        rec.record(job("j0", uid="uid-0"), "Normal", "SuccessfulCreatePod", "Created pod: j0-worker-0")
        for _ in range(20):
            await anyio.sleep(0)  # scheduling turns, not time: every writer runs until it waits
        assert len(in_flight) == 3 and rec.queued == 3
        client.gate.set()
        await eventually(lambda: rec.queued == 0 and len(client.calls) == 4, what="every write")
        tg.cancel_scope.cancel()
    creates = [body for verb, _, body in client.calls if verb == "create"]
    assert len(creates) == 3
    [(_verb, name, body)] = [c for c in client.calls if c[0] == "patch"]
    j0 = next(b for b in creates if b["involvedObject"]["name"] == "j0")
    assert body["count"] == 2 and name == j0["metadata"]["name"]


async def test_a_burst_beyond_the_cache_loses_no_queued_event():
    """Thousands of distinct Events queued at once (a 1,000-job burst's creations) are all written: none
    is evicted from the correlation cache while it waits."""
    client = FakeEventsClient()
    registry = CollectorRegistry()
    rec = recorder(client, registry)
    for i in range(6000):
        rec.record(job(f"j{i}", uid=f"uid-{i}"), "Normal", "SuccessfulCreatePod", f"Created pod: j{i}-worker-0")
    assert rec.queued == 6000
    async with anyio.create_task_group() as tg:
        tg.start_soon(rec.run)
        await eventually(lambda: rec.queued == 0, timeout=60, what="every event written")
        tg.cancel_scope.cancel()
    assert len(client.calls) == 6000
    assert dropped(registry, "Evicted") == dropped(registry, "QueueFull") == 0


@pytest.mark.parametrize(
    "kwargs", [{"max_queued": 0}, {"writers": 0}, {"burst": 0}, {"spam_burst": 0}, {"aggregate_max_events": 0}]
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        recorder(FakeEventsClient(), **kwargs)
