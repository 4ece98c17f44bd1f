"""SimCluster: one simulated Kubernetes cluster — store, API server, watch hub, kubelet, GC, faults.

Why: tests, benchmarks, the CLI and the demo all need the same thing — a running cluster with a
kubeconfig pointing at it and a fault API — with clean startup and shutdown. This is the one place
that wires the pieces and owns their background tasks.

Contract:
- ``async with SimCluster(SimConfig(...)) as cluster:`` (or ``await start()`` / ``await stop()``,
  which may be called from different tasks, as pytest fixtures do).
- After start: ``.url``, ``.port``, ``.kubeconfig_path`` (written if ``SimConfig.kubeconfig_path`` is
  set or :meth:`write_kubeconfig` was called), ``.store``, ``.hub``, ``.faults``, ``.server``,
  ``.kubelet`` / ``.gc`` / ``.workloads`` (None when disabled), ``.event_ttl``.
- ``SimConfig.priority_and_fairness`` (default on): API Priority and Fairness as kube-apiserver applies it
  (sim/tfjob_sim/flowcontrol.py): the bootstrap FlowSchemas and PriorityLevelConfigurations served,
  every request classified, limited, queued or rejected with 429, the headers on every response;
  ``max_requests_inflight`` / ``max_mutating_requests_inflight`` / ``request_timeout`` shrink the limits.
  Off: the max-in-flight filter limits instead, and no response carries the headers.
- ``SimConfig.image_map`` (process runtime): the local environment that stands for each image
  (tfjob_sim.images); a container of another image fails to pull unless its command is an absolute path.
- ``SimConfig.podgroup_crds``: the gang schedulers whose CRDs are served from the start
  (sim/tfjob_sim/crds); none by default.
- ``SimConfig.secure``: HTTPS with a generated CA, authentication and RBAC (sim/tfjob_sim/auth.py,
  rbac.py); the bootstrap ClusterRoles and bindings are created then (a plain cluster has none, as
  nothing is authorized there). ``.secure`` holds the CA and the admin token;
  :meth:`service_account_kubeconfig` writes a ServiceAccount's kubeconfig with a TokenRequest token.
- Background work (kubelet, GC, event TTL, deployment/replicaset controllers, clusterrole aggregation,
  server restarts) runs in one anyio task group owned by a single owner task; ``stop()`` cancels it
  and re-raises the first background failure, so a crashing
  kubelet fails the test instead of going unnoticed.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import yaml

from tfjob_sim import errors
from tfjob_sim.events import EventTTL
from tfjob_sim.faults import ClusterHooks, Faults
from tfjob_sim.server import SimServer
from tfjob_sim.store import Store, StoreConfig
from tfjob_sim.watch import WatchConfig, WatchHub

log = logging.getLogger(__name__)


@dataclass
class SimConfig:
    host: str = "127.0.0.1"
    port: int = 0
    nodes: int = 3
    # Multiplies every simulated duration of the kubelet and GC (tests use e.g. 0.01).
    time_scale: float = 1.0
    kubelet: bool = True
    gc: bool = True
    # The deployment and replicaset controllers (sim/tfjob_sim/workloads.py).
    workloads: bool = True
    # The storage controllers (sim/tfjob_sim/persistentvolumes.py): the default StorageClass and its local
    # provisioner, binding, claim/volume protection and reclaiming.
    storage: bool = True
    kubeconfig_path: str | None = None
    store: StoreConfig = field(default_factory=StoreConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)
    # Extra KubeletConfig / GCConfig keyword arguments (e.g. default_start_seconds, delay_seconds).
    kubelet_options: dict[str, Any] = field(default_factory=dict)
    gc_options: dict[str, Any] = field(default_factory=dict)
    # How long a read with a future resourceVersion waits before 504 ResourceVersionTooLarge.
    rv_wait_timeout: float = 3.0
    fault_seed: int | None = None
    # kube-apiserver --event-ttl (simulated seconds): Events not written again within it are deleted.
    event_ttl_seconds: float = 3600.0
    # HTTPS with a generated CA, authentication and RBAC (sim/tfjob_sim/auth.py); the kubeconfig's
    # user is the cluster admin (a bearer token of a user in group system:masters).
    secure: bool = False
    # Gang schedulers whose CRDs are served from the start ("volcano": PodGroup and Queue of
    # scheduling.volcano.sh; "scheduler-plugins": PodGroup of scheduling.x-k8s.io). None by default,
    # as on a cluster where neither is installed; ``kubectl apply -f sim/tfjob_sim/crds/<name>`` adds
    # them later. A comma-separated string is accepted too.
    podgroup_crds: tuple[str, ...] | str = ()
    # kube-apiserver --enable-priority-and-fairness (on by default since 1.20): every request is classified,
    # limited and queued by priority level and its response names its flow schema and priority level
    # (sim/tfjob_sim/flowcontrol.py); False: the max-in-flight filter instead, and no such headers.
    priority_and_fairness: bool = True
    # kube-apiserver --max-requests-inflight and --max-mutating-requests-inflight: their sum is the server's
    # concurrency limit that APF shares among priority levels (without APF, the max-in-flight filter's limits
    # of read-only and mutating requests; 0 = no limit there). --request-timeout: a request waits in an APF
    # queue at most a quarter of it.
    max_requests_inflight: int = 400
    max_mutating_requests_inflight: int = 200
    request_timeout: float = 60.0
    # The kubelet's container runtime: "annotations" (simulated containers steered by annotations) or
    # "process" (every container a real process in its pod's network namespace; needs root).
    runtime: str = "annotations"
    # The process runtime's images: image reference -> a local directory (a virtualenv, a prefix) whose
    # ``bin`` comes first on PATH in containers of that image (tfjob_sim.images; KubeletConfig.image_map).
    image_map: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from tfjob_sim.crds import parse_schedulers

        self.podgroup_crds = parse_schedulers(self.podgroup_crds)


def kubeconfig_document(url: str, name: str = "sim", *, ca_cert: bytes | None = None, user: dict | None = None) -> dict:
    """A kubeconfig whose current context points at ``url``: no authentication, or (secure mode) the
    CA that signed the server's certificate and the given user credentials."""
    cluster: dict[str, Any] = {"server": url}
    if ca_cert is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_cert).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": dict(user or {})}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }


