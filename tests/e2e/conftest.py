"""End-to-end harness: the TFJob controller running as in production against the simulated cluster.

The controller gets nothing but a kubeconfig: it talks to the simulated API server with the real
kubernetes-asyncio transport, exactly as it would to a real cluster. Tests drive it only through the
Kubernetes API, ``kubectl`` and the simulator's pod annotations, and read the outcome through the API
as well (``Operator.get`` / ``Operator.list``).

Every test runs twice (the ``sim_config`` fixture is parametrized):
- ``plain``: HTTP without authentication, the simulator's default;
- ``secure``: HTTPS with the cluster's generated CA, and RBAC. The controller runs as the
  ServiceAccount of ``manifests/`` (its ServiceAccount, ClusterRole, Role and bindings applied as
  they ship) with a token from the TokenRequest API in a kubeconfig that verifies the server
  against the CA — what ``tfjob-controller run`` in the shipped Deployment gets. Tests act as the
  cluster admin (``Operator.client``). A test fails if any request was refused with 403, so the
  suite proves the shipped RBAC sufficient for everything the controller does.

The controller runs in its own asyncio task (``start``/``stop``) rather than in a task group
spanning the fixture's ``yield``: pytest may run a fixture's setup and teardown in different tasks,
and a cancel scope must be exited by the task that entered it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from prometheus_client import CollectorRegistry

from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS, EVENTS, NODES, PODS, SERVICES, ApiClient, Resource  # noqa: F401 (NODES: for tests)
from controller.runtime.errors import AlreadyExists, NotFound
from controller.tfjob.controller import TFJobController
from controller.tfjob.decide import DecideConfig
from controller.tfjob.executor import TFJOBS
from tests.scrape import series
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.kubelet import EXIT_CODE
from tfjob_sim.testing.objects import condition, is_true, tfjob  # noqa: F401 (for tests)
from tfjob_sim.testing.waiting import eventually as shared_eventually

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"
# What the shipped manifests give the controller's ServiceAccount, in dependency order.
RBAC_MANIFESTS = [
    ROOT / "manifests" / p
    for p in (
        "deployment/namespace.yaml",
        "rbac/service_account.yaml",
        "rbac/cluster_role.yaml",
        "rbac/cluster_role_binding.yaml",
        "rbac/leader_election_role.yaml",
        "rbac/leader_election_role_binding.yaml",
    )
]
CONTROLLER_NAMESPACE = "tfjob-controller"
CONTROLLER_SERVICE_ACCOUNT = "tfjob-controller"
CRDS = CUSTOM_RESOURCE_DEFINITIONS

# Simulated time runs 100x faster (grace periods, pod start delays); the controller's own failover
# back-off is real time, so tests shrink it.
FAST_FAILOVER = DecideConfig(failover_backoff_base=1.0, failover_backoff_cap=4.0, failover_reset_after=30.0)


async def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.02, what: str = "") -> Any:
    """:func:`tfjob_sim.testing.waiting.eventually` with the e2e defaults: a failed assertion, a missing key or a
    404 inside ``check`` means "not yet"."""
    return await shared_eventually(
        check, timeout, interval=interval, what=what, tolerate=(AssertionError, LookupError, NotFound)
    )


@dataclass
class Operator:
    cluster: SimCluster
    client: ApiClient  # the tests' own client: the cluster admin
    registry: CollectorRegistry
    controller: TFJobController
    task: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    # -- reading through the API ----------------------------------------------------------------------

    async def job(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return await self.client.get(TFJOBS, name, namespace=namespace)

    async def pods(self, job: str, namespace: str = "default", replica_type: str | None = None) -> list[dict[str, Any]]:
        selector = f"training.kubeflow.org/job-name={job}"
        if replica_type:
            selector += f",training.kubeflow.org/replica-type={replica_type.lower()}"
        items = (await self.client.list(PODS, namespace=namespace, label_selector=selector))["items"]
        return sorted(items, key=lambda p: p["metadata"]["name"])

    async def services(self, job: str, namespace: str = "default") -> list[dict[str, Any]]:
        selector = f"training.kubeflow.org/job-name={job}"
        items = (await self.client.list(SERVICES, namespace=namespace, label_selector=selector))["items"]
        return sorted(items, key=lambda s: s["metadata"]["name"])

    async def events(self, name: str, namespace: str = "default") -> list[dict[str, Any]]:
        """The Events about ``name``, once those already recorded are written: events are written in the
        background (controller.runtime.events), after the status write a test may have waited for, so
        wait for no reconcile in progress and an empty event queue first."""
        queue = self.controller.controller.queue
        await eventually(
            lambda: queue.num_processing == 0 and self.controller.recorder.queued == 0,
            what="the controller's events to be written",
        )
        items = (await self.client.list(EVENTS, namespace=namespace))["items"]
        return [e for e in items if e.get("involvedObject", {}).get("name") == name]

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The value of a series of the controller's registry; a series that is not exported fails the test.

        Every series the tests read exists before its first increment (the runtime's from the start, a TFJob
        namespace's from the controller's first sight of a job there), so absence is never a 0 here: read as
        one, a renamed metric or label would pass every assertion that something did not happen."""
        return series(self.registry, name, labels)


