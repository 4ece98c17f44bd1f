"""Reconcile runner: result handling, error isolation, start-after-sync, clean cancellation, metrics."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson
import pytest
import structlog
import structlog.contextvars
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from controller.runtime.clock import FakeClock
from controller.runtime.errors import (
    ERROR_REASONS,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ServerTimeout,
    ServiceUnavailable,
    TooManyRequests,
    TransportError,
)
from controller.runtime.metrics import ReconcileMetrics
from controller.runtime.ratelimit import ItemExponentialFailureRateLimiter
from controller.runtime.runner import CacheSyncTimeoutError, Controller, Result
from controller.runtime.workqueue import RateLimitingQueue

Eventually = Callable[..., Awaitable[None]]


class FakeSource:
    """A cache whose sync the test controls."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._synced = anyio.Event()

    def mark_synced(self) -> None:
        self._synced.set()

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    def __repr__(self) -> str:
        return f"FakeSource({self.name})"


def make_queue(clock: FakeClock, name: str = "c") -> RateLimitingQueue[str]:
    # Backoff 1 s * 2**n so the expected delays are easy to read; no global bucket.
    return RateLimitingQueue(name, rate_limiter=ItemExponentialFailureRateLimiter(1.0, 100.0), clock=clock)


class Boom(Exception):
    pass


# Each case: what reconcile does on its first call, the result label, the delay until the second call (None:
# never again), and the failures recorded afterwards. The key starts with 2 recorded failures, so "forget"
# is visible (0) and a backoff is 1 s * 2**2 = 4 s.
RESULT_CASES = {
    "None is success": (None, "success", None, 0),
    "Result() is success": (Result(), "success", None, 0),
    "requeue_after=0 is success": (Result(requeue_after=0), "success", None, 0),
    "requeue backs off": (Result(requeue=True), "requeue", 4.0, 3),
    "requeue_after forgets and waits": (Result(requeue_after=5.0), "requeue_after", 5.0, 0),
    "requeue_after wins over requeue": (Result(requeue=True, requeue_after=5.0), "requeue_after", 5.0, 0),
    "exception backs off": (Boom("broken"), "error", 4.0, 3),
    "wrong return type is an error": ("done", "error", 4.0, 3),
}


@pytest.mark.parametrize(("outcome", "label", "delay", "requeues"), list(RESULT_CASES.values()), ids=list(RESULT_CASES))
async def test_result_handling(
    outcome: Any,
    label: str,
    delay: float | None,
    requeues: int,
    fake_clock: FakeClock,
    registry: CollectorRegistry,
    metric_value: Callable[..., float],
    eventually: Eventually,
) -> None:
    calls: list[float] = []

    async def reconcile(key: str) -> Any:
        calls.append(fake_clock.now())
        if len(calls) > 1:
            return None
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    queue = make_queue(fake_clock)
    queue.rate_limiter.when("ns/a")
    queue.rate_limiter.when("ns/a")
    controller = Controller("c", reconcile, queue=queue, metrics=ReconcileMetrics("c", registry))
    queue.add("ns/a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        await eventually(lambda: len(calls) == 1 and queue.num_processing == 0)
        assert metric_value("controller_runtime_reconcile_total", controller="c", result=label) == 1
        assert queue.num_requeues("ns/a") == requeues
        start = calls[0]
        if delay is None:
            assert queue.num_waiting == 0 and len(queue) == 0
            fake_clock.advance(2000.0)
            await anyio.wait_all_tasks_blocked()
            assert len(calls) == 1
        else:
            fake_clock.advance(delay - 0.5)
            await anyio.wait_all_tasks_blocked()
            assert len(calls) == 1, "retried before its delay"
            fake_clock.advance(0.5)
            await eventually(lambda: len(calls) == 2)
            assert calls[1] - start == delay
        tg.cancel_scope.cancel()


async def test_exception_does_not_kill_the_worker_and_is_logged_with_the_key(
    fake_clock: FakeClock, eventually: Eventually
) -> None:
    reconciled: list[str] = []
    context_seen: list[dict[str, Any]] = []

    async def reconcile(key: str) -> None:
        context_seen.append(structlog.contextvars.get_contextvars())
        reconciled.append(key)
        if key == "ns/bad":
            raise Boom(f"cannot reconcile {key}")

    queue = make_queue(fake_clock)
    controller = Controller("c", reconcile, workers=1, queue=queue)
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.run)
            queue.add("ns/bad")
            queue.add("ns/good")
            # One worker: "good" is reconciled after "bad" raised, so the worker survived.
            await eventually(lambda: reconciled == ["ns/bad", "ns/good"])
            fake_clock.advance(1.0)  # bad's first backoff
            await eventually(lambda: reconciled == ["ns/bad", "ns/good", "ns/bad"])
            queue.add("ns/good")
            await eventually(lambda: reconciled[-1] == "ns/good")
            tg.cancel_scope.cancel()
    errors = [entry for entry in logs if entry["log_level"] == "error"]
    assert len(errors) == 2
    assert errors[0]["key"] == "ns/bad" and errors[0]["controller"] == "c"
    assert errors[0]["exc_info"] is True
    assert [entry["requeues"] for entry in errors] == [0, 1]
    assert context_seen[0] == {"controller": "c", "key": "ns/bad"}
    assert context_seen[1] == {"controller": "c", "key": "ns/good"}
    assert structlog.contextvars.get_contextvars() == {}


