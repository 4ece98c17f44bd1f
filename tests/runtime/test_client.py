"""API client (controller.runtime.client / errors): addressing, error mapping, retries, throttling, the
watch line reader, and CRUD against the simulated apiserver.

Retry and stream behaviour is pinned against a *scripted* aiohttp server defined here (each test says
exactly which responses come back, and we count the attempts); verb semantics run against the simulator.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import orjson
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from controller.runtime.client import (
    APF_HEADERS,
    LEASES,
    NODES,
    PATCH_CONTENT_TYPES,
    PODS,
    ApiClient,
    LineSplitter,
    RequestLimit,
    Resource,
    RetryPolicy,
)
from controller.runtime.clock import FakeClock
from controller.runtime.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    NotFound,
    ResponseDecodeError,
    ServerError,
    ServerTimeout,
    ServiceUnavailable,
    StreamStalled,
    TooManyRequests,
    TransportError,
    UnsupportedMediaType,
    error_from_response,
    error_from_status,
    is_too_large_resource_version,
)

FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.005, max_retry_after=0.05)


def status_body(code: int, reason: str, message: str, **details: Any) -> bytes:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return orjson.dumps(body)


# -- addressing ---------------------------------------------------------------------------------------------


def test_resource_paths():
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    tfjobs = Resource("kubeflow.org", "v1", "tfjobs")
    assert tfjobs.path("ns", "j", "scale") == "/apis/kubeflow.org/v1/namespaces/ns/tfjobs/j/scale"
    assert tfjobs.api_version == "kubeflow.org/v1" and tfjobs.qualified == "tfjobs.kubeflow.org"
    assert LEASES.qualified == "leases.coordination.k8s.io" and PODS.qualified == "pods"
    assert NODES.path(name="n1") == "/api/v1/nodes/n1"
    assert NODES.path("ignored-for-cluster-scope", "n1") == "/api/v1/nodes/n1"
    # A name that is not a valid Kubernetes name cannot escape its path segment.
    assert PODS.path("ns", "a/../b?x") == "/api/v1/namespaces/ns/pods/a%2F..%2Fb%3Fx"
    with pytest.raises(ValueError, match="namespace is required"):
        PODS.path(None, "p")
    with pytest.raises(ValueError, match="subresource needs an object name"):
        PODS.path("ns", None, "status")
    with pytest.raises(ValueError, match="version and a plural"):
        Resource("", "", "pods")
    assert Resource("", "v1", "pods") == PODS and hash(Resource("", "v1", "pods")) == hash(PODS)


# -- error mapping ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", BadRequest),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Expired),
        (410, "Gone", Expired),
        (415, "UnsupportedMediaType", UnsupportedMediaType),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (500, "ServerTimeout", ServerTimeout),
        (503, "ServiceUnavailable", ServiceUnavailable),
        (504, "Timeout", ServerTimeout),
        (502, "", ServerError),
    ],
)
def test_status_bodies_map_to_typed_errors(code, reason, cls):
    err = error_from_response(code, status_body(code, reason, "boom"), {})
    assert type(err) is cls
    assert (err.status, err.reason, err.message) == (code, reason, "boom")


def test_invalid_carries_causes_and_details():
    causes = [{"reason": "FieldValueRequired", "message": "Required value", "field": "spec.x"}]
    err = error_from_response(422, status_body(422, "Invalid", 'TFJob "j" is invalid', kind="TFJob", causes=causes), {})
    assert isinstance(err, Invalid) and err.causes == causes and err.details["kind"] == "TFJob"
    assert err.body["reason"] == "Invalid"


def test_plain_text_bodies():
    err = error_from_response(404, b"404 page not found\n", {})
    assert isinstance(err, NotFound) and err.message == "404 page not found" and err.body is None
    err = error_from_response(429, b"Too many requests, please try again later.\n", {"Retry-After": "7"})
    assert isinstance(err, TooManyRequests) and err.retry_after == 7.0
    err = error_from_response(502, b"<html>bad gateway</html>", {})
    assert isinstance(err, ServerError) and "bad gateway" in err.message
    err = error_from_response(500, b"", {})
    assert isinstance(err, ServerError) and err.message == "HTTP 500"
    err = error_from_response(500, b"{not json", {})
    assert isinstance(err, ServerError) and err.message == "{not json"


def test_retry_after_from_header_or_details():
    body = status_body(429, "TooManyRequests", "slow down", retryAfterSeconds=3)
    assert error_from_response(429, body, {}).retry_after == 3.0
    assert error_from_response(429, body, {"Retry-After": "1"}).retry_after == 1.0  # the header wins
    assert error_from_response(500, status_body(500, "InternalError", "x"), {}).retry_after is None


def test_watch_error_event_status_and_too_large_rv():
    err = error_from_status(
        {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (5)"}
    )
    assert isinstance(err, Expired) and "too old" in str(err)
    too_large = error_from_response(
        504,
        status_body(
            504,
            "Timeout",
            "Timeout: Too large resource version: 9, current: 5",
            causes=[{"type": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        ),
        {"Retry-After": "1"},
    )
    assert isinstance(too_large, ServerTimeout) and is_too_large_resource_version(too_large)
    assert not is_too_large_resource_version(error_from_response(504, status_body(504, "Timeout", "x"), {}))


# -- line splitting -------------------------------------------------------------------------------------


def test_line_splitter_reassembles_any_chunking():
    rng = random.Random(7)
    events = [
        orjson.dumps({"type": "MODIFIED", "object": {"n": i, "pad": "x" * rng.randrange(0, 300)}}) for i in range(500)
    ]
    stream = b"".join(e + b"\n" for e in events)
    for _ in range(20):
        splitter, got, pos = LineSplitter(), [], 0
        while pos < len(stream):
            step = rng.choice([1, 2, 7, 64, 1000, 5000])
            got.extend(splitter.feed(stream[pos : pos + step]))
            pos += step
        assert got == events and splitter.tail() == b""


def test_line_splitter_huge_line_and_tail():
    big = b"{" + b'"a":"' + b"y" * (3 << 20) + b'"}'
    splitter = LineSplitter()
    out = []
    for i in range(0, len(big), 65536):
        out.extend(splitter.feed(big[i : i + 65536]))
    assert out == []
    assert splitter.feed(b"\n{}\n{") == [big, b"{}"]
    assert splitter.tail() == b"{"
    assert splitter.feed(b"\n\n\n") == [b"{"]  # empty lines are dropped


# -- token bucket / retry arithmetic ---------------------------------------------------------------------


def test_a_request_limit_without_qps_has_no_bucket():
    limit = RequestLimit(0, 0, FakeClock())
    assert (limit.mode, limit.bucket) == ("off", None)


APF = {"X-Kubernetes-PF-FlowSchema-UID": "f", "X-Kubernetes-PF-PriorityLevel-UID": "p"}


def test_auto_limit_is_lifted_for_good_by_the_first_response_showing_priority_and_fairness():
    clock = FakeClock()
    limit = RequestLimit(10, 2, clock, auto=True)
    assert limit.mode == "auto" and limit.bucket is not None
    assert [limit.bucket.reserve() for _ in range(3)][-1] > 0  # the fallback bucket throttles meanwhile
    assert limit.observe({"Content-Type": "application/json"}) is False and limit.mode == "auto"
    assert limit.observe(APF) is True
    assert (limit.mode, limit.bucket, limit.lifted_by) == ("off", None, "X-Kubernetes-PF-FlowSchema-UID")
    assert limit.observe(APF) is False  # once: the caller logs once
    assert limit.observe({}) is False and limit.mode == "off"  # a response without them does not restore it


@pytest.mark.parametrize("header", APF_HEADERS)
def test_either_apf_header_lifts_an_auto_limit(header):
    limit = RequestLimit(10, 2, FakeClock(), auto=True)
    assert limit.observe({header: "uid"}) and limit.lifted_by == header


def test_an_explicit_limit_is_kept_with_priority_and_fairness_and_zero_means_none():
    clock = FakeClock()
    fixed = RequestLimit(10, 2, clock)
    assert fixed.observe(APF) is False and fixed.mode == "fixed" and fixed.bucket is not None
    off = RequestLimit(0, 0, clock, auto=True)  # nothing to lift
    assert off.mode == "off" and off.observe(APF) is False and off.lifted_by is None


async def test_limit_waits_are_recorded_only_while_a_bucket_applies():
    registry = CollectorRegistry()
    from controller.runtime.client_metrics import RestClientMetrics

    limit = RequestLimit(1000, 5, FakeClock(), auto=True, metrics=RestClientMetrics.for_registry(registry, "h"))
    for _ in range(3):
        await limit.wait("GET")
    labels = {"verb": "GET", "host": "h"}
    assert registry.get_sample_value("rest_client_rate_limiter_duration_seconds_count", labels) == 3
    limit.observe(APF)
    for _ in range(100):  # far above the burst: no wait, nothing recorded
        await limit.wait("GET")
    assert registry.get_sample_value("rest_client_rate_limiter_duration_seconds_count", labels) == 3


def test_retry_policy_delays():
    policy = RetryPolicy(base_delay=0.2, max_delay=1.0, jitter=0.0, max_retry_after=5.0)
    assert [policy.delay(n, None) for n in (1, 2, 3, 4)] == [0.2, 0.4, 0.8, 1.0]
    assert policy.delay(1, 2.0) == 2.0 and policy.delay(1, 30.0) == 5.0
    jittered = RetryPolicy(base_delay=0.2, max_delay=10.0, jitter=0.5)
    assert all(0.2 <= jittered.delay(1, None) < 0.3 for _ in range(50))
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


# -- scripted server --------------------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Scripted:
    """An aiohttp server whose responses the test scripts; records every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.handler: Handler | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append((request.method, request.path_qs, dict(request.headers), body))
        assert self.handler is not None, "test did not script a response"
        return await self.handler(request)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def respond(self, *responses: Callable[[], web.StreamResponse]) -> None:
        """Answer the n-th request with the n-th response (the last one repeats)."""
        queue = list(responses)

        async def handler(request: web.Request) -> web.StreamResponse:
            make = queue.pop(0) if len(queue) > 1 else queue[0]
            return make()

        self.handler = handler


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None):
    return lambda: web.Response(body=orjson.dumps(obj), status=status, content_type="application/json", headers=headers)


