"""Prometheus metrics for work queues and reconciles, with controller-runtime's names, labels and buckets.

Why: operators already have dashboards and alerts for controller-runtime controllers. Exporting the same series
(``workqueue_*``, ``controller_runtime_reconcile_*``) with the same labels and histogram buckets lets those work
unchanged against this controller. Nothing registers into the global default registry (the program serves one
registry on ``/metrics``; tests use a fresh one each); families are registered once per registry and shared.
``controller_runtime_reconcile_panics_total`` and ``controller_runtime_terminal_reconcile_errors_total`` are
deliberately not exported: Python has no panics (every exception counts as an error, where c-r also counts a
recovered panic) and the runner has no terminal errors, so both could only ever be 0.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Final, Literal

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controller.runtime.errors import ERROR_REASONS

__all__ = [
    "WORKQUEUE_DURATION_BUCKETS",
    "RECONCILE_TIME_BUCKETS",
    "RECONCILE_RESULTS",
    "ReconcileOutcome",
    "QueueMetrics",
    "ReconcileMetrics",
]

# controller-runtime >= v0.17: ExponentialBuckets(1e-8, 10, 12), written out so the `le` labels are exact.
WORKQUEUE_DURATION_BUCKETS: Final[tuple[float, ...]] = (
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0,
)  # fmt: skip

RECONCILE_TIME_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
    1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0,
    40.0, 50.0, 60.0,
)  # fmt: skip

ReconcileOutcome = Literal["success", "error", "requeue", "requeue_after"]
RECONCILE_RESULTS: Final[tuple[ReconcileOutcome, ...]] = ("success", "error", "requeue", "requeue_after")

_QUEUE_LABELS: Final = ("name", "controller")


@dataclass(frozen=True)
class _QueueFamilies:
    depth: Gauge
    adds: Counter
    queue_duration: Histogram
    work_duration: Histogram
    unfinished_work: Gauge
    longest_running: Gauge
    retries: Counter


@dataclass(frozen=True)
class _ReconcileFamilies:
    total: Counter
    errors: Counter
    errors_by_reason: Counter
    time: Histogram
    active_workers: Gauge
    max_concurrent: Gauge


# Families keyed by registry; weak so a test's throw-away registry does not keep its metrics alive.
_queue_families: weakref.WeakKeyDictionary[CollectorRegistry, _QueueFamilies] = weakref.WeakKeyDictionary()
_reconcile_families: weakref.WeakKeyDictionary[CollectorRegistry, _ReconcileFamilies] = weakref.WeakKeyDictionary()


def _queue_families_for(registry: CollectorRegistry) -> _QueueFamilies:
    families = _queue_families.get(registry)
    if families is None:
        families = _QueueFamilies(
            depth=Gauge(
                "workqueue_depth",
                "Current depth of the work queue (items waiting to be processed, including re-adds of items"
                " being processed).",
                (*_QUEUE_LABELS, "priority"),
                registry=registry,
            ),
            adds=Counter(
                "workqueue_adds_total",
                "Adds that made an item pending (duplicates of a pending item are not counted).",
                _QUEUE_LABELS,
                registry=registry,
            ),
            queue_duration=Histogram(
                "workqueue_queue_duration_seconds",
                "Seconds an item waits in the work queue between its first add and being handed to a worker.",
                _QUEUE_LABELS,
                buckets=WORKQUEUE_DURATION_BUCKETS,
                registry=registry,
            ),
            work_duration=Histogram(
                "workqueue_work_duration_seconds",
                "Seconds from handing an item to a worker until the worker reports it done.",
                _QUEUE_LABELS,
                buckets=WORKQUEUE_DURATION_BUCKETS,
                registry=registry,
            ),
            unfinished_work=Gauge(
                "workqueue_unfinished_work_seconds",
                "Sum of the ages of the items currently being processed (refreshed every 500 ms); large values"
                " indicate stuck workers.",
                _QUEUE_LABELS,
                registry=registry,
            ),
            longest_running=Gauge(
                "workqueue_longest_running_processor_seconds",
                "Age of the longest-running item currently being processed (refreshed every 500 ms).",
                _QUEUE_LABELS,
                registry=registry,
            ),
            retries=Counter(
                "workqueue_retries_total",
                "Delayed re-adds (add_after / add_rate_limited calls) handled by the work queue.",
                _QUEUE_LABELS,
                registry=registry,
            ),
        )
        _queue_families[registry] = families
    return families


def _reconcile_families_for(registry: CollectorRegistry) -> _ReconcileFamilies:
    families = _reconcile_families.get(registry)
    if families is None:
        families = _ReconcileFamilies(
            total=Counter(
                "controller_runtime_reconcile_total",
                "Reconciles per controller and result (success, error, requeue, requeue_after).",
                ("controller", "result"),
                registry=registry,
            ),
            errors=Counter(
                "controller_runtime_reconcile_errors_total",
                "Reconciles that raised an exception, per controller.",
                ("controller",),
                registry=registry,
            ),
            errors_by_reason=Counter(
                "controller_runtime_reconcile_errors_by_reason_total",
                "Reconciles that raised an exception, per controller and kind of failure (throttled, server_error,"
                " transport, conflict, not_found: routine; forbidden, invalid, api_error, unexpected: need a human).",
                ("controller", "reason"),
                registry=registry,
            ),
            time=Histogram(
                "controller_runtime_reconcile_time_seconds",
                "Duration of each reconcile, per controller (all results).",
                ("controller",),
                buckets=RECONCILE_TIME_BUCKETS,
                registry=registry,
            ),
            active_workers=Gauge(
                "controller_runtime_active_workers",
                "Workers currently processing an item, per controller.",
                ("controller",),
                registry=registry,
            ),
            max_concurrent=Gauge(
                "controller_runtime_max_concurrent_reconciles",
                "Configured number of concurrent workers, per controller.",
                ("controller",),
                registry=registry,
            ),
        )
        _reconcile_families[registry] = families
    return families


class QueueMetrics:
    """The ``workqueue_*`` series of one named queue; the queue calls the hooks with its clock's time.

    ``name`` and ``controller`` labels both carry the queue's name, as controller-runtime does;
    ``workqueue_depth`` also has ``priority``, always ``""`` (the classic queue, not c-r's priority queue). A
    second recorder for a name already in the registry reuses its series (a controller restarted after
    regaining leadership keeps counting) and resets its gauges; at most one live queue per name is supported.

    Hooks mirror client-go's queue metrics: :meth:`add` when an item becomes pending, :meth:`get` when it is
    handed to a worker, :meth:`done` when the worker finishes, :meth:`retry` on every delayed re-add, and
    :meth:`update_unfinished_work` periodically (the queue's ``run`` loop does it every 500 ms).
    """

    def __init__(self, name: str, registry: CollectorRegistry) -> None:
        if not name:
            raise ValueError("QueueMetrics needs a non-empty queue name (it becomes the `name` label)")
        self.name = name
        self.registry = registry
        families = _queue_families_for(registry)
        self._depth = families.depth.labels(name=name, controller=name, priority="")
        self._adds = families.adds.labels(name=name, controller=name)
        self._queue_duration = families.queue_duration.labels(name=name, controller=name)
        self._work_duration = families.work_duration.labels(name=name, controller=name)
        self._unfinished_work = families.unfinished_work.labels(name=name, controller=name)
        self._longest_running = families.longest_running.labels(name=name, controller=name)
        self._retries = families.retries.labels(name=name, controller=name)
        # A new queue starts empty; a previous queue of the same name may have left non-zero gauges.
        self._depth.set(0)
        self._unfinished_work.set(0)
        self._longest_running.set(0)
        self._first_added_at: dict[Hashable, float] = {}
        self._processing_since: dict[Hashable, float] = {}

    def add(self, item: Hashable, now: float) -> None:
        """``item`` became pending at ``now``: one add, depth +1; its queue time runs from the first such add."""
        self._adds.inc()
        self._depth.inc()
        # Queue duration runs from the *first* add that made the item pending.
        self._first_added_at.setdefault(item, now)

    def get(self, item: Hashable, now: float) -> None:
        """``item`` was handed to a worker at ``now``: depth -1, its queue duration observed."""
        self._depth.dec()
        self._processing_since[item] = now
        added_at = self._first_added_at.pop(item, None)
        if added_at is not None:
            self._queue_duration.observe(max(0.0, now - added_at))

    def done(self, item: Hashable, now: float) -> None:
        """The worker finished ``item`` at ``now``: its work duration observed (nothing if it was not got)."""
        started_at = self._processing_since.pop(item, None)
        if started_at is not None:
            self._work_duration.observe(max(0.0, now - started_at))

    def retry(self) -> None:
        """Count one delayed re-add (``workqueue_retries_total``)."""
        self._retries.inc()

    def update_unfinished_work(self, now: float) -> None:
        """Set the unfinished-work and longest-running gauges from the items processing at ``now``."""
        ages = [max(0.0, now - started_at) for started_at in self._processing_since.values()]
        self._unfinished_work.set(sum(ages))
        self._longest_running.set(max(ages, default=0.0))

    def __repr__(self) -> str:
        return f"QueueMetrics(name={self.name!r})"


class ReconcileMetrics:
    """The ``controller_runtime_*`` series of one controller.

    ``controller_runtime_reconcile_errors_by_reason_total{controller, reason}`` is ours, not c-r's: the errors
    of ``controller_runtime_reconcile_errors_total`` by kind, ``reason`` one of
    ``controller.runtime.errors.ERROR_REASONS``, every series exported from 0. throttled, server_error,
    transport, conflict and not_found are routine under load; an alert belongs on the others.
    """

    def __init__(self, controller: str, registry: CollectorRegistry) -> None:
        if not controller:
            raise ValueError("ReconcileMetrics needs a non-empty controller name")
        self.controller = controller
        self.registry = registry
        families = _reconcile_families_for(registry)
        # Pre-create every result series so they are exported at 0 before the first reconcile, like c-r.
        self._total = {
            result: families.total.labels(controller=controller, result=result) for result in RECONCILE_RESULTS
        }
        self._errors = families.errors.labels(controller=controller)
        self._errors_by_reason = {
            reason: families.errors_by_reason.labels(controller=controller, reason=reason) for reason in ERROR_REASONS
        }
        self._time = families.time.labels(controller=controller)
        self._active_workers = families.active_workers.labels(controller=controller)
        self._max_concurrent = families.max_concurrent.labels(controller=controller)
        self._active_workers.set(0)

    def set_max_concurrent_reconciles(self, workers: int) -> None:
        """Set the configured number of workers (``--workers``)."""
        self._max_concurrent.set(workers)

    @contextlib.contextmanager
    def active_worker(self) -> Iterator[None]:
        """Counts one worker as active for the duration of the block (one processed item)."""
        self._active_workers.inc()
        try:
            yield
        finally:
            self._active_workers.dec()

    def observe(self, outcome: ReconcileOutcome, seconds: float, error_reason: str = "unexpected") -> None:
        """Record one finished reconcile: its result label and its duration (and, for an error, its kind: one
        of ``ERROR_REASONS``)."""
        counter = self._total.get(outcome)
        if counter is None:
            raise ValueError(f"unknown reconcile outcome {outcome!r}; expected one of {RECONCILE_RESULTS}")
        if outcome == "error" and error_reason not in self._errors_by_reason:
            raise ValueError(f"unknown error reason {error_reason!r}; expected one of {ERROR_REASONS}")
        counter.inc()
        if outcome == "error":
            self._errors.inc()
            self._errors_by_reason[error_reason].inc()
        self._time.observe(max(0.0, seconds))

    def __repr__(self) -> str:
        return f"ReconcileMetrics(controller={self.controller!r})"
