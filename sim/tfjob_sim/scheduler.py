"""The simulated kube-scheduler: placement of pods on the simulated nodes.

Why a module of its own: placement is kube-scheduler's default profile (filters, score, binding, the
FailedScheduling verdict) and the gang schedulers (tfjob_sim.gang) place through it; none of that
depends on how a node then runs a pod.

Contract:
- :meth:`Scheduler.schedule` handles one unbound pod for the worker (tfjob_sim.kubelet.Kubelet): it
  binds it through the binding subresource (``spec.nodeName`` and PodScheduled=True in one write, with
  a Scheduled event), or writes PodScheduled=False/Unschedulable and one FailedScheduling event per
  attempt and retries the pod when capacity frees or a node changes (:meth:`Scheduler.retry`).
- Filters run in the default profile's plugin order: NodeUnschedulable, TaintToleration (a NotReady
  node without its taint counts as tainted not-ready), NodeAffinity (``nodeSelector`` and required node
  affinity; the ``sim.tfjob.dev/unschedulable`` annotation fails it on every node), NodeResourcesFit
  (cpu, memory, pods). Score: least allocated, then fewest pods, then the name.
- VolumeBinding's PreFilter comes first: a pod naming a PersistentVolumeClaim that does not exist, that is
  being deleted, or that is unbound with a class binding Immediately is unschedulable on every node, with
  kube-scheduler's message; a WaitForFirstConsumer claim does not hold the pod (the storage controller
  provisions once the pod is bound; the kubelet's volume setup waits for the claim). Such a pod is
  attempted again when one of its claims, or a StorageClass, changes (:meth:`Scheduler.storage_event`).
- A pod whose ``spec.schedulerName`` is a gang scheduler's is placed by :class:`~tfjob_sim.gang.GangScheduler`
  with its group; this class is its :class:`~tfjob_sim.gang.common.Placement`.
"""

from __future__ import annotations

from typing import Any

import orjson

from tfjob_sim.events import EventRecorder, object_reference
from tfjob_sim.gang import GangScheduler
from tfjob_sim.gang.common import Extra, Node
from tfjob_sim.nodestate import DEFAULT_SCHEDULER, NodeState, StoreLike
from tfjob_sim.persistentvolumes import is_default_class
from tfjob_sim.podstate import ANNOTATION_PREFIX, TERMINAL_PHASES, _Node, _PodRecord, now_timestamp
from tfjob_sim.resources import set_condition
from tfjob_sim.storagetypes import PVCS, STORAGE_CLASSES, claim_names

UNSCHEDULABLE = ANNOTATION_PREFIX + "unschedulable"

TAINT_UNREACHABLE = "node.kubernetes.io/unreachable"
TAINT_NOT_READY = "node.kubernetes.io/not-ready"
TAINT_UNSCHEDULABLE = "node.kubernetes.io/unschedulable"

# Distinct pod placement shapes whose static filter results are kept (see Scheduler._static_fit).
FIT_CACHE_SHAPES = 1024


def tolerates(tolerations: list, taint: dict) -> dict | None:
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


def node_affinity_matches(spec: dict, labels: dict, name: str) -> bool:
    """Whether a node with these labels and this name satisfies the pod's nodeSelector and required
    node affinity (terms ORed, expressions within a term ANDed)."""
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    if not terms:
        return True
    for term in terms:
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


# The PV controller's mark of a completed binding, and the class annotation that predates storageClassName.
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


def _claim_bound(pvc: dict) -> bool:
    """A claim bound to its volume: volumeName set and the binding completed (the PV controller's
    annotation, or the Bound phase it writes with it)."""
    meta = pvc.get("metadata") or {}
    if not (pvc.get("spec") or {}).get("volumeName"):
        return False
    return BIND_COMPLETED in (meta.get("annotations") or {}) or (pvc.get("status") or {}).get("phase") == "Bound"


