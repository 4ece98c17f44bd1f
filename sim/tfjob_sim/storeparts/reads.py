"""Reads: get and list with kube-apiserver's resourceVersion, selector, limit and continue semantics.

Why this is its own part: lists at an exact resourceVersion and paged lists read the resource's state
of the past, rebuilt from the current objects and the change history (:mod:`tfjob_sim.storeparts.feed`);
the HTTP layer, the watch hub and every simulated component read through here.

Contract: returned objects are the store's own (never mutate them); ``list`` and ``list_ex`` sort by
(namespace, name); bad selectors, RVs and continue tokens raise the real server's errors.
"""

from __future__ import annotations

import base64
import bisect
import builtins
import heapq
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import orjson

from tfjob_sim import errors
from tfjob_sim.resources import Registry, ResourceType
from tfjob_sim.storeparts.feed import ChangeFeed
from tfjob_sim.storeparts.revisions import Bucket
from tfjob_sim.storeparts.values import ListResult, StoreConfig, parse_rv, rv_too_large


class StoreReads(Protocol):
    """What every part of the simulated cluster that reads and patches objects uses of :class:`tfjob_sim.store.Store`
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


class Reads(ChangeFeed):
    """get, list and the watch hub's reads (parsed selectors, snapshots)."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(config, clock, registry)
        self._label_cache: dict[str, Any] = {}
        self._field_cache: dict[tuple[str, str], Any] = {}

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None:
        """The stored object (do not mutate it), or None."""
        rt = self.resource_type(resource)
        bucket = self._buckets.get(rt.qualified)
        if bucket is None:
            return None
        return bucket.objects.get(((namespace or "") if rt.namespaced else "", name))

    def get_or_404(self, resource: str, namespace: str | None, name: str) -> dict:
        """The stored object (do not mutate it); the real 404 when there is none."""
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
        self, bucket: Bucket, ns: str | None, at_rv: int | None, start_after: tuple[str, str] | None
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

    def _overrides_since(self, bucket: Bucket, rv: int) -> dict[tuple[str, str], dict | None]:
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

    def snapshot(self, resource: str, namespace: str | None) -> builtins.list[dict]:
        """Current objects (unfiltered by selectors) for synthetic watch ADDEDs."""
        rt = self.resource_type(resource)
        bucket = self._bucket(rt)
        ns = namespace if rt.namespaced else None
        return [obj for _key, obj in self._iter_state(bucket, ns, None, None)]
