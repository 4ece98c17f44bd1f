"""Gang scheduling end to end: the controller with ``--gang-scheduler-name`` against the simulated cluster
serving both PodGroup CRDs (sim/tfjob_sim/crds), plain and secure (the secure controller runs with the RBAC of
the mode's kustomize component, manifests/components/gang-*).

Without the flag the controller must behave exactly as before: not one PodGroup request, even with the CRDs
installed (the simulator's request log).

With ``--gang-scheduler-name volcano`` and ``scheduler-plugins-scheduler``, against the simulated gang schedulers
(docs/simulator.md) on three 4-CPU nodes: upstream's SDK case (an unsatisfiable ``minAvailable`` keeps the job
Created with no pod Running; lowering it lets it run and succeed), all-or-nothing (a gang of four one-node pods
on three nodes gets no node at all: refused at admission, and, when the total fits but the nodes do not, at
placement), a dynamic job scaling past free capacity and failing over without waiting for
the gang, suspend/resume and finish deleting the PodGroup, and the real kubectl listing PodGroups with their status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS, PODS, Resource
from controller.runtime.errors import NotFound
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    Operator,
    conditions,
    create_and_wait_running,
    eventually,
    is_true,
    reconciled_once_more,
    refused,
    running_operator,
    running_pods,
    start_operator,
    tfjob,
)
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.kubelet import RUN_SECONDS

VOLCANO_PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups")
PLUGINS_PODGROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups")
GANG_GROUPS = ("scheduling.volcano.sh", "scheduling.x-k8s.io")


@pytest.fixture(params=["plain", "secure"])
def sim_config(request: pytest.FixtureRequest) -> SimConfig:
    return gang_config(request.param == "secure")


def gang_requests(cluster: SimCluster, since: int = 0) -> list[str]:
    """Every request that touched a gang scheduler's API group (discovery included)."""
    return [
        f"{r.method} {r.path}"
        for r in cluster.faults.requests(since)
        if any(group in r.path for group in GANG_GROUPS) or r.resource.startswith("podgroups")
    ]


async def test_without_the_flag_the_controller_never_asks_for_pod_groups(operator: Operator) -> None:
    cluster = operator.cluster
    policy = {"schedulingPolicy": {"minAvailable": 3, "queue": "research", "priorityClass": "high"}}
    await create_and_wait_running(operator, tfjob("plain", workers=2, run_policy=policy), running=2)
    await operator.client.patch(
        TFJOBS, "plain", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}}, namespace="default"
    )
    finishing = tfjob(
        "done",
        workers=1,
        dynamic=False,
        run_policy={**policy, "ttlSecondsAfterFinished": 0},
        annotations={RUN_SECONDS: "20"},
    )
    await operator.client.create(TFJOBS, finishing, namespace="default")

    async def gone() -> bool:
        return not [
            j
            for j in (await operator.client.list(TFJOBS, namespace="default"))["items"]
            if j["metadata"]["name"] == "done"
        ]

    await eventually(gone, timeout=60, what="the finished job deleted by its TTL")

    async def scaled() -> bool:
        pods = [p for p in await operator.pods("plain") if p["status"].get("phase") == "Running"]
        return len(pods) == 3

    await eventually(scaled, timeout=60, what="the scale-up")
    assert is_true(await operator.job("plain"), "Running")
    for pod in await operator.pods("plain"):
        assert "schedulerName" not in pod["spec"] or pod["spec"]["schedulerName"] == "default-scheduler"
        assert not any(key.startswith(("scheduling.", "volcano.")) for key in pod["metadata"].get("annotations") or {})
    assert gang_requests(cluster) == []
    assert operator.controller.pod_groups is None


# --- with a gang scheduler ------------------------------------------------------------------------------------
# Three nodes of 4 CPUs; every pod of these jobs asks for 4 (a node each), so capacity is counted in pods.
NODE_CPU = "4"


def gang_config(secure: bool) -> SimConfig:
    return SimConfig(
        nodes=3,
        time_scale=0.01,
        secure=secure,
        podgroup_crds=("volcano", "scheduler-plugins"),
        kubelet_options={"node_cpu": NODE_CPU, "node_memory": "16Gi"},
    )


