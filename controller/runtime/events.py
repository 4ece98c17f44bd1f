"""Kubernetes Events for the objects a controller manages (client-go's ``record`` package, small).

Why: Events are how users learn *why* something happened (``kubectl describe``), so every recorded event is
written as a core/v1 Event whose involvedObject is the object. But an event is never worth delaying the
work it describes: a reconcile that creates a job's pods must not wait for the Events that say so, and a
failover must not queue behind a thousand of them. So, as client-go's recorder does, recording
(:meth:`EventRecorder.record`, synchronous) and writing (:meth:`EventRecorder.run`) are apart. Events are
best effort by Kubernetes convention: a failed write is logged with the event's content and counted, never
retried, and never reaches a reconcile.
"""

from __future__ import annotations

import math
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog
from prometheus_client import CollectorRegistry, Counter

from controller.runtime.client import EVENTS, ApiClient
from controller.runtime.errors import AlreadyExists, ApiError, NotFound, TransportError
from controller.runtime.ratelimit import TokenBucket

_CACHE_SIZE = 4096
# Drop reasons created at 0 up front, so rate() sees the first drop: the recorder's own (a full queue,
# the spam filter, shutdown, eviction from its cache) and the causes an overloaded or unreachable API
# server and a tightened RBAC or admission give (other error classes appear with their first drop).
DROP_REASONS = (
    "QueueFull", "SpamFilter", "Shutdown", "Evicted",
    "TooManyRequests", "ServerError", "ServerTimeout", "ServiceUnavailable", "TransportError", "Forbidden", "Invalid",
)  # fmt: skip
COMBINED_PREFIX = "(combined from similar events): "


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Event:
    """One Event object as we believe the server holds it (or will, once its write is done)."""

    name: str
    namespace: str
    involved: dict[str, Any]
    type: str
    reason: str
    message: str
    first: str
    last: str
    count: int = 1
    created: bool = False  # the server has it (a create succeeded)
    written_count: int = 0  # the count the server holds


