"""Gang scheduling end to end: the controller with ``--gang-scheduler-name`` against the simulated cluster
serving both PodGroup CRDs (controller/sim/crds), plain and secure (the secure controller runs with the RBAC of
the mode's kustomize component, manifests/components/gang-*).

Without the flag the controller must behave exactly as before: not one PodGroup request, even with the CRDs
installed (the simulator's request log).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from controller.runtime.client import PODS, Resource
from controller.runtime.errors import NotFound
from controller.sim.cluster import SimCluster, SimConfig
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    Operator,
    conditions,
    create_and_wait_running,
    event_reasons,
    eventually,
    is_true,
    reconciled_once_more,
    refused,
    running_pods,
    start_operator,
    tfjob,
)

VOLCANO_PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups")
PLUGINS_PODGROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups")
GANG_GROUPS = ("scheduling.volcano.sh", "scheduling.x-k8s.io")


@pytest.fixture(params=["plain", "secure"])
def sim_config(request: pytest.FixtureRequest) -> SimConfig:
    return gang_config(request.param == "secure")


def gang_requests(cluster: SimCluster, since: int = 0) -> list[str]:
    """Every request that touched a gang scheduler's API group (discovery included)."""
    return [f"{r.method} {r.path}" for r in cluster.faults.requests(since)
            if any(group in r.path for group in GANG_GROUPS) or r.resource.startswith("podgroups")]


async def test_without_the_flag_the_controller_never_asks_for_pod_groups(operator: Operator) -> None:
    cluster = operator.cluster
    policy = {"schedulingPolicy": {"minAvailable": 3, "queue": "research", "priorityClass": "high"}}
    await create_and_wait_running(operator, tfjob("plain", workers=2, run_policy=policy), running=2)
    await operator.client.patch(TFJOBS, "plain", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}},
                                namespace="default")
    finishing = tfjob("done", workers=1, dynamic=False, run_policy={**policy, "ttlSecondsAfterFinished": 0},
                      annotations={"sim.tfjob.dev/run-seconds": "20"})
    await operator.client.create(TFJOBS, finishing, namespace="default")

    async def gone() -> bool:
        return not [j for j in (await operator.client.list(TFJOBS, namespace="default"))["items"]
                    if j["metadata"]["name"] == "done"]

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
    return SimConfig(nodes=3, time_scale=0.01, secure=secure, podgroup_crds=("volcano", "scheduler-plugins"),
                     kubelet_options={"node_cpu": NODE_CPU, "node_memory": "16Gi"})


@pytest.fixture(params=["volcano", "scheduler-plugins-scheduler"])
def scheduler(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def gang_operator(sim_cluster: SimCluster, scheduler: str) -> AsyncIterator[Operator]:
    op = await start_operator(sim_cluster, gang=scheduler)
    try:
        yield op
    finally:
        crashed = op.task is not None and op.task.done() and not op.task.cancelled()
        await op.stop()
        if crashed:
            raise AssertionError("the controller task ended during the test")
        assert not refused(sim_cluster), f"requests refused by RBAC: {refused(sim_cluster)}"


def gang_job(name: str, *, workers: int, ps: int = 0, dynamic: bool = False, cpu: str = NODE_CPU,
             run_policy: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    manifest = tfjob(name, workers=workers, ps=ps, dynamic=dynamic, run_policy=run_policy, annotations=annotations)
    for spec in manifest["spec"]["tfReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return manifest


def pod_groups_of(scheduler: str) -> Resource:
    return VOLCANO_PODGROUPS if scheduler == "volcano" else PLUGINS_PODGROUPS

