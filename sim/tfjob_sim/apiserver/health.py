"""``/healthz``, ``/livez``, ``/readyz`` (and their ``/<check>`` paths), ``/metrics`` and ``/version``.

Why here: probes, Prometheus and ``kubectl version`` read these outside the resource API: no negotiation,
plain text where the real server answers plain text, and a 500 from the probes while the server shuts down.
"""

from __future__ import annotations

from aiohttp import web

from tfjob_sim.apiserver.common import ApiServer, json_response

HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


def is_probe(path: str) -> bool:
    """Whether ``path`` is a health probe or one of its named checks."""
    return path in HEALTH_PATHS or path.startswith(("/healthz/", "/livez/", "/readyz/"))


async def probe(server: ApiServer, request: web.BaseRequest, path: str) -> web.StreamResponse:
    """``ok``, or a 500 once the server is shutting down."""
    if server.shutting_down:
        return web.Response(text="shutting down", status=500, content_type="text/plain")
    return web.Response(body=b"ok", content_type="text/plain")


async def version(server: ApiServer, request: web.BaseRequest, path: str) -> web.StreamResponse:
    """The version.Info of the Kubernetes release the simulator answers as."""
    return json_response(server.discovery.version_doc)


async def metrics(server: ApiServer, request: web.BaseRequest, path: str) -> web.StreamResponse:
    """The apiserver's Prometheus metrics (API Priority and Fairness, or the max-in-flight filter)."""
    return web.Response(
        body=server.metrics_text().encode(),
        content_type="text/plain",
        charset="utf-8",
        headers={"Vary": "Accept"},
    )
