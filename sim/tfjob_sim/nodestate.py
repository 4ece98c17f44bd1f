"""What the simulated cluster's node components share: their configuration, the node and pod tables,
the one worker's queue, and the two pod writes every component makes.

Why a module of its own: the scheduler (tfjob_sim.scheduler), the kubelet (tfjob_sim.kubelet), the node
lifecycle controller (tfjob_sim.nodelifecycle) and pod GC (tfjob_sim.podgc) are separate components that
read the same nodes and pods. In a real cluster each keeps its own informer cache; here one store
listener keeps one set of tables (:class:`NodeState`) that all of them read, and one worker (owned by
:class:`tfjob_sim.kubelet.Kubelet`) reconciles a pod by handing it to the component whose turn it is.

Contract:
- The listener side (:meth:`NodeState.pod_event`, :meth:`NodeState.node_event`) only updates the tables
  and marks pods dirty; it never writes to the store.
- Node usage is the requests of the non-terminal pods bound to each node; every change that may let an
  unschedulable pod fit sets :attr:`NodeState.retry_unschedulable`, every node change bumps
  :attr:`NodeState.node_generation`.
- :meth:`NodeState.write_status` is the only status write: a merge patch of the status subresource that
  skips no-ops, and whose own watch event does not mark the pod dirty again.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import structlog

from tfjob_sim.errors import ApiError
from tfjob_sim.events import EventRecorder
from tfjob_sim.gang import DEFAULT_GANG_SCHEDULER_NAMES, GANG_SCHEDULERS
from tfjob_sim.gang.common import GangStore
from tfjob_sim.images import ImageMap
from tfjob_sim.podstate import TERMINAL_PHASES, _Node, _PodRecord
from tfjob_sim.quantity import parse_quantity

log = structlog.get_logger(__name__)

DEFAULT_SCHEDULER = "default-scheduler"
RUNTIMES = ("annotations", "process")


class StoreLike(GangStore, Protocol):
    """The subset of tfjob_sim.store.Store the node components use: what the gang schedulers they drive
    use, and these."""

    resource_version: int

    def delete(self, resource: str, namespace: str | None, name: str, options: dict | None = None) -> dict: ...

    def add_listener(self, fn: Callable[[str, str, dict | None, dict | None], None]) -> Callable[[], None]: ...


@dataclass
class KubeletConfig:
    """Knobs of the simulated nodes. Every duration is simulated seconds, multiplied by time_scale."""

    nodes: int = 3  # Ready nodes created at start ("sim-node-0", ...)
    node_cpu: str = "32"
    node_memory: str = "128Gi"
    node_pods: int = 110
    time_scale: float = 1.0
    default_start_seconds: float = 0.5  # Pending -> Running without a start-seconds annotation
    # SIGTERM -> exit without a sigterm-seconds annotation: a process with the default handler
    # dies at once; this is signal delivery plus the runtime noticing the exit.
    default_sigterm_seconds: float = 0.2
    node_eviction_seconds: float = 300  # NotReady node: taint-manager eviction after this
    # Pod GC force-deletes pods of a vanished node after this quarantine (kube-controller-manager: 40 s).
    pod_gc_orphan_seconds: float = 40.0
    node_name_prefix: str = "sim-node-"
    # spec.schedulerName -> the gang scheduler it selects ("volcano" or "scheduler-plugins"); each
    # runs only while its PodGroup CRD is served (sim/tfjob_sim/gang/).
    gang_scheduler_names: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_GANG_SCHEDULER_NAMES))
    # "annotations": containers are simulated, steered by annotations (tfjob_sim.annotationpods); "process":
    # every container is a real process in its pod's network namespace (sim/tfjob_sim/process/),
    # which needs root.
    runtime: str = "annotations"
    # The process runtime's images: image reference -> a local directory (a virtualenv, a prefix) whose
    # ``bin`` comes first on PATH in containers of that image (tfjob_sim.images). A container of an
    # image not mapped here fails to pull (ErrImagePull), unless its command is an absolute path.
    image_map: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
        if self.image_map and self.runtime != "process":
            raise ValueError("image_map: only the process runtime runs images")
        ImageMap(self.image_map)  # raises ValueError naming the mapping at fault
        if self.nodes < 0:
            raise ValueError(f"nodes must be >= 0, got {self.nodes}")
        if self.node_pods < 1:
            raise ValueError(f"node_pods must be >= 1, got {self.node_pods}")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")
        for name in (
            "default_start_seconds",
            "default_sigterm_seconds",
            "node_eviction_seconds",
            "pod_gc_orphan_seconds",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("node_cpu", "node_memory"):
            try:
                parse_quantity(getattr(self, name))
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
        for scheduler_name, scheduler in self.gang_scheduler_names.items():
            if scheduler not in GANG_SCHEDULERS or not scheduler_name or scheduler_name == DEFAULT_SCHEDULER:
                raise ValueError(
                    f"gang_scheduler_names: {scheduler_name!r} -> {scheduler!r}: expected a scheduler "
                    f"name other than {DEFAULT_SCHEDULER} mapped to one of {', '.join(GANG_SCHEDULERS)}"
                )


def milli(value: Any) -> int:
    """A quantity in thousandths, rounded up (cpu millicores)."""
    return int(math.ceil(parse_quantity(value) * 1000))


def whole(value: Any) -> int:
    """A quantity in units, rounded up (bytes, pods)."""
    return int(math.ceil(parse_quantity(value)))


def pod_requests(spec: dict) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the scheduler accounts for: sum of containers, max with init
    containers; a container without requests but with limits requests its limits (API defaulting)."""

    def one(container: dict) -> tuple[int, int]:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        cpu = requests.get("cpu", limits.get("cpu"))
        mem = requests.get("memory", limits.get("memory"))
        return (milli(cpu) if cpu is not None else 0, whole(mem) if mem is not None else 0)

    cpu = mem = 0
    for c in spec.get("containers") or []:
        if isinstance(c, dict):
            c_cpu, c_mem = one(c)
            cpu, mem = cpu + c_cpu, mem + c_mem
    for c in spec.get("initContainers") or []:
        if isinstance(c, dict):
            c_cpu, c_mem = one(c)
            cpu, mem = max(cpu, c_cpu), max(mem, c_mem)
    return cpu, mem


