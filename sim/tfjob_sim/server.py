"""The simulated kube-apiserver's HTTP server: the request pipeline in front of the route table.

Why this module exists: real clients (kubectl, client-go, kubernetes-asyncio, kopf) must not be
able to tell this server from kube-apiserver. Everything semantic lives in the store and the watch
hub; the HTTP-specific rest (URL routing, query-parameter parsing, content negotiation, body decoding,
response shapes, watch streaming, the ``/_sim/`` control API) is in :mod:`tfjob_sim.apiserver`, whose
route table (:mod:`tfjob_sim.apiserver.routes`) names the handler of every path. This module runs what
every request goes through first, in kube-apiserver's filter order: authentication and authorization
(secure mode), API Priority and Fairness or the max-in-flight limit, fault injection, and the request log.

Contract: :class:`SimServer` ``(store, hub, faults, discovery, openapi)``; ``await start(host, port)``
(port 0 = pick a free port; ``.port`` / ``.url`` afterwards), ``await stop()``, ``await restart()``
(all connections drop, same port, state and RVs kept). It uses aiohttp's low-level server (one
handler, no router) to keep per-request overhead low.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tfjob_sim import errors, flowcontrol
from tfjob_sim.apiserver import control, routes
from tfjob_sim.apiserver.common import (
    FLOW,
    MAX_BODY,
    SEAT,
    USER,
    Route,
    error_response,
    flow_headers,
    parse_route,
)
from tfjob_sim.apiserver.common import verb_of as _verb_of
from tfjob_sim.discovery import Discovery
from tfjob_sim.errors import ApiError
from tfjob_sim.faults import Faults
from tfjob_sim.openapi import OpenAPI
from tfjob_sim.store import Store
from tfjob_sim.watch import WatchHub

log = logging.getLogger(__name__)

# Log, exec, attach, port-forward and proxy are long-running: neither APF nor max-in-flight counts them.
_LONG_RUNNING_SUBRESOURCES = frozenset({"log", "exec", "attach", "portforward", "proxy"})


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
        self.discovery = Discovery(store.registry, minor=store.config.kubernetes_minor)
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

    # ------------------------------------------------------------------ what the handlers read

    def kubelet(self) -> Any:
        """The kubelet that serves pod logs, or None when none runs."""
        return self._kubelet()

    def schedule_restart(self) -> None:
        """Restart this server from its owner's task group (``/_sim/restart``); RuntimeError without an owner."""
        if self._schedule_restart is None:
            raise RuntimeError("restart needs a SimCluster")
        self._schedule_restart()

    # ------------------------------------------------------------------ routing

    def route(self, path: str) -> Route | None:
        """The parsed resource path, or None when it names no served resource."""
        return parse_route(self.store.registry, path)

    verb_of = staticmethod(_verb_of)

    # ------------------------------------------------------------------ the request pipeline

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
                    return error_response(err)
            return await control.serve(self, request)
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
                response = await routes.serve_resource(self, request, route, verb)
            else:
                response = await routes.serve_non_resource(self, request, path)
        except _Injected as injected:
            response = error_response(injected.error, injected.headers)
        except ApiError as err:
            response = error_response(err)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug in the simulator: answer like the apiserver's panic handler, and log
            log.exception("internal error handling %s %s", request.method, path)
            response = error_response(errors.internal(f"simulator bug: {type(exc).__name__}: {exc}"))
        finally:
            if seat is not None:
                seat.release()
        record.code = response.status
        if not response.prepared:  # a watch's were sent with its first byte
            flow_headers(request, response.headers)
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

    def metrics_text(self) -> str:
        """The apiserver's ``/metrics``: the API Priority and Fairness series, or without APF the
        max-in-flight filter's ``apiserver_current_inflight_requests``."""
        if self.flow_control is not None:
            return self.flow_control.metrics_text()
        return self.max_in_flight.metrics_text()


class _Injected(Exception):
    """An error answer a fault rule injects (with its extra headers), told apart from the handlers' own."""

    def __init__(self, error: ApiError, headers: dict[str, str]) -> None:
        super().__init__(error.message)
        self.error = error
        self.headers = headers
