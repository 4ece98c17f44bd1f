"""Resource CRUD and lists: ``GET``, ``POST``, ``PUT`` and ``DELETE`` of objects and collections.

Why here: these are the requests every client makes; the store decides what they do, and this module turns
the query and body into its arguments exactly as kube-apiserver reads them: the list options it refuses
(``resourceVersionMatch`` without ``resourceVersion``, ``continue`` with one), a ``resourceVersion`` newer
than the store (wait, then 504), the typed lists' items without kind/apiVersion, DeleteOptions from the
body and the query.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tfjob_sim import errors
from tfjob_sim.apiserver.common import (
    ApiServer,
    Route,
    json_response,
    negotiate,
    read_body,
    result_response,
    write_options,
)
from tfjob_sim.query import int_param, parse_bool
from tfjob_sim.store import parse_rv, rv_too_large
from tfjob_sim.table import to_table

# ------------------------------------------------------------------ reads


async def wait_for_resource_version(server: ApiServer, rv_text: str | None) -> None:
    """A read at a resourceVersion newer than the store's waits for it, as the watch cache does, and
    answers 504 (Too large resource version) when it does not come in time."""
    if rv_text:
        requested = parse_rv(rv_text)
        if requested > server.store.resource_version:
            if not await server.store.wait_for_resource_version(requested, server.rv_wait_timeout):
                raise rv_too_large(requested, server.store.resource_version)


async def get_object(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``GET .../{name}``: the object, or its Table row when the Accept header asks for one."""
    neg = negotiate(request.headers.get("Accept"))
    rt = route.rt
    assert route.name is not None
    await wait_for_resource_version(server, request.query.get("resourceVersion"))
    obj = server.store.get_or_404(rt.qualified, route.namespace, route.name)
    if neg.table:
        table = to_table(
            rt,
            [obj],
            request.query.get("includeObject", "Metadata"),
            {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
        )
        return json_response(table)
    return json_response(obj)


def validate_list_options(query: Any, watch: bool) -> tuple[str | None, str | None, int, str | None]:
    """``(resourceVersion, resourceVersionMatch, limit, continue)`` of a list or watch, or the 400/422
    kube-apiserver answers for a combination it refuses."""
    rv = query.get("resourceVersion") or None
    rv_match = query.get("resourceVersionMatch") or None
    token = query.get("continue") or None
    limit = int_param(query, "limit") or 0
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


async def list_objects(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``GET`` of a collection: a page of the list (``limit``/``continue``), or its Table."""
    neg = negotiate(request.headers.get("Accept"))
    rt = route.rt
    store = server.store
    query = request.query
    rv, rv_match, limit, token = validate_list_options(query, watch=False)
    if rv and rv != "0" and not token:
        requested = parse_rv(rv)
        exact = rv_match == "Exact" or (rv_match is None and limit > 0)
        if requested > store.resource_version and not exact:
            if not await store.wait_for_resource_version(requested, server.rv_wait_timeout):
                raise rv_too_large(requested, store.resource_version)
    result = store.list_ex(
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
        return json_response(to_table(rt, result.items, query.get("includeObject", "Metadata"), meta))
    items = result.items
    if not rt.custom:
        # Items of built-in (typed) lists carry no kind/apiVersion on a real server; clients that
        # depend on them break there, so they must break here too.
        items = [{k: v for k, v in item.items() if k != "kind" and k != "apiVersion"} for item in items]
    body = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": meta, "items": items}
    return json_response(body)


# ------------------------------------------------------------------ writes


async def create(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``POST`` to a collection."""
    rt = route.rt
    opts = write_options(request)
    if route.name is not None:
        raise errors.method_not_allowed("create", rt.plural)
    body = await read_body(request, rt.kind)
    if not isinstance(body, dict):
        raise errors.bad_request(
            f"the object provided is unrecognized (must be of type {rt.kind}): "
            "couldn't get version/kind; json parse error: expected an object"
        )
    return result_response(server.store.create_ex(rt.qualified, route.namespace, body, opts, owned=True))


async def replace(server: ApiServer, request: web.BaseRequest, route: Route, kind: str) -> web.StreamResponse:
    """``PUT`` of an object or of its subresource, whose body must read as a ``kind``."""
    rt = route.rt
    opts = write_options(request)
    name = route.name or ""  # the router gives every verb but deletecollection a name
    assert name
    body = await read_body(request, kind)
    if not isinstance(body, dict):
        raise errors.bad_request(f"the object provided is unrecognized (must be of type {rt.kind}): expected an object")
    return result_response(
        server.store.update_ex(rt.qualified, route.namespace, name, body, route.subresource, opts, owned=True)
    )


async def update(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``PUT`` of an object, or of its status."""
    return await replace(server, request, route, route.rt.kind)


async def delete(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``DELETE`` of an object: the object (finalizers, graceful pods) or the Status of its removal."""
    rt = route.rt
    opts = write_options(request)
    name = route.name or ""
    assert name
    options = await delete_options(request)
    return result_response(server.store.delete_ex(rt.qualified, route.namespace, name, options, dry_run=opts.dry_run))


async def delete_collection(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """``DELETE`` of a collection (by label and field selector)."""
    rt = route.rt
    query = request.query
    opts = write_options(request)
    options = await delete_options(request)
    body = server.store.delete_collection(
        rt.qualified,
        route.namespace,
        query.get("labelSelector", ""),
        query.get("fieldSelector", ""),
        options,
        dry_run=opts.dry_run,
    )
    return json_response(body)


async def delete_options(request: web.BaseRequest) -> dict:
    """The DeleteOptions of a delete: its body's, overridden by the query's ``gracePeriodSeconds``,
    ``propagationPolicy`` and ``orphanDependents``."""
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
    grace = int_param(query, "gracePeriodSeconds")
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    if query.get("propagationPolicy"):
        options["propagationPolicy"] = query["propagationPolicy"]
    if query.get("orphanDependents") is not None:
        options["orphanDependents"] = parse_bool(query["orphanDependents"])
    return options
