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
- Placement goes through :class:`~tfjob_sim.gang.common.Placement`, which tfjob_sim.scheduler implements (node
  accounting, kube-scheduler's filters and score, the binding and unschedulable writes); pods placed
  tentatively count on their node until the group is committed (all bound) or discarded (none). One module
  per scheduler: :mod:`tfjob_sim.gang.volcano`, :mod:`tfjob_sim.gang.coscheduling`.
- Simplifications (docs/simulator.md lists them): no Permit wait (a scheduler-plugins gang that
  cannot be completed now is rejected at once, its timeout named in the message), no pipelining
  onto resources of terminating pods, no preemption or reclaim, queues have no capacity.
"""

from __future__ import annotations

import structlog

from tfjob_sim.crds import GANG_SCHEDULERS
from tfjob_sim.errors import ApiError
from tfjob_sim.gang.common import (
    DEFAULT_GANG_SCHEDULER_NAMES,
    GANG_RESOURCES,
    PODGROUP_RESOURCES,
    SCHEDULER_PLUGINS,
    SP_GROUP_LABEL,
    SP_PODGROUPS,
    VOLCANO,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_PODGROUPS,
    VOLCANO_QUEUES,
    GroupKey,
    GroupPods,
    Placement,
    relevant,
    scheduler_name,
)
from tfjob_sim.gang.coscheduling import CoschedulingScheduler
from tfjob_sim.gang.volcano import VolcanoScheduler
from tfjob_sim.store import CRD_RESOURCE

__all__ = [
    "DEFAULT_GANG_SCHEDULER_NAMES",
    "GANG_RESOURCES",
    "GANG_SCHEDULERS",
    "GangScheduler",
    "Placement",
    "group_of",
]

log = structlog.get_logger(__name__)


def group_of(pod: dict, names: dict[str, str]) -> GroupKey | None:
    """The PodGroup a pod belongs to, or None. A Volcano pod is Volcano's (its scheduler caches only
    its own pods); otherwise scheduler-plugins' label decides, whatever the pod's scheduler."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or ""
    if names.get(scheduler_name(pod)) == VOLCANO:
        group = (meta.get("annotations") or {}).get(VOLCANO_GROUP_ANNOTATION)
        if group:
            return (VOLCANO, namespace, group)
    label = (meta.get("labels") or {}).get(SP_GROUP_LABEL)
    if label:
        return (SCHEDULER_PLUGINS, namespace, label)
    return None


def _discard(index: dict[GroupKey, set[str]], key: GroupKey, member: str) -> None:
    """Remove ``member`` from ``index[key]``, and the key once its set is empty."""
    members = index.get(key)
    if members is not None:
        members.discard(member)
        if not members:
            del index[key]


class GangScheduler:
    """The gang schedulers of one simulated cluster; owned by the simulated scheduler (tfjob_sim.scheduler),
    which is its :class:`~tfjob_sim.gang.common.Placement`, and driven by the kubelet's worker."""

    def __init__(self, placement: Placement, names: dict[str, str] | None = None) -> None:
        self._placement = placement
        self._store = placement.store
        self.names = dict(DEFAULT_GANG_SCHEDULER_NAMES if names is None else names)
        self.volcano = VolcanoScheduler(placement, self.names, self._pods)
        self.coscheduling = CoschedulingScheduler(placement, self.names, self._pods)
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
                self._placement.retry_unbound()
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
            _discard(self._waiting_pods, before, uid)
        if after is not None and new is not None and GroupPods.of([new]).pending:
            self._waiting_pods.setdefault(after, set()).add(uid)
        if before != after:
            if before is not None:
                _discard(self._members, before, ref)
                self._dirty[before] = None
                del self._group_of[uid]
            if after is not None:
                self._members.setdefault(after, set()).add(ref)
                self._group_of[uid] = after
                self._dirty[after] = None
        elif after is not None and relevant(old) != relevant(new):
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
            self.volcano.create_default_queue()
        dirty, self._dirty = self._dirty, {}
        for key in sorted(dirty, key=self._group_order):
            scheduler = key[0]
            if not self.installed(scheduler):
                continue
            try:
                if scheduler == VOLCANO:
                    self.volcano.session(key)
                else:
                    self.coscheduling.round(key)
                    self.coscheduling.controller(key)
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
