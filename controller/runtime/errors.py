"""Typed errors of the API client: what the apiserver said, as exceptions a controller can branch on.

Why: a controller's decisions hinge on *which* error came back (404 → already gone, 409 AlreadyExists →
our earlier create landed, 409 Conflict → re-read and retry, 410 → relist, 429 → back off for
``Retry-After``). Code that catches ``ApiError`` and compares ``status`` integers everywhere gets those
distinctions wrong, so this module maps every response onto one small class hierarchy, in one place, the
way apimachinery's ``errors.IsNotFound`` & co. classify a ``Status``. Failures below HTTP (connection
refused/reset, TLS, a stalled stream) are :class:`TransportError`, never an ``ApiError``: there is no status
to classify.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = [
    "KubeClientError",
    "ApiError",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "MethodNotAllowed",
    "NotAcceptable",
    "AlreadyExists",
    "Conflict",
    "Expired",
    "UnsupportedMediaType",
    "Invalid",
    "TooManyRequests",
    "ServerError",
    "ServerTimeout",
    "ServiceUnavailable",
    "TransportError",
    "StreamStalled",
    "ResponseDecodeError",
    "error_from_response",
    "error_from_status",
    "is_too_large_resource_version",
    "ERROR_REASONS",
    "EXPECTED_ERROR_REASONS",
    "error_reason",
]


class KubeClientError(Exception):
    """Base of everything the API client raises on purpose."""


class ApiError(KubeClientError):
    """The apiserver answered with a non-2xx status (or a watch ``ERROR`` event).

    Attributes mirror ``metav1.Status``: ``status`` (HTTP code), ``reason`` (e.g. ``"NotFound"``; ``""``
    when the server sent none), ``message``, ``details`` (dict, possibly empty), ``retry_after`` (the
    ``Retry-After`` header or ``details.retryAfterSeconds``, in seconds; ``None`` without either) and ``body`` (the decoded Status dict, ``None`` for a plain-text body).
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        details: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retry_after = retry_after
        self.body = body

    @property
    def code(self) -> int:
        """Alias of ``status``: the name the ``Status`` object itself uses."""
        return self.status

    @property
    def causes(self) -> list[dict[str, Any]]:
        """``details.causes`` (``[]`` when absent): field-level reasons of Invalid/Conflict/Timeout errors."""
        causes = self.details.get("causes")
        return list(causes) if isinstance(causes, list) else []

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.status}{reason}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.reason!r}, {self.message!r})"


class BadRequest(ApiError):
    """400: malformed request (bad selector, bad continue token, namespace mismatch, ...)."""


class Unauthorized(ApiError):
    """401: credentials missing or rejected."""


class Forbidden(ApiError):
    """403: RBAC (or admission) refused the request.

    ``permission`` (set by the client that sent the request; ``""`` otherwise) names what was refused the
    way an RBAC rule grants it — verb, resource[/subresource], API group, namespace — so the message says
    which rule is missing even when the server's own message does not.
    """

    permission: str = ""

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base} (missing RBAC permission: {self.permission})" if self.permission else base


class NotFound(ApiError):
    """404: the object, or the whole resource type/path (plain-text ``404 page not found``), does not exist."""


class MethodNotAllowed(ApiError):
    """405: the verb is not served on this resource."""


class NotAcceptable(ApiError):
    """406: no acceptable response media type."""


class AlreadyExists(ApiError):
    """409 with reason ``AlreadyExists``: a create hit an existing name."""


class Conflict(ApiError):
    """409 otherwise: stale ``resourceVersion``, failed precondition, or a server-side apply conflict."""


class Expired(ApiError):
    """410 (reason ``Expired``, or ``Gone`` from old servers): the resourceVersion or continue token is
    older than the server's history. The only right reaction is a fresh list."""


class UnsupportedMediaType(ApiError):
    """415: the body's Content-Type (e.g. strategic merge on a custom resource) is not accepted."""


