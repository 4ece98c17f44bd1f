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
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import builtins
import heapq
import logging
import math
import os
import random
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from tfjob_sim import errors, fieldmanager
from tfjob_sim.errors import ApiError
from tfjob_sim.resources import (
    OBJECT_META_FIELDS,
    Registry,
    ResourceType,
    ScaleSpec,
    apply_defaults,
    forbidden,
    invalid_value,
    prepare_for_create,
    required_value,
    set_condition,
    validate,
    validate_name,
    validate_object_meta,
    validate_update,
)

log = logging.getLogger(__name__)

Listener = Callable[[str, str, "dict | None", "dict | None"], None]

_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
GC_FINALIZERS = ("orphan", "foregroundDeletion")
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
# The NamespaceLifecycle admission plugin refuses to delete these.
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


@dataclass
class StoreConfig:
    """Knobs tests turn; defaults mirror a real apiserver's orders of magnitude."""

    # Watch-cache-like history per resource: a resume from an RV older than what is kept gets 410.
    history_max_events: int = 50_000
    history_max_age: float = 300.0
    # generateName retries before giving up with AlreadyExists (the real registry tries 8 times).
    generate_name_attempts: int = 8


@dataclass
class WriteOptions:
    """Per-request write options (query parameters of the real API)."""

    dry_run: bool = False
    field_validation: str = "Ignore"  # Strict | Warn | Ignore (the HTTP layer defaults to Warn)
    field_manager: str | None = None
    force: bool = False
    # The request's User-Agent: the manager name when ``field_manager`` is not given.
    user_agent: str = ""
    # False for the few writes a real registry makes outside the field manager (eviction's condition).
    track_ownership: bool = True

    @property
    def manager(self) -> str:
        return self.field_manager or fieldmanager.manager_from_user_agent(self.user_agent) or "unknown"


@dataclass
class WriteResult:
    """What a write answered: the body, the HTTP code (200/201/202) and warning texts."""

    obj: dict
    code: int = 200
    warnings: list[str] = field(default_factory=list)


@dataclass
class ListResult:
    items: list[dict]
    resource_version: str
    continue_token: str = ""
    remaining: int | None = None


class Event:
    """One committed change. ``object`` is what a watch delivers; ``line()`` is serialised once."""

    __slots__ = ("rv", "type", "resource", "old", "new", "object", "time", "_line")

    def __init__(self, rv: int, type_: str, resource: str, old: dict | None, new: dict | None, when: float):
        self.rv = rv
        self.type = type_
        self.resource = resource
        self.old = old
        self.new = new
        if type_ == "DELETED":
            assert old is not None
            self.object = with_resource_version(old, rv)
        else:
            assert new is not None
            self.object = new
        self.time = when
        self._line: bytes | None = None

    def line(self) -> bytes:
        """The watch line ``{"type":..,"object":..}\\n``; built once, shared by every watcher."""
        if self._line is None:
            self._line = orjson.dumps({"type": self.type, "object": self.object}) + b"\n"
        return self._line


def with_resource_version(obj: dict, rv: int) -> dict:
    """A shallow copy of ``obj`` whose metadata.resourceVersion is ``rv`` (shared sub-objects)."""
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta["resourceVersion"] = str(rv)
    out["metadata"] = meta
    return out


def deep_copy(obj: Any) -> Any:
    """A JSON-faithful deep copy (orjson round trip: faster than copy.deepcopy for JSON data)."""
    try:
        return orjson.loads(orjson.dumps(obj))
    except TypeError as exc:
        raise errors.bad_request(f"the object is not valid JSON data: {exc}") from exc


def uid_from_bytes(raw: bytes) -> str:
    """The RFC 4122 version-4 UUID text of 16 random bytes: what ``str(uuid.UUID(bytes=raw, version=4))``
    gives, built directly (the ``uuid.UUID`` object costs several times more, once per create)."""
    text = bytes((*raw[:6], (raw[6] & 0x0F) | 0x40, raw[7], (raw[8] & 0x3F) | 0x80, *raw[9:16])).hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def new_uid() -> str:
    """metadata.uid of a new object: a random (version 4) UUID, as the apiserver's uuid.NewUUID."""
    return uid_from_bytes(os.urandom(16))


def canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


_last_second: list = [None, ""]  # [whole second, its text]: a burst stamps thousands of writes per second


def rfc3339(ts: float) -> str:
    """metav1.Time: RFC 3339, UTC, whole seconds (truncated toward the past, as gmtime does)."""
    second = math.floor(ts)
    if second != _last_second[0]:
        _last_second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))]
    return _last_second[1]


class _Bucket:
    """All objects of one resource type, plus that type's bounded change history."""

    __slots__ = ("rt", "objects", "history", "history_rvs", "compacted_rv", "_sorted", "normalized")

    def __init__(self, rt: ResourceType, start_rv: int) -> None:
        self.rt = rt
        # The CRD schema under which every stored object's fields (status aside) are known to be pruned
        # and defaulted, or None when that is not known: a /status write then normalizes only the
        # status it brings (see Store._update_existing).
        self.normalized: Any = rt.schema if rt.custom else None
        self.objects: dict[tuple[str, str], dict] = {}
        self.history: deque[Event] = deque()
        self.history_rvs: deque[int] = deque()
        # Every change with rv > compacted_rv is still in history.
        self.compacted_rv = start_rv
        self._sorted: list[tuple[str, str]] | None = None

    def sorted_keys(self) -> list[tuple[str, str]]:
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def put(self, key: tuple[str, str], obj: dict) -> None:
        if key not in self.objects:
            self._sorted = None
        self.objects[key] = obj

    def remove(self, key: tuple[str, str]) -> None:
        if self.objects.pop(key, None) is not None:
            self._sorted = None


# spec fields a create gets from admission (ServiceAccount, Priority) or allocation (Service IPs) after
# the field manager ran, so they have no owner unless the client sent them.
_SET_AFTER_FIELD_MANAGER: dict[str, tuple[str, ...]] = {
    "Pod": ("serviceAccount", "serviceAccountName", "priority", "preemptionPolicy"),
    "Service": ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"),
    "Namespace": ("finalizers",),
}


class StoreReads(Protocol):
    """What every part of the simulated cluster that reads and patches objects uses of :class:`Store`
    (the garbage collector, the gang schedulers, the kubelet); each part's own protocol adds the rest."""

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None: ...

    def list(
        self, resource: str, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[dict], str]: ...

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> dict: ...


