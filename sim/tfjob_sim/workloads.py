"""The simulated cluster's deployment and replicaset controllers (apps/v1), as kube-controller-manager runs them.

Why this module exists: ``kubectl apply -k manifests/`` installs the controller's own Deployment, and
``kubectl rollout status`` / ``kubectl scale deployment`` only behave when something turns a
Deployment into ReplicaSets and a ReplicaSet into pods, and writes back the status those commands
read. The pods are ordinary simulated pods: the kubelet schedules and "runs" them (nothing is executed).

Contract (the subset of the real controllers that users and kubectl observe):
- ReplicaSet: keeps ``spec.replicas`` active pods (not terminating, not Succeeded/Failed) that match
  its selector and name it as controller; creates pods from the template (``generateName``
  ``<rs>-``, a controller ownerReference with ``blockOwnerDeletion``), deletes the surplus
  (unscheduled, then not ready, then the newest first), and writes ``status`` (replicas,
  fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration; a ``ReplicaFailure``
  condition while pod creation fails). Orphan pods are not adopted.
- Deployment: the new ReplicaSet is ``<deployment>-<pod-template-hash>``, the hash computed from the
  template (FNV-32a, the digits mapped to the alphabet Kubernetes uses), added to the
  ReplicaSet's labels, selector and template; ``deployment.kubernetes.io/revision`` /
  ``desired-replicas`` / ``max-replicas`` annotations; a RollingUpdate honours maxSurge /
  maxUnavailable (new ReplicaSet up while the total stays within surge, old ones down while the
  available pods stay above the minimum), Recreate scales the old ones to zero and waits for their
  pods to be gone; old ReplicaSets beyond ``revisionHistoryLimit`` are deleted; the status fields
  and the Available / Progressing conditions ``kubectl rollout status`` reads. Not simulated:
  ``progressDeadlineSeconds`` (no ProgressDeadlineExceeded), ``minReadySeconds`` (ready = available),
  paused deployments, proportional scaling of several active ReplicaSets.
- All writes go through the Store with field manager ``kube-controller-manager`` (status through
  the status subresource). Level-based: a key is synced from the store's current state; store
  listeners only mark keys dirty, one worker task owned by :meth:`WorkloadControllers.run` writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from tfjob_sim.dirtykeys import DirtyKeys
from tfjob_sim.errors import ApiError
from tfjob_sim.selectors import label_selector_from_dict
from tfjob_sim.store import Store, WriteOptions, deep_copy, rfc3339

log = structlog.get_logger(__name__)

DEPLOYMENTS = "deployments.apps"
REPLICASETS = "replicasets.apps"
PODS = "pods"
HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
MANAGER = WriteOptions(field_manager="kube-controller-manager")
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


@dataclass
class WorkloadConfig:
    # Seconds before a sync that failed (a pod template the API rejects, a terminating namespace) is retried.
    retry_seconds: float = 1.0
    time_scale: float = 1.0


def pod_template_hash(template: dict, collision_count: int = 0) -> str:
    """A stable hash of a pod template, encoded like Kubernetes' ComputeHash + SafeEncodeString."""
    meta = {k: v for k, v in (template.get("metadata") or {}).items() if v is not None}
    data = orjson.dumps({**template, "metadata": meta}, option=orjson.OPT_SORT_KEYS) + str(collision_count).encode()
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[ord(ch) % len(_SAFE_ALPHABET)] for ch in str(value))


def _controller_uid(obj: dict) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return ref.get("uid")
    return None


def _owner_ref(owner: dict, kind: str) -> dict:
    meta = owner["metadata"]
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
        if isinstance(c, dict)
    )


