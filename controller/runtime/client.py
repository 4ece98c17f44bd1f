"""A small Kubernetes REST client that speaks raw JSON: plain dicts in, plain dicts out.

Why: kubernetes-asyncio's generated API builds a model object for every item it decodes, which caps a
watch at a few thousand events per second and doubles the memory of a cache; it also never retries, picks
PATCH content types by guessing, and leaves a stalled watch hanging forever (its watch has no inactivity
timeout). We keep what it
does well — kubeconfig / in-cluster configuration, credentials (incl. refreshed service-account and exec
tokens), TLS, its aiohttp session — and do the HTTP exchange ourselves: bodies are read as bytes and
decoded with orjson, errors are mapped to the typed classes of :mod:`controller.runtime.errors`, and watch
streams are split into lines by our own reader.

Contract:

- Addressing: :class:`Resource` (group, version, plural, namespaced) builds paths; every verb also
  accepts a raw path string (``"/version"``, ``"/api/v1/namespaces/x/pods/y"``) in its place.
- Every non-2xx response raises an :class:`~controller.runtime.errors.ApiError` subclass; failures below
  HTTP raise :class:`~controller.runtime.errors.TransportError`.
- Retries (:class:`RetryPolicy`; default at most 5 attempts, backoff 0.2 s doubling, capped at 10 s,
  jittered). Which failures are retried (client-go retries only a 429 or 5xx that carries Retry-After, and a
  GET after a lost connection; kubernetes-asyncio retries nothing):

  * **429** — always, any verb: the request was rejected before it ran. Waits ``Retry-After``.
  * **5xx with Retry-After** — any verb (client-go's rule: the server asks us to come back; 503 on
    shutdown, 504 "too large resource version").
  * **5xx without Retry-After** and **connection errors after the request was sent** — only idempotent
    requests: GET, PUT (it carries a resourceVersion, so a replay after an unseen success fails with a
    409 Conflict rather than doing anything twice), DELETE, and PATCH except JSON patch. A POST (create)
    or a JSON patch is never replayed blindly: the caller sees the error (and after a timed-out create
    should expect a later 409 AlreadyExists).
  * **connection refused / DNS / connect timeout** — any verb: nothing reached the server.

  Retry-After is honoured up to ``RetryPolicy.max_retry_after`` (60 s). Watches are never retried here;
  the informer owns watch recovery.
- Client-side throttling (:class:`RequestLimit`): a token bucket over *every* request (watches included),
  ``qps``/``burst``, default 50/100; ``qps <= 0`` disables it. With ``auto_limit=True`` the bucket is only a
  fallback: the first response carrying kube-apiserver's API Priority and Fairness headers
  (``X-Kubernetes-PF-FlowSchema-UID`` / ``-PriorityLevel-UID``) lifts it for good, with one log line. That
  is the ecosystem's current answer (controller-runtime turned its client-side limiter off by default on
  SIG API Machinery's advice; Flux and cert-manager detect APF the same way): the server's APF protects it
  by priority level and flow, and what it sends when it throttles — 429 + Retry-After — is retried above.
  An explicit limit is always kept, APF or not (the caller decides; see docs/benchmarks/profiles).
  :meth:`ApiClient.sibling` gives leader election a limit and a connection pool of its own.
- Metrics (``registry`` passed in, none when ``None``): ``rest_client_requests_total{code,method,host}``
  and ``rest_client_request_duration_seconds{verb,host}`` per attempt, ``rest_client_request_retries_total``,
  ``rest_client_rate_limiter_duration_seconds{verb,host}`` per attempt while a bucket applies.
- Timeouts: each non-watch attempt has a total timeout (``request_timeout``, default 60 s — the
  apiserver's own limit); watches have none, only a connect timeout and an *inactivity* timeout (no byte
  for that long → :class:`~controller.runtime.errors.StreamStalled`).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import aiohttp
import anyio
import orjson
import structlog
import yarl
from aiohttp.helpers import get_env_proxy_for_url
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.client.rest import RESTClientObject
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from controller import __version__
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

__all__ = [
    "Resource",
    "RequestAttributes",
    "RetryPolicy",
    "RequestLimit",
    "APF_HEADERS",
    "ApiClient",
    "WatchStream",
    "LineSplitter",
    "decode_lines",
    "PATCH_CONTENT_TYPES",
    "PODS",
    "SERVICES",
    "CONFIGMAPS",
    "EVENTS",
    "NAMESPACES",
    "NODES",
    "LEASES",
]

log = structlog.get_logger(__name__)

USER_AGENT = f"tfjob-controller/{__version__}"

PATCH_CONTENT_TYPES: dict[str, str] = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

# Names that need no percent-encoding in a path segment (all valid Kubernetes names do; anything else is
# quoted so that a hostile name cannot change the path).
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9._:@-]+\Z")


def _segment(value: str) -> str:
    if not value:
        raise ValueError("empty path segment (name or namespace)")
    return value if _PLAIN_SEGMENT.match(value) else quote(value, safe="")


@dataclass(frozen=True, slots=True)
class Resource:
    """One API resource: ``Resource("", "v1", "pods")``, ``Resource("kubeflow.org", "v1", "tfjobs")``.

    ``group`` is ``""`` for the core group. Paths are built without I/O; the prefix is computed once.
    """

    group: str
    version: str
    plural: str
    namespaced: bool = True
    _prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.version or not self.plural:
            raise ValueError(f"Resource needs a version and a plural, got {self.version!r}/{self.plural!r}")
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        object.__setattr__(self, "_prefix", prefix)

    @property
    def api_version(self) -> str:
        """``apiVersion`` of the objects: ``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The resource as kubectl names it: ``pods``, ``tfjobs.kubeflow.org``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        """Collection path (``name=None``; all namespaces when ``namespace=None``) or object path."""
        if self.namespaced and namespace:
            base = f"{self._prefix}/namespaces/{_segment(namespace)}/{self.plural}"
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.qualified} is namespaced: a namespace is required to address {name!r}")
        else:
            base = f"{self._prefix}/{self.plural}"
        if name is None:
            if subresource:
                raise ValueError("a subresource needs an object name")
            return base
        path = f"{base}/{_segment(name)}"
        return f"{path}/{subresource}" if subresource else path