def status_response(code: int, reason: str, message: str = "x", headers: dict[str, str] | None = None):
    return lambda: web.Response(
        body=status_body(code, reason, message), status=code, content_type="application/json", headers=headers
    )


@pytest.fixture
async def scripted():
    server = Scripted()
    await server.start()
    yield server
    await server.stop()


def make_client(url: str, **kwargs: Any) -> ApiClient:
    configuration = Configuration()
    configuration.host = url
    kwargs.setdefault("retry", FAST_RETRY)
    return ApiClient(configuration, **kwargs)


async def test_429_is_retried_for_any_verb_honouring_retry_after(scripted):
    scripted.respond(
        lambda: web.Response(
            text="Too many requests, please try again later.\n", status=429, headers={"Retry-After": "1"}
        ),
        json_response({"kind": "Pod", "metadata": {"name": "p"}}, status=201),
    )
    registry = CollectorRegistry()
    async with make_client(scripted.url, registry=registry) as client:
        created = await client.create(PODS, {"metadata": {"name": "p", "namespace": "ns"}})
    assert created["metadata"]["name"] == "p"
    assert [r[0] for r in scripted.requests] == ["POST", "POST"]
    host = scripted.url.removeprefix("http://")
    assert registry.get_sample_value("rest_client_requests_total", {"code": "429", "method": "POST", "host": host}) == 1
    assert registry.get_sample_value("rest_client_requests_total", {"code": "201", "method": "POST", "host": host}) == 1
    assert (
        registry.get_sample_value("rest_client_request_retries_total", {"code": "429", "verb": "POST", "host": host})
        == 1
    )
    assert registry.get_sample_value("rest_client_request_duration_seconds_count", {"verb": "POST", "host": host}) == 2


