"""What the gang schedulers share: names, a group's pods as a scheduler sees them, quantities, and the
interface through which they place pods, which tfjob_sim.scheduler.Scheduler implements (:class:`Placement`).

The schedulers never touch the simulated scheduler's internals: they read nodes and a pod's requests, ask for a node
(kube-scheduler's filters and score), and write what kube-scheduler writes (a binding, an unschedulable
condition with its event, a pod condition) through :class:`Placement`; PodGroups and queues they read and
write in the store themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from tfjob_sim.crds import SCHEDULER_PLUGINS, VOLCANO
from tfjob_sim.events import EventRecorder
from tfjob_sim.quantity import parse_quantity
from tfjob_sim.resources import Registry
from tfjob_sim.store import CRD_RESOURCE, StoreReads, rfc3339

VOLCANO_PODGROUPS = "podgroups.scheduling.volcano.sh"
VOLCANO_QUEUES = "queues.scheduling.volcano.sh"
SP_PODGROUPS = "podgroups.scheduling.x-k8s.io"
PODGROUP_RESOURCES = {VOLCANO: VOLCANO_PODGROUPS, SCHEDULER_PLUGINS: SP_PODGROUPS}
# Store changes besides pods and nodes the gang schedulers listen to.
GANG_RESOURCES = frozenset({VOLCANO_PODGROUPS, SP_PODGROUPS, VOLCANO_QUEUES, CRD_RESOURCE})

VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
SP_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

DEFAULT_QUEUE = "default"
# vc-scheduler's overcommit plugin: the cluster is treated as this much larger at enqueue.
OVERCOMMIT_FACTOR = 1.2
# The Helm chart's permitWaitingTimeSeconds (the plugin default is 60); scheduleTimeoutSeconds wins.
PERMIT_WAITING_SECONDS = 10
VOLCANO_COMPONENT = "volcano"
# What the simulated nodes account (tfjob_sim.nodestate.pod_requests: cpu and memory, plus pods).
MODELLED_RESOURCES = frozenset({"cpu", "memory", "pods"})
SP_CONTROLLER = "scheduler-plugins-controller"

DEFAULT_GANG_SCHEDULER_NAMES: dict[str, str] = {"volcano": VOLCANO, "scheduler-plugins-scheduler": SCHEDULER_PLUGINS}

TERMINAL = ("Succeeded", "Failed")

GroupKey = tuple[str, str, str]  # (scheduler, namespace, group name)

Extra = dict[str, tuple[int, int, int]]  # node name -> (cpu millicores, memory, pods) placed tentatively
Members = Callable[[GroupKey], list[dict]]  # a group's pods, as the store has them now


class Node(Protocol):
    """A simulated node's capacity and what is bound to it."""

    @property
    def name(self) -> str: ...
    @property
    def ready(self) -> bool: ...
    @property
    def cpu_m(self) -> int: ...
    @property
    def memory(self) -> int: ...
    @property
    def pods(self) -> int: ...
    @property
    def used_cpu_m(self) -> int: ...
    @property
    def used_memory(self) -> int: ...
    @property
    def used_pods(self) -> int: ...


