"""Work-queue semantics (client-go util/workqueue, plus the no-double-run rule for delayed adds).

Negative assertions ("x is not handed out", "nothing more happens") are made after
``anyio.wait_all_tasks_blocked()``, i.e. once every other task is provably idle, never after a sleep.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from prometheus_client import CollectorRegistry

from controller.runtime.clock import FakeClock, MonotonicClock
from controller.runtime.metrics import QueueMetrics
from controller.runtime.ratelimit import ItemExponentialFailureRateLimiter
from controller.runtime.workqueue import RateLimitingQueue

Eventually = Callable[..., Awaitable[None]]

# --------------------------------------------------------------------------------------- core, as a table

# Each step: ("add", x) | ("get", expected) | ("done", x) | ("len", n) | ("processing", n) | ("shutdown",)
# | ("get_shutdown",). A "get" step only appears where an item must be available without waiting.
CORE_CASES = {
    "dedupe while queued": [
        ("add", "a"),
        ("add", "a"),
        ("add", "a"),
        ("len", 1),
        ("get", "a"),
        ("len", 0),
        ("done", "a"),
        ("len", 0),
    ],
    "fifo order": [
        ("add", "a"),
        ("add", "b"),
        ("add", "c"),
        ("add", "a"),
        ("get", "a"),
        ("get", "b"),
        ("get", "c"),
        ("processing", 3),
    ],
    "re-add while processing runs once more after done": [
        ("add", "a"),
        ("get", "a"),
        ("add", "a"),
        ("add", "a"),
        ("len", 0),
        ("processing", 1),
        ("done", "a"),
        ("len", 1),
        ("get", "a"),
        ("done", "a"),
        ("len", 0),
        ("processing", 0),
    ],
    "processing item is not handed out again before done": [
        ("add", "a"),
        ("get", "a"),
        ("add", "a"),
        ("add", "b"),
        ("get", "b"),
        ("len", 0),
        ("done", "a"),
        ("get", "a"),
    ],
    "re-queued item goes to the back": [
        ("add", "a"),
        ("get", "a"),
        ("add", "a"),
        ("add", "b"),
        ("done", "a"),
        ("get", "b"),
        ("get", "a"),
    ],
    "done of an unknown or finished item is a no-op": [
        ("done", "zzz"),
        ("add", "a"),
        ("get", "a"),
        ("done", "a"),
        ("done", "a"),
        ("len", 0),
        ("processing", 0),
        ("add", "a"),
        ("done", "a"),
        ("len", 1),
        ("get", "a"),
    ],
    "shutdown hands out queued items, then reports shutdown": [
        ("add", "a"),
        ("add", "b"),
        ("shutdown",),
        ("add", "c"),
        ("len", 2),
        ("get", "a"),
        ("get", "b"),
        ("get_shutdown",),
        ("get_shutdown",),
    ],
    "after shutdown done still re-queues an item dirtied while processing": [
        ("add", "a"),
        ("get", "a"),
        ("add", "a"),
        ("shutdown",),
        ("add", "b"),
        ("done", "a"),
        ("get", "a"),
        ("done", "a"),
        ("get_shutdown",),
    ],
}


@pytest.mark.parametrize("steps", list(CORE_CASES.values()), ids=list(CORE_CASES))
async def test_core_semantics(steps: list[tuple]) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    for index, step in enumerate(steps):
        op, *args = step
        where = f"step {index} {step}"
        if op == "add":
            queue.add(args[0])
        elif op == "done":
            queue.done(args[0])
        elif op == "get":
            with anyio.fail_after(30):
                assert await queue.get() == (args[0], False), where
        elif op == "get_shutdown":
            with anyio.fail_after(30):
                assert await queue.get() == (None, True), where
        elif op == "len":
            assert len(queue) == args[0], where
        elif op == "processing":
            assert queue.num_processing == args[0], where
        elif op == "shutdown":
            queue.shut_down()
            assert queue.shutting_down
        else:  # pragma: no cover - a typo in the table
            raise AssertionError(f"unknown op {op}")


async def test_blocked_getter_is_woken_by_add_and_never_gets_a_processing_item() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    got: list[str | None] = []

    async def getter() -> None:
        item, _ = await queue.get()
        got.append(item)

    queue.add("a")
    assert await queue.get() == ("a", False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(getter)
        queue.add("a")  # a is processing: must not reach the waiting getter
        await anyio.wait_all_tasks_blocked()
        assert got == []
        queue.done("a")  # now a is re-queued and the getter takes it
    assert got == ["a"]


async def test_blocked_getters_are_released_by_shutdown() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    results: list[tuple] = []

    async def getter() -> None:
        results.append(await queue.get())

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(getter)
        await anyio.wait_all_tasks_blocked()
        queue.shut_down()
    assert results == [(None, True)] * 3


# ------------------------------------------------------------------------------------ get cancellation


async def test_cancelled_waiting_get_takes_no_item() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.get)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    queue.add("a")
    assert len(queue) == 1
    assert await queue.get() == ("a", False)


async def test_get_cancelled_at_entry_takes_no_item() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    queue.add("a")
    with anyio.CancelScope() as scope:
        scope.cancel()
        await queue.get()
    assert scope.cancelled_caught
    assert len(queue) == 1 and queue.num_processing == 0


async def test_wakeup_of_a_cancelled_getter_is_passed_on() -> None:
    """The getter chosen for an item is cancelled before it runs: the next waiter must get the item.

    Plain asyncio cancellation (``task.cancel()``, as ``asyncio.timeout`` does) can land after the wake-up;
    anyio's own cancel scopes defer delivery in that case, so the race is provoked with asyncio directly.
    """
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    first = asyncio.ensure_future(queue.get())
    await anyio.wait_all_tasks_blocked()
    second = asyncio.ensure_future(queue.get())
    await anyio.wait_all_tasks_blocked()
    queue.add("a")  # wakes `first` (the oldest waiter) ...
    first.cancel()  # ... which is cancelled before it can take the item
    with pytest.raises(asyncio.CancelledError):
        await first
    with anyio.fail_after(30):
        assert await second == ("a", False)
    assert queue.num_processing == 1 and len(queue) == 0


# -------------------------------------------------------------------------------------------- delays


@asynccontextmanager
async def running(queue: RateLimitingQueue) -> AsyncIterator[RateLimitingQueue]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.run)
        await anyio.wait_all_tasks_blocked()  # the timer loop has started and read the clock
        try:
            yield queue
        finally:
            tg.cancel_scope.cancel()


async def assert_nothing_due(queue: RateLimitingQueue, clock: FakeClock) -> None:
    """Assert that no delayed add is due at the clock's current time, once the timer loop has caught up.

    A sentinel is delayed until "now + tiny" and the clock advanced to it. The timer loop queues due entries in
    ready-time order, so anything wrongly due at or before "now" would be handed out before the sentinel.
    """
    sentinel = "~sentinel~"
    queue.add_after(sentinel, 2**-20)
    clock.advance(2**-20)
    with anyio.fail_after(30):
        item, _ = await queue.get()
    assert item == sentinel, f"{item!r} became ready although nothing was due"
    queue.done(sentinel)
    assert len(queue) == 0


async def test_add_after_becomes_ready_at_its_time(fake_clock: FakeClock, eventually: Eventually) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with running(queue):
        queue.add_after("a", 1.0)
        assert (len(queue), queue.num_waiting) == (0, 1)
        fake_clock.advance(0.5)
        await anyio.wait_all_tasks_blocked()
        assert len(queue) == 0
        fake_clock.advance(0.5)
        await eventually(lambda: len(queue) == 1)
        assert queue.num_waiting == 0
        assert await queue.get() == ("a", False)


async def test_add_after_earliest_ready_time_wins(fake_clock: FakeClock, eventually: Eventually) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with running(queue):
        queue.add_after("early-later", 2.0)
        queue.add_after("early-later", 10.0)  # must not postpone
        queue.add_after("late-earlier", 10.0)
        queue.add_after("late-earlier", 2.0)  # must advance
        assert queue.num_waiting == 2
        fake_clock.advance(2.0)
        await eventually(lambda: len(queue) == 2)
        assert {(await queue.get())[0], (await queue.get())[0]} == {"early-later", "late-earlier"}
        queue.done("early-later")
        queue.done("late-earlier")
        # Nothing is left waiting: the superseded 10 s entries do not fire.
        assert queue.num_waiting == 0
        fake_clock.advance(10.0)
        await assert_nothing_due(queue, fake_clock)
        assert len(queue) == 0


async def test_immediate_add_supersedes_pending_delayed_add(fake_clock: FakeClock, eventually: Eventually) -> None:
    """The double-run trap: add_after(x, 10) then add(x) must process x once, not now and again at +10 s."""
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with running(queue):
        queue.add_after("x", 10.0)
        queue.add("x")
        assert (len(queue), queue.num_waiting) == (1, 0)
        assert await queue.get() == ("x", False)
        queue.done("x")
        fake_clock.advance(10.0)
        await assert_nothing_due(queue, fake_clock)
        assert len(queue) == 0 and queue.num_processing == 0


async def test_delayed_add_of_pending_item_is_absorbed(fake_clock: FakeClock, eventually: Eventually) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with running(queue):
        queue.add("x")
        queue.add_after("x", 5.0)  # x is ready now, which is earlier
        assert queue.num_waiting == 0
        assert await queue.get() == ("x", False)
        queue.done("x")
        fake_clock.advance(5.0)
        await assert_nothing_due(queue, fake_clock)
        assert len(queue) == 0


async def test_delayed_add_while_processing_then_add_runs_once(fake_clock: FakeClock, eventually: Eventually) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with running(queue):
        queue.add("x")
        assert await queue.get() == ("x", False)
        queue.add_after("x", 5.0)  # e.g. a reconcile's requeue_after, while it is still processing
        assert queue.num_waiting == 1
        queue.add("x")  # an event for x arrives: supersedes the delayed add
        assert queue.num_waiting == 0
        queue.done("x")
        assert await queue.get() == ("x", False)
        queue.done("x")
        fake_clock.advance(5.0)
        await assert_nothing_due(queue, fake_clock)
        assert len(queue) == 0


async def test_delayed_add_while_processing_fires_after_done(fake_clock: FakeClock, eventually: Eventually) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with running(queue):
        queue.add("x")
        assert await queue.get() == ("x", False)
        queue.add_after("x", 1.0)
        queue.done("x")
        assert len(queue) == 0
        fake_clock.advance(1.0)
        await eventually(lambda: len(queue) == 1)
        assert await queue.get() == ("x", False)


async def test_non_positive_delay_adds_immediately() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    queue.add_after("a", 0)
    queue.add_after("b", -3.0)
    assert len(queue) == 2 and queue.num_waiting == 0


async def test_nan_delay_is_rejected() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    with pytest.raises(ValueError, match="delay must be a number"):
        queue.add_after("a", float("nan"))


async def test_due_entries_are_queued_in_ready_order(fake_clock: FakeClock, eventually: Eventually) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with running(queue):
        for name, delay in [("c", 3.0), ("a", 1.0), ("b", 2.0)]:
            queue.add_after(name, delay)
        fake_clock.advance(5.0)
        await eventually(lambda: len(queue) == 3)
        assert [(await queue.get())[0] for _ in range(3)] == ["a", "b", "c"]


async def test_entries_due_before_run_starts_are_queued_when_it_runs(
    fake_clock: FakeClock, eventually: Eventually
) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    queue.add_after("a", 1.0)
    fake_clock.advance(2.0)
    async with running(queue):
        await eventually(lambda: len(queue) == 1)


async def test_add_after_on_real_clock() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=MonotonicClock())
    async with running(queue):
        started = time.monotonic()
        queue.add_after("a", 0.05)
        with anyio.fail_after(30):
            assert await queue.get() == ("a", False)
        assert time.monotonic() - started >= 0.05


async def test_repeated_redelays_do_not_grow_the_heap() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=FakeClock())
    for i in range(10_000):
        queue.add_after("x", 1000.0 - i * 0.01)  # each one earlier: a new heap entry every time
        queue.add_after(f"other-{i % 10}", 500.0)
    assert queue.num_waiting == 11
    assert len(queue._waiting_heap) <= 2 * 11 + 64 + 1


async def test_run_twice_is_refused_and_run_returns_on_shutdown(fake_clock: FakeClock) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.run)
        await anyio.wait_all_tasks_blocked()
        with pytest.raises(RuntimeError, match="already running"):
            await queue.run()
        queue.shut_down()  # run() returns on its own; the task group can exit without cancelling
    with anyio.fail_after(30):
        await queue.run()  # returns at once: already shut down


async def test_shutdown_drops_delayed_adds_and_ignores_new_ones(fake_clock: FakeClock) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    queue.add_after("a", 1.0)
    queue.shut_down()
    queue.add_after("b", 1.0)
    queue.add_rate_limited("c")
    assert queue.num_waiting == 0 and len(queue) == 0
    assert queue.num_requeues("c") == 0  # no failure recorded for a dropped add
    assert await queue.get() == (None, True)


# ----------------------------------------------------------------------------------------- rate limit


async def test_add_rate_limited_backs_off_per_item_and_forget_resets(
    fake_clock: FakeClock, eventually: Eventually
) -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=100.0)
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", rate_limiter=limiter, clock=fake_clock)
    async with running(queue):
        for expected_delay in (1.0, 2.0, 4.0):
            queue.add_rate_limited("x")
            fake_clock.advance(expected_delay - 0.5)
            await anyio.wait_all_tasks_blocked()
            assert len(queue) == 0, f"ready before its {expected_delay}s backoff"
            fake_clock.advance(0.5)
            await eventually(lambda: len(queue) == 1)
            assert await queue.get() == ("x", False)
            queue.done("x")
        assert queue.num_requeues("x") == 3
        queue.forget("x")
        assert queue.num_requeues("x") == 0
        assert len(queue) == 0 and queue.num_processing == 0  # forget touches no queue state


def test_default_limiter_is_client_go_default(fake_clock: FakeClock) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t", clock=fake_clock)
    assert queue.rate_limiter.when("probe") == 0.005
    assert queue.rate_limiter.when("probe") == 0.01


# ------------------------------------------------------------------------------------------ shutdown


async def test_shut_down_with_drain_waits_for_processing_items() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    queue.add("a")
    queue.add("b")
    assert await queue.get() == ("a", False)
    drained = anyio.Event()

    async def drain() -> None:
        await queue.shut_down_with_drain()
        drained.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain)
        await anyio.wait_all_tasks_blocked()
        assert queue.shutting_down and not drained.is_set()
        # Still-queued items keep being handed out while draining.
        assert await queue.get() == ("b", False)
        queue.done("a")
        await anyio.wait_all_tasks_blocked()
        assert not drained.is_set()  # b is still processing
        queue.done("b")
    assert drained.is_set()
    assert await queue.get() == (None, True)


async def test_shut_down_aborts_a_drain_wait() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    queue.add("a")
    await queue.get()
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.shut_down_with_drain)
        await anyio.wait_all_tasks_blocked()
        queue.shut_down()  # the drain wait ends although "a" is still processing
    assert queue.num_processing == 1


async def test_shut_down_with_drain_returns_at_once_when_idle() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    queue.add("queued-but-not-taken")
    with anyio.fail_after(30):
        await queue.shut_down_with_drain()  # watches only the processing set, like client-go
    assert len(queue) == 1


async def test_shut_down_without_drain_does_not_wait() -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    queue.add("a")
    await queue.get()
    queue.shut_down()
    assert queue.shutting_down and queue.num_processing == 1
    queue.done("a")
    assert await queue.get() == (None, True)


# --------------------------------------------------------------------------------------- concurrency


async def test_eight_workers_ten_thousand_adds_of_a_hundred_keys(eventually: Eventually) -> None:
    """No key is ever processed by two workers at once, and every add is followed by a processing of its key
    that starts after the add."""
    queue: RateLimitingQueue[str] = RateLimitingQueue("t")
    keys = [f"ns/key-{i}" for i in range(100)]
    rng = random.Random(1234)
    in_progress: set[str] = set()
    violations: list[str] = []
    last_add_tick: dict[str, int] = {}
    last_start_tick: dict[str, int] = {}
    processed = 0
    tick = 0
    max_parallel = 0

    async def worker() -> None:
        nonlocal processed, tick, max_parallel
        local_rng = random.Random(rng.random())
        while True:
            key, shutdown = await queue.get()
            if shutdown:
                return
            try:
                if key in in_progress:
                    violations.append(key)
                in_progress.add(key)
                max_parallel = max(max_parallel, len(in_progress))
                tick += 1
                last_start_tick[key] = tick
                for _ in range(local_rng.randrange(4)):  # interleave with the producer and other workers
                    await anyio.lowlevel.checkpoint()
                in_progress.discard(key)
                processed += 1
            finally:
                queue.done(key)

    async def producer() -> None:
        nonlocal tick
        for _ in range(10_000):
            key = rng.choice(keys)
            tick += 1
            last_add_tick[key] = tick
            queue.add(key)
            if rng.random() < 0.02:  # bursts of ~50 adds, so duplicates of pending keys occur
                await anyio.lowlevel.checkpoint()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(worker)
            await producer()
            await eventually(lambda: not (len(queue) or queue.num_processing))
            await queue.shut_down_with_drain()

    assert violations == []
    assert set(last_add_tick) == set(keys)
    late = [key for key, added in last_add_tick.items() if last_start_tick.get(key, -1) < added]
    assert late == [], f"keys whose last add was never followed by a processing: {late[:5]}"
    # Dedupe must have happened (10,000 adds of 100 keys with checkpoints between batches).
    assert 100 <= processed < 10_000
    assert max_parallel > 1  # the workers really did overlap


# ---------------------------------------------------------------------------------------------- metrics


async def test_queue_metrics_scripted(
    fake_clock: FakeClock, registry: CollectorRegistry, eventually: Eventually, metric_value: Callable[..., float]
) -> None:
    queue: RateLimitingQueue[str] = RateLimitingQueue(
        "jobs",
        clock=fake_clock,
        metrics=QueueMetrics("jobs", registry),
        rate_limiter=ItemExponentialFailureRateLimiter(1.0, 10.0),
    )
    labels = {"name": "jobs", "controller": "jobs"}

    def value(metric: str, **extra: str) -> float:
        return metric_value(metric, **labels, **extra)

    assert value("workqueue_depth", priority="") == 0
    assert value("workqueue_adds_total") == 0

    async with running(queue):
        queue.add("a")
        queue.add("a")  # duplicate: not counted
        queue.add("b")
        assert value("workqueue_adds_total") == 2
        assert value("workqueue_depth", priority="") == 2

        fake_clock.advance(0.25)
        assert await queue.get() == ("a", False)  # waited 0.25 s
        assert value("workqueue_depth", priority="") == 1
        queue.add("a")  # dirty while processing: counts in depth although not in len()
        assert len(queue) == 1 and value("workqueue_depth", priority="") == 2
        assert value("workqueue_adds_total") == 3

        # The refresh loop ticks every 0.5 s of queue time: at +0.5 s "a" has been processing 0.25 s.
        fake_clock.advance(0.25)
        await eventually(lambda: value("workqueue_unfinished_work_seconds") == 0.25)
        assert value("workqueue_longest_running_processor_seconds") == 0.25

        assert await queue.get() == ("b", False)  # b waited 0.5 s
        fake_clock.advance(0.5)
        # a: 0.75 s, b: 0.5 s
        await eventually(lambda: value("workqueue_unfinished_work_seconds") == 1.25)
        assert value("workqueue_longest_running_processor_seconds") == 0.75

        queue.done("a")  # work 0.75 s; a is re-queued (it was dirty)
        queue.done("b")  # work 0.5 s
        fake_clock.advance(0.5)
        await eventually(lambda: value("workqueue_unfinished_work_seconds") == 0)
        assert value("workqueue_longest_running_processor_seconds") == 0

        queue.add_after("c", 0)
        queue.add_rate_limited("d")
        assert value("workqueue_retries_total") == 2

    assert value("workqueue_queue_duration_seconds_count") == 2
    assert value("workqueue_queue_duration_seconds_sum") == 0.75
    assert value("workqueue_queue_duration_seconds_bucket", le="0.1") == 0
    assert value("workqueue_queue_duration_seconds_bucket", le="1.0") == 2
    assert value("workqueue_work_duration_seconds_count") == 2
    assert value("workqueue_work_duration_seconds_sum") == 1.25
    assert value("workqueue_work_duration_seconds_bucket", le="0.1") == 0
    assert value("workqueue_work_duration_seconds_bucket", le="1.0") == 2
    assert value("workqueue_depth", priority="") == 2  # a (re-queued) and c
    # Buckets are controller-runtime's ExponentialBuckets(1e-8, 10, 12).
    for le in ("1e-08", "1e-07", "0.001", "0.01", "10.0", "100.0", "1000.0", "+Inf"):
        assert registry.get_sample_value("workqueue_work_duration_seconds_bucket", {**labels, "le": le}) is not None


async def test_queues_share_families_in_one_registry(
    registry: CollectorRegistry, metric_value: Callable[..., float]
) -> None:
    first: RateLimitingQueue[str] = RateLimitingQueue("one", metrics=QueueMetrics("one", registry))
    second: RateLimitingQueue[str] = RateLimitingQueue("two", metrics=QueueMetrics("two", registry))
    first.add("x")
    second.add("x")
    second.add("y")
    assert metric_value("workqueue_adds_total", name="one", controller="one") == 1
    assert metric_value("workqueue_adds_total", name="two", controller="two") == 2
    # A queue rebuilt under the same name (e.g. after re-acquiring leadership) keeps counters, resets gauges.
    again: RateLimitingQueue[str] = RateLimitingQueue("two", metrics=QueueMetrics("two", registry))
    assert metric_value("workqueue_depth", name="two", controller="two", priority="") == 0
    again.add("z")
    assert metric_value("workqueue_adds_total", name="two", controller="two") == 3


def test_queue_name_must_match_metrics_name(registry: CollectorRegistry) -> None:
    with pytest.raises(ValueError, match="differs from its metrics name"):
        RateLimitingQueue("a", metrics=QueueMetrics("b", registry))
    assert RateLimitingQueue(metrics=QueueMetrics("b", registry)).name == "b"
