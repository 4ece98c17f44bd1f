"""The simulated kube-apiserver's HTTP layer: a thin translation from requests to the Store.

Why this module exists: real clients (kubectl, client-go, kubernetes-asyncio, kopf) must not be
able to tell this server from kube-apiserver. Everything semantic lives in the store and the watch
hub; this layer owns what is HTTP-specific: URL routing, query-parameter parsing (lenient booleans,
RV/limit/continue validation), content negotiation (JSON, Table, 406), body decoding (JSON/YAML,
patch media types, 415), response shapes and codes, Warning headers, the plain-text 404, watch
streaming, fault injection and the request log, and the ``/_sim/`` control API.

Contract: :class:`SimServer` ``(store, hub, faults, discovery, openapi)``; ``await start(host, port)``
(port 0 = pick a free port; ``.port`` / ``.url`` afterwards), ``await stop()``, ``await restart()``
(all connections drop, same port, state and RVs kept). It uses aiohttp's low-level server (one
handler, no router) to keep per-request overhead low.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

import orjson
import yaml
from aiohttp import web
from multidict import CIMultiDict

from tfjob_sim import errors, flowcontrol
from tfjob_sim.discovery import Discovery
from tfjob_sim.errors import ApiError
from tfjob_sim.faults import Faults
from tfjob_sim.logs import serve_pod_log
from tfjob_sim.openapi import OpenAPI
from tfjob_sim.query import int_param as _int_param
from tfjob_sim.query import parse_bool
from tfjob_sim.resources import ResourceType
from tfjob_sim.store import Store, WriteOptions, WriteResult, parse_rv, rv_too_large
from tfjob_sim.table import to_table
from tfjob_sim.watch import WatchHub, json_line

log = logging.getLogger(__name__)

JSON = "application/json"
MAX_BODY = 3 * 1024 * 1024 + 64 * 1024
_PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
_HEALTH = {"/healthz", "/livez", "/readyz"}
USER: web.RequestKey[Any] = web.RequestKey("user", Any)  # secure mode: the authenticated UserInfo
# The request's APF flow schema (headers to send) and its seat, which a watch gives back once set up.
FLOW: web.RequestKey[Any] = web.RequestKey("flow", Any)
SEAT: web.RequestKey[Any] = web.RequestKey("seat", Any)
_LONG_RUNNING_SUBRESOURCES = frozenset({"log", "exec", "attach", "portforward", "proxy"})
_NOT_ACCEPTABLE = ApiError(
    406,
    "NotAcceptable",
    "only the following media types are accepted: application/json, "
    "application/yaml, application/vnd.kubernetes.protobuf",
)


class Route:
    """A parsed API path."""

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


class _Negotiated:
    __slots__ = ("table", "table_version")

    def __init__(self, table: bool, table_version: str = "v1") -> None:
        self.table = table
        self.table_version = table_version


def negotiate(accept: str | None) -> _Negotiated:
    """JSON when JSON or */* is acceptable, Table when asked for (meta.k8s.io v1/v1beta1), else 406."""
    if not accept:
        return _Negotiated(False)
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
                return _Negotiated(True, params["v"])
            if "as" in params:
                continue  # e.g. PartialObjectMetadata: not served; fall through to plain JSON if offered
            json_ok = True
    if json_ok:
        return _Negotiated(False)
    raise _NOT_ACCEPTABLE


class SimServer:
    """aiohttp low-level server exposing the store as the Kubernetes REST API."""

    def __init__(
        self,
        store: Store,
        hub: WatchHub,
        faults: Faults,
        *,
        kubelet: Callable[[], Any] = lambda: None,
        schedule_restart: Callable[[], None] | None = None,
    ) -> None:
        """``kubelet()``: the kubelet that serves pod logs (None: no kubelet runs); ``schedule_restart``:
        restarts this server from its owner's task group (``/_sim/restart``; None: not offered)."""
        self.store = store
        self.hub = hub
        self.faults = faults
        self._kubelet = kubelet
        self._schedule_restart = schedule_restart
        self.discovery = Discovery(store.registry)
        self.openapi = OpenAPI(store.registry)
        self.host = "127.0.0.1"
        self.port = 0
        self._runner: web.ServerRunner | None = None
        self._site: web.TCPSite | None = None
        self.rv_wait_timeout = 3.0
        self.shutting_down = False
        self.restarts = 0
        # Secure mode (sim/tfjob_sim/auth.py): TLS, and authentication + authorization of every request.
        self.ssl_context: Any = None
        self.auth: Any = None
        # kube-apiserver --enable-priority-and-fairness: classify, limit and queue every request, say so in two
        # response headers (sim/tfjob_sim/flowcontrol.py); without it, the max-in-flight filter limits.
        self.flow_control: flowcontrol.FlowControl | None = None
        self.max_in_flight = flowcontrol.MaxInFlight()

    @property
    def priority_and_fairness(self) -> bool:
        return self.flow_control is not None

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context is not None else 'http'}://{self.host}:{self.port}"

    # ------------------------------------------------------------------ lifecycle

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        loop = asyncio.get_running_loop()

        def make_request(message: Any, payload: Any, protocol: Any, writer: Any, task: Any) -> web.BaseRequest:
            return web.BaseRequest(message, payload, protocol, writer, task, loop, client_max_size=MAX_BODY)

        # handler_cancellation: a watch whose client went away is cancelled at once instead of
        # lingering until its next write; access_log off: it costs more than a request here.
        server = web.Server(self._handle, request_factory=make_request, handler_cancellation=True, access_log=None)
        runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, host, port, reuse_address=True, backlog=1024, ssl_context=self.ssl_context)
        await site.start()
        self._runner, self._site = runner, site
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        else:
            self.port = port
        self.discovery.server_address = f"{host}:{self.port}"
        self.shutting_down = False

    async def stop(self) -> None:
        self.shutting_down = True
        self.hub.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
            self._site = None

    async def restart(self) -> None:
        """Drop every connection and listen again on the same port; the store is untouched."""
        port = self.port
        await self.stop()
        await self.start(self.host, port)
        self.restarts += 1

    # ------------------------------------------------------------------ responses

    @staticmethod
    def _json(body: Any, code: int = 200, headers: CIMultiDict | None = None, content_type: str = JSON) -> web.Response:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        hdrs = headers if headers is not None else CIMultiDict()
        hdrs["Content-Type"] = content_type
        return web.Response(body=data, status=code, headers=hdrs)

    def _error(self, err: ApiError, extra: dict[str, str] | None = None) -> web.Response:
        headers: CIMultiDict[str] = CIMultiDict()
        if err.retry_after:
            headers["Retry-After"] = str(err.retry_after)
        for k, v in (extra or {}).items():
            headers[k] = v
        if err.plain_text:
            headers["Content-Type"] = "text/plain; charset=utf-8"
            headers["X-Content-Type-Options"] = "nosniff"
            return web.Response(body=(err.message + "\n").encode(), status=err.code, headers=headers)
        return self._json(err.status(), err.code, headers)

    @staticmethod
    def _warn_headers(warnings: list[str]) -> CIMultiDict[str]:
        headers: CIMultiDict[str] = CIMultiDict()
        for text in warnings:
            escaped = text.replace("\\", "\\\\").replace('"', '\\"')
            headers.add("Warning", f'299 - "{escaped}"')
        return headers

    # ------------------------------------------------------------------ routing

    def route(self, path: str) -> Route | None:
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
            rt = self.store.registry.lookup(group, version, rest[0])
            if rt is None or not rt.namespaced:
                return None
        else:
            rt = self.store.registry.lookup(group, version, rest[0])
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

    @staticmethod
    def verb_of(method: str, route: Route, query: Any) -> str:
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

    # ------------------------------------------------------------------ the handler

    def _admit(self, request: web.BaseRequest, path: str, route: Route | None, verb: str) -> None:
        """Secure mode: authenticate and authorize, or raise the 401/403 Status; the user is kept on
        the request for the APIs that answer about it (access reviews, whoami)."""
        request[USER] = self.auth.admit(request.headers, request.method, path, route, verb)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        path = request.path
        if path.startswith("/_sim/"):
            if self.auth is not None:
                try:
                    self._admit(request, path, None, "")
                except ApiError as err:
                    return self._error(err)
            return await self._sim_api(request)
        route = self.route(path) if path.startswith("/api") else None
        verb = self.verb_of(request.method, route, request.query) if route is not None else ""
        user_agent = request.headers.get("User-Agent", "")
        record = self.faults.start_record(
            request.method,
            path,
            verb,
            route.key if route else "",
            route.namespace if route else None,
            route.name if route else None,
            user_agent,
        )
        seat: flowcontrol.Seat | None = None
        try:
            if self.auth is not None:
                try:
                    self._admit(request, path, route, verb)
                except ApiError as err:
                    if err.code == 403 and self.flow_control is not None:
                        # The real chain classifies between authentication and authorization: a 403 names its flow.
                        user = self.auth.authenticate(request.headers)
                        if user is not None:
                            self._classify(request, path, route, verb, user)
                    raise
            if route is None or route.subresource not in _LONG_RUNNING_SUBRESOURCES:
                seat = await self._flow_admit(request, path, route, verb)
            if route is not None:
                decision = self.faults.check(verb, route.key, route.name, user_agent)
                if decision.latency:
                    await asyncio.sleep(decision.latency)  # injected latency, not synchronisation
                if decision.drop:
                    record.fault = "drop"
                    record.code = 0
                    if request.transport is not None:
                        request.transport.abort()
                    raise asyncio.CancelledError()
                if decision.error is not None:
                    record.fault = f"error {decision.error.code}"
                    raise _Injected(decision.error, decision.extra_headers)
                response = await self._resource_request(request, route, verb)
            else:
                response = await self._non_resource(request, path)
        except _Injected as injected:
            response = self._error(injected.error, injected.headers)
        except ApiError as err:
            response = self._error(err)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug in the simulator: answer like the apiserver's panic handler, and log
            log.exception("internal error handling %s %s", request.method, path)
            response = self._error(errors.internal(f"simulator bug: {type(exc).__name__}: {exc}"))
        finally:
            if seat is not None:
                seat.release()
        record.code = response.status
        if not response.prepared:  # a watch's were sent with its first byte
            self._flow_headers(request, response.headers)
        return response

    async def _flow_admit(
        self, request: web.BaseRequest, path: str, route: Route | None, verb: str
    ) -> flowcontrol.Seat | None:
        """A seat for the request from API Priority and Fairness (or, without it, the max-in-flight filter);
        raises the 429 when it is refused. The flow schema is kept on the request for the response headers."""
        fc = self.flow_control
        if fc is None:
            if verb == "watch":
                return None  # long-running: max-in-flight does not count it
            return self.max_in_flight.admit(flowcontrol.is_mutating(verb, request.method))
        who, info, schema = self._classify(request, path, route, verb, request.get(USER))
        seat = await fc.admit(schema, who, info, fc.wait_limit(request.query.get("timeout")))
        request[SEAT] = seat
        return seat

    def _classify(
        self, request: web.BaseRequest, path: str, route: Route | None, verb: str, user: Any
    ) -> tuple[flowcontrol.Requester, flowcontrol.RequestInfo, flowcontrol.Schema]:
        """The requester, the request and its flow schema (kept on the request for the response headers)."""
        fc = self.flow_control
        assert fc is not None
        if user is None:
            who = flowcontrol.ANONYMOUS_REQUESTER
        else:
            who = flowcontrol.Requester(user.name, tuple(user.groups))
        if route is not None:
            rt = route.rt
            resource = f"{rt.plural}/{route.subresource}" if route.subresource else rt.plural
            namespace = route.namespace or ""
            if rt.plural == "namespaces" and not rt.group and route.name:
                namespace = route.name  # RequestInfo: a namespace object is in its own namespace
            info = flowcontrol.RequestInfo(True, verb, rt.group, resource, namespace)
        else:
            info = flowcontrol.RequestInfo(False, request.method.lower(), path=path)
        schema = fc.classify(who, info)
        request[FLOW] = schema
        return who, info, schema

    def _flow_headers(self, request: web.BaseRequest, headers: CIMultiDict) -> None:
        """The APF classification headers of a classified request (sim/tfjob_sim/flowcontrol.py): none for a
        request authentication refused (the real filter chain authenticates first) or a long-running one."""
        schema = request.get(FLOW)
        if schema is not None:
            for name, value in schema.headers:
                headers[name] = value

    def metrics_text(self) -> str:
        """The apiserver's ``/metrics``: the API Priority and Fairness series, or without APF the
        max-in-flight filter's ``apiserver_current_inflight_requests``."""
        if self.flow_control is not None:
            return self.flow_control.metrics_text()
        return self.max_in_flight.metrics_text()

    async def _non_resource(self, request: web.BaseRequest, path: str) -> web.StreamResponse:
        if request.method != "GET" and request.method != "HEAD":
            # Only the GET-only routes that exist refuse other verbs; a path of no served resource (a CRD
            # that was deleted, say) is a 404 for every verb, as kube-apiserver's not-found handler answers.
            if (
                path in _HEALTH
                or path in ("/version", "/api", "/apis", "/metrics")
                or (path.startswith(("/api/", "/apis/")) and self.discovery.document(path) is not None)
            ):
                raise errors.method_not_allowed(request.method, path)
            raise errors.page_not_found()
        if path in _HEALTH or path.startswith(("/healthz/", "/livez/", "/readyz/")):
            if self.shutting_down:
                return web.Response(text="shutting down", status=500, content_type="text/plain")
            return web.Response(body=b"ok", content_type="text/plain")
        if path == "/version" or path == "/version/":
            return self._json(self.discovery.version_doc)
        if path == "/metrics":
            return web.Response(
                body=self.metrics_text().encode(),
                content_type="text/plain",
                charset="utf-8",
                headers={"Vary": "Accept"},
            )
        if path.startswith("/openapi/v3"):
            negotiate(request.headers.get("Accept"))
            doc = self.openapi.document(path[len("/openapi/v3") :])
            if doc is None:
                raise errors.page_not_found()
            return self._json(doc)
        if path.startswith(("/api", "/apis")):
            negotiate(request.headers.get("Accept"))
            doc = self.discovery.document(path)
            if doc is not None:
                return self._json(doc)
        raise errors.page_not_found()

    # ------------------------------------------------------------------ resource requests

    async def _body(self, request: web.BaseRequest, kind: str, *, allow_yaml: bool = True) -> Any:
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

    def _write_options(self, query: Any, user_agent: str) -> WriteOptions:
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
            user_agent=user_agent,
        )

    def _result(self, result: WriteResult) -> web.Response:
        return self._json(result.obj, result.code, self._warn_headers(result.warnings))

    async def _resource_request(self, request: web.BaseRequest, route: Route, verb: str) -> web.StreamResponse:
        rt = route.rt
        query = request.query
        if verb not in ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"):
            raise errors.method_not_allowed(request.method, rt.plural)
        if self.auth is not None and self.auth.serves(route):
            # TokenRequest and the access reviews: create-only, answered, never stored.
            if verb != "create":
                raise errors.method_not_allowed(verb, route.key)
            body = await self._body(request, "TokenRequest" if route.subresource == "token" else rt.kind)
            return self._json(self.auth.serve(route, body, request[USER]), 201)
        if route.subresource is None and verb not in rt.verbs:
            raise errors.method_not_allowed(verb, rt.plural)
        if route.subresource == "log":
            if verb != "get":
                raise errors.method_not_allowed(verb, route.key)
            assert route.namespace is not None and route.name is not None
            return await serve_pod_log(request, self.store, self._kubelet(), route.namespace, route.name)
        if verb in ("get", "list", "watch"):
            neg = negotiate(request.headers.get("Accept"))
            if verb == "watch":
                return await self._watch(request, route, neg)
            if verb == "list":
                return await self._list(request, route, neg)
            return await self._get(request, route, neg)
        if route.subresource in ("eviction", "binding"):
            if verb != "create":
                raise errors.method_not_allowed(verb, route.key)
            body = await self._body(request, "Eviction" if route.subresource == "eviction" else "Binding")
            assert route.name is not None and route.namespace is not None
            if route.subresource == "eviction":
                status = self.store.evict(route.namespace, route.name, body)
            else:
                status = self.store.bind(route.namespace, route.name, body)
            return self._json(status, 201)
        if route.subresource is not None and verb not in ("update", "patch"):
            raise errors.method_not_allowed(verb, route.key)
        opts = self._write_options(query, request.headers.get("User-Agent", ""))
        store = self.store
        if verb == "create":
            if route.name is not None:
                raise errors.method_not_allowed("create", rt.plural)
            body = await self._body(request, rt.kind)
            if not isinstance(body, dict):
                raise errors.bad_request(
                    f"the object provided is unrecognized (must be of type {rt.kind}): "
                    "couldn't get version/kind; json parse error: expected an object"
                )
            return self._result(store.create_ex(rt.qualified, route.namespace, body, opts, owned=True))
        name = route.name or ""  # the router gives every verb but deletecollection a name
        assert name or verb == "deletecollection"
        if verb == "update":
            body = await self._body(request, "Scale" if route.subresource == "scale" else rt.kind)
            if not isinstance(body, dict):
                raise errors.bad_request(
                    f"the object provided is unrecognized (must be of type {rt.kind}): expected an object"
                )
            return self._result(
                store.update_ex(rt.qualified, route.namespace, name, body, route.subresource, opts, owned=True)
            )
        if verb == "patch":
            ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            patch_type = _PATCH_TYPES.get(ctype)
            if patch_type is None or (patch_type == "strategic" and rt.custom):
                raise errors.unsupported_media_type(
                    ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
                    + ([] if rt.custom else ["application/strategic-merge-patch+json"])
                )
            raw = await request.read()
            try:
                patch = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                if patch_type != "apply":
                    raise errors.bad_request(f"error decoding patch: {exc}") from None
                try:
                    patch = yaml.safe_load(raw)
                except yaml.YAMLError as yexc:
                    raise errors.bad_request(f"error decoding YAML: {yexc}") from None
            result = store.patch_ex(rt.qualified, route.namespace, name, patch_type, patch, route.subresource, opts)
            return self._result(result)
        # delete / deletecollection
        options = await self._delete_options(request)
        if verb == "delete":
            return self._result(store.delete_ex(rt.qualified, route.namespace, name, options, dry_run=opts.dry_run))
        body = store.delete_collection(
            rt.qualified,
            route.namespace,
            query.get("labelSelector", ""),
            query.get("fieldSelector", ""),
            options,
            dry_run=opts.dry_run,
        )
        return self._json(body)

    async def _delete_options(self, request: web.BaseRequest) -> dict:
        query = request.query
        options: dict[str, Any] = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise errors.bad_request(
                        f"the object provided is unrecognized (must be of type DeleteOptions): "
                        f"couldn't get version/kind; json parse error: {exc}"
                    ) from None
                if not isinstance(body, dict):
                    raise errors.bad_request("the object provided is unrecognized (must be of type DeleteOptions)")
                if body.get("kind") not in (None, "DeleteOptions"):
                    raise errors.bad_request(
                        f"the kind in the data ({body.get('kind')}) does not match the expected kind (DeleteOptions)"
                    )
                options.update(body)
        grace = _int_param(query, "gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if query.get("propagationPolicy"):
            options["propagationPolicy"] = query["propagationPolicy"]
        if query.get("orphanDependents") is not None:
            options["orphanDependents"] = parse_bool(query["orphanDependents"])
        return options

    # ------------------------------------------------------------------ reads

    async def _get(self, request: web.BaseRequest, route: Route, neg: _Negotiated) -> web.StreamResponse:
        rt = route.rt
        assert route.name is not None
        rv_text = request.query.get("resourceVersion")
        if rv_text:
            requested = parse_rv(rv_text)
            if requested > self.store.resource_version:
                if not await self.store.wait_for_resource_version(requested, self.rv_wait_timeout):
                    raise rv_too_large(requested, self.store.resource_version)
        if route.subresource == "scale":
            obj = self.store.get_scale(rt.qualified, route.namespace, route.name)
            return self._json(obj)
        obj = self.store.get_or_404(rt.qualified, route.namespace, route.name)
        if neg.table:
            table = to_table(
                rt,
                [obj],
                request.query.get("includeObject", "Metadata"),
                {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            )
            return self._json(table)
        return self._json(obj)

    def _validate_list_options(self, query: Any, watch: bool) -> tuple[str | None, str | None, int, str | None]:
        rv = query.get("resourceVersion") or None
        rv_match = query.get("resourceVersionMatch") or None
        token = query.get("continue") or None
        limit = _int_param(query, "limit") or 0
        if limit < 0:
            limit = 0
        causes = []
        if "sendInitialEvents" in query:
            if watch:
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": "sendInitialEvents",
                        "message": "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList "
                        "feature gate is enabled",
                    }
                )
            else:
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": "sendInitialEvents",
                        "message": "Forbidden: sendInitialEvents is forbidden for list",
                    }
                )
        if rv_match is not None:
            if watch and "sendInitialEvents" not in query:
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": "resourceVersionMatch",
                        "message": "Forbidden: resourceVersionMatch is forbidden for watch unless "
                        "sendInitialEvents is provided",
                    }
                )
            elif rv_match not in ("Exact", "NotOlderThan"):
                causes.append(
                    {
                        "reason": "FieldValueNotSupported",
                        "field": "resourceVersionMatch",
                        "message": f'Unsupported value: "{rv_match}": supported values: "Exact", "NotOlderThan", ""',
                    }
                )
            elif token:
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": "resourceVersionMatch",
                        "message": "Forbidden: resourceVersionMatch is forbidden when continue is provided",
                    }
                )
            elif rv is None:
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": "resourceVersionMatch",
                        "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                    }
                )
            elif rv_match == "Exact" and rv == "0":
                causes.append(
                    {
                        "reason": "FieldValueForbidden",
                        "field": "resourceVersionMatch",
                        "message": 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
                    }
                )
        if causes:
            raise errors.invalid("ListOptions", "", causes, "meta.k8s.io")
        if token and rv not in (None, "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        if token and watch:
            raise errors.bad_request("continue is not supported on watch requests")
        if rv is not None:
            parse_rv(rv)
        return rv, rv_match, limit, token

    async def _list(self, request: web.BaseRequest, route: Route, neg: _Negotiated) -> web.StreamResponse:
        rt = route.rt
        query = request.query
        rv, rv_match, limit, token = self._validate_list_options(query, watch=False)
        if rv and rv != "0" and not token:
            requested = parse_rv(rv)
            exact = rv_match == "Exact" or (rv_match is None and limit > 0)
            if requested > self.store.resource_version and not exact:
                if not await self.store.wait_for_resource_version(requested, self.rv_wait_timeout):
                    raise rv_too_large(requested, self.store.resource_version)
        result = self.store.list_ex(
            rt.qualified,
            route.namespace,
            query.get("labelSelector", ""),
            query.get("fieldSelector", ""),
            rv,
            rv_match,
            limit,
            token,
        )
        meta: dict[str, Any] = {"resourceVersion": result.resource_version}
        if result.continue_token:
            meta["continue"] = result.continue_token
            if result.remaining is not None:
                meta["remainingItemCount"] = result.remaining
        if neg.table:
            return self._json(to_table(rt, result.items, query.get("includeObject", "Metadata"), meta))
        items = result.items
        if not rt.custom:
            # Items of built-in (typed) lists carry no kind/apiVersion on a real server; clients that
            # depend on them break there, so they must break here too.
            items = [{k: v for k, v in item.items() if k != "kind" and k != "apiVersion"} for item in items]
        body = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}
        return self._json(body)

    async def _watch(self, request: web.BaseRequest, route: Route, neg: _Negotiated) -> web.StreamResponse:
        rt = route.rt
        query = request.query
        rv, _rv_match, _limit, _token = self._validate_list_options(query, watch=True)
        label_selector = query.get("labelSelector", "")
        field_selector = query.get("fieldSelector", "")
        if route.name is not None:
            # Deprecated /watch/.../{name} form: a watch of one object.
            field_selector = ",".join(s for s in (field_selector, f"metadata.name={route.name}") if s)
        timeout = _int_param(query, "timeoutSeconds")
        config = self.hub.config
        if not timeout or timeout <= 0:
            duration = random.uniform(config.min_request_timeout, 2 * config.min_request_timeout)
        else:
            duration = float(timeout)
        encoder = self._table_encoder(rt, query.get("includeObject", "Metadata")) if neg.table else None
        watcher = self.hub.open(
            rt.qualified,
            route.namespace,
            label_selector,
            field_selector,
            rv,
            encoder,
            request.headers.get("User-Agent", ""),
        )
        response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache"})
        self._flow_headers(request, response.headers)
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)  # headers go out now, before any event
            seat = request.get(SEAT)
            if seat is not None:
                seat.release()  # APF counts a watch only while it is set up
            await watcher.serve(response.write, duration, parse_bool(query.get("allowWatchBookmarks")))
            await response.write_eof()
        except ConnectionResetError:
            watcher.close("client gone")
        finally:
            watcher.close("done")
        return response

    def _table_encoder(self, rt: ResourceType, include_object: str) -> Callable[[str, dict], bytes]:
        to_table(rt, [], include_object)  # validates includeObject before the stream starts

        def encode(type_: str, obj: dict) -> bytes:
            if type_ in ("ERROR", "BOOKMARK"):
                return json_line(type_, obj)
            table = to_table(
                rt, [obj], include_object, {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")}
            )
            return json_line(type_, table)

        return encode

    # ------------------------------------------------------------------ /_sim/ control API

    async def _sim_api(self, request: web.BaseRequest) -> web.StreamResponse:
        try:
            return await self._sim_api_inner(request)
        except ApiError as err:
            return self._error(err)
        except (ValueError, TypeError, KeyError, RuntimeError) as exc:
            return self._json({"error": f"{type(exc).__name__}: {exc}"}, 400)

    async def _sim_api_inner(self, request: web.BaseRequest) -> web.StreamResponse:
        faults = self.faults
        path = request.path[len("/_sim") :].rstrip("/")
        method = request.method
        body: dict = {}
        if method in ("POST", "PUT") and request.can_read_body:
            raw = await request.read()
            if raw.strip():
                try:
                    parsed = orjson.loads(raw)
                except orjson.JSONDecodeError as exc:
                    raise ValueError(f"body is not JSON: {exc}") from None
                if not isinstance(parsed, dict):
                    raise ValueError("body must be a JSON object")
                body = parsed
        if path == "/requests" and method == "GET":
            since = int(request.query.get("since", "0"))
            records = faults.requests(since)
            counts: dict[str, int] = {}
            for r in records:
                if r.verb:
                    key = f"{r.verb} {r.resource}"
                    counts[key] = counts.get(key, 0) + 1
            return self._json({"mark": faults.mark(), "counts": counts, "requests": [r.to_dict() for r in records]})
        if path == "/requests/summary" and method == "GET":
            since = int(request.query.get("since", "0"))
            return self._json({"mark": faults.mark(), "byUserAgent": faults.counts_by_user_agent(since)})
        if path == "/history" and method == "GET":
            return self._json(self._history(request.query["resource"], int(request.query.get("since", "0"))))
        if path == "/objects" and method == "POST":
            return self._json(self._bulk_write(body))
        if path == "/requests/mark" and method == "POST":
            return self._json({"mark": faults.mark()})
        if path == "/faults" and method == "GET":
            return self._json({"faults": [r.to_dict() for r in faults.rules]})
        if path == "/faults" and method == "DELETE":
            faults.clear()
            return self._json({"cleared": True})
        if path.startswith("/faults/") and method == "DELETE":
            faults.remove(int(path.rsplit("/", 1)[1]))
            return self._json({"removed": True})
        if path == "/faults" and method == "POST":
            verb = body.get("verb", "*")
            resource = body.get("resource", "*")
            agent = body.get("userAgent")
            if agent is not None and not isinstance(agent, str):
                raise ValueError("userAgent must be a string")
            if body.get("latency"):
                rule = faults.add_latency(float(body["latency"]), verb, resource, user_agent=agent)
            elif body.get("drop"):
                rule = faults.drop_connections(
                    verb, resource, rate=float(body.get("rate", 1.0)), count=body.get("count"), user_agent=agent
                )
            else:
                rule = faults.fail(
                    verb,
                    resource,
                    int(body.get("code", 500)),
                    rate=float(body.get("rate", 1.0)),
                    count=body.get("count"),
                    retry_after=body.get("retryAfter"),
                    message=body.get("message"),
                    user_agent=agent,
                )
            return self._json(rule.to_dict(), 201)
        if path == "/watches" and method == "GET":
            return self._json(
                {
                    "watches": [
                        {
                            "resource": w.resource,
                            "namespace": w.namespace,
                            "stalled": w.stalled,
                            "userAgent": w.user_agent,
                        }
                        for w in self.hub.watchers()
                    ]
                }
            )
        if path == "/watches/close" and method == "POST":
            return self._json({"closed": faults.close_watches(body.get("resource"))})
        if path == "/watches/stall" and method == "POST":
            return self._json(
                {"stalled": faults.stall_watches(body.get("resource"), bool(body.get("includeNew", False)))}
            )
        if path == "/watches/unstall" and method == "POST":
            return self._json({"closed": faults.unstall_watches()})
        if path == "/watches/delay" and method == "POST":
            faults.delay_watch_events(float(body.get("seconds", 0)), body.get("resource"), body.get("userAgent"))
            return self._json({"delay": float(body.get("seconds", 0))})
        if path == "/compact" and method == "POST":
            return self._json({"compactedAt": faults.compact()})
        if path == "/restart" and method == "POST":
            if self._schedule_restart is None:
                raise RuntimeError("restart needs a SimCluster")
            self._schedule_restart()
            return self._json({"restarting": True}, 202)
        if path in ("/kubelet/pause", "/kubelet/resume", "/gc/pause", "/gc/resume") and method == "POST":
            getattr(
                faults,
                {
                    "/kubelet/pause": "pause_kubelet",
                    "/kubelet/resume": "resume_kubelet",
                    "/gc/pause": "pause_gc",
                    "/gc/resume": "resume_gc",
                }[path],
            )()
            return self._json({"ok": True})
        if path.startswith("/nodes/") and path.endswith("/ready") and method == "POST":
            name = path[len("/nodes/") : -len("/ready")]
            if "ready" not in body or not isinstance(body["ready"], bool):
                raise ValueError('body must be {"ready": true|false}')
            faults.set_node_ready(name, body["ready"])
            return self._json({"node": name, "ready": body["ready"]})
        raise errors.page_not_found()

    def _history(self, resource: str, since: int) -> dict:
        """The store's retained change history of ``resource`` after RV ``since``, one compact line per
        change with the time the store committed it: benchmarks time what happened inside the cluster
        (a pod removed, a replacement created, a job turning Running) without an observer's lag."""
        events = self.store.history_since(resource, since)
        if events is None:
            raise errors.expired(f"history of {resource} after resourceVersion {since} is no longer retained")
        out = []
        for ev in events:
            obj = ev.object
            meta = obj.get("metadata") or {}
            status = obj.get("status") or {}
            line: dict[str, Any] = {
                "rv": ev.rv,
                "type": ev.type,
                "time": ev.time,
                "namespace": meta.get("namespace"),
                "name": meta.get("name"),
                "uid": meta.get("uid"),
            }
            if meta.get("deletionTimestamp"):
                line["deleting"] = True
            if isinstance(status, dict):
                if status.get("phase"):
                    line["phase"] = status["phase"]
                conditions = status.get("conditions")
                if isinstance(conditions, list):
                    line["true"] = [
                        c.get("type") for c in conditions if isinstance(c, dict) and c.get("status") == "True"
                    ]
            out.append(line)
        return {"resourceVersion": self.store.resource_version, "events": out}

    def _bulk_write(self, body: dict) -> dict:
        """Create (or, with ``subresource: status``, replace the status of) many objects in one call,
        through the same store writes as the API: benchmarks set up a converged cluster of 10,000 jobs
        in seconds instead of minutes of HTTP round trips. The requests are not in the request log."""
        resource = body["resource"]
        namespace = body.get("namespace")
        subresource = body.get("subresource")
        if subresource not in (None, "status"):
            raise ValueError(f"subresource must be absent or 'status', got {subresource!r}")
        items = body.get("items")
        if not isinstance(items, list):
            raise ValueError("items must be a list of objects")
        opts = WriteOptions(field_manager=body.get("fieldManager") or "sim-bulk")
        written, failed = [], []
        for item in items:
            try:
                if subresource is None:
                    obj = self.store.create_ex(resource, namespace, item, opts, owned=True).obj
                else:
                    obj = self.store.update_ex(
                        resource, namespace, item["metadata"]["name"], item, subresource, opts, owned=True
                    ).obj
            except ApiError as err:
                failed.append(
                    {"name": (item.get("metadata") or {}).get("name"), "code": err.code, "message": err.message}
                )
                continue
            meta = obj["metadata"]
            written.append({"name": meta["name"], "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]})
        return {"items": written, "errors": failed}


class _Injected(Exception):
    def __init__(self, error: ApiError, headers: dict[str, str]) -> None:
        super().__init__(error.message)
        self.error = error
        self.headers = headers
