"""The list-and-watch loop behind an informer: one reflector per watched namespace (or all).

Why a loop of its own: a watch fails in many ways — server timeouts, dropped connections, silently stalled
streams, 410 Expired after compaction, apiserver restarts, throttling — and each needs its own recovery
(re-watch at once, back off, or relist) so that no deletion is lost and a sick apiserver is not hammered
with relists. This is client-go's Reflector on raw JSON dicts: events are decoded by orjson in batches and
applied to the informer's cache synchronously, with no per-event task, copy or model object.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Callable, Sized
from typing import Any, Protocol

import orjson
import structlog

from controller.runtime.backoff import Backoff, BackoffTimer
from controller.runtime.cache import NAMESPACE_INDEX, DeletedFinalStateUnknown, Indexer, drops_managed_fields
from controller.runtime.client import ApiClient, Resource
from controller.runtime.client_metrics import InformerMetrics
from controller.runtime.clock import Clock
from controller.runtime.errors import (
    ApiError,
    Expired,
    Forbidden,
    ResponseDecodeError,
    ServerError,
    StreamStalled,
    TooManyRequests,
    TransportError,
    error_from_status,
    is_too_large_resource_version,
)
from controller.runtime.watchdecode import loads_without_managed_fields

__all__ = ["Reflector"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]


class _Informer(Protocol):
    """What a reflector reads and calls on the informer it feeds (:class:`controller.runtime.informer.Informer`;
    named by a protocol so that the two modules do not import each other)."""

    @property
    def client(self) -> ApiClient: ...
    @property
    def resource(self) -> Resource: ...
    @property
    def name(self) -> str: ...
    @property
    def label_selector(self) -> str | None: ...
    @property
    def field_selector(self) -> str | None: ...
    @property
    def transform(self) -> Callable[[Obj], Obj] | None: ...
    @property
    def page_size(self) -> int: ...
    @property
    def inactivity_timeout(self) -> float: ...
    @property
    def watch_timeout(self) -> tuple[int, int]: ...
    @property
    def backoff(self) -> Backoff: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def metrics(self) -> InformerMetrics: ...
    @property
    def cache(self) -> Indexer: ...
    @property
    def _handlers(self) -> Sized: ...
    def _dispatch_add(self, obj: Obj) -> None: ...
    def _dispatch_update(self, old: Obj, new: Obj) -> None: ...
    def _dispatch_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None: ...
    def _dispatch_relisted(self, namespace: str | None, generation: int) -> None: ...
    def _reflector_synced(self) -> None: ...


def _rv(obj: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


class Reflector:
    """List-and-watch loop for one namespace (or all) of one informer.

    List: paginated (``limit`` = the informer's ``page_size``), following ``continue`` until it is empty,
    always a consistent read (``resourceVersion`` unset): after an *Expired* there is no cached RV worth
    trusting, and pages keep the memory bounded. A continue token that expires mid-list restarts the list.
    The result replaces this reflector's part of the cache: objects that are gone go to ``on_delete`` as
    :class:`DeletedFinalStateUnknown` (first), new ones to ``on_add``, changed ones (another
    resourceVersion) to ``on_update``; unchanged objects are not re-delivered.

    Watch: from the list's RV (or the last event/bookmark RV since), with bookmarks, ``timeoutSeconds``
    uniform in the informer's ``watch_timeout``. Every event and bookmark advances the RV, except the
    synthetic ADDEDs of a watch started without one. Events whose RV equals the cached one are ignored;
    a DELETED for a key the cache lacks is ignored (a relist already delivered it as a tombstone).
    How each watch ends decides what comes next (back-off: the informer's
    :class:`~controller.runtime.backoff.Backoff`):

    ============================================  ==================================================
    clean end (server timeout / closed)           re-watch from the last RV at once, no relist
    clean end < 1 s with no event                 back off, then re-watch (no relist)
    no byte for ``inactivity_timeout``            re-watch from the last RV at once (reason stalled)
    ERROR/HTTP 410, too-large RV                  back off, then relist (reason expired)
    429 / 5xx / transport / undecodable line      back off, then re-watch from the last RV (cache kept)
    any other API error (403, 404, 400, ...)      back off, then relist
    ============================================  ==================================================
    """

    VERY_SHORT_WATCH = 1.0

    def __init__(self, informer: _Informer, namespace: str | None) -> None:
        self.informer = informer
        self.namespace = namespace
        self.last_rv: str | None = None
        self.synced = False
        self.lists_begun = 0
        self._backoff = BackoffTimer(informer.backoff, informer.clock)
        self._log = log.bind(informer=informer.name, namespace=namespace or "*")

    async def run(self) -> None:
        """List, then watch, until cancelled; every API and transport failure is retried as the class
        docstring says. Raises only on programming errors."""
        informer = self.informer
        metrics = informer.metrics
        need_list = True
        list_reason = "initial"
        while True:
            if need_list:
                metrics.relist(list_reason)
                try:
                    await self._list_and_replace()
                except (ApiError, TransportError, ResponseDecodeError) as exc:
                    list_reason = "expired" if self._is_expired(exc) else "error"
                    delay = await self._backoff.sleep()
                    # A 403 will not heal by itself: say so at error level (the message names the permission).
                    report = self._log.error if isinstance(exc, Forbidden) else self._log.warning
                    report(
                        "list failed; retrying", error=str(exc), error_type=type(exc).__name__, retry_in=round(delay, 3)
                    )
                    continue
                need_list = False
            try:
                restart_reason = await self._watch()
            except StreamStalled as exc:
                self._log.warning("watch stalled; reconnecting", error=str(exc), resource_version=self.last_rv)
                restart_reason = "stalled"
            except (ApiError, TransportError, ResponseDecodeError) as exc:
                if self._is_expired(exc):
                    need_list, list_reason = True, "expired"
                elif isinstance(exc, (TooManyRequests, ServerError, TransportError, ResponseDecodeError)):
                    restart_reason = "throttled" if isinstance(exc, TooManyRequests) else "error"
                else:
                    need_list, list_reason = True, "error"
                delay = await self._backoff.sleep()
                report = self._log.error if isinstance(exc, Forbidden) else self._log.info
                report(
                    "watch failed",
                    error=str(exc),
                    error_type=type(exc).__name__,
                    relist=need_list,
                    resource_version=self.last_rv,
                    retried_after=round(delay, 3),
                )
                if need_list:
                    continue
            metrics.watch_restart(restart_reason)

    @staticmethod
    def _is_expired(exc: BaseException) -> bool:
        return isinstance(exc, Expired) or is_too_large_resource_version(exc)

    # -- list -----------------------------------------------------------------------------------------

    async def _list_and_replace(self) -> None:
        informer = self.informer
        client = informer.client
        transform = informer.transform
        items: dict[str, Obj] = {}
        continue_token: str | None = None
        restarts = 0
        # Counted before the first page is requested: everything acknowledged before now is in this list.
        self.lists_begun += 1
        generation = self.lists_begun
        while True:
            try:
                page = await client.list(
                    informer.resource,
                    namespace=self.namespace,
                    label_selector=informer.label_selector,
                    field_selector=informer.field_selector,
                    limit=informer.page_size,
                    continue_=continue_token,
                )
            except Expired:
                # The continue token outlived the server's history: start a fresh consistent list.
                if continue_token is None or restarts >= 3:
                    raise
                restarts += 1
                self._log.info("continue token expired; restarting list", restarts=restarts)
                items.clear()
                continue_token = None
                continue
            kind = page.get("kind") or ""
            item_kind = kind[:-4] if kind.endswith("List") else None
            api_version = page.get("apiVersion")
            for item in page.get("items") or ():
                if item_kind and "kind" not in item:
                    item["kind"] = item_kind
                    if api_version:
                        item["apiVersion"] = api_version
                if transform is not None:
                    item = transform(item)
                key = self._key(item)
                if key is not None:
                    items[key] = item
            meta = page.get("metadata") or {}
            continue_token = meta.get("continue") or None
            if continue_token is None:
                list_rv = meta.get("resourceVersion") or None
                break
        self._replace(items)
        self.last_rv = list_rv
        informer._dispatch_relisted(self.namespace, generation)
        if not self.synced:
            self.synced = True
            informer._reflector_synced()
        informer.metrics.last_event(time.time())
        informer.metrics.cache_objects(len(informer.cache))
        self._log.info("listed", objects=len(items), resource_version=list_rv)

    def _scope_keys(self) -> list[str]:
        cache = self.informer.cache
        if self.namespace is None:
            return cache.keys()
        return cache.index_keys(NAMESPACE_INDEX, self.namespace)

    def _replace(self, items: dict[str, Obj]) -> None:
        informer = self.informer
        cache = informer.cache
        gone = [key for key in self._scope_keys() if key not in items]
        for key in gone:
            last = cache.delete(key)
            informer._dispatch_delete(DeletedFinalStateUnknown(key, last))
        if gone:
            self._log.info("deletions missed while not watching", count=len(gone))
        for key, obj in items.items():
            old = cache.get(key)
            if old is None:
                cache.put(key, obj)
                informer._dispatch_add(obj)
            elif _rv(old) != _rv(obj):
                cache.put(key, obj)
                informer._dispatch_update(old, obj)

    def _key(self, obj: Obj) -> str | None:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(meta, dict) or not name:
            self._log.warning("object without metadata.name ignored")
            return None
        ns = meta.get("namespace")
        return f"{ns}/{name}" if ns else name

    # -- watch ----------------------------------------------------------------------------------------

    async def _watch(self) -> str:
        """One watch request; returns the restart reason of a clean end, raises otherwise."""
        informer = self.informer
        lo, hi = informer.watch_timeout
        timeout_seconds = random.randrange(lo, hi)
        stream = informer.client.watch(
            informer.resource,
            namespace=self.namespace,
            label_selector=informer.label_selector,
            field_selector=informer.field_selector,
            resource_version=self.last_rv,
            timeout_seconds=timeout_seconds,
            allow_watch_bookmarks=True,
            inactivity_timeout=informer.inactivity_timeout,
        )
        # Only a watch without an RV starts with synthetic ADDEDs, whose RVs must not be resumed from.
        self._synthetic = not self.last_rv or self.last_rv == "0"
        started = time.monotonic()
        events = 0
        async with stream:
            async for lines in stream.lines():
                events += len(lines)
                self._apply_lines(lines)
        elapsed = time.monotonic() - started
        if events == 0 and elapsed < self.VERY_SHORT_WATCH:
            # A server or proxy that closes watches at once would otherwise make us spin.
            delay = await self._backoff.sleep()
            self._log.info("very short watch; backing off", elapsed=round(elapsed, 3), retried_after=round(delay, 3))
            return "short"
        return "timeout" if elapsed >= timeout_seconds - 1 else "closed"

    def _apply_lines(self, lines: list[bytes]) -> None:
        """Decode and apply one batch of event lines, with the cyclic GC paused.

        Two choices measured with benchmarks/informer_bench.py (docs/benchmarks/informer.md):

        - Each line is decoded right before it is applied, not the whole batch first: the object is still
          in the CPU cache when the transform and the indexer touch it.
        - Decoding allocates dozens of containers per event; left alone, CPython runs a young collection
          every 700 allocations and, as cached objects accumulate, full collections over the whole cache.
          Pausing the collector for this synchronous section (no await inside: no other task runs
          meanwhile) lets it run once per batch instead. A collector someone else disabled stays disabled.
        """
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            self._apply(lines)
        finally:
            if paused:
                gc.enable()

    def _apply(self, lines: list[bytes]) -> None:
        informer = self.informer
        cache = informer.cache
        transform = informer.transform
        handlers = informer._handlers
        # Watch lines are decoded without managedFields when the transform would drop them anyway. Looked up
        # per batch: a caller may replace ``transform`` after construction (with one that reads them).
        loads = loads_without_managed_fields if drops_managed_fields(transform) else orjson.loads
        # Bound once per batch: these lookups would otherwise run once per event.
        cache_get, cache_put = cache.get, cache.put
        dispatch_add, dispatch_update = informer._dispatch_add, informer._dispatch_update
        rv = self.last_rv
        synthetic = self._synthetic
        counts: dict[str, int] = {}
        error: Exception | None = None
        try:
            for line in lines:
                try:
                    event = loads(line)
                    etype = event.get("type")
                    obj = event.get("object")
                except orjson.JSONDecodeError as exc:
                    error = ResponseDecodeError(f"watch event is not valid JSON: {exc}")
                    break
                except AttributeError:
                    error = ResponseDecodeError(f"watch event is not a JSON object: {line[:80]!r}")
                    break
                counts[etype] = counts.get(etype, 0) + 1
                if type(obj) is not dict:
                    self._log.warning("watch event without object ignored", type=etype)
                    continue
                if etype == "BOOKMARK":
                    bookmark_rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if bookmark_rv:
                        rv = bookmark_rv
                    continue
                if etype == "ERROR":
                    error = error_from_status(obj)
                    break
                meta: Any = obj.get("metadata")  # raw JSON: anything; only a dict with a name passes
                try:
                    name = meta["name"]
                    ns = meta.get("namespace")
                    new_rv = meta.get("resourceVersion")
                except (TypeError, KeyError):
                    self._log.warning("watch event object without metadata.name ignored", type=etype)
                    continue
                key = f"{ns}/{name}" if ns else name
                if etype == "MODIFIED" or etype == "ADDED":
                    old = cache_get(key)
                    if old is None:
                        if transform is not None:
                            obj = transform(obj)
                        cache_put(key, obj)
                        if handlers:
                            dispatch_add(obj)
                    elif old["metadata"].get("resourceVersion") != new_rv:
                        if transform is not None:
                            obj = transform(obj)
                        cache_put(key, obj)
                        if handlers:
                            dispatch_update(old, obj)
                    old = None  # free the replaced object now, while its memory is still warm
                    if synthetic and etype == "ADDED":
                        continue
                elif etype == "DELETED":
                    old = cache.delete(key)
                    if old is not None and handlers:
                        if transform is not None:
                            obj = transform(obj)
                        informer._dispatch_delete(obj)
                    old = None
                else:
                    self._log.warning("unknown watch event type ignored", type=etype)
                    continue
                synthetic = False
                if new_rv:
                    rv = new_rv
        finally:
            self.last_rv = rv
            self._synthetic = synthetic
            metrics = informer.metrics
            for etype, count in counts.items():
                metrics.events(str(etype), count)
            metrics.last_event(time.time())
            metrics.cache_objects(len(cache))
        if error is not None:
            raise error
