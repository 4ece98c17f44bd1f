"""Informer: a local, indexed, always-converging copy of one resource, with change notifications.

Why: a controller must see every change of the objects it manages without polling the apiserver, and must
recover from every way a watch fails — server timeouts, dropped connections, silently stalled streams,
410 Expired after compaction, apiserver restarts, throttling — without losing a deletion and without
hammering a sick apiserver with relists. This is client-go's Reflector + Indexer + event handlers (list,
then watch from the list's resourceVersion; relist on 410; tombstones for deletions a relist found) on raw
JSON dicts, built for speed: events are decoded by orjson in batches and applied to the cache
synchronously, with no per-event task, copy or model object.

Contract:

- ``run()`` runs until cancelled (one reflector task per namespace in a task group when several
  namespaces are watched). It only raises on programming errors; every API/transport failure is retried.
- List: paginated (``limit`` = ``page_size``, default 500), following ``continue`` until it is empty,
  always a consistent read (``resourceVersion`` unset): after an *Expired* there is no cached RV worth
  trusting, and pages keep the memory bounded. A continue token that expires mid-list restarts the list.
- The list result replaces this reflector's part of the cache. Compared with the cache: objects that are
  gone are delivered to ``on_delete`` as :class:`DeletedFinalStateUnknown` (first), then new ones to
  ``on_add`` and changed ones (different resourceVersion) to ``on_update``; unchanged objects are not
  re-delivered.
- Watch: from the list's RV (or the last event/bookmark RV since), ``allowWatchBookmarks=true``,
  ``timeoutSeconds`` uniform in ``watch_timeout`` (default [300, 600)). The RV is advanced by every event
  and bookmark, except synthetic initial ADDEDs (only possible if a watch had to start without an RV).
- Watch outcomes:

  ============================================  ==================================================
  clean end (server timeout / closed)           re-watch from the last RV at once, no relist
  clean end < 1 s with no event                 backoff, then re-watch (no relist)
  no byte for ``inactivity_timeout``            re-watch from the last RV at once (reason stalled)
  ERROR/HTTP 410, too-large RV                  backoff, then relist (reason expired)
  429 / 5xx / transport / undecodable line      backoff, then re-watch from the last RV (cache kept)
  any other API error (403, 404, 400, ...)      backoff, then relist
  ============================================  ==================================================

  Backoff: ``Backoff`` (0.8 s doubling to 30 s, jitter ×[1, 2), reset after 2 min without failures).
- Events whose object RV equals the cached one are ignored (nothing changed); DELETED for a key the cache
  does not have is ignored (a relist already delivered it as a tombstone).
- Relist handlers (``add_relist_handler``) learn that a list replaced a part of the cache: called as
  ``fn(namespace, generation)`` after every list (the initial one included) of the reflector watching
  ``namespace`` (``None``: all namespaces, or a cluster-scoped resource), once the per-object handlers have
  run for it. ``generation`` is that list's number (``list_generation(namespace)`` counts lists *begun*).
  Why: a watch can miss an object's whole life (created and deleted while the watch was down); no per-object
  event ever tells of it. A list is a consistent read, so any write the server acknowledged before
  ``list_generation()`` returned ``g`` is reflected in the cache once a relist handler is called with a
  generation greater than ``g``: state kept about "writes not yet seen" can be settled then instead of
  waiting for an event that will never come. Same rules as the other handlers (synchronous, must not raise).
- ``has_synced()`` is true once every reflector has applied its first list and the handlers have been
  called for it; it stays true. ``wait_for_sync()`` waits for that.
- Handlers (``add_handler``) are synchronous, called in the event loop, in event order; they must not
  block and must not mutate the objects (they are the cache's own). A handler that raises is logged with
  its traceback and the remaining handlers still run. A handler added after sync is first called with
  ``on_add`` for every cached object (client-go semantics).
- Cached objects went through ``transform`` (default :func:`default_transform`: drops managedFields and
  the last-applied annotation; ``cache.intern_transform`` / ``cache.compact_transform`` also share
  repeated strings; ``transform=lambda o: o`` disables it). Events whose RV equals the cached one are not
  transformed at all. With one of ``cache``'s transforms (they all drop managedFields), watch events are
  decoded without building ``metadata.managedFields`` at all (``controller.runtime.watchdecode``): on
  pod events, a quarter less CPU per event. List items get ``kind``/``apiVersion`` filled in so
  objects look alike whether they came from a list or a watch.
"""

from __future__ import annotations

import builtins
import gc
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import orjson
import structlog