class Invalid(ApiError):
    """422: validation failed; ``causes`` lists ``{"reason", "message", "field"}`` per problem."""


class TooManyRequests(ApiError):
    """429: throttled (API Priority and Fairness, or e.g. a PDB-blocked eviction); see ``retry_after``."""


class ServerError(ApiError):
    """5xx."""


class ServerTimeout(ServerError):
    """500 ``ServerTimeout`` or 504 ``Timeout``: the server gave up; a write may still have happened."""


class ServiceUnavailable(ServerError):
    """503: the apiserver is starting or shutting down (usually with ``Retry-After``)."""


class TransportError(KubeClientError):
    """No (complete) HTTP response: connection refused/reset, DNS, TLS, timeout, the server vanished
    mid-body.

    ``request_sent`` is False only when the connection could not even be established — then the server
    cannot have acted on the request, and retrying is safe for every verb.
    """

    def __init__(self, message: str, *, request_sent: bool = True) -> None:
        super().__init__(message)
        self.request_sent = request_sent


class StreamStalled(TransportError):
    """A watch stream delivered no bytes for longer than its inactivity timeout (a silently dead
    connection: half-open TCP, a proxy buffering chunks). Reconnect from the last resourceVersion."""


class ResponseDecodeError(KubeClientError):
    """A 2xx response (or a watch line) that is not the JSON it must be: a proxy's HTML page, a truncated
    body. Nothing was decided by the server's semantics, so treat it like a broken connection."""


# HTTP code → (class, the reason client-go assumes when the body does not say; used for plain-text bodies).
_BY_CODE: dict[int, tuple[type[ApiError], str]] = {
    400: (BadRequest, "BadRequest"),
    401: (Unauthorized, "Unauthorized"),
    403: (Forbidden, "Forbidden"),
    404: (NotFound, "NotFound"),
    405: (MethodNotAllowed, "MethodNotAllowed"),
    406: (NotAcceptable, "NotAcceptable"),
    409: (Conflict, "Conflict"),
    410: (Expired, "Expired"),
    415: (UnsupportedMediaType, "UnsupportedMediaType"),
    422: (Invalid, "Invalid"),
    429: (TooManyRequests, "TooManyRequests"),
    500: (ServerError, "InternalError"),
    503: (ServiceUnavailable, "ServiceUnavailable"),
    504: (ServerTimeout, "Timeout"),
}

# Reasons that decide the class whatever the code says (a Status can carry e.g. reason Expired with 410
# or, from old servers, Gone).
_BY_REASON: dict[str, type[ApiError]] = {
    "AlreadyExists": AlreadyExists,
    "Expired": Expired,
    "Gone": Expired,
    "ServerTimeout": ServerTimeout,
    "Timeout": ServerTimeout,
}


def _class_for(status: int, reason: str) -> type[ApiError]:
    cls = _BY_REASON.get(reason)
    if cls is not None:
        return cls
    known = _BY_CODE.get(status)
    if known is not None:
        return known[0]
    if status >= 500:
        return ServerError
    return ApiError