def _delays_binding(store: StoreLike, pvc: dict) -> bool:
    """IsDelayBindingMode: the claim's class binds WaitForFirstConsumer. The empty class, or a class that
    does not exist, binds Immediately. A claim that names no class at all has the default class's: on a
    real cluster the DefaultStorageClass admission plugin writes it at creation, here the storage
    controller writes it a moment later (tfjob_sim.persistentvolumes)."""
    annotations = (pvc.get("metadata") or {}).get("annotations") or {}
    name = annotations.get(BETA_CLASS_ANNOTATION) or (pvc.get("spec") or {}).get("storageClassName")
    if name is None:
        default = next((sc for sc in store.list(STORAGE_CLASSES)[0] if is_default_class(sc)), None)
        return default is not None and default.get("volumeBindingMode") == "WaitForFirstConsumer"
    sc = store.get(STORAGE_CLASSES, None, name) if name else None
    return sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer"


def claims_verdict(store: StoreLike, pod: dict) -> tuple[str | None, list[str]]:
    """VolumeBinding's PreFilter: (why no node can take the pod, or None; the claims it waits for). The
    first claim that is missing or being deleted decides, in the order of the pod's volumes; else every
    unbound claim of an Immediate class holds it."""
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    unbound_immediate: list[str] = []
    for name in claim_names(pod):
        pvc = store.get(PVCS, namespace, name)
        if pvc is None:
            return f'persistentvolumeclaim "{name}" not found', [name]
        if (pvc.get("metadata") or {}).get("deletionTimestamp"):
            return f'persistentvolumeclaim "{name}" is being deleted', [name]
        if not _claim_bound(pvc) and not _delays_binding(store, pvc):
            unbound_immediate.append(name)
    if unbound_immediate:
        return "pod has unbound immediate PersistentVolumeClaims", unbound_immediate
    return None, []


def prefilter_error(total: int, reason: str) -> str:
    """The FitError message when a PreFilter plugin rejected the pod: the same verdict on every node, which
    preemption cannot change."""
    return (
        f"0/{total} nodes are available: {reason}. "
        f"preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
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


def resource_failures(node: _Node, cpu: int, mem: int, extra: tuple[int, int, int] | None) -> list[str]:
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


def static_filter(node: _Node, spec: dict, tolerations: list, forced: bool) -> str | None:
    """NodeUnschedulable, TaintToleration, NodeAffinity: the first one that rejects, or None."""
    if node.unschedulable and tolerates(tolerations, {"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}) is None:
        return "node(s) were unschedulable"
    taints = node.taints
    if not node.ready and not any(t.get("key") in (TAINT_UNREACHABLE, TAINT_NOT_READY) for t in taints):
        taints = taints + [{"key": TAINT_NOT_READY, "effect": "NoSchedule"}]
    for taint in taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and tolerates(tolerations, taint) is None:
            return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '') or ''}}}"
    if forced or not node_affinity_matches(spec, node.labels, node.name):
        return "node(s) didn't match Pod's node affinity/selector"
    return None


def node_filter(
    node: _Node,
    spec: dict,
    tolerations: list,
    forced: bool,
    cpu: int,
    mem: int,
    extra: tuple[int, int, int] | None = None,
) -> list[str]:
    """The first failing filter's reasons for ``node``, in the default profile's plugin order."""
    reason = static_filter(node, spec, tolerations, forced)
    if reason is not None:
        return [reason]
    return resource_failures(node, cpu, mem, extra)


def least_allocated(
    node: Node, cpu: int, mem: int, extra: tuple[int, int, int] | None = None
) -> tuple[float, int, str]:
    """The score of ``node`` for a pod of these requests: least allocated first (lower is better), then fewer pods, then the name."""
    add = extra or (0, 0, 0)
    cpu_frac = (node.used_cpu_m + add[0] + cpu) / node.cpu_m if node.cpu_m else 1.0
    mem_frac = (node.used_memory + add[1] + mem) / node.memory if node.memory else 1.0
    return ((cpu_frac + mem_frac) / 2, node.used_pods + add[2], node.name)