async def test_post_is_not_replayed_on_500_without_retry_after(scripted):
    scripted.respond(status_response(500, "InternalError", "etcd hiccup"))
    async with make_client(scripted.url) as client:
        with pytest.raises(ServerError, match="etcd hiccup"):
            await client.create(PODS, {"metadata": {"name": "p", "namespace": "ns"}})
    assert len(scripted.requests) == 1


async def test_post_is_retried_on_503_with_retry_after(scripted):
    scripted.respond(
        status_response(503, "ServiceUnavailable", "apiserver is shutting down", {"Retry-After": "1"}),
        json_response({"metadata": {"name": "p"}}, status=201),
    )
    async with make_client(scripted.url) as client:
        await client.create(PODS, {"metadata": {"name": "p", "namespace": "ns"}})
    assert len(scripted.requests) == 2


async def test_get_retried_on_5xx_up_to_max_attempts(scripted):
    scripted.respond(status_response(500, "InternalError", "still broken"))
    async with make_client(scripted.url) as client:
        with pytest.raises(ServerError):
            await client.get(PODS, "p", namespace="ns")
    assert len(scripted.requests) == FAST_RETRY.max_attempts


async def test_json_patch_not_replayed_but_merge_patch_is(scripted):
    scripted.respond(status_response(500, "InternalError"))
    async with make_client(scripted.url) as client:
        with pytest.raises(ServerError):
            await client.patch(
                PODS,
                "p",
                [{"op": "add", "path": "/metadata/labels/a", "value": "b"}],
                namespace="ns",
                patch_type="json",
            )
        assert len(scripted.requests) == 1
        with pytest.raises(ServerError):
            await client.patch(PODS, "p", {"metadata": {"labels": {"a": "b"}}}, namespace="ns")
    assert len(scripted.requests) == 1 + FAST_RETRY.max_attempts