async def _create_ignoring_existing(client: ApiClient, resource: str, body: dict[str, Any]) -> None:
    try:
        await client.create(resource, body, namespace=body["metadata"].get("namespace"))
    except AlreadyExists:  # a controller restart in the same cluster
        pass


async def install_tfjob_crd(client: ApiClient) -> None:
    """The TFJob CRD of manifests/ (unless it is installed already)."""
    await _create_ignoring_existing(client, CRDS, yaml.safe_load(CRD_PATH.read_text()))


def gang_rbac_manifests(gang: str) -> list[Path]:
    """The PodGroup RBAC of the kustomize component of ``--gang-scheduler-name gang``."""
    component = "gang-volcano" if gang == "volcano" else "gang-scheduler-plugins"
    return [
        ROOT / "manifests" / "components" / component / f for f in ("cluster_role.yaml", "cluster_role_binding.yaml")
    ]


async def controller_kubeconfig(cluster: SimCluster, admin: ApiClient, gang: str = "") -> str:
    """The kubeconfig the controller runs with: the cluster admin's on a plain cluster; on a secure one,
    the manifests' ServiceAccount with its RBAC applied (and the gang component's, with ``gang``) and a
    TokenRequest token."""
    assert cluster.kubeconfig_path
    if cluster.secure is None:
        return cluster.kubeconfig_path
    for path in RBAC_MANIFESTS + (gang_rbac_manifests(gang) if gang else []):
        body = yaml.safe_load(path.read_text())
        group, _, version = body["apiVersion"].rpartition("/")
        plural = {
            "Namespace": "namespaces",
            "ServiceAccount": "serviceaccounts",
            "ClusterRole": "clusterroles",
            "ClusterRoleBinding": "clusterrolebindings",
            "Role": "roles",
            "RoleBinding": "rolebindings",
        }[body["kind"]]
        namespaced = body["kind"] in ("ServiceAccount", "Role", "RoleBinding")
        await _create_ignoring_existing(admin, Resource(group, version, plural, namespaced=namespaced), body)
    return cluster.service_account_kubeconfig(
        Path(cluster.kubeconfig_path).with_name("controller-kubeconfig"),
        CONTROLLER_NAMESPACE,
        CONTROLLER_SERVICE_ACCOUNT,
    )


async def start_operator(
    cluster: SimCluster,
    *,
    workers: int = 2,
    config: DecideConfig = FAST_FAILOVER,
    install_crd: bool = True,
    gang: str = "",
) -> Operator:
    """The controller against ``cluster``; with ``gang``, as ``--gang-scheduler-name gang`` runs it (and, on a
    secure cluster, with the RBAC of that mode's kustomize component)."""
    registry = CollectorRegistry()
    assert cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(cluster.kubeconfig_path)
    if install_crd:
        await install_tfjob_crd(client)
    controller_client = await ApiClient.from_kubeconfig(
        await controller_kubeconfig(cluster, client, gang), registry=registry
    )
    if gang:
        config = replace(config, gang_scheduler=gang)
    controller = TFJobController(controller_client, registry=registry, workers=workers, decide_config=config)
    op = Operator(cluster, client, registry, controller)

    async def run() -> None:
        try:
            await controller.run()
        finally:
            with anyio.CancelScope(shield=True):
                await controller_client.close()
                await client.close()

    op.task = asyncio.create_task(run(), name="tfjob-controller")
    await eventually(
        lambda: op.task.done() or all(i.has_synced() for i in controller.informers),
        what="controller caches to sync",
    )
    if op.task.done():
        await op.task  # surface a startup failure
    return op


@pytest.fixture(params=["plain", "secure"])
def sim_config(request: pytest.FixtureRequest) -> SimConfig:
    return SimConfig(nodes=3, time_scale=0.01, secure=request.param == "secure")


def refused(cluster: SimCluster) -> list[str]:
    """The 403 Forbidden answers of a secure cluster (none may happen to the controller)."""
    return list(cluster.server.auth.forbidden_log) if cluster.server.auth is not None else []


@asynccontextmanager
async def running_operator(cluster: SimCluster, **options: Any) -> AsyncIterator[Operator]:
    """A controller for the span of a test (``options``: those of :func:`start_operator`); on the way out it
    must not have crashed, and none of its requests may have been refused by RBAC."""
    op = await start_operator(cluster, **options)
    try:
        yield op
    finally:
        crashed = op.task is not None and op.task.done() and not op.task.cancelled()
        await op.stop()
        if crashed:
            raise AssertionError("the controller task ended during the test")
        assert not refused(cluster), f"requests refused by RBAC: {refused(cluster)}"


