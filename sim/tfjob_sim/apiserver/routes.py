"""The route table of the simulated kube-apiserver: which handler answers which request.

Why one table: a reader (or a failing test) looking for what answers ``GET /api/v1/namespaces/{ns}/pods/{name}/log``
finds it here — ``SUBRESOURCE_ROUTES["log"]["get"]``, :func:`tfjob_sim.apiserver.subresources.pod_log` —
and every refusal (405 for a verb a resource or subresource does not serve, the 404 of an unknown path) is
decided here, once, before any handler runs. The request pipeline around it (authentication, API Priority
and Fairness, fault injection, the request log) is :class:`tfjob_sim.server.SimServer`'s.

Resource paths (``/api/v1/...``, ``/apis/{group}/{version}/...``), by the request's verb:

=====================================  ===========================================================
``{resource}`` (get, list, watch,       :mod:`tfjob_sim.apiserver.objects`, :mod:`tfjob_sim.apiserver.watch`,
create, update, patch, delete,          :mod:`tfjob_sim.apiserver.patch`
deletecollection)
``{resource}/{name}/status``            the object's handlers, limited to the status by the store
``{resource}/{name}/scale``             :mod:`tfjob_sim.apiserver.subresources` (get, update), patch
``pods/{name}/log``, ``/eviction``,     :mod:`tfjob_sim.apiserver.subresources`
``/binding``
``serviceaccounts/{name}/token`` and    :func:`tfjob_sim.apiserver.subresources.token_or_review` (secure mode)
the access reviews
=====================================  ===========================================================

Other paths: ``/healthz``, ``/livez``, ``/readyz``, ``/metrics``, ``/version`` (:mod:`tfjob_sim.apiserver.health`),
``/api``, ``/apis``, ``/openapi/v3`` (:mod:`tfjob_sim.apiserver.discovery`), ``/_sim/`` (the simulator's own
control API, :mod:`tfjob_sim.apiserver.control`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from tfjob_sim import errors
from tfjob_sim.apiserver import discovery, health, objects, subresources, watch
from tfjob_sim.apiserver.common import ApiServer, Handler, Route
from tfjob_sim.apiserver.patch import patch

RESOURCE_ROUTES: dict[str, Handler] = {
    "get": objects.get_object,
    "list": objects.list_objects,
    "watch": watch.watch,
    "create": objects.create,
    "update": objects.update,
    "patch": patch,
    "delete": objects.delete,
    "deletecollection": objects.delete_collection,
}
"""A resource or one object, by verb (a resource serves only the verbs its type lists)."""

# A subresource has a name in its path: neither list nor deletecollection reaches it. Get and watch of
# eviction and binding read the pod, as this server always has.
SUBRESOURCE_ROUTES: dict[str, dict[str, Handler]] = {
    "status": {"get": objects.get_object, "watch": watch.watch, "update": objects.update, "patch": patch},
    "scale": {
        "get": subresources.get_scale,
        "watch": watch.watch,
        "update": subresources.replace_scale,
        "patch": patch,
    },
    "log": {"get": subresources.pod_log},
    "eviction": {"get": objects.get_object, "watch": watch.watch, "create": subresources.evict},
    "binding": {"get": objects.get_object, "watch": watch.watch, "create": subresources.bind},
}
"""The subresources by name, then by verb; a verb not listed is a 405."""

OTHER_SUBRESOURCE_ROUTES = SUBRESOURCE_ROUTES["status"]
"""A subresource a resource declares without an entry of its own is read and written like status (none does
today: ``token`` exists only in secure mode, whose auth layer answers it before the table is read)."""

NonResourceHandler = Callable[[ApiServer, web.BaseRequest, str], Awaitable[web.StreamResponse]]

NON_RESOURCE_ROUTES: tuple[tuple[Callable[[str], bool], NonResourceHandler], ...] = (
    (health.is_probe, health.probe),
    (lambda path: path in ("/version", "/version/"), health.version),
    (lambda path: path == "/metrics", health.metrics),
    (lambda path: path.startswith("/openapi/v3"), discovery.openapi_v3),
    (lambda path: path.startswith(("/api", "/apis")), discovery.api_discovery),
)
"""``GET`` of the paths outside the resource API, first match wins."""

_VERBS = frozenset(RESOURCE_ROUTES)


async def serve_resource(server: ApiServer, request: web.BaseRequest, route: Route, verb: str) -> web.StreamResponse:
    """Answer a request on a resource path with its handler, or refuse its verb with kube-apiserver's 405."""
    rt = route.rt
    if verb not in _VERBS:
        raise errors.method_not_allowed(request.method, rt.plural)
    if server.auth is not None and server.auth.serves(route):
        # TokenRequest and the access reviews: create-only, answered, never stored.
        if verb != "create":
            raise errors.method_not_allowed(verb, route.key)
        return await subresources.token_or_review(server, request, route)
    if route.subresource is None:
        if verb not in rt.verbs:
            raise errors.method_not_allowed(verb, rt.plural)
        return await RESOURCE_ROUTES[verb](server, request, route)
    handler = SUBRESOURCE_ROUTES.get(route.subresource, OTHER_SUBRESOURCE_ROUTES).get(verb)
    if handler is None:
        raise errors.method_not_allowed(verb, route.key)
    return await handler(server, request, route)


async def serve_non_resource(server: ApiServer, request: web.BaseRequest, path: str) -> web.StreamResponse:
    """Answer a path outside the resource API (and outside ``/_sim/``), or its 404/405."""
    if request.method != "GET" and request.method != "HEAD":
        # Only the GET-only routes that exist refuse other verbs; a path of no served resource (a CRD
        # that was deleted, say) is a 404 for every verb, as kube-apiserver's not-found handler answers.
        if (
            path in health.HEALTH_PATHS
            or path in ("/version", "/api", "/apis", "/metrics")
            or (path.startswith(("/api/", "/apis/")) and server.discovery.document(path) is not None)
        ):
            raise errors.method_not_allowed(request.method, path)
        raise errors.page_not_found()
    for matches, handler in NON_RESOURCE_ROUTES:
        if matches(path):
            return await handler(server, request, path)
    raise errors.page_not_found()
