"""The Kubernetes API client the controller uses: raw JSON verbs over one request path.

Why raw JSON: kubernetes-asyncio's generated API builds a model object for every item it decodes, which caps
a watch at a few thousand events per second and doubles the memory of a cache. Here bodies are plain dicts
in and plain dicts out, every verb is a thin call of :class:`controller.runtime.rest.RestClient`'s request
path (limit, credentials, retries, metrics, typed errors), and watches are read by
:mod:`controller.runtime.watchstream`. Addressing lives in :mod:`controller.runtime.resource`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import aiohttp
import anyio
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

from controller.runtime.resource import (
    CONFIGMAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    SERVICES,
    RequestAttributes,
    Resource,
)
from controller.runtime.rest import APF_HEADERS, JSON_PATCH, USER_AGENT, RequestLimit, RestClient, RetryPolicy
from controller.runtime.watchstream import LineSplitter, WatchStream, decode_lines

# Re-exported: callers import the whole client surface from here.
__all__ = [
    "Resource",
    "RequestAttributes",
    "RetryPolicy",
    "RequestLimit",
    "APF_HEADERS",
    "USER_AGENT",
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
    "CUSTOM_RESOURCE_DEFINITIONS",
]

PATCH_CONTENT_TYPES: dict[str, str] = {
    "json": JSON_PATCH,
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

_DELETE_PROPAGATION = (None, "Orphan", "Background", "Foreground")

Query = dict[str, str]


def _query(**values: str | int | bool | None) -> Query:
    """Query parameters in the order given, leaving out the ones not set (None, False or empty)."""
    return {
        key: "true" if value is True else str(value)
        for key, value in values.items()
        if value is not None and value is not False and value != ""
    }


def _meta(body: Mapping[str, Any] | bytes, field: str) -> str | None:
    meta = body.get("metadata") if isinstance(body, Mapping) else None
    value = meta.get(field) if isinstance(meta, Mapping) else None
    return value if isinstance(value, str) else None


class ApiClient(RestClient):
    """Raw-JSON Kubernetes client. Construct with :meth:`from_kubeconfig`, :meth:`in_cluster` or
    :meth:`default`; use as an async context manager or call :meth:`close`.

    Every verb takes ``resource`` as a :class:`Resource` or a raw path string (``"/version"``; then
    ``name``/``namespace`` must be left out), sends plain dicts (or pre-encoded bytes) and returns plain
    dicts. Every non-2xx answer raises an :class:`~controller.runtime.errors.ApiError` subclass, failures
    below HTTP a :class:`~controller.runtime.errors.TransportError`; retries follow :class:`RetryPolicy`.
    """

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

    # -- verbs ----------------------------------------------------------------------------------------

    async def _call(
        self,
        method: str,
        resource: Resource | str,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        *,
        params: Query | None = None,
        body: Any = None,
        content_type: str | None = None,
        idempotent: bool | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """The one path of every verb: address the object, then :meth:`request` it."""
        path = self._path(resource, namespace, name, subresource)
        return await self.request(
            method, path, params=params, body=body, content_type=content_type, idempotent=idempotent, timeout=timeout
        )

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
        """GET one object (or, with a path string, any JSON document such as ``/version``).
        Raises :class:`~controller.runtime.errors.NotFound` when it does not exist."""
        params = {"resourceVersion": resource_version} if resource_version is not None else None
        return await self._call("GET", resource, namespace, name, subresource, params=params, timeout=timeout)

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
        """One LIST request (one page when ``limit`` is set; follow ``metadata.continue`` for more).
        An expired ``continue_`` token raises :class:`~controller.runtime.errors.Expired`."""
        params = _query(
            labelSelector=label_selector,
            fieldSelector=field_selector,
            limit=int(limit) if limit else None,
            **{"continue": continue_},
        )
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        params.update(_query(resourceVersionMatch=resource_version_match))
        return await self._call("GET", resource, namespace, params=params, timeout=timeout)

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
        """POST to the collection (``namespace`` defaults to ``body.metadata.namespace``) and return the
        created object. With ``subresource`` (e.g. ``eviction``) and ``name``, POST to that object's
        subresource. Never retried after the request was sent (it is not idempotent)."""
        if namespace is None:
            namespace = _meta(body, "namespace")
        params = _query(fieldManager=field_manager, dryRun="All" if dry_run else None)
        return await self._call(
            "POST", resource, namespace, name, subresource, params=params, body=body, timeout=timeout
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
        """PUT the whole object (name/namespace default to the body's metadata; ``subresource="status"``
        writes the status). The body's ``metadata.resourceVersion`` makes it optimistic: 409
        :class:`~controller.runtime.errors.Conflict` if stale. ValueError without a name."""
        namespace = namespace if namespace is not None else _meta(body, "namespace")
        name = name if name is not None else _meta(body, "name")
        if isinstance(resource, Resource) and not name:
            raise ValueError("replace needs an object name (argument or body.metadata.name)")
        params = _query(fieldManager=field_manager, dryRun="All" if dry_run else None)
        return await self._call(
            "PUT", resource, namespace, name, subresource, params=params, body=body, timeout=timeout
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
        (RFC 6902 op list, never retried blindly), ``"strategic"`` (built-in kinds only) or ``"apply"``
        (server-side apply; needs ``field_manager``; ``force`` takes over conflicting fields). ValueError
        for an unknown type or a missing field manager."""
        content_type = PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            raise ValueError(f"unknown patch_type {patch_type!r}; use one of {sorted(PATCH_CONTENT_TYPES)}")
        if patch_type == "apply" and not field_manager:
            raise ValueError("server-side apply (patch_type='apply') requires field_manager")
        if patch_type == "json" and not isinstance(body, (list, bytes, bytearray)):
            raise ValueError("a JSON patch body is a list of operations")
        params = _query(fieldManager=field_manager, dryRun="All" if dry_run else None)
        if force is not None:
            params["force"] = "true" if force else "false"
        return await self._call(
            "PATCH",
            resource,
            namespace,
            name,
            subresource,
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
        ``{"uid": ..., "resourceVersion": ...}`` (mismatch → 409 :class:`~controller.runtime.errors.Conflict`)."""
        if propagation_policy not in _DELETE_PROPAGATION:
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
        return await self._call("DELETE", resource, namespace, name, body=options, timeout=timeout)

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
        """A watch stream (see :class:`WatchStream`); nothing is sent until it is opened or iterated, and
        a watch is never retried (the informer owns watch recovery).

        ``timeout_seconds`` is the server-side duration of the watch; ``inactivity_timeout`` is ours: no
        byte for that long (bookmarks count) → :class:`~controller.runtime.errors.StreamStalled`. Keep it
        above the server's bookmark period (60 s on real clusters).
        """
        params = _query(watch=True, labelSelector=label_selector, fieldSelector=field_selector)
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        params.update(
            _query(
                timeoutSeconds=int(timeout_seconds) if timeout_seconds is not None else None,
                allowWatchBookmarks=allow_watch_bookmarks,
            )
        )
        url = self._url(self._path(resource, namespace, None, None), params)
        headers = self._base_headers()
        # No total timeout: a watch lasts; only the connect and the silence between bytes are bounded.
        timeout = aiohttp.ClientTimeout(
            total=None, connect=self.connect_timeout, sock_connect=self.connect_timeout, sock_read=inactivity_timeout
        )
        return WatchStream(lambda: self._open_stream(url, headers, timeout), inactivity_timeout)

    @staticmethod
    def _path(resource: Resource | str, namespace: str | None, name: str | None, subresource: str | None) -> str:
        if isinstance(resource, Resource):
            return resource.path(namespace, name, subresource)
        if not isinstance(resource, str) or not resource.startswith("/"):
            raise ValueError(f"resource must be a Resource or an absolute path, got {resource!r}")
        if namespace is not None or name is not None or subresource is not None:
            raise ValueError("name/namespace/subresource cannot be combined with a raw path")
        return resource