@pytest.fixture(params=["volcano", "scheduler-plugins-scheduler"])
def scheduler(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def gang_operator(sim_cluster: SimCluster, scheduler: str) -> AsyncIterator[Operator]:
    try:
        async with running_operator(sim_cluster, gang=scheduler) as op:
            yield op
    finally:
        assert not sim_cluster.kubelet.listener_failures, sim_cluster.kubelet.listener_failures


def gang_job(
    name: str,
    *,
    workers: int,
    ps: int = 0,
    dynamic: bool = False,
    cpu: str = NODE_CPU,
    run_policy: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    manifest = tfjob(name, workers=workers, ps=ps, dynamic=dynamic, run_policy=run_policy, annotations=annotations)
    for spec in manifest["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return manifest


def pod_groups_of(scheduler: str) -> Resource:
    return VOLCANO_PODGROUPS if scheduler == "volcano" else PLUGINS_PODGROUPS


async def pod_group(operator: Operator, scheduler: str, name: str) -> dict[str, Any]:
    return await operator.client.get(pod_groups_of(scheduler), name, namespace="default")


async def absent(operator: Operator, scheduler: str, name: str) -> bool:
    try:
        await pod_group(operator, scheduler, name)
    except NotFound:
        return True
    return False


async def assert_nothing_runs(operator: Operator, name: str) -> None:
    """The job stays Created with no pod Running, after the controller looked at it once more."""
    await reconciled_once_more(operator, name)
    job = await operator.job(name)
    assert is_true(job, "Created") and not is_true(job, "Running"), conditions(job)
    assert running_pods(await operator.pods(name)) == []


async def scheduler_looked(operator: Operator, name: str, pods: int, proof: str) -> list[dict[str, Any]]:
    """Wait until the gang scheduler has judged all ``pods`` of the job and said so (PodScheduled False
    with ``proof`` in at least one message), so that "no pod has a node" is a verdict, not a race."""

    async def judged() -> list[dict[str, Any]] | None:
        found = await operator.pods(name)
        verdicts = [
            next((c for c in p["status"].get("conditions") or [] if c.get("type") == "PodScheduled"), None)
            for p in found
        ]
        if len(found) != pods or any(v is None or v.get("status") != "False" for v in verdicts):
            return None
        return found if any(proof in (v or {}).get("message", "") for v in verdicts) else None

    return await eventually(judged, timeout=60, what=f"the gang scheduler's verdict on {name} ({proof!r})")


def events_of(events: list[dict[str, Any]], reason: str) -> list[dict[str, Any]]:
    return [e for e in events if e["reason"] == reason]


def once(events: list[dict[str, Any]], reason: str) -> bool:
    """One event of ``reason``, emitted once: the recorder folds repeats into one Event's ``count``."""
    found = events_of(events, reason)
    return len(found) == 1 and found[0].get("count", 1) == 1


async def test_an_unschedulable_min_available_keeps_the_job_created_until_it_is_lowered(
    gang_operator: Operator, scheduler: str
) -> None:
    # Upstream's SDK e2e (sdk/python/test/e2e/test_e2e_tfjob.py): one worker, minAvailable 10.
    manifest = gang_job(
        "gang",
        workers=1,
        cpu="1",
        run_policy={"schedulingPolicy": {"minAvailable": 10}},
        annotations={RUN_SECONDS: "30"},
    )
    await gang_operator.client.create(TFJOBS, manifest, namespace="default")
    group = await eventually(lambda: pod_group(gang_operator, scheduler, "gang"), what="the job's PodGroup")
    assert group["spec"]["minMember"] == 10
    if scheduler != "volcano":  # scheduler-plugins gets the pod and must refuse it (Volcano: no pod at all)
        [pod] = await scheduler_looked(gang_operator, "gang", 1, "minMember of group: 10")
        assert not pod["spec"].get("nodeName")
    for _ in range(3):  # upstream checks three times, 5 s apart; we check after three more passes
        await assert_nothing_runs(gang_operator, "gang")

    await gang_operator.client.patch(
        TFJOBS, "gang", {"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 1}}}}, namespace="default"
    )

    async def succeeded() -> bool:
        return is_true(await gang_operator.job("gang"), "Succeeded")

    await eventually(succeeded, timeout=60, what="the job to run and succeed once minAvailable is 1")
    [pod] = await gang_operator.pods("gang")
    assert pod["spec"]["schedulerName"] == scheduler
    if scheduler == "volcano":
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "gang"
        assert pod["metadata"]["annotations"]["volcano.sh/task-spec"] == "worker"
    else:
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "gang"
    await eventually(lambda: absent(gang_operator, scheduler, "gang"), what="the finished job's PodGroup deleted")
    events = await gang_operator.events("gang")
    assert once(events, "JobTerminated") and once(events, "SuccessfulDeletePodGroup"), events


async def test_capacity_for_part_of_a_gang_schedules_none_of_it(gang_operator: Operator, scheduler: str) -> None:
    # Four pods of a node each on three nodes: none of them runs, not three.
    await gang_operator.client.create(TFJOBS, gang_job("big", workers=4), namespace="default")
    await eventually(lambda: pod_group(gang_operator, scheduler, "big"), what="the job's PodGroup")
    assert any("/podgroups" in r for r in gang_requests(gang_operator.cluster))  # what the plain test looks for
    await assert_nothing_runs(gang_operator, "big")
    if scheduler == "volcano":
        # Volcano never admits a group whose minResources exceed the cluster: no pod is even created.
        assert await gang_operator.pods("big") == []
        assert (await pod_group(gang_operator, scheduler, "big")).get("status", {}).get("phase", "") in ("", "Pending")
        assert "lastReconcileTime" in (await gang_operator.job("big"))["status"]
    else:
        pods = await scheduler_looked(gang_operator, "big", 4, "resource gap")  # PreFilter: minResources
        assert all(not p["spec"].get("nodeName") for p in pods)
    # Three pods fit: the same job scaled down to three runs.
    await gang_operator.client.patch(
        TFJOBS, "big", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}}, namespace="default"
    )

    async def running() -> bool:
        return (
            is_true(await gang_operator.job("big"), "Running")
            and len(running_pods(await gang_operator.pods("big"))) == 3
        )

    await eventually(running, timeout=60, what="the three-worker gang to run")
    assert (await pod_group(gang_operator, scheduler, "big"))["spec"]["minMember"] == 3


async def test_a_dynamic_job_scales_up_past_free_capacity_without_blocking_its_workers(
    gang_operator: Operator, scheduler: str
) -> None:
    await create_and_wait_running(gang_operator, gang_job("dyn", workers=2, dynamic=True), running=2)
    assert (await pod_group(gang_operator, scheduler, "dyn"))["spec"]["minMember"] == 2
    # Two more workers, room for one: the one that fits runs, the other waits alone.
    await gang_operator.client.patch(
        TFJOBS, "dyn", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}}}, namespace="default"
    )

    async def three_running() -> bool:
        pods = await gang_operator.pods("dyn")
        return len(pods) == 4 and len(running_pods(pods)) == 3

    await eventually(three_running, timeout=60, what="the worker that fits to run")
    await reconciled_once_more(gang_operator, "dyn")
    job = await gang_operator.job("dyn")
    assert is_true(job, "Running")
    assert (await pod_group(gang_operator, scheduler, "dyn"))["spec"]["minMember"] == 2  # the gang did not grow
    [waiting] = [p for p in await gang_operator.pods("dyn") if p["status"].get("phase") != "Running"]
    assert not waiting["spec"].get("nodeName")

    # A failed-over worker's replacement is not held behind the gang either. Back to exactly the capacity
    # first (the waiting worker goes), so the freed node can only be taken by the replacement.
    await gang_operator.client.patch(
        TFJOBS, "dyn", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}}, namespace="default"
    )

    async def three_of_three() -> bool:
        pods = await gang_operator.pods("dyn")
        return len(pods) == 3 and len(running_pods(pods)) == 3

    await eventually(three_of_three, timeout=60, what="the waiting worker scaled away")
    victim = next(p for p in running_pods(await gang_operator.pods("dyn")) if p["metadata"]["name"].endswith("-1"))
    victim_meta = victim["metadata"]
    await gang_operator.client.delete(PODS, victim_meta["name"], namespace="default", grace_period_seconds=0)

    async def replaced() -> bool:
        pods = {p["metadata"]["name"]: p for p in running_pods(await gang_operator.pods("dyn"))}
        new = pods.get(victim_meta["name"])
        return len(pods) == 3 and new is not None and new["metadata"]["uid"] != victim_meta["uid"]

    await eventually(replaced, timeout=60, what="the failed-over worker's replacement (same name, new uid) running")

    # Scaling down lowers the gang to what remains.
    await gang_operator.client.patch(
        TFJOBS, "dyn", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}, namespace="default"
    )

    async def shrunk() -> bool:
        return (await pod_group(gang_operator, scheduler, "dyn"))["spec"]["minMember"] == 1

    await eventually(shrunk, what="minMember lowered by the scale-down")


