"""Informer: a local, indexed, always-converging copy of one resource, with change notifications.

Why: a controller must see every change of the objects it manages without polling the apiserver and
without losing a deletion, whatever happens to its watches. This is client-go's shared informer (Indexer
+ event handlers) on raw JSON dicts; the list-and-watch loop that feeds it is
:class:`controller.runtime.reflector.Reflector`, one per watched namespace.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from controller.runtime.backoff import Backoff, BackoffTimer
from controller.runtime.cache import DeletedFinalStateUnknown, Indexer, IndexFunc, default_transform
from controller.runtime.client import ApiClient, Resource
from controller.runtime.client_metrics import InformerMetrics
from controller.runtime.clock import Clock, MonotonicClock
from controller.runtime.reflector import Reflector

__all__ = ["Backoff", "Informer", "DeletedFinalStateUnknown"]

log = structlog.get_logger(__name__)

Obj = dict[str, Any]
Transform = Callable[[Obj], Obj]

# The reflector's back-off timer under the name it had when it lived here.
_BackoffState = BackoffTimer


@dataclass(frozen=True, slots=True)
class _Handler:
    on_add: Callable[[Obj], None] | None
    on_update: Callable[[Obj, Obj], None] | None
    on_delete: Callable[[Obj | DeletedFinalStateUnknown], None] | None


class Informer:
    """One resource's cache and change handlers, for one set of namespaces and selectors.

    Cached objects went through ``transform`` (default :func:`~controller.runtime.cache.default_transform`:
    drops managedFields and the last-applied annotation; ``cache.intern_transform`` /
    ``cache.compact_transform`` also share repeated strings; ``transform=lambda o: o`` disables it). With
    one of ``cache``'s transforms, watch events are decoded without building ``metadata.managedFields`` at
    all (:mod:`controller.runtime.watchdecode`). List items get ``kind``/``apiVersion`` filled in so objects
    look alike whether they came from a list or a watch. Failures of lists and watches are retried by the
    reflectors (:class:`~controller.runtime.reflector.Reflector` says how), with ``backoff`` between them.
    """

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
        self._reflectors = [Reflector(self, ns) for ns in scopes]
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
        """Register change callbacks; returns a function that unregisters them. Handlers run synchronously
        in the event loop, in event order; they must not block, raise or mutate the (cached) objects — one
        that raises is logged. Added after sync, ``on_add`` is first called for every cached object."""
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
        """Call ``fn(namespace, generation)`` after every list (the first included) of the reflector watching
        ``namespace`` (None: all), once the per-object handlers ran for it; returns an unregister function.
        Why: a watch can miss an object's whole life, and only a (consistent) list settles that."""
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
        """True once every reflector has applied its first list and the handlers ran for it; stays true."""
        return self._synced.is_set()

    async def wait_for_sync(self) -> None:
        """Return once :meth:`has_synced` is true (at once if it already is)."""
        await self._synced.wait()

    def resource_versions(self) -> dict[str | None, str | None]:
        """The RV each reflector would resume its watch from (per namespace; ``None`` key = all)."""
        return {r.namespace: r.last_rv for r in self._reflectors}

    def get(self, key: str) -> Obj | None:
        """The cached object at ``key`` (``namespace/name``, or ``name`` when cluster-scoped), else None.
        Shared with the cache: do not mutate it."""
        return self.cache.get(key)

    def list(self) -> list[Obj]:
        """Every cached object (a new list of the cache's own objects: do not mutate them)."""
        return self.cache.list()

    def by_index(self, index_name: str, value: str) -> builtins.list[Obj]:
        """The cached objects whose ``index_name`` index yields ``value``; KeyError for an unknown index."""
        return self.cache.by_index(index_name, value)

    async def run(self) -> None:
        """List, then watch, until cancelled (one reflector task per namespace when several are watched).
        Every API and transport failure is retried; RuntimeError if this informer is already running."""
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