async def test_client_errors_are_not_retried(scripted):
    scripted.respond(status_response(409, "Conflict", "the object has been modified"))
    async with make_client(scripted.url) as client:
        with pytest.raises(Conflict):
            await client.replace(PODS, {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1"}})
    assert len(scripted.requests) == 1


async def test_patch_content_types_and_query_params(scripted):
    scripted.respond(json_response({"metadata": {"name": "p"}}))
    async with make_client(scripted.url) as client:
        for patch_type, body in (
            ("merge", {"a": 1}),
            ("strategic", {"a": 1}),
            ("json", [{"op": "test", "path": "/a", "value": 1}]),
        ):
            await client.patch(PODS, "p", body, namespace="ns", patch_type=patch_type)
        await client.patch(PODS, "p", {"a": 1}, namespace="ns", patch_type="apply", field_manager="tfjob", force=True)
        with pytest.raises(ValueError, match="field_manager"):
            await client.patch(PODS, "p", {"a": 1}, namespace="ns", patch_type="apply")
        with pytest.raises(ValueError, match="unknown patch_type"):
            await client.patch(PODS, "p", {"a": 1}, namespace="ns", patch_type="yaml")
    sent = [(r[2]["Content-Type"], r[1]) for r in scripted.requests]
    assert [s[0] for s in sent] == [PATCH_CONTENT_TYPES[t] for t in ("merge", "strategic", "json", "apply")]
    assert sent[3][1] == "/api/v1/namespaces/ns/pods/p?fieldManager=tfjob&force=true"
    assert orjson.loads(scripted.requests[2][3]) == [{"op": "test", "path": "/a", "value": 1}]


async def test_delete_options_body(scripted):
    scripted.respond(json_response({"kind": "Status", "status": "Success"}))
    async with make_client(scripted.url) as client:
        await client.delete(
            PODS,
            "p",
            namespace="ns",
            grace_period_seconds=0,
            propagation_policy="Foreground",
            preconditions={"uid": "u1"},
        )
        with pytest.raises(ValueError, match="propagation_policy"):
            await client.delete(PODS, "p", namespace="ns", propagation_policy="Cascade")
    method, path, headers, body = scripted.requests[0]
    assert (method, path, headers["Content-Type"]) == ("DELETE", "/api/v1/namespaces/ns/pods/p", "application/json")
    assert orjson.loads(body) == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "gracePeriodSeconds": 0,
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u1"},
    }


async def test_list_query_params(scripted):
    scripted.respond(json_response({"kind": "PodList", "metadata": {"resourceVersion": "5"}, "items": []}))
    async with make_client(scripted.url) as client:
        page = await client.list(
            PODS,
            namespace="ns",
            label_selector="app in (a,b),!x",
            field_selector="status.phase=Running",
            limit=500,
            continue_="tok",
            resource_version="0",
        )
    assert page["metadata"]["resourceVersion"] == "5"
    assert scripted.requests[0][1] == (
        "/api/v1/namespaces/ns/pods?labelSelector=app+in+%28a%2Cb%29%2C%21x"
        "&fieldSelector=status.phase%3DRunning&limit=500&continue=tok&resourceVersion=0"
    )


async def test_non_json_success_body_is_a_clear_error(scripted):
    scripted.respond(lambda: web.Response(text="<html>proxy login</html>", status=200))
    async with make_client(scripted.url) as client:
        with pytest.raises(ResponseDecodeError, match="not JSON"):
            await client.get("/version")


async def test_connection_refused_is_transport_error_and_retried():
    # A port nothing listens on: every attempt fails before sending, so even a POST is retried.
    with anyio.fail_after(30):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()
    registry = CollectorRegistry()
    async with make_client(f"http://127.0.0.1:{port}", registry=registry) as client:
        with pytest.raises(TransportError) as info:
            await client.create(PODS, {"metadata": {"name": "p", "namespace": "ns"}})
    assert info.value.request_sent is False
    host = f"127.0.0.1:{port}"
    assert (
        registry.get_sample_value("rest_client_requests_total", {"code": "<error>", "method": "POST", "host": host})
        == FAST_RETRY.max_attempts
    )


async def test_bearer_token_refresh_hook_is_used_per_request(scripted):
    scripted.respond(json_response({}))
    tokens = iter(["Bearer one", "Bearer two"])
    configuration = Configuration()
    configuration.host = scripted.url
    configuration.api_key["BearerToken"] = "Bearer zero"

    def refresh(config: Configuration) -> None:
        config.api_key["BearerToken"] = next(tokens)

    configuration.refresh_api_key_hook = refresh
    async with ApiClient(configuration, retry=FAST_RETRY) as client:
        await client.get("/version")
        await client.get("/version")
    assert [r[2]["Authorization"] for r in scripted.requests] == ["Bearer one", "Bearer two"]


async def test_in_cluster_client_rereads_rotated_token(tmp_path, monkeypatch):
    import datetime

    from kubernetes_asyncio.config import incluster_config

    # kubernetes-asyncio caches the token for a minute; make the cache expire at once.
    monkeypatch.setattr(incluster_config, "TOKEN_REFRESH_PERIOD", datetime.timedelta(0))
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("first")
    ca.write_text("not-a-real-ca-but-non-empty")
    client = ApiClient.in_cluster(
        token_path=str(token),
        ca_path=str(ca),
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    )
    assert client.base_url == "https://10.0.0.1:443"
    headers: dict[str, str] = {}
    await client._auth_headers(headers)
    assert headers["authorization"] == "Bearer first"
    token.write_text("rotated")
    await client._auth_headers(headers)
    assert headers["authorization"] == "Bearer rotated"
    await client.close()


async def test_from_kubeconfig_missing_file_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="kubeconfig not found"):
        await ApiClient.from_kubeconfig(str(tmp_path / "nope"))


