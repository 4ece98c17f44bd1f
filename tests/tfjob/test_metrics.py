from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from controller.tfjob import api
from controller.tfjob.actions import MetricInc
from controller.tfjob.metrics import HOLD_LIMIT, TFJobMetrics
from tests.scrape import scraped


def test_counters_use_upstream_names_and_labels():
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry)
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "ns"))))
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "ns"))))
    metrics.inc(MetricInc(api.METRIC_WORKER_FAILOVERS, (("job_namespace", "ns"), ("reason", "Evicted"))))
    metrics.inc(MetricInc(api.METRIC_WORKER_SCALED_DOWN, (("job_namespace", "ns"), ("chosen_by", "deletionCost"))))

    def value(name: str, labels: dict[str, str]) -> float | None:
        return scraped(registry, name, labels)

    assert value("training_operator_jobs_created_total", {"job_namespace": "ns", "framework": "tensorflow"}) == 2
    assert value("tfjob_worker_failovers_total", {"job_namespace": "ns", "reason": "Evicted"}) == 1
    assert value("tfjob_worker_scaled_down_total", {"job_namespace": "ns", "chosen_by": "deletionCost"}) == 1


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

    def value(name: str, labels: dict[str, str]) -> float | None:
        return scraped(registry, name, labels)

    assert value("tfjob_worker_failovers_total", {"job_namespace": "team-a", "reason": "Evicted"}) is None
    metrics.namespace_seen("team-a")
    for reason in ("Deleted", "Evicted", "Preempted", "NodeLost", "Disrupted", "OOMKilled", "Error"):
        assert value("tfjob_worker_failovers_total", {"job_namespace": "team-a", "reason": reason}) == 0
        assert value("tfjob_worker_failover_seconds_count", {"job_namespace": "team-a", "reason": reason}) == 0
    for kind in ("created", "deleted", "successful", "failed", "restarted"):
        labels = {"job_namespace": "team-a", "framework": "tensorflow"}
        assert value(f"training_operator_jobs_{kind}_total", labels) == 0
    for chosen_by in ("workersToDelete", "deletionCost", "highestIndex"):
        assert value("tfjob_worker_scaled_down_total", {"job_namespace": "team-a", "chosen_by": chosen_by}) == 0
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
    assert scraped(registry, "training_operator_jobs_deleted_total", labels) == 1  # still scraped
    clock[0] = 60.0
    assert metrics.prune({"kept"}) == ["gone"]
    assert scraped(registry, "training_operator_jobs_deleted_total", labels) is None
    assert scraped(registry, "tfjob_worker_failovers_total", {"job_namespace": "gone", "reason": "Deleted"}) is None
    labels = {"job_namespace": "kept", "chosen_by": "highestIndex"}
    assert scraped(registry, "tfjob_worker_scaled_down_total", labels) == 0
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
    assert scraped(registry, "training_operator_jobs_created_total", labels) == 0
    metrics.prune(set())
    clock[0] = 10.0
    assert metrics.prune(set()) == []
    assert scraped(registry, "training_operator_jobs_created_total", labels) == 0


CREATED_TEAM_A = 'training_operator_jobs_created_total{framework="tensorflow",job_namespace="team-a"}'


def exposed(registry: CollectorRegistry, *series: str) -> str | None | tuple[str | None, ...]:
    """The value of each of ``series`` in one scrape of ``registry`` (None where the scrape does not show it)."""
    values = dict.fromkeys(series)
    for line in generate_latest(registry).decode().splitlines():
        name, _, value = line.rpartition(" ")
        if name in values:
            values[name] = value
    return values[series[0]] if len(series) == 1 else tuple(values.values())


def test_a_new_namespaces_first_increment_waits_for_a_scrape_to_have_shown_its_series_at_zero():
    # A cluster-wide controller learns of team-a from its first job and reconciles it (the created increment)
    # before the next scrape: shown at 1 straight away, the series would be born at 1, which increase() misses.
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry)
    metrics.namespace_seen("team-a")
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "team-a"))))
    metrics.observe_time_to_running("team-a", 4.0)
    observed = 'tfjob_job_time_to_running_seconds_count{job_namespace="team-a"}'
    assert exposed(registry, CREATED_TEAM_A, observed) == ("0.0", "0.0")
    assert exposed(registry, CREATED_TEAM_A, observed) == ("1.0", "1.0")
    # Once shown at 0, increments count at once.
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "team-a"))))
    assert exposed(registry, CREATED_TEAM_A) == "2.0"


def test_a_namespace_first_seen_during_a_scrape_waits_for_the_next_one():
    # The job gauges' collector (JobObserver) is registered after the counters and may meet a namespace while the
    # scrape is under way: the counters have been read already, so that scrape did not show its series at 0.
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry)

    class SeesTeamA(Collector):
        def collect(self) -> Iterator[Metric]:
            metrics.namespace_seen("team-a")
            return iter(())

    registry.register(SeesTeamA())
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "ns"))))
    assert exposed(registry, CREATED_TEAM_A) is None
    metrics.inc(MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "team-a"))))
    assert exposed(registry, CREATED_TEAM_A) == "0.0"
    assert exposed(registry, CREATED_TEAM_A) == "1.0"


def test_without_a_scrape_the_held_increments_are_applied_after_the_hold_limit():
    # A controller nobody scrapes must not keep every increment in memory.
    clock = [0.0]
    registry = CollectorRegistry()
    metrics = TFJobMetrics(registry, monotonic=lambda: clock[0])
    created = MetricInc(api.METRIC_JOBS_CREATED, (("framework", "tensorflow"), ("job_namespace", "team-a")))
    labels = {"job_namespace": "team-a", "framework": "tensorflow"}
    metrics.inc(created)
    clock[0] = HOLD_LIMIT - 1
    metrics.inc(created)
    assert registry.get_sample_value("training_operator_jobs_created_total", labels) == 0  # held, unscraped
    clock[0] = HOLD_LIMIT
    metrics.inc(created)
    assert registry.get_sample_value("training_operator_jobs_created_total", labels) == 3
