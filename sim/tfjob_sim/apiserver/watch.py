"""``GET ...?watch=true`` (and the deprecated ``/watch/`` paths): a chunked stream of watch events.

Why here: a watch is the one long-running resource request. Its headers go out before any event (clients
wait for them), it gives its APF seat back once set up, it lasts ``timeoutSeconds`` or, without one, a
random time between the server's ``--min-request-timeout`` and twice that, as kube-apiserver's do; and in
Table form every event's object is a Table of one row. The events themselves come from the watch hub.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from aiohttp import web

from tfjob_sim.apiserver.common import JSON, SEAT, ApiServer, Route, flow_headers, negotiate
from tfjob_sim.apiserver.objects import validate_list_options
from tfjob_sim.query import int_param, parse_bool
from tfjob_sim.resources import ResourceType
from tfjob_sim.table import to_table
from tfjob_sim.watch import json_line


async def watch(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """Stream the events of the collection (or, with a name in the path, of one object) until the watch's
    time is up, the client goes away or the server closes it."""
    neg = negotiate(request.headers.get("Accept"))
    rt = route.rt
    query = request.query
    rv, _rv_match, _limit, _token = validate_list_options(query, watch=True)
    label_selector = query.get("labelSelector", "")
    field_selector = query.get("fieldSelector", "")
    if route.name is not None:
        # Deprecated /watch/.../{name} form: a watch of one object.
        field_selector = ",".join(s for s in (field_selector, f"metadata.name={route.name}") if s)
    timeout = int_param(query, "timeoutSeconds")
    config = server.hub.config
    if not timeout or timeout <= 0:
        duration = random.uniform(config.min_request_timeout, 2 * config.min_request_timeout)
    else:
        duration = float(timeout)
    encoder = table_encoder(rt, query.get("includeObject", "Metadata")) if neg.table else None
    watcher = server.hub.open(
        rt.qualified,
        route.namespace,
        label_selector,
        field_selector,
        rv,
        encoder,
        request.headers.get("User-Agent", ""),
    )
    response = web.StreamResponse(status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache"})
    flow_headers(request, response.headers)
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


def table_encoder(rt: ResourceType, include_object: str) -> Callable[[str, dict], bytes]:
    """The encoder of a Table watch: every ADDED/MODIFIED/DELETED object as a Table of one row."""
    to_table(rt, [], include_object)  # validates includeObject before the stream starts

    def encode(type_: str, obj: dict) -> bytes:
        if type_ in ("ERROR", "BOOKMARK"):
            return json_line(type_, obj)
        table = to_table(
            rt, [obj], include_object, {"resourceVersion": (obj.get("metadata") or {}).get("resourceVersion", "")}
        )
        return json_line(type_, table)

    return encode
