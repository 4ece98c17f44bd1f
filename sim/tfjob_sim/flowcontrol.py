"""The simulated apiserver's API Priority and Fairness *headers*: which flow schema and priority level a
request was classified into.

Why this module exists: a kube-apiserver with APF enabled (the default since 1.20, GA in 1.29) puts
``X-Kubernetes-PF-FlowSchema-UID`` and ``X-Kubernetes-PF-PriorityLevel-UID`` on every response it
classifies (https://kubernetes.io/docs/reference/debug-cluster/flow-control/), and clients read them:
controller-runtime-era controllers, Flux and cert-manager turn their client-side rate limiter off when
they see them, and so does ours (controller.runtime.client.RequestLimit). The simulator must send them
like the real server does, and omit them like a server started with ``--enable-priority-and-fairness=false``
(``tfjob-controller sim --no-priority-and-fairness``), so both paths of such a client can be tested.

Only the classification is simulated, not the queuing (the fault injector's 429 stands for APF's
rejection). It is a simplification of the default FlowSchemas: health probes -> ``probes`` (priority level
``exempt``), a ``system:masters`` user -> ``exempt``, a ServiceAccount -> ``service-accounts``
(``workload-low``), anyone else (and every request of a server without authentication, whose clients are
anonymous) -> ``global-default``. UIDs are stable (derived from the names), as the real objects' are for the
life of a cluster. As on the real server, streamed long-running responses other than watches (pod logs)
carry no headers, nor does a request the secure mode refuses (the real chain authenticates before it
classifies; authorization comes after, so a real 403 has them: a simplification).
"""

from __future__ import annotations

import uuid
from typing import Any

FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"

_PROBES = frozenset({"/healthz", "/livez", "/readyz"})
_ADMIN_GROUP = "system:masters"
_SERVICE_ACCOUNTS_GROUP = "system:serviceaccounts"


def _uid(kind: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tfjob-controller-sim/{kind}/{name}"))


def _headers(flow_schema: str, priority_level: str) -> tuple[tuple[str, str], tuple[str, str]]:
    return (
        (FLOW_SCHEMA_HEADER, _uid("flowschemas", flow_schema)),
        (PRIORITY_LEVEL_HEADER, _uid("prioritylevelconfigurations", priority_level)),
    )


# flow schema name -> its two headers (the names are kube-apiserver's default FlowSchemas')
CLASSES = {
    "exempt": _headers("exempt", "exempt"),
    "probes": _headers("probes", "exempt"),
    "service-accounts": _headers("service-accounts", "workload-low"),
    "global-default": _headers("global-default", "global-default"),
}


def flow_schema(path: str, user: Any) -> str:
    """The flow schema of a request to ``path`` by ``user`` (a ``UserInfo``, or None without authentication)."""
    if path in _PROBES:
        return "probes"
    groups = getattr(user, "groups", ())
    if _ADMIN_GROUP in groups:
        return "exempt"
    if _SERVICE_ACCOUNTS_GROUP in groups:
        return "service-accounts"
    return "global-default"


def stamp(headers: Any, path: str, user: Any) -> None:
    """Set both APF headers of a request's response on ``headers`` (a response's mutable header map). Runs
    on every response: a dict lookup and two header writes."""
    for name, value in CLASSES[flow_schema(path, user)]:
        headers[name] = value
