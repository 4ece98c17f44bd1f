"""Committing changes: each resource's bounded change history and the subscribers of every commit.

Why this is its own part: a commit is the one place where a change becomes visible, so the order of
what happens there is the store's consistency contract: the object is stored, the event joins the
resource's history (what watch resumes, exact-RV lists and continue tokens read), waiters of
:meth:`ChangeFeed.wait_for_resource_version` wake, then the event sinks (the watch hub,
:mod:`tfjob_sim.watch`, which fans events out to the watch streams) and the listeners run, then the
store's own follow-ups of a deletion (namespace and CRD cleanup).

Contract: ``_commit`` is the only writer of buckets; a sink or listener that raises is logged and the
write goes on. History is trimmed to ``StoreConfig.history_max_events`` / ``history_max_age``;
``compacted_rv`` of a bucket says from which RV on it is complete.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import time
from collections.abc import Callable

from tfjob_sim.resources import Registry
from tfjob_sim.storeparts.revisions import Bucket, Revisions
from tfjob_sim.storeparts.values import CRD_RESOURCE, Event, Listener, StoreConfig

log = logging.getLogger("tfjob_sim.store")


class ChangeFeed(Revisions):
    """Commits changes, keeps their history and tells the subscribers."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(config, clock, registry)
        self._listeners: list[Listener] = []
        self._sinks: list[Callable[[Event], None]] = []
        self._rv_waiters: list[tuple[int, asyncio.Future]] = []
        # The store's own reactions to a deletion, run after every subscriber saw it.
        self._deletion_followups: list[Callable[[Event], None]] = []

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

    def _commit(
        self, bucket: Bucket, type_: str, key: tuple[str, str], old: dict | None, new: dict | None, rv: int
    ) -> Event:
        """Store ``new`` under ``key`` (None: remove it) at ``rv`` and publish the change; ``rv`` comes
        from ``_next_rv`` and is already in ``new``'s metadata. Returns the committed event."""
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
            self._drop_crd_type(old)
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
            for followup in self._deletion_followups:
                followup(event)
        return event

    def _trim_history(self, bucket: Bucket, now: float) -> None:
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

    def history_since(self, resource: str, rv: int) -> list[Event] | None:
        """Events of ``resource`` with RV > ``rv``; None if ``rv`` is older than retained history."""
        rt = self.resource_type(resource)
        bucket = self._bucket(rt)
        if rv < bucket.compacted_rv:
            return None
        start = bisect.bisect_right(bucket.history_rvs, rv)
        return [bucket.history[i] for i in range(start, len(bucket.history))]

    def oldest_resumable_rv(self, resource: str) -> int:
        """The oldest RV a watch of ``resource`` can resume from (older ones get 410 Gone)."""
        return self._bucket(self.resource_type(resource)).compacted_rv
