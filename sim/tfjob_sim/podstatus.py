"""The pod status the simulated kubelet writes, whatever runs the containers.

Why a module of its own: both container runtimes (annotation-driven, tfjob_sim.annotationpods, and real
processes, tfjob_sim.process.pods) report their containers differently, but the pod-level part of the
status (conditions, IPs, startTime, QoS class, an eviction's reason and message) and the shapes of
container IDs and terminated states are the kubelet's, one rule for both.

Contract: :func:`render_status` takes the runtime's view of the containers (:class:`ContainersView`:
phase, readiness, statuses) and returns the kubelet-owned keys of ``pod.status``, for
:meth:`tfjob_sim.nodestate.NodeState.write_status`; it writes nothing itself.
"""

from __future__ import annotations

from typing import Any, Protocol

from tfjob_sim.nodestate import whole
from tfjob_sim.podstate import (
    BACKOFF,
    EVICTED,
    RUNNING,
    TERMINAL_PHASES,
    _Node,
    _PodRecord,
    _sha256,
    _Termination,
    now_timestamp,
)
from tfjob_sim.resources import qos_class, set_condition, with_transition

# The pod conditions the kubelet owns (others, e.g. PodScheduled or DisruptionTarget, are kept).
KUBELET_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")


class ContainersView(Protocol):
    """What a container runtime reports of a pod's containers (the kubelet's getPhase and statuses)."""

    @property
    def phase(self) -> str: ...
    @property
    def ready(self) -> bool: ...  # every container ready
    @property
    def initialized(self) -> bool: ...  # every init container succeeded
    @property
    def statuses(self) -> list[dict]: ...
    @property
    def init_statuses(self) -> list[dict]: ...


def container_id(rec: _PodRecord, name: str, instance: int) -> str:
    """The containerID of instance ``instance`` (its restart count) of container ``name``."""
    return "containerd://" + _sha256(f"{rec.uid}/{name}/{instance}")


def terminated(rec: _PodRecord, name: str, term: _Termination) -> dict[str, Any]:
    """A ``state.terminated`` (or ``lastState.terminated``) of container ``name``."""
    out: dict[str, Any] = {"exitCode": term.exit_code, "reason": term.reason}
    if term.message:
        out["message"] = term.message
    if term.started_at is not None:
        out["containerID"] = container_id(rec, name, term.instance)
        out["startedAt"] = term.started_at
        out["finishedAt"] = term.finished_at
    return out


def eviction_message(containers: list[dict]) -> str:
    """The node-pressure eviction's message, naming every container's (simulated) memory use."""
    parts = ["The node was low on resource: memory. Threshold quantity: 100Mi, available: 51200Ki. "]
    for c in containers:
        request = ((c.get("resources") or {}).get("requests") or {}).get("memory", "0")
        try:
            used = whole(request) + 512 * 1024 * 1024
        except ValueError:
            used = 512 * 1024 * 1024
        parts.append(
            f"Container {c.get('name', '')} was using {used // 1024}Ki, request is {request}, "
            "has larger consumption of memory. "
        )
    return "".join(parts)


def render_status(pod: dict, rec: _PodRecord, node: _Node, view: ContainersView) -> dict[str, Any]:
    """The kubelet-owned part of the pod status, from the record (the node's truth) and the runtime's
    ``view`` of the containers."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ts = now_timestamp()
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    life = rec.life
    phase, ready, initialized = view.phase, view.ready, view.initialized
    names = sorted(c.get("name", "") for c in containers)
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
            "message": eviction_message(containers),
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
        "containerStatuses": view.statuses,
        "initContainerStatuses": view.init_statuses or None,
        "reason": "Evicted" if life == EVICTED else None,
        "message": eviction_message(containers) if life == EVICTED else None,
    }
    if not status.get("qosClass"):
        out["qosClass"] = qos_class(spec)
    return out
