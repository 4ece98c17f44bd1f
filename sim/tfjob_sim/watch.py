"""Watch fan-out: committed store events to the open watch streams, with real watch semantics.

Why this module exists: the watch protocol is where simulators usually cheat (no resume, no 410,
no selector transitions, one event per chunk). This hub implements the apiserver's watch cache
semantics on top of the store's per-resource history (one JSON line per event, resume from an RV, 410
when it is compacted, bookmarks, timeoutSeconds, selector transitions as ADDED/DELETED) and does it
fast enough for 20,000 events/s: each event is serialised once and the bytes are shared by every
watcher that sees the event unchanged; a stream writes everything pending in one write.

Contract:
- :meth:`WatchHub.open` is synchronous: it takes the initial state (synthetic ADDEDs for RV
  unset/"0") or replays history (RV N) *and* registers the watcher in one step, so no change can
  fall between the two. An RV older than the retained history yields a watcher whose only line is
  the ERROR 410 event.
- :meth:`Watcher.serve` writes the stream to an aiohttp response until the deadline, a close
  request (fault, restart, shutdown) or slow-consumer termination, then returns: the HTTP layer
  ends the chunked body cleanly (a plain EOF, never an error event).
- Per-watcher buffer limit: a watcher with more than ``buffer_limit`` undelivered events is
  terminated (its buffer dropped, stream ended), like the cacher's unresponsive-watcher handling.
- A stalled watcher (fault) keeps its connection open and sends nothing — not even bookmarks or
  EOF at its deadline — until it is closed by :meth:`WatchHub.close_all` or server shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from tfjob_sim.resources import ResourceType
from tfjob_sim.store import CRD_RESOURCE, Event, Store, with_resource_version

log = logging.getLogger(__name__)

Encoder = Callable[[str, dict], bytes]


@dataclass
class WatchConfig:
    bookmark_period: float = 60.0
    # A bookmark is sent this long before the deadline so a timed-out watch ends with a fresh RV.
    bookmark_before_deadline: float = 2.0
    # Default watch duration when timeoutSeconds is absent: uniform in [min, 2*min) like the real server.
    min_request_timeout: float = 1800.0
    buffer_limit: int = 100_000


def json_line(type_: str, obj: dict) -> bytes:
    return orjson.dumps({"type": type_, "object": obj}) + b"\n"


class Watcher:
    """One open watch stream: its filter, its pending lines, and its lifecycle flags."""

    def __init__(
        self,
        hub: WatchHub,
        rt: ResourceType,
        namespace: str | None,
        label: Any,
        field: Any,
        min_rv: int,
        encoder: Encoder | None,
        user_agent: str = "",
    ) -> None:
        self.hub = hub
        self.rt = rt
        self.resource = rt.qualified
        self.namespace = namespace
        self.label = label
        self.field = field
        self.min_rv = min_rv
        self.encoder = encoder  # None = plain JSON: shared event bytes may be used
        self.user_agent = user_agent
        # (due_time, rv, line); due_time 0 = deliver now. rv 0 = not an RV-carrying line.
        self.pending: deque[tuple[float, int, bytes]] = deque()
        self.wake = asyncio.Event()
        self.closed: str | None = None  # reason once closed: "timeout", "closed", "overflow", "error"
        self.stalled = False
        self.delay = 0.0
        self.delivered_rv = 0
        self.events_sent = 0
        self.end_after_pending = False  # an ERROR-only stream: send what is queued, then end

    # ---------------------------------------------------------------- filtering (sync, hot path)

    def _matches(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.label is not None and not self.label.matches(meta.get("labels")):
            return False
        if self.field is not None and not self.field.matches(self.rt.fields_of(obj)):
            return False
        return True

    def _line_for(self, event: Event) -> bytes | None:
        if event.rv <= self.min_rv:
            return None
        old_match = self._matches(event.old)
        new_match = self._matches(event.new)
        if event.type == "ADDED":
            if not new_match:
                return None
            type_, obj, shared = "ADDED", event.object, True
        elif event.type == "DELETED":
            if not old_match:
                return None
            type_, obj, shared = "DELETED", event.object, True
        elif old_match and new_match:
            type_, obj, shared = "MODIFIED", event.object, True
        elif new_match:
            type_, obj, shared = "ADDED", event.object, False
        elif old_match:
            assert event.old is not None
            type_, obj, shared = "DELETED", with_resource_version(event.old, event.rv), False
        else:
            return None
        if self.encoder is not None:
            return self.encoder(type_, obj)
        return event.line() if shared else json_line(type_, obj)

    def offer(self, event: Event, now: float) -> None:
        if self.closed is not None:
            return
        line = self._line_for(event)
        if line is None:
            return
        if self.stalled:
            return  # a stalled connection never delivers anything again
        self.pending.append((now + self.delay if self.delay else 0.0, event.rv, line))
        if len(self.pending) > self.hub.config.buffer_limit:
            log.info(
                "closing slow watcher of %s: more than %d undelivered events",
                self.resource,
                self.hub.config.buffer_limit,
            )
            self.pending.clear()
            self.close("overflow")
            return
        self.wake.set()

    def close(self, reason: str = "closed") -> None:
        if self.closed is None:
            self.closed = reason
        self.wake.set()

    # ---------------------------------------------------------------- streaming (async)

    def _take_ready(self, now: float) -> tuple[list[bytes], float]:
        """Lines due now, and when the next delayed one is due (inf if none)."""
        lines: list[bytes] = []
        pending = self.pending
        while pending:
            due, rv, line = pending[0]
            if due > now:
                return lines, due
            pending.popleft()
            lines.append(line)
            if rv:
                self.delivered_rv = rv
        return lines, math.inf

    def _bookmark(self) -> bytes:
        # Safe RV: everything up to it that matches has been delivered (nothing may be pending).
        rv = self.hub.store.resource_version
        if self.pending:
            rv = self.pending[0][1] - 1
        obj = {"kind": self.rt.kind, "apiVersion": self.rt.api_version, "metadata": {"resourceVersion": str(rv)}}
        if self.encoder is not None:
            return self.encoder("BOOKMARK", obj)
        return json_line("BOOKMARK", obj)

    async def serve(self, write: Callable[[bytes], Any], timeout: float, bookmarks: bool) -> str:
        """Write this watch's stream via ``write`` (an async callable) until it ends; returns why."""
        loop = asyncio.get_running_loop()
        config = self.hub.config
        start = loop.time()
        deadline = start + timeout
        next_bookmark = start + config.bookmark_period if bookmarks else math.inf
        pre_deadline = deadline - config.bookmark_before_deadline if bookmarks else math.inf
        if pre_deadline <= start:
            pre_deadline = math.inf
        try:
            while True:
                if self.closed is not None:
                    return self.closed
                now = loop.time()
                if self.stalled:
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                if now >= deadline:
                    self.close("timeout")
                    return "timeout"
                lines, next_due = self._take_ready(now)
                if lines:
                    self.events_sent += len(lines)
                    await write(b"".join(lines) if len(lines) > 1 else lines[0])
                    continue
                if self.end_after_pending:
                    self.close("error")
                    return "error"
                if now >= next_bookmark or now >= pre_deadline:
                    if now >= pre_deadline:
                        pre_deadline = math.inf
                    next_bookmark = now + config.bookmark_period if bookmarks else math.inf
                    await write(self._bookmark())
                    continue
                wake_at = min(deadline, next_bookmark, pre_deadline, next_due)
                self.wake.clear()
                try:
                    async with asyncio.timeout_at(wake_at):
                        await self.wake.wait()
                except TimeoutError:
                    pass
        finally:
            self.hub._unregister(self)