@pytest.fixture
async def operator(sim_cluster: SimCluster) -> AsyncIterator[Operator]:
    async with running_operator(sim_cluster) as op:
        yield op


@pytest.fixture
async def admin(sim_cluster: SimCluster) -> AsyncIterator[ApiClient]:
    """A client of the cluster's admin, with no controller running (the TFJob CRD is not installed)."""
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    try:
        yield client
    finally:
        await client.close()


async def until_true(
    operator: Operator, name: str, cond_type: str, *, timeout: float = 30.0, interval: float = 0.02, what: str = ""
) -> dict[str, Any]:
    """Wait until the job's ``cond_type`` condition is True; the job as then read."""

    async def true() -> dict[str, Any] | None:
        job = await operator.job(name)
        return job if is_true(job, cond_type) else None

    return await eventually(true, timeout, interval, what=what or f"{name} {cond_type}")


Check = Callable[[], Awaitable[Any]]


# --- helpers shared by the failover, scaling, lifecycle, restart and invalid-job tests ---------------
import time  # noqa: E402  (appended section: the harness above stays as it was)


def live(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pods that are not terminating."""
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase", "")


def running_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in live(pods) if phase(p) == "Running"]


def by_name(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in pods}


async def create_and_wait_running(operator: Operator, manifest: dict[str, Any], running: int) -> dict[str, Any]:
    """Create the TFJob and wait until it is Running with ``running`` running pods (all types)."""
    await operator.client.create(TFJOBS, manifest, namespace=manifest["metadata"].get("namespace", "default"))
    name = manifest["metadata"]["name"]

    async def up() -> bool:
        job = await operator.job(name)
        return is_true(job, "Running") and len(running_pods(await operator.pods(name))) == running

    await eventually(up, what=f"{name} Running with {running} running pods")
    return await operator.job(name)


async def annotate_pod(operator: Operator, name: str, annotations: dict[str, str], namespace: str = "default") -> None:
    """Steer one pod through the simulator's annotations (a merge patch, as ``kubectl annotate``)."""
    await operator.client.patch(PODS, name, {"metadata": {"annotations": annotations}}, namespace=namespace)


async def fail_over_once(
    operator: Operator, job: str, index: int, *, delete: bool = False, timeout: float = 30.0
) -> None:
    """OOM-kill worker ``index`` (with ``delete``: delete its pod) and wait until its replacement runs: the
    index's first failover, which is replaced at once. A test that needs a worker *waiting* for its back-off
    fails it again afterwards (a repeat failover backs off)."""
    name = f"{job}-worker-{index}"
    old = by_name(await operator.pods(job))[name]["metadata"]["uid"]
    if delete:
        await operator.client.delete(PODS, name, namespace="default")
    else:
        await annotate_pod(operator, name, {EXIT_CODE: "137"})

    async def replaced() -> bool:
        pod = by_name(running_pods(await operator.pods(job))).get(name)
        record = worker_record(await operator.job(job), index)
        return bool(pod and pod["metadata"]["uid"] != old and record and record["state"] == "Replaced")

    await eventually(replaced, timeout, what=f"{name} failed over once and replaced")


def worker_record(job: dict[str, Any], index: int) -> dict[str, Any] | None:
    """The dynamic-worker record of ``index`` in ``status.dynamicWorkers.workers``."""
    workers = ((job.get("status") or {}).get("dynamicWorkers") or {}).get("workers") or {}
    return workers.get(str(index))


def conditions(job: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(type, status, reason, message) of every condition, in order."""
    return [
        (c.get("type", ""), c.get("status", ""), c.get("reason", ""), c.get("message", ""))
        for c in (job.get("status") or {}).get("conditions") or []
    ]


def event_reasons(events: list[dict[str, Any]]) -> list[str]:
    return [e.get("reason", "") for e in events]


async def reconciled_once_more(operator: Operator, name: str, namespace: str = "default") -> None:
    """Make the controller look at the job again and wait until it has, so a test can assert that
    something did *not* happen without sleeping: whatever the decision wanted is done by then, and
    every earlier pass of the job (its events and metrics included) has finished, because the work
    queue never runs one key twice at once."""

    def total() -> float:
        return sum(
            operator.metric("controller_runtime_reconcile_total", {"controller": "tfjob-controller", "result": r})
            for r in ("success", "error", "requeue", "requeue_after")
        )

    queue = operator.controller.controller.queue
    poke = str(time.monotonic_ns())
    before = total()
    await operator.client.patch(TFJOBS, name, {"metadata": {"annotations": {"e2e/poke": poke}}}, namespace=namespace)

    def seen_and_idle() -> bool:
        cached = operator.controller.jobs.get(f"{namespace}/{name}")
        annotations = ((cached or {}).get("metadata") or {}).get("annotations") or {}
        return (
            annotations.get("e2e/poke") == poke and total() > before and len(queue) == 0 and queue.num_processing == 0
        )

    await eventually(seen_and_idle, what=f"one more reconcile of {namespace}/{name}")
