"""The informer's local cache: an indexed store of plain-dict objects (client-go's ``cache.Indexer``).

Why: reconciles read the world from here, never from the apiserver, so lookups must be O(1) by key and
cheap by index ("all pods of this namespace", "all pods whose controller is owner UID X"), and the memory
per cached object must stay small — a controller may cache tens of thousands of pods. Also here: the
tombstone of a deletion the informer did not see, and the transforms that keep cached objects small.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

__all__ = [
    "DeletedFinalStateUnknown",
    "IndexFunc",
    "Indexer",
    "NAMESPACE_INDEX",
    "CONTROLLER_UID_INDEX",
    "object_key",
    "split_key",
    "namespace_index",
    "controller_owner_uid_index",
    "controller_ref",
    "default_transform",
    "intern_transform",
    "compact_transform",
    "strip_managed_fields",
    "drops_managed_fields",
]

IndexFunc = Callable[[dict[str, Any]], Iterable[str]]

NAMESPACE_INDEX = "namespace"
CONTROLLER_UID_INDEX = "controller-uid"

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


class DeletedFinalStateUnknown(NamedTuple):
    """Delivered to ``on_delete`` when an object vanished while the informer was not watching.

    ``obj`` is the last state the cache had — possibly stale — and may be ``None``. Delete handlers
    must accept both a plain object and this tombstone (use :meth:`unwrap` / ``key``).
    """

    key: str
    obj: dict[str, Any] | None

    @staticmethod
    def unwrap(obj_or_tombstone: dict[str, Any] | DeletedFinalStateUnknown) -> dict[str, Any] | None:
        """The object inside a tombstone, or the object itself."""
        if isinstance(obj_or_tombstone, DeletedFinalStateUnknown):
            return obj_or_tombstone.obj
        return obj_or_tombstone


def object_key(obj: Mapping[str, Any] | DeletedFinalStateUnknown) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (client-go ``MetaNamespaceKeyFunc``).

    A tombstone's key is its stored key. Raises ``ValueError`` for an object without a name.
    """
    if isinstance(obj, DeletedFinalStateUnknown):
        return obj.key
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        raise ValueError("object has no metadata.name")
    namespace = meta.get("namespace")
    return f"{namespace}/{name}" if namespace else name


def split_key(key: str) -> tuple[str | None, str]:
    """Inverse of :func:`object_key`: ``(namespace or None, name)``."""
    namespace, sep, name = key.partition("/")
    if not sep:
        return None, key
    return namespace, name


