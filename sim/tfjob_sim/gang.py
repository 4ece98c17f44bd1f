"""Simulated gang schedulers: Volcano's vc-scheduler and scheduler-plugins' coscheduling (with its
PodGroup controller), inside the simulated cluster's scheduler.

Why this module exists: a TFJob controller started with ``--gang-scheduler-name`` creates a PodGroup
per job and hands its pods to a gang scheduler, then waits on what that scheduler writes (Volcano:
the PodGroup leaving phase Pending before any pod is created). Testing it needs schedulers that
place a group all-or-nothing against node capacity and write PodGroup status, pod conditions and
events as the real ones do (Volcano v1.9 and scheduler-plugins' coscheduling: the phases, conditions and
messages below).

Contract:
- A scheduler is installed when its PodGroup CRD is served (``SimConfig.podgroup_crds`` or
  ``kubectl apply -f sim/tfjob_sim/crds/<name>``); before that its pods are left alone, as on a
  cluster without it. Which ``spec.schedulerName`` belongs to which is
  ``KubeletConfig.gang_scheduler_names`` (``volcano`` and ``scheduler-plugins-scheduler``).
- Membership: Volcano, annotation ``scheduling.k8s.io/group-name`` on a pod of a Volcano scheduler
  name; scheduler-plugins, label ``scheduling.x-k8s.io/pod-group`` (any pod with the label counts
  toward the group, as in the plugin and its controller). A gang scheduler's pod in no group is
  scheduled alone by the kubelet's scheduler under that scheduler's name (Volcano would give it a
  shadow PodGroup of minMember 1: the same placement, here with kube-scheduler's messages).
- Event-driven, no polling: a group is evaluated when one of its pods or its PodGroup changes in a
  way that matters (creation, deletion, spec, node, phase), and every group that waits (pods without
  a node, or a Volcano group not yet enqueued) when capacity is freed or nodes change (the moments
  the kubelet retries unschedulable pods). The store listener only
  marks groups dirty; :meth:`GangScheduler.process`, called from the kubelet's worker, writes.
- Placement reuses the kubelet's node accounting and filters (:meth:`Kubelet.find_node`); pods placed
  tentatively count on their node until the group is committed (all bound) or discarded (none).
- Simplifications (docs/simulator.md lists them): no Permit wait (a scheduler-plugins gang that
  cannot be completed now is rejected at once, its timeout named in the message), no pipelining
  onto resources of terminating pods, no preemption or reclaim, queues have no capacity.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from tfjob_sim.errors import ApiError
from tfjob_sim.events import object_reference
from tfjob_sim.resources import set_condition
from tfjob_sim.store import CRD_RESOURCE

if TYPE_CHECKING:
    from tfjob_sim.kubelet import Kubelet

log = structlog.get_logger(__name__)

VOLCANO = "volcano"
SCHEDULER_PLUGINS = "scheduler-plugins"

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
# What the simulated nodes account (tfjob_sim.kubelet.pod_requests: cpu and memory, plus pods).
MODELLED_RESOURCES = frozenset({"cpu", "memory", "pods"})
SP_CONTROLLER = "scheduler-plugins-controller"

GANG_SCHEDULERS = (VOLCANO, SCHEDULER_PLUGINS)
DEFAULT_GANG_SCHEDULER_NAMES: dict[str, str] = {"volcano": VOLCANO, "scheduler-plugins-scheduler": SCHEDULER_PLUGINS}

_TERMINAL = ("Succeeded", "Failed")

GroupKey = tuple[str, str, str]  # (scheduler, namespace, group name)


def group_of(pod: dict, names: dict[str, str]) -> GroupKey | None:
    """The PodGroup a pod belongs to, or None. A Volcano pod is Volcano's (its scheduler caches only
    its own pods); otherwise scheduler-plugins' label decides, whatever the pod's scheduler."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    if names.get((pod.get("spec") or {}).get("schedulerName") or "") == VOLCANO:
        group = (meta.get("annotations") or {}).get(VOLCANO_GROUP_ANNOTATION)
        if group:
            return (VOLCANO, namespace, group)
    label = (meta.get("labels") or {}).get(SP_GROUP_LABEL)
    if label:
        return (SCHEDULER_PLUGINS, namespace, label)
    return None


def _relevant(pod: dict | None) -> tuple:
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


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class _Pods:
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
    def of(cls, pods: list[dict]) -> _Pods:
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


def _task_order(pod: dict) -> tuple:
    """Higher priority first, then older, then by name (Volcano's task order, kube-scheduler's queue)."""
    meta = pod.get("metadata") or {}
    priority = (pod.get("spec") or {}).get("priority")
    return (-(priority if isinstance(priority, int) else 0), meta.get("creationTimestamp") or "", meta.get("name", ""))


