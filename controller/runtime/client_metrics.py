"""Prometheus metrics of the API client, the informers and leader election.

Why a module of its own: the names, labels and buckets are a contract with dashboards and alerts (the names
client-go and controller-runtime export, e.g. ``rest_client_requests_total``,
``leader_election_master_status``; the full list with meanings is docs/metrics.md), so they are defined once,
here, and the code that records them only calls small methods. Each family is registered at most once per
``CollectorRegistry``, so any number of clients, informers and electors share one registry and differ by
labels only. ``registry=None`` means no metrics: ``for_registry`` then returns a null recorder with the same
methods, so hot paths never test for ``None``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = [
    "REST_DURATION_BUCKETS",
    "RestClientMetrics",
    "InformerMetrics",
    "LeaderElectionMetrics",
]

# client-go's rest_client_request_duration_seconds buckets.
REST_DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

# Series created at 0 up front, because rate()/increase() cannot see the first increment of a series that
# springs into existence at 1: the failure codes the alerts and panels look for, for every verb the client
# sends. Success codes appear with the first request, at start-up, where missing one step does not matter.
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
FAILURE_CODES = ("429", "500", "502", "503", "504", "<error>")
# The informer's restart and relist reasons (controller.runtime.reflector), all known up front.
WATCH_RESTART_REASONS = ("timeout", "closed", "short", "stalled", "throttled", "error")
RELIST_REASONS = ("initial", "expired", "error")

_T = TypeVar("_T")
_families: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, object]] = weakref.WeakKeyDictionary()


def _family(registry: CollectorRegistry, name: str, build: Callable[[], _T]) -> _T:
    per_registry = _families.setdefault(registry, {})
    family = per_registry.get(name)
    if family is None:
        family = build()
        per_registry[name] = family
    return family  # type: ignore[return-value]


class RestClientMetrics:
    """Recorder for the REST client; one per (registry, host)."""

    def __init__(self, registry: CollectorRegistry, host: str) -> None:
        self.host = host
        self._requests = _family(
            registry,
            "rest_client_requests",
            lambda: Counter(
                "rest_client_requests",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                ["code", "method", "host"],
                registry=registry,
            ),
        )
        self._duration = _family(
            registry,
            "rest_client_request_duration_seconds",
            lambda: Histogram(
                "rest_client_request_duration_seconds",
                "Request latency in seconds. Broken down by verb, and host.",
                ["verb", "host"],
                buckets=REST_DURATION_BUCKETS,
                registry=registry,
            ),
        )
        self._retries = _family(
            registry,
            "rest_client_request_retries",
            lambda: Counter(
                "rest_client_request_retries",
                "Number of request retries, partitioned by status code, verb, and host.",
                ["code", "verb", "host"],
                registry=registry,
            ),
        )

        self._throttle = _family(
            registry,
            "rest_client_rate_limiter_duration_seconds",
            lambda: Histogram(
                "rest_client_rate_limiter_duration_seconds",
                "Client side rate limiter latency in seconds. Broken down by verb, and host.",
                ["verb", "host"],
                buckets=REST_DURATION_BUCKETS,
                registry=registry,
            ),
        )

        for method in HTTP_METHODS:
            self._duration.labels(verb=method, host=host)
            for code in FAILURE_CODES:
                self._requests.labels(code=code, method=method, host=host)
                self._retries.labels(code=code, verb=method, host=host)

        # Label children by (method, code): ``labels()`` costs a lock and a tuple build per call, on
        # every request.
        self._observe_children: dict[tuple[str, str], tuple[Any, Any]] = {}

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None, host: str) -> RestClientMetrics:
        """The recorder of the client of ``host`` in ``registry``; a recorder that records nothing when None."""
        return cls(registry, host) if registry is not None else _NullRestClientMetrics()  # type: ignore[return-value]

    def observe(self, method: str, code: str, seconds: float) -> None:
        """Count one HTTP attempt by ``code`` (``"<error>"`` without a response) and record its latency
        up to the response headers (the body too for non-watch requests)."""
        children = self._observe_children.get((method, code))
        if children is None:
            children = (
                self._requests.labels(code=code, method=method, host=self.host),
                self._duration.labels(verb=method, host=self.host),
            )
            self._observe_children[(method, code)] = children
        children[0].inc()
        children[1].observe(seconds)

    def retried(self, method: str, code: str) -> None:
        """Count one attempt that failed with ``code`` and is being retried."""
        self._retries.labels(code=code, verb=method, host=self.host).inc()

    def throttled(self, method: str, seconds: float) -> None:
        """Record one wait on the client-side limit (made only while a bucket applies)."""
        self._throttle.labels(verb=method, host=self.host).observe(seconds)


class _NullRestClientMetrics:
    host = ""

    def observe(self, method: str, code: str, seconds: float) -> None:
        return None

    def retried(self, method: str, code: str) -> None:
        return None

    def throttled(self, method: str, seconds: float) -> None:
        return None


class InformerMetrics:
    """Recorder for one informer (``resource`` = qualified plural, e.g. ``pods``, ``tfjobs.kubeflow.org``).

    Label children are resolved once here so the event loop only calls ``inc``/``set``.
    """

    EVENT_TYPES = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR")

    def __init__(self, registry: CollectorRegistry, resource: str) -> None:
        self.resource = resource
        self._restarts = _family(
            registry,
            "informer_watch_restarts",
            lambda: Counter(
                "informer_watch_restarts",
                "Watches re-established without a relist, by reason (timeout, eof, stalled, error, ...).",
                ["resource", "reason"],
                registry=registry,
            ),
        )
        self._relists = _family(
            registry,
            "informer_relists",
            lambda: Counter(
                "informer_relists",
                "Full lists performed by informers, by reason (initial, expired, error, ...).",
                ["resource", "reason"],
                registry=registry,
            ),
        )
        events = _family(
            registry,
            "informer_events",
            lambda: Counter(
                "informer_events",
                "Watch events received by informers, by event type.",
                ["resource", "type"],
                registry=registry,
            ),
        )
        last = _family(
            registry,
            "informer_last_event_timestamp_seconds",
            lambda: Gauge(
                "informer_last_event_timestamp_seconds",
                "Unix time of the last watch event or bookmark (or completed list) seen by the informer.",
                ["resource"],
                registry=registry,
            ),
        )
        objects = _family(
            registry,
            "informer_cache_objects",
            lambda: Gauge(
                "informer_cache_objects",
                "Objects currently held in the informer's cache.",
                ["resource"],
                registry=registry,
            ),
        )
        self._events = {t: events.labels(resource=resource, type=t) for t in self.EVENT_TYPES}
        for reason in WATCH_RESTART_REASONS:
            self._restarts.labels(resource=resource, reason=reason)
        for reason in RELIST_REASONS:
            self._relists.labels(resource=resource, reason=reason)
        self._events_family = events
        self._last = last.labels(resource=resource)
        self._objects = objects.labels(resource=resource)

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None, resource: str) -> InformerMetrics:
        """The recorder of the informer of ``resource``; a recorder that records nothing when None."""
        return cls(registry, resource) if registry is not None else _NullInformerMetrics()  # type: ignore[return-value]

    def watch_restart(self, reason: str) -> None:
        """Count a watch re-established without a relist (a reason of ``WATCH_RESTART_REASONS``)."""
        self._restarts.labels(resource=self.resource, reason=reason).inc()

    def relist(self, reason: str) -> None:
        """Count a full list begun (a reason of ``RELIST_REASONS``; ``initial`` first)."""
        self._relists.labels(resource=self.resource, reason=reason).inc()

    def events(self, event_type: str, count: int) -> None:
        """Count ``count`` watch events of ``event_type`` (bookmarks included; any type is accepted)."""
        child = self._events.get(event_type)
        if child is None:
            child = self._events_family.labels(resource=self.resource, type=event_type)
        child.inc(count)

    def last_event(self, unix_time: float) -> None:
        """Set the wall time of the last event, bookmark or list (Grafana's "seconds since" is ``time() - value``)."""
        self._last.set(unix_time)

    def cache_objects(self, count: int) -> None:
        """Set the number of objects in the informer's cache."""
        self._objects.set(count)


class _NullInformerMetrics:
    resource = ""

    def watch_restart(self, reason: str) -> None:
        return None

    def relist(self, reason: str) -> None:
        return None

    def events(self, event_type: str, count: int) -> None:
        return None

    def last_event(self, unix_time: float) -> None:
        return None

    def cache_objects(self, count: int) -> None:
        return None


class LeaderElectionMetrics:
    """``leader_election_master_status{name}``: 1 while this process leads lease ``name``."""

    def __init__(self, registry: CollectorRegistry, name: str) -> None:
        status = _family(
            registry,
            "leader_election_master_status",
            lambda: Gauge(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
                "1 indicates master. 'name' is the string used to identify the lease.",
                ["name"],
                registry=registry,
            ),
        )
        self._status = status.labels(name=name)
        self._status.set(0)

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None, name: str) -> LeaderElectionMetrics:
        """The recorder of lease ``name`` (its gauge starts at 0); a recorder that records nothing when None."""
        return cls(registry, name) if registry is not None else _NullLeaderElectionMetrics()  # type: ignore[return-value]

    def leading(self, is_leading: bool) -> None:
        """Set the gauge: 1 while this process leads, else 0."""
        self._status.set(1 if is_leading else 0)


class _NullLeaderElectionMetrics:
    def leading(self, is_leading: bool) -> None:
        return None