async def test_a_gang_that_fits_in_total_but_not_node_by_node_gets_no_node_at_all(
    gang_operator: Operator, scheduler: str, kubectl: Any
) -> None:
    # Four workers of 3.5 CPUs on three 4-CPU nodes: 14 CPUs fit the cluster's 12 x 1.2 (Volcano admits the
    # group; scheduler-plugins gets no minResources, so PreFilter passes), but only three fit the nodes.
    # Volcano's allocate places three and discards its statement; Coscheduling's Permit holds three and
    # PostFilter rejects the group. No partial bind, with the controller in the loop.
    policy = {"schedulingPolicy": {"minResources": {}}} if scheduler != "volcano" else None
    await gang_operator.client.create(
        TFJOBS, gang_job("tight", workers=4, cpu="3500m", run_policy=policy), namespace="default"
    )
    proof = "can possibly be assigned to" if scheduler == "volcano" else "gets rejected due to Pod"
    pods = await scheduler_looked(gang_operator, "tight", 4, proof)
    assert all(not p["spec"].get("nodeName") for p in pods), [p["spec"].get("nodeName") for p in pods]
    await assert_nothing_runs(gang_operator, "tight")
    assert all(not p["spec"].get("nodeName") for p in await gang_operator.pods("tight"))

    # What the user looks at: kubectl lists the waiting group with its phase.
    expected = "Inqueue" if scheduler == "volcano" else "Scheduling"

    async def kubectl_shows_it_waiting() -> bool:
        rc, out, err = await kubectl(
            "get",
            pod_groups_of(scheduler).qualified,
            "tight",
            "-o",
            "custom-columns=NAME:.metadata.name,PHASE:.status.phase,MIN:.spec.minMember",
        )
        assert rc == 0, err
        return out.split("\n")[1].split() == ["tight", expected, "4"]

    await eventually(kubectl_shows_it_waiting, timeout=30, what=f"kubectl to list the PodGroup {expected}")