class NodeState:
    """The nodes and pods as the node components know them, the worker's queue (dirty pods and one timer
    heap), and the writes they share.

    Timers live in one heap (one live entry per pod, stale entries skipped) instead of one task per pod,
    so 100,000 pods cost memory proportional to their records, not to tasks; a deleted pod's timer is
    dropped with its record."""

    def __init__(self, store: StoreLike, config: KubeletConfig) -> None:
        self.store = store
        self.config = config
        self.scale = config.time_scale
        self.nodes: dict[str, _Node] = {}
        self.pods: dict[str, _PodRecord] = {}
        self.pods_by_node: dict[str, set[str]] = {}
        self.dirty: dict[str, None] = {}
        # Set when an unschedulable pod may fit now (capacity freed, a node changed, resume()).
        self.retry_unschedulable = False
        # Bumped by every node event: what was computed from the nodes before is stale.
        self.node_generation = 0
        self.events = EventRecorder(store, self.scale)
        self._timers: list[tuple[float, int, str, int]] = []
        self._timer_seq = 0
        self._own_status_write: str | None = None  # uid of the pod whose status is being written here

    # ---------------------------------------------------------------- listener side (no writes)

    def pod_event(self, event_type: str, old: dict | None, new: dict | None) -> _PodRecord | None:
        """Track a pod change: its record, node membership and the node usage it counts for.

        Returns the dropped record when the pod was deleted (its components forget it), else None."""
        obj = new if new is not None else old
        if obj is None:
            return None
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return None
        if event_type == "DELETED":
            rec = self.pods.pop(uid, None)
            self.dirty.pop(uid, None)
            if rec is not None:
                self._account(rec, None)
                self._set_node_membership(rec, None)
            return rec
        rec = self.pods.get(uid)
        spec = obj.get("spec") or {}
        if rec is None:
            rec = _PodRecord(uid=uid, namespace=meta.get("namespace") or "", name=meta.get("name", ""))
            try:
                rec.requests = pod_requests(spec)
            except ValueError as exc:
                rec.requests_error = str(exc)
            self.pods[uid] = rec
        node_name = spec.get("nodeName") or None
        self._set_node_membership(rec, node_name)
        phase = (obj.get("status") or {}).get("phase")
        self._account(rec, node_name if node_name and phase not in TERMINAL_PHASES else None)
        if uid != self._own_status_write:
            self.dirty[uid] = None
        return None

    def node_event(self, event_type: str, old: dict | None, new: dict | None) -> None:
        """Track a node change: its readiness, schedulability and allocatable (usage carries over)."""
        obj = new if new is not None else old
        if obj is None:
            return
        name = (obj.get("metadata") or {}).get("name", "")
        self.node_generation += 1
        if event_type == "DELETED":
            self.nodes.pop(name, None)
            self.mark_node_pods(name)
            return
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        ready = any(
            isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        alloc = status.get("allocatable") or status.get("capacity") or {}
        try:
            cpu_m = milli(alloc.get("cpu", 0))
            memory = whole(alloc.get("memory", 0))
            pods = whole(alloc.get("pods", 0))
        except ValueError as exc:
            log.warning("node has an invalid allocatable quantity; treating it as empty", node=name, error=str(exc))
            cpu_m = memory = pods = 0
        host_ip = next(
            (
                a.get("address", "")
                for a in status.get("addresses") or []
                if isinstance(a, dict) and a.get("type") == "InternalIP"
            ),
            "",
        )
        previous = self.nodes.get(name)
        node = _Node(
            name=name,
            ready=ready,
            unschedulable=bool(spec.get("unschedulable")),
            taints=[t for t in spec.get("taints") or [] if isinstance(t, dict)],
            labels=dict((obj.get("metadata") or {}).get("labels") or {}),
            cpu_m=cpu_m,
            memory=memory,
            pods=pods,
            host_ip=host_ip,
        )
        if previous is not None:
            node.used_cpu_m, node.used_memory, node.used_pods = (
                previous.used_cpu_m,
                previous.used_memory,
                previous.used_pods,
            )
            node.not_ready_since = previous.not_ready_since
        else:
            # Usage of pods seen before their node (initial sync order, or a node re-created).
            for uid in self.pods_by_node.get(name, ()):
                rec = self.pods.get(uid)
                if rec is not None and rec.accounted == name:
                    node.used_cpu_m += rec.requests[0]
                    node.used_memory += rec.requests[1]
                    node.used_pods += 1
        if not ready and node.not_ready_since is None:
            node.not_ready_since = anyio.current_time()
        elif ready:
            node.not_ready_since = None
        self.nodes[name] = node
        if previous is None or previous.ready != node.ready or previous.host_ip != node.host_ip:
            self.mark_node_pods(name)
        if (
            previous is None
            or node.ready != previous.ready
            or node.unschedulable != previous.unschedulable
            or node.taints != previous.taints
            or node.labels != previous.labels
            or (node.cpu_m, node.memory, node.pods) != (previous.cpu_m, previous.memory, previous.pods)
        ):
            self.retry_unschedulable = True

    def _set_node_membership(self, rec: _PodRecord, node_name: str | None) -> None:
        if rec.node == node_name:
            return
        if rec.node is not None:
            members = self.pods_by_node.get(rec.node)
            if members is not None:
                members.discard(rec.uid)
                if not members:
                    del self.pods_by_node[rec.node]
        if node_name is not None:
            self.pods_by_node.setdefault(node_name, set()).add(rec.uid)
        rec.node = node_name

    def _account(self, rec: _PodRecord, node_name: str | None) -> None:
        """Keep node usage equal to the requests of the non-terminal pods bound to it."""
        if rec.accounted == node_name:
            return
        cpu, mem = rec.requests
        if rec.accounted is not None:
            node = self.nodes.get(rec.accounted)
            if node is not None:
                node.used_cpu_m -= cpu
                node.used_memory -= mem
                node.used_pods -= 1
            self.retry_unschedulable = True  # capacity freed
        if node_name is not None:
            node = self.nodes.get(node_name)
            if node is not None:
                node.used_cpu_m += cpu
                node.used_memory += mem
                node.used_pods += 1
        rec.accounted = node_name

    def mark_node_pods(self, node_name: str) -> None:
        """Reconcile every pod bound to ``node_name`` (its node appeared, went, or changed readiness)."""
        for uid in self.pods_by_node.get(node_name, ()):
            self.dirty[uid] = None

    # ---------------------------------------------------------------- timers

    def set_timer(self, rec: _PodRecord, due: float | None) -> None:
        """Reconcile ``rec`` again at ``due`` (event-loop time), replacing its earlier timer; None: never."""
        if due == rec.timer_due:
            return
        rec.timer_token += 1
        rec.timer_due = due
        if due is not None:
            self._timer_seq += 1
            heapq.heappush(self._timers, (due, self._timer_seq, rec.uid, rec.timer_token))

    def fire_timers(self, now: float) -> None:
        """Mark dirty every pod whose timer is due at ``now``."""
        timers = self._timers
        while timers and timers[0][0] <= now:
            _due, _seq, uid, token = heapq.heappop(timers)
            rec = self.pods.get(uid)
            if rec is not None and rec.timer_token == token:
                rec.timer_due = None
                self.dirty[uid] = None

    def next_timer(self) -> float | None:
        """When the earliest timer (possibly stale) is due, or None without timers."""
        return self._timers[0][0] if self._timers else None

    # ---------------------------------------------------------------- writes

    def write_status(self, pod: dict, desired: dict[str, Any]) -> dict:
        """Merge-patch the keys of ``desired`` into pod.status (None removes a key); skip no-ops.

        Returns the pod as stored after the write (or the given pod when nothing changed)."""
        status = pod.get("status") or {}
        patch = {k: v for k, v in desired.items() if status.get(k) != v and not (v is None and k not in status)}
        if not patch:
            return pod
        meta = pod["metadata"]
        self._own_status_write = meta.get("uid")
        try:
            return self.store.patch(
                "pods",
                meta.get("namespace"),
                meta["name"],
                "merge",
                {"status": patch},
                subresource="status",
                field_manager="kubelet",
            )
        finally:
            self._own_status_write = None

    def delete_now(self, pod: dict) -> None:
        """DELETE with grace 0 and a uid precondition; a pod already gone or replaced is no error."""
        meta = pod["metadata"]
        try:
            self.store.delete(
                "pods",
                meta.get("namespace"),
                meta["name"],
                {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone, or replaced by a new pod of the same name
                raise