class GangScheduler:
    """The gang schedulers of one simulated cluster; owned and driven by the :class:`Kubelet`."""

    def __init__(self, kubelet: Kubelet, names: dict[str, str] | None = None) -> None:
        self._kubelet = kubelet
        self._store = kubelet._store
        self.names = dict(DEFAULT_GANG_SCHEDULER_NAMES if names is None else names)
        self._members: dict[GroupKey, set[str]] = {}  # group -> "namespace/name" of its pods
        self._group_of: dict[str, GroupKey] = {}  # pod uid -> group
        self._podgroups: set[GroupKey] = set()  # PodGroups that exist
        self._dirty: dict[GroupKey, None] = {}
        self._volcano_waiting: set[GroupKey] = set()  # Volcano groups in phase "" or Pending
        self._waiting_pods: dict[GroupKey, set[str]] = {}  # group -> uids of its pods without a node
        self._ensure_queue = False

    # ---------------------------------------------------------------- installed?

    def installed(self, scheduler: str) -> bool:
        return self._store.registry.get(PODGROUP_RESOURCES[scheduler]) is not None

    @property
    def has_work(self) -> bool:
        return bool(self._dirty or self._ensure_queue)

    # ---------------------------------------------------------------- listener side (no writes)

    def initial_sync(self) -> None:
        for scheduler, resource in PODGROUP_RESOURCES.items():
            if self.installed(scheduler):
                for pg in self._store.list(resource)[0]:
                    self.on_event("ADDED", resource, None, pg)
        self._ensure_queue = self._store.registry.get(VOLCANO_QUEUES) is not None

    def on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        """A store change; pods come through :meth:`on_pod_event`."""
        if resource == CRD_RESOURCE:
            name = ((new or old or {}).get("metadata") or {}).get("name")
            if name == VOLCANO_QUEUES and new is not None:
                self._ensure_queue = True
            if name in (VOLCANO_PODGROUPS, SP_PODGROUPS, VOLCANO_QUEUES):
                # A scheduler was installed (or its queues appeared): its waiting pods get a chance,
                # those in groups here, those alone through the kubelet's scheduler.
                self.retry_all()
                self._kubelet.retry_unbound()
            return
        if resource == VOLCANO_QUEUES:
            self.retry_all()
            return
        scheduler = VOLCANO if resource == VOLCANO_PODGROUPS else SCHEDULER_PLUGINS
        obj = new if new is not None else old
        meta = (obj or {}).get("metadata") or {}
        key = (scheduler, meta.get("namespace") or "", meta.get("name", ""))
        if new is None:
            self._podgroups.discard(key)
        else:
            self._podgroups.add(key)
        # The scheduler's own status writes do not re-evaluate the group (nothing it reads changed).
        if (
            old is None
            or new is None
            or old.get("spec") != new.get("spec")
            or (old.get("metadata") or {}).get("uid") != meta.get("uid")
        ):
            self._dirty[key] = None
        if scheduler == VOLCANO:
            phase = ((new or {}).get("status") or {}).get("phase") or ""
            if new is not None and phase in ("", "Pending"):
                self._volcano_waiting.add(key)
            else:
                self._volcano_waiting.discard(key)
            if ((old or {}).get("status") or {}).get("phase") != ((new or {}).get("status") or {}).get("phase"):
                # A group entering or leaving Inqueue changes what enqueue admits for the others.
                for other in self._volcano_waiting:
                    self._dirty[other] = None

    def on_pod_event(self, event_type: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        meta = (obj or {}).get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        before = self._group_of.get(uid)
        after = group_of(new, self.names) if new is not None else None
        if before is None and after is None:
            return  # the common case: a pod of no gang
        ref = f"{meta.get('namespace') or ''}/{meta.get('name', '')}"
        if before is not None:
            waiting = self._waiting_pods.get(before)
            if waiting is not None:
                waiting.discard(uid)
                if not waiting:
                    del self._waiting_pods[before]
        if after is not None and _Pods.of([new]).pending:
            self._waiting_pods.setdefault(after, set()).add(uid)
        if before != after:
            if before is not None:
                members = self._members.get(before)
                if members is not None:
                    members.discard(ref)
                    if not members:
                        del self._members[before]
                self._dirty[before] = None
                del self._group_of[uid]
            if after is not None:
                self._members.setdefault(after, set()).add(ref)
                self._group_of[uid] = after
                self._dirty[after] = None
        elif after is not None and _relevant(old) != _relevant(new):
            self._dirty[after] = None

    def handles(self, pod: dict, scheduler_name: str) -> str | None:
        """How a pod of a non-default scheduler is scheduled: "group" (with its PodGroup, here),
        "single" (alone, by the kubelet's scheduler under that name), or None (no such scheduler runs:
        nobody binds it)."""
        scheduler = self.names.get(scheduler_name)
        if scheduler is None or not self.installed(scheduler):
            return None
        key = group_of(pod, self.names)
        return "group" if key is not None and key[0] == scheduler else "single"

    def retry_all(self) -> None:
        """Capacity was freed or nodes changed: every group that waits for it is evaluated again."""
        for key in self._waiting_pods:
            self._dirty[key] = None
        for key in self._volcano_waiting:
            self._dirty[key] = None

    # ---------------------------------------------------------------- worker side (writes)

    def process(self) -> None:
        if self._ensure_queue:
            self._ensure_queue = False
            self._create_default_queue()
        dirty, self._dirty = self._dirty, {}
        for key in sorted(dirty, key=self._group_order):
            scheduler = key[0]
            if not self.installed(scheduler):
                continue
            try:
                if scheduler == VOLCANO:
                    self._volcano_session(key)
                else:
                    self._coscheduling_round(key)
                    self._sp_controller(key)
            except ApiError as exc:
                if exc.code in (404, 409):
                    self._dirty[key] = None  # a conflict or a vanished object: look again with fresh state
                else:  # retried at the group's next change, never in a hot loop
                    log.warning("gang scheduler write failed", group="/".join(key), code=exc.code, error=exc.message)

    def _group_order(self, key: GroupKey) -> tuple:
        pg = self._store.get(PODGROUP_RESOURCES[key[0]], key[1], key[2]) if self.installed(key[0]) else None
        meta = (pg or {}).get("metadata") or {}
        return (meta.get("creationTimestamp") or "~", key)

    def _pods(self, key: GroupKey) -> list[dict]:
        out = []
        for ref in self._members.get(key, ()):
            namespace, _, name = ref.partition("/")
            pod = self._store.get("pods", namespace, name)
            if pod is not None:
                out.append(pod)
        return out

    def _create_default_queue(self) -> None:
        """vc-scheduler creates its default queue at startup; the queue controller opens it."""
        if (
            self._store.registry.get(VOLCANO_QUEUES) is None
            or self._store.get(VOLCANO_QUEUES, None, DEFAULT_QUEUE) is not None
        ):
            return
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"reclaimable": True, "weight": 1},
        }
        try:
            self._store.create(VOLCANO_QUEUES, None, queue, field_manager="vc-scheduler")
        except ApiError as exc:
            if exc.code != 409:
                raise
            return
        self._store.patch(
            VOLCANO_QUEUES,
            None,
            DEFAULT_QUEUE,
            "merge",
            {"status": {"state": "Open", "allocated": {"cpu": "0", "memory": "0"}}},
            subresource="status",
            field_manager="vc-controller-manager",
        )

    # ---------------------------------------------------------------- capacity

    def _fit(self, pod: dict, extra: dict[str, tuple[int, int, int]]) -> tuple[str | None, str]:
        """A node for ``pod`` on top of ``extra`` (kube-scheduler's filters), or None and the message."""
        kubelet = self._kubelet
        rec = kubelet._pods.get((pod.get("metadata") or {}).get("uid", ""))
        if rec is not None and rec.requests_error is not None:
            return (
                None,
                f"0/{len(kubelet._nodes)} nodes are available: invalid resource requests: {rec.requests_error}.",
            )
        if not kubelet._nodes:
            return None, "no nodes available to schedule pods"
        return kubelet.find_node(pod, rec.requests if rec is not None else (0, 0), extra)

    def _requests(self, pod: dict) -> tuple[int, int]:
        rec = self._kubelet._pods.get((pod.get("metadata") or {}).get("uid", ""))
        return rec.requests if rec is not None and rec.requests_error is None else (0, 0)

    @staticmethod
    def _add(extra: dict[str, tuple[int, int, int]], node: str, requests: tuple[int, int]) -> None:
        cpu, mem, pods = extra.get(node, (0, 0, 0))
        extra[node] = (cpu + requests[0], mem + requests[1], pods + 1)

    def _bind(self, pod: dict, node: str, scheduler_name: str) -> None:
        if scheduler_name != VOLCANO_COMPONENT:
            self._kubelet._bind(pod, node, scheduler=scheduler_name)
            return
        # vc-scheduler binds through the same subresource but reports with a core/v1 recorder.
        meta = pod["metadata"]
        self._store.bind(meta.get("namespace"), meta["name"], {"target": {"kind": "Node", "name": node}})
        self._kubelet.events.record(
            object_reference(pod),
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}",
            component=VOLCANO_COMPONENT,
        )

    def _unschedulable(self, pod: dict, message: str, scheduler_name: str) -> None:
        """kube-scheduler's failure handler: PodScheduled=False and a FailedScheduling event."""
        kubelet = self._kubelet
        rec = kubelet._pods.get((pod.get("metadata") or {}).get("uid", ""))
        if rec is None:
            return
        rec.scheduling_attempted = False  # every round of a gang is a new attempt
        kubelet._mark_unschedulable(pod, rec, message, scheduler=scheduler_name, retry=False)

    # ---------------------------------------------------------------- Volcano

    def _queue_exists(self, name: str) -> bool:
        if self._store.registry.get(VOLCANO_QUEUES) is None:
            return True  # no queue API at all: nothing to check against
        return self._store.get(VOLCANO_QUEUES, None, name) is not None

    def _volcano_session(self, key: GroupKey) -> None:
        """One vc-scheduler session for one job: enqueue, allocate, gang close, job status."""
        _, namespace, name = key
        pods = [
            p for p in self._pods(key) if self.names.get((p.get("spec") or {}).get("schedulerName") or "") == VOLCANO
        ]
        pg = self._store.get(VOLCANO_PODGROUPS, namespace, name)
        if pg is None:
            # Volcano's pod admission webhook refuses such pods; without webhooks here, they wait
            # with its message.
            for pod in _Pods.of(pods).pending:
                pod_name = (pod.get("metadata") or {}).get("name", "")
                self._volcano_pod_condition(
                    pod,
                    "Unschedulable",
                    f'failed to get PodGroup for pod {namespace}/{pod_name}: {VOLCANO_PODGROUPS} "{name}" not found',
                )
            return
        spec = pg.get("spec") or {}
        status = pg.get("status") or {}
        if not self._queue_exists(spec.get("queue") or DEFAULT_QUEUE):
            return  # "Failed to find Queue": skipped silently, Pending for ever
        min_member = _int(spec.get("minMember"))
        phase = status.get("phase") or ""
        state = _Pods.of(pods)
        if phase in ("", "Pending"):
            if self._volcano_enqueueable(pg):
                phase = "Inqueue"
            else:
                self._kubelet.events.record(
                    object_reference(pg),
                    "Normal",
                    "Unschedulable",
                    "resource in cluster is overused",
                    component=VOLCANO_COMPONENT,
                )
        outcome = _VolcanoOutcome()
        ready = len(state.bound) + state.succeeded
        # JobValid: enough live pods, in total and per task.
        valid = len(state.pending) + ready >= min_member and _task_minimums_met(
            spec, min_member, state.pending + state.bound + state.done
        )
        # BestEffort pods (no requests) are left to the backfill action and count as ready while pending.
        best_effort = [p for p in state.pending if self._requests(p) == (0, 0)]
        if phase not in ("", "Pending") and valid:
            requesting = [p for p in state.pending if self._requests(p) != (0, 0)]
            ready += self._volcano_allocate(
                requesting, state.bound + state.done + best_effort, spec, min_member, outcome
            )
            if _gang_ready(spec, min_member, state.bound + state.done + best_effort):
                ready += self._volcano_backfill(best_effort, outcome)
        if outcome.bound:
            state = _Pods.of([self._store.get("pods", *_ns_name(p)) or p for p in pods])
        job_ready = _gang_ready(
            spec, min_member, state.bound + state.done + [p for p in state.pending if self._requests(p) == (0, 0)]
        )
        histogram = self._volcano_histogram(state, outcome, min_member)
        if job_ready:
            cond = {
                "type": "Scheduled",
                "status": "True",
                "reason": "tasks in gang are ready to be scheduled",
                "message": "",
            }
            job_fit_errors = ""
        else:
            schedulable = len(outcome.discarded) + ready
            job_fit_errors = f"{min_member - schedulable}/{state.total} tasks in gang unschedulable: {histogram}"
            cond = {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": job_fit_errors,
            }
        if state.running and not job_ready:
            new_phase = "Unknown"
        elif len(state.bound) + state.succeeded >= min_member:
            new_phase = "Completed" if state.succeeded == len(state.bound) + state.succeeded else "Running"
        elif phase != "Inqueue":
            new_phase = "Pending"
        else:
            new_phase = phase
        new_status = _omitempty(
            dict(
                status,
                phase=new_phase,
                running=state.running,
                succeeded=state.succeeded,
                failed=state.failed,
                conditions=_volcano_conditions(status.get("conditions"), cond),
            )
        )
        updated = _volcano_status_key(new_status) != _volcano_status_key(status)
        if updated:
            pg = self._store.update(
                VOLCANO_PODGROUPS, namespace, name, dict(pg, status=new_status), field_manager="vc-scheduler"
            )
        if new_phase in ("Unknown", "Pending", "Inqueue"):
            self._kubelet.events.record(
                object_reference(pg),
                "Warning",
                "Unschedulable",
                f"{len(state.pending)}/{state.total} tasks in gang unschedulable: {histogram}",
                component=VOLCANO_COMPONENT,
            )
        elif updated:
            self._kubelet.events.record(
                object_reference(pg), "Normal", "Scheduled", "pod group is ready", component=VOLCANO_COMPONENT
            )
        for pod in state.pending:
            uid = (pod.get("metadata") or {}).get("uid", "")
            if uid in outcome.discarded:
                meta = pod.get("metadata") or {}
                self._volcano_pod_condition(
                    pod,
                    "Schedulable",
                    f"Pod {meta.get('namespace')}/{meta.get('name')} "
                    f"can possibly be assigned to {outcome.discarded[uid]}",
                )
            else:
                self._volcano_pod_condition(
                    pod, "Unschedulable", outcome.fit_errors.get(uid) or job_fit_errors or "all nodes are unavailable"
                )

    def _volcano_allocate(
        self, pending: list[dict], ready: list[dict], spec: dict, min_member: int, outcome: _VolcanoOutcome
    ) -> int:
        """The allocate action's statement: place pending tasks in order until one fits nowhere; bind
        them all if the job is then ready (with the ``ready`` pods), else discard them. Returns how
        many were bound."""
        extra: dict[str, tuple[int, int, int]] = {}
        placed: list[tuple[dict, str]] = []
        for pod in sorted(pending, key=_task_order):
            node, reasons = self._volcano_fit(pod, extra)
            if node is None:
                outcome.fit_errors[(pod.get("metadata") or {}).get("uid", "")] = reasons
                break
            self._add(extra, node, self._requests(pod))
            placed.append((pod, node))
        if placed and _gang_ready(spec, min_member, ready + [pod for pod, _node in placed]):
            for pod, node in placed:
                self._bind(pod, node, VOLCANO_COMPONENT)
            outcome.bound += len(placed)
            return len(placed)
        for pod, node in placed:
            outcome.discarded[(pod.get("metadata") or {}).get("uid", "")] = node
        return 0

    def _volcano_backfill(self, pending: list[dict], outcome: _VolcanoOutcome) -> int:
        """The backfill action: BestEffort tasks bound one by one where they fit, until one fits nowhere."""
        bound = 0
        for pod in sorted(pending, key=_task_order):
            node, reasons = self._volcano_fit(pod, {})  # node usage already includes what was just bound
            if node is None:
                outcome.fit_errors[(pod.get("metadata") or {}).get("uid", "")] = reasons
                break
            self._bind(pod, node, VOLCANO_COMPONENT)
            bound += 1
        outcome.bound += bound
        return bound

    def _volcano_fit(self, pod: dict, extra: dict[str, tuple[int, int, int]]) -> tuple[str | None, str]:
        """Volcano's predicates: resources first (the first short one), then the node plugins; a failure
        reads "0/<ready nodes> nodes are unavailable: <histogram>."."""
        kubelet = self._kubelet
        spec = pod.get("spec") or {}
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        cpu, mem = self._requests(pod)
        nodes = [n for n in kubelet._nodes.values() if n.ready]
        reasons: dict[str, int] = {}
        candidates = []
        for node in nodes:
            add_cpu, add_mem, add_pods = extra.get(node.name, (0, 0, 0))
            if cpu and node.used_cpu_m + add_cpu + cpu > node.cpu_m:
                failed = "Insufficient cpu"
            elif mem and node.used_memory + add_mem + mem > node.memory:
                failed = "Insufficient memory"
            else:
                found = kubelet._filter(
                    node,
                    spec,
                    spec.get("tolerations") or [],
                    annotations.get("sim.tfjob.dev/unschedulable") == "true",
                    0,
                    0,
                    extra.get(node.name),
                )
                failed = ("node(s) pod number exceeded" if found[0] == "Too many pods" else found[0]) if found else ""
            if failed:
                reasons[failed] = reasons.get(failed, 0) + 1
            else:
                candidates.append(node)
        if not candidates:
            parts = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
            return (
                None,
                f"0/{len(nodes)} nodes are unavailable: {parts}." if parts else f"0/{len(nodes)} nodes are unavailable",
            )
        return min(candidates, key=lambda n: kubelet.score(n, cpu, mem, extra.get(n.name))).name, ""

    def _volcano_enqueueable(self, pg: dict) -> bool:
        """The enqueue action: no minResources admits at once; else the overcommit plugin's check of
        minResources plus what Inqueue groups reserve against 1.2 x allocatable minus what is used."""
        want = (pg.get("spec") or {}).get("minResources")
        if want is None:
            return True
        need = _resource_vector(want)
        if need is None:
            return False
        uid = (pg.get("metadata") or {}).get("uid")
        for other in self._store.list(VOLCANO_PODGROUPS)[0]:
            if (other.get("metadata") or {}).get("uid") == uid or (other.get("status") or {}).get("phase") != "Inqueue":
                continue
            reserved = _resource_vector((other.get("spec") or {}).get("minResources") or {})
            for name, amount in (reserved or {}).items():
                need[name] = need.get(name, 0) + amount
        nodes = [n for n in self._kubelet._nodes.values() if n.ready]
        idle = {
            "cpu": sum(n.cpu_m for n in nodes) * OVERCOMMIT_FACTOR - sum(n.used_cpu_m for n in nodes),
            "memory": sum(n.memory for n in nodes) * OVERCOMMIT_FACTOR - sum(n.used_memory for n in nodes),
            "pods": sum(n.pods for n in nodes) * OVERCOMMIT_FACTOR - sum(n.used_pods for n in nodes),
        }
        return all(amount <= idle.get(name, 0) for name, amount in need.items() if amount > 0)

    @staticmethod
    def _volcano_histogram(state: _Pods, outcome: _VolcanoOutcome, min_member: int) -> str:
        """JobInfo.FitError: "pod group is not ready, <n> <task status>..., <m> minAvailable[; Pending: ...]"."""
        counts: dict[str, int] = {"minAvailable": min_member}
        statuses = (
            ("Pending", len(state.pending)),
            ("Running", state.running),
            ("Bound", len(state.bound) - state.running),
            ("Succeeded", state.succeeded),
            ("Failed", state.failed),
            ("Releasing", state.releasing),
        )
        for status_name, n in statuses:
            if n:
                counts[status_name] = n
        text = "pod group is not ready, " + ", ".join(sorted(f"{n} {k}" for k, n in counts.items()))
        if state.pending:
            schedulable = sum(1 for p in state.pending if (p.get("metadata") or {}).get("uid") in outcome.discarded)
            pending = {"Schedulable": schedulable, "Unschedulable": len(state.pending) - schedulable}
            text += "; Pending: " + ", ".join(sorted(f"{n} {k}" for k, n in pending.items() if n))
        return text

    def _volcano_pod_condition(self, pod: dict, reason: str, message: str) -> None:
        """taskUnschedulable: PodScheduled=False and a FailedScheduling event, only when they change."""
        status = pod.get("status") or {}
        old = (
            next(
                (c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "PodScheduled"),
                None,
            )
            or {}
        )
        if (old.get("status"), old.get("reason"), old.get("message")) == ("False", reason, message):
            return
        cond = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
        self._kubelet.events.record(
            object_reference(pod), "Warning", "FailedScheduling", message, component=VOLCANO_COMPONENT
        )
        self._kubelet._write_status(pod, {"conditions": set_condition(status.get("conditions") or [], cond, _now())})

    # ---------------------------------------------------------------- scheduler-plugins

    def _coscheduling_round(self, key: GroupKey) -> None:
        """kube-scheduler with the Coscheduling plugin, one scheduling cycle per pending pod of the group."""
        _, namespace, name = key
        members = self._pods(key)
        pending = sorted(
            (
                p
                for p in _Pods.of(members).pending
                if self.names.get((p.get("spec") or {}).get("schedulerName") or "") == SCHEDULER_PLUGINS
            ),
            key=_task_order,
        )
        if not pending:
            return
        pg = self._store.get(SP_PODGROUPS, namespace, name)
        if pg is None:
            # PreFilter passes without a group; Permit rejects on the chosen node.
            for pod in pending:
                node, message = self._fit(pod, {})
                self._unschedulable(
                    pod, "0/1 nodes are available: 1 PodGroup not found." if node else message, _scheduler_name(pod)
                )
            return
        spec = pg.get("spec") or {}
        min_member = _int(spec.get("minMember"))
        full_name = f"{namespace}/{name}"
        total_nodes = len(self._kubelet._nodes)
        assigned = sum(
            1
            for p in members
            if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") not in _TERMINAL
        )
        gap = self._sp_prefilter(pg, members, min_member)
        if gap is not None:
            for pod in pending:
                pod_name = (pod.get("metadata") or {}).get("name", "")
                preemption = (
                    f"preemption: 0/{total_nodes} nodes are available: {total_nodes} Preemption is not "
                    "helpful for scheduling."
                )
                verdict, _rejected = _post_filter(preemption, assigned, min_member, full_name, pod_name)
                self._unschedulable(
                    pod,
                    f"0/{total_nodes} nodes are available: {gap.format(pod=pod_name)}. {verdict}",
                    _scheduler_name(pod),
                )
            return
        extra: dict[str, tuple[int, int, int]] = {}
        waiting: list[tuple[dict, str]] = []
        for pod in pending:
            pod_name = (pod.get("metadata") or {}).get("name", "")
            node, message = self._fit(pod, extra)
            if node is None:
                head, sep, preemption = message.partition(" preemption: ")
                verdict, rejected = _post_filter(
                    "preemption: " + preemption if sep else "", assigned + len(waiting), min_member, full_name, pod_name
                )
                if rejected:  # the whole group is: its waiting pods too
                    for other, _node in waiting:
                        self._unschedulable(other, "optimistic rejection in PostFilter", _scheduler_name(other))
                    waiting, extra = [], {}
                self._unschedulable(pod, f"{head} {verdict}".rstrip(), _scheduler_name(pod))
                continue
            self._add(extra, node, self._requests(pod))
            waiting.append((pod, node))
            if assigned + len(waiting) >= min_member:  # Permit: the quorum is there, allow every waiter
                for other, other_node in waiting:
                    self._bind(other, other_node, _scheduler_name(other))
                assigned += len(waiting)
                waiting, extra = [], {}
        timeout = _int(spec.get("scheduleTimeoutSeconds")) or PERMIT_WAITING_SECONDS
        for pod, _node in waiting:  # nothing else will arrive: the waiters time out together
            self._unschedulable(
                pod, f"rejected due to timeout after waiting {timeout}s at plugin Coscheduling", _scheduler_name(pod)
            )

    def _sp_prefilter(self, pg: dict, members: list[dict], min_member: int) -> str | None:
        """Coscheduling PreFilter: a message template ({pod} = the pod's name), or None when it passes."""
        meta = pg.get("metadata") or {}
        full_name = f"{meta.get('namespace')}/{meta.get('name')}"
        if len(members) < min_member:
            return (
                f"pre-filter pod {{pod}} cannot find enough sibling pods, current pods number: {len(members)}, "
                f"minMember of group: {min_member}"
            )
        want = (pg.get("spec") or {}).get("minResources")
        if not want:
            return None
        need = _resource_vector(want) or {}
        need["pods"] = min_member
        own: dict[str, list[int]] = {}
        for pod in members:  # the group's own pods do not count against it
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in _TERMINAL:
                cpu, mem = self._requests(pod)
                usage = own.setdefault(node, [0, 0, 0])
                usage[0] += cpu
                usage[1] += mem
                usage[2] += 1
        remaining = {k: v for k, v in need.items() if v > 0}
        for node in self._kubelet._nodes.values():
            back = own.get(node.name, [0, 0, 0])
            free = {
                "cpu": node.cpu_m - node.used_cpu_m + back[0],
                "memory": node.memory - node.used_memory + back[1],
                "pods": node.pods - node.used_pods + back[2],
            }
            remaining = {k: v - free.get(k, 0) for k, v in remaining.items() if v - free.get(k, 0) > 0}
            if not remaining:
                return None
        gap = " ".join(f"{k}:{_format_amount(k, v)}" for k, v in sorted(remaining.items()))
        log.debug("coscheduling PreFilter: resource gap", podgroup=full_name, gap=gap)
        return f"resource gap: map[{gap}]"

    def _sp_controller(self, key: GroupKey) -> None:
        """scheduler-plugins-controller's PodGroup reconcile, repeated while it changes the phase (each
        step is its own status patch, as each is a reconcile of the real controller)."""
        _, namespace, name = key
        for _ in range(4):
            pg = self._store.get(SP_PODGROUPS, namespace, name)
            if pg is None:
                return
            status = pg.get("status") or {}
            phase = status.get("phase") or ""
            if phase in ("Finished", "Failed"):
                return
            pods = self._pods(key)
            min_member = _int((pg.get("spec") or {}).get("minMember"))
            new = dict(status)
            if phase == "":
                new["phase"] = "Pending"
            elif phase == "Pending":
                if len(pods) >= min_member:
                    new["phase"] = "Scheduling"
                    occupied = _occupied_by(sorted(pods, key=_task_order)[0]) if pods else None
                    if occupied:
                        new["occupiedBy"] = occupied
            else:
                state = _Pods.of(pods)
                running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
                new.update(running=running, succeeded=state.succeeded, failed=state.failed)
                if len(pods) < min_member:
                    new["phase"] = "Pending"
                else:
                    done = running + state.succeeded
                    new["phase"] = "Running" if done >= min_member else "Scheduling"
                    if state.failed and state.failed + done >= min_member:
                        new["phase"] = "Failed"
                    if state.succeeded >= min_member:
                        new["phase"] = "Finished"
            new = _omitempty(new)
            if new == status:
                return
            patch = {k: v for k, v in new.items() if status.get(k) != v}
            patch.update({k: None for k in status if k not in new})
            self._store.patch(
                SP_PODGROUPS,
                namespace,
                name,
                "merge",
                {"status": patch},
                subresource="status",
                field_manager=SP_CONTROLLER,
            )