from controller.runtime.cache import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Indexer,
    IndexFunc,
    default_transform,
    drops_managed_fields,
)
from controller.runtime.client import ApiClient, Resource
from controller.runtime.client_metrics import InformerMetrics
from controller.runtime.clock import Clock, MonotonicClock
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

__all__ = ["Backoff", "Informer", "DeletedFinalStateUnknown"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
Transform = Callable[[Obj], Obj]


@dataclass(frozen=True)
class Backoff:
    """Delay between failed list/watch attempts (client-go's reflector backoff manager).

    The n-th consecutive delay is ``min(cap, initial * factor**(n-1))`` times a random factor in
    ``[1, 1 + jitter)``, capped at ``cap``; after ``reset_after`` seconds without a failure it starts over.
    """

    initial: float = 0.8
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 1.0
    reset_after: float = 120.0

    def __post_init__(self) -> None:
        if self.initial < 0 or self.cap < 0 or self.factor < 1 or self.jitter < 0 or self.reset_after < 0:
            raise ValueError(f"invalid Backoff {self}")


class _BackoffState:
    __slots__ = ("_config", "_clock", "_current", "_quiet_since")

    def __init__(self, config: Backoff, clock: Clock) -> None:
        self._config = config
        self._clock = clock
        self._current = config.initial
        self._quiet_since: float | None = None

    def next_delay(self) -> float:
        config = self._config
        now = self._clock.now()
        if self._quiet_since is not None and now - self._quiet_since > config.reset_after:
            self._current = config.initial
        delay = min(config.cap, self._current * (1.0 + random.random() * config.jitter))
        self._current = min(config.cap, self._current * config.factor)
        # The healthy period is measured from the end of this delay.
        self._quiet_since = now + delay
        return delay

    async def sleep(self) -> float:
        delay = self.next_delay()
        await self._clock.sleep_until(self._clock.now() + delay)
        return delay


@dataclass(frozen=True, slots=True)
class _Handler:
    on_add: Callable[[Obj], None] | None
    on_update: Callable[[Obj, Obj], None] | None
    on_delete: Callable[[Obj | DeletedFinalStateUnknown], None] | None


class Informer:
    """See the module docstring. One instance per (resource, namespaces, selectors)."""

    def __init__(
        self,
        client: ApiClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        namespaces: Sequence[str] | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        registry: Any = None,
        page_size: int = 500,
        bookmark_period: float = 60.0,
        inactivity_timeout: float | None = None,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: Backoff | None = None,
        clock: Clock | None = None,
        name: str | None = None,
    ) -> None:
        if namespace is not None and namespaces is not None:
            raise ValueError("pass either namespace= or namespaces=, not both")
        if namespaces is not None:
            scopes: list[str | None] = list(dict.fromkeys(namespaces))
            if not scopes or any(not ns for ns in scopes):
                raise ValueError("namespaces= must be a non-empty list of non-empty names")
        else:
            scopes = [namespace or None]
        if not resource.namespaced and scopes != [None]:
            raise ValueError(f"{resource.qualified} is cluster-scoped: it cannot be watched per namespace")
        lo, hi = watch_timeout
        if not 1 <= lo < hi:
            raise ValueError(f"watch_timeout must be (lo, hi) with 1 <= lo < hi, got {watch_timeout!r}")
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        self.client = client
        self.resource = resource
        self.name = name or resource.qualified
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform: Transform | None = default_transform if transform is None else transform
        self.page_size = page_size
        self.bookmark_period = bookmark_period
        self.inactivity_timeout = inactivity_timeout if inactivity_timeout is not None else bookmark_period + 30.0
        self.watch_timeout = (lo, hi)
        self.backoff = backoff or Backoff()
        self.clock = clock or MonotonicClock()
        self.metrics = InformerMetrics.for_registry(registry, resource.qualified)
        self.cache = Indexer(indexers)
        self._handlers: list[_Handler] = []
        self._relist_handlers: list[Callable[[str | None, int], None]] = []
        self._synced = anyio.Event()
        self._reflectors = [_Reflector(self, ns) for ns in scopes]
        self._running = False

    # -- public API -----------------------------------------------------------------------------------

    @property
    def namespaces(self) -> list[str | None]:
        """Watched namespaces; ``[None]`` means all namespaces (or a cluster-scoped resource)."""
        return [r.namespace for r in self._reflectors]

    def add_handler(
        self,
        on_add: Callable[[Obj], None] | None = None,
        on_update: Callable[[Obj, Obj], None] | None = None,
        on_delete: Callable[[Obj | DeletedFinalStateUnknown], None] | None = None,
    ) -> Callable[[], None]:
        """Register change callbacks; returns a function that unregisters them."""
        handler = _Handler(on_add, on_update, on_delete)
        self._handlers.append(handler)
        if self._synced.is_set() and on_add is not None:
            for obj in self.cache.list():
                self._call(on_add, obj)

        def remove() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)

        return remove

    def add_relist_handler(self, fn: Callable[[str | None, int], None]) -> Callable[[], None]:
        """Call ``fn(namespace, generation)`` after every list (see the module docstring); returns a function
        that unregisters it."""
        self._relist_handlers.append(fn)

        def remove() -> None:
            if fn in self._relist_handlers:
                self._relist_handlers.remove(fn)

        return remove

    def list_generation(self, namespace: str | None = None) -> int:
        """How many lists the reflector covering ``namespace`` has begun (0 before the first).

        A write acknowledged before this returned ``g`` shows in the cache once a relist handler is called
        with a generation > ``g`` for that namespace. ``namespace`` is ignored when every namespace is
        watched by one reflector; a namespace this informer does not watch is a ValueError."""
        for reflector in self._reflectors:
            if reflector.namespace is None or reflector.namespace == namespace:
                return reflector.lists_begun
        raise ValueError(f"informer {self.name} does not watch namespace {namespace!r}")

    def has_synced(self) -> bool:
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        await self._synced.wait()

    def resource_versions(self) -> dict[str | None, str | None]:
        """The RV each reflector would resume its watch from (per namespace; ``None`` key = all)."""
        return {r.namespace: r.last_rv for r in self._reflectors}

    def get(self, key: str) -> Obj | None:
        return self.cache.get(key)

    def list(self) -> list[Obj]:
        return self.cache.list()

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        return self.cache.by_index(index_name, value)

    async def run(self) -> None:
        """List, then watch, forever (until cancelled)."""
        if self._running:
            raise RuntimeError(f"informer {self.name} is already running")
        self._running = True
        try:
            if len(self._reflectors) == 1:
                await self._reflectors[0].run()
            else:
                async with anyio.create_task_group() as tg:
                    for reflector in self._reflectors:
                        tg.start_soon(reflector.run, name=f"informer {self.name} ns={reflector.namespace}")
        finally:
            self._running = False

    # -- dispatch (used by reflectors) ----------------------------------------------------------------

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            # A handler bug must not stop the informer (the cache would freeze for every other handler);
            # it is logged loudly with its traceback instead.
            log.exception("informer event handler failed", informer=self.name, handler=getattr(fn, "__qualname__", fn))

    # The dispatchers inline the try/except of _call: they run once per event on the hot path.

    def _dispatch_add(self, obj: Obj) -> None:
        for h in self._handlers:
            fn = h.on_add
            if fn is not None:
                try:
                    fn(obj)
                except Exception:
                    log.exception("informer event handler failed", informer=self.name, handler="on_add")

    def _dispatch_update(self, old: Obj, new: Obj) -> None:
        for h in self._handlers:
            fn = h.on_update
            if fn is not None:
                try:
                    fn(old, new)
                except Exception:
                    log.exception("informer event handler failed", informer=self.name, handler="on_update")

    def _dispatch_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        for h in self._handlers:
            fn = h.on_delete
            if fn is not None:
                try:
                    fn(obj)
                except Exception:
                    log.exception("informer event handler failed", informer=self.name, handler="on_delete")

    def _dispatch_relisted(self, namespace: str | None, generation: int) -> None:
        for fn in list(self._relist_handlers):
            self._call(fn, namespace, generation)

    def _reflector_synced(self) -> None:
        if not self._synced.is_set() and all(r.synced for r in self._reflectors):
            self._synced.set()


def _rv(obj: Obj) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


class _Reflector:
    """List-and-watch loop for one namespace (or all) of one informer."""

    VERY_SHORT_WATCH = 1.0

    def __init__(self, informer: Informer, namespace: str | None) -> None:
        self.informer = informer
        self.namespace = namespace
        self.last_rv: str | None = None
        self.synced = False
        self.lists_begun = 0
        self._backoff = _BackoffState(informer.backoff, informer.clock)
        self._log = log.bind(informer=informer.name, namespace=namespace or "*")

    async def run(self) -> None:
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

        Two measured choices (benchmarks/informer_bench.py):

        - Each line is decoded right before it is applied, not the whole batch first: the object is still
          in the CPU cache when the transform and the indexer touch it (decoding 65 pods first and then
          applying them ran at a third of the speed).
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
        # Bound once per batch: attribute lookups are a measurable share of the per-event cost.
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
