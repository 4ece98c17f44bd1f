"""Least privilege, proven from what the controller does.

The ClusterRole and the leader-election Role in manifests/rbac/ must grant exactly the requests the
controller issues. A representative run of ``tfjob-controller run`` (leader election on, as deployed)
against the simulated cluster exercises every code path that talks to the API — start-up, informers,
pod and service creation, a dynamic-worker failover (a repeated event), scale-down, a finished job's
TTL deletion, the Lease's acquisition, renewal and release, a second replica waiting for it — and the simulator's request log records
each request as RBAC sees it: (verb, API group, resource[/subresource]). The controller's requests are
told from the test's own by their User-Agent (the controller's carries its leader-election identity).

Used must be a subset of granted (else a 403 in production), and granted minus used must be only
what no request of ours needs but the cluster still checks: ``update tfjobs/finalizers``, which the
OwnerReferencesPermissionEnforcement admission plugin requires to create pods and services whose
ownerReference sets blockOwnerDeletion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.runtime.client import PODS, SERVICES, ApiClient
from controller.runtime.errors import NotFound
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import CRD_PATH, CRDS, Operator, eventually, is_true, tfjob
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.kubelet import RUN_SECONDS
from tfjob_sim.testing.processes import ControllerProcess

RBAC = Path(__file__).resolve().parents[2] / "manifests" / "rbac"
Permission = tuple[str, str, str]  # (verb, API group, resource[/subresource])


# Plain only: the request log is compared with the roles here; tests/e2e/test_rbac_secure.py runs
# the same under real authorization.
@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=3, time_scale=0.01)


# Granted on purpose though no request of ours uses it (see the module docstring).
ADMISSION_ONLY = {("update", "kubeflow.org", "tfjobs/finalizers")}
# Non-resource paths the controller reads; every authenticated user may (system:discovery,
# system:public-info-viewer), so they need no rule of ours.
NON_RESOURCE_PATHS = {"/version", "/apis/kubeflow.org/v1"}


def granted(*files: str) -> set[Permission]:
    out: set[Permission] = set()
    for name in files:
        for role in yaml.safe_load_all((RBAC / name).read_text()):
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            out.add((verb, group, resource))
    return out


def as_permission(verb: str, resource_key: str) -> Permission:
    """The simulator's resource key (``pods``, ``tfjobs.kubeflow.org/status``) as an RBAC tuple."""
    base, _, subresource = resource_key.partition("/")
    plural, _, group = base.partition(".")
    return verb, group, f"{plural}/{subresource}" if subresource else plural


def controller_requests(cluster: SimCluster, since: int = 0) -> list[Any]:
    return [
        r
        for r in cluster.faults.requests(since)
        if r.user_agent.startswith("tfjob-controller/") and "(" in r.user_agent
    ]