def namespace_index(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """Index function of the built-in ``namespace`` index (cluster-scoped objects are not indexed)."""
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return (namespace,) if isinstance(namespace, str) and namespace else ()


def controller_ref(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ownerReference with ``controller: true`` (at most one exists), or ``None``; ``None`` too when
    ``ownerReferences`` is not a list of objects (an object decoded from a misbehaving server)."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return ref
    return None


def controller_owner_uid_index(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """Index objects by the UID of their controlling owner (pods of a job, for instance).

    Indexing by UID rather than name means a recreated owner with the same name never sees the children
    of its previous incarnation.
    """
    ref = controller_ref(obj)
    if ref is None:
        return ()
    uid = ref.get("uid")
    return (uid,) if isinstance(uid, str) and uid else ()


class Indexer:
    """Key → object store with secondary indices, used from the event loop only (no locks).

    Keys are ``namespace/name`` (cluster-scoped: ``name``; :func:`object_key`). Objects are **shared, not
    copied**: reads hand out the cached dicts themselves, and a caller that mutates one corrupts the cache
    and its indices silently (``copy.deepcopy`` first). Indices change with the store on every write; an
    index function must be a pure function of the object returning the values it is indexed under (maybe
    none). The built-in ``"namespace"`` index is always present; others are added by name.
    """

    __slots__ = ("_items", "_index_funcs", "_indices")

    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, dict[str, Any]] = {}
        self._index_funcs: dict[str, IndexFunc] = {NAMESPACE_INDEX: namespace_index}
        for name, func in (indexers or {}).items():
            if name == NAMESPACE_INDEX and func is not namespace_index:
                raise ValueError(f"index name {NAMESPACE_INDEX!r} is reserved for the built-in namespace index")
            self._index_funcs[name] = func
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._index_funcs}

    # -- reads ------------------------------------------------------------------------------------------

    def get(self, key: str) -> dict[str, Any] | None:
        """The object stored at ``key`` (shared: do not mutate), else None."""
        return self._items.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def keys(self) -> list[str]:
        """Every key, in a new list."""
        return list(self._items)

    def list(self) -> list[dict[str, Any]]:
        """Every object, in a new list of the shared objects (do not mutate them)."""
        return list(self._items.values())

    def index_names(self) -> builtins.list[str]:
        """The names of the indices, ``"namespace"`` first."""
        return list(self._index_funcs)

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        """Keys of the objects indexed under ``value`` in index ``index_name``."""
        return list(self._index(index_name).get(value, ()))

    def by_index(self, index_name: str, value: str) -> builtins.list[dict[str, Any]]:
        """Objects indexed under ``value`` in index ``index_name`` (unordered). Unknown index → KeyError."""
        keys = self._index(index_name).get(value)
        if not keys:
            return []
        items = self._items
        return [items[k] for k in keys]

    def index_values(self, index_name: str) -> builtins.list[str]:
        """Every value that currently has at least one object in index ``index_name``."""
        return list(self._index(index_name))

    def _index(self, index_name: str) -> dict[str, set[str]]:
        try:
            return self._indices[index_name]
        except KeyError:
            raise KeyError(f"no index named {index_name!r}; known: {sorted(self._indices)}") from None

    # -- writes (the informer's; tests may use them directly) -------------------------------------------

    def add_indexer(self, name: str, func: IndexFunc) -> None:
        """Add an index after construction; existing objects are indexed at once."""
        if name in self._index_funcs:
            raise ValueError(f"index {name!r} already exists")
        self._index_funcs[name] = func
        index: dict[str, set[str]] = {}
        self._indices[name] = index
        for key, obj in self._items.items():
            for value in func(obj):
                index.setdefault(value, set()).add(key)

    def put(self, key: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        """Insert or replace the object under ``key``; returns the previous object (or ``None``)."""
        old = self._items.get(key)
        self._items[key] = obj
        for name, func in self._index_funcs.items():
            if old is not None:
                if func is namespace_index:
                    continue  # the key contains the namespace: a replacement never changes it
                new_values = func(obj)
                old_values = func(old)
                if old_values == new_values:
                    continue
                self._unindex(name, key, old_values)
            else:
                new_values = func(obj)
            index = self._indices[name]
            for value in new_values:
                keys = index.get(value)
                if keys is None:
                    index[value] = {key}
                else:
                    keys.add(key)
        return old

    def delete(self, key: str) -> dict[str, Any] | None:
        """Remove ``key``; returns the removed object (``None`` if it was absent)."""
        old = self._items.pop(key, None)
        if old is not None:
            for name, func in self._index_funcs.items():
                self._unindex(name, key, func(old))
        return old

    def replace(self, items: Mapping[str, dict[str, Any]]) -> None:
        """Replace the whole content (indices rebuilt)."""
        self._items = {}
        self._indices = {name: {} for name in self._index_funcs}
        for key, obj in items.items():
            self.put(key, obj)

    def _unindex(self, name: str, key: str, values: Iterable[str]) -> None:
        index = self._indices[name]
        for value in values:
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]


# -- transforms -------------------------------------------------------------------------------------------

_intern = sys.intern


def strip_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The informer's default transform: drop ``metadata.managedFields`` and the
    ``kubectl.kubernetes.io/last-applied-configuration`` annotation, in place (idempotent).

    These are the largest fields of a typical object and no controller logic reads them.
    """
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED_ANNOTATION in annotations:
            del annotations[LAST_APPLIED_ANNOTATION]
            if not annotations:
                del meta["annotations"]
    return obj


default_transform = strip_managed_fields


def _intern_str_values(mapping: dict[str, Any]) -> None:
    for k, v in mapping.items():
        if type(v) is str:
            mapping[k] = _intern(v)


def intern_transform(obj: dict[str, Any]) -> dict[str, Any]:
    """:func:`strip_managed_fields`, then intern the metadata strings many objects share (namespace,
    generateName, label and annotation values, ownerReference fields), in place (idempotent).

    The trade-off: fewer cached bytes per pod for more CPU per event (both measured in
    docs/benchmarks/informer.md) — worth it when memory, not event throughput, is the constraint.
    """
    strip_managed_fields(obj)
    meta = obj.get("metadata")
    if meta is not None:
        namespace = meta.get("namespace")
        if namespace is not None:
            meta["namespace"] = _intern(namespace)
        generate_name = meta.get("generateName")
        if generate_name is not None:
            meta["generateName"] = _intern(generate_name)
        labels = meta.get("labels")
        if labels:
            _intern_str_values(labels)
        annotations = meta.get("annotations")
        if annotations:
            _intern_str_values(annotations)
        refs = meta.get("ownerReferences")
        if refs:
            for ref in refs:
                _intern_str_values(ref)
    return obj


# Scalar strings that thousands of pods of one job share (nodes, images, policies). Unique strings
# (hostname, uid) are left alone: interning them costs time and saves nothing.
_SHARED_SPEC_FIELDS = (
    "nodeName",
    "schedulerName",
    "serviceAccountName",
    "serviceAccount",
    "restartPolicy",
    "dnsPolicy",
    "priorityClassName",
    "preemptionPolicy",
    "subdomain",
)
_SHARED_CONTAINER_FIELDS = ("name", "image", "imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy")


def compact_transform(obj: dict[str, Any]) -> dict[str, Any]:
    """:func:`intern_transform` plus interning of the shared scalar fields of ``spec`` and of each
    container (nodeName, image, policies, ...): the smallest cache and the slowest transform, for
    memory-bound deployments (docs/benchmarks/informer.md)."""
    intern_transform(obj)
    spec = obj.get("spec")
    if type(spec) is dict:
        for field in _SHARED_SPEC_FIELDS:
            value = spec.get(field)
            if type(value) is str:
                spec[field] = _intern(value)
        for containers_field in ("containers", "initContainers"):
            containers = spec.get(containers_field)
            if type(containers) is list:
                for container in containers:
                    if type(container) is dict:
                        for field in _SHARED_CONTAINER_FIELDS:
                            value = container.get(field)
                            if type(value) is str:
                                container[field] = _intern(value)
    return obj


_MANAGED_FIELDS_DROPPING = frozenset({strip_managed_fields, intern_transform, compact_transform})


def drops_managed_fields(transform: Callable[[dict[str, Any]], dict[str, Any]] | None) -> bool:
    """Whether ``transform`` is one of this module's transforms, which all drop ``metadata.managedFields``:
    an informer using one need not decode that field at all (see :mod:`controller.runtime.watchdecode`)."""
    return transform in _MANAGED_FIELDS_DROPPING
