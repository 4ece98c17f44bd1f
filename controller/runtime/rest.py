"""The HTTP exchange under every API call: one request path for all verbs and watches.

Why one path: each request needs the same steps — the client-side limit, fresh credentials, the connection
pool and proxy, per-attempt metrics, mapping of failures to the typed errors of
:mod:`controller.runtime.errors` and, outside watches, bounded retries. Written once here, the verbs of
:class:`controller.runtime.client.ApiClient` only say what to send. (client-go splits it the same way:
``rest.RESTClient`` under the typed clients.)
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import orjson
import structlog
import yarl
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.client.rest import RESTClientObject

from controller import __version__
from controller.runtime.backoff import Backoff
from controller.runtime.client_metrics import RestClientMetrics
from controller.runtime.clock import Clock, MonotonicClock
from controller.runtime.errors import (
    ApiError,
    Forbidden,
    ResponseDecodeError,
    ServerError,
    StreamStalled,
    TooManyRequests,
    TransportError,
    error_from_response,
)
from controller.runtime.ratelimit import TokenBucket
from controller.runtime.resource import RequestAttributes

__all__ = ["USER_AGENT", "APF_HEADERS", "JSON_PATCH", "RetryPolicy", "RequestLimit", "RestClient"]

log = structlog.get_logger(__name__)

USER_AGENT = f"tfjob-controller/{__version__}"

JSON_PATCH = "application/json-patch+json"

Params = Mapping[str, str] | Sequence[tuple[str, str]] | None

# A kube-apiserver that runs API Priority and Fairness (on by default since 1.20, GA in 1.29) puts both on
# every response it classifies, 429s included (kubernetes.io/docs/reference/debug-cluster/flow-control).
APF_HEADERS = ("X-Kubernetes-PF-FlowSchema-UID", "X-Kubernetes-PF-PriorityLevel-UID")

_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of failed requests. Which failures (client-go retries only a 429 or a 5xx that
    carries Retry-After, and a GET after a lost connection; kubernetes-asyncio retries nothing):

    * **429** — always, any verb: the request was rejected before it ran. Waits ``Retry-After``.
    * **5xx with Retry-After** — any verb (the server asks us to come back: 503 on shutdown, 504 "too
      large resource version").
    * **5xx without Retry-After** and **connection errors after the request was sent** — only idempotent
      requests: GET, PUT (it carries a resourceVersion, so a replay after an unseen success fails with a
      409 Conflict rather than doing anything twice), DELETE, and PATCH except JSON patch. A POST (create)
      or a JSON patch is never replayed blindly: the caller sees the error (and after a timed-out create
      should expect a later 409 AlreadyExists).
    * **connection refused / DNS / connect timeout** — any verb: nothing reached the server.

    ``max_attempts`` counts the first attempt (1 disables retries). The n-th retry waits the n-th delay of
    a :class:`~controller.runtime.backoff.Backoff` (``base_delay`` doubling to ``max_delay``, scaled by a
    random factor in [1, 1+jitter)), or the server's ``Retry-After`` (at most ``max_retry_after``) when it
    sent one. Watches are never retried here; the informer owns watch recovery.
    """

    max_attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 10.0
    jitter: float = 0.5
    max_retry_after: float = 60.0
    backoff: Backoff = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.jitter < 0 or self.max_retry_after < 0:
            raise ValueError("RetryPolicy delays must be >= 0")
        backoff = Backoff(initial=self.base_delay, factor=2.0, cap=self.max_delay, jitter=self.jitter)
        object.__setattr__(self, "backoff", backoff)

    def delay(self, retry: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``retry`` (1 for the first): the server's ``retry_after``
        capped at ``max_retry_after`` when it sent one, else the jittered back-off."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        return self.backoff.delay(retry)


class RequestLimit:
    """The client-side limit of a :class:`RestClient`: a token bucket (``qps > 0``), none (``qps <= 0``),
    or, with ``auto``, a fallback bucket that the first response showing the server runs API Priority and
    Fairness lifts for good (:meth:`observe`).

    Why lift it: APF queues, shares and rejects (429 + Retry-After, which the client honours) by priority
    level on the server, so a second, blind limit in the client only delays the controller
    (controller-runtime turned its client-side limiter off by default for that reason; Flux and
    cert-manager detect APF the same way). Without APF (disabled, or a proxy that drops the headers) the
    bucket stays; an explicit limit is always kept. Each wait is recorded as
    ``rest_client_rate_limiter_duration_seconds`` while a bucket applies (client-go's metric).
    """

    def __init__(
        self, qps: float, burst: int, clock: Clock, *, auto: bool = False, metrics: RestClientMetrics | None = None
    ) -> None:
        self.bucket: TokenBucket | None = TokenBucket(qps, burst, clock) if qps > 0 else None
        # Still looking for the APF headers (only an auto limit with a bucket to lift does).
        self.auto = auto and self.bucket is not None
        self.lifted_by: str | None = None  # the header that lifted the bucket
        self._metrics = metrics or RestClientMetrics.for_registry(None, "")

    @property
    def mode(self) -> str:
        """``auto`` (fallback bucket, watching for APF), ``fixed`` (a bucket for good) or ``off``."""
        return "off" if self.bucket is None else "auto" if self.auto else "fixed"

    async def wait(self, method: str) -> None:
        """Wait for a token of the bucket (at once without one) and record the wait under ``method``."""
        if self.bucket is not None:
            self._metrics.throttled(method, await self.bucket.wait())

    def observe(self, headers: Mapping[str, str]) -> bool:
        """Lift the fallback bucket if ``headers`` (of any response) show APF; True when this call did."""
        if not self.auto:
            return False
        for name in APF_HEADERS:
            if name in headers:
                self.auto = False
                self.bucket = None
                self.lifted_by = name
                return True
        return False


def _encode_body(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return orjson.dumps(body)


def _name_permission(error: ApiError, method: str, url: str) -> ApiError:
    if isinstance(error, Forbidden):
        attributes = RequestAttributes.of(method, url)
        if attributes is not None:
            error.permission = attributes.describe()
    return error


def _retryable(error: ApiError, idempotent: bool) -> bool:
    if isinstance(error, TooManyRequests):
        return True
    if isinstance(error, ServerError):
        return error.retry_after is not None or idempotent
    return False


class RestClient:
    """Sends requests to one API server with kubernetes-asyncio's configuration, credentials and TLS.

    Why we do the exchange ourselves: kubernetes-asyncio builds a model object per decoded item, never
    retries and has no watch inactivity timeout; what it does well (kubeconfig and in-cluster
    configuration, refreshed credentials, TLS, its connection pool) is kept. Limits and timeouts: a
    :class:`RequestLimit` over every request (watches included; ``qps <= 0`` disables it), a total timeout
    per non-watch attempt (``request_timeout``, the apiserver's own 60 s), and a connect timeout. Metrics
    (``registry``; none when ``None``): ``rest_client_requests_total``,
    ``rest_client_request_duration_seconds`` per attempt, ``rest_client_request_retries_total``.
    """

    def __init__(
        self,
        configuration: Configuration,
        *,
        qps: float = 50.0,
        burst: int = 100,
        auto_limit: bool = False,
        retry: RetryPolicy | None = None,
        registry: Any = None,
        request_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        user_agent: str = USER_AGENT,
        clock: Clock | None = None,
    ) -> None:
        self.configuration = configuration
        self.base_url = (configuration.host or "").rstrip("/")  # none: the URL check below says so
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"API server URL must be http(s)://host[:port], got {configuration.host!r}")
        self.host = parts.netloc
        self.retry = retry or RetryPolicy()
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.user_agent = user_agent
        self._clock = clock or MonotonicClock()
        self._registry = registry
        self._metrics = RestClientMetrics.for_registry(registry, self.host)
        self.limit = RequestLimit(qps, burst, self._clock, auto=auto_limit, metrics=self._metrics)
        self._rest: RESTClientObject | None = None
        self._session: aiohttp.ClientSession | None = None
        self._send_kwargs: dict[str, Any] = {}
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}  # by total, for this connect_timeout
        self._closed = False

    async def close(self) -> None:
        """Close the session and connection pool; idempotent. Later requests raise RuntimeError."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._rest is not None:
            await self._rest.close()
            self._rest = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params = None,
        body: Any = None,
        content_type: str | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> dict[str, Any]:
        """Send one request (see :meth:`request_raw`) and return the decoded JSON object (``{}`` when the
        body is empty). Raises :class:`ResponseDecodeError` for a 2xx body that is not a JSON object."""
        _, raw = await self.request_raw(
            method,
            path,
            params=params,
            body=body,
            content_type=content_type,
            idempotent=idempotent,
            timeout=timeout,
            retry=retry,
        )
        if not raw:
            return {}
        try:
            decoded = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ResponseDecodeError(
                f"{method} {path}: response is not JSON ({raw[:80]!r}{'...' if len(raw) > 80 else ''})"
            ) from exc
        if not isinstance(decoded, dict):
            raise ResponseDecodeError(f"{method} {path}: response is JSON but not an object")
        return decoded

    async def request_raw(
        self,
        method: str,
        path: str,
        *,
        params: Params = None,
        body: Any = None,
        content_type: str | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> tuple[int, bytes]:
        """Send ``body`` (a dict is JSON-encoded, bytes go as they are) to ``path`` and return ``(status, raw
        body)`` of the 2xx answer, retrying by ``retry`` (default: the client's; see :class:`RetryPolicy`).
        Raises the typed :class:`ApiError` of a non-2xx answer, :class:`TransportError` below HTTP."""
        method = method.upper()
        url = self._url(path, params)
        data = _encode_body(body)
        headers = self._base_headers()
        if data is not None:
            headers["Content-Type"] = content_type or "application/json"
        if idempotent is None:
            idempotent = method in _IDEMPOTENT_METHODS or (
                method == "PATCH" and headers.get("Content-Type") != JSON_PATCH
            )
        client_timeout = self._timeout(timeout)
        policy = retry or self.retry
        failure: dict[str, Any]  # what a retry log line says about the failure
        attempt = 0
        while True:
            attempt += 1
            try:
                response, raw = await self._exchange(method, url, data, headers, client_timeout, stream=False)
                return response.status, raw
            except TransportError as exc:
                if attempt >= policy.max_attempts or (exc.request_sent and not idempotent):
                    raise
                delay, code = policy.delay(attempt, None), "<error>"
                message, failure = "retrying request after transport error", {"error": str(exc)}
            except ApiError as error:
                if attempt >= policy.max_attempts or not _retryable(error, idempotent):
                    raise
                delay, code = policy.delay(attempt, error.retry_after), str(error.status)
                message, failure = "retrying request", {"status": error.status, "reason": error.reason}
            self._metrics.retried(method, code)
            log.info(message, method=method, path=path, attempt=attempt, delay=round(delay, 3), **failure)
            await self._clock.sleep_until(self._clock.now() + delay)

    async def _open_stream(
        self, url: str, headers: dict[str, str], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """A streaming GET of ``url``: the 2xx response with its body unread (the caller releases it)."""
        response, _ = await self._exchange("GET", url, None, headers, timeout, stream=True)
        return response

    async def _exchange(
        self,
        method: str,
        url: str,
        data: bytes | None,
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
        *,
        stream: bool,
    ) -> tuple[aiohttp.ClientResponse, bytes]:
        """One attempt of a request, the path every request takes: the limit, credentials, the send,
        metrics, APF detection and error mapping. The body is read unless this is a 2xx ``stream``."""
        await self.limit.wait(method)
        _, session = self._transport()
        await self._auth_headers(headers)
        started = time.perf_counter()
        code = "<error>"
        try:
            response = await session.request(
                method, yarl.URL(url, encoded=True), data=data, headers=headers, timeout=timeout, **self._send_kwargs
            )
            code = str(response.status)
            raw = b""
            if not (stream and 200 <= response.status < 300):
                try:
                    raw = await response.read()
                finally:
                    response.release()
        except aiohttp.ClientConnectorError as exc:
            raise TransportError(f"{method} {url}: cannot connect: {exc}", request_sent=False) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise TransportError(f"{method} {url}: connect timeout", request_sent=False) from exc
        except aiohttp.SocketTimeoutError as exc:
            if stream:
                raise StreamStalled(f"watch {url}: no response headers within {timeout.sock_read} s") from exc
            raise TransportError(f"{method} {url}: timed out after {timeout.total} s") from exc
        except TimeoutError as exc:
            raise TransportError(f"{method} {url}: timed out after {timeout.total} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        finally:
            self._metrics.observe(method, code, time.perf_counter() - started)
        self._observe_apf(response.headers)
        if not 200 <= response.status < 300:
            raise _name_permission(error_from_response(response.status, raw, response.headers), method, url)
        return response, raw

    def _observe_apf(self, headers: Mapping[str, str]) -> None:
        if self.limit.auto and self.limit.observe(headers):
            log.info(
                f"API Priority and Fairness detected on the server ({self.limit.lifted_by}): client-side rate "
                "limit off; set --kube-api-qps to keep one",
                server=self.base_url,
            )

    async def _auth_headers(self, headers: dict[str, str]) -> None:
        # auth_settings() runs the configuration's refresh hook (rotated service-account / exec tokens).
        settings = await self.configuration.auth_settings()
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]

    def _transport(self) -> tuple[RESTClientObject, aiohttp.ClientSession]:
        """kubernetes-asyncio's transport (TLS context, connection pool, proxy settings) and our session on
        its connection pool.

        Our own session because kubernetes-asyncio's trusts the environment (``trust_env=True``): aiohttp
        then looks up ~/.netrc and the proxy variables in a worker thread on *every* request, two thread
        hand-offs that cost more CPU than the request itself (docs/benchmarks/profiles/README.md). The
        environment's proxy (HTTPS_PROXY/NO_PROXY, as client-go honours them) is resolved once here
        instead; netrc is not a Kubernetes credential source."""
        if self._rest is None or self._session is None:
            if self._closed:
                raise RuntimeError("ApiClient is closed")
            # Created lazily: aiohttp sessions must be created inside the running event loop.
            self._rest = RESTClientObject(self.configuration)
            self._session = aiohttp.ClientSession(
                connector=self._rest.pool_manager.connector,
                connector_owner=False,
                trust_env=False,
                read_bufsize=2**21,  # as kubernetes-asyncio: one watch event can exceed aiohttp's default
                # client-go's http.Client has no cookie jar either; the apiserver sets no cookies.
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._send_kwargs = self._request_kwargs(self._rest)
        return self._rest, self._session

    def _request_kwargs(self, rest: RESTClientObject) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if rest.proxy:
            kwargs["proxy"] = rest.proxy
        else:
            try:
                env_proxy: tuple[yarl.URL, aiohttp.BasicAuth | None] | None = get_env_proxy_for_url(
                    yarl.URL(self.base_url)
                )
            except LookupError:  # no proxy variable applies to the API server: connect directly
                env_proxy = None
            if env_proxy is not None:
                kwargs["proxy"], kwargs["proxy_auth"] = env_proxy
        if rest.proxy_headers:
            kwargs["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            kwargs["server_hostname"] = rest.server_hostname
        return kwargs

    def _timeout(self, timeout: float | None) -> aiohttp.ClientTimeout:
        total = timeout if timeout is not None else self.request_timeout
        cached = self._timeouts.get(total)
        if cached is None:
            # ClientTimeout is an attrs class (slow to build) and requests mostly share a few values.
            cached = aiohttp.ClientTimeout(total=total, sock_connect=self.connect_timeout)
            if len(self._timeouts) < 64:
                self._timeouts[total] = cached
        return cached

    def _base_headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "User-Agent": self.user_agent}

    def _url(self, path: str, params: Params) -> str:
        if params:
            return f"{self.base_url}{path}?{urlencode(params)}"
        return self.base_url + path