def _task_minimums_met(spec: dict, min_member: int, pods: list[dict]) -> bool:
    """Per-task minimums (``minTaskMember``, tasks named by the volcano.sh/task-spec annotation) met by
    ``pods``; not checked when they add up to more than minMember, as Volcano skips them then."""
    minimums = {k: _int(v) for k, v in (spec.get("minTaskMember") or {}).items()}
    if not minimums or min_member < sum(minimums.values()):
        return True
    actual: dict[str, int] = {}
    for pod in pods:
        task = ((pod.get("metadata") or {}).get("annotations") or {}).get(VOLCANO_TASK_ANNOTATION, "")
        actual[task] = actual.get(task, 0) + 1
    return all(actual.get(task, 0) >= minimum for task, minimum in minimums.items() if minimum)


def _gang_ready(spec: dict, min_member: int, ready: list[dict]) -> bool:
    """The gang plugin's JobReady: the ready pods (bound, succeeded, placed, pending BestEffort) reach
    minMember and every task's minimum."""
    return len(ready) >= min_member and _task_minimums_met(spec, min_member, ready)


def _post_filter(preemption: str, assigned: int, min_member: int, group: str, pod: str) -> tuple[str, bool]:
    """The PostFilter part of a FitError (the default preemption's verdict, then Coscheduling's) and
    whether Coscheduling rejects the whole group: it does unless the quorum is there or short by at
    most 10 %."""
    if assigned >= min_member or (min_member - assigned) <= 0.1 * min_member:
        return preemption, False
    rejection = f"PodGroup {group} gets rejected due to Pod {pod} is unschedulable even after PostFilter."
    return (f"{preemption}, {rejection}" if preemption else rejection), True