def test_bad_server_url_is_rejected():
    configuration = Configuration()
    configuration.host = "localhost:6443"
    with pytest.raises(ValueError, match="http"):
        ApiClient(configuration)


# -- client-side limit against a server with / without API Priority and Fairness (scripted) ----------------


def limiter_waits(registry: CollectorRegistry, url: str, verb: str = "GET") -> float:
    value = registry.get_sample_value(
        "rest_client_rate_limiter_duration_seconds_count", {"verb": verb, "host": url.removeprefix("http://")}
    )
    return value or 0.0


async def test_auto_limit_is_lifted_by_the_servers_apf_headers_with_one_log_line(scripted):
    scripted.respond(json_response({"major": "1"}, headers=APF))
    registry = CollectorRegistry()
    with capture_logs() as logs:
        async with make_client(scripted.url, qps=1000, burst=1, auto_limit=True, registry=registry) as client:
            for _ in range(20):
                await client.get("/version")
            assert client.limit.mode == "off"
    assert limiter_waits(registry, scripted.url) == 1  # only the first request met the bucket
    lifted = [entry for entry in logs if "API Priority and Fairness detected" in entry["event"]]
    assert len(lifted) == 1 and lifted[0]["log_level"] == "info"
    assert "(X-Kubernetes-PF-FlowSchema-UID): client-side rate limit off; set --kube-api-qps" in lifted[0]["event"]