def _parse_retry_after(value: str | None) -> float | None:
    """Retry-After in delta-seconds; an HTTP-date (never sent by kube-apiserver) counts as absent."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_from_status(status_obj: Mapping[str, Any], retry_after_header: str | None = None) -> ApiError:
    """Classify a decoded ``Status`` object (an error response body or a watch ``ERROR`` event's object)
    into exactly one :class:`ApiError` subclass; never raises."""
    code = status_obj.get("code")
    status = code if isinstance(code, int) else 500
    reason = status_obj.get("reason") or ""
    if not isinstance(reason, str):
        reason = str(reason)
    message = status_obj.get("message")
    if not isinstance(message, str) or not message:
        message = reason or f"HTTP {status}"
    details = status_obj.get("details")
    details = details if isinstance(details, dict) else {}
    retry_after = _parse_retry_after(retry_after_header)
    if retry_after is None:
        seconds = details.get("retryAfterSeconds")
        if isinstance(seconds, (int, float)) and seconds > 0:
            retry_after = float(seconds)
    cls = _class_for(status, reason)
    return cls(status, reason, message, details, retry_after, dict(status_obj))


def error_from_response(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ApiError:
    """Classify a non-2xx HTTP response from its code, raw body and headers into exactly one
    :class:`ApiError` subclass; never raises, whatever the body.

    A JSON ``Status`` body is authoritative for reason/message/details (its ``code`` is overridden by the
    HTTP status, which is what actually happened on the wire). Anything else — plain text such as
    ``404 page not found`` or ``Too many requests, please try again later.``, HTML from a proxy, an empty
    body — keeps the text (trimmed) as the message and takes the reason client-go would assume for the code.
    """
    retry_after_header = headers.get("Retry-After") if headers is not None else None
    decoded: Any = None
    if body[:1] == b"{":
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
    if isinstance(decoded, dict) and decoded.get("kind") == "Status":
        decoded = dict(decoded)
        decoded["code"] = status
        return error_from_status(decoded, retry_after_header)
    text = body.decode("utf-8", errors="replace").strip()
    if len(text) > 512:
        text = text[:512] + "..."
    default_reason = _BY_CODE.get(status, (ApiError, ""))[1]
    message = text or f"HTTP {status}"
    cls = _class_for(status, default_reason)
    return cls(status, default_reason, message, None, _parse_retry_after(retry_after_header), None)


def is_too_large_resource_version(err: BaseException) -> bool:
    """The server has not yet seen the resourceVersion asked for (504 with cause ResourceVersionTooLarge).

    client-go treats this like *Expired* for relist purposes: list again without a resourceVersion.
    """
    if not isinstance(err, ApiError) or err.status != 504:
        return False
    return any(c.get("type") == "ResourceVersionTooLarge" for c in err.causes if isinstance(c, dict)) or (
        "Too large resource version" in err.message
    )


# -- failure kinds, for logs and metrics ----------------------------------------------------------------------

ERROR_REASONS: tuple[str, ...] = (
    "throttled",  # 429: API Priority and Fairness (or a PDB) asks us to slow down
    "server_error",  # 5xx: the apiserver (or etcd, or a webhook) is unavailable or timed out
    "transport",  # no complete response: connection refused/reset, timeout, a body that is not JSON
    "conflict",  # 409: a stale resourceVersion or a name taken meanwhile
    "not_found",  # 404: the object was deleted meanwhile (e.g. a status write after the job was deleted)
    "forbidden",  # 401/403: credentials or RBAC
    "invalid",  # 400/422: the server rejected what we sent
    "api_error",  # any other status
    "unexpected",  # not an API or transport error: a bug
)
"""Every value :func:`error_reason` returns: a bounded set, safe as a metric label."""

EXPECTED_ERROR_REASONS: frozenset[str] = frozenset({"throttled", "server_error", "transport", "conflict", "not_found"})
"""Failures a healthy controller meets routinely under load, restarts and concurrent writers: retried with
backoff and worth one warning line, never a traceback. The others need a human (credentials, RBAC, a
request the server rejects, a bug)."""


def error_reason(exc: BaseException) -> str:
    """The kind of failure ``exc`` is, one of :data:`ERROR_REASONS`."""
    if isinstance(exc, TooManyRequests):
        return "throttled"
    if isinstance(exc, ServerError):
        return "server_error"
    if isinstance(exc, (TransportError, ResponseDecodeError)):
        return "transport"
    if isinstance(exc, (Conflict, AlreadyExists)):
        return "conflict"
    if isinstance(exc, NotFound):
        return "not_found"
    if isinstance(exc, (Unauthorized, Forbidden)):
        return "forbidden"
    if isinstance(exc, (BadRequest, Invalid)):
        return "invalid"
    if isinstance(exc, ApiError):
        return "server_error" if exc.status >= 500 else "api_error"
    return "unexpected"