@dataclass
class _VolcanoOutcome:
    fit_errors: dict[str, str] = field(default_factory=dict)  # uid -> FitErrors message
    discarded: dict[str, str] = field(default_factory=dict)  # uid -> node it could have had
    bound: int = 0


def _ns_name(pod: dict) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name", "")


def _scheduler_name(pod: dict) -> str:
    return (pod.get("spec") or {}).get("schedulerName") or ""


def _occupied_by(pod: dict) -> str | None:
    meta = pod.get("metadata") or {}
    refs = sorted(
        f"{meta.get('namespace')}/{ref.get('name')}"
        for ref in meta.get("ownerReferences") or []
        if isinstance(ref, dict)
    )
    return ",".join(refs) or None


def _volcano_conditions(conditions: Any, cond: dict) -> list[dict]:
    """UpdatePodGroupCondition: replace the condition of the same type, else append."""
    out = [dict(c) for c in conditions or [] if isinstance(c, dict)]
    stamped = _omitempty(dict(cond, lastTransitionTime=_now(), transitionID=_session_id()))
    for i, existing in enumerate(out):
        if existing.get("type") == cond["type"]:
            out[i] = stamped
            return out
    out.append(stamped)
    return out


def _volcano_status_key(status: dict) -> tuple:
    """isPodGroupStatusUpdated: everything but the conditions' lastTransitionTime and transitionID."""
    conditions = tuple(
        tuple(sorted((k, v) for k, v in c.items() if k not in ("lastTransitionTime", "transitionID")))
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    )
    return (status.get("phase"), status.get("running"), status.get("succeeded"), status.get("failed"), conditions)


def _session_id() -> str:
    """A session uid (vc-scheduler stamps each condition with the session that wrote it)."""
    return str(uuid.uuid4())


def _omitempty(obj: dict) -> dict:
    """What Go's encoding/json writes for a struct whose fields are all ``omitempty``."""
    return {k: v for k, v in obj.items() if v not in (0, "", None, [], {}) or isinstance(v, bool)}


def _resource_vector(resources: Any) -> dict[str, float] | None:
    """minResources as amounts in the units the nodes are accounted in (cpu millicores, bytes, pods);
    None if a quantity is invalid. Resources the simulated nodes do not model are left out."""
    from tfjob_sim.kubelet import parse_quantity

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


def _format_amount(name: str, amount: float) -> str:
    if name == "cpu":
        return f"{int(amount)}m" if amount % 1000 else str(int(amount // 1000))
    return str(int(amount)) if float(amount).is_integer() else str(amount)