@pytest.mark.parametrize(
    ("apf", "auto", "mode"),
    [(False, True, "auto"), (True, False, "fixed")],
    ids=["auto-without-apf", "explicit-with-apf"],
)
async def test_the_bucket_stays_without_apf_or_when_explicit(scripted, apf, auto, mode):
    scripted.respond(json_response({"major": "1"}, headers=APF if apf else None))
    registry = CollectorRegistry()
    with capture_logs() as logs:
        async with make_client(scripted.url, qps=1000, burst=1, auto_limit=auto, registry=registry) as client:
            for _ in range(20):
                await client.get("/version")
            assert client.limit.mode == mode
    assert limiter_waits(registry, scripted.url) == 20  # every request met the bucket
    assert not [entry for entry in logs if "Priority and Fairness" in entry["event"]]


async def test_apfs_own_429_lifts_an_auto_limit_and_is_retried(scripted):
    # What APF sends when it throttles: plain text, Retry-After, and its headers.
    scripted.respond(
        lambda: web.Response(
            text="Too many requests, please try again later.\n", status=429, headers={"Retry-After": "1", **APF}
        ),
        json_response({"major": "1"}),
    )
    async with make_client(scripted.url, auto_limit=True) as client:
        assert await client.get("/version") == {"major": "1"}
        assert client.limit.mode == "off"
    assert len(scripted.requests) == 2


async def test_a_watch_response_lifts_an_auto_limit(scripted):
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json", **APF})
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{}}\n')
        await response.write_eof()
        return response

    scripted.handler = handler
    async with make_client(scripted.url, auto_limit=True) as client:
        async with client.watch(PODS) as stream:
            assert [event async for event in stream] == [{"type": "ADDED", "object": {}}]
        assert client.limit.mode == "off"


async def test_a_sibling_has_its_own_limit_and_connections_and_the_same_identity(scripted):
    scripted.respond(json_response({"major": "1"}, headers=APF))
    registry = CollectorRegistry()
    async with make_client(scripted.url, auto_limit=True, registry=registry, user_agent="ctl (me)") as client:
        async with client.sibling(qps=5, burst=10) as lease_client:
            await client.get("/version")
            await lease_client.get("/version")
            assert client.limit.mode == "off" and lease_client.limit.mode == "fixed"  # its bucket stays
            assert lease_client.limit.bucket is not None and lease_client.limit.bucket.qps == 5
            assert lease_client._transport()[1] is not client._transport()[1]
    assert [r[2]["User-Agent"] for r in scripted.requests] == ["ctl (me)", "ctl (me)"]
    assert limiter_waits(registry, scripted.url) == 2  # one each: both record into the shared registry


# -- watch stream reader (scripted) -----------------------------------------------------------------------


def stream_handler(chunks: list[bytes], then: Callable[[], Awaitable[None]] | None = None) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
            await anyio.sleep(0)
        if then is not None:
            await then()
        await response.write_eof()
        return response

    return handler


