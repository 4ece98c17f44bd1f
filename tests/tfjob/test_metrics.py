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
