"""Two controllers on one TFJob are never silent and never fight (controller/tfjob/foreign.py).

A second controller writes as training-operator does (its User-Agent, so its field manager ``manager``): it keeps
rewriting a managed job's status (without ``dynamicWorkers``, as its types have none), or creates a pod the job does
not want (as training-operator fills every index below ``replicas``). The controller must say so (a Warning event
naming ``manager``, ``tfjob_foreign_writes_total``), must not answer write for write (bounded writes: the
simulator's request log, by User-Agent), and must take the job back once the other controller is quiet.
"""

from __future__ import annotations

from typing import Any

from controller.runtime.client import PODS, ApiClient
from controller.runtime.errors import Conflict
from controller.tfjob.executor import TFJOBS
from tests.e2e import training_operator as to
from tests.e2e.conftest import (
    Operator,
    by_name,
    create_and_wait_running,
    eventually,
    install_tfjob_crd,
    reconciled_once_more,
    running_operator,
    tfjob,
    worker_record,
)
from tfjob_sim.cluster import SimCluster

# Seconds the controller leaves a contested job alone (300 in production): long enough that the checks of
# "left alone" below, on a busy machine, are done before it ends.
HOLD = 10.0


def our_writes(cluster: SimCluster, since: int, job: str) -> list[str]:
    """This controller's writes about ``job`` (its status, its pods, its services)."""
    return [
        f"{r.method} {r.path}"
        for r in cluster.faults.requests(since)
        if r.user_agent.startswith("tfjob-controller/")
        and r.method in ("POST", "PUT", "PATCH", "DELETE")
        and r.resource != "events"
        and (r.name or "").startswith(job)
    ]


def foreign_writer_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["reason"] == "ForeignWriter" and e["type"] == "Warning"]


async def test_a_second_controller_rewriting_the_status_gets_a_warning_and_no_write_war(operator: Operator) -> None:
    operator.controller.foreign.hold = HOLD
    cluster = operator.cluster
    await create_and_wait_running(operator, tfjob("war", workers=2), running=2)
    await eventually(lambda: _has_records(operator), what="our status with dynamicWorkers")
    mark = cluster.faults.mark()
    other = await to.client(cluster)
    try:
        # training-operator's status for this job, rewritten each time it differs from what it wants (as its
        # reconciler does on every event), 20 times: its lastReconcileTime moves so that each is a real write.
        job = await operator.job("war")
        for round_ in range(20):
            status = {
                "conditions": [to.created(job, job["status"]["startTime"]), to.running(job, to.now())],
                "replicaStatuses": {"Worker": {"active": 2}},
                "startTime": job["status"]["startTime"],
                "lastReconcileTime": f"2024-01-01T00:00:{round_:02d}Z",
            }
            await _write_retrying(other, status)  # as its reconciler does: a 409 is retried on a fresh read
        # Every foreign write is seen; the contest is told once, naming the other writer.
        await eventually(
            lambda: operator.metric("tfjob_foreign_writes_total", {"job_namespace": "default", "write": "status"}) >= 1,
            what="the foreign status writes counted",
        )
        events = foreign_writer_events(await operator.events("war"))
        assert len(events) == 1 and '"manager"' in events[0]["message"], events
        assert "status" in events[0]["message"]
        # Bounded: while the other controller wrote 20 times, ours answered at most the pass already under way
        # (measured: none; without the hold, one status write per foreign write).
        assert len(our_writes(cluster, mark, "war")) <= 2, our_writes(cluster, mark, "war")
        stored = await operator.job("war")
        assert "dynamicWorkers" not in stored["status"], "the other controller's status stands while contested"
    finally:
        await other.close()
    # Quiet for the hold period: the controller takes the job back (its status, dynamicWorkers included).
    await eventually(lambda: _has_records(operator), timeout=HOLD + 20, what="the controller writing the status again")


async def _write_retrying(other: ApiClient, status: dict[str, Any]) -> None:
    for _ in range(50):
        try:
            await to.write_status(other, "war", "default", status)
            return
        except Conflict:
            continue
    raise AssertionError("the other controller could not write the status 50 times in a row")


async def _has_records(operator: Operator) -> bool:
    status = (await operator.job("war")).get("status") or {}
    return "dynamicWorkers" in status


async def test_a_second_controller_creating_pods_is_named_and_not_fought(operator: Operator) -> None:
    operator.controller.foreign.hold = HOLD
    cluster = operator.cluster
    job = await create_and_wait_running(operator, tfjob("fill", workers=2), running=2)
    mark = cluster.faults.mark()
    other = await to.client(cluster)
    try:
        # The other controller creates a worker this job does not want (index 2 of 2 replicas).
        await other.create(PODS, to.pod(job, "Worker", 2), namespace="default")
    finally:
        await other.close()
    await eventually(
        lambda: operator.metric("tfjob_foreign_writes_total", {"job_namespace": "default", "write": "pod"}) == 1,
        what="the foreign pod counted",
    )
    events = foreign_writer_events(await operator.events("fill"))
    assert len(events) == 1 and '"manager"' in events[0]["message"] and "fill-worker-2" in events[0]["message"]
    # Left alone while contested: the unwanted pod is not deleted at once.
    assert "fill-worker-2" in by_name(await operator.pods("fill"))
    assert our_writes(cluster, mark, "fill") == []
    # Once the hold is over the controller acts on the job again and removes the pod it does not want.
    await eventually(
        lambda: _gone(operator, "fill", "fill-worker-2"), timeout=HOLD + 20, what="the unwanted pod removed"
    )
    assert worker_record(await operator.job("fill"), 2) is None


async def _gone(operator: Operator, job: str, pod: str) -> bool:
    pods = by_name(await operator.pods(job))
    return pod not in pods or bool(pods[pod]["metadata"].get("deletionTimestamp"))


async def test_a_job_status_written_before_the_controller_started_is_no_contest(sim_cluster: SimCluster) -> None:
    """What training-operator wrote before the switch-over is history: adopting its jobs raises nothing."""
    other = await to.client(sim_cluster)
    try:
        await install_tfjob_crd(other)
        job = await other.create(TFJOBS, tfjob("old", workers=1), namespace="default")
        await to.write_status(other, "old", "default", {"conditions": [to.created(job, to.now())]})
    finally:
        await other.close()
    async with running_operator(sim_cluster) as op:
        await eventually(lambda: _running_or_created(op), what="the adopted job reconciled")
        await reconciled_once_more(op, "old")  # every pass over it so far is done, its observations counted
        assert op.metric("tfjob_foreign_writes_total", {"job_namespace": "default", "write": "status"}) == 0
        assert foreign_writer_events(await op.events("old")) == []


async def _running_or_created(op: Operator) -> bool:
    return bool(await op.pods("old"))
