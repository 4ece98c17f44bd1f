"""Is a resource served by the API server? Wait until it is.

Why: a controller started before its CustomResourceDefinition is installed would otherwise list a path
the apiserver does not know and log ``404 page not found`` every few seconds, which tells the operator
nothing. Asking discovery first lets the caller say once what is missing and how to fix it, then start
as soon as the resource appears (controller-runtime reports "no matches for kind" the same way).

Contract:

- :func:`resource_served` answers from the group-version discovery document (``/api/v1``,
  ``/apis/GROUP/VERSION``): True when ``resource.plural`` is listed. A 404 means not served. Discovery
  is readable by every authenticated user (the ``system:discovery`` ClusterRole), so it needs no RBAC of
  the caller's own.
- :func:`wait_until_served` polls every ``poll`` seconds until it is; ``on_missing`` is called once,
  at the first negative answer, ``on_found`` once when it appears after having been missing. Other
  failures (transport errors, 5xx) are logged and retried at the same period; cancellation stops it.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog

from controller.runtime.client import ApiClient, Resource
from controller.runtime.errors import ApiError, NotFound, ResponseDecodeError, TransportError

log = structlog.get_logger(__name__)


def discovery_path(resource: Resource) -> str:
    return f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"


async def resource_served(client: ApiClient, resource: Resource) -> bool:
    try:
        document = await client.get(discovery_path(resource))
    except NotFound:
        return False
    return any(r.get("name") == resource.plural for r in document.get("resources") or () if isinstance(r, dict))


async def wait_until_served(
    client: ApiClient,
    resource: Resource,
    *,
    poll: float = 2.0,
    on_missing: Callable[[], None] | None = None,
    on_found: Callable[[], None] | None = None,
) -> None:
    missing = False
    while True:
        try:
            if await resource_served(client, resource):
                if missing and on_found is not None:
                    on_found()
                return
            if not missing and on_missing is not None:
                on_missing()
            missing = True
        except (ApiError, TransportError, ResponseDecodeError) as exc:
            log.warning("discovery failed; retrying", resource=resource.qualified, error=str(exc), retry_in=poll)
        await anyio.sleep(poll)  # a poll period, not synchronisation