async def representative_run(
    cluster: SimCluster, client: ApiClient, controller_kubeconfig: str, lease_namespace: str
) -> None:
    """Every code path that talks to the API, driven through ``client``, with ``tfjob-controller run``
    using ``controller_kubeconfig``: two replicas, a dynamic job's failover and scale-down, a TTL deletion,
    a SIGTERM (the Lease released). The CRD must be installed."""
    args = ("--kubeconfig", controller_kubeconfig, "--leader-election-namespace", lease_namespace)
    async with ControllerProcess(*args, env={"TFJOB_CONTROLLER_FAILOVER_BACKOFF": "0.2,2"}) as controller:
        # A second replica waits for the Lease (reads it, watches it for a release), then stops.
        await eventually(lambda: controller.logged("acquired lease"), timeout=60, what="the first replica to lead")
        async with ControllerProcess(*args) as standby:
            await eventually(
                lambda: any(
                    r.verb == "watch" and r.resource == "leases.coordination.k8s.io"
                    for r in controller_requests(cluster)
                ),
                timeout=60,
                what="the standby to watch the Lease",
            )
        assert standby.proc is not None and standby.proc.returncode == 0 and not standby.logged("acquired lease")
        # A dynamic job: created, a worker deleted and replaced (the same event repeats: a patch),
        # then scaled down (pod and service deletion).
        await client.create(TFJOBS, tfjob("dyn", workers=2), namespace="default")

        async def workers_running(count: int, not_uid: str = "") -> list[dict[str, Any]] | None:
            pods = (await client.list(PODS, namespace="default", label_selector="training.kubeflow.org/job-name=dyn"))[
                "items"
            ]
            running = [
                p
                for p in pods
                if p["status"].get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
                and p["metadata"]["uid"] != not_uid
            ]
            return running if len(running) == count and len(pods) == count else None

        [_, worker1] = await eventually(lambda: workers_running(2), timeout=60, what="dyn's two workers")
        await client.delete(PODS, "dyn-worker-1", namespace="default", grace_period_seconds=0)
        await eventually(
            lambda: workers_running(2, worker1["metadata"]["uid"]), timeout=60, what="the deleted worker replaced"
        )
        await client.patch(
            TFJOBS, "dyn", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}, namespace="default"
        )
        await eventually(lambda: workers_running(1), timeout=60, what="scale-down to one worker")

        async def gone(resource: Any, name: str) -> bool:
            try:
                await client.get(resource, name, namespace="default")
            except NotFound:
                return True
            return False

        await eventually(
            lambda: gone(SERVICES, "dyn-worker-1"), timeout=60, what="the scaled-down worker's service deleted"
        )
        # A job that finishes and is deleted by its TTL.
        done = tfjob(
            "ttl",
            workers=1,
            dynamic=False,
            run_policy={"ttlSecondsAfterFinished": 0},
            annotations={RUN_SECONDS: "50"},
        )
        await client.create(TFJOBS, done, namespace="default")
        await eventually(lambda: gone(TFJOBS, "ttl"), timeout=60, what="the finished job deleted after its TTL")
        assert is_true(await client.get(TFJOBS, "dyn", namespace="default"), "Running")
    assert controller.proc is not None and controller.proc.returncode == 0, controller.stderr[-3000:]


def assert_used_equals_granted(cluster: SimCluster) -> None:
    requests = controller_requests(cluster)
    used = {as_permission(r.verb, r.resource) for r in requests if r.verb}
    allowed = granted("cluster_role.yaml", "leader_election_role.yaml")
    assert used <= allowed, f"requests the roles do not allow (a 403 in production): {sorted(used - allowed)}"
    assert allowed - used == ADMISSION_ONLY, f"granted but never used: {sorted(allowed - used - ADMISSION_ONLY)}"
    assert {r.path for r in requests if not r.verb} <= NON_RESOURCE_PATHS


async def test_the_controller_roles_grant_exactly_what_a_representative_run_uses(sim_cluster: SimCluster) -> None:
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, user_agent="rbac-test")
    try:
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await representative_run(sim_cluster, client, sim_cluster.kubeconfig_path, "default")
    finally:
        await client.close()
    assert_used_equals_granted(sim_cluster)


async def test_a_refused_request_names_the_missing_permission(operator: Operator) -> None:
    # What RBAC would answer if the ClusterRole lacked `create pods` (the simulator's 403, as
    # kube-apiserver words it when its message is generic).
    operator.cluster.faults.fail("create", "pods", 403)
    await operator.client.create(TFJOBS, tfjob("refused", workers=1), namespace="default")

    async def failed_create() -> list[dict[str, Any]]:
        return [e for e in await operator.events("refused") if e["reason"] == "FailedCreatePod"]

    [event, *_] = await eventually(failed_create, timeout=30, what="a FailedCreatePod event")
    assert (
        'missing RBAC permission: create resource "pods" in API group "" in the namespace "default"'
        in (event["message"])
    )