class Store:
    """The simulator's storage and write pipeline. See the module docstring for the contract."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        self.config = config or StoreConfig()
        self.clock = clock
        self.registry = registry or Registry()
        self.resource_version = 0
        self._buckets: dict[str, _Bucket] = {}
        self._listeners: list[Listener] = []
        self._sinks: list[Callable[[Event], None]] = []
        self._rv_waiters: list[tuple[int, asyncio.Future]] = []
        self._next_service_ip = 1
        self._pending_cleanup: set[tuple[str, str]] = set()  # ("ns"|"crd", name)
        self._in_cleanup = False
        self._label_cache: dict[str, Any] = {}
        self._field_cache: dict[tuple[str, str], Any] = {}
        self._ownership_schemas: dict[int, tuple[ResourceType, dict]] = {}
        for name in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(
                "namespaces",
                None,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                field_manager="kube-apiserver",
            )

    # ------------------------------------------------------------------ subscriptions

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(event_type, resource, old, new)`` after every committed change; returns unsubscribe."""
        self._listeners.append(fn)

        def unsubscribe() -> None:
            if fn in self._listeners:
                self._listeners.remove(fn)

        return unsubscribe

    def add_event_sink(self, fn: Callable[[Event], None]) -> Callable[[], None]:
        """Like add_listener but receives the :class:`Event` (the watch hub uses it to share bytes)."""
        self._sinks.append(fn)

        def unsubscribe() -> None:
            if fn in self._sinks:
                self._sinks.remove(fn)

        return unsubscribe

    async def wait_for_resource_version(self, rv: int, timeout: float) -> bool:
        """Wait until the global RV reaches ``rv``; False after ``timeout`` seconds."""
        if self.resource_version >= rv:
            return True
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        entry = (rv, fut)
        self._rv_waiters.append(entry)
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            if entry in self._rv_waiters:
                self._rv_waiters.remove(entry)

    # ------------------------------------------------------------------ type lookup

    def resource_type(self, resource: str) -> ResourceType:
        rt = self.registry.get(resource)
        if rt is None:
            raise errors.page_not_found()
        return rt

    def _bucket(self, rt: ResourceType) -> _Bucket:
        bucket = self._buckets.get(rt.qualified)
        if bucket is None:
            bucket = self._buckets[rt.qualified] = _Bucket(rt, self.resource_version)
        elif bucket.rt is not rt:  # a CRD update re-registers its type; objects stay
            bucket.normalized = _still_normalized(bucket.normalized, rt.schema) if bucket.objects else rt.schema
            bucket.rt = rt
        return bucket

    def _ns_key(self, rt: ResourceType, namespace: str | None) -> str:
        if rt.namespaced:
            if not namespace:
                raise errors.bad_request(
                    "the server could not find the requested resource: namespace is required "
                    f"for namespaced resource {rt.qualified}"
                )
            return namespace
        return ""

    # ------------------------------------------------------------------ reads

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None:
        """The stored object (do not mutate it), or None."""
        rt = self.resource_type(resource)
        bucket = self._buckets.get(rt.qualified)
        if bucket is None:
            return None
        return bucket.objects.get(((namespace or "") if rt.namespaced else "", name))

    def get_or_404(self, resource: str, namespace: str | None, name: str) -> dict:
        obj = self.get(resource, namespace, name)
        if obj is None:
            rt = self.resource_type(resource)
            raise errors.not_found(rt.plural, name, rt.group)
        return obj

    def list(
        self, resource: str, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[dict], str]:
        """Current objects matching the selectors, sorted by (namespace, name), and the list RV."""
        result = self.list_ex(resource, namespace, label_selector, field_selector)
        return result.items, result.resource_version

    def parse_selectors(self, rt: ResourceType, label_selector: str, field_selector: str):
        """Parsed (label, field) selectors or None for empty ones; 400 on syntax errors. Cached."""
        from tfjob_sim import selectors

        label = None
        if label_selector:
            label = self._label_cache.get(label_selector)
            if label is None:
                label = selectors.parse_label_selector(label_selector)
                if len(self._label_cache) > 1024:
                    self._label_cache.clear()
                self._label_cache[label_selector] = label
            if label.is_empty():
                label = None
        fsel = None
        if field_selector:
            cache_key = (rt.qualified, field_selector)
            fsel = self._field_cache.get(cache_key)
            if fsel is None:
                fsel = selectors.parse_field_selector(field_selector, rt.supported_fields, rt.qualified)
                if len(self._field_cache) > 1024:
                    self._field_cache.clear()
                self._field_cache[cache_key] = fsel
            if fsel.is_empty():
                fsel = None
        return label, fsel

    def list_ex(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
    ) -> ListResult:
        """A list with the full RV/limit/continue semantics of kube-apiserver (resourceVersion and
        resourceVersionMatch, pages of ``limit`` with a ``continue`` token that expires with compaction).

        The caller (HTTP) handles "not older than" an RV in the future (it waits, then 504) because
        waiting is asynchronous; here such an RV raises the 504 immediately.
        """
        rt = self.resource_type(resource)
        bucket = self._bucket(rt)
        ns = namespace if rt.namespaced else None
        label, fsel = self.parse_selectors(rt, label_selector, field_selector)
        rv_text = resource_version or ""
        current = self.resource_version

        start_after: tuple[str, str] | None = None
        at_rv: int | None = None  # None = current state
        if continue_token:
            at_rv, start_after = self._decode_continue(continue_token)
            if at_rv < bucket.compacted_rv:
                fresh = self._encode_continue(current, start_after)
                raise errors.expired(
                    "The provided continue parameter is too old to display a consistent list result. You can "
                    "start a new list without the continue parameter, or use the continue token in this response "
                    "to retrieve the remainder of the results. Continuing with the provided token results in an "
                    "inconsistent list - objects that were created, modified, or deleted between the time the "
                    "first chunk was returned and now may show up in the list.",
                    metadata={"continue": fresh},
                )
        else:
            requested = parse_rv(rv_text) if rv_text else None
            exact = resource_version_match == "Exact" or (
                not resource_version_match and limit > 0 and requested not in (None, 0)
            )
            if requested is not None and requested > current:
                raise rv_too_large(requested, current)
            if exact and requested is not None:
                if requested < bucket.compacted_rv:
                    raise errors.expired("The resourceVersion for the provided list is too old.")
                at_rv = requested
            if requested == 0 and not resource_version_match:
                limit = 0  # RV=0 lists are served from the cache and ignore limit (client-go relies on it).
        list_rv = at_rv if at_rv is not None else current

        keys_iter = self._iter_state(bucket, ns, at_rv, start_after)
        items: list[dict] = []
        last_key = None
        more = False
        for key, obj in keys_iter:
            if label is not None and not label.matches((obj.get("metadata") or {}).get("labels")):
                continue
            if fsel is not None and not fsel.matches(rt.fields_of(obj)):
                continue
            if limit and len(items) >= limit:
                more = True
                break
            items.append(obj)
            last_key = key
        token = ""
        remaining = None
        if more and last_key is not None:
            token = self._encode_continue(list_rv, last_key)
            if label is None and fsel is None and at_rv is None:
                keys = bucket.sorted_keys()
                end = bisect.bisect_left(keys, (ns, "\U0010ffff")) if ns is not None else len(keys)
                remaining = end - bisect.bisect_right(keys, last_key)
        return ListResult(items, str(list_rv), token, remaining)

    def _iter_state(
        self, bucket: _Bucket, ns: str | None, at_rv: int | None, start_after: tuple[str, str] | None
    ) -> Iterator[tuple[tuple[str, str], dict]]:
        """(key, object) of the resource's state at ``at_rv`` (None = now), sorted, after ``start_after``."""
        keys = bucket.sorted_keys()
        lo = 0
        if ns is not None:
            lo = bisect.bisect_left(keys, (ns, ""))
        if start_after is not None:
            lo = max(lo, bisect.bisect_right(keys, start_after))
        hi = bisect.bisect_left(keys, (ns, "\U0010ffff")) if ns is not None else len(keys)
        objects = bucket.objects
        if at_rv is None or at_rv >= self.resource_version:
            for i in range(lo, hi):
                key = keys[i]
                yield key, objects[key]
            return
        overrides = self._overrides_since(bucket, at_rv)
        extra = sorted(
            k
            for k, v in overrides.items()
            if v is not None
            and k not in objects
            and (ns is None or k[0] == ns)
            and (start_after is None or k > start_after)
        )
        merged = heapq.merge((keys[i] for i in range(lo, hi)), extra)
        for key in merged:
            if key in overrides:
                obj = overrides[key]
                if obj is not None:
                    yield key, obj
            else:
                yield key, objects[key]

    def _overrides_since(self, bucket: _Bucket, rv: int) -> dict[tuple[str, str], dict | None]:
        """key -> state at ``rv`` (None = absent) for every key changed after ``rv``."""
        overrides: dict[tuple[str, str], dict | None] = {}
        start = bisect.bisect_right(bucket.history_rvs, rv)
        for i in range(len(bucket.history) - 1, start - 1, -1):
            ev = bucket.history[i]
            obj: Any = ev.old if ev.old is not None else ev.new  # one of the two is always set
            meta = obj.get("metadata") or {}
            overrides[(meta.get("namespace", "") if bucket.rt.namespaced else "", meta.get("name", ""))] = ev.old
        return overrides

    def _encode_continue(self, rv: int, last_key: tuple[str, str]) -> str:
        start = (f"{last_key[0]}/{last_key[1]}" if last_key[0] else last_key[1]) + "\x00"
        raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start, "ns": last_key[0]})
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _decode_continue(self, token: str) -> tuple[int, tuple[str, str]]:
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            data = orjson.loads(raw)
            if data.get("v") != "meta.k8s.io/v1":
                raise ValueError(f"incorrect encoded start resourceVersion (version {data.get('v')})")
            rv = int(data["rv"])
            start = str(data["start"])
            ns = str(data.get("ns", ""))
            if not start.endswith("\x00"):
                raise ValueError("invalid start key")
            start = start[:-1]
            name = start[len(ns) + 1 :] if ns else start
            return rv, (ns, name)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise errors.bad_request(f"continue key is not valid: {exc}") from exc

    # ------------------------------------------------------------------ commit machinery

    def _commit(
        self, bucket: _Bucket, type_: str, key: tuple[str, str], old: dict | None, new: dict | None, rv: int
    ) -> Event:
        if new is None:
            bucket.remove(key)
        else:
            bucket.put(key, new)
        now = self.clock()
        event = Event(rv, type_, bucket.rt.qualified, old, new, now)
        bucket.history.append(event)
        bucket.history_rvs.append(rv)
        self._trim_history(bucket, now)
        if self._rv_waiters:
            for waiter_rv, fut in list(self._rv_waiters):
                if waiter_rv <= rv and not fut.done():
                    fut.set_result(True)
        if type_ == "DELETED" and bucket.rt.qualified == CRD_RESOURCE and old is not None:
            self._after_crd_removed(old)
        for sink in list(self._sinks):
            try:
                sink(event)
            except Exception:  # a broken sink must not break the write path; it is a bug to fix
                log.exception("event sink failed for %s %s", type_, bucket.rt.qualified)
        for listener in list(self._listeners):
            try:
                listener(type_, bucket.rt.qualified, old, new)
            except Exception:
                log.exception("store listener failed for %s %s", type_, bucket.rt.qualified)
        if type_ == "DELETED":
            self._after_delete(bucket.rt, old)
        return event

    def _trim_history(self, bucket: _Bucket, now: float) -> None:
        history = bucket.history
        max_events = self.config.history_max_events
        min_time = now - self.config.history_max_age
        while history and (len(history) > max_events or history[0].time < min_time):
            ev = history.popleft()
            bucket.history_rvs.popleft()
            bucket.compacted_rv = ev.rv

    def compact(self) -> int:
        """Drop all history (the watch cache and etcd compacted up to now): older resumes get 410."""
        for bucket in self._buckets.values():
            bucket.history.clear()
            bucket.history_rvs.clear()
            bucket.compacted_rv = self.resource_version
        return self.resource_version

    def history_since(self, resource: str, rv: int) -> builtins.list[Event] | None:
        """Events of ``resource`` with RV > ``rv``; None if ``rv`` is older than retained history."""
        rt = self.resource_type(resource)
        bucket = self._bucket(rt)
        if rv < bucket.compacted_rv:
            return None
        start = bisect.bisect_right(bucket.history_rvs, rv)
        return [bucket.history[i] for i in range(start, len(bucket.history))]

    def oldest_resumable_rv(self, resource: str) -> int:
        return self._bucket(self.resource_type(resource)).compacted_rv

    def snapshot(self, resource: str, namespace: str | None) -> builtins.list[dict]:
        """Current objects (unfiltered by selectors) for synthetic watch ADDEDs."""
        rt = self.resource_type(resource)
        bucket = self._bucket(rt)
        ns = namespace if rt.namespaced else None
        return [obj for _key, obj in self._iter_state(bucket, ns, None, None)]

    def _next_rv(self) -> int:
        self.resource_version += 1
        return self.resource_version

    # ------------------------------------------------------------------ shared checks

    def _check_kind(
        self,
        rt: ResourceType,
        obj: Any,
        *,
        require: bool,
        expected_kind: str | None = None,
        expected_api_version: str | None = None,
    ) -> None:
        if not isinstance(obj, dict):
            raise errors.bad_request(
                f"the object provided is unrecognized (must be of type {rt.kind}): expected a JSON object"
            )
        kind = expected_kind or rt.kind
        api_version = expected_api_version or rt.api_version
        body_kind = obj.get("kind")
        body_av = obj.get("apiVersion")
        if require and not body_kind:
            raise errors.bad_request(f"Object 'Kind' is missing in '{orjson.dumps(obj).decode()[:200]}'")
        if require and not body_av:
            raise errors.bad_request(f"Object 'apiVersion' is missing in '{orjson.dumps(obj).decode()[:200]}'")
        if body_av and body_av != api_version:
            allowed: tuple[str, ...] = (api_version,)
            if expected_api_version is None and rt.served_versions:
                allowed = tuple(f"{rt.group}/{v}" for v in rt.served_versions)
            if body_av not in allowed:
                raise errors.bad_request(
                    f"the API version in the data ({body_av}) does not match the expected API version ({api_version})"
                )
        if body_kind and body_kind != kind:
            raise errors.bad_request(
                f"the kind in the data ({body_kind}) does not match the expected kind "
                f'({kind}): {kind} in version "{api_version.rpartition("/")[2]}" cannot be '
                f"handled as a {body_kind}"
            )
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise errors.bad_request(
                f'{kind} in version "{rt.version}" cannot be handled as a {kind}: '
                "json: cannot unmarshal into Go struct field .metadata of type v1.ObjectMeta"
            )
        if expected_kind is None:
            self._check_structs(rt, obj)

    @staticmethod
    def _check_structs(rt: ResourceType, obj: dict) -> None:
        # A built-in's spec and status are Go structs: anything but an object (or null) cannot be decoded.
        if rt.custom:
            return
        for key in ("spec", "status"):
            value = obj.get(key)
            if value is not None and not isinstance(value, dict) and key in (rt.top_level_fields or ()):
                json_type = {str: "string", list: "array", bool: "bool"}.get(type(value), "number")
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: json: cannot '
                    f"unmarshal {json_type} into Go struct field {rt.kind}.{key} of type "
                    f"{rt.version}.{rt.kind}{key.capitalize()}"
                )

    def _unknown_fields(self, rt: ResourceType, obj: dict) -> builtins.list[str]:
        """Paths of fields a built-in's Go types would drop (top level and metadata); removes them.

        A custom resource with a schema gets none here: ``schema.prune()`` owns all of its unknown
        fields, ``metadata.*`` included (and nested ones such as ownerReferences[i].x), so each
        path is reported exactly once.
        """
        unknown: list[str] = []
        if rt.custom and rt.schema is not None:
            return unknown
        if rt.top_level_fields is not None:
            for key in list(obj):
                if key not in ("apiVersion", "kind", "metadata") and key not in rt.top_level_fields:
                    unknown.append(key)
                    del obj[key]
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            for key in list(meta):
                if key not in OBJECT_META_FIELDS:
                    unknown.append(f"metadata.{key}")
                    del meta[key]
        return unknown

    def _apply_field_validation(
        self, rt: ResourceType, obj: dict, unknown: builtins.list[str], opts: WriteOptions, warnings: builtins.list[str]
    ) -> None:
        if not unknown or opts.field_validation == "Ignore":
            return
        texts = [f'unknown field "{path}"' for path in unknown]
        if opts.field_validation == "Strict":
            raise errors.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                "strict decoding error: " + ", ".join(texts)
            )
        warnings.extend(texts)

    def _schema_pass(
        self, rt: ResourceType, obj: dict, old: dict | None, opts: WriteOptions, warnings: builtins.list[str]
    ) -> None:
        """Unknown-field handling, pruning, defaulting and validation of the object's type."""
        unknown = self._unknown_fields(rt, obj)
        if rt.custom and rt.schema is not None:
            unknown += rt.schema.prune(obj)
        self._apply_field_validation(rt, obj, unknown, opts, warnings)
        if rt.custom and rt.schema is not None:
            rt.schema.apply_defaults(obj)

    def _validate(self, rt: ResourceType, obj: dict, old: dict | None, status_only: bool = False) -> None:
        meta = obj["metadata"]
        causes = validate_object_meta(rt, meta)
        causes += validate(rt, obj)
        if old is not None:
            causes += validate_update(rt, obj, old)
        if rt.custom and rt.schema is not None:
            causes += rt.schema.validate(obj, old, status_only=status_only)
        if rt.qualified == CRD_RESOURCE:
            from tfjob_sim import schema

            causes += schema.validate_crd(obj)
        if causes:
            raise errors.invalid(rt.kind, meta.get("name", ""), causes, rt.group)

    def _allocate_service_ip(self) -> str:
        n = self._next_service_ip
        self._next_service_ip += 1
        return f"10.96.{(n >> 8) & 255}.{n & 255}"

    def _check_namespace(self, rt: ResourceType, ns: str, name: str) -> None:
        if not rt.namespaced:
            return
        ns_obj = self.get("namespaces", None, ns)
        if ns_obj is None:
            raise errors.not_found("namespaces", ns)
        if (ns_obj.get("metadata") or {}).get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{rt.qualified} "{name}" is forbidden: unable to create new content in namespace {ns} '
                "because it is being terminated",
                {
                    "name": name,
                    **({"group": rt.group} if rt.group else {}),
                    "kind": rt.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )

    # ------------------------------------------------------------------ field ownership

    def _ownership_schema(self, rt: ResourceType) -> dict:
        cached = self._ownership_schemas.get(id(rt))
        if cached is not None and cached[0] is rt:
            return cached[1]
        crd_schema = rt.schema.schema if rt.custom and rt.schema is not None else None
        schema = fieldmanager.root_schema(rt.kind, rt.custom, crd_schema)
        self._ownership_schemas[id(rt)] = (rt, schema)
        return schema

    @staticmethod
    def _body_managed_fields(meta: dict, current: Any) -> Any:
        """The managedFields a write starts from, decided the way the apiserver's field manager does:
        the body's list when it sets a valid one (clients may edit ownership); ``[]`` or ``[{}]``
        reset ownership (None); absent, null or invalid fall back to the stored list, so clients
        unaware of the field never wipe it by accident."""
        sent = meta.get("managedFields")
        if sent is None or sent is current or sent == current:
            return current
        if fieldmanager.is_reset(sent):
            return None
        if fieldmanager.validate_entries(sent):
            return current
        # Stored the way the apiserver stores any list it accepts: decoded and encoded again.
        return fieldmanager.encode_entries(fieldmanager.decode_entries(sent))

    @staticmethod
    def _set_entries(meta: dict, entries: Any) -> None:
        if entries:
            meta["managedFields"] = entries
        else:
            meta.pop("managedFields", None)

    @staticmethod
    def _ownership_view(rt: ResourceType, obj: dict, subresource: str) -> dict:
        # What a write can own: a main-resource write never owns status on kinds that have a status
        # endpoint (the apiserver resets those fields), whatever PrepareForCreate put there.
        if subresource or not rt.status_subresource or "status" not in obj:
            return obj
        view = dict(obj)
        del view["status"]
        return view

    def _own_created(
        self,
        rt: ResourceType,
        obj: dict,
        opts: WriteOptions,
        now: str,
        apply_config: dict | None,
        submitted_spec: set[str],
    ) -> None:
        meta = obj["metadata"]
        base = self._body_managed_fields(meta, None)
        schema = self._ownership_schema(rt)
        view = self._ownership_view(rt, obj, "")
        if "serviceAccountName" in submitted_spec:
            submitted_spec = submitted_spec | {"serviceAccount"}  # conversion copies it before the manager
        server_set = (
            [k for k in _SET_AFTER_FIELD_MANAGER.get(rt.kind, ()) if k not in submitted_spec] if not rt.custom else []
        )
        if server_set and isinstance(view.get("spec"), dict):
            # Admission plugins and IP allocation run after the field manager: nobody owns what they set.
            view = {**view, "spec": {k: v for k, v in view["spec"].items() if k not in server_set}}
        zero = fieldmanager.zero_object(rt.kind, rt.custom)
        api_version = obj["apiVersion"]
        if apply_config is not None:
            entries = fieldmanager.apply_ownership(
                schema, zero, apply_config, view, base, opts.manager, "", api_version, opts.force, now
            )
        else:
            entries = fieldmanager.update_ownership(schema, zero, view, base, opts.manager, "", api_version, now)
        self._set_entries(meta, entries)

    def _own_updated(
        self,
        rt: ResourceType,
        existing: dict,
        obj: dict,
        opts: WriteOptions,
        subresource: str,
        apply_config: dict | None,
    ) -> None:
        meta = obj["metadata"]
        current = existing["metadata"].get("managedFields")
        # Through a subresource the stored list is the start whatever the body says.
        base = current if subresource else self._body_managed_fields(meta, current)
        if not opts.track_ownership or (not base and apply_config is None):
            # An object without ownership records stays without them under updates (the apiserver
            # starts tracking on create or on the first apply only).
            self._set_entries(meta, base)
            return
        schema = self._ownership_schema(rt)
        before = self._ownership_view(rt, existing, subresource)
        after = self._ownership_view(rt, obj, subresource)
        now = rfc3339(self.clock())
        api_version = obj.get("apiVersion") or rt.api_version
        if apply_config is not None:
            if not base:  # the first apply: whatever is there is owned by "before-first-apply"
                zero = fieldmanager.zero_object(rt.kind, rt.custom)
                base = fieldmanager.update_ownership(
                    schema, zero, before, None, fieldmanager.BEFORE_FIRST_APPLY, subresource, api_version, now
                )
            # Only the fields the apply may write can go: through /status the rest is shared with the
            # stored object; through the main resource status is not the applier's.
            if subresource == "status":
                prunable: tuple[str, ...] | None = ("f:status",)
            elif rt.status_subresource:
                prunable = tuple("f:" + k for k in obj if k != "status")
            else:
                prunable = None
            try:
                entries = fieldmanager.apply_ownership(
                    schema,
                    before,
                    apply_config,
                    after,
                    base,
                    opts.manager,
                    subresource,
                    api_version,
                    opts.force,
                    now,
                    prunable,
                )
            except fieldmanager.FieldConflict as conflict:
                raise ApiError(409, "Conflict", conflict.message, {"causes": conflict.causes}) from None
            if after is not obj:  # a top-level field the apply dropped went from the view only
                for key in [k for k in obj if k not in after and k != "status"]:
                    del obj[key]
            # The apiserver's structured-merge manager defaults the object it built: a defaulted field
            # the applier stopped owning (a port's protocol, a Service's type after the client-side
            # apply migration) comes back with its default, owned by no one.
            if rt.custom:
                if rt.schema is not None:
                    rt.schema.apply_defaults(obj)
            else:
                apply_defaults(rt, obj)
            if _same_ignoring_time(entries, current):
                entries = current  # re-applying the same configuration is a no-op, time included
        else:
            entries = fieldmanager.update_ownership(
                schema, before, after, base, opts.manager, subresource, api_version, now
            )
        self._set_entries(meta, entries)

    # ------------------------------------------------------------------ create

    def create(self, resource: str, namespace: str | None, obj: dict, *, field_manager: str | None = None) -> dict:
        """POST semantics. Returns the stored object."""
        return self.create_ex(resource, namespace, obj, WriteOptions(field_manager=field_manager)).obj

    def create_ex(
        self,
        resource: str,
        namespace: str | None,
        obj: dict,
        opts: WriteOptions | None = None,
        *,
        owned: bool = False,
        require_kind: bool = False,
        apply_config: dict | None = None,
    ) -> WriteResult:
        """Create with options. ``owned`` = the caller hands over ``obj`` (no defensive copy);
        ``apply_config``: the create is a server-side apply of that configuration."""
        opts = opts or WriteOptions()
        rt = self.resource_type(resource)
        self._check_kind(rt, obj, require=require_kind)
        if "create" not in rt.verbs:
            raise errors.method_not_allowed("create", rt.plural)
        obj = obj if owned else deep_copy(obj)
        obj["apiVersion"] = rt.api_version if not rt.custom else obj.get("apiVersion") or rt.api_version
        obj["kind"] = rt.kind
        meta: Any = obj.get("metadata")  # the request's JSON
        if meta is None:
            meta = obj["metadata"] = {}
        warnings: list[str] = []
        ns = self._ns_key(rt, namespace)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.internal("resourceVersion should not be set on objects to be created")
        for server_set in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(server_set, None)
        if rt.custom and rt.status_subresource:
            obj.pop("status", None)
        self._schema_pass(rt, obj, None, opts, warnings)
        submitted_spec = obj.get("spec")
        submitted_spec = set(submitted_spec) if isinstance(submitted_spec, dict) else set()
        prepare_for_create(rt, obj, self._allocate_service_ip)
        name = meta.get("name") or ""
        generate = meta.get("generateName") or ""
        if not name and not generate:
            raise errors.invalid(
                rt.kind, "", [required_value("metadata.name", "name or generateName is required")], rt.group
            )
        bucket = self._bucket(rt)
        if not name:
            for _attempt in range(self.config.generate_name_attempts):
                candidate = generate + "".join(random.choices(_GENERATE_ALPHABET, k=5))
                if (ns, candidate) not in bucket.objects:
                    name = candidate
                    break
            else:
                err = errors.already_exists(rt.plural, generate, rt.group)
                err.message += ", the server was not able to generate a unique name for the object"
                err.retry_after = 1
                raise err
            meta["name"] = name
        if rt.kind == "Namespace" and not rt.group:
            labels = meta.setdefault("labels", {})
            if isinstance(labels, dict):
                labels["kubernetes.io/metadata.name"] = name
        name_causes = validate_name(rt, name)
        if name_causes:
            raise errors.invalid(rt.kind, name, name_causes, rt.group)
        if generate and not meta.get("generateName"):
            meta["generateName"] = generate
        now = self.clock()
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = rfc3339(now)
        if rt.custom or rt.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.qualified == CRD_RESOURCE:
            self._prepare_crd(obj)
        self._own_created(rt, obj, opts, rfc3339(now), apply_config, submitted_spec)
        self._validate(rt, obj, None)
        self._check_namespace(rt, ns, name)
        key = (ns, name)
        if key in bucket.objects:
            raise errors.already_exists(rt.plural, name, rt.group)
        if opts.dry_run:
            return WriteResult(obj, 201, warnings)
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self._commit(bucket, "ADDED", key, None, obj, rv)
        if rt.qualified == CRD_RESOURCE:
            self._serve_crd(obj)
        return WriteResult(obj, 201, warnings)

    def put_internal(self, resource: str, obj: dict) -> dict:
        """Create or replace ``obj`` as an in-process component built it: the caller guarantees it is
        exactly what the API write would store (defaults, validity, ``metadata.managedFields``). Only
        the store's own fields are set: ``uid`` and ``creationTimestamp`` (kept on replace) and the
        resourceVersion; a create needs an active namespace. For high-volume writers whose objects have
        a fixed shape (the simulated components' Events, see tfjob_sim.events): the full write
        pipeline costs several times more. The store takes ``obj`` over (no copy)."""
        rt = self.resource_type(resource)
        meta = obj["metadata"]
        ns = self._ns_key(rt, meta.get("namespace"))
        key = (ns, meta["name"])
        bucket = self._bucket(rt)
        if rt.custom:
            bucket.normalized = None  # the caller's object skipped pruning and defaulting
        existing = bucket.objects.get(key)
        if existing is None:
            self._check_namespace(rt, ns, meta["name"])
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = rfc3339(self.clock())
        else:
            meta["uid"] = existing["metadata"]["uid"]
            meta["creationTimestamp"] = existing["metadata"]["creationTimestamp"]
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self._commit(bucket, "ADDED" if existing is None else "MODIFIED", key, existing, obj, rv)
        return obj

    # ------------------------------------------------------------------ update

    def update(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        obj: dict,
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> dict:
        """PUT semantics (``subresource`` "status" or "scale"). Returns the stored object (or the Scale)."""
        return self.update_ex(
            resource, namespace, name, obj, subresource, WriteOptions(field_manager=field_manager)
        ).obj

    def update_ex(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        obj: dict,
        subresource: str | None = None,
        opts: WriteOptions | None = None,
        *,
        owned: bool = False,
        require_kind: bool = False,
    ) -> WriteResult:
        opts = opts or WriteOptions()
        rt = self.resource_type(resource)
        if subresource == "scale":
            return self._update_scale(rt, namespace, name, obj, opts, require_kind=require_kind)
        self._check_subresource(rt, subresource)
        self._check_kind(rt, obj, require=require_kind)
        if "update" not in rt.verbs:
            raise errors.method_not_allowed("update", rt.plural)
        obj = obj if owned else deep_copy(obj)
        ns = self._ns_key(rt, namespace)
        meta: Any = obj.get("metadata")  # the request's JSON
        if meta is None:
            meta = obj["metadata"] = {}
        body_name = meta.get("name")
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
        bucket = self._bucket(rt)
        existing = bucket.objects.get((ns, name))
        if existing is None:
            if rt.create_on_update and subresource is None:
                meta["name"] = name
                meta.pop("resourceVersion", None)
                return self.create_ex(resource, namespace, obj, opts, owned=True)
            raise errors.not_found(rt.plural, name, rt.group)
        return self._update_existing(rt, bucket, existing, obj, subresource, opts, precondition_required=True)

    def _check_subresource(self, rt: ResourceType, subresource: str | None) -> None:
        if subresource is None:
            return
        if subresource not in rt.subresources:
            raise errors.page_not_found()

    def _update_existing(
        self,
        rt: ResourceType,
        bucket: _Bucket,
        existing: dict,
        obj: dict,
        subresource: str | None,
        opts: WriteOptions,
        *,
        precondition_required: bool,
        apply_config: dict | None = None,
        ownership_subresource: str | None = None,
    ) -> WriteResult:
        """The shared update pipeline for PUT and PATCH (``obj`` is owned and will be stored).

        ``apply_config``: the write is a server-side apply of that configuration;
        ``ownership_subresource``: the subresource the write came through when it is not ``subresource``
        (a scale write updates the main resource but is recorded as "scale")."""
        warnings: list[str] = []
        old_meta = existing["metadata"]
        name = old_meta["name"]
        meta = obj.setdefault("metadata", {})
        body_rv = meta.get("resourceVersion")
        if body_rv:
            if str(body_rv) != old_meta.get("resourceVersion"):
                raise errors.conflict(rt.plural, name, rt.group)
        elif precondition_required and not rt.unconditional_update and subresource is None:
            raise errors.invalid(
                rt.qualified,
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "metadata.resourceVersion",
                        "message": "Invalid value: 0x0: must be specified for an update",
                    }
                ],
            )
        obj["apiVersion"] = existing.get("apiVersion", rt.api_version)
        obj["kind"] = rt.kind
        if subresource == "status":
            # Only status changes through /status: everything else is the stored object's.
            # ``obj`` (and so its status) is owned. The rest is the stored object's: a built-in's is
            # shared, with a fresh metadata dict for the RV; a custom resource's is copied when pruning
            # and defaulting below must walk the whole object (the stored one must not change).
            new = dict(existing)
            crd_schema = rt.schema if rt.custom else None
            # The rest of a custom resource is already pruned and defaulted by this schema when the
            # bucket says so (both are idempotent and work field by field): then only the status is
            # normalized and the rest is shared, not copied (the TFJob status writes of a burst).
            normalized = crd_schema is not None and bucket.normalized is crd_schema
            if crd_schema is not None:
                new.pop("status", None)  # the status goes last
                if normalized:
                    new["metadata"] = dict(existing["metadata"])
                else:
                    new = deep_copy(new)
                if "status" in obj:
                    new["status"] = obj["status"]
            else:
                if "status" in obj:
                    new["status"] = obj["status"]
                else:
                    new.pop("status", None)
                new["metadata"] = dict(existing["metadata"])
            obj = new
            meta = obj["metadata"]
            if crd_schema is not None:
                unknown = crd_schema.prune_status(obj) if normalized else crd_schema.prune(obj)
                self._apply_field_validation(rt, obj, unknown, opts, warnings)
                if normalized:
                    crd_schema.apply_status_defaults(obj)
                else:
                    crd_schema.apply_defaults(obj)
        else:
            meta["name"] = name
            if rt.namespaced:
                meta["namespace"] = old_meta.get("namespace")
            else:
                meta.pop("namespace", None)
            body_uid = meta.get("uid")
            if body_uid and body_uid != old_meta.get("uid"):
                raise errors.invalid(
                    rt.kind, name, [invalid_value("metadata.uid", body_uid, "field is immutable")], rt.group
                )
            for kept in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if kept in old_meta:
                    meta[kept] = old_meta[kept]
                else:
                    meta.pop(kept, None)
            meta.pop("selfLink", None)
            if rt.status_subresource:
                if "status" in existing:
                    obj["status"] = deep_copy(existing["status"])
                else:
                    obj.pop("status", None)
            self._schema_pass(rt, obj, existing, opts, warnings)
            apply_defaults(rt, obj)
            if rt.kind == "Secret" and not rt.group and "stringData" in obj:
                string_data = obj.pop("stringData")
                if isinstance(string_data, dict):
                    data = obj.setdefault("data", {}) or {}
                    obj["data"] = data
                    for key, value in string_data.items():
                        data[key] = base64.b64encode(str(value).encode()).decode()
            if rt.kind == "Namespace" and not rt.group:
                obj["spec"] = (
                    deep_copy(existing.get("spec") or {"finalizers": ["kubernetes"]})
                    if "spec" not in obj
                    else obj["spec"]
                )
                labels = meta.setdefault("labels", {})
                if isinstance(labels, dict):
                    labels["kubernetes.io/metadata.name"] = name
            if old_meta.get("deletionTimestamp"):
                added = [f for f in (meta.get("finalizers") or []) if f not in (old_meta.get("finalizers") or [])]
                if added:
                    raise errors.invalid(
                        rt.kind,
                        name,
                        [
                            forbidden(
                                "metadata.finalizers",
                                "no new finalizers can be added if the object is being deleted, found new finalizers "
                                "[]string{" + ", ".join(f'"{f}"' for f in added) + "}",
                            )
                        ],
                        rt.group,
                    )
            if rt.qualified == CRD_RESOURCE:
                obj["status"] = deep_copy(existing.get("status") or {})
                self._prepare_crd(obj)
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        self._own_updated(rt, existing, obj, opts, ownership_subresource or subresource or "", apply_config)
        self._validate(rt, obj, existing, status_only=subresource == "status")
        if subresource is None and (rt.custom or rt.tracks_generation) and old_meta.get("generation") is not None:
            if self._spec_changed(rt, existing, obj):
                meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if canonical(obj) == canonical(existing):
            return WriteResult(existing, 200, warnings)
        if opts.dry_run:
            return WriteResult(obj, 200, warnings)
        key = (meta.get("namespace", "") if rt.namespaced else "", name)
        rv = self._next_rv()
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds"):
            # The last finalizer is gone from an object being deleted: the update deletes it.
            meta["resourceVersion"] = str(rv)
            self._commit(bucket, "DELETED", key, existing, None, rv)
            return WriteResult(obj, 200, warnings)
        meta["resourceVersion"] = str(rv)
        self._commit(bucket, "MODIFIED", key, existing, obj, rv)
        if rt.qualified == CRD_RESOURCE:
            self._serve_crd(obj)
        return WriteResult(obj, 200, warnings)

    @staticmethod
    def _spec_changed(rt: ResourceType, old: dict, new: dict) -> bool:
        if rt.custom:
            skip = {"metadata", "status"} if rt.status_subresource else {"metadata"}
            keys = (set(old) | set(new)) - skip - {"apiVersion", "kind"}
            return any(old.get(k) != new.get(k) for k in keys)
        return old.get("spec") != new.get("spec")

    # ------------------------------------------------------------------ patch

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict:
        """PATCH semantics; ``patch_type`` "json" | "merge" | "strategic" | "apply"."""
        return self.patch_ex(
            resource,
            namespace,
            name,
            patch_type,
            patch,
            subresource,
            WriteOptions(field_manager=field_manager, force=force),
        ).obj

    def patch_ex(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str | None = None,
        opts: WriteOptions | None = None,
    ) -> WriteResult:
        from tfjob_sim import patch as patch_mod

        opts = opts or WriteOptions()
        rt = self.resource_type(resource)
        if "patch" not in rt.verbs:
            raise errors.method_not_allowed("patch", rt.plural)
        if patch_type == "strategic" and rt.custom:
            raise errors.unsupported_media_type(
                ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
            )
        if patch_type not in ("json", "merge", "strategic", "apply"):
            raise errors.unsupported_media_type(
                ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
                + ([] if rt.custom else ["application/strategic-merge-patch+json"])
            )
        if patch_type == "apply" and not opts.field_manager:
            raise errors.invalid(
                "PatchOptions", "", [required_value("fieldManager", "is required for apply patch")], "meta.k8s.io"
            )
        if (
            patch_type == "apply"
            and isinstance(patch, dict)
            and isinstance(patch.get("metadata"), dict)
            and patch["metadata"].get("managedFields") is not None
        ):
            raise errors.bad_request("metadata.managedFields must be nil")
        ns = self._ns_key(rt, namespace)
        if subresource == "scale":
            current = self._scale_of(rt, self.get_or_404(resource, ns or None, name))
            patched = self._apply_patch(patch_mod, patch_type, current, patch, "Scale")
            return self._update_scale(rt, ns or None, name, patched, opts)
        self._check_subresource(rt, subresource)
        bucket = self._bucket(rt)
        existing = bucket.objects.get((ns, name))
        if existing is None:
            if patch_type == "apply" and subresource is None:
                if not isinstance(patch, dict):
                    raise errors.bad_request("the apply patch must be an object")
                body = deep_copy(patch)
                if body.get("metadata") is None:
                    body["metadata"] = {}
                elif not isinstance(body["metadata"], dict):
                    raise errors.bad_request("the apply patch's metadata must be an object")
                body["metadata"]["name"] = name
                self._check_kind(rt, body, require=True)
                return self.create_ex(
                    resource,
                    namespace,
                    body,
                    opts,
                    owned=True,
                    apply_config=self._applied_config(rt, patch, subresource),
                )
            raise errors.not_found(rt.plural, name, rt.group)
        if patch_type == "apply":
            if not isinstance(patch, dict):
                raise errors.bad_request("the apply patch must be an object")
            self._check_kind(rt, patch, require=True)
            body_name = (patch.get("metadata") or {}).get("name")
            if body_name and body_name != name:
                raise errors.bad_request(
                    f"the name of the object ({body_name}) does not match the name on the URL ({name})"
                )
        if patch_type == "merge" and subresource == "status" and not rt.custom:
            # A built-in's status write keeps only the patched status and writes into nothing of it
            # (the rest is the stored object's, see _update_existing): no copy of the untouched
            # parts. The kubelet's status writes of every pod start come this way.
            patched = patch_mod.merge_patch(existing, patch, share=True)
        else:
            # No copy: the patch engines' results share no mutable structure with their inputs
            # (sim/tfjob_sim/patch.py contract), so the update pipeline may write into them.
            patched = self._apply_patch(
                patch_mod,
                patch_type,
                existing,
                patch,
                rt.kind,
                strip_status=rt.status_subresource and subresource != "status",
            )
        if patched.get("kind") not in (None, rt.kind) or not isinstance(patched.get("metadata", {}), dict):
            raise errors.bad_request(f"the kind in the patched object ({patched.get('kind')}) does not match {rt.kind}")
        self._check_structs(rt, patched)
        return self._update_existing(
            rt,
            bucket,
            existing,
            patched,
            subresource,
            opts,
            precondition_required=False,
            apply_config=self._applied_config(rt, patch, subresource) if patch_type == "apply" else None,
        )

    @staticmethod
    def _applied_config(rt: ResourceType, patch: dict, subresource: str | None) -> dict:
        # The fields an apply sets: through the main resource a kind with a status endpoint ignores
        # the configuration's status; through /status only status counts.
        if subresource == "status":
            return {"status": patch["status"]} if "status" in patch else {}
        if rt.status_subresource:
            return {k: v for k, v in patch.items() if k != "status"}
        return patch

    @staticmethod
    def _apply_patch(
        patch_mod: Any, patch_type: str, doc: dict, patch: Any, kind: str, *, strip_status: bool = True
    ) -> Any:
        # The decoded body goes straight to the engines: they own the real server's answers to bad
        # bodies (null JSON patch = no-op, array merge patch = 422, ...), so no pre-checks here.
        if patch_type == "json":
            return patch_mod.json_patch(doc, patch)
        if patch_type == "merge":
            return patch_mod.merge_patch(doc, patch)
        if patch_type == "strategic":
            return patch_mod.strategic_merge_patch(doc, patch, kind)
        # Server-side apply: the applied configuration is merged over the live object (strategic
        # merge for built-ins so keyed lists merge, JSON merge for custom resources); ownership,
        # conflicts and the removal of fields a manager stopped applying are the field manager's
        # (``_own_updated``). The engine is chosen by kind, up front: its error is the answer.
        applied = dict(patch)
        if strip_status:
            applied.pop("status", None)
        if kind in patch_mod.STRATEGIC_MERGE_KINDS:
            return patch_mod.strategic_merge_patch(doc, applied, kind)
        return patch_mod.merge_patch(doc, applied)

    # ------------------------------------------------------------------ scale subresource

    def _scale_spec(self, rt: ResourceType) -> ScaleSpec:
        if rt.scale is None or "scale" not in rt.subresources:
            raise errors.page_not_found()
        return rt.scale

    def _scale_of(self, rt: ResourceType, obj: dict) -> dict:
        spec = self._scale_spec(rt)
        meta = obj["metadata"]
        replicas = _get_path(obj, spec.spec_replicas_path)
        if replicas is _MISSING:
            raise errors.internal(f'the spec replicas field "{spec.spec_replicas_path}" does not exist')
        status_replicas = _get_path(obj, spec.status_replicas_path)
        status: dict[str, Any] = {"replicas": status_replicas if isinstance(status_replicas, int) else 0}
        if spec.label_selector_path:
            selector = _get_path(obj, spec.label_selector_path)
            if isinstance(selector, str):
                status["selector"] = selector
        elif spec.selector_of is not None:
            text = spec.selector_of(obj)
            if text:
                status["selector"] = text
        scale_meta = {"name": meta["name"]}
        if rt.namespaced:
            scale_meta["namespace"] = meta.get("namespace")
        scale_meta.update(
            uid=meta.get("uid"),
            resourceVersion=meta.get("resourceVersion"),
            creationTimestamp=meta.get("creationTimestamp"),
        )
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": scale_meta,
            "spec": {"replicas": replicas},
            "status": status,
        }

    def get_scale(self, resource: str, namespace: str | None, name: str) -> dict:
        rt = self.resource_type(resource)
        self._scale_spec(rt)
        return self._scale_of(rt, self.get_or_404(resource, namespace, name))

    def _update_scale(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        scale: Any,
        opts: WriteOptions,
        *,
        require_kind: bool = False,
    ) -> WriteResult:
        spec = self._scale_spec(rt)
        if not isinstance(scale, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type Scale)")
        self._check_kind(rt, scale, require=require_kind, expected_kind="Scale", expected_api_version="autoscaling/v1")
        existing = self.get_or_404(rt.qualified, namespace, name)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(
                "Scale",
                name,
                [invalid_value("spec.replicas", replicas, "must be greater than or equal to 0")],
                "autoscaling",
            )
        new = deep_copy(existing)
        _set_path(new, spec.spec_replicas_path, replicas)
        scale_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if scale_rv:
            new["metadata"]["resourceVersion"] = scale_rv
        else:
            new["metadata"].pop("resourceVersion", None)
        bucket = self._bucket(rt)
        result = self._update_existing(
            rt, bucket, existing, new, None, opts, precondition_required=False, ownership_subresource="scale"
        )
        return WriteResult(self._scale_of(rt, result.obj), 200, result.warnings)

    # ------------------------------------------------------------------ delete

    def delete(self, resource: str, namespace: str | None, name: str, options: dict | None = None) -> dict:
        """DELETE semantics; returns what the HTTP DELETE answers (the object or a success Status)."""
        return self.delete_ex(resource, namespace, name, options).obj

    def delete_ex(
        self, resource: str, namespace: str | None, name: str, options: dict | None = None, dry_run: bool = False
    ) -> WriteResult:
        rt = self.resource_type(resource)
        if "delete" not in rt.verbs:
            raise errors.method_not_allowed("delete", rt.plural)
        options = options or {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be an object")
        ns = self._ns_key(rt, namespace)
        bucket = self._bucket(rt)
        key = (ns, name)
        existing = bucket.objects.get(key)
        if existing is None:
            raise errors.not_found(rt.plural, name, rt.group)
        meta = existing["metadata"]
        if rt.kind == "Namespace" and not rt.group and name in PROTECTED_NAMESPACES:
            raise ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                {"name": name, "kind": "namespaces"},
            )
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise errors.conflict(
                rt.plural,
                name,
                rt.group,
                f"the UID in the precondition ({pre['uid']}) does not match the UID in record "
                f"({meta.get('uid')}). The object might have been deleted and then recreated",
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != meta.get("resourceVersion"):
            raise errors.conflict(
                rt.plural,
                name,
                rt.group,
                f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not "
                f"match the ResourceVersion in record ({meta.get('resourceVersion')}). The object "
                "might have been modified",
            )
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy not in (None, "Orphan", "Foreground", "Background"):
            raise errors.invalid(
                "DeleteOptions",
                "",
                [
                    {
                        "reason": "FieldValueNotSupported",
                        "field": "propagationPolicy",
                        "message": f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                        '"Orphan", "nil"',
                    }
                ],
                "meta.k8s.io",
            )
        grace = options.get("gracePeriodSeconds")
        if grace is not None:
            if isinstance(grace, bool) or not isinstance(grace, (int, float)):
                raise errors.bad_request(f"invalid gracePeriodSeconds: {grace!r}")
            grace = int(grace)
            if grace < 0:
                grace = 1
        graceful_type = rt.kind == "Pod" and not rt.group
        if graceful_type:
            spec = existing.get("spec") or {}
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30) or 0)
            phase = (existing.get("status") or {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        else:
            grace = 0

        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan":
            finalizers = [f for f in finalizers if f != "foregroundDeletion"]
            if "orphan" not in finalizers:
                finalizers.append("orphan")
        elif policy == "Foreground":
            finalizers = [f for f in finalizers if f != "orphan"]
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        elif policy == "Background":
            finalizers = [f for f in finalizers if f not in GC_FINALIZERS]
        if rt.qualified == CRD_RESOURCE and CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CRD_CLEANUP_FINALIZER)
        namespace_cleanup = rt.kind == "Namespace" and not rt.group

        now = self.clock()
        if meta.get("deletionTimestamp"):
            # Already terminating: only a shorter grace period (pods) or new GC finalizers change it.
            new_meta = dict(meta)
            changed = False
            if finalizers != list(meta.get("finalizers") or []):
                new_meta["finalizers"] = finalizers
                changed = True
            current_grace = meta.get("deletionGracePeriodSeconds")
            if graceful_type and current_grace is not None and grace < current_grace:
                new_meta["deletionGracePeriodSeconds"] = grace
                new_meta["deletionTimestamp"] = rfc3339(now + grace)
                changed = True
            if graceful_type and grace == 0 and not new_meta.get("finalizers"):
                return self._remove(rt, bucket, key, existing, dry_run)
            if not changed:
                return WriteResult(existing, 200)
            return self._mark_deleting(rt, bucket, key, existing, new_meta, dry_run)

        if finalizers or grace > 0 or namespace_cleanup:
            new_meta = dict(meta)
            new_meta["deletionTimestamp"] = rfc3339(now + grace)
            new_meta["deletionGracePeriodSeconds"] = grace
            if finalizers:
                new_meta["finalizers"] = finalizers
            else:
                new_meta.pop("finalizers", None)
            if new_meta.get("generation"):
                new_meta["generation"] = int(new_meta["generation"]) + 1
            result = self._mark_deleting(rt, bucket, key, existing, new_meta, dry_run)
            if not dry_run:
                if namespace_cleanup:
                    self._start_namespace_cleanup(name)
                elif rt.qualified == CRD_RESOURCE:
                    self._start_crd_cleanup(name)
                current = bucket.objects.get(key)
                if current is not None:
                    result.obj = current
            return result
        return self._remove(rt, bucket, key, existing, dry_run)

    def _mark_deleting(
        self, rt: ResourceType, bucket: _Bucket, key: tuple[str, str], existing: dict, new_meta: dict, dry_run: bool
    ) -> WriteResult:
        new = dict(existing)
        new["metadata"] = new_meta
        if rt.kind == "Namespace" and not rt.group:
            new["status"] = dict(existing.get("status") or {}, phase="Terminating")
        if rt.qualified == CRD_RESOURCE:
            status = dict(existing.get("status") or {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
            conditions.append(
                {
                    "type": "Terminating",
                    "status": "True",
                    "reason": "InstanceDeletionPending",
                    "message": "CustomResourceDefinition marked for deletion; deleting instances",
                    "lastTransitionTime": rfc3339(self.clock()),
                }
            )
            status["conditions"] = conditions
            new["status"] = status
        if dry_run:
            return WriteResult(new, 200)
        rv = self._next_rv()
        new_meta["resourceVersion"] = str(rv)
        self._commit(bucket, "MODIFIED", key, existing, new, rv)
        if rt.qualified == CRD_RESOURCE:
            self._serve_crd(new)
        return WriteResult(new, 200)

    def _remove(
        self, rt: ResourceType, bucket: _Bucket, key: tuple[str, str], existing: dict, dry_run: bool
    ) -> WriteResult:
        meta = existing["metadata"]
        if dry_run:
            return WriteResult(existing if rt.return_deleted_object else self._success_status(rt, meta), 200)
        rv = self._next_rv()
        event = self._commit(bucket, "DELETED", key, existing, None, rv)
        if rt.return_deleted_object:
            return WriteResult(event.object, 200)
        return WriteResult(self._success_status(rt, meta), 200)

    @staticmethod
    def _success_status(rt: ResourceType, meta: dict) -> dict:
        details: dict[str, Any] = {"name": meta.get("name")}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = meta.get("uid")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def delete_collection(
        self,
        resource: str,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
        options: dict | None = None,
        dry_run: bool = False,
    ) -> dict:
        """DELETE on a collection: deletes every match; answers the list of what was deleted."""
        rt = self.resource_type(resource)
        if "deletecollection" not in rt.verbs:
            raise errors.method_not_allowed("deletecollection", rt.plural)
        items, _rv = self.list(resource, namespace, label_selector, field_selector)
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                result = self.delete_ex(resource, meta.get("namespace"), meta["name"], options, dry_run)
            except ApiError as exc:
                if exc.code == 404:  # deleted meanwhile (e.g. by a cascade of an earlier item)
                    continue
                raise
            deleted.append(result.obj if result.obj.get("kind") != "Status" else obj)
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": deleted,
        }

    # ------------------------------------------------------------------ pods: eviction, binding

    def evict(self, namespace: str, name: str, eviction: dict) -> dict:
        """POST pods/{name}/eviction (policy/v1): graceful delete, no PDBs modelled. Returns a Status."""
        rt = self.resource_type("pods")
        if not isinstance(eviction, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type Eviction)")
        if eviction.get("kind") not in (None, "Eviction"):
            raise errors.bad_request(
                f"the kind in the data ({eviction.get('kind')}) does not match the expected kind (Eviction)"
            )
        body_name = (eviction.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        pod = self.get_or_404("pods", namespace, name)
        options = eviction.get("deleteOptions") or {}
        status = pod.get("status") or {}
        if not pod["metadata"].get("deletionTimestamp") and status.get("phase") not in ("Succeeded", "Failed"):
            # Like the eviction REST handler since PodDisruptionConditions (GA in 1.31): say why the pod is
            # going before deleting it, so controllers can tell an eviction from a plain delete.
            conditions = set_condition(
                status.get("conditions") or [],
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                },
                rfc3339(self.clock()),
            )
            self.update_ex(
                rt.qualified,
                namespace,
                name,
                {**pod, "status": {**status, "conditions": conditions}},
                "status",
                WriteOptions(track_ownership=False),
            )
        self.delete_ex(rt.qualified, namespace, name, options)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def bind(self, namespace: str, name: str, binding: dict) -> dict:
        """POST pods/{name}/binding, in one write like the real registry's assignPod.

        Sets spec.nodeName (once), merges the Binding's annotations into the pod's and sets the
        PodScheduled condition to True (lastTransitionTime kept if it already was True). Returns a
        Status.
        """
        if not isinstance(binding, dict) or not isinstance(binding.get("target"), dict):
            raise errors.invalid("Binding", name, [required_value("target")])
        node = binding["target"].get("name")
        if not node:
            raise errors.invalid("Binding", name, [required_value("target.name")])
        rt = self.resource_type("pods")
        pod = self.get_or_404("pods", namespace, name)
        if (pod.get("spec") or {}).get("nodeName"):
            raise errors.conflict(
                "pods/binding", name, "", f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
            )
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            raise errors.conflict(
                "pods/binding", name, "", f"pod {name} is being deleted, cannot be assigned to a host"
            )
        new = dict(pod)
        new["spec"] = dict(pod.get("spec") or {}, nodeName=node)
        status = dict(pod.get("status") or {})
        status["conditions"] = set_condition(
            status.get("conditions") or [], {"type": "PodScheduled", "status": "True"}, rfc3339(self.clock())
        )
        new["status"] = status
        meta = dict(pod["metadata"])
        annotations = (binding.get("metadata") or {}).get("annotations")
        if isinstance(annotations, dict) and annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        new["metadata"] = meta
        self._validate(rt, new, pod)
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self._commit(self._bucket(rt), "MODIFIED", (namespace, name), pod, new, rv)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # ------------------------------------------------------------------ cascades: namespaces and CRDs

    def _start_namespace_cleanup(self, ns: str) -> None:
        self._pending_cleanup.add(("ns", ns))
        self._run_cleanup()

    def _start_crd_cleanup(self, crd_name: str) -> None:
        self._pending_cleanup.add(("crd", crd_name))
        self._run_cleanup()

    def _after_delete(self, rt: ResourceType, old: dict | None) -> None:
        if not self._pending_cleanup or old is None:
            return
        self._run_cleanup()

    def _run_cleanup(self) -> None:
        """Delete the contents of terminating namespaces / CRDs; finish them once empty."""
        if self._in_cleanup:
            return
        self._in_cleanup = True
        try:
            progress = True
            while progress and self._pending_cleanup:
                progress = False
                for kind, name in sorted(self._pending_cleanup):
                    if kind == "ns":
                        done = self._cleanup_namespace(name)
                    else:
                        done = self._cleanup_crd(name)
                    if done:
                        self._pending_cleanup.discard((kind, name))
                        progress = True
        finally:
            self._in_cleanup = False

    def _namespace_has_content(self, ns: str) -> bool:
        for rt in self.registry.all():
            bucket = self._buckets.get(rt.qualified)
            if rt.namespaced and bucket is not None:
                keys = bucket.sorted_keys()
                if bisect.bisect_left(keys, (ns, "\U0010ffff")) != bisect.bisect_left(keys, (ns, "")):
                    return True
        return False

    def _cleanup_namespace(self, ns: str) -> bool:
        """Delete everything in a terminating namespace; remove the namespace once it is empty."""
        if self.get("namespaces", None, ns) is None:
            return True
        for rt in self.registry.all():
            bucket = self._buckets.get(rt.qualified)
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
                    self.delete_ex(rt.qualified, ns, key[1], {"propagationPolicy": "Background"})
                except ApiError as exc:
                    if exc.code != 404:  # already gone through a cascade is fine; anything else is logged
                        log.warning("namespace %s cleanup: deleting %s/%s failed: %s", ns, rt.qualified, key[1], exc)
        if self._namespace_has_content(ns):
            return False  # terminating pods / finalizers left: re-checked on every deletion
        ns_obj = self.get("namespaces", None, ns)
        if ns_obj is None:
            return True
        bucket = self._bucket(self.resource_type("namespaces"))
        if ns_obj["metadata"].get("finalizers"):
            if (ns_obj.get("spec") or {}).get("finalizers"):
                new = dict(ns_obj)
                new["spec"] = dict(ns_obj.get("spec") or {}, finalizers=[])
                rv = self._next_rv()
                new["metadata"] = dict(ns_obj["metadata"], resourceVersion=str(rv))
                self._commit(bucket, "MODIFIED", ("", ns), ns_obj, new, rv)
            return True  # whoever owns the metadata finalizers removes them; that update deletes it
        rv = self._next_rv()
        self._commit(bucket, "DELETED", ("", ns), ns_obj, None, rv)
        return True

    def _cleanup_crd(self, crd_name: str) -> bool:
        crd = self.get(CRD_RESOURCE, None, crd_name)
        if crd is None:
            return True
        spec = crd.get("spec") or {}
        qualified = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        bucket = self._buckets.get(qualified)
        if bucket is not None and bucket.objects:
            for (ns, name), obj in list(bucket.objects.items()):
                if not obj["metadata"].get("deletionTimestamp"):
                    try:
                        self.delete_ex(qualified, ns or None, name, {"propagationPolicy": "Background"})
                    except ApiError as exc:
                        if exc.code != 404:
                            log.warning("CRD %s cleanup: deleting %s failed: %s", crd_name, name, exc)
            if bucket.objects:
                return False
        crd = self.get(CRD_RESOURCE, None, crd_name)
        if crd is None:
            return True
        finalizers = [f for f in crd["metadata"].get("finalizers") or [] if f != CRD_CLEANUP_FINALIZER]
        crd_bucket = self._bucket(self.resource_type(CRD_RESOURCE))
        rv = self._next_rv()
        if finalizers:
            new = dict(crd)
            new["metadata"] = dict(crd["metadata"], finalizers=finalizers, resourceVersion=str(rv))
            self._commit(crd_bucket, "MODIFIED", ("", crd_name), crd, new, rv)
            return True
        self._commit(crd_bucket, "DELETED", ("", crd_name), crd, None, rv)
        return True

    # ------------------------------------------------------------------ CRDs: serving custom resources

    def _prepare_crd(self, crd: dict) -> None:
        """Server-set status of an accepted CRD (names accepted, established, stored versions)."""
        spec = crd.get("spec") or {}
        names = dict(spec.get("names") or {})
        if names.get("kind") and not names.get("listKind"):
            names["listKind"] = names["kind"] + "List"
        if names.get("plural") and not names.get("singular") and names.get("kind"):
            names["singular"] = names["kind"].lower()
        if isinstance(spec, dict) and spec.get("names"):
            spec["names"] = dict(spec["names"])
            spec["names"].setdefault("listKind", names.get("listKind"))
            spec["names"].setdefault("singular", names.get("singular"))
        versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
        storage = [v.get("name") for v in versions if v.get("storage")]
        status = dict(crd.get("status") or {})
        stored = list(status.get("storedVersions") or [])
        for name in storage:
            if name not in stored:
                stored.append(name)
        when = rfc3339(self.clock())
        old_conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}

        def condition(type_: str, reason: str, message: str) -> dict:
            old = old_conditions.get(type_)
            if old and old.get("status") == "True" and old.get("reason") == reason:
                return old
            return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": when}

        conditions = [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ]
        if "Terminating" in old_conditions:
            conditions.append(old_conditions["Terminating"])
        status.update(conditions=conditions, acceptedNames=names, storedVersions=stored)
        crd["status"] = status

    def _serve_crd(self, crd: dict) -> None:
        """(Re)register the resource type a CRD defines; called after every committed CRD change."""
        from tfjob_sim.schema import StructuralSchema

        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group", "")
        versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
        served = tuple(v["name"] for v in versions if v.get("served"))
        storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
        if not served or not storage:
            self.registry.remove(f"{names.get('plural')}.{group}")
            return
        subresources = storage.get("subresources") or {}
        scale = None
        if isinstance(subresources.get("scale"), dict):
            sc = subresources["scale"]
            scale = ScaleSpec(
                sc.get("specReplicasPath", ".spec.replicas"),
                sc.get("statusReplicasPath", ".status.replicas"),
                sc.get("labelSelectorPath"),
            )
        schema_doc = (storage.get("schema") or {}).get("openAPIV3Schema")
        terminating = bool(crd["metadata"].get("deletionTimestamp"))
        verbs = (
            ("delete", "deletecollection", "get", "list", "watch")
            if terminating
            else ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
        )
        rt = ResourceType(
            group=group,
            version=storage["name"],
            plural=names.get("plural", ""),
            singular=names.get("singular") or names.get("kind", "").lower(),
            kind=names.get("kind", ""),
            namespaced=spec.get("scope") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            verbs=verbs,
            subresources=tuple(s for s in ("status", "scale") if isinstance(subresources.get(s), dict)),
            status_subresource=isinstance(subresources.get("status"), dict),
            unconditional_update=False,
            custom=True,
            scale=scale,
            schema=StructuralSchema(schema_doc) if isinstance(schema_doc, dict) else None,
            printer_columns=list(storage.get("additionalPrinterColumns") or []),
            crd_name=crd["metadata"]["name"],
            served_versions=served,
        )
        existing = self.registry.get(rt.qualified)
        if existing is not None:
            self.registry.remove(rt.qualified)
        self.registry.add(rt)

    def _after_crd_removed(self, crd: dict) -> None:
        spec = crd.get("spec") or {}
        qualified = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        self.registry.remove(qualified)
        self._buckets.pop(qualified, None)


_MISSING = object()


def _still_normalized(before: Any, schema: Any) -> Any:
    """The bucket's ``normalized`` mark after its CRD was re-registered with ``schema``: kept when the
    schema is the same document (another field of the CRD changed), lost otherwise."""
    if before is None or schema is None:
        return None
    if before.schema == schema.schema and before.server_minor == schema.server_minor:
        return schema
    return None


def _same_ignoring_time(entries: list[dict], current: Any) -> bool:
    def untimed(entry: dict) -> dict:
        return {k: v for k, v in entry.items() if k != "time"}

    # ``current`` was validated or produced by the field manager: a list of entry dicts.
    return type(current) is list and [untimed(e) for e in entries] == [untimed(e) for e in current]


def _get_path(obj: dict, path: str) -> Any:
    cur: Any = obj
    for part in path.lstrip(".").split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _set_path(obj: dict, path: str, value: Any) -> None:
    parts = path.lstrip(".").split(".")
    cur = obj
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = {}
        cur = nxt
    cur[parts[-1]] = value


def parse_rv(text: str) -> int:
    """An RV query parameter: a non-negative decimal integer, else 400 like the real server."""
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {text!r}".replace("'", '"')) from None
    if value < 0:
        raise errors.bad_request(f'invalid resource version: "{text}"')
    return value


def rv_too_large(requested: int, current: int) -> ApiError:
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        retry_after=1,
    )
