"""Reconcile runner: N workers pulling keys from a rate-limited work queue (controller-runtime's contract).

Why: every controller needs the same loop around its reconcile function — wait for the caches, take a key,
reconcile, decide whether and when to retry, never let one bad object kill a worker, and stop cleanly.
Getting it subtly wrong (retrying in a hot loop, losing a key on cancellation, starting before the cache is
complete and acting on a partial view) is how controllers misbehave, so it lives here once. A reconciler is
``async def reconcile(key: str) -> Result | None``: idempotent, reading what it needs afresh (from informer
caches) each time; the key is all it gets.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import anyio
import structlog
import structlog.contextvars

from controller.runtime.errors import EXPECTED_ERROR_REASONS, ApiError, error_reason
from controller.runtime.metrics import QueueMetrics, ReconcileMetrics, ReconcileOutcome
from controller.runtime.workqueue import RateLimitingQueue

__all__ = ["Result", "Reconciler", "Syncable", "Controller", "CacheSyncTimeoutError"]


@dataclass(frozen=True)
class Result:
    """What a reconcile asks for: nothing more (default), a backoff retry, or a retry after a fixed delay."""

    requeue: bool = False
    requeue_after: float | None = None  # seconds; None or 0 means "not set"

    def __post_init__(self) -> None:
        if self.requeue_after is not None and (
            math.isnan(self.requeue_after) or math.isinf(self.requeue_after) or self.requeue_after < 0
        ):
            raise ValueError(
                f"Result.requeue_after must be a finite number of seconds >= 0, got {self.requeue_after!r}"
            )


Reconciler = Callable[[str], Awaitable[Result | None]]


@runtime_checkable
class Syncable(Protocol):
    """Something whose initial state must be complete before workers start (an informer)."""

    def has_synced(self) -> bool:
        """True once the initial state is complete; it stays true."""
        ...

    async def wait_for_sync(self) -> None:
        """Return once :meth:`has_synced` is true."""
        ...


class CacheSyncTimeoutError(TimeoutError):
    """The sources of a controller did not sync within ``cache_sync_timeout``."""

    def __init__(self, controller: str, timeout: float, unsynced: Sequence[str]) -> None:
        self.controller = controller
        self.timeout = timeout
        self.unsynced = tuple(unsynced)
        super().__init__(
            f"controller {controller!r}: caches not synced after {timeout:g}s; waiting for: {', '.join(self.unsynced)}"
        )


class Controller:
    """Runs ``reconcile`` for the keys in :attr:`queue` with ``workers`` concurrent workers.

    Per key, exactly one outcome (controller-runtime's ``reconcileHandler``); ``done(key)`` always follows:

    ============================================  ================================================  =============
    reconcile                                     queue action                                      result label
    ============================================  ================================================  =============
    raises an ``Exception``                       ``add_rate_limited`` (per-item backoff); logged    ``error``
    returns ``Result(requeue_after=d)``, ``d>0``  ``forget`` + ``add_after(key, d)``                 ``requeue_after``
    returns ``Result(requeue=True)``              ``add_rate_limited``                               ``requeue``
    returns ``None`` or ``Result()``              ``forget``                                         ``success``
    ============================================  ================================================  =============

    ``requeue_after`` takes precedence over ``requeue``; a return value that is neither ``None`` nor a
    :class:`Result` is handled (and logged) as an error; a 429's ``Retry-After`` lengthens the back-off when
    longer. An exception never ends a worker; cancellation is never swallowed.
    """

    queue: RateLimitingQueue[str]

    def __init__(
        self,
        name: str,
        reconcile: Reconciler,
        *,
        workers: int = 1,
        queue: RateLimitingQueue[str] | None = None,
        sources: Sequence[Syncable] = (),
        metrics: ReconcileMetrics | None = None,
        cache_sync_timeout: float = 120.0,
        logger: Any = None,
    ) -> None:
        """``queue`` defaults to a queue named ``name`` with the default rate limiter, instrumented in the
        registry of ``metrics`` when ``metrics`` is given."""
        if not name:
            raise ValueError("a controller needs a non-empty name")
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        if not cache_sync_timeout > 0:
            raise ValueError(f"cache_sync_timeout must be > 0 seconds, got {cache_sync_timeout!r}")
        self.name = name
        self.reconcile = reconcile
        self.workers = workers
        self.sources: tuple[Syncable, ...] = tuple(sources)
        self.metrics = metrics
        self.cache_sync_timeout = float(cache_sync_timeout)
        if queue is None:
            queue_metrics = QueueMetrics(name, metrics.registry) if metrics is not None else None
            queue = RateLimitingQueue(name, metrics=queue_metrics)
        self.queue = queue
        # Not bound here: bind() on structlog's lazy proxy freezes the configuration current at that moment, and
        # the program may configure structlog after building its controllers. Each line passes its context.
        self.log = logger if logger is not None else structlog.get_logger("controller.runtime.runner")
        self._started = False

    async def run(self) -> None:
        """Wait until every source has synced, then run the queue's timer and the workers until cancelled (in-
        flight reconciles are cancelled, their keys still marked done) or the queue is shut down (the queued
        keys are finished first). Raises :class:`CacheSyncTimeoutError` (starting nothing) when the sources do
        not sync within ``cache_sync_timeout``, RuntimeError on a second run. The queue is shut down on exit.
        Keys added before ``run`` are processed once the workers start."""
        if self._started:
            raise RuntimeError(f"controller {self.name!r} has already been run; build a new one to run again")
        self._started = True
        try:
            await self._wait_for_sources()
            if self.metrics is not None:
                self.metrics.set_max_concurrent_reconciles(self.workers)
            self.log.info("starting workers", controller=self.name, workers=self.workers)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self.queue.run, name=f"{self.name}-queue-timer")
                for index in range(self.workers):
                    tg.start_soon(self._worker, index, name=f"{self.name}-worker-{index}")
        finally:
            self.queue.shut_down()
            self.log.info("controller stopped", controller=self.name)

    async def _wait_for_sources(self) -> None:
        if not self.sources:
            return
        with anyio.move_on_after(self.cache_sync_timeout) as scope:
            async with anyio.create_task_group() as tg:
                for source in self.sources:
                    if not source.has_synced():
                        tg.start_soon(source.wait_for_sync)
        unsynced = [repr(source) for source in self.sources if not source.has_synced()]
        if not unsynced:
            return
        if scope.cancelled_caught:
            raise CacheSyncTimeoutError(self.name, self.cache_sync_timeout, unsynced)
        raise RuntimeError(
            f"controller {self.name!r}: wait_for_sync() returned but has_synced() is still False for: "
            f"{', '.join(unsynced)}"
        )

    async def _worker(self, index: int) -> None:
        queue = self.queue
        while True:
            key, shutdown = await queue.get()
            if shutdown:
                return
            assert key is not None
            try:
                if self.metrics is not None:
                    with self.metrics.active_worker():
                        await self._process(key)
                else:
                    await self._process(key)
            finally:
                queue.done(key)

    async def _process(self, key: str) -> None:
        queue = self.queue
        started = queue.clock.now()
        outcome: ReconcileOutcome
        reason = "unexpected"  # the kind of failure, when there is one
        with structlog.contextvars.bound_contextvars(controller=self.name, key=key):
            try:
                result = await self.reconcile(key)
                if result is not None and not isinstance(result, Result):
                    raise TypeError(
                        f"reconcile returned {type(result).__name__}; expected controller.runtime.runner.Result or None"
                    )
            except Exception as exc:
                # Narrowly Exception: cancellation (BaseException) must propagate to the task group.
                reason = error_reason(exc)
                retry_after = exc.retry_after if isinstance(exc, ApiError) and exc.retry_after else 0.0
                requeues = queue.num_requeues(key)
                delay = queue.add_rate_limited(key, at_least=retry_after)
                self._log_failure(key, exc, reason, delay, requeues)
                outcome = "error"
            else:
                if result is not None and result.requeue_after:
                    queue.forget(key)
                    queue.add_after(key, result.requeue_after)
                    outcome = "requeue_after"
                elif result is not None and result.requeue:
                    queue.add_rate_limited(key)
                    outcome = "requeue"
                else:
                    queue.forget(key)
                    outcome = "success"
        if self.metrics is not None:
            self.metrics.observe(outcome, queue.clock.now() - started, reason)

    def _log_failure(self, key: str, exc: Exception, reason: str, delay: float, requeues: int) -> None:
        # By kind (controller.runtime.errors.error_reason): the routine API failures (429, 5xx, transport, 409,
        # 404 of an object deleted meanwhile) as a warning; other API errors (401/403, 400/422, ...) as an error
        # line (the server's message says what is wrong; a stack would not); anything else, a bug, with its
        # traceback. ``controller`` and ``key`` are also bound into structlog's contextvars for the reconcile,
        # so the reconciler's own lines carry them too (with ``merge_contextvars``, structlog's default).
        fields = {
            "controller": self.name,
            "key": key,
            "reason": reason,
            "error": str(exc),
            "error_type": type(exc).__name__,
            "retry_in": round(delay, 3),
            "requeues": requeues,
        }
        if reason in EXPECTED_ERROR_REASONS:
            self.log.warning("reconcile failed; retrying with backoff", **fields)
        elif reason != "unexpected":
            self.log.error("reconcile failed; retrying with backoff", **fields)
        else:
            self.log.error("reconcile failed; retrying with backoff", **fields, exc_info=True)

    def __repr__(self) -> str:
        return f"Controller(name={self.name!r}, workers={self.workers})"
