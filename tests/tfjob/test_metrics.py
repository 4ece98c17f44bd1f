import pytest
from prometheus_client import CollectorRegistry

from controller.tfjob import api
from controller.tfjob.actions import MetricInc
from controller.tfjob.metrics import TFJobMetrics


def test_counters_use_upstream_names_and_labels():
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry)
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "ns"))))
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "ns"))))
    metrics.inc(MetricInc(api.METRIC_WORKER_FAILOVERS, (("job_namespace", "ns"), ("reason", "Evicted"))))
    metrics.inc(MetricInc(api.METRIC_WORKER_SCALED_DOWN, (("job_namespace", "ns"),)))
    value = registry.get_sample_value
    assert value("training_operator_jobs_created_total", {"job_namespace": "ns", "framework": "tensorflow"}) == 2
    assert value("tfjob_worker_failovers_total", {"job_namespace": "ns", "reason": "Evicted"}) == 1
    assert value("tfjob_worker_scaled_down_total", {"job_namespace": "ns"}) == 1


def test_unknown_metric_or_labels_fail_loudly():
    metrics = TFJobMetrics(CollectorRegistry())
    with pytest.raises(KeyError, match="unknown TFJob metric"):
        metrics.inc(MetricInc("tfjob_typo_total", ()))
    with pytest.raises(ValueError, match="takes labels"):
        metrics.inc(MetricInc(api.METRIC_WORKER_FAILOVERS, (("job_namespace", "ns"),)))


def test_every_series_of_a_namespace_exists_at_zero_once_a_job_is_seen_there():
    # rate()/increase() cannot see the first increment of a series that springs into existence at 1.
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry)
    value = registry.get_sample_value
    assert value("tfjob_worker_failovers_total", {"job_namespace": "team-a", "reason": "Evicted"}) is None
    metrics.namespace_seen("team-a")
    for reason in ("Deleted", "Evicted", "Preempted", "NodeLost", "Disrupted", "OOMKilled", "Error"):
        assert value("tfjob_worker_failovers_total", {"job_namespace": "team-a", "reason": reason}) == 0
        assert value("tfjob_worker_failover_seconds_count", {"job_namespace": "team-a", "reason": reason}) == 0
    for kind in ("created", "deleted", "successful", "failed", "restarted"):
        labels = {"job_namespace": "team-a", "framework": "tensorflow"}
        assert value(f"training_operator_jobs_{kind}_total", labels) == 0
    assert value("tfjob_worker_scaled_down_total", {"job_namespace": "team-a"}) == 0
    assert value("tfjob_job_time_to_running_seconds_count", {"job_namespace": "team-a"}) == 0


def test_a_namespace_without_jobs_loses_its_series_after_the_linger():
    clock = [0.0]
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry, namespace_linger=60.0, monotonic=lambda: clock[0])
    metrics.namespace_seen("gone")
    metrics.namespace_seen("kept")
    metrics.inc(MetricInc(api.METRIC_JOBS_DELETED, (("framework", "tensorflow"), ("job_namespace", "gone"))))
    assert metrics.prune({"kept"}) == []  # the linger starts now
    clock[0] = 59.0
    assert metrics.prune({"kept"}) == []
    labels = {"job_namespace": "gone", "framework": "tensorflow"}
    assert registry.get_sample_value("training_operator_jobs_deleted_total", labels) == 1  # still scraped
    clock[0] = 60.0
    assert metrics.prune({"kept"}) == ["gone"]
    assert registry.get_sample_value("training_operator_jobs_deleted_total", labels) is None
    assert registry.get_sample_value("tfjob_worker_failovers_total", {"job_namespace": "gone", "reason": "Deleted"}) is None
    assert registry.get_sample_value("tfjob_worker_scaled_down_total", {"job_namespace": "kept"}) == 0
    assert metrics.namespaces == {"kept"}


def test_a_job_returning_within_the_linger_keeps_the_namespace_counting():
    clock = [0.0]
    metrics = TFJobMetrics(CollectorRegistry(), namespace_linger=60.0, monotonic=lambda: clock[0])
    metrics.namespace_seen("ns")
    metrics.prune(set())
    clock[0] = 30.0
    metrics.prune({"ns"})  # a job appeared again: the linger is cancelled
    clock[0] = 100.0
    assert metrics.prune({"ns"}) == []
    assert metrics.namespaces == {"ns"}


def test_failover_reasons_are_a_closed_vocabulary():
    metrics = TFJobMetrics(CollectorRegistry())
    with pytest.raises(ValueError, match="is not one of"):
        metrics.inc(MetricInc(api.METRIC_WORKER_FAILOVERS, (("job_namespace", "ns"), ("reason", "pod-7f9c"))))
    with pytest.raises(ValueError, match="is not one of"):
        metrics.observe_failover("ns", "pod-7f9c", 3.0)


def test_watched_namespaces_have_their_series_from_the_start_and_keep_them():
    clock = [0.0]
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry, namespace_linger=1.0, monotonic=lambda: clock[0], pinned_namespaces=["team-a"])
    labels = {"job_namespace": "team-a", "framework": "tensorflow"}
    assert registry.get_sample_value("training_operator_jobs_created_total", labels) == 0
    metrics.prune(set())
    clock[0] = 10.0
    assert metrics.prune(set()) == []
    assert registry.get_sample_value("training_operator_jobs_created_total", labels) == 0
