"""Prometheus counters of the TFJob domain, fed by :class:`~controller.tfjob.actions.MetricInc`.

The names and label sets are upstream's (``training_operator_jobs_*_total{job_namespace,framework}``,
so existing dashboards keep working) plus two of ours that answer "why did my job change":
``tfjob_worker_failovers_total{job_namespace,reason}`` and ``tfjob_worker_scaled_down_total{job_namespace}``.
The decision names the counter; this module owns the registry side and refuses unknown names, so
a typo in the domain fails a test instead of silently creating a new series.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from controller.tfjob import api
from controller.tfjob.actions import MetricInc

_LABELS: dict[str, tuple[str, ...]] = {
    api.METRIC_JOBS_CREATED: ("job_namespace", "framework"),
    api.METRIC_JOBS_DELETED: ("job_namespace", "framework"),
    api.METRIC_JOBS_SUCCESSFUL: ("job_namespace", "framework"),
    api.METRIC_JOBS_FAILED: ("job_namespace", "framework"),
    api.METRIC_JOBS_RESTARTED: ("job_namespace", "framework"),
    api.METRIC_WORKER_FAILOVERS: ("job_namespace", "reason"),
    api.METRIC_WORKER_SCALED_DOWN: ("job_namespace",),
}

_HELP: dict[str, str] = {
    api.METRIC_JOBS_CREATED: "Counts number of jobs created",
    api.METRIC_JOBS_DELETED: "Counts number of jobs deleted",
    api.METRIC_JOBS_SUCCESSFUL: "Counts number of jobs successful",
    api.METRIC_JOBS_FAILED: "Counts number of jobs failed",
    api.METRIC_JOBS_RESTARTED: "Counts number of jobs restarted",
    api.METRIC_WORKER_FAILOVERS: "Worker pods of dynamic TFJobs replaced after a failure or disruption, by cause",
    api.METRIC_WORKER_SCALED_DOWN: "Worker pods of dynamic TFJobs removed because Worker replicas were lowered",
}


class TFJobMetrics:
    """The TFJob counters registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._counters: dict[str, Counter] = {
            name: Counter(name.removesuffix("_total"), _HELP[name], labels, registry=registry)
            for name, labels in _LABELS.items()
        }

    def inc(self, metric: MetricInc) -> None:
        counter = self._counters.get(metric.name)
        if counter is None:
            raise KeyError(f"unknown TFJob metric {metric.name!r}")
        labels = dict(metric.labels)
        expected = _LABELS[metric.name]
        if set(labels) != set(expected):
            raise ValueError(f"metric {metric.name} takes labels {expected}, got {sorted(labels)}")
        counter.labels(**labels).inc()
