"""Simulated scheduler, kubelet, node lifecycle controller and pod GC for the simulated cluster.

Why this module exists: a real cluster does not only store pods, it *runs* them. Controllers under
test depend on what happens after a pod is created: it gets a node, turns Running with a podIP and
container statuses, exits and is restarted with back-off, is evicted, or hangs in Terminating on a
dead node. :class:`Kubelet` plays every component that writes those changes, KWOK-style (nothing
really runs), driven by pod annotations so tests and ``kubectl annotate`` can steer a pod:

===================================== ====================================================
``sim.tfjob.dev/start-seconds``       Pending -> Running delay (default ``default_start_seconds``)
``sim.tfjob.dev/run-seconds``         each container instance runs this long, then exits
``sim.tfjob.dev/exit-code``           the exit code (default 0); on a running pod without
                                      run-seconds a *new* value makes the containers exit now
``sim.tfjob.dev/reason``              terminated reason (default Completed / OOMKilled(137) / Error)
``sim.tfjob.dev/evict``               ``"true"``: node-pressure eviction now (phase Failed, Evicted)
``sim.tfjob.dev/unschedulable``       ``"true"``: the scheduler finds no node (stays Pending)
``sim.tfjob.dev/sigterm-seconds``     on deletion, the process exits this long after SIGTERM
                                      (default ``default_sigterm_seconds``, 0.2 s)
``sim.tfjob.dev/sigterm-exit-code``   its exit code then (default 143: killed by SIGTERM; 0 for
                                      a process that traps SIGTERM and exits cleanly)
``sim.tfjob.dev/ignore-sigterm``      ``"true"``: SIGTERM is ignored, SIGKILL (137) comes when the
                                      grace period ends
===================================== ====================================================

Contract:
- All writes go through the :class:`~tfjob_sim.store.Store` API, so they have exactly the
  semantics of API writes (RV bumps, watch events, no-op suppression, graceful deletion). Status is
  written through the ``status`` subresource; the scheduler binds through ``Store.bind`` (one
  write: ``spec.nodeName`` once plus PodScheduled=True).
- Level-triggered: a pod is reconciled from the stored object plus the kubelet's per-uid memory
  (when its container instance started, what annotation values were already acted on). The store
  listener only marks pods dirty; one worker owned by :meth:`Kubelet.run` does the writes, never
  from inside a listener callback. A status write of the kubelet's own does not mark its pod dirty:
  the sync that made it already acted on everything that write contains (a real kubelet's status
  manager does not resync a pod for its own update either).
- Time: every simulated duration is multiplied by ``KubeletConfig.time_scale``. Timers live in one
  heap (one entry per pod, stale entries skipped) instead of one task per pod, so 100,000 pods cost
  memory proportional to their records, not to tasks. A timer for a deleted pod is dropped with its
  record.
- ``pause()`` stops every transition (scheduling, starts, exits, deletion confirmation, evictions);
  ``resume()`` reconciles every known pod, so overdue timers fire at once.
- A node whose ``Ready`` condition is not ``True`` is treated as unreachable: its kubelet does
  nothing (pods keep their last state, terminating pods stay terminating); the node lifecycle
  controller marks its pods not ready and, after the pod's NoExecute toleration (default
  ``node_eviction_seconds``), the taint manager deletes them gracefully. Pods bound to a node that
  no longer exists are force-deleted by pod GC after ``pod_gc_orphan_seconds``.
- Every container of a pod follows the same annotations, so they start, exit and restart together.
- ``KubeletConfig(runtime="process")``: containers are real processes instead (sim/tfjob_sim/process/,
  the pod lifecycle in process/pods.py); of the annotations above only ``evict`` and ``unschedulable``
  apply then. Scheduling, node lifecycle, pod GC, events and status writing are this module's either way.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import orjson
import structlog

from tfjob_sim.errors import ApiError, not_found
from tfjob_sim.events import EventRecorder, node_reference, object_reference
from tfjob_sim.gang import DEFAULT_GANG_SCHEDULER_NAMES, GANG_RESOURCES, GANG_SCHEDULERS, GangScheduler
from tfjob_sim.gang.common import Extra, GangStore, Node
from tfjob_sim.logs import LOG_INTERVAL_SECONDS, LogSource, Source, render_lines
from tfjob_sim.podstate import (
    ANNOTATION_PREFIX,
    BACKOFF,
    BACKOFF_INITIAL_SECONDS,
    BACKOFF_MAX_SECONDS,
    BOUND,
    CREATING,
    EVICT,
    EVICTED,
    EXITED,
    KILLED,
    KUBELET,
    MINIMUM_GRACE_SECONDS,
    RETRY_AFTER_ERROR_SECONDS,
    RUNNING,
    TERMINAL_PHASES,
    _containers,
    _image_id,
    _Node,
    _PodRecord,
    _sha256,
    _Termination,
    _unknown_termination,
    backoff_at_exit,
    crash_loop_message,
    go_duration_precise,
    image_size,
    new_container_status,
    now_timestamp,
    prestop_sleep_seconds,
    restarts,
)
from tfjob_sim.quantity import parse_quantity
from tfjob_sim.resources import qos_class, set_condition, with_transition

log = structlog.get_logger(__name__)

START_SECONDS = ANNOTATION_PREFIX + "start-seconds"
RUN_SECONDS = ANNOTATION_PREFIX + "run-seconds"
EXIT_CODE = ANNOTATION_PREFIX + "exit-code"
REASON = ANNOTATION_PREFIX + "reason"
UNSCHEDULABLE = ANNOTATION_PREFIX + "unschedulable"
SIGTERM_SECONDS = ANNOTATION_PREFIX + "sigterm-seconds"
SIGTERM_EXIT_CODE = ANNOTATION_PREFIX + "sigterm-exit-code"
IGNORE_SIGTERM = ANNOTATION_PREFIX + "ignore-sigterm"

# A process killed by SIGTERM's default action: 128 + 15 (Python's default handler is SIG_DFL).
SIGTERM_DEFAULT_EXIT_CODE = 143

DEFAULT_SCHEDULER = "default-scheduler"
TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

# After a write conflict the pod is reconciled again this soon (wall seconds; other failures wait
# RETRY_AFTER_ERROR_SECONDS).
RETRY_AFTER_CONFLICT_SECONDS = 0.05
# Distinct pod placement shapes whose static filter results are kept (see Kubelet._static_fit).
FIT_CACHE_SHAPES = 1024
# Pods reconciled between checkpoints, so a burst of events never starves the API server.
BATCH_CHECKPOINT = 256

KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")

NODE_NOT_POSTING = "Kubelet stopped posting node status."
NODE_CONTROLLER = "node-controller"
SIM_KUBELET_VERSION = "v1.31.0"
RUNTIMES = ("annotations", "process")


class StoreLike(GangStore, Protocol):
    """The subset of tfjob_sim.store.Store this module uses: what the gang schedulers it drives use, and these."""

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
    # "annotations": containers are simulated, steered by annotations (the table above); "process":
    # every container is a real process in its pod's network namespace (sim/tfjob_sim/process/),
    # which needs root.
    runtime: str = "annotations"

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, got {self.runtime!r}")
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


# --------------------------------------------------------------------------------------------
# Small helpers: time, quantities, Go-style durations.


def _milli(value: Any) -> int:
    return int(math.ceil(parse_quantity(value) * 1000))


def _whole(value: Any) -> int:
    return int(math.ceil(parse_quantity(value)))


class _AnnotationError(ValueError):
    pass


def _parse_seconds(raw: str | None, name: str) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise _AnnotationError(f"{name}: {raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise _AnnotationError(f"{name}: {raw!r} must be a finite number >= 0")
    return value


def _parse_exit_code(raw: str | None, name: str = EXIT_CODE) -> int | None:
    if raw is None:
        return None
    try:
        code = int(raw.strip())
    except ValueError:
        raise _AnnotationError(f"{name}: {raw!r} is not an integer") from None
    if not 0 <= code <= 255:
        raise _AnnotationError(f"{name}: {raw!r} must be between 0 and 255")
    return code


def default_reason(code: int) -> str:
    if code == 0:
        return "Completed"
    if code == 137:
        return "OOMKilled"
    return "Error"


# --------------------------------------------------------------------------------------------
# Scheduling helpers: requests, tolerations, node affinity.


def pod_requests(spec: dict) -> tuple[int, int]:
    """(cpu millicores, memory bytes) the scheduler accounts for: sum of containers, max with init
    containers; a container without requests but with limits requests its limits (API defaulting)."""

    def one(container: dict) -> tuple[int, int]:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        cpu = requests.get("cpu", limits.get("cpu"))
        mem = requests.get("memory", limits.get("memory"))
        return (_milli(cpu) if cpu is not None else 0, _whole(mem) if mem is not None else 0)

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


def _tolerates(tolerations: list, taint: dict) -> dict | None:
    """The first toleration matching ``taint`` (v1 Toleration.ToleratesTaint), or None."""
    for tol in tolerations:
        if not isinstance(tol, dict):
            continue
        effect = tol.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = tol.get("key") or ""
        operator = tol.get("operator") or "Equal"
        if operator == "Exists":
            if key and key != taint.get("key"):
                continue
            return tol
        if key != taint.get("key") or (tol.get("value") or "") != (taint.get("value") or ""):
            continue
        return tol
    return None


def _match_expression(expr: dict, labels: dict, name: str, is_field: bool) -> bool:
    key = expr.get("key", "")
    op = expr.get("operator", "")
    values = expr.get("values") or []
    value: Any  # a label value from the JSON (or the pod name)
    if is_field:
        present, value = key == "metadata.name", name
    else:
        present, value = key in labels, labels.get(key)
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except (TypeError, ValueError):
            return False
        return left > right if op == "Gt" else left < right
    return False


def _node_affinity_matches(spec: dict, labels: dict, name: str) -> bool:
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    for term in terms:  # terms are ORed, expressions within a term ANDed
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue
        if all(_match_expression(e, labels, name, False) for e in exprs) and all(
            _match_expression(f, labels, name, True) for f in fields
        ):
            return True
    return False


def fit_error(total: int, reasons: dict[str, int], resource_failures: int) -> str:
    """The FitError message with the default preemption's verdict: ``reasons`` counts the nodes each
    filter reason rejected, ``resource_failures`` the nodes rejected for resources only (preemption
    could free those; it cannot help the others)."""
    parts = sorted(f"{count} {reason}" for reason, count in reasons.items())
    preemption = []
    if total - resource_failures:
        preemption.append(f"{total - resource_failures} Preemption is not helpful for scheduling")
    if resource_failures:
        preemption.append(f"{resource_failures} No preemption victims found for incoming pod")
    return (
        f"0/{total} nodes are available: {', '.join(parts)}. "
        f"preemption: 0/{total} nodes are available: {', '.join(sorted(preemption))}."
    )


def _placement_key(spec: dict, forced: bool) -> Any:
    """What the usage-independent filters read of a pod, as a hashable key (None: not cacheable)."""
    tolerations = spec.get("tolerations")
    selector = spec.get("nodeSelector")
    affinity = spec.get("affinity")
    if not tolerations and not selector and not affinity:
        return forced
    required = ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    try:
        return orjson.dumps([forced, tolerations, selector, required])
    except TypeError:
        return None


def _resource_failures(node: _Node, cpu: int, mem: int, extra: tuple[int, int, int] | None) -> list[str]:
    """NodeResourcesFit: what ``node`` lacks for a pod requesting ``cpu``/``mem`` (plus ``extra``)."""
    add_cpu, add_mem, add_pods = extra or (0, 0, 0)
    failed = []
    if node.used_pods + add_pods + 1 > node.pods:
        failed.append("Too many pods")
    if cpu and node.used_cpu_m + add_cpu + cpu > node.cpu_m:
        failed.append("Insufficient cpu")
    if mem and node.used_memory + add_mem + mem > node.memory:
        failed.append("Insufficient memory")
    return failed


# --------------------------------------------------------------------------------------------
# State.


class _IPAllocator:
    """Unique pod IPs from 10.244.0.0/14; an IP is reused only after its pod is gone."""

    def __init__(self) -> None:
        self._next = (10 << 24) | (244 << 16) | 2
        self._last = (10 << 24) | (247 << 16) | (255 << 8) | 254
        self._free: list[int] = []
        self._free_head = 0

    def allocate(self) -> str:
        if self._free_head < len(self._free):
            value = self._free[self._free_head]
            self._free_head += 1
            if self._free_head > 4096 and self._free_head * 2 > len(self._free):
                del self._free[: self._free_head]
                self._free_head = 0
        else:
            while self._next & 0xFF in (0, 255):
                self._next += 1
            if self._next > self._last:
                raise RuntimeError("simulated pod network 10.244.0.0/14 is exhausted")
            value = self._next
            self._next += 1
        return ".".join(str((value >> s) & 0xFF) for s in (24, 16, 8, 0))

    def release(self, ip: str) -> None:
        a, b, c, d = (int(x) for x in ip.split("."))
        self._free.append((a << 24) | (b << 16) | (c << 8) | d)


# --------------------------------------------------------------------------------------------


class Kubelet:
    """Scheduler + kubelet + node lifecycle controller + pod GC of the simulated cluster.

    Create it with the store, then ``await run()`` inside a task group; cancel the task to stop.
    ``pause``/``resume``/``set_node_ready`` may be called from the event-loop thread at any time.
    """

    def __init__(self, store: StoreLike, config: KubeletConfig | None = None) -> None:
        self._store = store
        self.config = config or KubeletConfig()
        self._scale = self.config.time_scale
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, _PodRecord] = {}
        self._pods_by_node: dict[str, set[str]] = {}
        self._dirty: dict[str, None] = {}
        self._unschedulable: dict[str, None] = {}
        self._retry_unschedulable = False
        self._timers: list[tuple[float, int, str, int]] = []
        self._timer_seq = 0
        self._ips = _IPAllocator()
        self._images: dict[str, set[str]] = {}  # node -> images present on it
        self._fit_cache: dict[Any, tuple[list[_Node], dict[str, int]]] = {}
        self.events = EventRecorder(store, self._scale)
        self.gang = GangScheduler(self, self.config.gang_scheduler_names)
        # What the listener's guards caught: a failure there silently stops scheduling (a gang, a pod),
        # so tests assert this stays empty rather than trusting a log line.
        self.listener_failures: list[str] = []
        self._paused = False
        self._wake: anyio.Event | None = None  # created in run(): needs the running event loop
        self._started = False
        self._own_status_write: str | None = None  # uid of the pod whose status this kubelet is writing
        self.runtime: Any = None  # tfjob_sim.process.runtime.ProcessRuntime with runtime="process"
        self._processes: Any = None  # tfjob_sim.process.pods.ProcessPods, its pod lifecycle
        if self.config.runtime == "process":
            self._init_process_runtime()

    def _init_process_runtime(self) -> None:
        from tfjob_sim.process.pods import ProcessPods
        from tfjob_sim.process.runtime import ProcessRuntime, check_available

        check_available()
        self.runtime = ProcessRuntime(notify=self._pod_changed, network=_pod_network(self._store))
        self._processes = ProcessPods(self, self.runtime)

    def _pod_changed(self, uid: str) -> None:
        """The runtime saw something happen to a pod's processes or sandbox: sync it."""
        if uid in self._pods:
            self._dirty[uid] = None
            self._notify()

    # ---------------------------------------------------------------- public API

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Freeze every pod transition and deletion confirmation until resume()."""
        self._paused = True

    def resume(self) -> None:
        """Unfreeze; every known pod is reconciled so overdue timers fire at once."""
        if not self._paused:
            return
        self._paused = False
        for uid in self._pods:
            self._dirty[uid] = None
        self._retry_unschedulable = True
        self._notify()

    def retry_unbound(self) -> None:
        """Reconcile every pod without a node again (a scheduler for them may have appeared)."""
        for uid, rec in self._pods.items():
            if rec.node is None:
                self._dirty[uid] = None

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Fault API: make a node unreachable (as the node lifecycle controller records it) or Ready.

        NotReady: all node conditions Unknown/NodeStatusUnknown and the unreachable NoSchedule and
        NoExecute taints. Ready: the kubelet posts Ready again and the taints go. Raises a 404
        ApiError for an unknown node.
        """
        node = self._store.get("nodes", None, name)
        if node is None:
            raise not_found("nodes", name)
        now = now_timestamp()
        status = node.get("status") or {}
        old_conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
        conditions = []
        for ctype, healthy_reason, healthy_message in _NODE_CONDITIONS:
            old = old_conditions.get(ctype, {})
            if ready:
                value = "True" if ctype == "Ready" else "False"
                cond = {
                    "type": ctype,
                    "status": value,
                    "reason": healthy_reason,
                    "message": healthy_message,
                    "lastHeartbeatTime": now,
                }
            else:
                value = "Unknown"
                cond = {
                    "type": ctype,
                    "status": value,
                    "reason": "NodeStatusUnknown",
                    "message": NODE_NOT_POSTING,
                    "lastHeartbeatTime": old.get("lastHeartbeatTime", now),
                }
            cond["lastTransitionTime"] = (
                old["lastTransitionTime"] if old.get("status") == value and old.get("lastTransitionTime") else now
            )
            conditions.append(cond)
        known = {c[0] for c in _NODE_CONDITIONS}
        conditions += [c for t, c in old_conditions.items() if t not in known]
        was_ready = (old_conditions.get("Ready") or {}).get("status") == "True"
        if was_ready != ready:
            status_text = "NodeReady" if ready else "NodeNotReady"
            self.events.record(
                node_reference(name),
                "Normal",
                status_text,
                f"Node {name} status is now: {status_text}",
                component=NODE_CONTROLLER,
            )
        self._store.patch(
            "nodes",
            None,
            name,
            "merge",
            {"status": {"conditions": conditions}},
            subresource="status",
            field_manager="kubelet",
        )

        taints = [
            t
            for t in ((node.get("spec") or {}).get("taints") or [])
            if not (isinstance(t, dict) and t.get("key") == TAINT_UNREACHABLE)
        ]
        if not ready:
            taints += [
                {"key": TAINT_UNREACHABLE, "effect": "NoSchedule"},
                {"key": TAINT_UNREACHABLE, "effect": "NoExecute", "timeAdded": now},
            ]
        self._store.patch(
            "nodes", None, name, "merge", {"spec": {"taints": taints or None}}, field_manager="kube-controller-manager"
        )

    async def run(self) -> None:
        """Create the configured nodes, then schedule and run pods until cancelled."""
        if self._started:
            raise RuntimeError("Kubelet.run() may only be called once")
        self._started = True
        self._wake = anyio.Event()
        unsubscribe = self._store.add_listener(self._on_event)
        try:
            if self.runtime is not None:
                await self.runtime.start()
            self._ensure_nodes()
            self._initial_sync()
            await self._loop()
        finally:
            unsubscribe()
            if self.runtime is not None:
                with anyio.CancelScope(shield=True):
                    await self.runtime.stop()

    # ---------------------------------------------------------------- startup

    def _ensure_nodes(self) -> None:
        cfg = self.config
        for i in range(cfg.nodes):
            name = f"{cfg.node_name_prefix}{i}"
            if self._store.get("nodes", None, name) is not None:
                continue
            node = self._node_object(name, i)
            created = self._store.create("nodes", None, node, field_manager="kubelet")
            if not (created.get("status") or {}).get("conditions"):
                # The store dropped status on create: post it like a kubelet registering itself.
                self._store.patch(
                    "nodes",
                    None,
                    name,
                    "merge",
                    {"status": node["status"]},
                    subresource="status",
                    field_manager="kubelet",
                )

    def _node_object(self, name: str, index: int) -> dict:
        cfg = self.config
        now = now_timestamp()
        capacity = {
            "cpu": str(cfg.node_cpu),
            "ephemeral-storage": "100Gi",
            "memory": str(cfg.node_memory),
            "pods": str(cfg.node_pods),
        }
        host = index + 2
        address = f"172.18.{host // 256}.{host % 256}"
        conditions = []
        for ctype, reason, message in _NODE_CONDITIONS:
            conditions.append(
                {
                    "type": ctype,
                    "status": "True" if ctype == "Ready" else "False",
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            )
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "beta.kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "type": "sim",
                },
                "annotations": {"node.alpha.kubernetes.io/ttl": "0", "sim.tfjob.dev/managed": "true"},
            },
            "spec": {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": conditions,
                "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": _uuid_from(name + "/boot"),
                    "containerRuntimeVersion": "containerd://1.7.22",
                    "kernelVersion": "6.1.0-sim",
                    "kubeProxyVersion": SIM_KUBELET_VERSION,
                    "kubeletVersion": SIM_KUBELET_VERSION,
                    "machineID": _sha256(name)[:32],
                    "operatingSystem": "linux",
                    "osImage": "tfjob-controller simulated node",
                    "systemUUID": _uuid_from(name + "/system"),
                },
            },
        }

    def _initial_sync(self) -> None:
        nodes, _ = self._store.list("nodes")
        for node in nodes:
            self._on_node_event("ADDED", None, node)
        pods, _ = self._store.list("pods")
        for pod in pods:
            self._on_pod_event("ADDED", None, pod)
            self.gang.on_pod_event("ADDED", None, pod)
        self.gang.initial_sync()

    # ---------------------------------------------------------------- listener (synchronous, no writes)

    def _on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        if resource != "pods" and resource != "nodes":
            if resource not in GANG_RESOURCES:
                return
            try:
                self.gang.on_event(event_type, resource, old, new)
            except Exception as exc:  # a listener must never break the store's write path
                log.exception("gang scheduler listener failed", event_type=event_type, resource=resource)
                self.listener_failures.append(f"gang scheduler {event_type} {resource}: {exc!r}")
                return
            self._notify()
            return
        try:
            if resource == "pods":
                self._on_pod_event(event_type, old, new)
                self.gang.on_pod_event(event_type, old, new)
            else:
                self._on_node_event(event_type, old, new)
        except Exception as exc:  # a listener must never break the store's write path
            log.exception("kubelet listener failed", event_type=event_type, resource=resource)
            self.listener_failures.append(f"kubelet {event_type} {resource}: {exc!r}")
            return
        self._notify()

    def _on_pod_event(self, event_type: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        if event_type == "DELETED":
            rec = self._pods.pop(uid, None)
            self._dirty.pop(uid, None)
            self._unschedulable.pop(uid, None)
            if rec is not None:
                self._end_logs(rec, anyio.current_time())
                if self._processes is not None:
                    self._processes.forget(rec)
                self._account(rec, None)
                self._set_node_membership(rec, None)
                if rec.pod_ip and rec.ip_owned:
                    self._ips.release(rec.pod_ip)
            return
        rec = self._pods.get(uid)
        spec = obj.get("spec") or {}
        if rec is None:
            rec = _PodRecord(uid=uid, namespace=meta.get("namespace") or "", name=meta.get("name", ""))
            try:
                rec.requests = pod_requests(spec)
            except ValueError as exc:
                rec.requests_error = str(exc)
            self._pods[uid] = rec
        node_name = spec.get("nodeName") or None
        self._set_node_membership(rec, node_name)
        phase = (obj.get("status") or {}).get("phase")
        self._account(rec, node_name if node_name and phase not in TERMINAL_PHASES else None)
        if uid != self._own_status_write:
            self._dirty[uid] = None

    def _set_node_membership(self, rec: _PodRecord, node_name: str | None) -> None:
        if rec.node == node_name:
            return
        if rec.node is not None:
            members = self._pods_by_node.get(rec.node)
            if members is not None:
                members.discard(rec.uid)
                if not members:
                    del self._pods_by_node[rec.node]
        if node_name is not None:
            self._pods_by_node.setdefault(node_name, set()).add(rec.uid)
        rec.node = node_name

    def _account(self, rec: _PodRecord, node_name: str | None) -> None:
        """Keep node usage equal to the requests of the non-terminal pods bound to it."""
        if rec.accounted == node_name:
            return
        cpu, mem = rec.requests
        if rec.accounted is not None:
            node = self._nodes.get(rec.accounted)
            if node is not None:
                node.used_cpu_m -= cpu
                node.used_memory -= mem
                node.used_pods -= 1
            self._retry_unschedulable = True  # capacity freed
        if node_name is not None:
            node = self._nodes.get(node_name)
            if node is not None:
                node.used_cpu_m += cpu
                node.used_memory += mem
                node.used_pods += 1
        rec.accounted = node_name

    def _on_node_event(self, event_type: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        name = (obj.get("metadata") or {}).get("name", "")
        self._fit_cache.clear()  # holds _Node objects and results of their spec
        if event_type == "DELETED":
            self._nodes.pop(name, None)
            self._mark_node_pods(name)
            return
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        ready = any(
            isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        alloc = status.get("allocatable") or status.get("capacity") or {}
        try:
            cpu_m = _milli(alloc.get("cpu", 0))
            memory = _whole(alloc.get("memory", 0))
            pods = _whole(alloc.get("pods", 0))
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
        previous = self._nodes.get(name)
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
            for uid in self._pods_by_node.get(name, ()):
                rec = self._pods.get(uid)
                if rec is not None and rec.accounted == name:
                    node.used_cpu_m += rec.requests[0]
                    node.used_memory += rec.requests[1]
                    node.used_pods += 1
        if not ready and node.not_ready_since is None:
            node.not_ready_since = anyio.current_time()
        elif ready:
            node.not_ready_since = None
        self._nodes[name] = node
        if previous is None or previous.ready != node.ready or previous.host_ip != node.host_ip:
            self._mark_node_pods(name)
        if (
            previous is None
            or node.ready != previous.ready
            or node.unschedulable != previous.unschedulable
            or node.taints != previous.taints
            or node.labels != previous.labels
            or (node.cpu_m, node.memory, node.pods) != (previous.cpu_m, previous.memory, previous.pods)
        ):
            self._retry_unschedulable = True

    def _mark_node_pods(self, node_name: str) -> None:
        for uid in self._pods_by_node.get(node_name, ()):
            self._dirty[uid] = None

    # ---------------------------------------------------------------- worker

    async def _loop(self) -> None:
        while True:
            if not self._paused:
                now = anyio.current_time()
                while self._timers and self._timers[0][0] <= now:
                    _due, _seq, uid, token = heapq.heappop(self._timers)
                    rec = self._pods.get(uid)
                    if rec is not None and rec.timer_token == token:
                        rec.timer_due = None
                        self._dirty[uid] = None
                if self._retry_unschedulable:
                    self._retry_unschedulable = False
                    self.gang.retry_all()
                    for uid in self._unschedulable:
                        self._dirty[uid] = None
                        rec = self._pods.get(uid)
                        if rec is not None:
                            rec.scheduling_attempted = False  # a new attempt: reported again
                if self._dirty:
                    batch, self._dirty = self._dirty, {}
                    for count, uid in enumerate(batch, 1):
                        if self._paused:
                            break  # resume() marks every pod dirty again
                        self._process(uid)
                        if count % BATCH_CHECKPOINT == 0:
                            await anyio.sleep(0)
                    await anyio.sleep(0)
                    continue
                if self.gang.has_work:
                    self.gang.process()
                    await anyio.sleep(0)
                    continue
            timeout = math.inf
            if not self._paused and self._timers:
                timeout = max(0.0, self._timers[0][0] - anyio.current_time())
            assert self._wake is not None
            with anyio.move_on_after(timeout):
                await self._wake.wait()
            self._wake = anyio.Event()

    def _process(self, uid: str) -> None:
        rec = self._pods.get(uid)
        if rec is None:
            return
        try:
            due = self._sync(rec)
        except ApiError as exc:
            if exc.code == 404:
                return  # gone; its DELETED event drops the record
            if exc.code != 409:
                log.warning(
                    "kubelet write failed; retrying",
                    pod=f"{rec.namespace}/{rec.name}",
                    code=exc.code,
                    error=exc.message,
                )
            due = anyio.current_time() + (
                RETRY_AFTER_CONFLICT_SECONDS if exc.code == 409 else RETRY_AFTER_ERROR_SECONDS
            )
        if uid not in self._pods:
            return
        self._set_timer(rec, due)

    def _set_timer(self, rec: _PodRecord, due: float | None) -> None:
        if due == rec.timer_due:
            return
        rec.timer_token += 1
        rec.timer_due = due
        if due is not None:
            self._timer_seq += 1
            heapq.heappush(self._timers, (due, self._timer_seq, rec.uid, rec.timer_token))

    # ---------------------------------------------------------------- reconcile one pod

    def _sync(self, rec: _PodRecord) -> float | None:
        """Bring one pod one step closer to what its node would report; return when to look again."""
        pod = self._store.get("pods", rec.namespace, rec.name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != rec.uid:
            return None
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            return self._schedule(pod, rec)
        self._unschedulable.pop(rec.uid, None)
        node = self._nodes.get(node_name)
        if node is None:
            return self._collect_orphan(pod, rec)
        rec.orphan_since = None
        if not node.ready:
            return self._node_unreachable(pod, rec, node)
        rec.unreachable_marked = False
        return self._kubelet_sync(pod, rec, node)

    # --- scheduler

    def _schedule(self, pod: dict, rec: _PodRecord) -> float | None:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in TERMINAL_PHASES:
            self._unschedulable.pop(rec.uid, None)
            return None
        scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
        # A gang scheduler's pod in a PodGroup is placed with its group (sim/tfjob_sim/gang/); one
        # without a group is scheduled here under that scheduler's name; any other scheduler's pod
        # (or a gang scheduler's whose CRD is not served): nobody here binds it.
        if scheduler != DEFAULT_SCHEDULER and self.gang.handles(pod, scheduler) != "single":
            return None
        chosen, message = self.place(pod, {})
        if chosen is None:
            self._mark_unschedulable(pod, rec, message, scheduler)
            return None
        self._bind(pod, chosen, scheduler)
        self._unschedulable.pop(rec.uid, None)
        return None

    # --- the gang schedulers' Placement (tfjob_sim.gang.common): what they may use of this scheduler

    @property
    def store(self) -> StoreLike:
        return self._store

    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def requests(self, pod: dict) -> tuple[int, int]:
        rec = self._pods.get((pod.get("metadata") or {}).get("uid", ""))
        return rec.requests if rec is not None and rec.requests_error is None else (0, 0)

    def place(self, pod: dict, extra: Extra) -> tuple[str | None, str]:
        """A node for ``pod`` on top of ``extra`` (kube-scheduler's filters and score), or None and the
        FitError message: invalid requests and an empty cluster are told apart, as kube-scheduler does."""
        rec = self._pods.get((pod.get("metadata") or {}).get("uid", ""))
        if rec is not None and rec.requests_error is not None:
            return (
                None,
                f"0/{len(self._nodes)} nodes are available: invalid resource requests: {rec.requests_error}.",
            )
        if not self._nodes:
            return None, "no nodes available to schedule pods"
        return self.find_node(pod, rec.requests if rec is not None else (0, 0), extra)

    def filter(self, node: Node, pod: dict, extra: Extra) -> str | None:
        own = self._nodes.get(node.name)
        if own is None:
            return "node(s) not found"
        spec = pod.get("spec") or {}
        forced = ((pod.get("metadata") or {}).get("annotations") or {}).get(UNSCHEDULABLE) == "true"
        found = self._filter(own, spec, spec.get("tolerations") or [], forced, 0, 0, extra.get(node.name))
        return found[0] if found else None

    def bind(self, pod: dict, node: str, scheduler: str) -> None:
        self._bind(pod, node, scheduler)

    def unschedulable(self, pod: dict, message: str, scheduler: str) -> None:
        rec = self._pods.get((pod.get("metadata") or {}).get("uid", ""))
        if rec is None:
            return
        rec.scheduling_attempted = False  # every round of a gang is a new attempt
        self._mark_unschedulable(pod, rec, message, scheduler=scheduler, retry=False)

    def write_status(self, pod: dict, desired: dict[str, Any]) -> None:
        self._write_status(pod, desired)

    def find_node(
        self, pod: dict, requests: tuple[int, int], extra: dict[str, tuple[int, int, int]] | None = None
    ) -> tuple[str | None, str]:
        """kube-scheduler's Filter and Score for one pod: the chosen node, or None and the FitError
        message (with the default preemption's verdict). ``extra`` adds (cpu millicores, memory,
        pods) per node name on top of what is bound there: pods a gang scheduler placed tentatively.

        The filters that read only the pod and the node's spec (unschedulable, taints, affinity) run
        once per pod shape and node generation (:meth:`_static_fit`); only the resource fit and the
        score, which read live usage, run per node for each pod. Same answer as :meth:`_filter` on
        every node: the static filters come first in the plugin order, so a node they reject never
        reaches the resource check either."""
        spec = pod.get("spec") or {}
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        total = len(self._nodes)
        cpu, mem = requests
        passing, static_reasons = self._static_fit(spec, annotations.get(UNSCHEDULABLE) == "true")
        reasons = dict(static_reasons)
        resource_failures = 0
        best: _Node | None = None
        best_score: tuple[float, int, str] | None = None
        score = self.score
        for node in passing:
            add = extra.get(node.name) if extra else None
            failed = _resource_failures(node, cpu, mem, add)
            if failed:
                resource_failures += 1
                for reason in failed:
                    reasons[reason] = reasons.get(reason, 0) + 1
                continue
            node_score = score(node, cpu, mem, add)
            if best_score is None or node_score < best_score:
                best, best_score = node, node_score
        if best is not None:
            return best.name, ""
        return None, fit_error(total, reasons, resource_failures)

    def _static_fit(self, spec: dict, forced: bool) -> tuple[list[_Node], dict[str, int]]:
        """The nodes that pass the filters independent of usage, and how many each of those filters
        rejected, for a pod of this placement shape. Cached per shape until any node changes (every
        node event replaces its :class:`_Node` and clears the cache), so a burst of pods from a few
        templates filters the nodes a few times, not once per pod."""
        key = _placement_key(spec, forced)
        if key is not None:
            hit = self._fit_cache.get(key)
            if hit is not None:
                return hit
        tolerations = spec.get("tolerations") or []
        passing: list[_Node] = []
        reasons: dict[str, int] = {}
        for node in self._nodes.values():
            reason = self._static_filter(node, spec, tolerations, forced)
            if reason is None:
                passing.append(node)
            else:
                reasons[reason] = reasons.get(reason, 0) + 1
        if key is not None:
            if len(self._fit_cache) >= FIT_CACHE_SHAPES:
                self._fit_cache.clear()  # shapes unique per pod (e.g. a hostname selector each)
            self._fit_cache[key] = (passing, reasons)
        return passing, reasons

    @staticmethod
    def score(node: Node, cpu: int, mem: int, extra: tuple[int, int, int] | None = None) -> tuple[float, int, str]:
        """Least allocated first (lower is better), then fewer pods, then the name."""
        add = extra or (0, 0, 0)
        cpu_frac = (node.used_cpu_m + add[0] + cpu) / node.cpu_m if node.cpu_m else 1.0
        mem_frac = (node.used_memory + add[1] + mem) / node.memory if node.memory else 1.0
        return ((cpu_frac + mem_frac) / 2, node.used_pods + add[2], node.name)

    def _filter(
        self,
        node: _Node,
        spec: dict,
        tolerations: list,
        forced: bool,
        cpu: int,
        mem: int,
        extra: tuple[int, int, int] | None = None,
    ) -> list[str]:
        """The first failing filter's reasons for ``node``, in the default profile's plugin order."""
        reason = self._static_filter(node, spec, tolerations, forced)
        if reason is not None:
            return [reason]
        return _resource_failures(node, cpu, mem, extra)

    @staticmethod
    def _static_filter(node: _Node, spec: dict, tolerations: list, forced: bool) -> str | None:
        """NodeUnschedulable, TaintToleration, NodeAffinity: the first one that rejects, or None."""
        if node.unschedulable and _tolerates(tolerations, {"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}) is None:
            return "node(s) were unschedulable"
        taints = node.taints
        if not node.ready and not any(t.get("key") in (TAINT_UNREACHABLE, TAINT_NOT_READY) for t in taints):
            taints = taints + [{"key": TAINT_NOT_READY, "effect": "NoSchedule"}]
        for taint in taints:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and _tolerates(tolerations, taint) is None:
                return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '') or ''}}}"
        if forced or not _node_affinity_matches(spec, node.labels, node.name):
            return "node(s) didn't match Pod's node affinity/selector"
        return None

    def _mark_unschedulable(
        self, pod: dict, rec: _PodRecord, message: str, scheduler: str = DEFAULT_SCHEDULER, retry: bool = True
    ) -> None:
        """A failed scheduling attempt: the condition, and one FailedScheduling event per attempt (the
        pod's own updates re-run the filters here but are not new attempts of the scheduling queue).
        ``retry``: retried here when capacity frees (a gang scheduler retries its groups itself)."""
        if retry:
            self._unschedulable[rec.uid] = None
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        conditions = set_condition((pod.get("status") or {}).get("conditions") or [], cond, now_timestamp())
        old = next(
            (
                c
                for c in (pod.get("status") or {}).get("conditions") or []
                if isinstance(c, dict) and c.get("type") == "PodScheduled"
            ),
            None,
        )
        if not rec.scheduling_attempted or (old or {}).get("message") != message:
            rec.scheduling_attempted = True
            self.events.record_series(
                object_reference(pod),
                "Warning",
                "FailedScheduling",
                "Scheduling",
                message,
                controller=scheduler,
                instance=self.events.scheduler_instance,
            )
        self._write_status(pod, {"conditions": conditions})
        return None

    def _bind(self, pod: dict, node_name: str, scheduler: str = DEFAULT_SCHEDULER) -> None:
        """The binding subresource: spec.nodeName and PodScheduled=True in one write, like kube-scheduler."""
        meta = pod["metadata"]
        self._store.bind(meta.get("namespace"), meta["name"], {"target": {"kind": "Node", "name": node_name}})
        self.events.record_series(
            object_reference(pod),
            "Normal",
            "Scheduled",
            "Binding",
            f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node_name}",
            controller=scheduler,
            instance=self.events.scheduler_instance,
        )

    # --- pod GC and node lifecycle

    def _collect_orphan(self, pod: dict, rec: _PodRecord) -> float | None:
        """PodGC: a pod bound to a node that does not exist is failed and force-deleted."""
        if rec.gc_done:
            return None
        now = anyio.current_time()
        if rec.orphan_since is None:
            rec.orphan_since = now
        due = rec.orphan_since + self.config.pod_gc_orphan_seconds * self._scale
        if now < due:
            return due
        status = pod.get("status") or {}
        ts = now_timestamp()
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists",
        }
        update: dict[str, Any] = {"conditions": set_condition(status.get("conditions") or [], cond, ts)}
        if status.get("phase") not in TERMINAL_PHASES:
            update["phase"] = "Failed"
        self._write_status(pod, update)
        rec.gc_done = True
        self._delete_now(pod)
        return None

    def _node_unreachable(self, pod: dict, rec: _PodRecord, node: _Node) -> float | None:
        """What the node lifecycle controller and the taint manager do to pods of an unreachable node."""
        status = pod.get("status") or {}
        meta = pod.get("metadata") or {}
        if not rec.unreachable_marked:
            rec.unreachable_marked = True
            conditions = status.get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                ts = now_timestamp()
                marked = [
                    dict(c, status="False", lastTransitionTime=ts) if c.get("type") == "Ready" else c
                    for c in conditions
                ]
                pod = self._write_status(pod, {"conditions": marked})
                status = pod.get("status") or {}
                self.events.record(
                    object_reference(pod), "Warning", "NodeNotReady", "Node is not ready", component=NODE_CONTROLLER
                )
        if meta.get("deletionTimestamp") or rec.taint_evicted:
            return None  # terminating: only a kubelet can confirm it
        taint = next(
            (
                t
                for t in node.taints
                if t.get("effect") == "NoExecute" and t.get("key") in (TAINT_UNREACHABLE, TAINT_NOT_READY)
            ),
            None,
        )
        if taint is None:
            return None
        toleration = _tolerates((pod.get("spec") or {}).get("tolerations") or [], taint)
        if toleration is None:
            # DefaultTolerationSeconds admission gives every pod this toleration; our store does not.
            seconds = float(self.config.node_eviction_seconds)
        else:
            given = toleration.get("tolerationSeconds")
            if given is None:
                return None  # tolerates the taint forever
            seconds = max(0.0, float(given))
        now = anyio.current_time()
        due = (node.not_ready_since or now) + seconds * self._scale
        if now < due:
            return due
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByTaintManager",
            "message": "Taint manager: deleting due to NoExecute taint",
        }
        self._write_status(pod, {"conditions": set_condition(status.get("conditions") or [], cond, now_timestamp())})
        rec.taint_evicted = True
        self._store.delete("pods", meta.get("namespace"), meta["name"], {"preconditions": {"uid": rec.uid}})
        return None

    # --- kubelet

    def _kubelet_sync(self, pod: dict, rec: _PodRecord, node: _Node) -> float | None:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        annotations = meta.get("annotations") or {}
        now = anyio.current_time()
        if self._processes is not None:
            return self._processes.sync(pod, rec, node, now)
        if meta.get("deletionTimestamp"):
            return self._terminate(pod, rec, node, now)
        if rec.life == BOUND:
            if status.get("phase") in TERMINAL_PHASES:
                return None  # finished before this kubelet knew it (pre-populated store)
            if status.get("phase") == "Running" and self._adopt_running(pod, rec, annotations, now):
                return rec.run_due
            rec.life = CREATING
            rec.admitted_at = now_timestamp()
            rec.creating_since = now
            self._pull_images(pod, rec)
            rec.start_seen = annotations.get(START_SECONDS)
            start = self._annotation_seconds(pod, rec, START_SECONDS)
            rec.start_due = now + (self.config.default_start_seconds if start is None else start) * self._scale

        for _ in range(16):  # transitions that are due now (e.g. run-seconds=0 restarts at once)
            if not self._step(pod, rec, annotations, now):
                break
        self._write_status(pod, self._render(pod, rec, node))
        if rec.life == CREATING:
            return rec.start_due
        if rec.life == RUNNING:
            return rec.run_due
        if rec.life == BACKOFF:
            return rec.restart_due
        return None

    def _adopt_running(self, pod: dict, rec: _PodRecord, annotations: dict, now: float) -> bool:
        """Take over a pod some earlier kubelet started (its containers keep running)."""
        status = pod.get("status") or {}
        running = [
            s
            for s in status.get("containerStatuses") or []
            if isinstance(s, dict) and ((s.get("state") or {}).get("running") or {}).get("startedAt")
        ]
        if not running:
            return False
        rec.life = RUNNING
        rec.admitted_at = status.get("startTime") or now_timestamp()
        rec.instance_started_at = running[0]["state"]["running"]["startedAt"]
        rec.restart_count = int(running[0].get("restartCount") or 0)
        rec.pod_ip = status.get("podIP") or None
        if rec.pod_ip is None:
            rec.pod_ip, rec.ip_owned = self._ips.allocate(), True
        rec.exit_acted = annotations.get(EXIT_CODE)  # values present before adoption were acted on
        rec.run_seen = annotations.get(RUN_SECONDS)
        run = self._annotation_seconds(pod, rec, RUN_SECONDS)
        rec.run_due = None if run is None else now + run * self._scale
        return True

    def _step(self, pod: dict, rec: _PodRecord, annotations: dict, now: float) -> bool:
        """One due transition of the kubelet's state machine; False when nothing is due."""
        if annotations.get(EVICT) == "true" and not rec.evict_acted and rec.life in (CREATING, RUNNING, BACKOFF):
            rec.evict_acted = True
            self._evict(pod, rec)
            return False
        if rec.life == CREATING:
            raw = annotations.get(START_SECONDS)
            if raw != rec.start_seen:
                rec.start_seen = raw
                start = self._annotation_seconds(pod, rec, START_SECONDS)
                rec.start_due = now + (self.config.default_start_seconds if start is None else start) * self._scale
            if rec.start_due is not None and now >= rec.start_due:
                self._start_instance(pod, rec, annotations, now, restart=False)
                return True
            return False
        if rec.life == RUNNING:
            code = self._exit_due(pod, rec, annotations, now)
            if code is None:
                return False
            self._exit_instance(pod, rec, annotations, code, now)
            return True
        if rec.life == BACKOFF and rec.restart_due is not None and now >= rec.restart_due:
            # flowcontrol.Backoff.Next at restart: double (capped), unless the entry expired.
            rec.backoff = min((rec.backoff or BACKOFF_INITIAL_SECONDS) * 2, BACKOFF_MAX_SECONDS)
            rec.backoff_updated = now
            self._start_instance(pod, rec, annotations, now, restart=True)
            return True
        return False

    def _exit_due(self, pod: dict, rec: _PodRecord, annotations: dict, now: float) -> int | None:
        """The exit code if the running instance exits now (run-seconds elapsed, or a new exit-code
        value on a pod without run-seconds), else None. Records the annotation values acted on."""
        raw_run = annotations.get(RUN_SECONDS)
        if raw_run != rec.run_seen:  # a new value on a live pod counts from now
            rec.run_seen = raw_run
            run = self._annotation_seconds(pod, rec, RUN_SECONDS)
            rec.run_due = None if run is None else now + run * self._scale
        raw_exit = annotations.get(EXIT_CODE)
        if rec.run_due is None:
            if raw_exit is None or raw_exit == rec.exit_acted:
                return None
            rec.exit_acted = raw_exit
            return self._annotation_exit_code(pod, rec)
        if now < rec.run_due:
            return None
        rec.exit_acted = raw_exit
        code = self._annotation_exit_code(pod, rec)
        return 0 if code is None else code

    def _start_instance(self, pod: dict, rec: _PodRecord, annotations: dict, now: float, restart: bool) -> None:
        self._container_start_events(pod, rec, restart)
        if restart:
            rec.previous = rec.current
            rec.restart_count += 1
        rec.current = None
        rec.restart_due = None
        rec.life = RUNNING
        rec.instance_started_at = now_timestamp()
        self._open_logs(pod, rec, restart, now)
        rec.run_seen = annotations.get(RUN_SECONDS)
        run = self._annotation_seconds(pod, rec, RUN_SECONDS)
        rec.run_due = None if run is None else now + run * self._scale
        if rec.pod_ip is None:
            rec.pod_ip, rec.ip_owned = self._ips.allocate(), True

    def _exit_instance(self, pod: dict, rec: _PodRecord, annotations: dict, code: int, now: float) -> None:
        reason = annotations.get(REASON) or default_reason(code)
        rec.current = _exited_now(rec, code, reason)
        self._end_logs(rec, rec.run_due if rec.run_due is not None and rec.run_due <= now else now)
        rec.run_due = None
        if not restarts(pod, code):
            rec.life = EXITED
            return
        rec.backoff, rec.backoff_updated, delay = backoff_at_exit(rec.backoff, rec.backoff_updated, now, self._scale)
        if delay is None:
            self._start_instance(pod, rec, annotations, now, restart=True)
            return
        rec.life = BACKOFF
        rec.restart_due = now + delay
        for path, container in _containers(pod, init=False):
            self.back_off_event(pod, rec, path, container.get("name", ""))

    def back_off_event(self, pod: dict, rec: _PodRecord, path: str, name: str) -> None:
        meta = pod.get("metadata") or {}
        self._container_event(
            pod,
            rec,
            path,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container {name} in pod {meta.get('name')}_{meta.get('namespace')}({rec.uid})",
        )

    def evicted_event(self, pod: dict, rec: _PodRecord) -> None:
        spec = pod.get("spec") or {}
        self.events.record(
            object_reference(pod),
            "Warning",
            "Evicted",
            self._eviction_message([c for c in spec.get("containers") or [] if isinstance(c, dict)]),
            component=KUBELET,
            host=rec.node or "",
        )

    def _evict(self, pod: dict, rec: _PodRecord) -> None:
        """Node-pressure eviction. The kubelet kills the containers and removes them, so their final
        state is the status manager's "could not be located" default (exit 137)."""
        self.evicted_event(pod, rec)
        if rec.life == RUNNING:
            self._killing_events(pod, rec)
        if rec.life == BACKOFF and rec.current is not None:
            rec.previous = rec.current
        rec.life = EVICTED
        self._end_logs(rec, anyio.current_time())
        rec.run_due = rec.restart_due = rec.start_due = None
        rec.current = _unknown_termination(rec.restart_count)

    def _terminate(self, pod: dict, rec: _PodRecord, node: _Node, now: float) -> float | None:
        """Graceful deletion as the kubelet's killContainer does it, then the final status and DELETE
        with grace 0 and a uid precondition.

        Stopping starts when the kubelet first sees the deletion: preStop ``sleep`` hooks run inside
        the grace budget, then SIGTERM; the process exits ``sigterm-seconds`` later (143, or
        ``sigterm-exit-code``) unless it exits by itself first or ignores SIGTERM, in which case the
        runtime sends SIGKILL (137) when the remaining grace, at least 2 s, has passed.
        """
        if rec.delete_sent:
            return None
        meta = pod["metadata"]
        grace = max(0, meta.get("deletionGracePeriodSeconds") or 0)
        if rec.life == RUNNING:
            annotations = meta.get("annotations") or {}
            spec = pod.get("spec") or {}
            if rec.stop_started is None:
                rec.stop_started = now
                self._killing_events(pod, rec)
                rec.sigterm_due = now + min(prestop_sleep_seconds(spec), grace) * self._scale
                if annotations.get(IGNORE_SIGTERM) != "true":
                    delay = self._annotation_seconds(pod, rec, SIGTERM_SECONDS)
                    if delay is None:
                        delay = self.config.default_sigterm_seconds
                    rec.sigterm_exit_due = rec.sigterm_due + delay * self._scale
            # A shorter grace period from a second DELETE moves SIGKILL earlier, never later.
            prestop = (rec.sigterm_due - rec.stop_started) / self._scale if rec.sigterm_due is not None else 0.0
            deadline = rec.stop_started + (prestop + max(grace - prestop, MINIMUM_GRACE_SECONDS)) * self._scale
            if rec.kill_due is None or deadline < rec.kill_due:
                rec.kill_due = deadline
            natural = self._exit_due(pod, rec, annotations, now)  # exits by itself during the grace period
            exits = []
            if natural is not None:
                exits.append(
                    (
                        rec.run_due if rec.run_due is not None else now,
                        natural,
                        annotations.get(REASON) or default_reason(natural),
                    )
                )
            if rec.sigterm_exit_due is not None and now >= rec.sigterm_exit_due:
                code = self._sigterm_exit_code(pod, rec)
                exits.append((rec.sigterm_exit_due, code, "Completed" if code == 0 else "Error"))
            if now >= rec.kill_due:
                exits.append((rec.kill_due, 137, "Error"))  # SIGKILL at the end of the grace period
            if not exits:
                self._write_status(pod, self._render(pod, rec, node))
                return min(due for due in (rec.kill_due, rec.run_due, rec.sigterm_exit_due) if due is not None)
            when, code, reason = min(exits, key=lambda e: e[0])
            rec.current = _exited_now(rec, code, reason)
            rec.life = KILLED
            self._end_logs(rec, when)
        elif rec.life in (BOUND, CREATING, BACKOFF):
            if rec.current is None:
                rec.current = _unknown_termination(rec.restart_count)
            rec.life = KILLED
        rec.run_due = rec.restart_due = rec.start_due = None
        if rec.admitted_at is not None:
            pod = self._write_status(pod, self._render(pod, rec, node))
        rec.delete_sent = True
        self._delete_now(pod)
        return None

    def _sigterm_exit_code(self, pod: dict, rec: _PodRecord) -> int:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SIGTERM_EXIT_CODE)
        try:
            code = _parse_exit_code(raw, SIGTERM_EXIT_CODE)
        except _AnnotationError as exc:
            self._warn_annotation(rec, f"{SIGTERM_EXIT_CODE}={raw}", str(exc))
            code = None
        return SIGTERM_DEFAULT_EXIT_CODE if code is None else code

    def _delete_now(self, pod: dict) -> None:
        meta = pod["metadata"]
        try:
            self._store.delete(
                "pods",
                meta.get("namespace"),
                meta["name"],
                {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone, or replaced by a new pod of the same name
                raise

    # --- container logs

    def log_source(self, uid: str, container_id: str) -> Source | None:
        """The output of a container instance this kubelet still keeps (current or previous), or None."""
        rec = self._pods.get(uid)
        if rec is None or rec.logs is None:
            return None
        return rec.logs.get(container_id)

    def _open_logs(self, pod: dict, rec: _PodRecord, restart: bool, started: float) -> None:
        """A new instance starts printing; keep the previous instance's output, forget older ones
        (and a finished init container's, which the kubelet keeps while the pod exists)."""
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name", "")
        interval = (self._annotation_seconds(pod, rec, LOG_INTERVAL_SECONDS) or 0.0) * self._scale
        now = _wall(started)
        old = rec.logs or {}
        logs: dict[str, Source] = {}
        spec = pod.get("spec") or {}
        for c in spec.get("initContainers") or []:
            if not isinstance(c, dict):
                continue
            cid = self._container_id(rec, "init-" + c.get("name", ""), 0)
            kept = old.get(cid)
            if kept is None:
                kept = LogSource(cid, render_lines(annotations, namespace, name, c.get("name", ""), 0), now, 0.0)
                kept.end(now)
            logs[cid] = kept
        for c in spec.get("containers") or []:
            if not isinstance(c, dict):
                continue
            cname = c.get("name", "")
            if rec.previous is not None:
                previous = old.get(self._container_id(rec, cname, rec.previous.instance))
                if previous is not None:
                    logs[previous.container_id] = previous
            cid = self._container_id(rec, cname, rec.restart_count)
            logs[cid] = LogSource(
                cid, render_lines(annotations, namespace, name, cname, rec.restart_count), now, interval
            )
        rec.logs = logs

    def _end_logs(self, rec: _PodRecord, stopped: float) -> None:
        """The current instance stopped printing (exit, kill, eviction, or the pod is gone) at the
        (simulated, monotonic) moment ``stopped``, however late this worker got to it."""
        if not rec.logs:
            return
        when = _wall(stopped)
        for source in rec.logs.values():
            if source.finished is None:
                source.end(when)

    # --- events (the kubelet's recorder)

    def _container_event(
        self, pod: dict, rec: _PodRecord, field_path: str, type_: str, reason: str, message: str
    ) -> None:
        self.events.record(
            object_reference(pod, field_path), type_, reason, message, component=KUBELET, host=rec.node or ""
        )

    def _needs_pull(self, node: str | None, container: dict) -> bool:
        policy = container.get("imagePullPolicy") or "IfNotPresent"
        if policy == "Never":
            return False
        return policy == "Always" or container.get("image", "") not in self._images.get(node or "", ())

    def _pull_images(self, pod: dict, rec: _PodRecord) -> None:
        """Admission: the kubelet pulls the first container's image if the node lacks it (or always,
        under imagePullPolicy Always); the pull lasts the start delay."""
        first = next(iter(_containers(pod, init=True)), None)
        rec.pulling = None
        if first is not None and self._needs_pull(rec.node, first[1]):
            rec.pulling = first[0]
            self._container_event(
                pod, rec, first[0], "Normal", "Pulling", f'Pulling image "{first[1].get("image", "")}"'
            )

    def _container_start_events(self, pod: dict, rec: _PodRecord, restart: bool) -> None:
        """What the kubelet reports for each container it starts now, in start order (init containers
        first, only on the first start): the image (pulled or present), Created, Started. Only the
        first container's pull takes time (the start delay); later pulls are instant."""
        waited = 0.0
        if not restart and rec.creating_since is not None and rec.start_due is not None:
            waited = max(0.0, rec.start_due - rec.creating_since) / self._scale
        images = self._images.setdefault(rec.node or "", set())
        for path, container in _containers(pod, init=not restart):
            image = container.get("image", "")
            name = container.get("name", "")
            took = go_duration_precise(waited if path == rec.pulling else 0.0)
            if path != rec.pulling and self._needs_pull(rec.node, container):
                self._container_event(pod, rec, path, "Normal", "Pulling", f'Pulling image "{image}"')
                rec.pulling = path
            if path == rec.pulling:
                self._container_event(
                    pod,
                    rec,
                    path,
                    "Normal",
                    "Pulled",
                    f'Successfully pulled image "{image}" in {took} ({took} including waiting). '
                    f"Image size: {image_size(image)} bytes.",
                )
                images.add(image)
            else:
                self._container_event(
                    pod, rec, path, "Normal", "Pulled", f'Container image "{image}" already present on machine'
                )
            self._container_event(pod, rec, path, "Normal", "Created", f"Created container: {name}")
            self._container_event(pod, rec, path, "Normal", "Started", f"Started container {name}")
        rec.pulling = None

    def _killing_events(self, pod: dict, rec: _PodRecord) -> None:
        for path, container in _containers(pod, init=False):
            self._container_event(
                pod, rec, path, "Normal", "Killing", f"Stopping container {container.get('name', '')}"
            )

    # --- annotation parsing (bad values are logged once per value and ignored)

    def _annotation_seconds(self, pod: dict, rec: _PodRecord, key: str) -> float | None:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
        try:
            return _parse_seconds(raw, key)
        except _AnnotationError as exc:
            self._warn_annotation(rec, f"{key}={raw}", str(exc))
            return None

    def _annotation_exit_code(self, pod: dict, rec: _PodRecord) -> int | None:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXIT_CODE)
        try:
            return _parse_exit_code(raw)
        except _AnnotationError as exc:
            self._warn_annotation(rec, f"{EXIT_CODE}={raw}", str(exc))
            return None

    def _warn_annotation(self, rec: _PodRecord, key: str, message: str) -> None:
        if rec.bad_annotations is None:
            rec.bad_annotations = set()
        if key not in rec.bad_annotations:
            rec.bad_annotations.add(key)
            log.warning("ignoring invalid simulation annotation", pod=f"{rec.namespace}/{rec.name}", error=message)

    # --- status rendering

    def _render(self, pod: dict, rec: _PodRecord, node: _Node) -> dict[str, Any]:
        """The kubelet-owned part of the pod status, computed from the record (the node's truth)."""
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        ts = now_timestamp()
        containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
        inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
        life = rec.life
        if life in (EXITED, KILLED):
            phase = "Succeeded" if rec.current is not None and rec.current.exit_code == 0 else "Failed"
        elif life == EVICTED:
            phase = "Failed"
        elif life in (RUNNING, BACKOFF):
            phase = "Running"
        else:
            phase = "Pending"
        names = sorted(c.get("name", "") for c in containers)
        ready = life == RUNNING
        initialized = life != CREATING or not inits
        if self._processes is not None:
            rendered = self._processes.render_containers(pod, rec)
            phase, ready, initialized = rendered.phase, rendered.ready, rendered.initialized
            container_statuses, init_statuses = rendered.statuses, rendered.init_statuses
        else:
            container_statuses = sorted(
                (self._container_status(pod, rec, c) for c in containers), key=lambda s: s["name"]
            )
            init_statuses = [self._init_status(pod, rec, c) for c in inits]
        incomplete = f"containers with incomplete status: [{' '.join(c.get('name', '') for c in inits)}]"
        if phase in TERMINAL_PHASES:
            not_ready = {"status": "False", "reason": "PodCompleted" if phase == "Succeeded" else "PodFailed"}
        elif not initialized:
            not_ready = {"status": "False", "reason": "ContainersNotInitialized", "message": incomplete}
        else:
            not_ready = {
                "status": "False",
                "reason": "ContainersNotReady",
                "message": f"containers with unready status: [{' '.join(names)}]",
            }
        kubelet_conditions = [
            {"type": "PodReadyToStartContainers", "status": "True" if life in (RUNNING, BACKOFF) else "False"},
            {"type": "Initialized", "status": "True"}
            if initialized
            else {
                "type": "Initialized",
                "status": "False",
                "reason": "ContainersNotInitialized",
                "message": incomplete,
            },
            dict(type="Ready", status="True") if ready else dict(type="Ready", **not_ready),
            dict(type="ContainersReady", status="True") if ready else dict(type="ContainersReady", **not_ready),
        ]
        old_conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        conditions = []
        for cond in kubelet_conditions:
            conditions.append(with_transition(cond, old_conditions, ts))
        if life == EVICTED:
            extra = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": self._eviction_message(containers),
            }
            old_conditions = set_condition(old_conditions, extra, ts)
        conditions += [c for c in old_conditions if c.get("type") not in KUBELET_CONDITIONS]

        out: dict[str, Any] = {
            "phase": phase,
            "conditions": conditions,
            "hostIP": node.host_ip,
            "hostIPs": [{"ip": node.host_ip}] if node.host_ip else None,
            "startTime": rec.admitted_at,
            "podIP": rec.pod_ip,
            "podIPs": [{"ip": rec.pod_ip}] if rec.pod_ip else None,
            "containerStatuses": container_statuses,
            "initContainerStatuses": init_statuses or None,
            "reason": "Evicted" if life == EVICTED else None,
            "message": self._eviction_message(containers) if life == EVICTED else None,
        }
        if not status.get("qosClass"):
            out["qosClass"] = qos_class(spec)
        return out

    def _eviction_message(self, containers: list[dict]) -> str:
        parts = ["The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "]
        for c in containers:
            request = ((c.get("resources") or {}).get("requests") or {}).get("memory", "0")
            try:
                used = _whole(request) + 512 * 1024 * 1024
            except ValueError:
                used = 512 * 1024 * 1024
            parts.append(
                f"Container {c.get('name', '')} was using {used // 1024}Ki, request is {request}, "
                "has larger consumption of memory. "
            )
        return "".join(parts)

    def _container_id(self, rec: _PodRecord, name: str, instance: int) -> str:
        return "containerd://" + _sha256(f"{rec.uid}/{name}/{instance}")

    def _terminated(self, rec: _PodRecord, name: str, term: _Termination) -> dict[str, Any]:
        out: dict[str, Any] = {"exitCode": term.exit_code, "reason": term.reason}
        if term.message:
            out["message"] = term.message
        if term.started_at is not None:
            out["containerID"] = self._container_id(rec, name, term.instance)
            out["startedAt"] = term.started_at
            out["finishedAt"] = term.finished_at
        return out

    def _container_status(self, pod: dict, rec: _PodRecord, container: dict) -> dict[str, Any]:
        name = container.get("name", "")
        image = container.get("image", "")
        life = rec.life
        out = new_container_status(name, image, rec.restart_count)
        if rec.previous is not None:
            out["lastState"] = {"terminated": self._terminated(rec, name, rec.previous)}
        ran = rec.instance_started_at is not None
        if ran:
            out["imageID"] = _image_id(image)
        if life == RUNNING:
            out.update(
                containerID=self._container_id(rec, name, rec.restart_count),
                ready=True,
                started=True,
                state={"running": {"startedAt": rec.instance_started_at}},
            )
        elif life == BACKOFF and rec.current is not None:
            message = crash_loop_message(pod, rec.uid, name, rec.backoff)
            out.update(
                containerID=self._container_id(rec, name, rec.current.instance),
                state={"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                lastState={"terminated": self._terminated(rec, name, rec.current)},
            )
        elif life in (EXITED, KILLED, EVICTED) and rec.current is not None:
            if rec.current.started_at is not None:
                out["containerID"] = self._container_id(rec, name, rec.current.instance)
            out["state"] = {"terminated": self._terminated(rec, name, rec.current)}
        else:
            out["state"] = {"waiting": {"reason": "ContainerCreating"}}
        return out

    def _init_status(self, pod: dict, rec: _PodRecord, container: dict) -> dict[str, Any]:
        name = container.get("name", "")
        image = container.get("image", "")
        out = new_container_status(name, image, 0)
        if rec.life == CREATING:
            out["state"] = {"waiting": {"reason": "PodInitializing"}}
        else:
            out["imageID"] = _image_id(image)
            out["containerID"] = self._container_id(rec, "init-" + name, 0)
            out["state"] = {
                "terminated": {
                    "containerID": out["containerID"],
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": rec.admitted_at,
                    "finishedAt": rec.admitted_at,
                }
            }
        return out

    # --- writing

    def _write_status(self, pod: dict, desired: dict[str, Any]) -> dict:
        """Merge-patch the keys of ``desired`` into pod.status (None removes a key); skip no-ops.

        Returns the pod as stored after the write (or the given pod when nothing changed)."""
        status = pod.get("status") or {}
        patch = {k: v for k, v in desired.items() if status.get(k) != v and not (v is None and k not in status)}
        if not patch:
            return pod
        meta = pod["metadata"]
        self._own_status_write = meta.get("uid")
        try:
            return self._store.patch(
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


_NODE_CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "KubeletReady", "kubelet is posting ready status"),
)


def _pod_network(store: StoreLike) -> Any:
    """The process runtime's pod network (network namespaces, addresses, cluster DNS)."""
    from tfjob_sim.process.network import PodNetwork

    return PodNetwork(store=store)


def _wall(monotonic: float) -> float:
    """Wall-clock time of a moment on the event loop's (monotonic) clock."""
    return time.time() - (anyio.current_time() - monotonic)


def _exited_now(rec: _PodRecord, code: int, reason: str) -> _Termination:
    """The terminated state of the record's present (annotation-driven) instance, exiting now."""
    return _Termination(
        exit_code=code,
        reason=reason,
        started_at=rec.instance_started_at,
        finished_at=now_timestamp(),
        instance=rec.restart_count,
    )


def _uuid_from(text: str) -> str:
    h = _sha256(text)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"
