"""In-memory storage with kube-apiserver write semantics: the single source of truth of the simulator.

Why this module exists: every writer (the HTTP layer, the kubelet, the garbage collector, tests)
must see exactly the semantics a real apiserver + etcd give — one global resourceVersion counter,
no-op writes that keep the RV and emit nothing, optimistic concurrency, finalizers, graceful pod
deletion, propagation-policy finalizers, status/scale subresources, CRD schemas. Putting all of it
behind one synchronous API means the HTTP server is a thin translation and the simulated kubelet
and GC are subject to the same rules as any client.

Contract (other modules depend on it):
- All methods are synchronous and must be called on the event-loop thread; no locks.
- ``resource`` is the qualified plural ("pods", "leases.coordination.k8s.io", "tfjobs.kubeflow.org").
- Returned dicts are the store's own, shared with every other reader: callers MUST NOT mutate them
  (copy first). The store never mutates an object after it has been stored; every write builds a
  new dict.
- Errors are :class:`~tfjob_sim.errors.ApiError` with the real Status body.
- Every committed change bumps :attr:`Store.resource_version` once, is appended to the resource's
  bounded history (for watch resume / exact-RV lists / continue tokens) and is then reported to the
  event sinks (the watch hub) and to the listeners added with :meth:`Store.add_listener`.
- Listeners are called as ``fn(event_type, resource, old, new)``: ADDED (old None), MODIFIED, and
  DELETED (``old`` = last stored state, ``new`` None). A listener must not raise (it is logged) and
  should not write to the store synchronously (schedule the work instead): writes from inside a
  listener are allowed but are delivered to later listeners before the outer change's remaining
  listeners run.

The store is built from parts, one concern a module of :mod:`tfjob_sim.storeparts` (objects and
revisions, commits and history, reads, admission, field ownership, CRDs, create, update, patch,
delete, cascades, the pods' subresources); :class:`Store` puts them together and this module
re-exports the values its callers use.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tfjob_sim.resources import Registry
from tfjob_sim.storeparts.patching import Patching
from tfjob_sim.storeparts.pods import PodSubresources
from tfjob_sim.storeparts.reads import StoreReads
from tfjob_sim.storeparts.values import (
    CRD_CLEANUP_FINALIZER,
    CRD_RESOURCE,
    GC_FINALIZERS,
    PROTECTED_NAMESPACES,
    Event,
    Listener,
    ListResult,
    StoreConfig,
    WriteOptions,
    WriteResult,
    canonical,
    deep_copy,
    new_uid,
    parse_rv,
    rfc3339,
    rv_too_large,
    uid_from_bytes,
    with_resource_version,
)

__all__ = [
    "CRD_CLEANUP_FINALIZER",
    "CRD_RESOURCE",
    "GC_FINALIZERS",
    "PROTECTED_NAMESPACES",
    "Event",
    "ListResult",
    "Listener",
    "Store",
    "StoreConfig",
    "StoreReads",
    "WriteOptions",
    "WriteResult",
    "canonical",
    "deep_copy",
    "new_uid",
    "parse_rv",
    "rfc3339",
    "rv_too_large",
    "uid_from_bytes",
    "with_resource_version",
]


class Store(PodSubresources, Patching):
    """The simulator's storage and write pipeline. See the module docstring for the contract.

    A new store holds the namespaces every cluster starts with (default, kube-system, kube-public,
    kube-node-lease)."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(config, clock, registry)
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(
                "namespaces",
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                field_manager="kube-apiserver",
            )
