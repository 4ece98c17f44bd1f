"""The controller's own HTTP endpoints: ``/metrics`` and ``/healthz`` + ``/readyz``.

They are separate listeners (``--metrics-addr`` and ``--health-addr``) so a NetworkPolicy or a
kubelet probe can reach health without exposing metrics, as controller-runtime does. Health checks
are plain callables registered by whoever owns the state they judge; this module only serves them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

Check = Callable[[], tuple[bool, str]]


def parse_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` means all interfaces) → (host, port). Raises ValueError with a clear message."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid address {text!r}: expected HOST:PORT, e.g. 0.0.0.0:8080")
    return (host.strip("[]") or "0.0.0.0", int(port))


@dataclass
class HealthChecks:
    """Named liveness and readiness checks; a check returns (ok, detail)."""

    liveness: dict[str, Check] = field(default_factory=dict)
    readiness: dict[str, Check] = field(default_factory=dict)

    @staticmethod
    def _run(checks: dict[str, Check]) -> tuple[bool, str]:
        ok_all = True
        lines = []
        for name, check in sorted(checks.items()):
            ok, detail = check()
            ok_all &= ok
            lines.append(f"[{'+' if ok else '-'}]{name} {'ok' if ok else 'failed'}{': ' + detail if detail else ''}")
        lines.append("healthz check passed" if ok_all else "healthz check failed")
        return ok_all, "\n".join(lines) + "\n"


def _health_app(checks: HealthChecks) -> web.Application:
    async def respond(request: web.Request, group: dict[str, Check]) -> web.Response:
        ok, text = checks._run(group)
        if ok and "verbose" not in request.query:
            text = "ok"
        return web.Response(status=200 if ok else 500, text=text)

    async def liveness(request: web.Request) -> web.Response:
        return await respond(request, checks.liveness)

    async def readiness(request: web.Request) -> web.Response:
        return await respond(request, checks.readiness)

    app = web.Application()
    app.router.add_get("/healthz", liveness)
    app.router.add_get("/livez", liveness)
    app.router.add_get("/readyz", readiness)
    return app


def _metrics_app(registry: CollectorRegistry) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encoder(registry), headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def _serve(app: web.Application, addr: tuple[str, int], ready: Callable[[int], None] | None) -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, addr[0], addr[1])
        await site.start()
        if ready is not None:
            bound = runner.addresses
            ready(bound[0][1] if bound else addr[1])
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await runner.cleanup()


async def serve_metrics(
    registry: CollectorRegistry, addr: tuple[str, int], ready: Callable[[int], None] | None = None
) -> None:
    """Serve ``/metrics`` until cancelled. ``ready`` receives the bound port (useful with port 0)."""
    await _serve(_metrics_app(registry), addr, ready)


async def serve_health(checks: HealthChecks, addr: tuple[str, int], ready: Callable[[int], None] | None = None) -> None:
    """Serve ``/healthz``, ``/livez`` and ``/readyz`` until cancelled."""
    await _serve(_health_app(checks), addr, ready)
