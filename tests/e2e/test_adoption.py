"""Adoption: the controller takes over TFJobs exactly as training-operator left them, replacing nothing.

Each test builds a cluster as training-operator v1.8 leaves it at the moment of the switch-over
(tests/e2e/training_operator.py: its pods, services, PodGroup and status, written with its field manager), then
starts the controller. Nothing may be replaced (pod, service and PodGroup uids unchanged, none deleted, none
created except where training-operator itself was about to create one), the conditions and ``startTime`` it wrote
stay, dynamic jobs get their dynamic-worker state without a restart, and failover, scale-down and completion work
afterwards. Static and dynamic jobs; Running, Restarting, and Succeeded under each ``cleanPodPolicy``; pods with and
without the ``job-role`` label; a Volcano gang.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.runtime.client import PODS, SERVICES, ApiClient
from controller.runtime.errors import NotFound
from controller.tfjob.executor import TFJOBS
from tests.e2e import training_operator as to
from tests.e2e.conftest import (
    Operator,
    annotate_pod,
    by_name,
    event_reasons,
    eventually,
    fail_over_once,
    install_tfjob_crd,
    live,
    reconciled_once_more,
    running_operator,
    tfjob,
    until_true,
)
from tests.e2e.test_gang import gang_config
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.kubelet import EXIT_CODE

# What adopting a job must never do (upstream's event reasons for our own writes).
REPLACING = ("SuccessfulCreatePod", "SuccessfulDeletePod", "SuccessfulCreateService", "SuccessfulDeleteService")


@pytest.fixture(autouse=True)
async def tfjob_crd(admin: ApiClient) -> None:
    """This project's TFJob CRD, installed before training-operator's objects are made."""
    await install_tfjob_crd(admin)


@pytest.fixture
async def training_operator(sim_cluster: SimCluster) -> AsyncIterator[ApiClient]:
    client = await to.client(sim_cluster)
    try:
        yield client
    finally:
        await client.close()


async def assert_adopted(op: Operator, before_job: dict[str, Any], before: dict[str, dict[str, Any]]) -> None:
    """The controller has looked at the job; nothing training-operator left was replaced, its record kept."""
    name = before_job["metadata"]["name"]
    await reconciled_once_more(op, name)
    after = await to.children(op.client, name)
    assert to.uids(after) == to.uids(before), "a pod or service was replaced"
    assert not [n for n, o in after.items() if o["metadata"].get("deletionTimestamp")]
    job = await op.job(name)
    old = {c["type"]: c for c in before_job["status"]["conditions"]}
    for cond in job["status"]["conditions"]:
        if cond["type"] in old:
            assert cond == old[cond["type"]], (cond, old[cond["type"]])
    assert set(old) <= {c["type"] for c in job["status"]["conditions"]}
    assert job["status"]["startTime"] == before_job["status"]["startTime"]
    assert not set(REPLACING) & set(event_reasons(await op.events(name)))


@pytest.mark.parametrize("job_role", [True, False], ids=["job-role", "no-job-role"])
async def test_a_running_static_job_is_adopted_and_completes(
    sim_cluster: SimCluster, admin: ApiClient, training_operator: ApiClient, job_role: bool
) -> None:
    manifest = tfjob("static", workers=2, ps=1, dynamic=False)
    job, before = await to.leave_running(admin, training_operator, manifest, job_role=job_role)
    async with running_operator(sim_cluster) as op:
        await assert_adopted(op, job, before)
        assert "dynamicWorkers" not in (await op.job("static"))["status"]
        # Worker 0 finishes: the job succeeds (no chief, default success policy), as under training-operator.
        await annotate_pod(op, "static-worker-0", {EXIT_CODE: "0"})
        done = await until_true(op, "static", "Succeeded", timeout=60, what="the adopted job to succeed")
        assert done["status"]["startTime"] == job["status"]["startTime"]


@pytest.mark.parametrize("job_role", [True, False], ids=["job-role", "no-job-role"])
async def test_a_running_dynamic_job_is_adopted_then_fails_over_scales_down_and_completes(
    sim_cluster: SimCluster, admin: ApiClient, training_operator: ApiClient, job_role: bool
) -> None:
    manifest = tfjob("dyn", workers=3, ps=1, dynamic=True)
    job, before = await to.leave_running(admin, training_operator, manifest, job_role=job_role)
    async with running_operator(sim_cluster) as op:
        await assert_adopted(op, job, before)
        # Its dynamic-worker state from the first pass, with no pod restarted for it: the membership is the workers
        # training-operator ran, and there is no failover to remember.
        dynamic = (await op.job("dyn"))["status"]["dynamicWorkers"]
        assert dynamic["members"] == [0, 1, 2] and dynamic["workers"] == {}, dynamic
        kept = to.uids(before)

        # A failover of an adopted worker: its pod deleted (an OOM kill would be restarted in place by the kubelet,
        # training-operator's pods run with restartPolicy OnFailure), replaced by a new pod of the same index.
        await fail_over_once(op, "dyn", 1, delete=True, timeout=60)
        now = to.uids(await to.children(op.client, "dyn"))
        assert now.pop("pod/dyn-worker-1") != kept.pop("pod/dyn-worker-1")
        assert now == kept, "a failover replaces the failed worker only"

        await op.client.patch(
            TFJOBS, "dyn", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2}}}}, namespace="default"
        )

        async def scaled_down() -> bool:
            return set(by_name(live(await op.pods("dyn")))) == {"dyn-ps-0", "dyn-worker-0", "dyn-worker-1"}

        await eventually(scaled_down, timeout=60, what="the scale-down to 2 workers")
        assert (await op.job("dyn"))["status"]["dynamicWorkers"]["members"] == [0, 1]
        assert to.uids(await to.children(op.client, "dyn"))["pod/dyn-worker-0"] == kept["pod/dyn-worker-0"]

        await annotate_pod(op, "dyn-worker-0", {EXIT_CODE: "0"})
        await until_true(op, "dyn", "Succeeded", timeout=60, what="the adopted dynamic job to succeed")


async def test_a_restarting_job_gets_its_restarted_pod_back_and_runs(
    sim_cluster: SimCluster, admin: ApiClient, training_operator: ApiClient
) -> None:
    """training-operator deleted worker-1 (a retryable exit under ExitCode) and set Restarting; the re-creation
    it was about to make is the controller's first write."""
    job = await admin.create(
        TFJOBS, tfjob("restart", workers=2, dynamic=False, restart_policy="ExitCode"), namespace="default"
    )
    await to.create_children(training_operator, job, skip=(("Worker", 1),))
    await to.pods_in(admin, "restart", {"restart-worker-0": "Running"})
    started = to.now()
    status = {
        "conditions": [to.created(job, started), to.restarting(job, "Worker", started)],
        "replicaStatuses": {"Worker": {"active": 1}},
        "startTime": started,
    }
    job = await to.write_status(training_operator, "restart", "default", status)
    before = await to.children(admin, "restart")
    async with running_operator(sim_cluster) as op:
        await to.pods_in(op.client, "restart", {"restart-worker-0": "Running", "restart-worker-1": "Running"})
        await until_true(op, "restart", "Running", what="Running again once both workers run")
        after = to.uids(await to.children(op.client, "restart"))
        assert {k: v for k, v in after.items() if k != "pod/restart-worker-1"} == to.uids(before)
        stored = await op.job("restart")
        assert stored["status"]["conditions"][0] == job["status"]["conditions"][0]  # Created, as written
        assert stored["status"]["startTime"] == started
        assert "Restarting" not in {c["type"] for c in stored["status"]["conditions"]}  # upstream's swap