class Scheduler:
    """kube-scheduler's default profile over :class:`~tfjob_sim.nodestate.NodeState`, and the owner of the
    gang schedulers (:attr:`gang`), whose :class:`~tfjob_sim.gang.common.Placement` it is."""

    def __init__(self, state: NodeState) -> None:
        self._state = state
        self._unschedulable: dict[str, None] = {}  # uids to retry when capacity frees
        self._fit_cache: dict[Any, tuple[list[_Node], dict[str, int]]] = {}
        self._fit_generation = state.node_generation
        # Pods held by their claims: (namespace, claim) -> uids, and each uid's keys.
        self._claim_waiters: dict[tuple[str, str], set[str]] = {}
        self._waits_for: dict[str, set[tuple[str, str]]] = {}
        self.gang = GangScheduler(self, state.config.gang_scheduler_names)

    # ---------------------------------------------------------------- the worker's side

    def schedule(self, pod: dict, rec: _PodRecord) -> None:
        """One scheduling attempt for an unbound pod: bind it, or report why it cannot be (and retry it
        later). A pod of another scheduler (or of a gang scheduler in a PodGroup) is left alone."""
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") in TERMINAL_PHASES:
            self._unschedulable.pop(rec.uid, None)
            return
        scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
        # A gang scheduler's pod in a PodGroup is placed with its group (sim/tfjob_sim/gang/); one
        # without a group is scheduled here under that scheduler's name; any other scheduler's pod
        # (or a gang scheduler's whose CRD is not served): nobody here binds it.
        if scheduler != DEFAULT_SCHEDULER and self.gang.handles(pod, scheduler) != "single":
            return
        chosen, message = self.place(pod, {})
        if chosen is None:
            self._mark_unschedulable(pod, rec, message, scheduler)
            return
        self._bind(pod, chosen, scheduler)
        self._unschedulable.pop(rec.uid, None)

    def forget(self, uid: str) -> None:
        """The pod is bound (by anyone) or gone: no retry for it any more."""
        self._unschedulable.pop(uid, None)
        self._wait_for_claims(uid, "", [])

    def storage_event(self, resource: str, obj: dict) -> bool:
        """A claim or a StorageClass changed (the listener's side: no writes): the pods it may let be
        scheduled get a new attempt, as kube-scheduler's queue moves them on PVC and StorageClass events.
        Returns whether any pod was woken."""
        if resource == PVCS:
            meta = obj.get("metadata") or {}
            uids = set(self._claim_waiters.get((meta.get("namespace") or "", meta.get("name") or ""), ()))
        elif resource == STORAGE_CLASSES:
            uids = set(self._waits_for)
        else:
            return False
        gang = False
        for uid in uids:
            rec = self._state.pods.get(uid)
            if rec is None:
                continue
            if uid in self._unschedulable:
                rec.scheduling_attempted = False  # a new attempt: reported again
                self._state.dirty[uid] = None
            else:
                gang = True  # held in a gang scheduler's round
        if gang:
            self.gang.retry_all()
        return bool(uids)

    def _wait_for_claims(self, uid: str, namespace: str, claims: list[str]) -> None:
        """Record the claims a pod waits for (none: it waits for no claim any more)."""
        for key in self._waits_for.pop(uid, ()):
            waiters = self._claim_waiters.get(key)
            if waiters is not None:
                waiters.discard(uid)
                if not waiters:
                    del self._claim_waiters[key]
        if claims:
            keys = {(namespace, claim) for claim in claims}
            self._waits_for[uid] = keys
            for key in keys:
                self._claim_waiters.setdefault(key, set()).add(uid)

    def retry(self) -> None:
        """If something may let unschedulable pods fit (:attr:`NodeState.retry_unschedulable`), give
        them, and the gang schedulers' groups, a new attempt."""
        state = self._state
        if not state.retry_unschedulable:
            return
        state.retry_unschedulable = False
        self.gang.retry_all()
        for uid in self._unschedulable:
            state.dirty[uid] = None
            rec = state.pods.get(uid)
            if rec is not None:
                rec.scheduling_attempted = False  # a new attempt: reported again

    # ---------------------------------------------------------------- Placement (tfjob_sim.gang.common)

    @property
    def store(self) -> StoreLike:
        return self._state.store

    @property
    def events(self) -> EventRecorder:
        return self._state.events

    def nodes(self) -> list[Node]:
        return list(self._state.nodes.values())

    def requests(self, pod: dict) -> tuple[int, int]:
        rec = self._state.pods.get((pod.get("metadata") or {}).get("uid", ""))
        return rec.requests if rec is not None and rec.requests_error is None else (0, 0)

    def place(self, pod: dict, extra: Extra) -> tuple[str | None, str]:
        """A node for ``pod`` on top of ``extra`` (kube-scheduler's filters and score), or None and the
        FitError message: invalid requests and an empty cluster are told apart, as kube-scheduler does."""
        nodes = self._state.nodes
        rec = self._state.pods.get((pod.get("metadata") or {}).get("uid", ""))
        if rec is not None and rec.requests_error is not None:
            return None, f"0/{len(nodes)} nodes are available: invalid resource requests: {rec.requests_error}."
        if not nodes:
            return None, "no nodes available to schedule pods"
        if rec is not None:
            reason, waiting_for = claims_verdict(self._state.store, pod)
            self._wait_for_claims(rec.uid, rec.namespace, waiting_for)
            if reason is not None:
                return None, prefilter_error(len(nodes), reason)
        return self.find_node(pod, rec.requests if rec is not None else (0, 0), extra)

    def filter(self, node: Node, pod: dict, extra: Extra) -> str | None:
        own = self._state.nodes.get(node.name)
        if own is None:
            return "node(s) not found"
        spec = pod.get("spec") or {}
        forced = ((pod.get("metadata") or {}).get("annotations") or {}).get(UNSCHEDULABLE) == "true"
        found = node_filter(own, spec, spec.get("tolerations") or [], forced, 0, 0, extra.get(node.name))
        return found[0] if found else None

    @staticmethod
    def score(node: Node, cpu: int, mem: int, extra: tuple[int, int, int] | None = None) -> tuple[float, int, str]:
        return least_allocated(node, cpu, mem, extra)

    def bind(self, pod: dict, node: str, scheduler: str) -> None:
        self._bind(pod, node, scheduler)

    def unschedulable(self, pod: dict, message: str, scheduler: str) -> None:
        rec = self._state.pods.get((pod.get("metadata") or {}).get("uid", ""))
        if rec is None:
            return
        rec.scheduling_attempted = False  # every round of a gang is a new attempt
        self._mark_unschedulable(pod, rec, message, scheduler=scheduler, retry=False)

    def write_status(self, pod: dict, desired: dict[str, Any]) -> None:
        self._state.write_status(pod, desired)

    def retry_unbound(self) -> None:
        state = self._state
        for uid, rec in state.pods.items():
            if rec.node is None:
                state.dirty[uid] = None

    # ---------------------------------------------------------------- filters and score

    def find_node(
        self, pod: dict, requests: tuple[int, int], extra: dict[str, tuple[int, int, int]] | None = None
    ) -> tuple[str | None, str]:
        """kube-scheduler's Filter and Score for one pod: the chosen node, or None and the FitError
        message (with the default preemption's verdict). ``extra`` adds (cpu millicores, memory,
        pods) per node name on top of what is bound there: pods a gang scheduler placed tentatively.

        The filters that read only the pod and the node's spec (unschedulable, taints, affinity) run
        once per pod shape and node generation (:meth:`_static_fit`); only the resource fit and the
        score, which read live usage, run per node for each pod. Same answer as :func:`node_filter` on
        every node: the static filters come first in the plugin order, so a node they reject never
        reaches the resource check either."""
        spec = pod.get("spec") or {}
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        total = len(self._state.nodes)
        cpu, mem = requests
        passing, static_reasons = self._static_fit(spec, annotations.get(UNSCHEDULABLE) == "true")
        reasons = dict(static_reasons)
        failures = 0
        best: _Node | None = None
        best_score: tuple[float, int, str] | None = None
        for node in passing:
            add = extra.get(node.name) if extra else None
            failed = resource_failures(node, cpu, mem, add)
            if failed:
                failures += 1
                for reason in failed:
                    reasons[reason] = reasons.get(reason, 0) + 1
                continue
            node_score = least_allocated(node, cpu, mem, add)
            if best_score is None or node_score < best_score:
                best, best_score = node, node_score
        if best is not None:
            return best.name, ""
        return None, fit_error(total, reasons, failures)

    def _static_fit(self, spec: dict, forced: bool) -> tuple[list[_Node], dict[str, int]]:
        """The nodes that pass the filters independent of usage, and how many each of those filters
        rejected, for a pod of this placement shape. Cached per shape until any node changes (a node
        event bumps :attr:`NodeState.node_generation` and replaces its :class:`_Node`), so a burst of
        pods from a few templates filters the nodes a few times, not once per pod."""
        if self._fit_generation != self._state.node_generation:
            self._fit_cache.clear()  # holds _Node objects and results of their spec
            self._fit_generation = self._state.node_generation
        key = _placement_key(spec, forced)
        if key is not None:
            hit = self._fit_cache.get(key)
            if hit is not None:
                return hit
        tolerations = spec.get("tolerations") or []
        passing: list[_Node] = []
        reasons: dict[str, int] = {}
        for node in self._state.nodes.values():
            reason = static_filter(node, spec, tolerations, forced)
            if reason is None:
                passing.append(node)
            else:
                reasons[reason] = reasons.get(reason, 0) + 1
        if key is not None:
            if len(self._fit_cache) >= FIT_CACHE_SHAPES:
                self._fit_cache.clear()  # shapes unique per pod (e.g. a hostname selector each)
            self._fit_cache[key] = (passing, reasons)
        return passing, reasons

    # ---------------------------------------------------------------- writes

    def _mark_unschedulable(
        self, pod: dict, rec: _PodRecord, message: str, scheduler: str = DEFAULT_SCHEDULER, retry: bool = True
    ) -> None:
        """A failed scheduling attempt: the condition, and one FailedScheduling event per attempt (the
        pod's own updates re-run the filters here but are not new attempts of the scheduling queue).
        ``retry``: retried here when capacity frees (a gang scheduler retries its groups itself)."""
        if retry:
            self._unschedulable[rec.uid] = None
        status = pod.get("status") or {}
        cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        conditions = set_condition(status.get("conditions") or [], cond, now_timestamp())
        old = next(
            (c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "PodScheduled"),
            None,
        )
        if not rec.scheduling_attempted or (old or {}).get("message") != message:
            rec.scheduling_attempted = True
            events = self._state.events
            events.record_series(
                object_reference(pod),
                "Warning",
                "FailedScheduling",
                "Scheduling",
                message,
                controller=scheduler,
                instance=events.scheduler_instance,
            )
        self._state.write_status(pod, {"conditions": conditions})

    def _bind(self, pod: dict, node_name: str, scheduler: str = DEFAULT_SCHEDULER) -> None:
        """The binding subresource: spec.nodeName and PodScheduled=True in one write, like kube-scheduler."""
        meta = pod["metadata"]
        self._state.store.bind(meta.get("namespace"), meta["name"], {"target": {"kind": "Node", "name": node_name}})
        events = self._state.events
        events.record_series(
            object_reference(pod),
            "Normal",
            "Scheduled",
            "Binding",
            f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node_name}",
            controller=scheduler,
            instance=events.scheduler_instance,
        )
