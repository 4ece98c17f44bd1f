"""Addressing of the Kubernetes API: which resource, which path, and what RBAC calls the request.

Why apart from the client: paths are built without I/O by the verbs, the watch, the simulator's tests and
the error messages (a 403 names the permission it lacked), so they must not drag the HTTP machinery along.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = [
    "Resource",
    "RequestAttributes",
    "PODS",
    "SERVICES",
    "CONFIGMAPS",
    "EVENTS",
    "NAMESPACES",
    "NODES",
    "LEASES",
    "CUSTOM_RESOURCE_DEFINITIONS",
]

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
