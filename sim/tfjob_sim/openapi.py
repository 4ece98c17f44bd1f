"""The minimal OpenAPI v3 that lets ``kubectl apply -f`` run with its default validation.

Why: kubectl's default ``--validate=strict`` first asks OpenAPI v3 whether the PATCH operation of
the object's group/version/kind accepts the ``fieldValidation`` query parameter; if it does, kubectl
sends ``fieldValidation=Strict`` and relies on the server (which validates for real here). Without
any OpenAPI kubectl refuses to apply. We therefore publish, per group/version, path items whose
operations carry ``x-kubernetes-group-version-kind`` and a ``fieldValidation`` parameter — and
deliberately no schemas, so kubectl's client-side apply falls back to its compiled-in types
(strategic merge for built-ins) or JSON merge patches (custom resources), exactly as it does for
CRDs without published schemas.

Contract: :class:`OpenAPI` returns bytes for ``/openapi/v3`` and ``/openapi/v3/<gv path>``, or None
(→ 404). ``/openapi/v2`` is not served (kubectl treats 404 as unavailable).
"""

from __future__ import annotations

import hashlib

import orjson

from tfjob_sim.resources import Registry, ResourceType

_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) "
    "containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
    "schema": {"type": "string", "uniqueItems": True},
}
_DRY_RUN = {
    "name": "dryRun",
    "in": "query",
    "schema": {"type": "string", "uniqueItems": True},
    "description": "When present, indicates that modifications should not be persisted.",
}
_FIELD_MANAGER = {
    "name": "fieldManager",
    "in": "query",
    "schema": {"type": "string", "uniqueItems": True},
    "description": "fieldManager is a name associated with the actor or entity that is making these changes.",
}


def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _operation(rt: ResourceType, version: str, action: str, write: bool) -> dict:
    op: dict = {
        "operationId": f"{action}{rt.kind}",
        "responses": {"200": {"description": "OK"}, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rt.group, "version": version, "kind": rt.kind},
    }
    if write:
        op["parameters"] = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]
    return op


def gv_document(registry: Registry, group: str, version: str) -> dict | None:
    types = registry.resources_in(group, version)
    if not types:
        return None
    paths: dict[str, dict] = {}
    prefix = "/" + _gv_path(group, version)
    for rt in sorted(types, key=lambda t: t.plural):
        base = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
        paths[base] = {"get": _operation(rt, version, "list", False), "post": _operation(rt, version, "post", True)}
        paths[base + "/{name}"] = {
            "get": _operation(rt, version, "get", False),
            "put": _operation(rt, version, "put", True),
            "patch": _operation(rt, version, "patch", True),
            "delete": _operation(rt, version, "delete", False),
        }
        for sub in ("status", "scale"):
            if sub in rt.subresources:
                paths[f"{base}/{{name}}/{sub}"] = {
                    "get": _operation(rt, version, "get", False),
                    "put": _operation(rt, version, "put", True),
                    "patch": _operation(rt, version, "patch", True),
                }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


class OpenAPI:
    """Caches the OpenAPI v3 root and per-group-version documents by registry version."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._built_for = -1
        self._docs: dict[str, bytes] = {}

    def _build(self) -> None:
        docs: dict[str, bytes] = {}
        root_paths: dict[str, dict] = {}
        for group, versions in self.registry.group_versions().items():
            for version in versions:
                doc = gv_document(self.registry, group, version)
                if doc is None:
                    continue
                body = orjson.dumps(doc)
                gv = _gv_path(group, version)
                docs[gv] = body
                digest = hashlib.sha512(body).hexdigest()[:128].upper()
                root_paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={digest}"}
        docs[""] = orjson.dumps({"paths": dict(sorted(root_paths.items()))})
        self._docs = docs
        self._built_for = self.registry.version

    def document(self, path: str) -> bytes | None:
        """``path`` is what follows ``/openapi/v3`` ("" or "/apis/g/v")."""
        if self._built_for != self.registry.version:
            self._build()
        return self._docs.get(path.strip("/"))
