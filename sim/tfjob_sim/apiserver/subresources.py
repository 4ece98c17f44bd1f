"""The subresources that are not plain reads and writes of the object: ``pods/{name}/log``,
``pods/{name}/eviction``, ``pods/{name}/binding``, ``{resource}/{name}/scale``, and, in secure mode,
``serviceaccounts/{name}/token`` with the access reviews (answered, never stored).

Why here: each has its own body kind and answer (an Eviction gives back a Status with 201, a log is
plain text streamed from the kubelet, a scale is an autoscaling/v1 Scale computed from the object).
``status`` has none of its own: its reads and writes are the object's (:mod:`tfjob_sim.apiserver.objects`,
:mod:`tfjob_sim.apiserver.patch`), which the store limits to the status.
"""

from __future__ import annotations

from aiohttp import web

from tfjob_sim.apiserver.common import USER, ApiServer, Route, json_response, negotiate, read_body
from tfjob_sim.apiserver.objects import replace, wait_for_resource_version
from tfjob_sim.logs import serve_pod_log


async def pod_log(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``GET pods/{name}/log``: the container's log from the kubelet (``follow``, ``tailLines``, ...)."""
    assert route.namespace is not None and route.name is not None
    return await serve_pod_log(request, server.store, server.kubelet(), route.namespace, route.name)


async def evict(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``POST pods/{name}/eviction``: delete the pod unless a PodDisruptionBudget forbids it (429)."""
    body = await read_body(request, "Eviction")
    assert route.name is not None and route.namespace is not None
    return json_response(server.store.evict(route.namespace, route.name, body), 201)


async def bind(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``POST pods/{name}/binding``: assign the pod to a node, as a scheduler does."""
    body = await read_body(request, "Binding")
    assert route.name is not None and route.namespace is not None
    return json_response(server.store.bind(route.namespace, route.name, body), 201)


async def get_scale(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``GET {resource}/{name}/scale``: the object's replicas as an autoscaling/v1 Scale."""
    negotiate(request.headers.get("Accept"))
    assert route.name is not None
    await wait_for_resource_version(server, request.query.get("resourceVersion"))
    return json_response(server.store.get_scale(route.rt.qualified, route.namespace, route.name))


async def replace_scale(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``PUT {resource}/{name}/scale``: a Scale body, written to the object's replicas."""
    return await replace(server, request, route, "Scale")


async def token_or_review(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``POST serviceaccounts/{name}/token`` and the access reviews (secure mode): the auth layer's answer
    about the requesting user (:mod:`tfjob_sim.auth`)."""
    body = await read_body(request, "TokenRequest" if route.subresource == "token" else route.rt.kind)
    return json_response(server.auth.serve(route, body, request[USER]), 201)