@dataclass
class _Similar:
    """Distinct messages seen for one (object, type, reason) since ``since`` (monotonic seconds)."""

    since: float
    messages: set[str] = field(default_factory=set)


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class _CallableClock:
    """The recorder's ``clock`` (monotonic seconds) as the runtime's :class:`~controller.runtime.clock.Clock`."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, deadline - self.now()))


class EventRecorder:
    """Records Events attributed to ``component`` (e.g. ``tfjob-controller``) and writes them.

    Dropped events are counted in ``events_dropped_total{reason}`` (``QueueFull``, ``SpamFilter``,
    ``Shutdown``, or the API error's class) and logged at debug level with their content; the first drop
    of a burst is also logged as a warning.
    """

    def __init__(
        self,
        client: ApiClient,
        component: str,
        registry: CollectorRegistry | None = None,
        now: Callable[[], str] = _now,
        instance: str | None = None,
        *,
        max_queued: int = 10_000,
        writers: int = 8,
        qps: float = 0.0,
        burst: int = 100,
        spam_burst: int = 25,
        spam_refill_seconds: float = 300.0,
        aggregate_max_events: int = 10,
        aggregate_interval: float = 600.0,
        flush_timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_queued < 1 or writers < 1 or burst < 1 or spam_burst < 1 or aggregate_max_events < 1:
            raise ValueError("max_queued, writers, burst, spam_burst and aggregate_max_events must be >= 1")
        self.client = client
        self.component = component
        self.instance = instance or socket.gethostname()
        self.max_queued = max_queued
        self.writers = writers
        # Pending Events stay in the cache: room for all of them besides the recently written ones.
        self._cache_size = _CACHE_SIZE + max_queued
        self.qps = qps
        self.burst = burst
        self.spam_burst = spam_burst
        self.spam_refill_seconds = spam_refill_seconds
        self.aggregate_max_events = aggregate_max_events
        self.aggregate_interval = aggregate_interval
        self.flush_timeout = flush_timeout
        self._now = now
        self._clock = clock
        self._events: OrderedDict[tuple[str, str, str, str], _Event] = OrderedDict()  # LRU
        self._similar: OrderedDict[tuple[str, str, str], _Similar] = OrderedDict()  # LRU
        self._spam: OrderedDict[tuple[str, str], _Bucket] = OrderedDict()  # LRU
        self._pending: OrderedDict[tuple[str, str, str, str], None] = OrderedDict()  # keys to write, oldest first
        self._writing: set[tuple[str, str, str, str]] = set()  # keys a writer is writing now
        self._wakeup: anyio.Event | None = None  # set by record() while writers wait (made by them)
        # The writers' pace (qps > 0): reservations, so concurrent writers queue up 1/qps apart.
        self._pacer = TokenBucket(qps, burst, _CallableClock(clock)) if qps > 0 else None
        self._last_stamp = 0
        self._dropping = False  # a warning was logged for the current run of drops
        self._dropped = (
            Counter(
                "events_dropped", "Events that could not be written to the API server", ["reason"], registry=registry
            )
            if registry is not None
            else None
        )
        if self._dropped is not None:
            for reason in DROP_REASONS:
                self._dropped.labels(reason=reason)
        self.log = structlog.get_logger("controller.runtime.events")

    @property
    def queued(self) -> int:
        """Writes waiting for the writer."""
        return len(self._pending)

    # -- recording (synchronous, no I/O) ----------------------------------------------------------

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Queue an Event about ``obj``; never blocks, never raises, does no I/O. Correlated as client-go's
        ``EventCorrelator``: an exact repeat becomes a ``count`` increment (one PATCH; merged into a write
        still queued); more than ``aggregate_max_events`` distinct messages of one (object, type, reason)
        within ``aggregate_interval`` s are combined into one ``(combined from similar events): ...`` Event; a
        spam filter per (object, type) — ``spam_burst`` events refilled one per ``spam_refill_seconds`` —
        drops the excess; beyond ``max_queued`` waiting writes (a 1,000-job burst's creation events) the
        event is dropped (client-go's ``DropIfChannelFull``). A queued Event is never evicted from the cache.
        """
        meta = obj.get("metadata") or {}
        uid = meta.get("uid", "")
        namespace = meta.get("namespace") or "default"
        message = self._aggregate(uid, type_, reason, message)
        combined = message.startswith(COMBINED_PREFIX)
        key = (uid, type_, reason, COMBINED_PREFIX if combined else message)
        if not self._spam_allows(uid, type_):
            self._drop("SpamFilter", namespace, meta, type_, reason, message)
            return
        if key not in self._pending and len(self._pending) >= self.max_queued:
            self._drop("QueueFull", namespace, meta, type_, reason, message)
            return
        now = self._now()
        event = self._events.get(key)
        if event is None:
            event = _Event(
                name=self._event_name(meta.get("name") or "object"),
                namespace=namespace,
                involved={
                    "apiVersion": obj.get("apiVersion", ""),
                    "kind": obj.get("kind", ""),
                    "name": meta.get("name", ""),
                    "namespace": namespace,
                    "uid": uid,
                    "resourceVersion": meta.get("resourceVersion", ""),
                },
                type=type_,
                reason=reason,
                message=message,
                first=now,
                last=now,
            )
            self._events[key] = event
            self._evict()
        else:
            event.count += 1
            event.last = now
            event.message = message
            self._events.move_to_end(key)
        self._pending[key] = None
        if self._wakeup is not None:
            self._wakeup.set()

    def _evict(self) -> None:
        """Forget the least recently used Events beyond the cache size, never one still to be written
        (at most ``max_queued`` are, so the loop ends)."""
        events = self._events
        while len(events) > self._cache_size:
            key, event = events.popitem(last=False)
            if key in self._pending:
                events[key] = event

    def _event_name(self, object_name: str) -> str:
        """``<object>.<hex nanoseconds>`` as client-go names events; strictly increasing in this
        process, so two events of one object never collide (and no random bytes are drawn)."""
        stamp = max(time.time_ns(), self._last_stamp + 1)
        self._last_stamp = stamp
        return f"{object_name}.{stamp:x}"

    def _aggregate(self, uid: str, type_: str, reason: str, message: str) -> str:
        """client-go's EventAggregator: the message to record (combined once a reason is too chatty)."""
        key = (uid, type_, reason)
        now = self._clock()
        similar = self._similar.get(key)
        if similar is None or now - similar.since > self.aggregate_interval:
            similar = _Similar(since=now)
            self._similar[key] = similar
            while len(self._similar) > _CACHE_SIZE:
                self._similar.popitem(last=False)
        self._similar.move_to_end(key)
        if message in similar.messages:
            return message
        if len(similar.messages) < self.aggregate_max_events:
            similar.messages.add(message)
            return message
        return COMBINED_PREFIX + message

    def _spam_allows(self, uid: str, type_: str) -> bool:
        key = (uid, type_)
        now = self._clock()
        bucket = self._spam.get(key)
        if bucket is None:
            bucket = _Bucket(float(self.spam_burst), now)
            self._spam[key] = bucket
            while len(self._spam) > _CACHE_SIZE:
                self._spam.popitem(last=False)
        else:
            refill = (now - bucket.stamp) / self.spam_refill_seconds if self.spam_refill_seconds > 0 else math.inf
            bucket.tokens = min(float(self.spam_burst), bucket.tokens + refill)
            bucket.stamp = now
            self._spam.move_to_end(key)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _drop(self, why: str, namespace: str, meta: dict[str, Any], type_: str, reason: str, message: str) -> None:
        if self._dropped is not None:
            self._dropped.labels(reason=why).inc()
        fields = {"object": f"{namespace}/{meta.get('name')}", "type": type_, "reason": reason, "message": message}
        if why == "QueueFull" and not self._dropping:
            self._dropping = True
            self.log.warning("event queue full; dropping events until it drains", queued=len(self._pending), **fields)
        else:
            self.log.debug("event dropped", why=why, **fields)

    # -- writing (the background task) ------------------------------------------------------------

    async def run(self) -> None:
        """Write queued events until cancelled: ``writers`` concurrent writes, oldest first, one at a time per
        Event, unpaced like client-go's (the client's limit and the server's API Priority and Fairness apply;
        ``qps`` > 0 adds a bucket). On cancellation, flush what is queued for at most ``flush_timeout``
        seconds (shielded) and count the rest as dropped (``Shutdown``)."""
        try:
            async with anyio.create_task_group() as tg:
                for i in range(self.writers):
                    tg.start_soon(self._writer, name=f"event writer {i}")
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.flush_timeout):
                while self._pending:
                    key = self._next_key()
                    if key is None:
                        break
                    await self._write(key)
            if self._pending:
                if self._dropped is not None:
                    self._dropped.labels(reason="Shutdown").inc(len(self._pending))
                self.log.warning("events not written before shutdown", dropped=len(self._pending))
                self._pending.clear()

    async def _writer(self) -> None:
        while True:
            key = self._next_key()
            if key is None:
                if not self._pending:
                    self._dropping = False
                if self._wakeup is None or self._wakeup.is_set():
                    self._wakeup = anyio.Event()
                await self._wakeup.wait()
                continue
            self._writing.add(key)
            try:
                await self._pace()
                await self._write(key)
            finally:
                self._writing.discard(key)

    def _next_key(self) -> tuple[str, str, str, str] | None:
        """The oldest queued Event no writer is writing (at most ``writers`` are skipped)."""
        writing = self._writing
        for key in self._pending:
            if key not in writing:
                return key
        return None

    async def _pace(self) -> None:
        if self._pacer is not None:
            await self._pacer.wait()

    async def _write(self, key: tuple[str, str, str, str]) -> None:
        event = self._events.get(key)
        if event is None:  # evicted from the cache while queued (thousands of newer events): lost
            del self._pending[key]
            if self._dropped is not None:
                self._dropped.labels(reason="Evicted").inc()
            return
        count = event.count
        try:
            if event.created:
                try:
                    await self._patch(event, count)
                except NotFound:
                    # The Event expired (events have a TTL): write a fresh one with the count so far.
                    event.name = self._event_name(event.involved["name"] or "object")
                    await self._create(event, count)
            else:
                await self._create(event, count)
        except (ApiError, TransportError) as exc:
            self._pending.pop(key, None)
            if self._dropped is not None:
                self._dropped.labels(reason=type(exc).__name__).inc()
            self.log.warning(
                "event not written",
                object=f"{event.namespace}/{event.involved['name']}",
                type=event.type,
                reason=event.reason,
                message=event.message,
                error=str(exc),
            )
            return
        event.created = True
        event.written_count = count
        if event.count == count:
            self._pending.pop(key, None)
        else:  # repeated while we wrote: write the new count later, after the others
            self._pending.move_to_end(key)

    async def _create(self, event: _Event, count: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event.name, "namespace": event.namespace},
            "involvedObject": event.involved,
            "reason": event.reason,
            "message": event.message,
            "type": event.type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
            "firstTimestamp": event.first,
            "lastTimestamp": event.last,
            "count": count,
        }
        try:
            await self.client.create(EVENTS, body, namespace=event.namespace)
        except AlreadyExists:
            # Our own earlier attempt, whose answer was lost (a cancelled or timed-out write): bring
            # its count up to date.
            await self._patch(event, count)

    async def _patch(self, event: _Event, count: int) -> None:
        await self.client.patch(
            EVENTS,
            event.name,
            {"count": count, "lastTimestamp": event.last, "message": event.message},
            namespace=event.namespace,
            patch_type="merge",
        )
