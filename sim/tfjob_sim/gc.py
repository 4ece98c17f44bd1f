"""The simulated cluster's garbage collector: ownerReferences with background, foreground and
orphan propagation, as kube-controller-manager's GC applies them.

Why this module exists: controllers rely on the GC for cleanup (a deleted TFJob takes its pods and
services with it) and for ordering (foreground deletion keeps the owner until blocking dependents
are gone). Without it the simulator would either leak dependents or hide ordering bugs.

Contract (the semantics of kube-controller-manager's garbage collector):
- An owner is resolved by uid. A reference is *dangling* when no object has that uid, or the object
  with that uid has another name, kind or API group, or lives in another namespace than a namespaced
  dependent (cross-namespace and namespaced-owner-of-cluster-scoped-dependent refs are invalid and
  count as absent, as the real GC treats them).
- Classification of a dependent's owners (attemptToDeleteItem): *solid* = present and not being
  deleted in foreground; *waiting* = present with deletionTimestamp and the ``foregroundDeletion``
  finalizer. With a solid owner, refs to dangling/waiting owners are removed from the dependent;
  with none, the dependent is deleted: in Foreground when a waiting owner exists and the dependent
  has dependents of its own, otherwise with the policy its own GC finalizers ask for (Background by
  default). Deletes carry a uid precondition.
- An object being deleted with ``foregroundDeletion``: its dependents are deleted; the finalizer is
  removed once no dependent whose ref to it has ``blockOwnerDeletion: true`` remains (the store then
  removes the object if nothing else holds it).
- An object being deleted with ``orphan``: its uid is removed from every dependent's
  ownerReferences, then the finalizer is removed.
- Works for every resource the store serves, namespaced or cluster-scoped, including custom resources.
- Incremental: an index uid -> object and owner uid -> dependents is maintained from the store
  listener, so the work per change is proportional to what changed, never a rescan of the store.
  Foreground owners are re-examined only when their last blocking dependent goes away.
- ``GCConfig.delay_seconds`` (scaled by ``time_scale``) delays every action after the change that
  triggered it, so tests can observe orphans. ``pause()`` stops all GC writes until ``resume()``.
- The decision is made against the store's current state when the item is processed (level-based),
  so a delay never acts on stale information.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import structlog

from tfjob_sim.errors import ApiError
from tfjob_sim.store import StoreReads

log = structlog.get_logger(__name__)

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
BATCH_CHECKPOINT = 256
RETRY_AFTER_ERROR_SECONDS = 1.0  # wall seconds: a guard against hot loops, not simulated time


class StoreLike(StoreReads, Protocol):
    """The store operations the garbage collector uses."""

    def delete(self, resource: str, namespace: str | None, name: str, options: dict | None = None) -> dict: ...

    def add_listener(self, fn: Callable[[str, str, dict | None, dict | None], None]) -> Callable[[], None]: ...


@dataclass
class GCConfig:
    delay_seconds: float = 0.0  # extra delay before acting (scaled by time_scale)
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.delay_seconds < 0:
            raise ValueError(f"delay_seconds must be >= 0, got {self.delay_seconds}")
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale}")


@dataclass(frozen=True, slots=True)
class OwnerRef:
    uid: str
    api_version: str
    kind: str
    name: str
    block: bool

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]


class _Object:
    """What the GC remembers about one stored object."""

    __slots__ = ("uid", "resource", "namespace", "name", "kind", "group", "owners", "deleting", "finalizers", "refs")

    def __init__(
        self,
        uid: str,
        resource: str,
        namespace: str,
        name: str,
        kind: str,
        group: str,
        owners: tuple[OwnerRef, ...],
        deleting: bool,
        finalizers: tuple[str, ...],
    ) -> None:
        self.uid = uid
        self.resource = resource
        self.namespace = namespace
        self.name = name
        self.kind = kind
        self.group = group
        self.owners = owners
        self.deleting = deleting
        self.finalizers = finalizers
        # The metadata.ownerReferences ``owners`` was parsed from: most writes (status, labels) keep
        # the stored list, so it is compared instead of parsed again.
        self.refs: Any = None

    @property
    def foreground(self) -> bool:
        return self.deleting and FOREGROUND in self.finalizers

    @property
    def orphaning(self) -> bool:
        return self.deleting and ORPHAN in self.finalizers


def _owners_of(meta: dict) -> tuple[OwnerRef, ...]:
    refs = meta.get("ownerReferences")
    if not refs:
        return ()
    out = []
    for ref in refs:
        if isinstance(ref, dict) and ref.get("uid"):
            out.append(
                OwnerRef(
                    uid=str(ref["uid"]),
                    api_version=str(ref.get("apiVersion") or ""),
                    kind=str(ref.get("kind") or ""),
                    name=str(ref.get("name") or ""),
                    block=ref.get("blockOwnerDeletion") is True,
                )
            )
    return tuple(out)


def _group_of(obj: dict) -> str:
    return str(obj.get("apiVersion") or "").rpartition("/")[0]


class GarbageCollector:
    """Owner-reference garbage collection over a Store. ``await run()``; cancel to stop."""

    def __init__(self, store: StoreLike, config: GCConfig | None = None) -> None:
        self._store = store
        self.config = config or GCConfig()
        self._objects: dict[str, _Object] = {}
        self._dependents: dict[str, set[str]] = {}
        self._blocking: dict[str, set[str]] = {}  # owner uid -> dependents whose ref blocks it
        self._queue: list[tuple[float, int, str]] = []
        self._queued: dict[str, float] = {}
        self._seq = 0
        self._paused = False
        self._wake: anyio.Event | None = None
        self._started = False

    # ---------------------------------------------------------------- public API

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._notify()

    def dependents_of(self, uid: str) -> set[str]:
        """Uids of the objects whose ownerReferences name ``uid`` (a copy; for tests and debugging)."""
        return set(self._dependents.get(uid, ()))

    async def run(self) -> None:
        if self._started:
            raise RuntimeError("GarbageCollector.run() may only be called once")
        self._started = True
        self._wake = anyio.Event()
        unsubscribe = self._store.add_listener(self._on_event)
        try:
            self._initial_sync()
            await self._loop()
        finally:
            unsubscribe()

    # ---------------------------------------------------------------- index maintenance (listener)

    def _initial_sync(self) -> None:
        registry = getattr(self._store, "registry", None)
        if registry is None:
            return  # a store without a type registry: objects are learnt from events only
        for rt in registry.all():
            items, _ = self._store.list(rt.qualified)
            for obj in items:
                self._upsert(rt.qualified, obj)

    def _on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        try:
            if event_type == "DELETED":
                if old is not None:
                    self._removed(old)
            elif new is not None:
                self._upsert(resource, new)
        except Exception:  # a listener must never break the store's write path
            log.exception("garbage collector listener failed", event_type=event_type, resource=resource)

    def _upsert(self, resource: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        if not uid:
            return
        refs = meta.get("ownerReferences")
        deleting = bool(meta.get("deletionTimestamp"))
        finalizers = tuple(meta.get("finalizers") or ())
        node = self._objects.get(uid)
        if node is not None and (refs is node.refs or refs == node.refs):
            owners = node.owners
        else:
            owners = _owners_of(meta)
        if node is None:
            node = _Object(
                uid,
                resource,
                meta.get("namespace") or "",
                meta.get("name", ""),
                str(obj.get("kind") or ""),
                _group_of(obj),
                (),
                False,
                (),
            )
            self._objects[uid] = node
            self._set_owners(node, owners)
            node.refs = refs
            node.deleting, node.finalizers = deleting, finalizers
            if owners:
                self._enqueue(uid)
            if node.foreground or node.orphaning:
                self._enqueue(uid)
                self._enqueue_dependents(uid)
            return
        node.refs = refs
        if owners != node.owners:
            touched = {r.uid for r in node.owners} | {r.uid for r in owners}
            self._set_owners(node, owners)
            self._enqueue(uid)
            for owner_uid in touched:  # a blocking ref may have gone: a foreground owner may finish
                owner = self._objects.get(owner_uid)
                if owner is not None and owner.foreground:
                    self._enqueue(owner_uid)
        if deleting != node.deleting or finalizers != node.finalizers:
            was_foreground, was_orphaning = node.foreground, node.orphaning
            node.deleting, node.finalizers = deleting, finalizers
            if node.foreground or node.orphaning:
                self._enqueue(uid)
            if (node.foreground and not was_foreground) or (node.orphaning and not was_orphaning):
                self._enqueue_dependents(uid)

    def _set_owners(self, node: _Object, owners: tuple[OwnerRef, ...]) -> None:
        for ref in node.owners:
            deps = self._dependents.get(ref.uid)
            if deps is not None:
                deps.discard(node.uid)
                if not deps:
                    del self._dependents[ref.uid]
            blocking = self._blocking.get(ref.uid)
            if blocking is not None:
                blocking.discard(node.uid)
                if not blocking:
                    del self._blocking[ref.uid]
        for ref in owners:
            self._dependents.setdefault(ref.uid, set()).add(node.uid)
            if ref.block:
                self._blocking.setdefault(ref.uid, set()).add(node.uid)
        node.owners = owners

    def _removed(self, obj: dict) -> None:
        uid = (obj.get("metadata") or {}).get("uid")
        if not isinstance(uid, str):
            return
        node = self._objects.pop(uid, None)
        if node is None:
            return
        owners = node.owners
        self._set_owners(node, ())
        for ref in owners:
            owner = self._objects.get(ref.uid)
            if owner is not None and owner.foreground and not self._blocking.get(ref.uid):
                self._enqueue(ref.uid)  # its last blocking dependent is gone
        self._enqueue_dependents(uid)  # their owner is gone

    def _enqueue_dependents(self, uid: str) -> None:
        for dep in self._dependents.get(uid, ()):
            self._enqueue(dep)

    def _enqueue(self, uid: str) -> None:
        due = anyio.current_time() + self.config.delay_seconds * self.config.time_scale
        self._push(uid, due)

    def _push(self, uid: str, due: float) -> None:
        queued = self._queued.get(uid)
        if queued is not None and queued <= due:
            return  # already due no later than this; the decision is made on the state at that time
        self._queued[uid] = due
        self._seq += 1
        heapq.heappush(self._queue, (due, self._seq, uid))
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ---------------------------------------------------------------- worker

    async def _loop(self) -> None:
        while True:
            processed = 0
            while self._queue and not self._paused:
                due, _seq, uid = self._queue[0]
                if due > anyio.current_time():
                    break
                heapq.heappop(self._queue)
                if self._queued.get(uid) != due:
                    continue  # superseded by an earlier entry for the same uid
                del self._queued[uid]
                self._process(uid)
                processed += 1
                if processed % BATCH_CHECKPOINT == 0:
                    await anyio.sleep(0)
            if processed:
                await anyio.sleep(0)
                continue
            timeout = math.inf
            if self._queue and not self._paused:
                timeout = max(0.0, self._queue[0][0] - anyio.current_time())
            assert self._wake is not None
            with anyio.move_on_after(timeout):
                await self._wake.wait()
            self._wake = anyio.Event()

    def _process(self, uid: str) -> None:
        node = self._objects.get(uid)
        if node is None:
            return
        try:
            self._attempt(node)
        except ApiError as exc:
            if exc.code in (404, 409):
                return  # changed under us: the change's own event brings it back if needed
            log.warning(
                "garbage collector write failed; retrying",
                resource=node.resource,
                object=f"{node.namespace}/{node.name}" if node.namespace else node.name,
                code=exc.code,
                error=exc.message,
            )
            self._push(uid, anyio.current_time() + RETRY_AFTER_ERROR_SECONDS)

    # ---------------------------------------------------------------- decisions

    def _current(self, node: _Object) -> dict | None:
        obj = self._store.get(node.resource, node.namespace or None, node.name)
        if obj is None or (obj.get("metadata") or {}).get("uid") != node.uid:
            return None
        return obj

    def _attempt(self, node: _Object) -> None:
        obj = self._current(node)
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp"):
            if FOREGROUND in finalizers:
                self._finish_foreground(node, obj)
            elif ORPHAN in finalizers:
                self._orphan_dependents(node, obj)
            return  # otherwise being deleted already: nothing for the GC to do
        if not node.owners:
            return
        solid: list[OwnerRef] = []
        dangling: list[OwnerRef] = []
        waiting: list[OwnerRef] = []
        for ref in node.owners:
            owner = self._resolve(node, ref)
            if owner is None:
                dangling.append(ref)
            elif owner.foreground:
                waiting.append(ref)
            else:
                solid.append(ref)
        if solid:
            if dangling or waiting:
                drop = {r.uid for r in dangling} | {r.uid for r in waiting}
                self._remove_owner_refs(node, obj, drop)
            return
        if waiting and self._dependents.get(node.uid):
            policy = "Foreground"  # let the waiting owner's wait extend through this subtree
        elif ORPHAN in finalizers:
            policy = "Orphan"
        elif FOREGROUND in finalizers:
            policy = "Foreground"
        else:
            policy = "Background"
        self._store.delete(
            node.resource,
            node.namespace or None,
            node.name,
            {"propagationPolicy": policy, "preconditions": {"uid": node.uid}},
        )

    def _resolve(self, dependent: _Object, ref: OwnerRef) -> _Object | None:
        """The owner ``ref`` names, or None when it is absent or the reference is invalid."""
        owner = self._objects.get(ref.uid)
        if owner is None:
            return None
        if owner.name != ref.name:
            return None
        if ref.kind and owner.kind and ref.kind != owner.kind:
            return None
        if ref.api_version and ref.group != owner.group:
            return None
        if owner.namespace and owner.namespace != dependent.namespace:
            return None  # cross-namespace, or a namespaced owner of a cluster-scoped dependent
        return owner

    def _finish_foreground(self, node: _Object, obj: dict) -> None:
        """Remove foregroundDeletion once no valid blocking dependent remains."""
        for dep_uid in self._blocking.get(node.uid, ()):
            dep = self._objects.get(dep_uid)
            if dep is not None and self._resolve(dep, next(r for r in dep.owners if r.uid == node.uid)) is not None:
                return  # still blocked; its deletion was requested when this owner started waiting
        self._remove_finalizer(node, obj, FOREGROUND)

    def _orphan_dependents(self, node: _Object, obj: dict) -> None:
        for dep_uid in list(self._dependents.get(node.uid, ())):
            dep = self._objects.get(dep_uid)
            if dep is None:
                continue
            dep_obj = self._current(dep)
            if dep_obj is None:
                continue
            try:
                self._remove_owner_refs(dep, dep_obj, {node.uid})
            except ApiError as exc:
                if exc.code != 404:
                    raise
        self._remove_finalizer(node, obj, ORPHAN)

    def _remove_owner_refs(self, node: _Object, obj: dict, uids: set[str]) -> None:
        refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        remaining = [r for r in refs if not (isinstance(r, dict) and r.get("uid") in uids)]
        if len(remaining) == len(refs):
            return
        self._store.patch(
            node.resource,
            node.namespace or None,
            node.name,
            "merge",
            {"metadata": {"ownerReferences": remaining or None}},
            field_manager="kube-controller-manager",
        )

    def _remove_finalizer(self, node: _Object, obj: dict, finalizer: str) -> None:
        finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
        if finalizer not in finalizers:
            return
        remaining = [f for f in finalizers if f != finalizer]
        self._store.patch(
            node.resource,
            node.namespace or None,
            node.name,
            "merge",
            {"metadata": {"finalizers": remaining or None}},
            field_manager="kube-controller-manager",
        )