async def test_suspend_deletes_the_pod_group_and_resume_gets_a_new_one(
    gang_operator: Operator, scheduler: str, kubectl: Any
) -> None:
    await create_and_wait_running(gang_operator, gang_job("pause", workers=2), running=2)
    first = await pod_group(gang_operator, scheduler, "pause")
    resource = pod_groups_of(scheduler).qualified

    async def kubectl_shows_it_running() -> bool:
        # The scheduler's status update may follow the pods' start by a cycle.
        rc, out, err = await kubectl(
            "get", resource, "-o", "custom-columns=NAME:.metadata.name,PHASE:.status.phase,MIN:.spec.minMember"
        )
        assert rc == 0, err
        assert out.split("\n")[1].split() == ["pause", "Running", "2"], out
        if scheduler == "volcano":  # Volcano's CRD prints its status and minMember itself
            rc, out, err = await kubectl("get", resource)
            assert rc == 0, err
            header, row = out.strip().split("\n")
            assert header.split()[:3] == ["NAME", "STATUS", "MINMEMBER"], out
            assert row.split()[:3] == ["pause", "Running", "2"], out
        return True

    await eventually(kubectl_shows_it_running, timeout=30, what="kubectl to list the Running PodGroup")

    await gang_operator.client.patch(TFJOBS, "pause", {"spec": {"runPolicy": {"suspend": True}}}, namespace="default")
    await eventually(lambda: absent(gang_operator, scheduler, "pause"), what="the suspended job's PodGroup deleted")
    events = await gang_operator.events("pause")
    assert once(events, "JobTerminated") and once(events, "SuccessfulDeletePodGroup"), events
    rc, out, err = await kubectl("get", resource)
    assert rc == 0 and "pause" not in out, out + err

    await gang_operator.client.patch(TFJOBS, "pause", {"spec": {"runPolicy": {"suspend": False}}}, namespace="default")

    async def resumed() -> bool:
        job = await gang_operator.job("pause")
        return not is_true(job, "Suspended") and len(running_pods(await gang_operator.pods("pause"))) == 2

    await eventually(resumed, timeout=60, what="the resumed job's pods to run")
    second = await pod_group(gang_operator, scheduler, "pause")
    assert second["metadata"]["uid"] != first["metadata"]["uid"]


