"""Discovery and OpenAPI: ``GET /api``, ``/apis``, ``/api/v1``, ``/apis/{group}/{version}`` and
``/openapi/v3[/...]``.

Why here: kubectl and client generators read these before anything else; the documents come from
:mod:`tfjob_sim.discovery` and :mod:`tfjob_sim.openapi` and change as CRDs come and go. Only JSON is
served (an Accept header without it is a 406), and a document nobody serves is the plain-text 404.
"""

from __future__ import annotations

from aiohttp import web

from tfjob_sim import errors
from tfjob_sim.apiserver.common import ApiServer, json_response, negotiate


async def openapi_v3(server: ApiServer, request: web.BaseRequest, path: str) -> web.StreamResponse:
    """``/openapi/v3``: the index of group-versions; ``/openapi/v3/{api|apis/group}/{version}``: its schemas."""
    negotiate(request.headers.get("Accept"))
    doc = server.openapi.document(path[len("/openapi/v3") :])
    if doc is None:
        raise errors.page_not_found()
    return json_response(doc)


async def api_discovery(server: ApiServer, request: web.BaseRequest, path: str) -> web.StreamResponse:
    """The discovery document of ``path`` (APIVersions, APIGroupList, APIResourceList)."""
    negotiate(request.headers.get("Accept"))
    doc = server.discovery.document(path)
    if doc is None:
        raise errors.page_not_found()
    return json_response(doc)