# --- gang scheduling: the PodGroup rule of the mode's kustomize component -----------------------------------
COMPONENTS = RBAC.parent / "components"
GANG_MODES = {
    "volcano": ("gang-volcano", "scheduling.volcano.sh", "v1beta1"),
    "scheduler-plugins-scheduler": ("gang-scheduler-plugins", "scheduling.x-k8s.io", "v1alpha1"),
}


def gang_granted(scheduler: str) -> set[Permission]:
    component = COMPONENTS / GANG_MODES[scheduler][0]
    out: set[Permission] = set()
    for rule in yaml.safe_load((component / "cluster_role.yaml").read_text())["rules"]:
        out |= {
            (verb, group, resource)
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }
    return out


async def gang_run(client: ApiClient, controller_kubeconfig: str, lease_namespace: str, scheduler: str) -> None:
    """Every PodGroup request of ``--gang-scheduler-name scheduler``: start-up (discovery, list, watch), a job's
    group created, updated (its minAvailable changed) and deleted (the job suspended)."""
    from controller.runtime.client import Resource

    _, group, version = GANG_MODES[scheduler]
    pod_groups = Resource(group, version, "podgroups")
    args = (
        "--kubeconfig",
        controller_kubeconfig,
        "--leader-election-namespace",
        lease_namespace,
        "--gang-scheduler-name",
        scheduler,
    )
    async with ControllerProcess(*args) as controller:
        policy = {"schedulingPolicy": {"minAvailable": 1}}
        await client.create(TFJOBS, tfjob("gang", workers=2, dynamic=False, run_policy=policy), namespace="default")

        async def min_member(expected: int) -> bool:
            return (await client.get(pod_groups, "gang", namespace="default"))["spec"]["minMember"] == expected

        await eventually(lambda: min_member(1), timeout=60, what="the job's PodGroup")
        await client.patch(
            TFJOBS, "gang", {"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}}}}, namespace="default"
        )
        await eventually(lambda: min_member(2), timeout=60, what="the PodGroup updated")
        await client.patch(TFJOBS, "gang", {"spec": {"runPolicy": {"suspend": True}}}, namespace="default")

        async def deleted() -> bool:
            try:
                await client.get(pod_groups, "gang", namespace="default")
            except NotFound:
                return True
            return False

        await eventually(deleted, timeout=60, what="the suspended job's PodGroup deleted")
    assert controller.proc is not None and controller.proc.returncode == 0, controller.stderr[-3000:]


def assert_gang_used_equals_granted(cluster: SimCluster, scheduler: str) -> None:
    requests = controller_requests(cluster)
    used = {as_permission(r.verb, r.resource) for r in requests if r.verb}
    group = GANG_MODES[scheduler][1]
    used_gang = {p for p in used if p[1] == group}
    assert used_gang == gang_granted(scheduler)
    allowed = granted("cluster_role.yaml", "leader_election_role.yaml") | gang_granted(scheduler)
    assert used <= allowed, f"requests the roles do not allow (a 403 in production): {sorted(used - allowed)}"
    assert {r.path for r in requests if not r.verb} <= NON_RESOURCE_PATHS | {
        f"/apis/{group}/{GANG_MODES[scheduler][2]}"
    }


async def install_pod_group_crds(client: ApiClient) -> None:
    """Both schedulers' PodGroup CRDs, as `kubectl apply -f sim/tfjob_sim/crds/...` installs them."""
    from tfjob_sim.crds import crd_documents

    for scheduler in ("volcano", "scheduler-plugins"):
        for crd in crd_documents(scheduler):
            await client.create(CRDS, crd)


@pytest.mark.parametrize("scheduler", list(GANG_MODES))
async def test_gang_mode_uses_exactly_the_podgroup_rule_of_its_component(
    sim_cluster: SimCluster, scheduler: str
) -> None:
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, user_agent="rbac-test")
    try:
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await install_pod_group_crds(client)
        await gang_run(client, sim_cluster.kubeconfig_path, "default", scheduler)
    finally:
        await client.close()
    assert_gang_used_equals_granted(sim_cluster, scheduler)