@pytest.mark.parametrize("policy", ["None", "Running", "All"])
async def test_a_succeeded_job_stays_as_training_operator_cleaned_it(
    sim_cluster: SimCluster, admin: ApiClient, training_operator: ApiClient, policy: str
) -> None:
    manifest = tfjob("done", workers=2, ps=1, dynamic=False, run_policy={"cleanPodPolicy": policy})
    job = await admin.create(TFJOBS, manifest, namespace="default")
    await to.create_children(training_operator, job)
    await to.pods_in(admin, "done", {"done-ps-0": "Running", "done-worker-0": "Running", "done-worker-1": "Running"})
    for worker in ("done-worker-0", "done-worker-1"):
        await admin.patch(PODS, worker, {"metadata": {"annotations": {EXIT_CODE: "0"}}}, namespace="default")
    await to.pods_in(
        admin, "done", {"done-ps-0": "Running", "done-worker-0": "Succeeded", "done-worker-1": "Succeeded"}
    )
    # training-operator's cleanup of a finished job: the pods the policy names, with their same-named services.
    doomed = {"None": [], "Running": ["done-ps-0"], "All": ["done-ps-0", "done-worker-0", "done-worker-1"]}[policy]
    for name in doomed:
        await training_operator.delete(PODS, name, namespace="default", grace_period_seconds=0)
        await training_operator.delete(SERVICES, name, namespace="default")
    await eventually(lambda: _all_gone(admin, doomed), timeout=60, what=f"training-operator's cleanup under {policy}")
    started = to.now()
    status = {
        "conditions": [to.created(job, started), to.running(job, started, "False"), to.succeeded(job, started)],
        "replicaStatuses": {"Worker": {"succeeded": 2}, "PS": {"succeeded": 1}},
        "startTime": started,
        "completionTime": started,
    }
    job = await to.write_status(training_operator, "done", "default", status)
    before = await to.children(admin, "done")
    async with running_operator(sim_cluster) as op:
        await reconciled_once_more(op, "done")
        after = await to.children(op.client, "done")
        assert to.uids(after) == to.uids(before), "nothing re-created, nothing removed"
        stored = await op.job("done")
        assert stored["status"]["conditions"] == job["status"]["conditions"]
        assert stored["status"]["completionTime"] == started and stored["status"]["startTime"] == started
        assert not set(REPLACING) & set(event_reasons(await op.events("done")))


async def _all_gone(client: ApiClient, names: list[str]) -> bool:
    for name in names:
        try:
            await client.get(PODS, name, namespace="default")
            return False
        except NotFound:
            pass
    return True


class TestGang:
    @pytest.fixture(params=["plain", "secure"])
    def sim_config(self, request: pytest.FixtureRequest) -> SimConfig:
        return gang_config(request.param == "secure")

    async def test_a_gang_job_keeps_its_pod_group_and_pods_and_fails_over(
        self, sim_cluster: SimCluster, admin: ApiClient, training_operator: ApiClient
    ) -> None:
        manifest = tfjob("gang", workers=2, ps=1, dynamic=True)
        job, before = await to.leave_running(admin, training_operator, manifest, gang=True)
        group = await admin.get(to.VOLCANO_PODGROUPS, "gang", namespace="default")
        async with running_operator(sim_cluster, gang="volcano") as op:
            await assert_adopted(op, job, before)
            kept = await op.client.get(to.VOLCANO_PODGROUPS, "gang", namespace="default")
            assert kept["metadata"]["uid"] == group["metadata"]["uid"], "the PodGroup was replaced"
            await fail_over_once(op, "gang", 0, delete=True, timeout=60)
            replacement = by_name(await op.pods("gang"))["gang-worker-0"]
            assert replacement["spec"]["schedulerName"] == "volcano"