class GangStore(StoreReads, Protocol):
    """The store operations the gang schedulers use."""

    registry: Registry

    def create(self, resource: str, namespace: str | None, obj: dict, *, field_manager: str | None = None) -> dict: ...

    def update(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        obj: dict,
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> dict: ...

    def bind(self, namespace: str, name: str, binding: dict) -> dict: ...


class Placement(Protocol):
    """The simulated kube-scheduler (tfjob_sim.scheduler.Scheduler), as the gang schedulers use it."""

    @property
    def store(self) -> GangStore: ...

    @property
    def events(self) -> EventRecorder: ...

    def nodes(self) -> list[Node]:
        """Every node, ready or not."""
        ...

    def requests(self, pod: dict) -> tuple[int, int]:
        """(cpu millicores, memory) the pod requests; (0, 0) when unknown or invalid."""
        ...

    def place(self, pod: dict, extra: Extra) -> tuple[str | None, str]:
        """kube-scheduler's answer for ``pod`` on top of ``extra``: a node, or None and the FitError message."""
        ...

    def filter(self, node: Node, pod: dict, extra: Extra) -> str | None:
        """The first reason ``node`` rejects ``pod`` other than its cpu and memory, or None."""
        ...

    def score(
        self, node: Node, cpu: int, mem: int, extra: tuple[int, int, int] | None = None
    ) -> tuple[float, int, str]:
        """kube-scheduler's ranking of ``node`` for a pod of these requests (lower is better)."""
        ...

    def bind(self, pod: dict, node: str, scheduler: str) -> None:
        """The binding, with kube-scheduler's Scheduled event as ``scheduler``."""
        ...

    def unschedulable(self, pod: dict, message: str, scheduler: str) -> None:
        """A failed attempt of a gang round: PodScheduled=False and a FailedScheduling event."""
        ...

    def write_status(self, pod: dict, desired: dict[str, Any]) -> None:
        """Write these fields of the pod's status."""
        ...

    def retry_unbound(self) -> None:
        """Schedule every pod without a node again (a scheduler for them may have appeared)."""
        ...


def relevant(pod: dict | None) -> tuple:
    """What of a pod matters to its group: a change of anything else does not re-evaluate it."""
    if pod is None:
        return ()
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return (
        spec.get("nodeName"),
        (pod.get("status") or {}).get("phase"),
        bool(meta.get("deletionTimestamp")),
        spec.get("schedulerName"),
        (meta.get("labels") or {}).get(SP_GROUP_LABEL),
        (meta.get("annotations") or {}).get(VOLCANO_GROUP_ANNOTATION),
    )


def now() -> str:
    return rfc3339(time.time())


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class GroupPods:
    """A group's pods sorted by what the scheduler sees of them."""

    pending: list[dict] = field(default_factory=list)  # no node, not terminating, not finished
    bound: list[dict] = field(default_factory=list)  # on a node, not terminating, not finished
    done: list[dict] = field(default_factory=list)  # phase Succeeded
    running: int = 0  # phase Running, not terminating
    succeeded: int = 0
    failed: int = 0
    releasing: int = 0  # terminating, not finished
    total: int = 0

    @classmethod
    def of(cls, pods: list[dict]) -> GroupPods:
        out = cls(total=len(pods))
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            if phase == "Succeeded":
                out.succeeded += 1
                out.done.append(pod)
            elif phase == "Failed":
                out.failed += 1
            elif (pod.get("metadata") or {}).get("deletionTimestamp"):
                out.releasing += 1
            elif (pod.get("spec") or {}).get("nodeName"):
                out.bound.append(pod)
                out.running += phase == "Running"
            else:
                out.pending.append(pod)
        return out


def task_order(pod: dict) -> tuple:
    """Higher priority first, then older, then by name (Volcano's task order, kube-scheduler's queue)."""
    meta = pod.get("metadata") or {}
    priority = (pod.get("spec") or {}).get("priority")
    return (-(priority if isinstance(priority, int) else 0), meta.get("creationTimestamp") or "", meta.get("name", ""))


def add(extra: Extra, node: str, requests: tuple[int, int]) -> None:
    """Count a pod of ``requests`` placed tentatively on ``node``."""
    cpu, mem, pods = extra.get(node, (0, 0, 0))
    extra[node] = (cpu + requests[0], mem + requests[1], pods + 1)


def scheduler_name(pod: dict) -> str:
    return (pod.get("spec") or {}).get("schedulerName") or ""


def omitempty(obj: dict) -> dict:
    """What Go's encoding/json writes for a struct whose fields are all ``omitempty``."""
    return {k: v for k, v in obj.items() if v not in (0, "", None, [], {}) or isinstance(v, bool)}


def resource_vector(resources: Any) -> dict[str, float] | None:
    """minResources as amounts in the units the nodes are accounted in (cpu millicores, bytes, pods);
    None if a quantity is invalid. Resources the simulated nodes do not model are left out."""
    if not isinstance(resources, dict):
        return None
    out: dict[str, float] = {}
    for name, value in resources.items():
        if name not in MODELLED_RESOURCES:
            continue  # like a pod's request of it, which the simulated nodes do not account either
        try:
            amount = parse_quantity(value)
        except ValueError:
            return None
        out[name] = float(amount * 1000) if name == "cpu" else float(amount)
    return out


class GroupScheduler:
    """What a gang scheduler module works with: the kubelet's placement, the store, the scheduler names
    (``spec.schedulerName`` -> scheduler) and a group's pods."""

    def __init__(self, placement: Placement, names: dict[str, str], members: Members) -> None:
        self.placement = placement
        self.store = placement.store
        self.names = names
        self.members = members
