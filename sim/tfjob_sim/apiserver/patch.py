"""``PATCH``: JSON patch, merge patch, strategic merge patch and server-side apply (of objects and of their
status and scale).

Why here: the patch type is the request's media type, and kube-apiserver refuses a strategic merge patch of
a custom resource (it has no patch strategy) with the 415 that lists the types it does accept; an apply
body may be YAML. The store applies the patch and runs the field manager.
"""

from __future__ import annotations

import orjson
import yaml
from aiohttp import web

from tfjob_sim import errors
from tfjob_sim.apiserver.common import ApiServer, Route, result_response, write_options

PATCH_TYPES = {
    "application/json-patch+json": "json",
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/apply-patch+yaml": "apply",
}
"""The patch media types and the store's name for each."""


async def patch(server: ApiServer, request: web.BaseRequest, route: Route) -> web.StreamResponse:
    """Patch the object (or its subresource) by the patch type its Content-Type names."""
    rt = route.rt
    opts = write_options(request)
    name = route.name or ""
    assert name
    ctype = (request.headers.get("Content-Type") or "").split(";")[0].strip().lower()
    patch_type = PATCH_TYPES.get(ctype)
    if patch_type is None or (patch_type == "strategic" and rt.custom):
        raise errors.unsupported_media_type(
            ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
            + ([] if rt.custom else ["application/strategic-merge-patch+json"])
        )
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if patch_type != "apply":
            raise errors.bad_request(f"error decoding patch: {exc}") from None
        try:
            body = yaml.safe_load(raw)
        except yaml.YAMLError as yexc:
            raise errors.bad_request(f"error decoding YAML: {yexc}") from None
    result = server.store.patch_ex(rt.qualified, route.namespace, name, patch_type, body, route.subresource, opts)
    return result_response(result)