async def test_watch_stream_decodes_events_split_across_chunks(scripted):
    events = [
        {"type": "ADDED", "object": {"metadata": {"name": f"p{i}", "resourceVersion": str(i)}}} for i in range(50)
    ]
    raw = b"".join(orjson.dumps(e) + b"\n" for e in events)
    chunks = [raw[i : i + 37] for i in range(0, len(raw), 37)]
    scripted.handler = stream_handler(chunks)
    async with make_client(scripted.url) as client:
        got = []
        async with client.watch(PODS, namespace="ns", resource_version="7", timeout_seconds=300) as stream:
            async for event in stream:
                got.append(event)
    assert got == events
    assert scripted.requests[0][1] == (
        "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=7&timeoutSeconds=300&allowWatchBookmarks=true"
    )


async def test_watch_stream_plain_iteration_and_truncated_tail(scripted):
    scripted.handler = stream_handler([b'{"type":"ADDED","object":{}}\n{"type":"MODI'])
    async with make_client(scripted.url) as client:
        got = []
        with pytest.raises(TransportError, match="ended inside an event"):
            async for event in client.watch(PODS):
                got.append(event)
    assert got == [{"type": "ADDED", "object": {}}]


async def test_watch_stream_stall_raises_stream_stalled(scripted):
    stop = anyio.Event()
    scripted.handler = stream_handler(
        [b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}\n'], then=stop.wait
    )
    try:
        async with make_client(scripted.url) as client:
            got = []
            with anyio.fail_after(30):
                with pytest.raises(StreamStalled):
                    async with client.watch(PODS, inactivity_timeout=0.3) as stream:
                        async for event in stream:
                            got.append(event)
        assert got[0]["type"] == "BOOKMARK"
    finally:
        stop.set()


async def test_watch_http_error_is_typed(scripted):
    scripted.respond(status_response(403, "Forbidden", 'pods is forbidden: User "x" cannot watch'))
    async with make_client(scripted.url) as client:
        with pytest.raises(Forbidden, match="cannot watch"):
            async with client.watch(PODS):
                pass


async def test_watch_undecodable_line(scripted):
    scripted.handler = stream_handler([b"this is not json\n"])
    async with make_client(scripted.url) as client:
        with pytest.raises(ResponseDecodeError):
            async for _ in client.watch(PODS):
                pass


# -- against the simulated apiserver ---------------------------------------------------------------------


async def test_crud_against_simulator(sim_cluster):
    async with await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, retry=FAST_RETRY) as client:
        version = await client.get("/version")
        assert "gitVersion" in version
        cm_res = Resource("", "v1", "configmaps")
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c1", "namespace": "default"},
            "data": {"a": "1"},
        }
        created = await client.create(cm_res, cm)
        assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
        with pytest.raises(AlreadyExists):
            await client.create(cm_res, cm)
        got = await client.get(cm_res, "c1", namespace="default")
        assert got["data"] == {"a": "1"}
        stale = dict(got, data={"a": "2"})
        replaced = await client.replace(cm_res, stale)
        assert replaced["data"] == {"a": "2"}
        with pytest.raises(Conflict):
            await client.replace(cm_res, dict(got, data={"a": "3"}))  # got's RV is stale now
        patched = await client.patch(cm_res, "c1", {"data": {"b": "x"}}, namespace="default")
        assert patched["data"] == {"a": "2", "b": "x"}
        patched = await client.patch(
            cm_res, "c1", [{"op": "remove", "path": "/data/a"}], namespace="default", patch_type="json"
        )
        assert patched["data"] == {"b": "x"}
        page = await client.list(cm_res, namespace="default")
        assert [i["metadata"]["name"] for i in page["items"]] == ["c1"]
        await client.delete(cm_res, "c1", namespace="default")
        with pytest.raises(NotFound):
            await client.get(cm_res, "c1", namespace="default")
        with pytest.raises(NotFound) as info:
            await client.get("/apis/nope.example.com/v1/things")
        assert info.value.message == "404 page not found"
        with pytest.raises(ApiError) as info:
            await client.list(PODS, namespace="default", label_selector="a in (")
        assert info.value.status == 400
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l1", "namespace": "default"},
            "spec": {"holderIdentity": "x"},
        }
        created = await client.create(LEASES, lease)
        with pytest.raises(Invalid) as invalid:
            await client.replace(LEASES, lease)  # a Lease PUT without resourceVersion is refused
        assert invalid.value.status == 422 and invalid.value.causes
        assert any(c.get("field") == "metadata.resourceVersion" for c in invalid.value.causes)
        with pytest.raises(Conflict):
            stale = dict(created, metadata=dict(created["metadata"], resourceVersion="1"))
            await client.replace(LEASES, stale)