class SimCluster:
    """A running simulated cluster. See the module docstring."""

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.store = Store(self.config.store)
        self.hub = WatchHub(self.store, self.config.watch)
        self.faults = Faults(self._fault_hooks(), seed=self.config.fault_seed)
        self.server = SimServer(
            self.store,
            self.hub,
            self.faults,
            kubelet=lambda: self.kubelet,
            schedule_restart=self.schedule_restart,
        )
        self.server.rv_wait_timeout = self.config.rv_wait_timeout
        self._configure_flow_control()
        self.kubelet: Any = None
        self.gc: Any = None
        if self.config.kubelet:
            from tfjob_sim.kubelet import Kubelet, KubeletConfig

            self.kubelet = Kubelet(
                self.store,
                KubeletConfig(
                    nodes=self.config.nodes,
                    time_scale=self.config.time_scale,
                    runtime=self.config.runtime,
                    image_map=dict(self.config.image_map),
                    **self.config.kubelet_options,
                ),
            )
        if self.config.gc:
            from tfjob_sim.gc import GarbageCollector, GCConfig

            self.gc = GarbageCollector(
                self.store, GCConfig(time_scale=self.config.time_scale, **self.config.gc_options)
            )
        self.workloads: Any = None
        if self.config.workloads:
            from tfjob_sim.workloads import WorkloadConfig, WorkloadControllers

            self.workloads = WorkloadControllers(self.store, WorkloadConfig(time_scale=self.config.time_scale))
        self.storage: Any = None
        if self.config.storage:
            from tfjob_sim.persistentvolumes import StorageConfig, StorageControllers

            self.storage = StorageControllers(self.store, StorageConfig(time_scale=self.config.time_scale))
        self.event_ttl = EventTTL(self.store, self.config.event_ttl_seconds, self.config.time_scale)
        self.secure: Any = None  # tfjob_sim.auth.SecureMaterial in secure mode
        self._cert_dir: str | None = None
        if self.config.secure:
            self._make_secure()
        self._install_podgroup_crds()
        from tfjob_sim.rbac import ClusterRoleAggregator

        self.aggregator = ClusterRoleAggregator(self.store)
        self.kubeconfig_path: str | None = self.config.kubeconfig_path
        self._owner: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._started = asyncio.Event()
        self._restart_lock = asyncio.Lock()

    def _configure_flow_control(self) -> None:
        from tfjob_sim.flowcontrol import FlowControl, MaxInFlight

        config = self.config
        if config.priority_and_fairness:
            flow_control = FlowControl(
                config.max_requests_inflight, config.max_mutating_requests_inflight, config.request_timeout
            )
            flow_control.install(self.store)
            self.server.flow_control = flow_control
        else:
            self.server.max_in_flight = MaxInFlight(config.max_requests_inflight, config.max_mutating_requests_inflight)

    def _make_secure(self) -> None:
        from tfjob_sim import rbac
        from tfjob_sim.auth import AuthLayer, SecureMaterial
        from tfjob_sim.resources import secure_types

        self.secure = SecureMaterial.generate(self.config.host)
        self._cert_dir = tempfile.mkdtemp(prefix="sim-pki-")
        self.server.ssl_context = self.secure.server_ssl_context(self._cert_dir)
        self.server.auth = AuthLayer(self.store, self.secure)
        for rt in secure_types():
            self.store.registry.add(rt)
        for resource, obj in rbac.bootstrap_objects():
            self.store.create(resource, None, obj, field_manager="kube-apiserver")

    def _install_podgroup_crds(self) -> None:
        from tfjob_sim.crds import crd_documents
        from tfjob_sim.store import CRD_RESOURCE

        for scheduler in self.config.podgroup_crds:
            for crd in crd_documents(scheduler):
                self.store.create(CRD_RESOURCE, None, crd, field_manager="kubectl-client-side-apply")

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port

    def _fault_hooks(self) -> ClusterHooks:
        """What this cluster's :class:`Faults` act on (the kubelet and the GC are looked up when used)."""
        return ClusterHooks(
            close_watches=self.hub.close_all,
            stall_watches=self.hub.stall,
            unstall_watches=self.hub.unstall,
            delay_watch_events=self.hub.set_delay,
            compact=self.store.compact,
            restart_server=self.restart_server,
            pause_kubelet=lambda: self.require_kubelet().pause(),
            resume_kubelet=lambda: self.require_kubelet().resume(),
            pause_gc=lambda: self.require_gc().pause(),
            resume_gc=lambda: self.require_gc().resume(),
            set_node_ready=self._set_node_ready,
        )

    def _set_node_ready(self, name: str, ready: bool) -> None:
        if self.store.get("nodes", None, name) is None:
            raise errors.not_found("nodes", name)
        self.require_kubelet().set_node_ready(name, ready)

    def require_kubelet(self) -> Any:
        if self.kubelet is None:
            raise RuntimeError("this cluster runs without a kubelet (SimConfig.kubelet=False)")
        return self.kubelet

    def require_gc(self) -> Any:
        if self.gc is None:
            raise RuntimeError("this cluster runs without a garbage collector (SimConfig.gc=False)")
        return self.gc

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> SimCluster:
        await self.server.start(self.config.host, self.config.port)
        if self.kubeconfig_path:
            self.write_kubeconfig(self.kubeconfig_path)
        self._owner = asyncio.create_task(self._own_background(), name="sim-cluster-background")
        await self._started.wait()
        if self._owner.done():
            await self._owner  # re-raises a startup failure
        if self.kubelet is not None:
            # The kubelet registers its nodes as soon as its task runs; clients expect them at once.
            with anyio.fail_after(10):
                while len(self.store.list("nodes")[0]) < self.config.nodes:
                    if self._owner.done():
                        await self._owner
                    await anyio.sleep(0.005)
        return self

    async def _own_background(self) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if self.kubelet is not None:
                    tg.start_soon(self.kubelet.run, name="sim-kubelet")
                if self.gc is not None:
                    tg.start_soon(self.gc.run, name="sim-gc")
                if self.workloads is not None:
                    tg.start_soon(self.workloads.run, name="sim-workload-controllers")
                if self.storage is not None:
                    tg.start_soon(self.storage.run, name="sim-storage-controllers")
                tg.start_soon(self.event_ttl.run, name="sim-event-ttl")
                tg.start_soon(self.aggregator.run, name="sim-clusterrole-aggregation")
                self._started.set()
                await self._stop.wait()
                tg.cancel_scope.cancel()
        finally:
            self._tg = None
            self._started.set()

    async def stop(self) -> None:
        """Stop serving and cancel background tasks; re-raises a background task's failure."""
        self._stop.set()
        try:
            async with self._restart_lock:  # never race a restart that is re-binding the port
                await self.server.stop()
        finally:
            self.hub.shutdown()
            if self._cert_dir is not None:
                shutil.rmtree(self._cert_dir, ignore_errors=True)
                self._cert_dir = None
            if self._owner is not None:
                owner, self._owner = self._owner, None
                try:
                    await owner
                finally:
                    if self.storage is not None:
                        self.storage.stop_and_clean()

    async def __aenter__(self) -> SimCluster:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def restart_server(self) -> None:
        """All connections drop (watches end, in-flight requests fail); same port; state and RVs kept."""
        async with self._restart_lock:
            if self._stop.is_set():
                return  # the cluster is stopping: do not bind the port again
            await self.server.restart()

    def schedule_restart(self) -> None:
        """Restart soon, from the background task group (used by the HTTP /_sim/restart endpoint)."""
        if self._tg is None:
            raise RuntimeError("the cluster is not running")
        self._tg.start_soon(self.restart_server, name="sim-restart")

    # ------------------------------------------------------------------ kubeconfig

    def write_kubeconfig(self, path: str | os.PathLike) -> str:
        target = Path(path)
        if self.secure is not None:
            from tfjob_sim.auth import admin_kubeconfig_user

            document = kubeconfig_document(
                self.url, ca_cert=self.secure.ca_cert, user=admin_kubeconfig_user(self.secure)
            )
        else:
            document = kubeconfig_document(self.url)
        _write_private(target, yaml.safe_dump(document, sort_keys=False))
        self.kubeconfig_path = str(target)
        return self.kubeconfig_path

    def service_account_kubeconfig(
        self, path: str | os.PathLike, namespace: str, name: str, expiration_seconds: int = 24 * 3600
    ) -> str:
        """Secure mode: a kubeconfig for ServiceAccount ``namespace/name`` (which must exist), with a
        token from the TokenRequest API and the cluster's CA, as a pod's projected token would be used."""
        if self.secure is None or self.server.auth is None:
            raise RuntimeError("service account kubeconfigs need a secure cluster (SimConfig.secure=True)")
        token = self.server.auth.token_for(namespace, name, expiration_seconds)
        document = kubeconfig_document(self.url, ca_cert=self.secure.ca_cert, user={"token": token})
        target = Path(path)
        _write_private(target, yaml.safe_dump(document, sort_keys=False))
        return str(target)


def _write_private(target: Path, text: str) -> None:
    """Write a kubeconfig atomically, readable by its owner only (it may hold credentials)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(target)
