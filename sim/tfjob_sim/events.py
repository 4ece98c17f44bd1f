"""Events written by the simulated components, shaped and aggregated as their real recorders do.

Why: ``kubectl describe pod`` and ``kubectl get events`` are how a user learns why a worker is
Pending or was killed; a controller's own events sit next to the scheduler's and kubelet's. Each
component of a real cluster writes through a recorder with its own rules, and those rules are what
users see (``5s (x4 over 2m)``, ``(combined from similar events): ...``, a crash loop whose BackOff
count stops growing), so :class:`EventRecorder` reproduces them:

- ``record`` is client-go's legacy ``record`` recorder (kubelet, node-controller): core/v1 Events
  with ``source``, ``count``, ``firstTimestamp``/``lastTimestamp``; an exact repeat (same source,
  object incl. fieldPath, type, reason, message) bumps ``count`` and ``lastTimestamp`` of the first
  event; the 10th distinct message of similar events (same source, object, type, reason) within
  600 s turns into one ``(combined from similar events): <message>`` event; a token bucket per
  source+object+type (burst 25, one token per 300 s) drops what exceeds it, repeats included.
- ``record_series`` is the events.k8s.io recorder (kube-scheduler in 1.32), stored as a core/v1
  read of it shows it: ``eventTime``, ``action``, ``reportingComponent``/``reportingInstance``, empty
  ``source``, no ``count``/timestamps. An isomorphic event (same object, reason, action, type,
  reporter; the message is not compared) starts a series: the 2nd occurrence writes
  ``series: {count: 2, lastObservedTime}``, later ones only count in memory and are written every
  30 min, or when the series ends (6 min without occurrences; written at the next occurrence, which
  starts a new event).

Both shapes are stored in the core/v1 bucket: the simulator keeps core/v1 and events.k8s.io/v1
Events apart, and ``kubectl describe`` reads core/v1.

Speed: a write through the full request pipeline costs ~0.3 ms, mostly field-ownership tracking.
The first event of each field shape goes through it (validated, managedFields computed); later
events of the same shape reuse that ownership record with a new time and are committed with
:meth:`~tfjob_sim.store.Store.put_internal`, which stores what the API write would have
stored. Durations of the recorders (600 s, 300 s, 30 min, 6 min) are simulated seconds, multiplied
by ``time_scale`` like every other simulated duration; timestamps are wall clock.

:class:`EventTTL` is the apiserver's ``--event-ttl`` (1 h): an Event not written again within it is
deleted, whoever wrote it, which also bounds the memory events take in long simulations.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfjob_sim.errors import ApiError
from tfjob_sim.store import rfc3339

# client-go tools/record/events_cache.go
MAX_LRU_ENTRIES = 4096
AGGREGATE_MAX_EVENTS = 10
AGGREGATE_INTERVAL_SECONDS = 600.0
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
COMBINED_PREFIX = "(combined from similar events): "
# client-go tools/events: series heartbeat and end.
SERIES_HEARTBEAT_SECONDS = 30 * 60.0
SERIES_END_SECONDS = 6 * 60.0
# validation.NoteLengthLimit: the scheduler truncates longer messages.
NOTE_LENGTH_LIMIT = 1024

EVENTS = "events"
EVENT_RESOURCES = frozenset({EVENTS, "events.events.k8s.io"})


def object_reference(obj: dict, field_path: str | None = None) -> dict:
    """reference.GetReference of a stored object (plus a container's fieldPath)."""
    meta = obj.get("metadata") or {}
    ref = {
        "kind": obj.get("kind", ""),
        "namespace": meta.get("namespace"),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "apiVersion": obj.get("apiVersion", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if ref["namespace"] is None:
        del ref["namespace"]
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def node_reference(name: str) -> dict:
    """The node controller's and kubelet's reference to a Node: its name doubles as the UID."""
    return {"kind": "Node", "name": name, "uid": name, "apiVersion": "v1"}


def truncate_note(message: str) -> str:
    if len(message) <= NOTE_LENGTH_LIMIT:
        return message
    suffix = " ..."
    return message[: NOTE_LENGTH_LIMIT - len(suffix)] + suffix


# metav1.Time: whole seconds, each second formatted once (a burst stamps thousands of events a second).
_time = rfc3339


def _micro_time(ts: float) -> str:
    """metav1.MicroTime, as datetime.fromtimestamp(ts, UTC) renders it (the microseconds rounded half
    to even), with the whole second formatted once per second."""
    frac, whole = math.modf(ts)
    micros = round(frac * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    elif micros < 0:
        whole, micros = whole - 1, micros + 1_000_000
    return f"{rfc3339(whole)[:-1]}.{micros:06d}Z"


@dataclass(slots=True)
class _Observed:
    name: str
    count: int
    first_timestamp: str


@dataclass(slots=True)
class _Similar:
    messages: set[str]
    last: float


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


@dataclass(slots=True)
class _Series:
    event: dict  # last written state
    count: int
    last_observed: float
    written_count: int
    written_at: float


class _Lru(OrderedDict):
    """A bounded map: the least recently used entries go first (client-go's LRU caches)."""

    def __init__(self, limit: int = MAX_LRU_ENTRIES) -> None:
        super().__init__()
        self.limit = limit

    def touch(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.limit:
            self.popitem(last=False)

    def lookup(self, key: Any) -> Any:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value


class EventRecorder:
    """Writes the simulated components' Events into a Store. Call from the event-loop thread."""

    def __init__(
        self,
        store: Any,
        time_scale: float = 1.0,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._scale = time_scale
        self._clock = clock
        self._monotonic = monotonic
        self._last_name_ns = 0
        self._observed = _Lru()
        self._similar = _Lru()
        self._spam = _Lru()
        self._series = _Lru()
        self._ownership: dict[tuple, list[dict]] = {}
        self.scheduler_instance = f"default-scheduler-{socket.gethostname()}"
        self.written = 0  # events created or updated (for benchmarks and tests)

    # ---------------------------------------------------------------- legacy recorder (core/v1)

    def record(self, ref: dict, type_: str, reason: str, message: str, *, component: str, host: str = "") -> None:
        """client-go record.EventRecorder.Event for ``ref`` (see :func:`object_reference`)."""
        now = self._monotonic()
        source = {"component": component, "host": host} if host else {"component": component}
        obj_key = (
            component,
            host,
            ref.get("kind"),
            ref.get("namespace"),
            ref.get("name"),
            ref.get("uid"),
            ref.get("apiVersion"),
        )
        # EventAggregator: similar events with 10 distinct messages within 600 s are combined.
        aggregate_key = obj_key + (type_, reason)
        similar = self._similar.lookup(aggregate_key)
        if similar is None or now - similar.last > AGGREGATE_INTERVAL_SECONDS * self._scale:
            similar = _Similar(set(), now)
        similar.messages.add(message)
        similar.last = now
        self._similar.touch(aggregate_key, similar)
        if len(similar.messages) >= AGGREGATE_MAX_EVENTS:
            message = COMBINED_PREFIX + message
            event_key: tuple = aggregate_key + ("",)
        else:
            event_key = obj_key + (ref.get("fieldPath"), type_, reason, message)
        # eventLogger: an exact repeat updates the first event of its kind.
        wall = self._clock()
        stamp = _time(wall)
        observed = self._observed.lookup(event_key)
        if observed is None:
            observed = _Observed(self._event_name(ref["name"]), 1, stamp)
        else:
            observed.count += 1
        self._observed.touch(event_key, observed)
        # Spam filter, after aggregation: a repeat spends a token like a new event.
        if not self._allow(obj_key + (type_,), now):
            return
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": observed.name, "namespace": ref.get("namespace") or "default"},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "source": source,
            "firstTimestamp": observed.first_timestamp,
            "lastTimestamp": stamp,
            "count": observed.count,
            "type": type_,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": host,
        }
        self._write(event, component)

    def _allow(self, key: tuple, now: float) -> bool:
        bucket = self._spam.lookup(key)
        if bucket is None:
            bucket = _Bucket(float(SPAM_BURST), now)
        else:
            refill = (now - bucket.updated) / (SPAM_REFILL_SECONDS * self._scale)
            bucket.tokens = min(float(SPAM_BURST), bucket.tokens + refill)
            bucket.updated = now
        self._spam.touch(key, bucket)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    # ---------------------------------------------------------------- events.k8s.io recorder

    def record_series(
        self, ref: dict, type_: str, reason: str, action: str, message: str, *, controller: str, instance: str
    ) -> None:
        """client-go tools/events EventRecorder.Eventf (``related`` unused), as kube-scheduler writes."""
        now = self._monotonic()
        key = (
            ref.get("kind"),
            ref.get("namespace"),
            ref.get("name"),
            ref.get("uid"),
            ref.get("apiVersion"),
            reason,
            action,
            type_,
            controller,
            instance,
        )
        series = self._series.lookup(key)
        if series is not None and now - series.last_observed > SERIES_END_SECONDS * self._scale:
            self._flush_series(series)  # the series ended: written with its final count
            self._series.pop(key, None)
            series = None
        if series is None:
            event = {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": self._event_name(ref["name"]), "namespace": ref.get("namespace") or "default"},
                "involvedObject": ref,
                "reason": reason,
                "message": truncate_note(message),
                "source": {},
                "firstTimestamp": None,
                "lastTimestamp": None,
                "type": type_,
                "eventTime": _micro_time(self._clock()),
                "action": action,
                "reportingComponent": controller,
                "reportingInstance": instance,
            }
            self._write(event, controller)
            self._series.touch(key, _Series(event, 1, now, 1, now))
            return
        series.count += 1
        series.last_observed = now
        series.event = dict(
            series.event, series={"count": series.count, "lastObservedTime": _micro_time(self._clock())}
        )
        self._series.touch(key, series)
        if series.count == 2 or now - series.written_at >= SERIES_HEARTBEAT_SECONDS * self._scale:
            self._flush_series(series)

    def _flush_series(self, series: _Series) -> None:
        if series.written_count == series.count:
            return
        series.written_count = series.count
        series.written_at = self._monotonic()
        self._write(series.event, series.event["reportingComponent"])

    # ---------------------------------------------------------------- writing

    def _event_name(self, object_name: str) -> str:
        """``<object>.<hex UnixNano>``, unique even for two events within one clock tick."""
        ns = max(time.time_ns(), self._last_name_ns + 1)
        self._last_name_ns = ns
        return f"{object_name}.{ns:x}"

    def _write(self, event: dict, manager: str) -> None:
        """Create or update ``event``: through the full pipeline the first time a field shape is seen,
        then as the same object with the ownership record that pipeline computed."""
        # What decides the ownership record: the writer, which fields are set, the keys of the
        # structs (source, series); involvedObject is atomic.
        shape = (manager, event["eventTime"] is None, tuple(event["source"]), "series" in event)
        ownership = self._ownership.get(shape)
        meta = event["metadata"]
        try:
            if ownership is None:
                existing = self._store.get(EVENTS, meta["namespace"], meta["name"])
                if existing is None:
                    stored = self._store.create(EVENTS, meta["namespace"], event, field_manager=manager)
                else:
                    stored = self._store.update(
                        EVENTS,
                        meta["namespace"],
                        meta["name"],
                        dict(event, metadata=dict(existing["metadata"])),
                        field_manager=manager,
                    )
                entries = stored["metadata"].get("managedFields") or []
                if len(entries) == 1 and entries[0].get("manager") == manager:
                    self._ownership[shape] = entries
            else:
                entry = dict(ownership[0], time=_time(self._clock()))
                obj = dict(event, metadata=dict(meta, managedFields=[entry]))
                self._store.put_internal(EVENTS, obj)
        except ApiError as exc:
            # A real recorder logs and drops what the apiserver refuses (e.g. a terminating namespace).
            if exc.code not in (403, 404, 409):
                raise
            return
        self.written += 1


class EventTTL:
    """kube-apiserver's ``--event-ttl``: every write of an Event (core/v1 or events.k8s.io/v1, by any
    writer) gives it a fresh lease; when the lease runs out without a newer write the Event is
    deleted (watchers see DELETED, as when etcd expires a key).

    A store listener notes each write (cheap: a heap push); :meth:`run` sleeps until the next expiry.
    ``ttl`` is simulated seconds (scaled by ``time_scale``); the default is the apiserver's 1 h.
    """

    def __init__(self, store: Any, ttl: float = 3600.0, time_scale: float = 1.0) -> None:
        if not ttl > 0:
            raise ValueError(f"event TTL must be > 0, got {ttl}")
        self._store = store
        self._ttl = ttl * time_scale
        self._heap: list[tuple[float, str, str, str, str]] = []  # (due, resource, namespace, name, rv)
        self._wake: asyncio.Event | None = None
        self.expired = 0

    def _on_change(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        if resource not in EVENT_RESOURCES or new is None:
            return
        meta = new["metadata"]
        due = time.monotonic() + self._ttl
        heapq.heappush(
            self._heap, (due, resource, meta.get("namespace", ""), meta["name"], meta.get("resourceVersion", ""))
        )
        if len(self._heap) == 1 and self._wake is not None:
            self._wake.set()

    def expire(self, now: float) -> None:
        """Delete every Event whose lease ran out by ``now`` (those rewritten since keep theirs)."""
        while self._heap and self._heap[0][0] <= now:
            _due, resource, namespace, name, rv = heapq.heappop(self._heap)
            current = self._store.get(resource, namespace, name)
            if current is None or current["metadata"].get("resourceVersion") != rv:
                continue  # gone already, or written again (a newer lease)
            try:
                self._store.delete(resource, namespace, name, {"preconditions": {"resourceVersion": rv}})
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
                continue
            self.expired += 1

    async def run(self) -> None:
        """Expire Events until cancelled."""
        self._wake = asyncio.Event()
        unsubscribe = self._store.add_listener(self._on_change)
        try:
            while True:
                self.expire(time.monotonic())
                timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except TimeoutError:
                    pass  # the next lease ran out
        finally:
            unsubscribe()
