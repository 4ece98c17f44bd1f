"""The one request path (controller.runtime.rest): every verb of the client, status writes, evictions and
watches alike get credentials, the client-side limit and per-attempt metrics from it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration
from prometheus_client import CollectorRegistry

from controller.runtime.client import PODS, ApiClient


class Recorder:
    """A server that answers every request with an empty object (a watch: one event) and records it."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None, str | None]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.seen.append(
            (request.method, request.path_qs, request.headers.get("Authorization"), request.headers.get("User-Agent"))
        )
        if request.query.get("watch") == "true":
            event = {"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}}}
            return web.Response(body=orjson.dumps(event) + b"\n", content_type="application/json")
        return web.Response(body=b"{}", content_type="application/json")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._answer)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    server = Recorder()
    await server.start()
    yield server
    await server.stop()


async def test_every_verb_and_the_watch_take_the_same_request_path(recorder: Recorder) -> None:
    configuration = Configuration()
    configuration.host = recorder.url
    configuration.api_key = {"BearerToken": "secret"}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    registry = CollectorRegistry()
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"}}
    async with ApiClient(configuration, qps=1000.0, burst=1000, registry=registry, user_agent="ua/1") as client:
        await client.get(PODS, "p", namespace="ns")
        await client.list(PODS, namespace="ns", label_selector="a=b", limit=10)
        await client.create(PODS, pod)
        await client.replace(PODS, pod)
        await client.replace(PODS, pod, subresource="status")
        await client.patch(PODS, "p", {"metadata": {"labels": {"x": "y"}}}, namespace="ns")
        await client.delete(PODS, "p", namespace="ns")
        await client.create(PODS, {"metadata": {"name": "p"}}, namespace="ns", name="p", subresource="eviction")
        async with client.watch(PODS, namespace="ns", resource_version="5", timeout_seconds=30) as stream:
            events = [event async for event in stream]

    assert events == [{"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}}}]
    assert [(method, path) for method, path, _, _ in recorder.seen] == [
        ("GET", "/api/v1/namespaces/ns/pods/p"),
        ("GET", "/api/v1/namespaces/ns/pods?labelSelector=a%3Db&limit=10"),
        ("POST", "/api/v1/namespaces/ns/pods"),
        ("PUT", "/api/v1/namespaces/ns/pods/p"),
        ("PUT", "/api/v1/namespaces/ns/pods/p/status"),
        ("PATCH", "/api/v1/namespaces/ns/pods/p"),
        ("DELETE", "/api/v1/namespaces/ns/pods/p"),
        ("POST", "/api/v1/namespaces/ns/pods/p/eviction"),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=5&timeoutSeconds=30&allowWatchBookmarks=true",
        ),
    ]
    # Credentials and identity on every request, the watch included.
    assert {(auth, agent) for _, _, auth, agent in recorder.seen} == {("Bearer secret", "ua/1")}

    def sample(name: str, **labels: str) -> float:
        value = registry.get_sample_value(name, {"host": recorder.url.removeprefix("http://"), **labels})
        return value or 0.0

    # One attempt recorded per request, by method, and one wait on the client-side limit each.
    assert sample("rest_client_requests_total", code="200", method="GET") == 3
    assert sample("rest_client_requests_total", code="200", method="POST") == 2
    assert sample("rest_client_requests_total", code="200", method="PUT") == 2
    assert sample("rest_client_requests_total", code="200", method="PATCH") == 1
    assert sample("rest_client_requests_total", code="200", method="DELETE") == 1
    waits = sum(
        sample("rest_client_rate_limiter_duration_seconds_count", verb=verb)
        for verb in ("GET", "POST", "PUT", "PATCH", "DELETE")
    )
    assert waits == 9
