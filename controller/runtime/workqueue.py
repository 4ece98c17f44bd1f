"""A rate-limited, delaying work queue with client-go semantics, for asyncio (via anyio).

Why: controllers must not miss an event, must not reconcile one object in two workers at once, and must not
hammer the apiserver when reconciles fail. client-go's ``util/workqueue`` is the design every Kubernetes
controller relies on for that; this is the same contract in async Python, one method at a time, with one
deliberate difference (see :meth:`RateLimitingQueue.add_after`). The queue carries keys (immutable,
hashable; for controllers ``"namespace/name"`` strings), never objects.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Hashable
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

import anyio
import anyio.lowlevel

from controller.runtime.clock import Clock, MonotonicClock
from controller.runtime.ratelimit import RateLimiter, default_controller_rate_limiter

if TYPE_CHECKING:
    from controller.runtime.metrics import QueueMetrics

__all__ = ["RateLimitingQueue", "UNFINISHED_WORK_REFRESH_SECONDS"]

T = TypeVar("T", bound=Hashable)

UNFINISHED_WORK_REFRESH_SECONDS = 0.5

# Stale heap entries (superseded or cancelled delayed adds) are dropped lazily; rebuild the heap when they
# outnumber live ones by this much so a key that is re-delayed repeatedly cannot grow it without bound.
_HEAP_COMPACTION_SLACK = 64


class RateLimitingQueue(Generic[T]):
    """client-go's ``RateLimitingInterface`` (queue, delays, rate limiting) for one event loop.

    An item is *pending* (in the dirty set), *processing* (handed to a worker, not yet ``done``), both, or
    neither. All methods but :meth:`get`, :meth:`shut_down_with_drain` and :meth:`run` are synchronous and
    never block. The default rate limiter is client-go's: max(per-item 5 ms * 2**n up to 1000 s, a global
    token bucket of 10 qps, burst 100). Metrics (optional :class:`~controller.runtime.metrics.QueueMetrics`)
    follow client-go: depth +1 whenever an item becomes pending, -1 on ``get``; durations on the queue's clock.
    """

    def __init__(
        self,
        name: str = "",
        rate_limiter: RateLimiter | None = None,
        clock: Clock | None = None,
        metrics: QueueMetrics | None = None,
    ) -> None:
        if metrics is not None and name and metrics.name != name:
            raise ValueError(f"queue name {name!r} differs from its metrics name {metrics.name!r}")
        self.name = name or (metrics.name if metrics is not None else "")
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self.rate_limiter: RateLimiter = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter(self.clock)
        )
        self.metrics = metrics

        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()

        # Delayed adds: one live entry per item in _waiting; the heap may also hold stale entries, recognised
        # by a (ready_at, seq) that no longer matches _waiting. seq makes heap tuples unique, so items are never
        # compared with each other.
        self._waiting: dict[T, tuple[float, int]] = {}
        self._waiting_heap: list[tuple[float, int, T]] = []
        self._seq = itertools.count()

        # anyio primitives are created only inside async methods, so the queue can be built outside a loop.
        self._getters: deque[anyio.Event] = deque()
        self._drain_waiters: list[anyio.Event] = []
        self._timer_wakeup: anyio.Event | None = None
        self._timer_deadline: float | None = None
        self._running = False

        self._shutting_down = False
        self._drain = False

    # ----------------------------------------------------------------------------------------------- core

    def add(self, item: T) -> None:
        """Make ``item`` pending: a no-op if it already is (dedupe) or after shutdown. An item being processed
        is not queued now but by its :meth:`done`, so it never runs in two workers at once. Supersedes a
        delayed add of the same item."""
        if self._shutting_down:
            return
        # An immediate add supersedes a pending delayed add of the same item (no double run).
        self._waiting.pop(item, None)
        if item in self._dirty:
            return
        self._dirty.add(item)
        if self.metrics is not None:
            self.metrics.add(item, self.clock.now())
        if item in self._processing:
            return  # done() queues it again
        self._queue.append(item)
        self._wake_one_getter()

    async def get(self) -> tuple[T, Literal[False]] | tuple[None, Literal[True]]:
        """Wait for the oldest queued item (FIFO) and return ``(item, False)``, moving it to processing; after
        shutdown, once nothing is queued, ``(None, True)``. Cancellation-safe: a cancelled ``get`` takes no
        item and passes its wake-up on. Always a scheduling checkpoint. Every item got needs :meth:`done`."""
        await anyio.lowlevel.checkpoint()
        while True:
            if self._queue:
                # No await between this check and the return: a taken item always reaches the caller.
                item = self._queue.popleft()
                self._processing.add(item)
                self._dirty.discard(item)
                if self.metrics is not None:
                    self.metrics.get(item, self.clock.now())
                return item, False
            if self._shutting_down:
                return None, True
            wakeup = anyio.Event()
            self._getters.append(wakeup)
            try:
                await wakeup.wait()
            except BaseException:
                if wakeup.is_set():
                    # We were chosen for an item but are leaving; hand the wake-up to another waiter.
                    if self._queue:
                        self._wake_one_getter()
                else:
                    self._getters.remove(wakeup)
                raise

    def done(self, item: T) -> None:
        """End the processing of ``item`` (call it in a ``finally`` after every :meth:`get`); if it was added
        meanwhile it is queued again, at the back. A no-op for an item that is not processing."""
        if item not in self._processing:
            return
        if self.metrics is not None:
            self.metrics.done(item, self.clock.now())
        self._processing.discard(item)
        if item in self._dirty:
            self._queue.append(item)
            self._wake_one_getter()
        if not self._processing:
            self._notify_drain_waiters()

    def __len__(self) -> int:
        """Queued items only (not processing, not delayed)."""
        return len(self._queue)

    @property
    def num_processing(self) -> int:
        """Items handed out by ``get`` and not yet ``done``."""
        return len(self._processing)

    @property
    def num_waiting(self) -> int:
        """Items waiting for a delayed add to become due."""
        return len(self._waiting)

    # ------------------------------------------------------------------------------------------- shutdown

    @property
    def shutting_down(self) -> bool:
        """True once :meth:`shut_down` or :meth:`shut_down_with_drain` was called; it stays true."""
        return self._shutting_down

    def shut_down(self) -> None:
        """Stop accepting adds (every add becomes a no-op) and drop waiting delayed adds; :meth:`get` still
        hands out what is queued, then reports shutdown. Idempotent; ends a :meth:`shut_down_with_drain` wait."""
        self._drain = False
        self._begin_shutdown()
        self._notify_drain_waiters()

    async def shut_down_with_drain(self) -> None:
        """As :meth:`shut_down`, then wait until no item is processing (every handed-out item got
        :meth:`done`). Like client-go only the processing set is waited for, not items still queued; a
        later :meth:`shut_down` ends the wait early."""
        self._drain = True
        self._begin_shutdown()
        await anyio.lowlevel.checkpoint()
        while self._processing and self._drain:
            changed = anyio.Event()
            self._drain_waiters.append(changed)
            try:
                await changed.wait()
            finally:
                if changed in self._drain_waiters:
                    self._drain_waiters.remove(changed)

    def _begin_shutdown(self) -> None:
        self._shutting_down = True
        self._waiting.clear()
        self._waiting_heap.clear()
        getters, self._getters = self._getters, deque()
        for wakeup in getters:
            wakeup.set()
        self._wake_timer()

    def _notify_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for changed in waiters:
            changed.set()

    # ---------------------------------------------------------------------------------------------- delays

    def add_after(self, item: T, delay: float) -> None:
        """Make ``item`` pending ``delay`` seconds from now on the queue's clock (``delay <= 0``: :meth:`add`);
        needs :meth:`run` running; ValueError for NaN. One entry per item, the earliest ready time wins.

        Unlike client-go, on purpose (controller-runtime's priority queue): an item is ready now *or* at T,
        never both, so ``add_after(x, 10)`` then ``add(x)`` runs ``x`` once, not now and again 10 s later; a
        delayed add of an item already pending is absorbed (ready now is earlier). Each accepted call counts
        as a retry in the metrics, zero delays included (as client-go).
        """
        if math.isnan(delay):
            raise ValueError(f"add_after delay must be a number of seconds, got {delay!r}")
        if self._shutting_down:
            return
        if self.metrics is not None:
            self.metrics.retry()
        if delay <= 0:
            self.add(item)
            return
        if item in self._dirty:
            return  # already ready now, which is earlier than any delay
        ready_at = self.clock.now() + delay
        current = self._waiting.get(item)
        if current is not None and current[0] <= ready_at:
            return  # the earlier ready time wins
        seq = next(self._seq)
        self._waiting[item] = (ready_at, seq)
        heapq.heappush(self._waiting_heap, (ready_at, seq, item))
        if len(self._waiting_heap) > 2 * len(self._waiting) + _HEAP_COMPACTION_SLACK:
            self._waiting_heap = [(at, s, it) for it, (at, s) in self._waiting.items()]
            heapq.heapify(self._waiting_heap)
        if self._timer_deadline is None or ready_at < self._timer_deadline:
            self._wake_timer()

    def _wake_timer(self) -> None:
        if self._timer_wakeup is not None:
            self._timer_wakeup.set()

    def _queue_due(self, now: float) -> None:
        heap = self._waiting_heap
        while heap and heap[0][0] <= now:
            ready_at, seq, item = heapq.heappop(heap)
            if self._waiting.get(item) == (ready_at, seq):
                del self._waiting[item]
                self.add(item)

    def _next_due(self) -> float | None:
        heap = self._waiting_heap
        while heap:
            ready_at, seq, item = heap[0]
            if self._waiting.get(item) == (ready_at, seq):
                return ready_at
            heapq.heappop(heap)  # stale
        return None

    async def run(self) -> None:
        """Move due delayed adds into the queue and refresh the unfinished-work metrics (every 500 ms) until the
        queue is shut down or the task cancelled. Run it once per queue, in the owner's task group (a second
        concurrent run is a RuntimeError); entries that fell due meanwhile are queued as soon as it runs."""
        if self._running:
            raise RuntimeError(f"RateLimitingQueue({self.name!r}).run() is already running")
        self._running = True
        metrics = self.metrics
        next_refresh = self.clock.now() + UNFINISHED_WORK_REFRESH_SECONDS if metrics is not None else None
        try:
            while not self._shutting_down:
                now = self.clock.now()
                self._queue_due(now)
                if metrics is not None and next_refresh is not None and now >= next_refresh:
                    metrics.update_unfinished_work(now)
                    next_refresh = now + UNFINISHED_WORK_REFRESH_SECONDS
                deadlines = [d for d in (self._next_due(), next_refresh) if d is not None]
                self._timer_deadline = min(deadlines) if deadlines else None
                self._timer_wakeup = wakeup = anyio.Event()
                await self._sleep_until_or_woken(self._timer_deadline, wakeup)
        finally:
            self._running = False
            self._timer_wakeup = None
            self._timer_deadline = None

    async def _sleep_until_or_woken(self, deadline: float | None, wakeup: anyio.Event) -> None:
        if deadline is None:
            await wakeup.wait()
            return
        async with anyio.create_task_group() as timer_group:

            async def sleep_then_stop() -> None:
                await self.clock.sleep_until(deadline)
                timer_group.cancel_scope.cancel()

            timer_group.start_soon(sleep_then_stop)
            await wakeup.wait()
            timer_group.cancel_scope.cancel()

    # -------------------------------------------------------------------------------------- rate limiting

    def add_rate_limited(self, item: T, at_least: float = 0.0) -> float:
        """Re-add ``item`` after the rate limiter's delay (one more failure recorded), or after ``at_least``
        seconds if that is longer (a server's Retry-After). Returns the delay; 0 when shutting down."""
        if self._shutting_down:
            return 0.0  # do not record a failure for an add that would be dropped
        delay = max(self.rate_limiter.when(item), at_least)
        self.add_after(item, delay)
        return delay

    def forget(self, item: T) -> None:
        """Clear ``item``'s failure history (after a success). It stays queued if it is, and :meth:`done` is
        still required."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """Failures the rate limiter has recorded for ``item`` since it was last forgotten."""
        return self.rate_limiter.num_requeues(item)

    # ------------------------------------------------------------------------------------------- helpers

    def _wake_one_getter(self) -> None:
        if self._getters:
            self._getters.popleft().set()

    def __repr__(self) -> str:
        return (
            f"RateLimitingQueue(name={self.name!r}, queued={len(self._queue)}, processing={len(self._processing)},"
            f" waiting={len(self._waiting)}, shutting_down={self._shutting_down})"
        )
