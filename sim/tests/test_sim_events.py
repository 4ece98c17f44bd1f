"""The simulated components' event recorders (tfjob_sim.events): client-go's aggregation,
spam filter and series, and the fast write path storing what the API write would store."""

from __future__ import annotations

from datetime import UTC

import anyio

from tfjob_sim.events import (
    COMBINED_PREFIX,
    EventRecorder,
    EventTTL,
    _micro_time,
    _time,
    node_reference,
    object_reference,
    truncate_note,
)
from tfjob_sim.store import Store
from tfjob_sim.testing.waiting import eventually

NS = "default"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def create_web_pod(store: Store) -> dict:
    """The pod whose events the tests record."""
    return store.create(
        "pods",
        NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web"},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
        },
    )


def setup() -> tuple[Store, EventRecorder, Clock, dict]:
    store = Store()
    clock = Clock()
    recorder = EventRecorder(store, monotonic=clock)
    pod = create_web_pod(store)
    return store, recorder, clock, pod


def events(store: Store) -> list[dict]:
    return store.list("events", NS)[0]


def kubelet_event(recorder: EventRecorder, pod: dict, reason: str, message: str, type_: str = "Normal") -> None:
    recorder.record(
        object_reference(pod, "spec.containers{app}"), type_, reason, message, component="kubelet", host="sim-node-0"
    )


def test_exact_repeats_update_the_first_event() -> None:
    store, recorder, clock, pod = setup()
    for _ in range(3):
        kubelet_event(recorder, pod, "Pulled", 'Container image "nginx:1.27" already present on machine')
        clock.now += 1
    [event] = events(store)
    assert event["count"] == 3
    assert event["metadata"]["name"].startswith("web.")
    assert event["involvedObject"] == {
        "kind": "Pod",
        "namespace": NS,
        "name": "web",
        "uid": pod["metadata"]["uid"],
        "apiVersion": "v1",
        "resourceVersion": pod["metadata"]["resourceVersion"],
        "fieldPath": "spec.containers{app}",
    }
    assert (event["source"], event["reportingComponent"], event["reportingInstance"]) == (
        {"component": "kubelet", "host": "sim-node-0"},
        "kubelet",
        "sim-node-0",
    )
    assert event["eventTime"] is None and event["firstTimestamp"] <= event["lastTimestamp"]


def test_the_fast_path_stores_what_the_api_write_would() -> None:
    store, recorder, _clock, pod = setup()
    kubelet_event(recorder, pod, "Created", "Created container: app")  # full pipeline: learns the shape
    kubelet_event(recorder, pod, "Started", "Started container app")  # same shape: fast path
    fast = next(e for e in events(store) if e["reason"] == "Started")
    body = {k: v for k, v in fast.items() if k != "metadata"}
    body["metadata"] = {"name": "reference", "namespace": NS}
    slow = store.create("events", NS, body, field_manager="kubelet")

    def comparable(obj: dict) -> dict:
        meta = {
            k: v
            for k, v in obj["metadata"].items()
            if k not in ("name", "uid", "resourceVersion", "creationTimestamp", "managedFields")
        }
        fields = [{k: v for k, v in e.items() if k != "time"} for e in obj["metadata"]["managedFields"]]
        return {**obj, "metadata": {**meta, "managedFields": fields}}

    assert comparable(fast) == comparable(slow)
    assert set(fast["metadata"]) == set(slow["metadata"])


def test_ten_similar_events_are_combined() -> None:
    store, recorder, _clock, pod = setup()
    for i in range(12):
        kubelet_event(recorder, pod, "Unhealthy", f"Readiness probe failed: attempt {i}", "Warning")
    stored = events(store)
    assert len(stored) == 10  # nine distinct events, then one combined event counting the rest
    combined = [e for e in stored if e["message"].startswith(COMBINED_PREFIX)]
    assert len(combined) == 1
    assert combined[0]["message"] == COMBINED_PREFIX + "Readiness probe failed: attempt 11"
    assert combined[0]["count"] == 3


def test_spam_filter_drops_what_exceeds_the_burst_until_tokens_refill() -> None:
    store, recorder, clock, pod = setup()
    for _ in range(30):
        kubelet_event(recorder, pod, "Pulled", 'Container image "nginx:1.27" already present on machine')
    [event] = events(store)
    assert event["count"] == 25  # burst 25: the rest were dropped (still counted by the recorder)
    clock.now += 300  # one token back
    kubelet_event(recorder, pod, "Pulled", 'Container image "nginx:1.27" already present on machine')
    [event] = events(store)
    assert event["count"] == 31
    # Another source (the node controller) has its own bucket.
    recorder.record(object_reference(pod), "Warning", "NodeNotReady", "Node is not ready", component="node-controller")
    assert any(e["reason"] == "NodeNotReady" for e in events(store))