PODS = Resource("", "v1", "pods")
SERVICES = Resource("", "v1", "services")
CONFIGMAPS = Resource("", "v1", "configmaps")
EVENTS = Resource("", "v1", "events")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
NODES = Resource("", "v1", "nodes", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases")
CUSTOM_RESOURCE_DEFINITIONS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", namespaced=False)


@dataclass(frozen=True, slots=True)
class RequestAttributes:
    """What RBAC authorizes a resource request by (kube-apiserver's RequestInfo): verb, API group,
    resource, subresource, namespace (``""`` when cluster-wide) and name (``""`` for collections)."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @classmethod
    def of(cls, method: str, url: str) -> RequestAttributes | None:
        """Attributes of a request to ``url`` (absolute or a path); None for non-resource paths."""
        parts = urlsplit(url)
        segments = [unquote(s) for s in parts.path.strip("/").split("/") if s]
        if segments[:1] == ["api"] and len(segments) >= 2:
            group, rest = "", segments[2:]
        elif segments[:1] == ["apis"] and len(segments) >= 3:
            group, rest = segments[1], segments[3:]
        else:
            return None
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        elif len(rest) in (1, 2) and rest[0] == "namespaces":
            namespace = rest[1] if len(rest) == 2 else ""
        if not rest:
            return None
        resource, name, subresource = rest[0], rest[1] if len(rest) > 1 else "", "/".join(rest[2:])
        method = method.upper()
        if method == "GET" and not name:
            verb = "watch" if parse_qs(parts.query).get("watch", [""])[0] in ("true", "1") else "list"
        elif method == "DELETE" and not name:
            verb = "deletecollection"
        else:
            verb = {
                "GET": "get",
                "HEAD": "get",
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
            }.get(method, method.lower())
        return cls(verb, group, resource, subresource, namespace, name)

    def describe(self) -> str:
        """``create pods in API group "" in namespace "default"`` (the apiserver's own phrasing)."""
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f' in the namespace "{self.namespace}"' if self.namespace else " at the cluster scope"
        return f'{self.verb} resource "{resource}" in API group "{self.group}"{where}'


def _name_permission(error: ApiError, method: str, url: str) -> ApiError:
    if isinstance(error, Forbidden):
        attributes = RequestAttributes.of(method, url)
        if attributes is not None:
            error.permission = attributes.describe()
    return error


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of failed requests (see the module docstring for *which* failures).

    ``max_attempts`` counts the first attempt (1 disables retries). The n-th retry waits
    ``min(max_delay, base_delay * 2**(n-1))`` scaled by a random factor in [1, 1+jitter), or the server's
    ``Retry-After`` (at most ``max_retry_after``) when it sent one.
    """

    max_attempts: int = 5
    base_delay: float = 0.2
    max_delay: float = 10.0
    jitter: float = 0.5
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("RetryPolicy.max_attempts must be >= 1")
        if self.base_delay < 0 or self.max_delay < 0 or self.jitter < 0 or self.max_retry_after < 0:
            raise ValueError("RetryPolicy delays must be >= 0")

    def delay(self, retry: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        base = min(self.max_delay, self.base_delay * 2.0 ** (retry - 1))
        return min(self.max_delay, base * (1.0 + random.random() * self.jitter))


# A kube-apiserver that runs API Priority and Fairness (on by default since 1.20, GA in 1.29) puts both on
# every response it classifies, 429s included (kubernetes.io/docs/reference/debug-cluster/flow-control).
APF_HEADERS = ("X-Kubernetes-PF-FlowSchema-UID", "X-Kubernetes-PF-PriorityLevel-UID")


class RequestLimit:
    """The client-side limit of an :class:`ApiClient`: a token bucket (``qps > 0``), none
    (``qps <= 0``), or, with ``auto``, a fallback bucket that the first response showing the server runs
    API Priority and Fairness lifts for good (:meth:`observe`). APF queues, shares and rejects (429 +
    Retry-After, which the client honours) by priority level on the server, so a second, blind limit in
    the client only delays the controller; without APF (disabled, or a proxy that drops the headers) the
    bucket stays. Each wait is recorded as ``rest_client_rate_limiter_duration_seconds`` while a bucket
    applies (client-go's metric), so a dashboard shows when the client throttles itself.
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


_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _encode_body(body: Any) -> bytes | None:
    if body is None:
        return None
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return orjson.dumps(body)


def _namespace_of(body: Mapping[str, Any]) -> str | None:
    meta = body.get("metadata") if isinstance(body, Mapping) else None
    return meta.get("namespace") if isinstance(meta, Mapping) else None


def _name_of(body: Mapping[str, Any]) -> str | None:
    meta = body.get("metadata") if isinstance(body, Mapping) else None
    return meta.get("name") if isinstance(meta, Mapping) else None


class LineSplitter:
    """Splits a byte stream into ``\\n``-terminated lines; unbounded line length, O(n) total work.

    Chunk boundaries are unrelated to line boundaries (the API server flushes whenever its event channel is
    momentarily empty, and proxies split chunks again): a chunk may hold many lines or a
    fraction of one. ``feed(chunk)`` returns the complete lines it finished (without the newline, empty
    lines dropped); the unfinished tail is kept as a list of pieces and joined once, when its newline
    arrives, so a multi-megabyte line costs one copy, not one per chunk.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if b"\n" not in chunk:
            if chunk:
                self._pending.append(chunk)
            return []
        lines = chunk.split(b"\n")
        if self._pending:
            self._pending.append(lines[0])
            lines[0] = b"".join(self._pending)
            self._pending = []
        tail = lines.pop()
        if tail:
            self._pending.append(tail)
        if b"" in lines:
            lines = [line for line in lines if line]
        return lines

    def tail(self) -> bytes:
        """Bytes received after the last newline (a truncated line if the stream ended here)."""
        return b"".join(self._pending)


def decode_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    """orjson-decode watch event lines; a line that is not JSON raises :class:`ResponseDecodeError`."""
    loads = orjson.loads
    try:
        return [loads(line) for line in lines]
    except orjson.JSONDecodeError as exc:
        raise ResponseDecodeError(f"watch event is not valid JSON: {exc}") from exc


class WatchStream:
    """One watch request's event stream, decoded into plain dicts.

    Use as ``async with client.watch(...) as stream: async for event in stream: ...`` (or iterate
    ``stream.batches()`` for lists of the events that arrived together — the informer's hot path). Plain
    ``async for event in client.watch(...)`` also works; the response is released when the iteration
    ends or fails. Events are yielded as the server sent them (``{"type", "object"}``), including
    ``BOOKMARK`` and ``ERROR`` — interpreting them is the caller's job.

    Ends normally when the server ends the stream (timeoutSeconds reached, server closed it). Raises
    :class:`ApiError` if the watch request itself is refused, :class:`StreamStalled` when no byte arrived
    for ``inactivity_timeout`` seconds, :class:`TransportError` when the connection breaks, and
    :class:`ResponseDecodeError` for a line that is not JSON.
    """

    def __init__(
        self,
        client: ApiClient,
        url: str,
        headers: dict[str, str],
        timeout: aiohttp.ClientTimeout,
        inactivity_timeout: float | None,
    ) -> None:
        self._client = client
        self._url = url
        self._headers = headers
        self._timeout = timeout
        self._inactivity_timeout = inactivity_timeout
        self._response: aiohttp.ClientResponse | None = None
        self._pending: list[dict[str, Any]] = []
        self._pending_index = 0
        self._batches: AsyncIterator[list[dict[str, Any]]] | None = None
        self._closed = False
        self.bytes_read = 0

    async def __aenter__(self) -> WatchStream:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Send the watch request and wait for the response headers (the server flushes them at once)."""
        if self._response is not None:
            return
        if self._closed:
            raise RuntimeError("watch stream already closed")
        self._response = await self._client._open_stream(self._url, self._headers, self._timeout)

    async def close(self) -> None:
        self._closed = True
        if self._response is not None:
            self._response.release()
            self._response.close()
            self._response = None

    async def lines(self) -> AsyncIterator[list[bytes]]:
        """Raw event lines (JSON, newline stripped) grouped as they arrived: one list per network read that
        completed at least one line. For callers that decode themselves (the informer)."""
        await self.open()
        response = self._response
        assert response is not None
        splitter = LineSplitter()
        try:
            async for chunk in response.content.iter_any():
                self.bytes_read += len(chunk)
                lines = splitter.feed(chunk)
                if lines:
                    yield lines
        except aiohttp.SocketTimeoutError as exc:
            raise StreamStalled(
                f"watch stream sent no bytes for {self._inactivity_timeout} s (stalled connection)"
            ) from exc
        except aiohttp.ClientPayloadError as exc:
            raise TransportError(f"watch stream broken: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(f"watch stream failed: {type(exc).__name__}: {exc}") from exc
        finally:
            await self.close()
        tail = splitter.tail()
        if tail.strip():
            # The server terminates every event with a newline; an unterminated tail means the body was cut.
            raise TransportError(f"watch stream ended inside an event ({len(tail)} bytes without newline)")

    async def batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """Decoded events grouped as they arrived (see :meth:`lines`)."""
        async for lines in self.lines():
            yield decode_lines(lines)

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._pending_index < len(self._pending):
            event = self._pending[self._pending_index]
            self._pending_index += 1
            return event
        if self._batches is None:
            self._batches = self.batches()
        try:
            batch = await self._batches.__anext__()
        except StopAsyncIteration:
            raise
        self._pending = batch
        self._pending_index = 1
        return batch[0]


class ApiClient:
    """Raw-JSON Kubernetes client. Construct with :meth:`from_kubeconfig`, :meth:`in_cluster` or
    :meth:`default`; use as an async context manager or call :meth:`close`.

    All verbs take ``resource`` as a :class:`Resource` or a raw path string (then ``name``/``namespace``
    must be left out). Bodies are plain dicts (or pre-encoded bytes); results are plain dicts.
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
        self._env_proxy: tuple[yarl.URL, aiohttp.BasicAuth | None] | None = None
        self._send_kwargs: dict[str, Any] = {}
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}  # by total, for this connect_timeout
        self._closed = False

    # -- construction ---------------------------------------------------------------------------------

    @classmethod
    async def from_kubeconfig(cls, path: str | None = None, context: str | None = None, **kwargs: Any) -> ApiClient:
        """Client for ``context`` (default: the current context) of the kubeconfig at ``path`` (default:
        the first entry of ``$KUBECONFIG``, else ``~/.kube/config``). Exec-plugin credentials are
        re-run when they expire."""
        if path is None:
            env = os.environ.get("KUBECONFIG", "")
            path = next((p for p in env.split(os.pathsep) if p), None) or str(
                await anyio.Path(kube_config.KUBE_CONFIG_DEFAULT_LOCATION).expanduser()
            )
        if not await anyio.Path(path).is_file():
            raise FileNotFoundError(f"kubeconfig not found: {path}")
        configuration = Configuration()
        loader = await kube_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration, persist_config=False
        )
        if "exec" in (getattr(loader, "_user", None) or {}):
            # kubernetes-asyncio only refreshes exec tokens from a background loop the caller must own;
            # a refresh hook runs on every request instead (cheap: the loader returns early while the token
            # is unexpired).
            async def refresh_exec_token(config: Configuration) -> None:
                await loader.load_from_exec_plugin()
                token = getattr(loader, "token", None)
                if token and config.api_key.get("BearerToken") != token:
                    config.api_key["BearerToken"] = token

            configuration.refresh_api_key_hook = refresh_exec_token
        return cls(configuration, **kwargs)

    @classmethod
    def in_cluster(
        cls,
        *,
        token_path: str = SERVICE_TOKEN_FILENAME,
        ca_path: str = SERVICE_CERT_FILENAME,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> ApiClient:
        """Client from the pod's service account. The token file is re-read every minute (projected
        service-account tokens rotate), via kubernetes-asyncio's refresh hook."""
        configuration = Configuration()
        loader = InClusterConfigLoader(
            token_filename=token_path,
            cert_filename=ca_path,
            try_refresh_token=True,
            environ=dict(os.environ if environ is None else environ),
        )
        loader.load_and_set(configuration)
        return cls(configuration, **kwargs)

    @classmethod
    async def default(cls, **kwargs: Any) -> ApiClient:
        """In-cluster when ``KUBERNETES_SERVICE_HOST`` is set, else the kubeconfig (see
        :meth:`from_kubeconfig`)."""
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.in_cluster(**kwargs)
        return await cls.from_kubeconfig(**kwargs)

    def sibling(self, *, qps: float, burst: int) -> ApiClient:
        """A client of the same server, credentials and settings with a request limit and a connection
        pool of its own (close it separately). For leader election: its renewals must never wait behind
        the controller's requests, in this client's bucket or for one of its connections."""
        return ApiClient(
            self.configuration,
            qps=qps,
            burst=burst,
            retry=self.retry,
            registry=self._registry,
            request_timeout=self.request_timeout,
            connect_timeout=self.connect_timeout,
            user_agent=self.user_agent,
            clock=self._clock,
        )

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._rest is not None:
            await self._rest.close()
            self._rest = None

    def _transport(self) -> tuple[RESTClientObject, aiohttp.ClientSession]:
        """kubernetes-asyncio's transport (TLS context, connection pool, proxy settings) and our session on
        its connection pool.

        Our own session because kubernetes-asyncio's trusts the environment (``trust_env=True``): aiohttp
        then looks up ~/.netrc and the proxy variables in a worker thread on *every* request, two thread
        hand-offs that cost more CPU than the request itself (measured: docs/benchmarks/profiles). The
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
            if not self._rest.proxy:
                try:
                    self._env_proxy = get_env_proxy_for_url(yarl.URL(self.base_url))
                except LookupError:
                    self._env_proxy = None
            self._send_kwargs = self._request_kwargs(self._rest)
        return self._rest, self._session

    # -- verbs ----------------------------------------------------------------------------------------

    async def get(
        self,
        resource: Resource | str,
        name: str | None = None,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """GET one object (or, with a path string, any JSON document such as ``/version``)."""
        path = self._path(resource, namespace, name, subresource)
        params = {"resourceVersion": resource_version} if resource_version is not None else None
        return await self.request("GET", path, params=params, timeout=timeout)

    async def list(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """One LIST request (one page when ``limit`` is set; follow ``metadata.continue`` for more)."""
        path = self._path(resource, namespace, None, None)
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(int(limit))
        if continue_:
            params["continue"] = continue_
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if resource_version_match:
            params["resourceVersionMatch"] = resource_version_match
        return await self.request("GET", path, params=params, timeout=timeout)

    async def create(
        self,
        resource: Resource | str,
        body: Mapping[str, Any] | bytes,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        name: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST to the collection (``namespace`` defaults to ``body.metadata.namespace``). With
        ``subresource`` (e.g. ``eviction``) and ``name``, POST to that object's subresource."""
        if namespace is None and not isinstance(body, (bytes, bytearray)):
            namespace = _namespace_of(body)
        path = self._path(resource, namespace, name, subresource)
        return await self.request(
            "POST", path, params=self._write_params(field_manager, dry_run), body=body, timeout=timeout
        )

    async def replace(
        self,
        resource: Resource | str,
        body: Mapping[str, Any] | bytes,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """PUT the whole object (name/namespace default to the body's metadata). Send the object's
        ``metadata.resourceVersion`` to get optimistic concurrency (409 :class:`Conflict` if stale)."""
        if not isinstance(body, (bytes, bytearray)):
            namespace = namespace if namespace is not None else _namespace_of(body)
            name = name if name is not None else _name_of(body)
        if isinstance(resource, Resource) and not name:
            raise ValueError("replace needs an object name (argument or body.metadata.name)")
        path = self._path(resource, namespace, name, subresource)
        return await self.request(
            "PUT", path, params=self._write_params(field_manager, dry_run), body=body, timeout=timeout
        )

    async def patch(
        self,
        resource: Resource | str,
        name: str | None,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """PATCH with an explicit Content-Type: ``patch_type`` is ``"merge"`` (RFC 7386), ``"json"``
        (RFC 6902 op list), ``"strategic"`` (built-in kinds only) or ``"apply"`` (server-side apply;
        needs ``field_manager``; ``force`` takes over conflicting fields)."""
        content_type = PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            raise ValueError(f"unknown patch_type {patch_type!r}; use one of {sorted(PATCH_CONTENT_TYPES)}")
        if patch_type == "apply" and not field_manager:
            raise ValueError("server-side apply (patch_type='apply') requires field_manager")
        if patch_type == "json" and not isinstance(body, (list, bytes, bytearray)):
            raise ValueError("a JSON patch body is a list of operations")
        params = self._write_params(field_manager, dry_run)
        if force is not None:
            params["force"] = _bool(force)
        path = self._path(resource, namespace, name, subresource)
        return await self.request(
            "PATCH",
            path,
            params=params,
            body=body,
            content_type=content_type,
            idempotent=patch_type != "json",
            timeout=timeout,
        )

    async def delete(
        self,
        resource: Resource | str,
        name: str | None = None,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        preconditions: Mapping[str, str] | None = None,
        dry_run: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """DELETE with a ``DeleteOptions`` body. Returns what the server returns: the object while it is
        terminating (finalizers, graceful pods), else a success ``Status``. ``preconditions`` is
        ``{"uid": ..., "resourceVersion": ...}`` (mismatch → 409 :class:`Conflict`)."""
        if propagation_policy not in (None, "Orphan", "Background", "Foreground"):
            raise ValueError(f"propagation_policy must be Orphan, Background or Foreground, got {propagation_policy!r}")
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = int(grace_period_seconds)
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if preconditions:
            options["preconditions"] = dict(preconditions)
        if dry_run:
            options["dryRun"] = ["All"]
        path = self._path(resource, namespace, name, None)
        return await self.request("DELETE", path, body=options, timeout=timeout)

    def watch(
        self,
        resource: Resource | str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        allow_watch_bookmarks: bool = True,
        inactivity_timeout: float | None = 90.0,
    ) -> WatchStream:
        """A watch stream (see :class:`WatchStream`); nothing is sent until it is opened or iterated.

        ``timeout_seconds`` is the server-side duration of the watch; ``inactivity_timeout`` is ours: no
        byte for that long (bookmarks count) → :class:`StreamStalled`. Keep it above the server's
        bookmark period (60 s on real clusters).
        """
        path = self._path(resource, namespace, None, None)
        params: dict[str, str] = {"watch": "true"}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(int(timeout_seconds))
        if allow_watch_bookmarks:
            params["allowWatchBookmarks"] = "true"
        url = self._url(path, params)
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.connect_timeout, sock_connect=self.connect_timeout, sock_read=inactivity_timeout
        )
        return WatchStream(self, url, self._base_headers(), timeout, inactivity_timeout)

    # -- HTTP core ------------------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> dict[str, Any]:
        """Send one request (with retries: ``retry``, default the client's), return the decoded JSON body
        (``{}`` when empty)."""
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
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> tuple[int, bytes]:
        """Like :meth:`request` but returns ``(status, raw body bytes)`` of the 2xx response."""
        method = method.upper()
        url = self._url(path, params)
        data = _encode_body(body)
        headers = self._base_headers()
        if data is not None:
            headers["Content-Type"] = content_type or "application/json"
        if idempotent is None:
            idempotent = method in _IDEMPOTENT_METHODS or (
                method == "PATCH" and headers.get("Content-Type") != PATCH_CONTENT_TYPES["json"]
            )
        client_timeout = self._timeout(timeout)
        policy = retry or self.retry
        attempt = 0
        while True:
            attempt += 1
            await self.limit.wait(method)
            try:
                status, resp_headers, raw = await self._send(method, url, data, headers, client_timeout)
            except TransportError as exc:
                if attempt >= policy.max_attempts or (exc.request_sent and not idempotent):
                    raise
                delay = policy.delay(attempt, None)
                self._metrics.retried(method, "<error>")
                log.info(
                    "retrying request after transport error",
                    method=method,
                    path=path,
                    attempt=attempt,
                    delay=round(delay, 3),
                    error=str(exc),
                )
                await self._clock.sleep_until(self._clock.now() + delay)
                continue
            self._observe_apf(resp_headers)
            if 200 <= status < 300:
                return status, raw
            error = _name_permission(error_from_response(status, raw, resp_headers), method, url)
            if attempt >= policy.max_attempts or not self._retryable(error, idempotent):
                raise error
            delay = policy.delay(attempt, error.retry_after)
            self._metrics.retried(method, str(status))
            log.info(
                "retrying request",
                method=method,
                path=path,
                attempt=attempt,
                status=status,
                reason=error.reason,
                delay=round(delay, 3),
            )
            await self._clock.sleep_until(self._clock.now() + delay)

    def _observe_apf(self, headers: Mapping[str, str]) -> None:
        if self.limit.auto and self.limit.observe(headers):
            log.info(
                f"API Priority and Fairness detected on the server ({self.limit.lifted_by}): client-side rate "
                "limit off; set --kube-api-qps to keep one",
                server=self.base_url,
            )

    @staticmethod
    def _retryable(error: ApiError, idempotent: bool) -> bool:
        if isinstance(error, TooManyRequests):
            return True
        if isinstance(error, ServerError):
            return error.retry_after is not None or idempotent
        return False

    async def _auth_headers(self, headers: dict[str, str]) -> None:
        # auth_settings() runs the configuration's refresh hook (rotated service-account / exec tokens).
        settings = await self.configuration.auth_settings()
        for setting in settings.values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]

    def _request_kwargs(self, rest: RESTClientObject) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if rest.proxy:
            kwargs["proxy"] = rest.proxy
        elif self._env_proxy is not None:
            kwargs["proxy"], kwargs["proxy_auth"] = self._env_proxy
        if rest.proxy_headers:
            kwargs["proxy_headers"] = rest.proxy_headers
        if rest.server_hostname:
            kwargs["server_hostname"] = rest.server_hostname
        return kwargs

    async def _send(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str], timeout: aiohttp.ClientTimeout
    ) -> tuple[int, Mapping[str, str], bytes]:
        _, session = self._transport()
        await self._auth_headers(headers)
        started = time.perf_counter()
        code = "<error>"
        try:
            async with session.request(
                method,
                yarl.URL(url, encoded=True),
                data=data,
                headers=headers,
                timeout=timeout,
                **self._send_kwargs,
            ) as response:
                code = str(response.status)
                raw = await response.read()
                return response.status, response.headers, raw
        except aiohttp.ClientConnectorError as exc:
            raise TransportError(f"{method} {url}: cannot connect: {exc}", request_sent=False) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise TransportError(f"{method} {url}: connect timeout", request_sent=False) from exc
        except TimeoutError as exc:
            raise TransportError(f"{method} {url}: timed out after {timeout.total} s") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        finally:
            self._metrics.observe(method, code, time.perf_counter() - started)

    async def _open_stream(
        self, url: str, headers: dict[str, str], timeout: aiohttp.ClientTimeout
    ) -> aiohttp.ClientResponse:
        """Open a streaming GET; on a non-2xx answer read the body and raise the typed error."""
        await self.limit.wait("GET")
        _, session = self._transport()
        headers = dict(headers)
        await self._auth_headers(headers)
        started = time.perf_counter()
        code = "<error>"
        try:
            response = await session.request(
                "GET", yarl.URL(url, encoded=True), headers=headers, timeout=timeout, **self._send_kwargs
            )
            code = str(response.status)
            self._observe_apf(response.headers)
            if not 200 <= response.status < 300:
                try:
                    raw = await response.read()
                finally:
                    response.release()
                raise _name_permission(error_from_response(response.status, raw, response.headers), "GET", url)
            return response
        except aiohttp.ClientConnectorError as exc:
            raise TransportError(f"watch {url}: cannot connect: {exc}", request_sent=False) from exc
        except aiohttp.SocketTimeoutError as exc:
            raise StreamStalled(f"watch {url}: no response headers within {timeout.sock_read} s") from exc
        except TimeoutError as exc:
            raise TransportError(f"watch {url}: timed out") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise TransportError(f"watch {url}: {type(exc).__name__}: {exc}") from exc
        finally:
            self._metrics.observe("GET", code, time.perf_counter() - started)

    # -- helpers --------------------------------------------------------------------------------------

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

    @staticmethod
    def _path(resource: Resource | str, namespace: str | None, name: str | None, subresource: str | None) -> str:
        if isinstance(resource, Resource):
            return resource.path(namespace, name, subresource)
        if not isinstance(resource, str) or not resource.startswith("/"):
            raise ValueError(f"resource must be a Resource or an absolute path, got {resource!r}")
        if namespace is not None or name is not None or subresource is not None:
            raise ValueError("name/namespace/subresource cannot be combined with a raw path")
        return resource

    def _url(self, path: str, params: Mapping[str, str] | Sequence[tuple[str, str]] | None) -> str:
        if params:
            return f"{self.base_url}{path}?{urlencode(params)}"
        return self.base_url + path

    @staticmethod
    def _write_params(field_manager: str | None, dry_run: bool) -> dict[str, str]:
        params: dict[str, str] = {}
        if field_manager:
            params["fieldManager"] = field_manager
        if dry_run:
            params["dryRun"] = "All"
        return params
