"""What every route of the simulated kube-apiserver shares: the parsed path, content negotiation, body
decoding, write options and the response shapes.

Why one module: the handlers of :mod:`tfjob_sim.apiserver.routes` must answer malformed requests
exactly as kube-apiserver does (the 406 of an unknown media type, the 415 of a body, the 400 of a bad
``dryRun``), and they do so through these functions, so that every handler says it the same way.

The handlers see the server through :class:`ApiServer`, the part of :class:`tfjob_sim.server.SimServer`
they read; this module imports no handler and not the server, so nothing here can form an import circle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
import yaml
from aiohttp import web
from multidict import CIMultiDict

from tfjob_sim import errors
from tfjob_sim.discovery import Discovery
from tfjob_sim.errors import ApiError
from tfjob_sim.faults import Faults
from tfjob_sim.openapi import OpenAPI
from tfjob_sim.query import parse_bool
from tfjob_sim.resources import Registry, ResourceType
from tfjob_sim.store import Store, WriteOptions, WriteResult
from tfjob_sim.watch import WatchHub

JSON = "application/json"
MAX_BODY = 3 * 1024 * 1024 + 64 * 1024
USER: web.RequestKey[Any] = web.RequestKey("user", Any)  # secure mode: the authenticated UserInfo
# The request's APF flow schema (headers to send) and its seat, which a watch gives back once set up.
FLOW: web.RequestKey[Any] = web.RequestKey("flow", Any)
SEAT: web.RequestKey[Any] = web.RequestKey("seat", Any)
_NOT_ACCEPTABLE = ApiError(
    406,
    "NotAcceptable",
    "only the following media types are accepted: application/json, "
    "application/yaml, application/vnd.kubernetes.protobuf",
)


class ApiServer(Protocol):
    """The server as its handlers see it (:class:`tfjob_sim.server.SimServer` is one)."""

    store: Store
    hub: WatchHub
    faults: Faults
    discovery: Discovery
    openapi: OpenAPI
    auth: Any  # tfjob_sim.auth.AuthLayer in secure mode, else None
    rv_wait_timeout: float
    shutting_down: bool

    def kubelet(self) -> Any:
        """The kubelet that serves pod logs, or None when none runs."""
        ...

    def schedule_restart(self) -> None:
        """Restart the server from its owner's task group; RuntimeError when nobody can."""
        ...

    def metrics_text(self) -> str:
        """The text of ``/metrics``."""
        ...


# ------------------------------------------------------------------ the parsed path


class Route:
    """A parsed API path: the resource, its namespace, object name and subresource (None when absent)."""

    __slots__ = ("rt", "namespace", "name", "subresource", "watch_path")

    def __init__(
        self, rt: ResourceType, namespace: str | None, name: str | None, subresource: str | None, watch_path: bool
    ) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.watch_path = watch_path

    @property
    def key(self) -> str:
        return self.rt.qualified + (f"/{self.subresource}" if self.subresource else "")


Handler = Callable[[ApiServer, web.BaseRequest, Route], Awaitable[web.StreamResponse]]
"""A resource route's handler: the request of a path :func:`parse_route` understood."""


def parse_route(registry: Registry, path: str) -> Route | None:
    """The route of an ``/api/...`` or ``/apis/...`` path, or None when it names no served resource
    (kube-apiserver answers those with its plain-text 404)."""
    parts = [p for p in path.split("/")]
    if len(parts) < 3 or parts[0] != "":
        return None
    if parts[1] == "api":
        if len(parts) < 4 or parts[2] != "v1":
            return None
        group, version, rest = "", "v1", parts[3:]
    elif parts[1] == "apis":
        if len(parts) < 5:
            return None
        group, version, rest = parts[2], parts[3], parts[4:]
    else:
        return None
    if rest and rest[-1] == "":
        rest = rest[:-1]
    if not rest or any(p == "" for p in rest):
        return None
    watch_path = False
    if rest[0] == "watch":
        watch_path = True
        rest = rest[1:]
        if not rest:
            return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
        namespace = rest[1]
        rest = rest[2:]
        rt = registry.lookup(group, version, rest[0])
        if rt is None or not rt.namespaced:
            return None
    else:
        rt = registry.lookup(group, version, rest[0])
        if rt is None:
            return None
        if rt.namespaced and len(rest) > 1:
            return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if len(rest) > 3:
        return None
    if sub is not None and sub not in rt.subresources:
        return None
    if watch_path and sub is not None:
        return None
    return Route(rt, namespace, name, sub, watch_path)


def verb_of(method: str, route: Route, query: Any) -> str:
    """The Kubernetes verb of a request on ``route`` (what RBAC, APF and the request log name)."""
    if method == "GET":
        if route.watch_path or parse_bool(query.get("watch")):
            return "watch"
        return "get" if route.name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if route.name else "deletecollection"
    return method.lower()


# ------------------------------------------------------------------ reading a request


class Negotiated:
    """The response form an Accept header asked for: plain JSON or a meta.k8s.io Table."""

    __slots__ = ("table", "table_version")

    def __init__(self, table: bool, table_version: str = "v1") -> None:
        self.table = table
        self.table_version = table_version


