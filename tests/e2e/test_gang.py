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

from controller.runtime.client import Resource
from controller.sim.cluster import SimCluster, SimConfig
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    Operator,
    create_and_wait_running,
    eventually,
    is_true,
    refused,
    start_operator,
    tfjob,
)

VOLCANO_PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups")
PLUGINS_PODGROUPS = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups")
GANG_GROUPS = ("scheduling.volcano.sh", "scheduling.x-k8s.io")


@pytest.fixture(params=["plain", "secure"])
def sim_config(request: pytest.FixtureRequest) -> SimConfig:
    return SimConfig(nodes=3, time_scale=0.01, secure=request.param == "secure",
                     podgroup_crds=("volcano", "scheduler-plugins"))


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