def _active(pod: dict) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _scaled_value(value: Any, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int, or "N%" of ``total`` rounded up or down."""
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.endswith("%"):
        try:
            percent = int(value[:-1])
        except ValueError:
            return 0
        scaled = percent * total / 100
        return math.ceil(scaled) if round_up else math.floor(scaled)
    return 0


def _without_zeros(status: dict) -> dict:
    # The apps/v1 status counters are omitempty.
    return {k: v for k, v in status.items() if v not in (0, None, [])}


class WorkloadControllers:
    """The deployment and replicaset controllers over one Store. ``await run()``; cancel to stop."""

    def __init__(self, store: Store, config: WorkloadConfig | None = None) -> None:
        self._store = store
        self.config = config or WorkloadConfig()
        self._keys: DirtyKeys[tuple[str, str, str]] | None = (
            None  # of (resource, namespace, name), made by run() on its event loop
        )
        self._started = False

    async def run(self) -> None:
        if self._started:
            raise RuntimeError("WorkloadControllers.run() may only be called once")
        self._started = True
        self._keys = DirtyKeys[tuple[str, str, str]]()
        unsubscribe = self._store.add_listener(self._on_event)
        try:
            for resource in (DEPLOYMENTS, REPLICASETS):
                for obj in self._store.list(resource)[0]:
                    self._mark(resource, obj)
            await self._keys.serve(self._sync)
        finally:
            unsubscribe()

    # ---------------------------------------------------------------- events -> dirty keys

    def _mark(self, resource: str, obj: dict) -> None:
        meta = obj["metadata"]
        if self._keys is not None:
            self._keys.mark((resource, meta.get("namespace", ""), meta["name"]))

    def _on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        try:
            if resource == DEPLOYMENTS:
                self._mark(DEPLOYMENTS, obj)
            elif resource in (REPLICASETS, PODS):
                if resource == REPLICASETS:
                    self._mark(REPLICASETS, obj)
                for candidate in (old, new):
                    if candidate is not None and _controller_uid(candidate) is not None:
                        self._mark_owner(resource, obj, candidate)
        except Exception:  # a listener must never break the store's write path
            log.exception("workload controllers listener failed", event_type=event_type, resource=resource)

    def _mark_owner(self, resource: str, obj: dict, candidate: dict) -> None:
        for ref in candidate["metadata"].get("ownerReferences") or ():
            if not (isinstance(ref, dict) and ref.get("controller")):
                continue
            owner_resource = {("ReplicaSet", PODS): REPLICASETS, ("Deployment", REPLICASETS): DEPLOYMENTS}.get(
                (ref.get("kind") or "", resource)
            )
            if owner_resource is not None and ref.get("apiVersion") == "apps/v1" and ref.get("name"):
                if self._keys is not None:
                    self._keys.mark((owner_resource, obj["metadata"].get("namespace", ""), ref["name"]))

    # ---------------------------------------------------------------- the worker

    def _sync(self, key: tuple[str, str, str]) -> None:
        resource, namespace, name = key
        try:
            if resource == DEPLOYMENTS:
                self._sync_deployment(namespace, name)
            else:
                self._sync_replicaset(namespace, name)
        except ApiError as err:
            # Conflicts cannot happen (reads and writes are in one synchronous step); what remains is
            # the API refusing a write (terminating namespace, invalid template): retry later.
            log.info(
                "workload sync failed; retrying",
                resource=resource,
                namespace=namespace,
                name=name,
                code=err.code,
                message=err.message,
            )
            self._retry_later(key)

    def _retry_later(self, key: tuple[str, str, str]) -> None:
        assert self._keys is not None
        self._keys.retry_later(key, self.config.retry_seconds * self.config.time_scale)

    # ---------------------------------------------------------------- replicaset controller

    def _owned(self, resource: str, namespace: str, owner: dict) -> list[dict]:
        uid = owner["metadata"]["uid"]
        selector = label_selector_from_dict((owner.get("spec") or {}).get("selector"))
        return [
            obj
            for obj in self._store.list(resource, namespace)[0]
            if _controller_uid(obj) == uid and selector.matches(obj["metadata"].get("labels") or {})
        ]

    def _sync_replicaset(self, namespace: str, name: str) -> None:
        rs = self._store.get(REPLICASETS, namespace, name)
        if rs is None:
            return
        try:
            pods = [p for p in self._owned(PODS, namespace, rs) if _active(p)]
        except ValueError:
            return  # validation keeps selectors valid; nothing sensible to do with a bad one
        failure: str | None = None
        if not rs["metadata"].get("deletionTimestamp"):
            want = int((rs.get("spec") or {}).get("replicas", 1) or 0)
            if len(pods) < want:
                for _ in range(want - len(pods)):
                    try:
                        pods.append(self._create_pod(rs))
                    except ApiError as err:
                        failure = err.message
                        break
            elif len(pods) > want:
                for pod in sorted(pods, key=_deletion_rank)[: len(pods) - want]:
                    try:
                        self._store.delete(
                            PODS, namespace, pod["metadata"]["name"], {"preconditions": {"uid": pod["metadata"]["uid"]}}
                        )
                    except ApiError as err:
                        if err.code != 404:
                            raise
                    pods.remove(pod)
        self._write_rs_status(rs, pods, failure)
        if failure is not None:
            self._retry_later((REPLICASETS, namespace, name))

    def _create_pod(self, rs: dict) -> dict:
        template = deep_copy((rs.get("spec") or {}).get("template") or {})
        meta = template.get("metadata") or {}
        meta.pop("name", None)
        meta["generateName"] = rs["metadata"]["name"] + "-"
        meta["namespace"] = rs["metadata"]["namespace"]
        meta["ownerReferences"] = [_owner_ref(rs, "ReplicaSet")]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec") or {}}
        return self._store.create_ex(PODS, meta["namespace"], pod, MANAGER, owned=True).obj

    def _write_rs_status(self, rs: dict, pods: list[dict], failure: str | None) -> None:
        try:
            selector = label_selector_from_dict(
                (rs.get("spec") or {}).get("template", {}).get("metadata", {}).get("labels") or {}
            )
        except ValueError:
            selector = None
        ready = [p for p in pods if _ready(p)]
        old = rs.get("status") or {}
        status: dict[str, Any] = _without_zeros(
            {
                "fullyLabeledReplicas": sum(
                    1 for p in pods if selector is None or selector.matches(p["metadata"].get("labels") or {})
                ),
                "readyReplicas": len(ready),
                "availableReplicas": len(ready),
                "observedGeneration": rs["metadata"].get("generation"),
            }
        )
        status = {"replicas": len(pods), **status}
        conditions = [c for c in old.get("conditions") or () if c.get("type") != "ReplicaFailure"]
        if failure is not None:
            previous = next((c for c in old.get("conditions") or () if c.get("type") == "ReplicaFailure"), None)
            conditions.append(
                {
                    "type": "ReplicaFailure",
                    "status": "True",
                    "reason": "FailedCreate",
                    "message": failure,
                    "lastTransitionTime": (previous or {}).get("lastTransitionTime") or rfc3339(self._store.clock()),
                }
            )
        if conditions:
            status["conditions"] = conditions
        self._write_status(REPLICASETS, rs, status)

    def _write_status(self, resource: str, obj: dict, status: dict) -> None:
        if obj.get("status") == status:
            return
        new = dict(obj, status=status)
        self._store.update_ex(
            resource, obj["metadata"].get("namespace"), obj["metadata"]["name"], new, "status", MANAGER
        )

    # ---------------------------------------------------------------- deployment controller

    def _sync_deployment(self, namespace: str, name: str) -> None:
        d = self._store.get(DEPLOYMENTS, namespace, name)
        if d is None or d["metadata"].get("deletionTimestamp"):
            return
        spec = d.get("spec") or {}
        try:
            owned = self._owned(REPLICASETS, namespace, d)
        except ValueError:
            return
        template = spec.get("template") or {}
        collision = int((d.get("status") or {}).get("collisionCount") or 0)
        hash_ = pod_template_hash(template, collision)
        new_rs = next((rs for rs in owned if (rs["metadata"].get("labels") or {}).get(HASH_LABEL) == hash_), None)
        old_rss = sorted(
            (rs for rs in owned if rs is not new_rs),
            key=lambda rs: (rs["metadata"].get("creationTimestamp", ""), rs["metadata"]["name"]),
        )
        replicas = int(spec.get("replicas", 1) or 0)
        rolling = (spec.get("strategy") or {}).get("type", "RollingUpdate") != "Recreate"
        rolling_update = (spec.get("strategy") or {}).get("rollingUpdate") or {}
        max_surge = _scaled_value(rolling_update.get("maxSurge", "25%"), replicas, True) if rolling else 0
        max_unavailable = (
            _scaled_value(rolling_update.get("maxUnavailable", "25%"), replicas, False) if rolling else replicas
        )
        if rolling and max_surge == 0 and max_unavailable == 0:
            max_unavailable = 1
        max_unavailable = min(max_unavailable, replicas)
        max_old = max((_revision(rs) for rs in old_rss), default=0)
        created = False
        if new_rs is None:
            revision = max_old + 1
            if rolling:
                current = sum(_spec_replicas(rs) for rs in old_rss)
                start = max(0, min(replicas, replicas + max_surge - current))
            else:
                start = 0 if any(_spec_replicas(rs) for rs in old_rss) else replicas
            new_rs = self._create_replicaset(d, template, hash_, start, revision, replicas + max_surge)
            created = True
        else:
            revision = _revision(new_rs)
            if revision <= max_old:  # a rollback to an older template: it becomes the newest revision
                revision = max_old + 1
                new_rs = self._annotate(new_rs, {REVISION: str(revision)})
        if rolling:
            self._rolling(d, new_rs, old_rss, replicas, max_surge, max_unavailable)
        else:
            self._recreate(d, new_rs, old_rss, replicas)
        self._cleanup(d, old_rss)
        self._stamp_revision(d, revision)
        new_rs = self._store.get(REPLICASETS, namespace, new_rs["metadata"]["name"]) or new_rs
        old_rss = [self._store.get(REPLICASETS, namespace, rs["metadata"]["name"]) or rs for rs in old_rss]
        self._write_deployment_status(d, new_rs, old_rss, replicas, max_unavailable, created)

    def _create_replicaset(
        self, d: dict, template: dict, hash_: str, replicas: int, revision: int, max_replicas: int
    ) -> dict:
        meta = d["metadata"]
        template = deep_copy(template)
        template_meta = template.setdefault("metadata", {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), HASH_LABEL: hash_}
        selector = deep_copy((d.get("spec") or {}).get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), HASH_LABEL: hash_}
        annotations = {
            k: v
            for k, v in (meta.get("annotations") or {}).items()
            if k != "kubectl.kubernetes.io/last-applied-configuration" and k != REVISION
        }
        annotations.update(
            {
                DESIRED: str((d.get("spec") or {}).get("replicas", 1)),
                MAX_REPLICAS: str(max_replicas),
                REVISION: str(revision),
            }
        )
        rs = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{meta['name']}-{hash_}",
                "namespace": meta["namespace"],
                "labels": template_meta["labels"],
                "annotations": annotations,
                "ownerReferences": [_owner_ref(d, "Deployment")],
            },
            "spec": {
                "replicas": replicas,
                "selector": selector,
                "template": template,
                **({"minReadySeconds": d["spec"]["minReadySeconds"]} if d["spec"].get("minReadySeconds") else {}),
            },
        }
        return self._store.create_ex(REPLICASETS, meta["namespace"], rs, MANAGER, owned=True).obj

    def _annotate(self, rs: dict, annotations: dict[str, str]) -> dict:
        new = deep_copy(rs)
        new["metadata"]["annotations"] = {**(rs["metadata"].get("annotations") or {}), **annotations}
        return self._store.update_ex(
            REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"], new, None, MANAGER, owned=True
        ).obj

    def _scale(self, d: dict, rs: dict, replicas: int, max_surge: int) -> dict:
        annotations = dict(rs["metadata"].get("annotations") or {})
        desired = str((d.get("spec") or {}).get("replicas", 1))
        max_replicas = str(int((d.get("spec") or {}).get("replicas", 1) or 0) + max_surge)
        if (
            _spec_replicas(rs) == replicas
            and annotations.get(DESIRED) == desired
            and annotations.get(MAX_REPLICAS) == max_replicas
        ):
            return rs
        annotations[DESIRED] = desired
        annotations[MAX_REPLICAS] = max_replicas
        new = deep_copy(rs)
        new["metadata"]["annotations"] = annotations
        new["spec"]["replicas"] = replicas
        return self._store.update_ex(
            REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"], new, None, MANAGER, owned=True
        ).obj

    def _rolling(
        self, d: dict, new_rs: dict, old_rss: list[dict], replicas: int, max_surge: int, max_unavailable: int
    ) -> None:
        # reconcileNewReplicaSet: up to the desired count while the total stays within the surge.
        new_count = _spec_replicas(new_rs)
        if new_count > replicas:
            new_rs = self._scale(d, new_rs, replicas, max_surge)
        elif new_count < replicas:
            total = new_count + sum(_spec_replicas(rs) for rs in old_rss)
            up = min(replicas + max_surge - total, replicas - new_count)
            if up > 0:
                new_rs = self._scale(d, new_rs, new_count + up, max_surge)
        else:
            new_rs = self._scale(d, new_rs, new_count, max_surge)
        # reconcileOldReplicaSets: down while the available pods stay at or above the minimum.
        old_total = sum(_spec_replicas(rs) for rs in old_rss)
        if old_total == 0:
            return
        min_available = replicas - max_unavailable
        all_count = _spec_replicas(new_rs) + old_total
        new_unavailable = _spec_replicas(new_rs) - _status(new_rs, "availableReplicas")
        budget = all_count - min_available - new_unavailable
        if budget <= 0:
            return
        # Unhealthy old replicas go first: they do not count towards availability.
        for i, rs in enumerate(old_rss):
            unhealthy = _spec_replicas(rs) - _status(rs, "availableReplicas")
            cut = min(budget, max(unhealthy, 0))
            if cut > 0:
                old_rss[i] = self._scale(d, rs, _spec_replicas(rs) - cut, max_surge)
                budget -= cut
        available = _status(new_rs, "availableReplicas") + sum(_status(rs, "availableReplicas") for rs in old_rss)
        remaining = min(budget, available - min_available)
        for i, rs in enumerate(old_rss):
            if remaining <= 0:
                break
            cut = min(_spec_replicas(rs), remaining)
            if cut > 0:
                old_rss[i] = self._scale(d, rs, _spec_replicas(rs) - cut, max_surge)
                remaining -= cut

    def _recreate(self, d: dict, new_rs: dict, old_rss: list[dict], replicas: int) -> None:
        for i, rs in enumerate(old_rss):
            if _spec_replicas(rs):
                old_rss[i] = self._scale(d, rs, 0, 0)
        namespace = d["metadata"]["namespace"]
        old_uids = {rs["metadata"]["uid"] for rs in old_rss}
        if any(_controller_uid(p) in old_uids for p in self._store.list(PODS, namespace)[0]):
            return  # Recreate waits for every old pod to be gone
        self._scale(d, new_rs, replicas, 0)

    def _cleanup(self, d: dict, old_rss: list[dict]) -> None:
        limit = (d.get("spec") or {}).get("revisionHistoryLimit", 10)
        if not isinstance(limit, int):
            return
        idle = [
            rs
            for rs in old_rss
            if _spec_replicas(rs) == 0 and _status(rs, "replicas") == 0 and not rs["metadata"].get("deletionTimestamp")
        ]
        idle.sort(key=_revision)
        for rs in idle[: max(0, len(idle) - limit)]:
            try:
                self._store.delete(
                    REPLICASETS,
                    rs["metadata"]["namespace"],
                    rs["metadata"]["name"],
                    {"preconditions": {"uid": rs["metadata"]["uid"]}},
                )
            except ApiError as err:
                if err.code != 404:
                    raise

    def _stamp_revision(self, d: dict, revision: int) -> None:
        annotations = d["metadata"].get("annotations") or {}
        if annotations.get(REVISION) == str(revision):
            return
        new = deep_copy(d)
        new["metadata"].setdefault("annotations", {})[REVISION] = str(revision)
        self._store.update_ex(
            DEPLOYMENTS, d["metadata"]["namespace"], d["metadata"]["name"], new, None, MANAGER, owned=True
        )

    def _write_deployment_status(
        self, d: dict, new_rs: dict, old_rss: list[dict], replicas: int, max_unavailable: int, created: bool
    ) -> None:
        d = self._store.get(DEPLOYMENTS, d["metadata"]["namespace"], d["metadata"]["name"]) or d
        all_rss = [new_rs, *old_rss]
        available = sum(_status(rs, "availableReplicas") for rs in all_rss)
        status: dict[str, Any] = _without_zeros(
            {
                "observedGeneration": d["metadata"].get("generation"),
                "replicas": sum(_status(rs, "replicas") for rs in all_rss),
                "updatedReplicas": _status(new_rs, "replicas"),
                "readyReplicas": sum(_status(rs, "readyReplicas") for rs in all_rss),
                "availableReplicas": available,
                "unavailableReplicas": max(replicas - available, 0),
                "collisionCount": (d.get("status") or {}).get("collisionCount"),
            }
        )
        now = rfc3339(self._store.clock())
        old_conditions = {c.get("type"): c for c in (d.get("status") or {}).get("conditions") or ()}
        rs_name = new_rs["metadata"]["name"]
        if available >= replicas - max_unavailable:
            available_cond = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
        else:
            available_cond = ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
        complete = (
            _status(new_rs, "replicas") == replicas
            and _status(new_rs, "availableReplicas") >= replicas
            and status.get("replicas", 0) == replicas
            and _spec_replicas(new_rs) == replicas
        )
        if complete:
            progressing = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{rs_name}" has successfully progressed.')
        elif created:
            progressing = ("True", "NewReplicaSetCreated", f'Created new replica set "{rs_name}"')
        elif (
            old_conditions.get("Progressing", {}).get("reason") in (None, "NewReplicaSetAvailable")
            and (old_conditions.get("Progressing") or {}).get("message", "").find(rs_name) < 0
        ):
            progressing = ("True", "FoundNewReplicaSet", f'Found new replica set "{rs_name}"')
        else:
            progressing = ("True", "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.')
        conditions = []
        for type_, (cstatus, reason, message) in (("Available", available_cond), ("Progressing", progressing)):
            old = old_conditions.get(type_) or {}
            same = old.get("status") == cstatus and old.get("reason") == reason and old.get("message") == message
            conditions.append(
                {
                    "type": type_,
                    "status": cstatus,
                    "lastUpdateTime": old.get("lastUpdateTime", now) if same else now,
                    "lastTransitionTime": old.get("lastTransitionTime", now) if old.get("status") == cstatus else now,
                    "reason": reason,
                    "message": message,
                }
            )
        status["conditions"] = conditions
        self._write_status(DEPLOYMENTS, d, status)


def _spec_replicas(rs: dict) -> int:
    return int((rs.get("spec") or {}).get("replicas", 0) or 0)


def _status(rs: dict, key: str) -> int:
    return int((rs.get("status") or {}).get(key, 0) or 0)


def _revision(rs: dict) -> int:
    try:
        return int((rs["metadata"].get("annotations") or {}).get(REVISION, "0"))
    except ValueError:
        return 0


def _deletion_rank(pod: dict) -> tuple:
    """Which surplus pods go first (controller.ActivePods order, abridged): unscheduled, then pending,
    then not ready, then the most recently created."""
    status = pod.get("status") or {}
    created = pod["metadata"].get("creationTimestamp", "")
    return (
        bool((pod.get("spec") or {}).get("nodeName")),
        status.get("phase") == "Running",
        _ready(pod),
        tuple(-ord(ch) for ch in created),
        pod["metadata"]["name"],
    )