async def test_workers_start_only_after_every_source_synced(eventually: Eventually) -> None:
    reconciled: list[str] = []

    async def reconcile(key: str) -> None:
        reconciled.append(key)

    pods, jobs = FakeSource("pods"), FakeSource("jobs")
    controller = Controller("c", reconcile, workers=4, sources=[pods, jobs])
    controller.queue.add("ns/a")  # enqueued by a handler during the initial list
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        await anyio.wait_all_tasks_blocked()
        assert reconciled == []
        pods.mark_synced()
        await anyio.wait_all_tasks_blocked()
        assert reconciled == []  # jobs still syncing
        jobs.mark_synced()
        await eventually(lambda: reconciled == ["ns/a"])
        tg.cancel_scope.cancel()


async def test_cache_sync_timeout_is_a_clear_error_and_starts_nothing() -> None:
    reconciled: list[str] = []

    async def reconcile(key: str) -> None:
        reconciled.append(key)

    synced = FakeSource("synced")
    synced.mark_synced()
    controller = Controller("c", reconcile, sources=[synced, FakeSource("stuck-pods")], cache_sync_timeout=0.05)
    controller.queue.add("ns/a")
    with anyio.fail_after(30), pytest.raises(CacheSyncTimeoutError) as caught:
        await controller.run()
    assert str(caught.value) == "controller 'c': caches not synced after 0.05s; waiting for: FakeSource(stuck-pods)"
    assert caught.value.unsynced == ("FakeSource(stuck-pods)",)
    assert reconciled == []
    assert controller.queue.shutting_down


async def test_cancellation_stops_everything_and_leaves_no_task(fake_clock: FakeClock, eventually: Eventually) -> None:
    started: list[str] = []
    cancelled: list[str] = []
    release = anyio.Event()

    async def reconcile(key: str) -> Result:
        started.append(key)
        try:
            await release.wait()  # in-flight until cancelled
        except BaseException:
            cancelled.append(key)
            raise
        return Result()

    tasks_before = asyncio.all_tasks()
    queue = make_queue(fake_clock)
    controller = Controller("c", reconcile, workers=3, queue=queue)
    for key in ("ns/a", "ns/b", "ns/c", "ns/d"):
        queue.add(key)
    queue.add_after("ns/later", 10.0)
    with capture_logs() as logs:
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.run)
            await eventually(lambda: len(started) == 3)
            tg.cancel_scope.cancel()
    assert sorted(cancelled) == sorted(started)
    # Cancellation is not an error: nothing was logged as a failure and no backoff was recorded.
    assert [entry for entry in logs if entry["log_level"] == "error"] == []
    assert [queue.num_requeues(key) for key in started] == [0, 0, 0]
    assert asyncio.all_tasks() == tasks_before
    assert queue.shutting_down
    assert queue.num_processing == 0  # every handed-out key got done() despite the cancellation
    assert queue.num_waiting == 0


async def test_queue_shutdown_lets_workers_finish_queued_keys_and_run_return(eventually: Eventually) -> None:
    reconciled: list[str] = []

    async def reconcile(key: str) -> None:
        reconciled.append(key)
        await anyio.lowlevel.checkpoint()

    controller = Controller("c", reconcile, workers=2)
    for i in range(10):
        controller.queue.add(f"ns/{i}")
    controller.queue.shut_down()
    with anyio.fail_after(30):
        await controller.run()
    assert sorted(reconciled) == sorted(f"ns/{i}" for i in range(10))


