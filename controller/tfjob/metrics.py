"""Prometheus series of the TFJob domain: counters fed by :class:`~controller.tfjob.actions.MetricInc`,
histograms fed by :mod:`controller.tfjob.observe`.

The counter names and label sets are upstream's (``training_operator_jobs_*_total{job_namespace,framework}``,
so existing dashboards keep working) plus ours that answer "why did my job change":
``tfjob_worker_failovers_total{job_namespace,reason}``, ``tfjob_replica_failovers_total{job_namespace,replica_type,reason}``
and ``tfjob_worker_scaled_down_total{job_namespace,chosen_by}``.
The decision names the counter; this module owns the registry side and refuses unknown names, so
a typo in the domain fails a test instead of silently creating a new series.

Why series are created before their first increment: Prometheus' ``rate()``/``increase()`` need two
samples of a series, so a labelled counter that springs into existence at 1 is invisible for the very
step in which it happened, and for a rare event (a failover) that step is all there is. So every series of
a namespace exists at 0 as soon as the controller first sees a job there (:meth:`TFJobMetrics.namespace_seen`),
with every label value known up front (the failover reasons are a fixed vocabulary), and from the start for the
namespaces a scoped controller watches (``--namespace``). Existing is not enough, though: a controller watching all
namespaces learns of a new namespace from its first job, and reconciles that job (the ``created`` increment) long
before the next scrape, so the series would still be *exposed* for the first time at 1. Hence the rule this module
keeps: a namespace's increments and observations are held until one complete collection of the registry (a scrape)
has exposed its series at 0, then applied; the first increment is seen one scrape later instead of never. A hold
lasts at most ``HOLD_LIMIT`` (Prometheus' 5-minute lookback), so a controller nobody scrapes keeps nothing.
Label cardinality stays bounded: no job or pod names, and a namespace's series are removed once its last job has
been gone for ``namespace_linger`` seconds (long enough for any sane scrape interval to see the final increments,
e.g. the TTL deletion of that last job).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from controller.tfjob import api
from controller.tfjob.actions import MetricInc

# The causes of a failover that are not the replica's own doing; a PS is failed over for these alone (its own
# failures follow upstream's rules).
DISRUPTION_REASONS: tuple[str, ...] = (
    api.FAILOVER_DELETED,
    api.FAILOVER_EVICTED,
    api.FAILOVER_PREEMPTED,
    api.FAILOVER_NODE_LOST,
    api.FAILOVER_DISRUPTED,
)
FAILOVER_REASONS: tuple[str, ...] = (*DISRUPTION_REASONS, api.FAILOVER_OOM_KILLED, api.FAILOVER_ERROR)

METRIC_FAILOVER_SECONDS = "tfjob_worker_failover_seconds"
METRIC_TIME_TO_RUNNING = "tfjob_job_time_to_running_seconds"

# Seconds a namespace's first increments wait for a scrape to show its series at 0. Prometheus' lookback is 5
# minutes: a target scraped more rarely than that cannot be rate()d at all, and a controller nobody scrapes must
# not keep every increment it ever made in memory.
HOLD_LIMIT = 300.0
# Seconds; a failover includes the back-off (10 s doubling to 5 min) plus scheduling and start-up.
FAILOVER_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1200.0)
# Seconds from creation until every replica runs: image pulls and scheduling dominate.
TIME_TO_RUNNING_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)

_JOB_LABELS = ("job_namespace", "framework")
_LABELS: dict[str, tuple[str, ...]] = {
    api.METRIC_JOBS_CREATED: _JOB_LABELS,
    api.METRIC_JOBS_DELETED: _JOB_LABELS,
    api.METRIC_JOBS_SUCCESSFUL: _JOB_LABELS,
    api.METRIC_JOBS_FAILED: _JOB_LABELS,
    api.METRIC_JOBS_RESTARTED: _JOB_LABELS,
    api.METRIC_WORKER_FAILOVERS: ("job_namespace", "reason"),
    api.METRIC_REPLICA_FAILOVERS: ("job_namespace", "replica_type", "reason"),
    api.METRIC_WORKER_SCALED_DOWN: ("job_namespace", "chosen_by"),
    api.METRIC_FOREIGN_WRITES: ("job_namespace", "write"),
}

_HELP: dict[str, str] = {
    api.METRIC_JOBS_CREATED: "Counts number of jobs created",
    api.METRIC_JOBS_DELETED: "Counts number of jobs deleted",
    api.METRIC_JOBS_SUCCESSFUL: "Counts number of jobs successful",
    api.METRIC_JOBS_FAILED: "Counts number of jobs failed",
    api.METRIC_JOBS_RESTARTED: "Counts number of jobs restarted",
    api.METRIC_WORKER_FAILOVERS: "Worker pods of dynamic TFJobs replaced after a failure or disruption, by cause",
    api.METRIC_REPLICA_FAILOVERS: "Parameter-server pods of dynamic TFJobs re-created at their address after a "
    "disruption, by replica type and cause",
    api.METRIC_WORKER_SCALED_DOWN: "Workers removed from dynamic TFJobs because Worker replicas were lowered, by how "
    "they were chosen (workersToDelete, deletionCost, highestIndex)",
    api.METRIC_FOREIGN_WRITES: "Writes by another controller to TFJobs this one manages: their status, or pods created",
}


def _label_sets(name: str, namespace: str) -> list[tuple[str, ...]]:
    """Every label-value tuple (in label-name order) that ``name`` can take in ``namespace``."""
    labels = _LABELS[name]
    if labels == _JOB_LABELS:
        return [(namespace, api.FRAMEWORK)]
    if "replica_type" in labels:
        return [(namespace, api.PS, reason) for reason in DISRUPTION_REASONS]
    if "reason" in labels:
        return [(namespace, reason) for reason in FAILOVER_REASONS]
    if "write" in labels:
        return [(namespace, write) for write in api.FOREIGN_WRITES]
    if "chosen_by" in labels:
        return [(namespace, chosen_by) for chosen_by in api.CHOSEN_BY]
    return [(namespace,)]


class _Marker(Collector):
    """Exports nothing; tells :class:`TFJobMetrics` where a collection of the registry has got to.

    A registry collects its collectors in registration order, so one marker registered before the TFJob series
    and one after them bracket the moment those series are read."""

    def __init__(self, reached: Callable[[], None]) -> None:
        self._reached = reached

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        self._reached()
        return iter(())


class TFJobMetrics:
    """The TFJob counters and histograms registered in ``registry``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        namespace_linger: float = 300.0,
        monotonic: Callable[[], float] = time.monotonic,
        pinned_namespaces: Iterable[str] = (),
    ) -> None:
        # Namespaces whose series have not yet been exposed at 0 by a complete collection: since when (monotonic),
        # and what happened in them meanwhile (applied in order once exposed); and the ones a collection under way
        # is exposing.
        self._held: dict[str, tuple[float, list[Callable[[], None]]]] = {}
        self._exposing: frozenset[str] = frozenset()
        registry.register(_Marker(self._collection_started))
        self._counters: dict[str, Counter] = {
            name: Counter(name.removesuffix("_total"), _HELP[name], labels, registry=registry)
            for name, labels in _LABELS.items()
        }
        self.failover_seconds = Histogram(
            METRIC_FAILOVER_SECONDS,
            "Seconds from the controller observing a dynamic worker's failure or disruption until its replacement"
            " pod runs, by cause",
            ("job_namespace", "reason"),
            buckets=FAILOVER_BUCKETS,
            registry=registry,
        )
        self.time_to_running = Histogram(
            METRIC_TIME_TO_RUNNING,
            "Seconds from a TFJob's creation until all its replicas first ran at the same time",
            ("job_namespace",),
            buckets=TIME_TO_RUNNING_BUCKETS,
            registry=registry,
        )
        registry.register(_Marker(self._collection_done))
        self.namespace_linger = namespace_linger
        self._monotonic = monotonic
        self._namespaces: set[str] = set()
        self._emptied_at: dict[str, float] = {}
        # The namespaces a scoped controller watches: their series exist from the start and are never pruned,
        # so even the first job created there is seen by increase().
        self._pinned = frozenset(pinned_namespaces)
        for namespace in sorted(self._pinned):
            self.namespace_seen(namespace)

    # -- namespaces: series exist at 0 from the first job, and go after the last --------------------------

    @property
    def namespaces(self) -> frozenset[str]:
        """Namespaces whose series exist."""
        return frozenset(self._namespaces)

    def namespace_seen(self, namespace: str) -> None:
        """A job exists in ``namespace``: make sure every series of it exists (at 0 if new)."""
        if namespace in self._namespaces:
            return
        self._namespaces.add(namespace)
        self._held[namespace] = (self._monotonic(), [])
        for name, counter in self._counters.items():
            for values in _label_sets(name, namespace):
                counter.labels(*values)
        for reason in FAILOVER_REASONS:
            self.failover_seconds.labels(namespace, reason)
        self.time_to_running.labels(namespace)

    def prune(self, namespaces_with_jobs: set[str] | frozenset[str]) -> list[str]:
        """Remove the series of namespaces that have had no job for ``namespace_linger`` seconds.

        ``namespaces_with_jobs`` is what the job cache holds now; judging from it (rather than from
        delete events) keeps the answer right whatever order a job's deletion and its last increments
        (a TTL deletion counts after the delete) arrive in. Returns the namespaces removed.
        """
        now = self._monotonic()
        gone = []
        for namespace in sorted(self._namespaces):
            if namespace in namespaces_with_jobs or namespace in self._pinned:
                self._emptied_at.pop(namespace, None)
            elif now - self._emptied_at.setdefault(namespace, now) >= self.namespace_linger:
                gone.append(namespace)
        for namespace in gone:
            del self._emptied_at[namespace]
            self._namespaces.discard(namespace)
            self._held.pop(namespace, None)
            for name, counter in self._counters.items():
                for values in _label_sets(name, namespace):
                    counter.remove(*values)
            for reason in FAILOVER_REASONS:
                self.failover_seconds.remove(namespace, reason)
            self.time_to_running.remove(namespace)
        return gone

    # -- recording ---------------------------------------------------------------------------------------

    def inc(self, metric: MetricInc) -> None:
        """Count one ``metric``; KeyError for an unknown metric, ValueError for labels it does not take."""
        counter = self._counters.get(metric.name)
        if counter is None:
            raise KeyError(f"unknown TFJob metric {metric.name!r}")
        labels = dict(metric.labels)
        expected = _LABELS[metric.name]
        if set(labels) != set(expected):
            raise ValueError(f"metric {metric.name} takes labels {expected}, got {sorted(labels)}")
        if "reason" in labels and labels["reason"] not in FAILOVER_REASONS:
            raise ValueError(f"metric {metric.name}: reason {labels['reason']!r} is not one of {FAILOVER_REASONS}")
        if "write" in labels and labels["write"] not in api.FOREIGN_WRITES:
            raise ValueError(f"metric {metric.name}: write {labels['write']!r} is not one of {api.FOREIGN_WRITES}")
        self._record(labels["job_namespace"], counter.labels(**labels).inc)

    def observe_failover(self, namespace: str, reason: str, seconds: float) -> None:
        """Observe one failover's duration (negative clamps to 0); ValueError for an unknown reason."""
        if reason not in FAILOVER_REASONS:
            raise ValueError(f"failover reason {reason!r} is not one of {FAILOVER_REASONS}")
        observe = self.failover_seconds.labels(namespace, reason).observe
        self._record(namespace, lambda: observe(max(0.0, seconds)))

    def observe_time_to_running(self, namespace: str, seconds: float) -> None:
        """Observe how long a job took to run (negative clamps to 0)."""
        observe = self.time_to_running.labels(namespace).observe
        self._record(namespace, lambda: observe(max(0.0, seconds)))

    def _record(self, namespace: str, apply: Callable[[], None]) -> None:
        self.namespace_seen(namespace)
        held = self._held.get(namespace)
        if held is not None and self._monotonic() - held[0] >= HOLD_LIMIT:
            # Nobody scrapes (or too rarely for rate() to work anyway): holding longer would only grow memory.
            self._release(namespace)
            held = None
        if held is None:
            apply()
        else:
            held[1].append(apply)

    def _release(self, namespace: str) -> None:
        _since, held = self._held.pop(namespace, (0.0, []))
        for apply in held:
            apply()

    # -- exposure: a complete collection shows a new namespace's series at 0 before anything counts in them ---

    def _collection_started(self) -> None:
        self._exposing = frozenset(self._held)

    def _collection_done(self) -> None:
        # Only the namespaces held when this collection began: one seen since (e.g. by a collector registered
        # later in the same collection) had its series read before they existed.
        for namespace in self._exposing:
            self._release(namespace)
        self._exposing = frozenset()
