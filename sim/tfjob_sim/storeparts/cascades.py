"""Cascades: the contents of a terminating Namespace or CRD are deleted, then the Namespace or CRD.

Why this is its own part: kube-apiserver's namespace controller and CRD finalizer run apart from the
write that started them; here they run inside the store, synchronously, and go on after every
deletion until the namespace or CRD is empty (terminating pods and finalizers can keep it waiting).

Contract: :class:`Cleanup` works through a :class:`CleanupHost` (the store, held weakly): ``start_namespace`` and
``start_crd`` begin a cleanup and make what progress they can; ``after_delete`` (a follow-up of every
committed deletion) makes more. Deleting the contents uses the host's ``delete_ex`` like any client.
"""

from __future__ import annotations

import bisect
import logging
import weakref
from typing import Protocol

from tfjob_sim.errors import ApiError
from tfjob_sim.resources import Registry, ResourceType
from tfjob_sim.storeparts.revisions import Bucket
from tfjob_sim.storeparts.values import CRD_CLEANUP_FINALIZER, CRD_RESOURCE, Event, WriteResult

log = logging.getLogger("tfjob_sim.store")


class CleanupHost(Protocol):
    """What the cleanup uses of the store."""

    registry: Registry
    _buckets: dict[str, Bucket]

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None: ...

    def resource_type(self, resource: str) -> ResourceType: ...

    def delete_ex(
        self, resource: str, namespace: str | None, name: str, options: dict | None = None, dry_run: bool = False
    ) -> WriteResult: ...

    def _bucket(self, rt: ResourceType) -> Bucket: ...

    def _next_rv(self) -> int: ...

    def _commit(
        self, bucket: Bucket, type_: str, key: tuple[str, str], old: dict | None, new: dict | None, rv: int
    ) -> Event: ...


class Cleanup:
    """The pending cleanups of terminating namespaces and CRDs."""

    def __init__(self, host: CleanupHost) -> None:
        # Held weakly: the store holds its cleanup, and a cycle would keep a dropped store (and every
        # object in it) alive until the cyclic garbage collector runs, not just until its last reference goes.
        self._store = weakref.ref(host)
        self._pending: set[tuple[str, str]] = set()  # ("ns"|"crd", name)
        self._running = False

    @property
    def _host(self) -> CleanupHost:
        host = self._store()
        if host is None:
            raise RuntimeError("the store this cleanup works for is gone")
        return host

    def start_namespace(self, ns: str) -> None:
        """Clean up the namespace ``ns``, just marked for deletion: its contents, then itself."""
        self._pending.add(("ns", ns))
        self._run()

    def start_crd(self, crd_name: str) -> None:
        """Clean up the CRD ``crd_name``, just marked for deletion: its custom resources, then itself."""
        self._pending.add(("crd", crd_name))
        self._run()

    def after_delete(self, event: Event) -> None:
        """A deletion was committed: a pending cleanup it was waiting for may go on."""
        if not self._pending or event.old is None:
            return
        self._run()

    def _run(self) -> None:
        """Delete the contents of terminating namespaces / CRDs; finish them once empty."""
        if self._running:
            return
        self._running = True
        try:
            progress = True
            while progress and self._pending:
                progress = False
                for kind, name in sorted(self._pending):
                    if kind == "ns":
                        done = self._cleanup_namespace(name)
                    else:
                        done = self._cleanup_crd(name)
                    if done:
                        self._pending.discard((kind, name))
                        progress = True
        finally:
            self._running = False

    def _namespace_has_content(self, ns: str) -> bool:
        """Whether any object of a namespaced type is still in ``ns``."""
        for rt in self._host.registry.all():
            bucket = self._host._buckets.get(rt.qualified)
            if rt.namespaced and bucket is not None:
                keys = bucket.sorted_keys()
                if bisect.bisect_left(keys, (ns, "\U0010ffff")) != bisect.bisect_left(keys, (ns, "")):
                    return True
        return False

    def _cleanup_namespace(self, ns: str) -> bool:
        """Delete everything in a terminating namespace; remove the namespace once it is empty."""
        if self._host.get("namespaces", None, ns) is None:
            return True
        for rt in self._host.registry.all():
            bucket = self._host._buckets.get(rt.qualified)
            if not rt.namespaced or bucket is None:
                continue
            keys = bucket.sorted_keys()
            lo = bisect.bisect_left(keys, (ns, ""))
            hi = bisect.bisect_left(keys, (ns, "\U0010ffff"))
            for key in list(keys[lo:hi]):
                obj = bucket.objects.get(key)
                if obj is None or obj["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    self._host.delete_ex(rt.qualified, ns, key[1], {"propagationPolicy": "Background"})
                except ApiError as exc:
                    if exc.code != 404:  # already gone through a cascade is fine; anything else is logged
                        log.warning("namespace %s cleanup: deleting %s/%s failed: %s", ns, rt.qualified, key[1], exc)
        if self._namespace_has_content(ns):
            return False  # terminating pods / finalizers left: re-checked on every deletion
        ns_obj = self._host.get("namespaces", None, ns)
        if ns_obj is None:
            return True
        bucket = self._host._bucket(self._host.resource_type("namespaces"))
        if ns_obj["metadata"].get("finalizers"):
            if (ns_obj.get("spec") or {}).get("finalizers"):
                new = dict(ns_obj)
                new["spec"] = dict(ns_obj.get("spec") or {}, finalizers=[])
                rv = self._host._next_rv()
                new["metadata"] = dict(ns_obj["metadata"], resourceVersion=str(rv))
                self._host._commit(bucket, "MODIFIED", ("", ns), ns_obj, new, rv)
            return True  # whoever owns the metadata finalizers removes them; that update deletes it
        rv = self._host._next_rv()
        self._host._commit(bucket, "DELETED", ("", ns), ns_obj, None, rv)
        return True

    def _cleanup_crd(self, crd_name: str) -> bool:
        """Delete every custom resource of a terminating CRD; remove the CRD (or its cleanup finalizer)
        once they are gone. True when this cleanup is over."""
        crd = self._host.get(CRD_RESOURCE, None, crd_name)
        if crd is None:
            return True
        spec = crd.get("spec") or {}
        qualified = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        bucket = self._host._buckets.get(qualified)
        if bucket is not None and bucket.objects:
            for (ns, name), obj in list(bucket.objects.items()):
                if not obj["metadata"].get("deletionTimestamp"):
                    try:
                        self._host.delete_ex(qualified, ns or None, name, {"propagationPolicy": "Background"})
                    except ApiError as exc:
                        if exc.code != 404:
                            log.warning("CRD %s cleanup: deleting %s failed: %s", crd_name, name, exc)
            if bucket.objects:
                return False
        crd = self._host.get(CRD_RESOURCE, None, crd_name)
        if crd is None:
            return True
        finalizers = [f for f in crd["metadata"].get("finalizers") or [] if f != CRD_CLEANUP_FINALIZER]
        crd_bucket = self._host._bucket(self._host.resource_type(CRD_RESOURCE))
        rv = self._host._next_rv()
        if finalizers:
            new = dict(crd)
            new["metadata"] = dict(crd["metadata"], finalizers=finalizers, resourceVersion=str(rv))
            self._host._commit(crd_bucket, "MODIFIED", ("", crd_name), crd, new, rv)
            return True
        self._host._commit(crd_bucket, "DELETED", ("", crd_name), crd, None, rv)
        return True