async def test_upstreams_ci_setup_flag_scheduler_plugins_with_the_scheduler_named_in_the_templates(
    sim_cluster: SimCluster,
) -> None:
    # training-operator's CI runs `--gang-scheduler-name=scheduler-plugins` with templates naming the real scheduler,
    # `scheduler-plugins-scheduler`: the template's name is kept, with a warning per pod.
    operator = await start_operator(sim_cluster, gang="scheduler-plugins")
    try:
        manifest = gang_job("ci", workers=2, cpu="1", run_policy={"schedulingPolicy": {"minAvailable": 2}})
        for spec in manifest["spec"]["tfReplicaSpecs"].values():
            spec["template"]["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
        await create_and_wait_running(operator, manifest, running=2)
        for pod in await operator.pods("ci"):
            assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
            assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "ci"
        group = await operator.client.get(PLUGINS_PODGROUPS, "ci", namespace="default")
        assert group["spec"] == {"minMember": 2, "minResources": {"cpu": "2"}}
        [warning] = [e for e in await operator.events("ci") if e["reason"] == "SetPodTemplateSchedulerName"]
        assert warning["type"] == "Warning" and warning.get("count", 1) == 2  # one per pod created, aggregated
        assert warning["message"] == (
            "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten"
        )
        assert operator.task is not None and not operator.task.done(), "the controller task ended"
    finally:
        await operator.stop()
    assert not refused(sim_cluster), refused(sim_cluster)


async def test_a_pod_group_crd_removed_at_run_time_is_named_to_the_user_and_no_pod_is_created(
    gang_operator: Operator, scheduler: str
) -> None:
    # The start-up check passed; then the CRD goes (the scheduler uninstalled). A new job must say why it
    # waits, naming the CRD, and get no pod outside a gang.
    crd = f"podgroups.{pod_groups_of(scheduler).group}"
    await gang_operator.client.delete(CUSTOM_RESOURCE_DEFINITIONS, crd)

    async def crd_gone() -> bool:
        try:
            await gang_operator.client.get(CUSTOM_RESOURCE_DEFINITIONS, crd)
        except NotFound:
            return True
        return False

    await eventually(crd_gone, what=f"the CRD {crd} deleted")
    await gang_operator.client.create(TFJOBS, gang_job("orphan", workers=2, cpu="1"), namespace="default")

    async def warned() -> list[dict[str, Any]]:
        return events_of(await gang_operator.events("orphan"), "FailedCreatePodGroup")

    [warning] = await eventually(warned, timeout=30, what="the FailedCreatePodGroup warning")
    assert warning["type"] == "Warning"
    assert warning["message"].startswith(
        f"Error creating PodGroup default/orphan: the PodGroup CRD {crd} is not installed: "
    ), warning["message"]
    await reconciled_once_more(gang_operator, "orphan")
    job = await gang_operator.job("orphan")
    assert is_true(job, "Created") and "lastReconcileTime" in job["status"] and "startTime" not in job["status"]
    assert await gang_operator.pods("orphan") == []