def negotiate(accept: str | None) -> Negotiated:
    """JSON when JSON or */* is acceptable, Table when asked for (meta.k8s.io v1/v1beta1), else 406."""
    if not accept:
        return Negotiated(False)
    json_ok = False
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        params = {}
        for f in fields[1:]:
            k, _, v = f.partition("=")
            params[k.strip().lower()] = v.strip()
        if media in ("application/json", "*/*", "application/*"):
            if (
                params.get("as") == "Table"
                and params.get("g") == "meta.k8s.io"
                and params.get("v") in ("v1", "v1beta1")
            ):
                return Negotiated(True, params["v"])
            if "as" in params:
                continue  # e.g. PartialObjectMetadata: not served; fall through to plain JSON if offered
            json_ok = True
    if json_ok:
        return Negotiated(False)
    raise _NOT_ACCEPTABLE


async def read_body(request: web.BaseRequest, kind: str, *, allow_yaml: bool = True) -> Any:
    """The decoded body (JSON, YAML or protobuf by Content-Type); the 400, 413 or 415 the real server
    answers for a body it cannot read as a ``kind``."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}") from None
    ctype = (request.headers.get("Content-Type") or JSON).split(";")[0].strip().lower()
    if ctype in (JSON, "*/*", ""):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise errors.bad_request(
                f"the object provided is unrecognized (must be of type {kind}): couldn't "
                f"get version/kind; json parse error: {exc}"
            ) from None
    if ctype == "application/vnd.kubernetes.protobuf":
        from tfjob_sim import protobuf

        return protobuf.decode(raw)
    if ctype in ("application/yaml", "application/x-yaml", "text/yaml") and allow_yaml:
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise errors.bad_request(
                f"the object provided is unrecognized (must be of type {kind}): couldn't "
                f"get version/kind; yaml parse error: {exc}"
            ) from None
    raise errors.unsupported_media_type([JSON, "application/yaml", "application/vnd.kubernetes.protobuf"])


def write_options(request: web.BaseRequest) -> WriteOptions:
    """The options of a write from its query (dryRun, fieldValidation, fieldManager, force), or the 400/422
    kube-apiserver answers for a bad one before it reads the body."""
    query = request.query
    dry = query.getall("dryRun", [])
    for value in dry:
        if value != "All":
            raise errors.bad_request(f'dryRun: Unsupported value: "{value}": supported values: "All"')
    validation = query.get("fieldValidation", "Warn") or "Warn"
    if validation not in ("Strict", "Warn", "Ignore"):
        raise errors.bad_request(
            f'fieldValidation: Unsupported value: "{validation}": supported values: "Ignore", "Strict", "Warn"'
        )
    manager = query.get("fieldManager")
    if manager is not None and len(manager) > 128:
        raise errors.invalid(
            "PatchOptions",
            "",
            [
                {
                    "reason": "FieldValueTooLong",
                    "field": "fieldManager",
                    "message": "Too long: may not be more than 128 bytes",
                }
            ],
            "meta.k8s.io",
        )
    return WriteOptions(
        dry_run=bool(dry),
        field_validation=validation,
        field_manager=manager,
        force=parse_bool(query.get("force")),
        user_agent=request.headers.get("User-Agent", ""),
    )


# ------------------------------------------------------------------ responses


def json_response(
    body: Any, code: int = 200, headers: CIMultiDict | None = None, content_type: str = JSON
) -> web.Response:
    """``body`` (already encoded when bytes) as a JSON response."""
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    hdrs = headers if headers is not None else CIMultiDict()
    hdrs["Content-Type"] = content_type
    return web.Response(body=data, status=code, headers=hdrs)


def error_response(err: ApiError, extra: dict[str, str] | None = None) -> web.Response:
    """The Status of ``err`` (or its plain text, for the 404 of an unknown path) with its Retry-After."""
    headers: CIMultiDict[str] = CIMultiDict()
    if err.retry_after:
        headers["Retry-After"] = str(err.retry_after)
    for k, v in (extra or {}).items():
        headers[k] = v
    if err.plain_text:
        headers["Content-Type"] = "text/plain; charset=utf-8"
        headers["X-Content-Type-Options"] = "nosniff"
        return web.Response(body=(err.message + "\n").encode(), status=err.code, headers=headers)
    return json_response(err.status(), err.code, headers)


def warn_headers(warnings: list[str]) -> CIMultiDict[str]:
    """One ``Warning: 299 - "..."`` header per warning, as kube-apiserver escapes them."""
    headers: CIMultiDict[str] = CIMultiDict()
    for text in warnings:
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        headers.add("Warning", f'299 - "{escaped}"')
    return headers


def result_response(result: WriteResult) -> web.Response:
    """A store write's object, code and warnings."""
    return json_response(result.obj, result.code, warn_headers(result.warnings))


def flow_headers(request: web.BaseRequest, headers: CIMultiDict) -> None:
    """The APF classification headers of a classified request (sim/tfjob_sim/flowcontrol.py): none for a
    request authentication refused (the real filter chain authenticates first) or a long-running one."""
    schema = request.get(FLOW)
    if schema is not None:
        for name, value in schema.headers:
            headers[name] = value
