"""Kubernetes Events for the objects a controller manages (client-go's ``record`` package, small).

Events are how users learn *why* something happened (``kubectl describe``), so every recorded
event is written as a core/v1 Event whose involvedObject is the object. Repeats of the same
(object, type, reason, message) are aggregated into one Event with a growing ``count``, as
client-go does, so a condition that persists does not flood the namespace.

Events are best effort by Kubernetes convention: a failed write must never fail the reconcile
that caused it. Failures are logged with the event's content (so nothing is lost silently) and
counted in ``events_dropped_total``.
"""

from __future__ import annotations

import secrets
import socket
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable

import structlog
from prometheus_client import CollectorRegistry, Counter

from controller.runtime.client import EVENTS, ApiClient
from controller.runtime.errors import ApiError, NotFound, TransportError

_CACHE_SIZE = 4096
DROP_REASONS = (
    "TooManyRequests", "ServerError", "ServerTimeout", "ServiceUnavailable", "TransportError", "Forbidden", "Invalid",
)  # fmt: skip


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Writes Events attributed to ``component`` (e.g. ``tfjob-controller``)."""

    def __init__(
        self,
        client: ApiClient,
        component: str,
        registry: CollectorRegistry | None = None,
        now: Callable[[], str] = _now,
        instance: str | None = None,
    ) -> None:
        self.client = client
        self.component = component
        self.instance = instance or socket.gethostname()
        self._now = now
        self._seen: OrderedDict[tuple[str, str, str, str], tuple[str, int]] = OrderedDict()
        self._dropped = (
            Counter("events_dropped", "Events that could not be written to the API server", ["reason"], registry=registry)
            if registry is not None
            else None
        )
        if self._dropped is not None:
            # At 0 up front, so rate() sees the first drop: the causes an overloaded or unreachable API server
            # and a tightened RBAC or admission give (other error classes appear with their first drop).
            for reason in DROP_REASONS:
                self._dropped.labels(reason=reason)
        self.log = structlog.get_logger("controller.runtime.events")

    async def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = (meta.get("uid", ""), type_, reason, message)
        now = self._now()
        try:
            seen = self._seen.get(key)
            if seen is not None:
                name, count = seen
                try:
                    await self.client.patch(
                        EVENTS, name, {"count": count + 1, "lastTimestamp": now}, namespace=namespace, patch_type="merge"
                    )
                    self._remember(key, name, count + 1)
                    return
                except NotFound:
                    pass  # the Event expired (events have a TTL); write a fresh one below
            name = f"{meta.get('name', 'object')}.{secrets.token_hex(8)}"
            await self.client.create(
                EVENTS,
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": name, "namespace": namespace},
                    "involvedObject": {
                        "apiVersion": obj.get("apiVersion", ""),
                        "kind": obj.get("kind", ""),
                        "name": meta.get("name", ""),
                        "namespace": namespace,
                        "uid": meta.get("uid", ""),
                        "resourceVersion": meta.get("resourceVersion", ""),
                    },
                    "reason": reason,
                    "message": message,
                    "type": type_,
                    "source": {"component": self.component},
                    "reportingComponent": self.component,
                    "reportingInstance": self.instance,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
                namespace=namespace,
            )
            self._remember(key, name, 1)
        except (ApiError, TransportError) as exc:
            if self._dropped is not None:
                self._dropped.labels(reason=type(exc).__name__).inc()
            self.log.warning(
                "event not written",
                object=f"{namespace}/{meta.get('name')}",
                type=type_,
                reason=reason,
                message=message,
                error=str(exc),
            )

    def _remember(self, key: tuple[str, str, str, str], name: str, count: int) -> None:
        self._seen[key] = (name, count)
        self._seen.move_to_end(key)
        while len(self._seen) > _CACHE_SIZE:
            self._seen.popitem(last=False)
