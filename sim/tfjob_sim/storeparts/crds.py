"""CRDs: the status the server sets on a CustomResourceDefinition and the resource type it serves.

Why this is its own part: a CRD write changes what the store serves: after every committed change of
a CRD its resource type is registered again (schema, subresources, printer columns, verbs of a
terminating CRD); the deletion of a CRD drops the type (:meth:`tfjob_sim.storeparts.revisions.Revisions._drop_crd_type`).

Contract: ``_prepare_crd`` fills the status of a CRD about to be stored (in place);
``_serve_crd`` (re)registers, or unregisters when nothing is served, the CRD's resource type.
"""

from __future__ import annotations

from tfjob_sim.resources import ResourceType, ScaleSpec
from tfjob_sim.storeparts.revisions import Revisions
from tfjob_sim.storeparts.values import rfc3339


class CrdServing(Revisions):
    """The server-set status of CRDs and the resource types they define."""

    def _prepare_crd(self, crd: dict) -> None:
        """Server-set status of an accepted CRD (names accepted, established, stored versions)."""
        spec = crd.get("spec") or {}
        names = dict(spec.get("names") or {})
        if names.get("kind") and not names.get("listKind"):
            names["listKind"] = names["kind"] + "List"
        if names.get("plural") and not names.get("singular") and names.get("kind"):
            names["singular"] = names["kind"].lower()
        if isinstance(spec, dict) and spec.get("names"):
            spec["names"] = dict(spec["names"])
            spec["names"].setdefault("listKind", names.get("listKind"))
            spec["names"].setdefault("singular", names.get("singular"))
        versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
        storage = [v.get("name") for v in versions if v.get("storage")]
        status = dict(crd.get("status") or {})
        stored = list(status.get("storedVersions") or [])
        for name in storage:
            if name not in stored:
                stored.append(name)
        when = rfc3339(self.clock())
        old_conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}

        def condition(type_: str, reason: str, message: str) -> dict:
            old = old_conditions.get(type_)
            if old and old.get("status") == "True" and old.get("reason") == reason:
                return old
            return {"type": type_, "status": "True", "reason": reason, "message": message, "lastTransitionTime": when}

        conditions = [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ]
        if "Terminating" in old_conditions:
            conditions.append(old_conditions["Terminating"])
        status.update(conditions=conditions, acceptedNames=names, storedVersions=stored)
        crd["status"] = status

    def _serve_crd(self, crd: dict) -> None:
        """(Re)register the resource type a CRD defines; called after every committed CRD change."""
        from tfjob_sim.schema import StructuralSchema

        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group = spec.get("group", "")
        versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
        served = tuple(v["name"] for v in versions if v.get("served"))
        storage = next((v for v in versions if v.get("storage")), versions[0] if versions else {})
        if not served or not storage:
            self.registry.remove(f"{names.get('plural')}.{group}")
            return
        subresources = storage.get("subresources") or {}
        scale = None
        if isinstance(subresources.get("scale"), dict):
            sc = subresources["scale"]
            scale = ScaleSpec(
                sc.get("specReplicasPath", ".spec.replicas"),
                sc.get("statusReplicasPath", ".status.replicas"),
                sc.get("labelSelectorPath"),
            )
        schema_doc = (storage.get("schema") or {}).get("openAPIV3Schema")
        terminating = bool(crd["metadata"].get("deletionTimestamp"))
        verbs = (
            ("delete", "deletecollection", "get", "list", "watch")
            if terminating
            else ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
        )
        rt = ResourceType(
            group=group,
            version=storage["name"],
            plural=names.get("plural", ""),
            singular=names.get("singular") or names.get("kind", "").lower(),
            kind=names.get("kind", ""),
            namespaced=spec.get("scope") == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            verbs=verbs,
            subresources=tuple(s for s in ("status", "scale") if isinstance(subresources.get(s), dict)),
            status_subresource=isinstance(subresources.get("status"), dict),
            unconditional_update=False,
            custom=True,
            scale=scale,
            schema=StructuralSchema(schema_doc) if isinstance(schema_doc, dict) else None,
            printer_columns=list(storage.get("additionalPrinterColumns") or []),
            crd_name=crd["metadata"]["name"],
            served_versions=served,
        )
        existing = self.registry.get(rt.qualified)
        if existing is not None:
            self.registry.remove(rt.qualified)
        self.registry.add(rt)
