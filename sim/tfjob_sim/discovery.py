"""Legacy (unaggregated) discovery documents and ``/version``, computed once per registry change.

Why: kubectl and client-go map kinds and short names to URLs through discovery; a CRD must show
up the moment it is created. Documents are precomputed as bytes and rebuilt only when the
registry's ``version`` changes, because kubectl fetches all of them on every cache miss.

Contract: :class:`Discovery` answers :meth:`document` for ``/api``, ``/api/v1``, ``/apis``,
``/apis/{g}``, ``/apis/{g}/{v}`` with JSON bytes, or None for unknown groups/versions (the HTTP layer
answers plain-text 404). Aggregated discovery (v2) is not served: clients then fall back to the
legacy documents, which every client supports (kubectl and client-go ask for v2 first and fall back).
"""

from __future__ import annotations

import base64
import hashlib

import orjson

from tfjob_sim.resources import SUBRESOURCE_KINDS, Registry, ResourceType

SERVER_VERSION = {
    "major": "1",
    "minor": "33",
    "emulationMajor": "1",
    "emulationMinor": "33",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "32",
    "gitVersion": "v1.33.0",
    "gitCommit": "60a317eadfcb839692a68eab88b2096f4d708f4f",
    "gitTreeState": "clean",
    "buildDate": "2025-04-23T13:00:00Z",
    "goVersion": "go1.24.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def server_version(minor: int) -> dict[str, str]:
    """``/version`` of a kube-apiserver 1.``minor``.0 (the build fields are those of the 1.33.0 release)."""
    return {
        **SERVER_VERSION,
        "minor": str(minor),
        "emulationMinor": str(minor),
        "minCompatibilityMinor": str(minor - 1),
        "gitVersion": f"v1.{minor}.0",
    }


# Preferred order of built-in groups in /apis, like a real server (custom groups follow).
_GROUP_ORDER = [
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "apiextensions.k8s.io",
    "coordination.k8s.io",
    "flowcontrol.apiserver.k8s.io",
]

_SUB_VERBS = {
    "status": ["get", "patch", "update"],
    "scale": ["get", "patch", "update"],
    "eviction": ["create"],
    "binding": ["create"],
    "token": ["create"],
}


def storage_version_hash(group: str, version: str, kind: str) -> str:
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()[:8]
    return base64.b64encode(digest).decode()


def api_resources(rt: ResourceType, version: str) -> list[dict]:
    """The APIResource entries of one type: the resource, then its subresources."""
    entry: dict = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(rt.verbs),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    entry["storageVersionHash"] = storage_version_hash(rt.group, rt.version, rt.kind)
    out = [entry]
    for sub in rt.subresources:
        item: dict = {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced}
        if sub in SUBRESOURCE_KINDS:
            group, sub_version, kind = SUBRESOURCE_KINDS[sub]
            if (group, sub_version) != (rt.group, version):
                item["group"] = group
                item["version"] = sub_version
            item["kind"] = kind
        else:
            item["kind"] = rt.kind
        item["verbs"] = _SUB_VERBS.get(sub, ["get"])
        out.append(item)
    return out


class Discovery:
    """Caches discovery documents as bytes, keyed by the registry version."""

    def __init__(self, registry: Registry, server_address: str = "127.0.0.1:6443", minor: int = 33) -> None:
        self.registry = registry
        self.server_address = server_address
        self._built_for = -1
        self._docs: dict[str, bytes] = {}
        self.version_doc = orjson.dumps(server_version(minor))

    def _groups(self) -> list[tuple[str, list[str]]]:
        gvs = self.registry.group_versions()
        names = [g for g in _GROUP_ORDER if g in gvs]
        names += sorted(g for g in gvs if g and g not in _GROUP_ORDER)
        return [(g, sorted(gvs[g], key=_version_priority)) for g in names]

    def _build(self) -> None:
        docs: dict[str, bytes] = {}
        docs["/api"] = orjson.dumps(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}],
            }
        )
        core = [
            r
            for rt in sorted(self.registry.resources_in("", "v1"), key=lambda t: t.plural)
            for r in api_resources(rt, "v1")
        ]
        docs["/api/v1"] = orjson.dumps({"kind": "APIResourceList", "groupVersion": "v1", "resources": core})
        groups = []
        for group, versions in self._groups():
            version_entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
            group_doc = {"name": group, "versions": version_entries, "preferredVersion": version_entries[0]}
            groups.append(group_doc)
            docs[f"/apis/{group}"] = orjson.dumps({"kind": "APIGroup", "apiVersion": "v1", **group_doc})
            for v in versions:
                resources = [
                    r
                    for rt in sorted(self.registry.resources_in(group, v), key=lambda t: t.plural)
                    for r in api_resources(rt, v)
                ]
                docs[f"/apis/{group}/{v}"] = orjson.dumps(
                    {
                        "kind": "APIResourceList",
                        "apiVersion": "v1",
                        "groupVersion": f"{group}/{v}",
                        "resources": resources,
                    }
                )
        docs["/apis"] = orjson.dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        self._docs = docs
        self._built_for = self.registry.version

    def document(self, path: str) -> bytes | None:
        if self._built_for != self.registry.version:
            self._build()
        return self._docs.get(path.rstrip("/") or path)


def _version_priority(version: str) -> tuple:
    """Kubernetes version ordering: GA > beta > alpha, higher numbers first (v1 before v1beta1)."""
    import re

    m = re.fullmatch(r"v(\d+)(?:(alpha|beta)(\d+))?", version)
    if not m:
        return (3, version)
    major = int(m.group(1))
    stage = {None: 0, "beta": 1, "alpha": 2}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor)
