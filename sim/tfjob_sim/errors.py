"""API errors as kube-apiserver reports them: a ``Status`` body, an HTTP code, a reason.

Every layer of the simulator raises :class:`ApiError`; only the HTTP layer turns it into a
response. Keeping the constructors here means one place decides the exact message forms that
clients (kubectl, client-go, kubernetes-asyncio) parse or show to users.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the API server answers with a ``Status`` object.

    ``plain_text`` marks the few cases where the real server answers with a plain-text body
    instead (unknown paths, API Priority and Fairness throttling).
    """

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
        plain_text: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after
        self.plain_text = plain_text
        self.metadata = metadata

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": dict(self.metadata or {}),
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            body["reason"] = self.reason
        details = dict(self.details or {})
        if self.retry_after:
            details.setdefault("retryAfterSeconds", self.retry_after)
        if details:
            body["details"] = details
        body["code"] = self.code
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def _details(name: str, resource: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404, "NotFound", f'{_qualified(resource, group)} "{name}" not found', _details(name, resource, group)
    )


def already_exists(resource: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{_qualified(resource, group)} "{name}" already exists',
        _details(name, resource, group),
    )


def conflict(resource: str, name: str, group: str = "", detail: str | None = None) -> ApiError:
    detail = detail or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {detail}',
        _details(name, resource, group),
    )


def invalid(kind: str, name: str, causes: list[dict[str, str]], group: str = "") -> ApiError:
    """422 Invalid. ``causes`` items: ``{"reason", "message", "field"}`` as apimachinery emits them.

    The message joins "<field>: <message>" of every cause the way field.ErrorList.ToAggregate does:
    a single error is printed bare, several are wrapped in ``[...]``.
    """
    # Like utilerrors.NewAggregate via ToAggregate: identical messages are listed once in the summary,
    # while every cause stays in details.
    parts = list(dict.fromkeys(f"{c['field']}: {c['message']}" if c.get("field") else c["message"] for c in causes))
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed(verb: str, resource: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f'{verb} is not supported on resources of kind "{resource}"')


def unsupported_media_type(accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: " + ", ".join(accepted),
    )


def expired(message: str, metadata: dict[str, Any] | None = None) -> ApiError:
    return ApiError(410, "Expired", message, metadata=metadata)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", f"Internal error occurred: {message}", {"causes": [{"message": message}]})


def page_not_found() -> ApiError:
    return ApiError(404, "", "404 page not found", plain_text=True)
