"""Is a resource served by the API server? Wait until it is.

Why: a controller started before its CustomResourceDefinition is installed would otherwise list a path
the apiserver does not know and log ``404 page not found`` every few seconds, which tells the operator
nothing. Asking discovery first lets the caller say once what is missing and how to fix it, then start
as soon as the resource appears (controller-runtime reports "no matches for kind" the same way).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog

from controller.runtime.client import ApiClient, Resource
from controller.runtime.errors import ApiError, NotFound, ResponseDecodeError, TransportError

log = structlog.get_logger(__name__)


def discovery_path(resource: Resource) -> str:
    """The group-version discovery document that lists ``resource``: ``/api/v1`` or ``/apis/GROUP/VERSION``."""
    return f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"


async def resource_served(client: ApiClient, resource: Resource) -> bool:
    """True when discovery lists ``resource.plural``; False on a 404 (the group-version is not served).
    Needs no RBAC of the caller's own (``system:discovery``); other API and transport errors propagate."""
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
    """Return once ``resource`` is served, asking every ``poll`` seconds; ``on_missing`` is called once at
    the first negative answer, ``on_found`` once when it appears after that. Failed discovery requests are
    logged and retried at the same period; cancellation stops it."""
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
