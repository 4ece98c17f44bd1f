"""Update: PUT semantics, the update pipeline PATCH shares, and the status and scale subresources.

Why this is its own part: every change of a stored object (PUT, PATCH, apply, /status, /scale) goes
through ``_update_existing``: optimistic concurrency, what a subresource may change, server-kept
metadata, generation, finalizers of an object being deleted, and no-op writes that keep the RV.

Contract: ``update_ex`` raises 409 Conflict on a stale resourceVersion, 404 for a missing object (or
creates it for kinds that allow create-on-update); a write that changes nothing answers the stored
object and commits nothing; removing the last finalizer of an object being deleted deletes it.
"""

from __future__ import annotations

import base64
from typing import Any

from tfjob_sim import errors
from tfjob_sim.resources import ResourceType, apply_defaults, forbidden, invalid_value
from tfjob_sim.storeparts import scale as scales
from tfjob_sim.storeparts.creation import Creation
from tfjob_sim.storeparts.revisions import Bucket
from tfjob_sim.storeparts.values import CRD_RESOURCE, WriteOptions, WriteResult, canonical, deep_copy


class Updates(Creation):
    """update, update_ex, the shared update pipeline and the scale subresource's reads and writes."""

    def update(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        obj: dict,
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
    ) -> dict:
        """PUT semantics (``subresource`` "status" or "scale"). Returns the stored object (or the Scale)."""
        return self.update_ex(
            resource, namespace, name, obj, subresource, WriteOptions(field_manager=field_manager)
        ).obj

    def update_ex(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        obj: dict,
        subresource: str | None = None,
        opts: WriteOptions | None = None,
        *,
        owned: bool = False,
        require_kind: bool = False,
    ) -> WriteResult:
        """PUT with the request's options. ``owned``: the caller hands over ``obj`` (no defensive copy);
        ``require_kind``: the body must name its kind and apiVersion (the HTTP layer's bodies)."""
        opts = opts or WriteOptions()
        rt = self.resource_type(resource)
        if subresource == "scale":
            return self._update_scale(rt, namespace, name, obj, opts, require_kind=require_kind)
        self._check_subresource(rt, subresource)
        self._check_kind(rt, obj, require=require_kind)
        if "update" not in rt.verbs:
            raise errors.method_not_allowed("update", rt.plural)
        obj = obj if owned else deep_copy(obj)
        ns = self._ns_key(rt, namespace)
        meta: Any = obj.get("metadata")  # the request's JSON
        if meta is None:
            meta = obj["metadata"] = {}
        body_name = meta.get("name")
        if body_name and body_name != name:
            raise errors.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
        bucket = self._bucket(rt)
        existing = bucket.objects.get((ns, name))
        if existing is None:
            if rt.create_on_update and subresource is None:
                meta["name"] = name
                meta.pop("resourceVersion", None)
                return self.create_ex(resource, namespace, obj, opts, owned=True)
            raise errors.not_found(rt.plural, name, rt.group)
        return self._update_existing(rt, bucket, existing, obj, subresource, opts, precondition_required=True)

    def _check_subresource(self, rt: ResourceType, subresource: str | None) -> None:
        if subresource is None:
            return
        if subresource not in rt.subresources:
            raise errors.page_not_found()

    def _update_existing(
        self,
        rt: ResourceType,
        bucket: Bucket,
        existing: dict,
        obj: dict,
        subresource: str | None,
        opts: WriteOptions,
        *,
        precondition_required: bool,
        apply_config: dict | None = None,
        ownership_subresource: str | None = None,
    ) -> WriteResult:
        """The shared update pipeline for PUT and PATCH (``obj`` is owned and will be stored).

        ``apply_config``: the write is a server-side apply of that configuration;
        ``ownership_subresource``: the subresource the write came through when it is not ``subresource``
        (a scale write updates the main resource but is recorded as "scale")."""
        warnings: list[str] = []
        old_meta = existing["metadata"]
        name = old_meta["name"]
        meta = obj.setdefault("metadata", {})
        body_rv = meta.get("resourceVersion")
        if body_rv:
            if str(body_rv) != old_meta.get("resourceVersion"):
                raise errors.conflict(rt.plural, name, rt.group)
        elif precondition_required and not rt.unconditional_update and subresource is None:
            raise errors.invalid(
                rt.qualified,
                name,
                [
                    {
                        "reason": "FieldValueInvalid",
                        "field": "metadata.resourceVersion",
                        "message": "Invalid value: 0x0: must be specified for an update",
                    }
                ],
            )
        obj["apiVersion"] = existing.get("apiVersion", rt.api_version)
        obj["kind"] = rt.kind
        if subresource == "status":
            # Only status changes through /status: everything else is the stored object's.
            # ``obj`` (and so its status) is owned. The rest is the stored object's: a built-in's is
            # shared, with a fresh metadata dict for the RV; a custom resource's is copied when pruning
            # and defaulting below must walk the whole object (the stored one must not change).
            new = dict(existing)
            crd_schema = rt.schema if rt.custom else None
            # The rest of a custom resource is already pruned and defaulted by this schema when the
            # bucket says so (both are idempotent and work field by field): then only the status is
            # normalized and the rest is shared, not copied (the TFJob status writes of a burst).
            normalized = crd_schema is not None and bucket.normalized is crd_schema
            if crd_schema is not None:
                new.pop("status", None)  # the status goes last
                if normalized:
                    new["metadata"] = dict(existing["metadata"])
                else:
                    new = deep_copy(new)
                if "status" in obj:
                    new["status"] = obj["status"]
            else:
                if "status" in obj:
                    new["status"] = obj["status"]
                else:
                    new.pop("status", None)
                new["metadata"] = dict(existing["metadata"])
            obj = new
            meta = obj["metadata"]
            if crd_schema is not None:
                unknown = crd_schema.prune_status(obj) if normalized else crd_schema.prune(obj)
                self._apply_field_validation(rt, obj, unknown, opts, warnings)
                if normalized:
                    crd_schema.apply_status_defaults(obj)
                else:
                    crd_schema.apply_defaults(obj)
        else:
            meta["name"] = name
            if rt.namespaced:
                meta["namespace"] = old_meta.get("namespace")
            else:
                meta.pop("namespace", None)
            body_uid = meta.get("uid")
            if body_uid and body_uid != old_meta.get("uid"):
                raise errors.invalid(
                    rt.kind, name, [invalid_value("metadata.uid", body_uid, "field is immutable")], rt.group
                )
            for kept in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"):
                if kept in old_meta:
                    meta[kept] = old_meta[kept]
                else:
                    meta.pop(kept, None)
            meta.pop("selfLink", None)
            if rt.status_subresource:
                if "status" in existing:
                    obj["status"] = deep_copy(existing["status"])
                else:
                    obj.pop("status", None)
            self._schema_pass(rt, obj, existing, opts, warnings)
            apply_defaults(rt, obj)
            if rt.kind == "Secret" and not rt.group and "stringData" in obj:
                string_data = obj.pop("stringData")
                if isinstance(string_data, dict):
                    data = obj.setdefault("data", {}) or {}
                    obj["data"] = data
                    for key, value in string_data.items():
                        data[key] = base64.b64encode(str(value).encode()).decode()
            if rt.kind == "Namespace" and not rt.group:
                obj["spec"] = (
                    deep_copy(existing.get("spec") or {"finalizers": ["kubernetes"]})
                    if "spec" not in obj
                    else obj["spec"]
                )
                labels = meta.setdefault("labels", {})
                if isinstance(labels, dict):
                    labels["kubernetes.io/metadata.name"] = name
            if old_meta.get("deletionTimestamp"):
                added = [f for f in (meta.get("finalizers") or []) if f not in (old_meta.get("finalizers") or [])]
                if added:
                    raise errors.invalid(
                        rt.kind,
                        name,
                        [
                            forbidden(
                                "metadata.finalizers",
                                "no new finalizers can be added if the object is being deleted, found new finalizers "
                                "[]string{" + ", ".join(f'"{f}"' for f in added) + "}",
                            )
                        ],
                        rt.group,
                    )
            if rt.qualified == CRD_RESOURCE:
                obj["status"] = deep_copy(existing.get("status") or {})
                self._prepare_crd(obj)
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        self._own_updated(rt, existing, obj, opts, ownership_subresource or subresource or "", apply_config)
        self._validate(rt, obj, existing, status_only=subresource == "status")
        if subresource is None and (rt.custom or rt.tracks_generation) and old_meta.get("generation") is not None:
            if self._spec_changed(rt, existing, obj):
                meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if canonical(obj) == canonical(existing):
            return WriteResult(existing, 200, warnings)
        if opts.dry_run:
            return WriteResult(obj, 200, warnings)
        key = (meta.get("namespace", "") if rt.namespaced else "", name)
        rv = self._next_rv()
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and not meta.get("deletionGracePeriodSeconds"):
            # The last finalizer is gone from an object being deleted: the update deletes it.
            meta["resourceVersion"] = str(rv)
            self._commit(bucket, "DELETED", key, existing, None, rv)
            return WriteResult(obj, 200, warnings)
        meta["resourceVersion"] = str(rv)
        self._commit(bucket, "MODIFIED", key, existing, obj, rv)
        if rt.qualified == CRD_RESOURCE:
            self._serve_crd(obj)
        return WriteResult(obj, 200, warnings)

    @staticmethod
    def _spec_changed(rt: ResourceType, old: dict, new: dict) -> bool:
        if rt.custom:
            skip = {"metadata", "status"} if rt.status_subresource else {"metadata"}
            keys = (set(old) | set(new)) - skip - {"apiVersion", "kind"}
            return any(old.get(k) != new.get(k) for k in keys)
        return old.get("spec") != new.get("spec")

    def get_scale(self, resource: str, namespace: str | None, name: str) -> dict:
        """GET .../scale: the Scale of the stored object; 404 for a type without the subresource."""
        rt = self.resource_type(resource)
        scales.scale_spec(rt)
        return scales.scale_of(rt, self.get_or_404(resource, namespace, name))

    def _update_scale(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        scale: Any,
        opts: WriteOptions,
        *,
        require_kind: bool = False,
    ) -> WriteResult:
        """PUT (and, from ``patch_ex``, PATCH) .../scale: the replicas written into the object through
        the update pipeline, recorded as the "scale" subresource's; answers the new Scale."""
        spec = scales.scale_spec(rt)
        if not isinstance(scale, dict):
            raise errors.bad_request("the object provided is unrecognized (must be of type Scale)")
        self._check_kind(rt, scale, require=require_kind, expected_kind="Scale", expected_api_version="autoscaling/v1")
        existing = self.get_or_404(rt.qualified, namespace, name)
        new = scales.scaled(spec, existing, scale, name)
        bucket = self._bucket(rt)
        result = self._update_existing(
            rt, bucket, existing, new, None, opts, precondition_required=False, ownership_subresource="scale"
        )
        return WriteResult(scales.scale_of(rt, result.obj), 200, result.warnings)