async def test_a_key_is_never_reconciled_concurrently(eventually: Eventually) -> None:
    active: set[str] = set()
    overlaps: list[str] = []
    count = 0

    async def reconcile(key: str) -> None:
        nonlocal count
        if key in active:
            overlaps.append(key)
        active.add(key)
        for _ in range(3):
            await anyio.lowlevel.checkpoint()
        active.discard(key)
        count += 1

    controller = Controller("c", reconcile, workers=8)
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        for _ in range(200):
            for i in range(5):
                controller.queue.add(f"ns/{i}")
            await anyio.lowlevel.checkpoint()
        await eventually(lambda: len(controller.queue) == 0 and controller.queue.num_processing == 0)
        tg.cancel_scope.cancel()
    assert overlaps == []
    assert count >= 5


async def test_metrics_after_a_scripted_run(
    fake_clock: FakeClock,
    registry: CollectorRegistry,
    metric_value: Callable[..., float],
    eventually: Eventually,
) -> None:
    metrics = ReconcileMetrics("jobs", registry)
    # Every result series exists at 0 before the first reconcile (dashboards see them immediately).
    for result in ("success", "error", "requeue", "requeue_after"):
        assert metric_value("controller_runtime_reconcile_total", controller="jobs", result=result) == 0
    assert metric_value("controller_runtime_reconcile_errors_total", controller="jobs") == 0
    assert metric_value("controller_runtime_active_workers", controller="jobs") == 0
    assert registry.get_sample_value("controller_runtime_reconcile_panics_total", {"controller": "jobs"}) is None

    # key -> (seconds the reconcile takes on the fake clock, what it returns)
    script: dict[str, tuple[float, Any]] = {
        # Binary-exact durations, so bucket boundaries are not blurred by float rounding on the clock.
        "ns/ok-1": (0.25, None),
        "ns/ok-2": (2**-8, Result()),
        "ns/fails": (1.125, Boom("no")),
        "ns/later": (2**-5, Result(requeue_after=60.0)),
        "ns/again": (2**-5, Result(requeue=True)),
    }
    hold = anyio.Event()
    done: list[str] = []

    async def reconcile(key: str) -> Any:
        if key == "ns/hold":
            await hold.wait()
            done.append(key)
            return None
        seconds, outcome = script[key]
        fake_clock.advance(seconds)
        done.append(key)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    queue = RateLimitingQueue[str](
        "jobs", clock=fake_clock, rate_limiter=ItemExponentialFailureRateLimiter(100.0, 1000.0)
    )
    controller = Controller("jobs", reconcile, workers=2, queue=queue, metrics=metrics)
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        queue.add("ns/hold")
        await anyio.wait_all_tasks_blocked()
        assert metric_value("controller_runtime_max_concurrent_reconciles", controller="jobs") == 2
        assert metric_value("controller_runtime_active_workers", controller="jobs") == 1
        for key in script:
            queue.add(key)
        await eventually(lambda: len(done) == len(script))
        hold.set()
        await eventually(lambda: len(done) == len(script) + 1 and queue.num_processing == 0)
        tg.cancel_scope.cancel()

    def total(result: str) -> float:
        return metric_value("controller_runtime_reconcile_total", controller="jobs", result=result)

    assert (total("success"), total("error"), total("requeue"), total("requeue_after")) == (3, 1, 1, 1)
    assert metric_value("controller_runtime_reconcile_errors_total", controller="jobs") == 1
    assert metric_value("controller_runtime_active_workers", controller="jobs") == 0
    assert metric_value("controller_runtime_reconcile_time_seconds_count", controller="jobs") == 6
    # Durations: 2**-8, 2**-5 twice, 0.25, 1.125, and "hold", which lasted while the others ran: their sum.
    others = 0.25 + 2**-8 + 1.125 + 2 * 2**-5
    assert metric_value("controller_runtime_reconcile_time_seconds_sum", controller="jobs") == 2 * others
    buckets = {
        le: metric_value("controller_runtime_reconcile_time_seconds_bucket", controller="jobs", le=le)
        for le in ("0.005", "0.05", "0.25", "0.3", "1.0", "1.25", "1.5", "60.0", "+Inf")
    }
    assert buckets == {"0.005": 1, "0.05": 3, "0.25": 4, "0.3": 4, "1.0": 4, "1.25": 5, "1.5": 6, "60.0": 6, "+Inf": 6}
    # The default queue metrics were not requested here (own queue); the controller's queue is ours to name.
    assert registry.get_sample_value("workqueue_adds_total", {"name": "jobs", "controller": "jobs"}) is None


