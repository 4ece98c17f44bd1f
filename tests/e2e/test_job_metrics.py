"""The job gauges and latencies an SRE reads first, against the simulated cluster.

Jobs by state come from the controller's caches at scrape time (so they stay true across restarts and a
standby reports none); failover latency and time to running are measured from pod watch events.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest

from controller.runtime.client import NAMESPACES, PODS, ApiClient
from controller.tfjob.controller import TFJobController
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import Operator, annotate_pod, create_and_wait_running, eventually, is_true, tfjob
from tfjob_sim.kubelet import EXIT_CODE, UNSCHEDULABLE


def jobs_in(operator: Operator, state: str) -> float | None:
    return operator.registry.get_sample_value("tfjob_jobs", {"job_namespace": "default", "state": state})


async def test_jobs_by_state_time_to_running_and_failover_latency(operator: Operator) -> None:
    value = operator.metric
    await create_and_wait_running(operator, tfjob("gauged", workers=2, restart_policy="ExitCode"), running=2)
    assert jobs_in(operator, "Running") == 1
    assert jobs_in(operator, "Failed") == 0 and jobs_in(operator, "Pending") == 0
    await eventually(
        lambda: value("tfjob_job_time_to_running_seconds_count", {"job_namespace": "default"}) == 1,
        what="time to running observed once",
    )
    assert value("tfjob_jobs_degraded", {"job_namespace": "default"}) == 0

    killed = time.time()
    await annotate_pod(operator, "gauged-worker-1", {EXIT_CODE: "137"})
    labels = {"job_namespace": "default", "reason": "OOMKilled"}
    await eventually(lambda: value("tfjob_worker_failover_seconds_count", labels) == 1, what="failover latency")
    seen = time.time()
    # A first failover is replaced as soon as the pod is gone (no back-off): the latency is the kill, the
    # create and the start, so it lies within what this test waited, plus up to 1 s because lastFailoverTime
    # has whole seconds (a bound in seconds would be a timed test).
    assert 0 < value("tfjob_worker_failover_seconds_sum", labels) <= seen - killed + 1.0
    # A replacement that runs is one failover: the time to running of the job is not measured again.
    assert value("tfjob_job_time_to_running_seconds_count", {"job_namespace": "default"}) == 1
    assert value("tfjob_jobs_degraded", {"job_namespace": "default"}) == 0


async def test_a_standby_replica_reports_no_job_gauges(operator: Operator) -> None:
    # A second controller on the same cluster that never runs (not leading): its caches are empty and unsynced.
    await create_and_wait_running(operator, tfjob("seen-by-leader", workers=1), running=1)
    registry = CollectorRegistry()
    assert operator.cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(operator.cluster.kubeconfig_path, registry=registry)
    try:
        TFJobController(client, registry=registry)
        exposition = generate_latest(registry).decode()
    finally:
        await client.close()
    assert "tfjob_jobs{" not in exposition and "tfjob_jobs_degraded{" not in exposition
    assert jobs_in(operator, "Running") == 1


async def test_degraded_and_not_running_gauges_follow_the_cluster(operator: Operator) -> None:
    value = operator.metric
    labels = {"job_namespace": "default"}
    await create_and_wait_running(operator, tfjob("hurt", workers=2), running=2)
    # Workers whose pods can never be scheduled: the job is created but never Running.
    await operator.client.create(
        TFJOBS, tfjob("stuck", workers=1, annotations={UNSCHEDULABLE: "true"}), namespace="default"
    )
    await eventually(lambda: jobs_in(operator, "Created") == 1, what="stuck job Created")
    await eventually(
        lambda: value("tfjob_jobs_not_running_longest_seconds", labels) >= 1.0, what="the stuck job's age reported"
    )

    operator.cluster.faults.pause_kubelet()  # the replacement cannot start: the job runs below its workers
    await operator.client.delete(PODS, "hurt-worker-1", namespace="default")
    await eventually(lambda: value("tfjob_jobs_degraded", labels) == 1, what="hurt degraded")
    first = value("tfjob_jobs_degraded_longest_seconds", labels)
    await eventually(lambda: value("tfjob_jobs_degraded_longest_seconds", labels) > first, what="degraded time grows")
    operator.cluster.faults.resume_kubelet()
    await eventually(lambda: value("tfjob_jobs_degraded", labels) == 0, timeout=30, what="hurt whole again")
    assert value("tfjob_jobs_degraded_longest_seconds", labels) == 0
    assert jobs_in(operator, "Running") == 1 and jobs_in(operator, "Created") == 1


async def test_a_new_namespaces_first_job_created_is_seen_by_increase(operator: Operator) -> None:
    # The controller watches every namespace and learns of "fresh" from its first job, which it reconciles (the
    # created increment) before anyone scrapes. Prometheus' increase() sees a counter only from its second sample:
    # the first scrape showing the series must show it at 0, the next one at 1.
    await operator.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "fresh"}})
    await operator.client.create(TFJOBS, tfjob("first", workers=1, namespace="fresh"), namespace="fresh")
    queue = operator.controller.controller.queue

    async def created_and_reconciled() -> bool:
        job = await operator.client.get(TFJOBS, "first", namespace="fresh")
        return is_true(job, "Created") and queue.num_processing == 0

    await eventually(created_and_reconciled, what="the job's Created condition written")
    series = 'training_operator_jobs_created_total{framework="tensorflow",job_namespace="fresh"}'

    def scrape() -> str | None:
        for line in generate_latest(operator.registry).decode().splitlines():
            if line.startswith(series + " "):
                return line.split()[1]
        return None

    assert scrape() == "0.0"
    assert scrape() == "1.0"
