"""Least privilege under real authorization: the simulator's secure mode (TLS, ServiceAccount tokens from
the TokenRequest API, RBAC with kube-apiserver's 403s), the install applied with ``kubectl apply -k``.

- The controller, authenticated as the manifests' ServiceAccount (tfjob-controller/tfjob-controller),
  goes through the representative run of tests/e2e/test_rbac.py (two replicas, failover, scale-down,
  TTL deletion, Lease release) without a single 403, and uses exactly what its roles grant.
- Each rule of its ClusterRole and Role, removed in turn: the controller then fails with an error that
  names a verb and resource of that rule (the permission it lacks). The one exception is
  ``update tfjobs/finalizers``, which no request of ours uses: only the OwnerReferencesPermissionEnforcement
  admission plugin checks it, and the simulator does not run that plugin (docs/rbac.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.runtime.client import ApiClient, Resource
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import eventually, tfjob
from tests.e2e.test_rbac import (
    GANG_MODES,
    RBAC,
    assert_gang_used_equals_granted,
    assert_used_equals_granted,
    gang_run,
    install_pod_group_crds,
    representative_run,
)
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.processes import ControllerProcess

CONTROLLER_NAMESPACE = SERVICE_ACCOUNT = "tfjob-controller"
MANIFESTS = RBAC.parent
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles")


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=3, time_scale=0.01, secure=True)


async def install(kubectl: Any) -> None:
    rc, _, err = await kubectl("apply", "-k", str(MANIFESTS), timeout=120)
    assert rc == 0, err


def service_account_kubeconfig(cluster: SimCluster, tmp_path: Path) -> str:
    return cluster.service_account_kubeconfig(tmp_path / "sa.kubeconfig", CONTROLLER_NAMESPACE, SERVICE_ACCOUNT)


def rules(kind: str) -> list[dict[str, Any]]:
    name = "cluster_role.yaml" if kind == "ClusterRole" else "leader_election_role.yaml"
    return yaml.safe_load((RBAC / name).read_text())["rules"]


async def test_the_controller_runs_under_its_service_account_without_a_403(
    sim_cluster: SimCluster, kubectl: Any, tmp_path: Path
) -> None:
    await install(kubectl)
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, user_agent="rbac-test")
    try:
        await representative_run(
            sim_cluster, client, service_account_kubeconfig(sim_cluster, tmp_path), CONTROLLER_NAMESPACE
        )
    finally:
        await client.close()
    assert list(sim_cluster.server.auth.forbidden_log) == []
    assert_used_equals_granted(sim_cluster)


CASES = [
    ("ClusterRole", i) for i, rule in enumerate(rules("ClusterRole")) if rule["resources"] != ["tfjobs/finalizers"]
]
CASES += [("Role", i) for i in range(len(rules("Role")))]


@pytest.mark.parametrize("kind, index", CASES, ids=[f"{k}-{'+'.join(rules(k)[i]['resources'])}" for k, i in CASES])
async def test_without_a_rule_the_controller_fails_naming_the_missing_permission(
    sim_cluster: SimCluster, kubectl: Any, tmp_path: Path, kind: str, index: int
) -> None:
    await install(kubectl)
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, user_agent="rbac-test")
    try:
        resource, namespace = (CLUSTER_ROLES, None) if kind == "ClusterRole" else (ROLES, CONTROLLER_NAMESPACE)
        name = "tfjob-controller" if kind == "ClusterRole" else "tfjob-controller-leader-election"
        role = await client.get(resource, name, namespace=namespace)
        removed = role["rules"].pop(index)
        await client.replace(resource, role, namespace=namespace)
        missing = {
            (verb, group, res)
            for verb in removed["verbs"]
            for group in removed["apiGroups"]
            for res in removed["resources"]
        }
        pattern = re.compile(r'missing RBAC permission: (\w+) resource "([^"]+)" in API group "([^"]*)"')

        def named() -> list[tuple[str, str, str]]:
            text = " ".join(str(value) for record in controller.events() for value in record.values())
            found = [(m.group(1), m.group(3), m.group(2)) for m in pattern.finditer(text)]
            return [f for f in found if f in missing]

        async with ControllerProcess(
            "--kubeconfig",
            service_account_kubeconfig(sim_cluster, tmp_path),
            "--leader-election-namespace",
            CONTROLLER_NAMESPACE,
        ) as controller:
            # Work that needs every permission: a job whose pods, services, events and status are written.
            await client.create(TFJOBS, tfjob("needs-all", workers=1), namespace="default")
            await eventually(named, timeout=60, what=f"an error naming one of {sorted(missing)}")
    finally:
        await client.close()
    assert sim_cluster.server.auth.forbidden_log, "the simulator answered 403"
    for record in controller.events():
        if "missing RBAC permission" in str(record):
            assert record["level"] in ("error", "warning"), record


@pytest.mark.parametrize("scheduler", list(GANG_MODES))
async def test_gang_mode_runs_with_its_components_rbac_without_a_403(
    sim_cluster: SimCluster, kubectl: Any, tmp_path: Path, scheduler: str
) -> None:
    await install(kubectl)
    component = MANIFESTS / "components" / GANG_MODES[scheduler][0]
    rc, _, err = await kubectl(
        "apply", "-f", str(component / "cluster_role.yaml"), "-f", str(component / "cluster_role_binding.yaml")
    )
    assert rc == 0, err
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, user_agent="rbac-test")
    try:
        await install_pod_group_crds(client)
        await gang_run(client, service_account_kubeconfig(sim_cluster, tmp_path), CONTROLLER_NAMESPACE, scheduler)
    finally:
        await client.close()
    assert list(sim_cluster.server.auth.forbidden_log) == []
    assert_gang_used_equals_granted(sim_cluster, scheduler)


async def test_gang_mode_without_its_component_names_the_missing_podgroup_permission(
    sim_cluster: SimCluster, kubectl: Any, tmp_path: Path
) -> None:
    await install(kubectl)  # the plain install: no PodGroup rule
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, user_agent="rbac-test")
    try:
        await install_pod_group_crds(client)
        async with ControllerProcess(
            "--kubeconfig",
            service_account_kubeconfig(sim_cluster, tmp_path),
            "--leader-election-namespace",
            CONTROLLER_NAMESPACE,
            "--gang-scheduler-name",
            "volcano",
        ) as controller:
            missing = 'missing RBAC permission: list resource "podgroups" in API group "scheduling.volcano.sh"'
            await eventually(
                lambda: any(missing in str(r) for r in controller.events()),
                timeout=60,
                what="the informer's error naming the missing PodGroup permission",
            )
    finally:
        await client.close()