async def test_default_queue_is_instrumented_in_the_metrics_registry(
    registry: CollectorRegistry, metric_value: Callable[..., float], eventually: Eventually
) -> None:
    reconciled: list[str] = []

    async def reconcile(key: str) -> None:
        reconciled.append(key)

    controller = Controller("jobs", reconcile, metrics=ReconcileMetrics("jobs", registry))
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.queue.add("ns/a")
        controller.queue.add("ns/a")
        await eventually(lambda: reconciled == ["ns/a"] and controller.queue.num_processing == 0)
        tg.cancel_scope.cancel()
    assert metric_value("workqueue_adds_total", name="jobs", controller="jobs") == 1
    assert metric_value("workqueue_work_duration_seconds_count", name="jobs", controller="jobs") == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workers": 0}, "workers must be an integer >= 1"),
        ({"workers": 2.5}, "workers must be an integer >= 1"),
        ({"cache_sync_timeout": 0}, "cache_sync_timeout must be > 0"),
    ],
)
def test_bad_controller_configuration(kwargs: dict, message: str) -> None:
    async def reconcile(key: str) -> None:
        return None

    with pytest.raises(ValueError, match=message):
        Controller("c", reconcile, **kwargs)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_result_rejects_bad_requeue_after(bad: float) -> None:
    with pytest.raises(ValueError, match="requeue_after must be a finite number"):
        Result(requeue_after=bad)


async def test_a_controller_runs_once() -> None:
    async def reconcile(key: str) -> None:
        return None

    controller = Controller("c", reconcile)
    controller.queue.shut_down()
    await controller.run()
    with pytest.raises(RuntimeError, match="already been run"):
        await controller.run()


# -- logging by kind of failure ---------------------------------------------------------------------------------

FAILURE_CASES = {
    # exception: (level, reason, retry_in (backoff 1 s * 2**0, or a longer Retry-After), traceback?)
    "429 honours Retry-After": (
        TooManyRequests(429, "TooManyRequests", "slow down", retry_after=7.0),
        "warning",
        "throttled",
        7.0,
        False,
    ),
    "503": (
        ServiceUnavailable(503, "ServiceUnavailable", "apiserver is shutting down"),
        "warning",
        "server_error",
        1.0,
        False,
    ),
    "504": (ServerTimeout(504, "Timeout", "request did not complete"), "warning", "server_error", 1.0, False),
    "connection reset": (TransportError("connection reset by peer"), "warning", "transport", 1.0, False),
    "409 stale resourceVersion": (
        Conflict(409, "Conflict", "the object has been modified"),
        "warning",
        "conflict",
        1.0,
        False,
    ),
    "404 of a job deleted meanwhile": (
        NotFound(404, "NotFound", 'tfjobs "a" not found'),
        "warning",
        "not_found",
        1.0,
        False,
    ),
    "403 needs a human": (Forbidden(403, "Forbidden", "cannot create pods"), "error", "forbidden", 1.0, False),
    "422 needs a human": (Invalid(422, "Invalid", "metadata.name: too long"), "error", "invalid", 1.0, False),
    "a bug": (Boom("broken"), "error", "unexpected", 1.0, True),
}


@pytest.mark.parametrize(
    ("exc", "level", "reason", "retry_in", "traceback"), list(FAILURE_CASES.values()), ids=list(FAILURE_CASES)
)
async def test_failures_are_logged_by_kind_with_a_traceback_only_for_a_bug(
    exc: Exception,
    level: str,
    reason: str,
    retry_in: float,
    traceback: bool,
    fake_clock: FakeClock,
    registry: CollectorRegistry,
    metric_value: Callable[..., float],
    eventually: Eventually,
) -> None:
    def raise_it() -> None:
        raise exc

    async def reconcile(key: str) -> None:
        raise_it()

    out = io.StringIO()
    logger = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    queue = make_queue(fake_clock)
    controller = Controller("c", reconcile, queue=queue, metrics=ReconcileMetrics("c", registry), logger=logger)
    queue.add("ns/a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        await eventually(lambda: queue.num_waiting == 1)
        tg.cancel_scope.cancel()
    failures = [line for line in out.getvalue().splitlines() if "reconcile failed" in line]
    assert len(failures) == 1, out.getvalue()
    line = orjson.loads(failures[0])
    assert line["level"] == level and line["reason"] == reason and line["key"] == "ns/a"
    assert line["error"] == str(exc) and line["retry_in"] == retry_in
    assert ("exception" in line) is traceback
    assert ("Traceback" in out.getvalue()) is traceback
    assert metric_value("controller_runtime_reconcile_errors_by_reason_total", controller="c", reason=reason) == 1
    assert metric_value("controller_runtime_reconcile_errors_total", controller="c") == 1
    # Every reason's series exists from the start, at 0.
    for other in ERROR_REASONS:
        value = registry.get_sample_value(
            "controller_runtime_reconcile_errors_by_reason_total", {"controller": "c", "reason": other}
        )
        assert value == (1.0 if other == reason else 0.0)
