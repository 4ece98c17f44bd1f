import aiohttp
import anyio
import pytest
from prometheus_client import CollectorRegistry, Counter

from controller.ops.http import HealthChecks, parse_addr, serve_health, serve_metrics


def test_parse_addr():
    assert parse_addr("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_addr(":8081") == ("0.0.0.0", 8081)
    assert parse_addr("[::1]:9000") == ("::1", 9000)
    for bad in ("8080", "host:", "host:port", "h:70000"):
        with pytest.raises(ValueError, match="expected HOST:PORT"):
            parse_addr(bad)


async def _start(serve, *args):
    got: list[int] = []
    ready = anyio.Event()

    def on_ready(port: int) -> None:
        got.append(port)
        ready.set()

    return got, ready, lambda tg: tg.start_soon(serve, *args, ("127.0.0.1", 0), on_ready)


async def test_metrics_endpoint_serves_the_registry():
    registry = CollectorRegistry()
    Counter("demo_things", "things", registry=registry).inc(3)
    got, ready, start = await _start(serve_metrics, registry)
    async with anyio.create_task_group() as tg:
        start(tg)
        with anyio.fail_after(30):
            await ready.wait()
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{got[0]}/metrics") as r:
                assert r.status == 200
                assert "demo_things_total 3.0" in await r.text()
        tg.cancel_scope.cancel()


async def test_health_reflects_checks():
    state = {"synced": False}
    checks = HealthChecks(
        liveness={"ping": lambda: (True, "")},
        readiness={"informers-synced": lambda: (state["synced"], "" if state["synced"] else "pods not synced")},
    )
    got, ready, start = await _start(serve_health, checks)
    async with anyio.create_task_group() as tg:
        start(tg)
        with anyio.fail_after(30):
            await ready.wait()
        base = f"http://127.0.0.1:{got[0]}"
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/healthz") as r:
                assert (r.status, await r.text()) == (200, "ok")
            async with s.get(base + "/readyz") as r:
                assert r.status == 500
                assert "[-]informers-synced failed: pods not synced" in await r.text()
            state["synced"] = True
            async with s.get(base + "/readyz") as r:
                assert (r.status, await r.text()) == (200, "ok")
        tg.cancel_scope.cancel()
