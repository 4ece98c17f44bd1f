"""Admission and validation: what every write checks before it is stored.

Why this is its own part: the checks are the real server's decoding, admission and validation steps
(kind and apiVersion of the body, unknown fields under fieldValidation, a CRD's structural schema:
pruning, defaulting, validation with CEL and ratcheting in :mod:`tfjob_sim.schema`, the built-in kinds'
validation in :mod:`tfjob_sim.resources`, the NamespaceLifecycle plugin), shared by create, update,
patch and the pod subresources.

Contract: each check raises the real Status (400, 403, 404, 422) or returns; ``_schema_pass`` prunes
and defaults ``obj`` in place and adds field-validation warnings to ``warnings``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from tfjob_sim import errors
from tfjob_sim.errors import ApiError
from tfjob_sim.resources import (
    OBJECT_META_FIELDS,
    Registry,
    ResourceType,
    validate,
    validate_object_meta,
    validate_update,
)
from tfjob_sim.storeparts.reads import Reads
from tfjob_sim.storeparts.values import CRD_RESOURCE, StoreConfig, WriteOptions


class Admission(Reads):
    """The checks of a write: body shape, unknown fields, schema, validation, namespace lifecycle."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(config, clock, registry)
        self._next_service_ip = 1

    def _check_kind(
        self,
        rt: ResourceType,
        obj: Any,
        *,
        require: bool,
        expected_kind: str | None = None,
        expected_api_version: str | None = None,
    ) -> None:
        """400 unless ``obj`` decodes as ``rt``'s kind (or ``expected_kind``, a subresource's): a JSON
        object whose kind and apiVersion, when given (``require``: they must be), are the expected
        ones, with an object as metadata and, for built-ins, as spec and status."""
        if not isinstance(obj, dict):
            raise errors.bad_request(
                f"the object provided is unrecognized (must be of type {rt.kind}): expected a JSON object"
            )
        kind = expected_kind or rt.kind
        api_version = expected_api_version or rt.api_version
        body_kind = obj.get("kind")
        body_av = obj.get("apiVersion")
        if require and not body_kind:
            raise errors.bad_request(f"Object 'Kind' is missing in '{orjson.dumps(obj).decode()[:200]}'")
        if require and not body_av:
            raise errors.bad_request(f"Object 'apiVersion' is missing in '{orjson.dumps(obj).decode()[:200]}'")
        if body_av and body_av != api_version:
            allowed: tuple[str, ...] = (api_version,)
            if expected_api_version is None and rt.served_versions:
                allowed = tuple(f"{rt.group}/{v}" for v in rt.served_versions)
            if body_av not in allowed:
                raise errors.bad_request(
                    f"the API version in the data ({body_av}) does not match the expected API version ({api_version})"
                )
        if body_kind and body_kind != kind:
            raise errors.bad_request(
                f"the kind in the data ({body_kind}) does not match the expected kind "
                f'({kind}): {kind} in version "{api_version.rpartition("/")[2]}" cannot be '
                f"handled as a {body_kind}"
            )
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise errors.bad_request(
                f'{kind} in version "{rt.version}" cannot be handled as a {kind}: '
                "json: cannot unmarshal into Go struct field .metadata of type v1.ObjectMeta"
            )
        if expected_kind is None:
            self._check_structs(rt, obj)

    @staticmethod
    def _check_structs(rt: ResourceType, obj: dict) -> None:
        # A built-in's spec and status are Go structs: anything but an object (or null) cannot be decoded.
        if rt.custom:
            return
        for key in ("spec", "status"):
            value = obj.get(key)
            if value is not None and not isinstance(value, dict) and key in (rt.top_level_fields or ()):
                json_type = {str: "string", list: "array", bool: "bool"}.get(type(value), "number")
                raise errors.bad_request(
                    f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: json: cannot '
                    f"unmarshal {json_type} into Go struct field {rt.kind}.{key} of type "
                    f"{rt.version}.{rt.kind}{key.capitalize()}"
                )

    def _unknown_fields(self, rt: ResourceType, obj: dict) -> list[str]:
        """Paths of fields a built-in's Go types would drop (top level and metadata); removes them.

        A custom resource with a schema gets none here: ``schema.prune()`` owns all of its unknown
        fields, ``metadata.*`` included (and nested ones such as ownerReferences[i].x), so each
        path is reported exactly once.
        """
        unknown: list[str] = []
        if rt.custom and rt.schema is not None:
            return unknown
        if rt.top_level_fields is not None:
            for key in list(obj):
                if key not in ("apiVersion", "kind", "metadata") and key not in rt.top_level_fields:
                    unknown.append(key)
                    del obj[key]
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            for key in list(meta):
                if key not in OBJECT_META_FIELDS:
                    unknown.append(f"metadata.{key}")
                    del meta[key]
        return unknown

    def _apply_field_validation(
        self, rt: ResourceType, obj: dict, unknown: list[str], opts: WriteOptions, warnings: list[str]
    ) -> None:
        if not unknown or opts.field_validation == "Ignore":
            return
        texts = [f'unknown field "{path}"' for path in unknown]
        if opts.field_validation == "Strict":
            raise errors.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                "strict decoding error: " + ", ".join(texts)
            )
        warnings.extend(texts)

    def _schema_pass(
        self, rt: ResourceType, obj: dict, old: dict | None, opts: WriteOptions, warnings: list[str]
    ) -> None:
        """Unknown-field handling, pruning, defaulting and validation of the object's type."""
        unknown = self._unknown_fields(rt, obj)
        if rt.custom and rt.schema is not None:
            unknown += rt.schema.prune(obj)
        self._apply_field_validation(rt, obj, unknown, opts, warnings)
        if rt.custom and rt.schema is not None:
            rt.schema.apply_defaults(obj)

    def _validate(self, rt: ResourceType, obj: dict, old: dict | None, status_only: bool = False) -> None:
        """422 with every cause when ``obj`` (replacing ``old`` on an update) is not valid: metadata, the
        built-in kind's rules, a CRD's schema and rules (``status_only``: a /status write), a CRD itself."""
        meta = obj["metadata"]
        causes = validate_object_meta(rt, meta)
        causes += validate(rt, obj)
        if old is not None:
            causes += validate_update(rt, obj, old)
        if rt.custom and rt.schema is not None:
            causes += rt.schema.validate(obj, old, status_only=status_only)
        if rt.qualified == CRD_RESOURCE:
            from tfjob_sim import schema

            causes += schema.validate_crd(obj, server_minor=self.config.kubernetes_minor)
        if causes:
            raise errors.invalid(rt.kind, meta.get("name", ""), causes, rt.group)

    def _allocate_service_ip(self) -> str:
        """The next free ClusterIP of the service range (10.96.0.0/16; never reused)."""
        n = self._next_service_ip
        self._next_service_ip += 1
        return f"10.96.{(n >> 8) & 255}.{n & 255}"

    def _check_namespace(self, rt: ResourceType, ns: str, name: str) -> None:
        """NamespaceLifecycle: new objects only in a namespace that exists (404) and is not terminating (403)."""
        if not rt.namespaced:
            return
        ns_obj = self.get("namespaces", None, ns)
        if ns_obj is None:
            raise errors.not_found("namespaces", ns)
        if (ns_obj.get("metadata") or {}).get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{rt.qualified} "{name}" is forbidden: unable to create new content in namespace {ns} '
                "because it is being terminated",
                {
                    "name": name,
                    **({"group": rt.group} if rt.group else {}),
                    "kind": rt.plural,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": f"namespace {ns} is being terminated",
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )
