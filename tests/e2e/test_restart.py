"""A controller restart in the middle of a worker failover.

The failover history lives in the job's status (``status.dynamicWorkers``), not in the
controller's memory, so a new controller process continues a failover where the old one stopped:
the back-off already decided is honoured, the failover is not counted again, the replacement is
created exactly once (no duplicate pod), and the next failure of the same worker backs off
longer, as a crash loop should. Two controller processes are run one after the other against the
same simulated cluster with ``start_operator``; the first is stopped before the second starts.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from controller.runtime.client import PODS
from controller.tfjob.decide import DecideConfig
from tests.e2e.conftest import (
    Operator,
    annotate_pod,
    by_name,
    condition,
    create_and_wait_running,
    eventually,
    fail_over_once,
    is_true,
    reconciled_once_more,
    running_pods,
    start_operator,
    tfjob,
    worker_record,
)
from tfjob_sim.cluster import SimCluster
from tfjob_sim.kubelet import EXIT_CODE

HOLD = "e2e.tfjob.dev/hold"  # a finalizer of the test's own, to keep a deleted pod terminating
# Long enough for a restart to happen inside the back-off window, short enough for a fast test.
# The repeat failover's back-off must outlast stopping one controller and starting another on a loaded machine
# (the test asserts the restart lands inside it), so it is 8 s, not the few seconds other tests use.
SLOW_FAILOVER = DecideConfig(failover_backoff_base=8.0, failover_backoff_cap=32.0, failover_reset_after=120.0)


def parse(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


async def stop_cleanly(operator: Operator) -> None:
    crashed = operator.task is not None and operator.task.done() and not operator.task.cancelled()
    await operator.stop()
    assert not crashed, "the controller task ended on its own"


def uids(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


async def test_restart_during_the_backoff_creates_one_replacement_and_keeps_the_history(
    sim_cluster: SimCluster,
) -> None:
    faults = sim_cluster.faults
    first = await start_operator(sim_cluster, config=SLOW_FAILOVER)
    try:
        await create_and_wait_running(first, tfjob("resume", workers=3, restart_policy="ExitCode"), running=3)
        await fail_over_once(first, "resume", 1)  # replaced at once; the next failover backs off
        before = uids(await first.pods("resume"))
        await annotate_pod(first, "resume-worker-1", {EXIT_CODE: "137"})

        async def waiting_for_backoff() -> dict | None:
            job = await first.job("resume")
            record = worker_record(job, 1)
            gone = "resume-worker-1" not in by_name(await first.pods("resume"))
            return record if gone and record and record["state"] == "Replacing" else None

        record = await eventually(waiting_for_backoff, what="worker 1 deleted and waiting for its back-off")
        assert record["failovers"] == 2 and record["lastReason"] == "OOMKilled"
        retry_after = parse(record["retryAfter"])
        assert time.time() < retry_after, "the test needs the restart to land inside the back-off"
    finally:
        await stop_cleanly(first)

    mark = faults.mark()
    second = await start_operator(sim_cluster, config=SLOW_FAILOVER)
    try:

        async def replaced() -> bool:
            pods = by_name(running_pods(await second.pods("resume")))
            return "resume-worker-1" in pods and pods["resume-worker-1"]["metadata"]["uid"] != before["resume-worker-1"]

        await eventually(replaced, timeout=30.0, what="the new controller creating the replacement after the back-off")
        assert time.time() >= retry_after, "the back-off decided before the restart must be honoured"
        assert faults.count("create", "pods", since=mark) == 1, "exactly one replacement, no duplicate"
        pods = await second.pods("resume")
        assert [p["metadata"]["name"] for p in pods] == ["resume-worker-0", "resume-worker-1", "resume-worker-2"]
        assert uids(pods)["resume-worker-0"] == before["resume-worker-0"]
        assert uids(pods)["resume-worker-2"] == before["resume-worker-2"]
        job = await second.job("resume")
        assert is_true(job, "Running") and condition(job, "Failed") is None and condition(job, "Restarting") is None
        record = worker_record(job, 1)
        assert record["failovers"] == 2 and record["state"] == "Replaced", record
        assert (
            second.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": "OOMKilled"}) == 0
        ), "the restarted controller must not count the same failover again"
        assert (
            second.metric(
                "training_operator_jobs_created_total", {"job_namespace": "default", "framework": "tensorflow"}
            )
            == 0
        ), "a restart must not count existing jobs as created again (quirk Q11)"

        # The next failure of the same worker continues the crash-loop history: back-off doubles.
        await annotate_pod(second, "resume-worker-1", {EXIT_CODE: "137"})

        async def third_failover() -> dict | None:
            record = worker_record(await second.job("resume"), 1)
            return record if record and record["failovers"] == 3 else None

        record = await eventually(third_failover, what="the third failover of worker 1")
        delay = parse(record["retryAfter"]) - parse(record["lastFailoverTime"])
        assert 16 <= delay <= 17, f"third failover's back-off should be 16 s (8 s doubled), got {delay}"
        messages = [e["message"] for e in await second.events("resume") if e["reason"] == "WorkerFailover"]
        assert any("16s back-off (failover 3)" in m for m in messages), messages
    finally:
        await stop_cleanly(second)


async def test_restart_while_the_failed_pod_terminates_counts_one_failover(sim_cluster: SimCluster) -> None:
    """The first controller deletes the failed worker; a finalizer keeps the pod terminating while
    the controller is replaced. The new one must neither delete it again nor record a second
    failover, and must create exactly one replacement once the pod is gone."""
    faults = sim_cluster.faults
    first = await start_operator(sim_cluster)
    try:
        await create_and_wait_running(first, tfjob("term", workers=2, restart_policy="ExitCode"), running=2)
        old = uids(await first.pods("term"))["term-worker-0"]
        await first.client.patch(PODS, "term-worker-0", {"metadata": {"finalizers": [HOLD]}}, namespace="default")
        await annotate_pod(first, "term-worker-0", {EXIT_CODE: "143"})

        async def terminating() -> dict | None:
            pod = by_name(await first.pods("term")).get("term-worker-0")
            record = worker_record(await first.job("term"), 0)
            return (
                record
                if pod and pod["metadata"].get("deletionTimestamp") and record and record["state"] == "Replacing"
                else None
            )

        await eventually(terminating, what="the controller deleting the failed worker")
    finally:
        await stop_cleanly(first)

    mark = faults.mark()
    second = await start_operator(sim_cluster)
    try:
        await reconciled_once_more(second, "term")
        assert faults.count("create", "pods", since=mark) == 0, "no pod may take the name while the old one exists"
        record = worker_record(await second.job("term"), 0)
        assert record["failovers"] == 1 and record["state"] == "Replacing", record

        await second.client.patch(PODS, "term-worker-0", {"metadata": {"finalizers": None}}, namespace="default")

        async def replaced() -> bool:
            pods = by_name(running_pods(await second.pods("term")))
            return "term-worker-0" in pods and pods["term-worker-0"]["metadata"]["uid"] != old

        await eventually(replaced, what="worker 0 replaced by the new controller")
        assert faults.count("create", "pods", since=mark) == 1
        assert faults.count("delete", "pods", since=mark) == 0, "the terminating pod must not be deleted again"
        record = worker_record(await second.job("term"), 0)
        assert record["failovers"] == 1 and record["lastReason"] == "Error", record
        assert second.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": "Error"}) == 0
        assert [p["metadata"]["name"] for p in await second.pods("term")] == ["term-worker-0", "term-worker-1"]
    finally:
        await stop_cleanly(second)


async def test_restart_while_scaled_down_workers_terminate_counts_no_failover(sim_cluster: SimCluster) -> None:
    """Scaled-down workers still terminating when the controller is replaced are recognised as
    removed by us (their services went with them): no failover, no re-creation."""
    faults = sim_cluster.faults
    first = await start_operator(sim_cluster)
    try:
        await create_and_wait_running(first, tfjob("down", workers=3), running=3)
        faults.pause_kubelet()
        from controller.tfjob.executor import TFJOBS

        await first.client.patch(
            TFJOBS, "down", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}, namespace="default"
        )

        async def leaving() -> bool:
            pods = by_name(await first.pods("down"))
            services = [s["metadata"]["name"] for s in await first.services("down")]
            return all(
                pods[n]["metadata"].get("deletionTimestamp") for n in ("down-worker-1", "down-worker-2")
            ) and services == ["down-worker-0"]

        await eventually(leaving, what="workers 1 and 2 terminating, their services gone")
    finally:
        await stop_cleanly(first)

    mark = faults.mark()
    second = await start_operator(sim_cluster)
    try:
        await reconciled_once_more(second, "down")
        faults.resume_kubelet()

        async def gone() -> bool:
            return [p["metadata"]["name"] for p in await second.pods("down")] == ["down-worker-0"]

        await eventually(gone, what="the scaled-down workers gone")
        await reconciled_once_more(second, "down")
        assert faults.count("create", "pods", since=mark) == 0
        assert faults.count("delete", "pods", since=mark) == 0
        job = await second.job("down")
        assert is_true(job, "Running") and condition(job, "Failed") is None and condition(job, "Restarting") is None
        assert worker_record(job, 1) is None and worker_record(job, 2) is None
        assert (
            sum(
                second.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": r})
                for r in ("Deleted", "Evicted", "NodeLost", "Disrupted", "Error", "OOMKilled")
            )
            == 0
        )
    finally:
        faults.resume_kubelet()
        await stop_cleanly(second)


async def test_a_converged_job_costs_zero_writes_per_reconcile(sim_cluster: SimCluster) -> None:
    """On a converged cluster, reconciling a job makes zero API writes, also for a job that
    has been through a failover (its record and timers in place)."""
    faults = sim_cluster.faults
    operator = await start_operator(sim_cluster)
    try:
        await create_and_wait_running(operator, tfjob("calm", workers=2, restart_policy="ExitCode"), running=2)
        old = uids(await operator.pods("calm"))["calm-worker-0"]
        await annotate_pod(operator, "calm-worker-0", {EXIT_CODE: "137"})

        async def replaced() -> bool:
            job = await operator.job("calm")
            pods = by_name(running_pods(await operator.pods("calm")))
            return (
                "calm-worker-0" in pods
                and pods["calm-worker-0"]["metadata"]["uid"] != old
                and job["status"]["replicaStatuses"]["Worker"].get("active") == 2
            )

        await eventually(replaced, what="worker 0 replaced and counted active")
        await reconciled_once_more(operator, "calm")

        for _ in range(3):
            mark = faults.mark()
            await reconciled_once_more(operator, "calm")
            writes = [r for r in faults.requests(mark) if r.verb in ("create", "update", "patch", "delete")]
            ours = [r for r in writes if not (r.verb == "patch" and r.resource == "tfjobs.kubeflow.org")]
            assert ours == [], [(r.verb, r.resource, r.name) for r in ours]
    finally:
        await stop_cleanly(operator)


async def test_an_api_server_restart_during_a_failover_creates_one_replacement(sim_cluster: SimCluster) -> None:
    """Every connection drops (watches end, requests in flight fail) right after a worker fails; the
    informers relist and the controller still makes exactly one replacement."""
    faults = sim_cluster.faults
    operator = await start_operator(sim_cluster)
    try:
        await create_and_wait_running(operator, tfjob("blip", workers=2, restart_policy="ExitCode"), running=2)
        old = uids(await operator.pods("blip"))["blip-worker-1"]
        mark = faults.mark()
        await annotate_pod(operator, "blip-worker-1", {EXIT_CODE: "137"})
        await faults.restart_server()

        async def replaced() -> bool:
            pods = by_name(running_pods(await operator.pods("blip")))
            return "blip-worker-1" in pods and pods["blip-worker-1"]["metadata"]["uid"] != old

        await eventually(replaced, what="worker 1 replaced after the API server restart")
        await reconciled_once_more(operator, "blip")
        assert [p["metadata"]["name"] for p in await operator.pods("blip")] == ["blip-worker-0", "blip-worker-1"]
        created = [r for r in faults.requests(mark, verb="create", resource="pods") if r.code == 201]
        assert len(created) == 1, [(r.code, r.fault) for r in faults.requests(mark, verb="create", resource="pods")]
        record = worker_record(await operator.job("blip"), 1)
        assert record["failovers"] == 1, record
        assert operator.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": "OOMKilled"}) == 1
    finally:
        await stop_cleanly(operator)
