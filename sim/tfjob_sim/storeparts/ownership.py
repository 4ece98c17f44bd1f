"""Field ownership: the hookup of the field manager (:mod:`tfjob_sim.fieldmanager`) to writes.

Why this is its own part: every create, update, patch and server-side apply records who owns which
field in ``metadata.managedFields``, and an apply may fail with a conflict or drop fields its manager
stopped applying; which object view a write may own (status endpoints, fields admission sets later)
is decided here, the ownership algebra in the field manager.

Contract: ``_own_created`` and ``_own_updated`` set ``obj["metadata"]["managedFields"]`` (or remove
it) in place; ``_own_updated`` raises 409 Conflict for an apply that conflicts without ``force``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tfjob_sim import fieldmanager
from tfjob_sim.errors import ApiError
from tfjob_sim.resources import Registry, ResourceType, apply_defaults
from tfjob_sim.storeparts.revisions import Revisions
from tfjob_sim.storeparts.values import StoreConfig, WriteOptions, rfc3339

# the field manager ran, so they have no owner unless the client sent them.
_SET_AFTER_FIELD_MANAGER: dict[str, tuple[str, ...]] = {
    "Pod": ("serviceAccount", "serviceAccountName", "priority", "preemptionPolicy"),
    "Service": ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"),
    "Namespace": ("finalizers",),
}


class FieldOwnership(Revisions):
    """managedFields of created and updated objects."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(config, clock, registry)
        self._ownership_schemas: dict[int, tuple[ResourceType, dict]] = {}

    def _ownership_schema(self, rt: ResourceType) -> dict:
        """The field manager's schema of ``rt`` (the CRD's for custom resources), built once per type."""
        cached = self._ownership_schemas.get(id(rt))
        if cached is not None and cached[0] is rt:
            return cached[1]
        crd_schema = rt.schema.schema if rt.custom and rt.schema is not None else None
        schema = fieldmanager.root_schema(rt.kind, rt.custom, crd_schema)
        self._ownership_schemas[id(rt)] = (rt, schema)
        return schema

    @staticmethod
    def _body_managed_fields(meta: dict, current: Any) -> Any:
        """The managedFields a write starts from, decided the way the apiserver's field manager does:
        the body's list when it sets a valid one (clients may edit ownership); ``[]`` or ``[{}]``
        reset ownership (None); absent, null or invalid fall back to the stored list, so clients
        unaware of the field never wipe it by accident."""
        sent = meta.get("managedFields")
        if sent is None or sent is current or sent == current:
            return current
        if fieldmanager.is_reset(sent):
            return None
        if fieldmanager.validate_entries(sent):
            return current
        # Stored the way the apiserver stores any list it accepts: decoded and encoded again.
        return fieldmanager.encode_entries(fieldmanager.decode_entries(sent))

    @staticmethod
    def _set_entries(meta: dict, entries: Any) -> None:
        if entries:
            meta["managedFields"] = entries
        else:
            meta.pop("managedFields", None)

    @staticmethod
    def _ownership_view(rt: ResourceType, obj: dict, subresource: str) -> dict:
        # What a write can own: a main-resource write never owns status on kinds that have a status
        # endpoint (the apiserver resets those fields), whatever PrepareForCreate put there.
        if subresource or not rt.status_subresource or "status" not in obj:
            return obj
        view = dict(obj)
        del view["status"]
        return view

    def _own_created(
        self,
        rt: ResourceType,
        obj: dict,
        opts: WriteOptions,
        now: str,
        apply_config: dict | None,
        submitted_spec: set[str],
    ) -> None:
        """The managedFields of a new object: the writer (``opts.manager``) owns what it sent, an apply
        (``apply_config``) what it applied; ``submitted_spec``: the spec fields the client sent."""
        meta = obj["metadata"]
        base = self._body_managed_fields(meta, None)
        schema = self._ownership_schema(rt)
        view = self._ownership_view(rt, obj, "")
        if "serviceAccountName" in submitted_spec:
            submitted_spec = submitted_spec | {"serviceAccount"}  # conversion copies it before the manager
        server_set = (
            [k for k in _SET_AFTER_FIELD_MANAGER.get(rt.kind, ()) if k not in submitted_spec] if not rt.custom else []
        )
        if server_set and isinstance(view.get("spec"), dict):
            # Admission plugins and IP allocation run after the field manager: nobody owns what they set.
            view = {**view, "spec": {k: v for k, v in view["spec"].items() if k not in server_set}}
        zero = fieldmanager.zero_object(rt.kind, rt.custom)
        api_version = obj["apiVersion"]
        if apply_config is not None:
            entries = fieldmanager.apply_ownership(
                schema, zero, apply_config, view, base, opts.manager, "", api_version, opts.force, now
            )
        else:
            entries = fieldmanager.update_ownership(schema, zero, view, base, opts.manager, "", api_version, now)
        self._set_entries(meta, entries)

    def _own_updated(
        self,
        rt: ResourceType,
        existing: dict,
        obj: dict,
        opts: WriteOptions,
        subresource: str,
        apply_config: dict | None,
    ) -> None:
        """The managedFields of ``obj`` replacing ``existing`` through ``subresource`` ("" for the main
        resource); an apply drops the fields its manager stopped applying from ``obj``."""
        meta = obj["metadata"]
        current = existing["metadata"].get("managedFields")
        # Through a subresource the stored list is the start whatever the body says.
        base = current if subresource else self._body_managed_fields(meta, current)
        if not opts.track_ownership or (not base and apply_config is None):
            # An object without ownership records stays without them under updates (the apiserver
            # starts tracking on create or on the first apply only).
            self._set_entries(meta, base)
            return
        schema = self._ownership_schema(rt)
        before = self._ownership_view(rt, existing, subresource)
        after = self._ownership_view(rt, obj, subresource)
        now = rfc3339(self.clock())
        api_version = obj.get("apiVersion") or rt.api_version
        if apply_config is not None:
            if not base:  # the first apply: whatever is there is owned by "before-first-apply"
                zero = fieldmanager.zero_object(rt.kind, rt.custom)
                base = fieldmanager.update_ownership(
                    schema, zero, before, None, fieldmanager.BEFORE_FIRST_APPLY, subresource, api_version, now
                )
            # Only the fields the apply may write can go: through /status the rest is shared with the
            # stored object; through the main resource status is not the applier's.
            if subresource == "status":
                prunable: tuple[str, ...] | None = ("f:status",)
            elif rt.status_subresource:
                prunable = tuple("f:" + k for k in obj if k != "status")
            else:
                prunable = None
            try:
                entries = fieldmanager.apply_ownership(
                    schema,
                    before,
                    apply_config,
                    after,
                    base,
                    opts.manager,
                    subresource,
                    api_version,
                    opts.force,
                    now,
                    prunable,
                )
            except fieldmanager.FieldConflict as conflict:
                raise ApiError(409, "Conflict", conflict.message, {"causes": conflict.causes}) from None
            if after is not obj:  # a top-level field the apply dropped went from the view only
                for key in [k for k in obj if k not in after and k != "status"]:
                    del obj[key]
            # The apiserver's structured-merge manager defaults the object it built: a defaulted field
            # the applier stopped owning (a port's protocol, a Service's type after the client-side
            # apply migration) comes back with its default, owned by no one.
            if rt.custom:
                if rt.schema is not None:
                    rt.schema.apply_defaults(obj)
            else:
                apply_defaults(rt, obj)
            if _same_ignoring_time(entries, current):
                entries = current  # re-applying the same configuration is a no-op, time included
        else:
            entries = fieldmanager.update_ownership(
                schema, before, after, base, opts.manager, subresource, api_version, now
            )
        self._set_entries(meta, entries)


def _same_ignoring_time(entries: list[dict], current: Any) -> bool:
    def untimed(entry: dict) -> dict:
        return {k: v for k, v in entry.items() if k != "time"}

    # ``current`` was validated or produced by the field manager: a list of entry dicts.
    return type(current) is list and [untimed(e) for e in entries] == [untimed(e) for e in current]