async def test_kubeconfig_exec_credentials_are_refreshed_when_expired(tmp_path, scripted):
    import sys

    import yaml

    counter = tmp_path / "count"
    counter.write_text("0")
    plugin = tmp_path / "plugin.py"
    # An exec credential plugin whose token is already expired: every request must run it again.
    plugin.write_text(
        "import json, pathlib\n"
        f"p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) + 1; p.write_text(str(n))\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': {'token': f'tok-{n}', 'expirationTimestamp': '2000-01-01T00:00:00Z'}}))\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": scripted.url}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": sys.executable,
                                "args": [str(plugin)],
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
            }
        )
    )
    scripted.respond(json_response({"gitVersion": "v1.30.0"}))
    async with await ApiClient.from_kubeconfig(str(kubeconfig), retry=FAST_RETRY) as client:
        await client.get("/version")
        await client.get("/version")
    tokens = [r[2].get("Authorization") for r in scripted.requests]
    assert len(set(tokens)) == 2 and all(t and t.startswith("Bearer tok-") for t in tokens)


async def test_the_environments_proxy_is_honoured_and_no_proxy_excludes_hosts(scripted, monkeypatch):
    # The session does not trust the environment per request (that costs two thread hops per request);
    # the client resolves HTTP(S)_PROXY / NO_PROXY once, as client-go does, and passes the proxy itself.
    with anyio.fail_after(30):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        dead = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()
    scripted.respond(json_response({"gitVersion": "via-proxy"}))
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", scripted.url)
    async with make_client(f"http://127.0.0.1:{dead}") as client:
        assert (await client.get("/version"))["gitVersion"] == "via-proxy"
    assert len(scripted.requests) == 1
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    async with make_client(f"http://127.0.0.1:{dead}", retry=RetryPolicy(max_attempts=1)) as client:
        with pytest.raises(TransportError):
            await client.get("/version")
    assert len(scripted.requests) == 1


async def test_gzip_responses_are_asked_for_and_decoded(scripted):
    # kube-apiserver compresses large responses (lists) when the request accepts gzip: the request path must
    # keep asking for it and keep decoding it, whatever it skips for speed.
    import gzip

    body = orjson.dumps({"kind": "PodList", "items": [{"metadata": {"name": f"p{i}"}} for i in range(200)]})
    scripted.respond(
        lambda: web.Response(
            body=gzip.compress(body), content_type="application/json", headers={"Content-Encoding": "gzip"}
        )
    )
    async with make_client(scripted.url) as client:
        listed = await client.list(PODS, namespace="ns")
    assert len(listed["items"]) == 200
    assert "gzip" in scripted.requests[0][2]["Accept-Encoding"]


async def test_cookies_set_by_the_server_are_not_sent_back(scripted):
    # client-go's http.Client has no cookie jar: a Set-Cookie (from a proxy in front of the apiserver, say)
    # must not make later requests differ.
    scripted.respond(
        lambda: web.Response(body=b"{}", content_type="application/json", headers={"Set-Cookie": "session=abc; Path=/"})
    )
    # A host name, not an IP: aiohttp's default jar ignores cookies of IP hosts.
    async with make_client(scripted.url.replace("127.0.0.1", "localhost")) as client:
        await client.get("/version")
        await client.get("/version")
    assert [r[2].get("Cookie") for r in scripted.requests] == [None, None]