def test_scheduler_series() -> None:
    store, recorder, clock, pod = setup()

    def failed() -> None:
        recorder.record_series(
            object_reference(pod),
            "Warning",
            "FailedScheduling",
            "Scheduling",
            f"0/3 nodes are available (at {clock.now})",
            controller="default-scheduler",
            instance="default-scheduler-host",
        )

    failed()
    [event] = events(store)
    assert event["message"] == "0/3 nodes are available (at 1000.0)"
    assert event.get("series") is None and "count" not in event and event["eventTime"].endswith("Z")
    assert (event["source"], event["action"], event["reportingComponent"], event["reportingInstance"]) == (
        {},
        "Scheduling",
        "default-scheduler",
        "default-scheduler-host",
    )
    clock.now += 10
    failed()
    [event] = events(store)
    assert event["series"]["count"] == 2 and event["message"] == "0/3 nodes are available (at 1000.0)"
    clock.now += 10
    failed()
    assert events(store)[0]["series"]["count"] == 2  # counted in memory, written at the 30 min heartbeat
    for _ in range(5):
        clock.now += 5 * 60
        failed()
    assert events(store)[0]["series"]["count"] == 2
    clock.now += 5 * 60  # 30 min since the last write
    failed()
    assert events(store)[0]["series"]["count"] == 9
    clock.now += 5 * 60
    failed()
    assert events(store)[0]["series"]["count"] == 9
    clock.now += 7 * 60  # the series ended (6 min quiet): its final count is written, a new event starts
    failed()
    stored = sorted(events(store), key=lambda e: e["eventTime"])
    assert [(e.get("series") or {}).get("count") for e in stored] == [10, None]


def test_long_scheduler_messages_are_truncated() -> None:
    assert truncate_note("x" * 1024) == "x" * 1024
    assert truncate_note("x" * 2000) == "x" * 1020 + " ..."


def test_node_events_live_in_the_default_namespace() -> None:
    store, recorder, _clock, _pod = setup()
    recorder.record(
        node_reference("sim-node-0"),
        "Normal",
        "NodeNotReady",
        "Node sim-node-0 status is now: NodeNotReady",
        component="node-controller",
    )
    [event] = events(store)
    assert event["involvedObject"] == {"kind": "Node", "name": "sim-node-0", "uid": "sim-node-0", "apiVersion": "v1"}
    assert event["source"] == {"component": "node-controller"} and event["reportingInstance"] == ""


def test_events_for_a_terminating_namespace_are_dropped() -> None:
    store, recorder, _clock, _pod = setup()
    store.create("namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gone"}})
    held = store.create(
        "pods",
        "gone",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "finalizers": ["example.com/hold"]},
            "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
        },
    )
    store.delete("namespaces", None, "gone")
    kubelet_event(recorder, held, "Killing", "Stopping container app")  # refused with 403: dropped, no error
    assert store.list("events", "gone")[0] == []


async def test_events_expire_after_the_ttl_unless_written_again() -> None:
    store = Store()
    ttl = EventTTL(store, ttl=30, time_scale=0.01)  # 0.3 s
    recorder = EventRecorder(store)
    pod = create_web_pod(store)
    deleted: list[str] = []
    store.add_listener(
        lambda t, r, old, new: (
            deleted.append(old["metadata"]["name"])
            if t == "DELETED" and r in ("events", "events.events.k8s.io")
            else None
        )
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(ttl.run)
        await anyio.wait_all_tasks_blocked()
        kubelet_event(recorder, pod, "Pulled", "present")  # written once
        kubelet_event(recorder, pod, "Started", "started")  # written, then written again below
        other = store.create(
            "events.events.k8s.io",
            NS,
            {
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "api-written"},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "reportingController": "someone",
                "reportingInstance": "someone-1",
                "action": "Doing",
                "reason": "Done",
                "type": "Normal",
                "regarding": {"kind": "Pod", "namespace": NS, "name": "web"},
            },
        )
        started = next(e for e in events(store) if e["reason"] == "Started")["metadata"]["name"]
        pulled = next(e for e in events(store) if e["reason"] == "Pulled")["metadata"]["name"]
        with anyio.fail_after(10):
            while True:  # keep the Started event fresh while the others expire
                kubelet_event(recorder, pod, "Started", "started")
                if pulled in deleted and other["metadata"]["name"] in deleted:
                    break
                await anyio.sleep(0.05)  # the rhythm of the repeats, not synchronisation
        assert started not in deleted and store.get("events", NS, started)["count"] > 2
        assert ttl.expired == 2
        # No more writes: it expires too.
        await eventually(lambda: started in deleted, interval=0.05, what="the Started event expired")
        tg.cancel_scope.cancel()


def test_timestamps_are_formatted_as_go_formats_them() -> None:
    """metav1.Time (whole seconds, truncated) and metav1.MicroTime (microseconds rounded half to even, as
    datetime does), including the roundings that carry into the next second."""
    import random
    import time
    from datetime import datetime

    rng = random.Random(7)
    stamps = [1_700_000_000 + rng.random() * 1e6 for _ in range(20_000)]
    stamps += [1_700_000_000 + k + (j + 0.5) / 1e6 for k in range(3) for j in range(0, 1_000_000, 991)]
    stamps += [1_700_000_000.9999995, 1_700_000_000.9999996, 1_700_000_000.0000005, 0.0, 1e-7, 12.5e-6]
    for ts in stamps:
        assert _micro_time(ts) == datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), ts
        assert _time(ts) == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts)), ts
    assert _micro_time(1_700_000_000.9999996) == "2023-11-14T22:13:21.000000Z"