class WatchHub:
    """Registry of open watchers; receives every committed event from the store."""

    def __init__(self, store: Store, config: WatchConfig | None = None) -> None:
        self.store = store
        self.config = config or WatchConfig()
        self._by_resource: dict[str, set[Watcher]] = {}
        self._unsubscribe = store.add_event_sink(self._dispatch)
        self.stall_new: set[str | None] = set()  # resources (None = all) whose new watchers stall
        # (resource or None, user-agent substring or None) -> event delivery delay in seconds
        self.delays: dict[tuple[str | None, str | None], float] = {}
        self.opened = 0

    def _dispatch(self, event: Event) -> None:
        if event.type == "DELETED" and event.resource == CRD_RESOURCE and event.old is not None:
            # The type is no longer served: its watches end, as the CRD handler's do.
            spec = event.old.get("spec") or {}
            self.close_all(f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}")
        watchers = self._by_resource.get(event.resource)
        if not watchers:
            return
        now = asyncio.get_running_loop().time() if any(w.delay for w in watchers) else 0.0
        for watcher in tuple(watchers):
            watcher.offer(event, now)

    def _unregister(self, watcher: Watcher) -> None:
        watchers = self._by_resource.get(watcher.resource)
        if watchers is not None:
            watchers.discard(watcher)

    def watchers(self, resource: str | None = None) -> list[Watcher]:
        if resource is not None:
            return list(self._by_resource.get(resource, ()))
        return [w for ws in self._by_resource.values() for w in ws]

    def open(
        self,
        resource: str,
        namespace: str | None,
        label_selector: str,
        field_selector: str,
        resource_version: str | None,
        encoder: Encoder | None = None,
        user_agent: str = "",
    ) -> Watcher:
        """Register a watcher and queue its initial lines (see the module contract). Raises ApiError."""
        from tfjob_sim.store import parse_rv

        store = self.store
        rt = store.resource_type(resource)
        ns = namespace if rt.namespaced else None
        label, field = store.parse_selectors(rt, label_selector, field_selector)
        current = store.resource_version
        rv_text = resource_version or ""
        requested = parse_rv(rv_text) if rv_text else 0
        watcher = Watcher(self, rt, ns, label, field, current, encoder, user_agent)
        self.opened += 1
        watcher.delay = self._delay_for(watcher)
        encode = encoder or json_line
        if requested == 0:
            # Synthetic ADDED for the current state; then every change after the current RV.
            for obj in store.snapshot(rt.qualified, ns):
                if watcher._matches(obj):
                    watcher.pending.append((0.0, 0, encode("ADDED", obj)))
        else:
            history = store.history_since(rt.qualified, requested)
            if history is None:
                status = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {requested} ({store.oldest_resumable_rv(rt.qualified)})",
                    "reason": "Expired",
                    "code": 410,
                }
                watcher.pending.append((0.0, 0, encode("ERROR", status)))
                watcher.end_after_pending = True
                return watcher
            watcher.min_rv = requested
            for event in history:
                line = watcher._line_for(event)
                if line is not None:
                    watcher.pending.append((0.0, event.rv, line))
            # Live events all have RV > current; a future RV additionally hides events up to it.
            watcher.min_rv = max(requested, current)
        if rt.qualified in self.stall_new or None in self.stall_new:
            watcher.stalled = True
            watcher.pending.clear()
        self._by_resource.setdefault(rt.qualified, set()).add(watcher)
        return watcher

    def close_all(self, resource: str | None = None) -> int:
        """End every open watch (of ``resource``): clients see a clean EOF. Returns how many."""
        closed = 0
        for watcher in self.watchers(resource):
            watcher.close("closed")
            closed += 1
        return closed

    def stall(self, resource: str | None = None, include_new: bool = False) -> int:
        """Stall open watches (connection stays open, nothing more is sent)."""
        count = 0
        for watcher in self.watchers(resource):
            watcher.stalled = True
            watcher.pending.clear()
            watcher.wake.set()
            count += 1
        if include_new:
            self.stall_new.add(resource)
        return count

    def unstall(self) -> int:
        """Stop stalling new watches and close the stalled ones (their clients see EOF)."""
        self.stall_new.clear()
        count = 0
        for watcher in self.watchers():
            if watcher.stalled:
                watcher.close("closed")
                count += 1
        return count

    def _delay_for(self, watcher: Watcher) -> float:
        delay = 0.0
        for (resource, agent), seconds in self.delays.items():
            if resource not in (None, watcher.resource):
                continue
            if agent is not None and agent not in watcher.user_agent:
                continue
            delay = max(delay, seconds)
        return delay

    def set_delay(self, seconds: float, resource: str | None = None, user_agent: str | None = None) -> None:
        """Delay event delivery by ``seconds`` to current and future watchers of ``resource`` (None = all)
        whose User-Agent contains ``user_agent`` (None = every watcher); 0 removes the delay."""
        if seconds > 0:
            self.delays[(resource, user_agent)] = seconds
        else:
            self.delays.pop((resource, user_agent), None)
        for watcher in self.watchers():
            watcher.delay = self._delay_for(watcher)

    def shutdown(self) -> None:
        self.close_all()
        self._unsubscribe()
