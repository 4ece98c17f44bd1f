"""Patch: JSON, merge, strategic merge and server-side apply onto the update pipeline.

Why this is its own part: a PATCH picks the engine (:mod:`tfjob_sim.patch`), refuses the content
types a resource does not take, and turns an apply of a missing object into a create; the result goes
through the same pipeline as a PUT (:mod:`tfjob_sim.storeparts.updates`), with the applied
configuration for the field manager.

Contract: ``patch_ex`` answers like the real server (415 for an unsupported patch type, 422 for an
apply without fieldManager, 404 for a missing object unless the patch is an apply).
"""

from __future__ import annotations

from typing import Any

from tfjob_sim import errors
from tfjob_sim.resources import ResourceType, required_value
from tfjob_sim.storeparts import scale as scales
from tfjob_sim.storeparts.updates import Updates
from tfjob_sim.storeparts.values import WriteOptions, WriteResult, deep_copy


class Patching(Updates):
    """patch and patch_ex."""

    def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str | None = None,
        *,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict:
        """PATCH semantics; ``patch_type`` "json" | "merge" | "strategic" | "apply"."""
        return self.patch_ex(
            resource,
            namespace,
            name,
            patch_type,
            patch,
            subresource,
            WriteOptions(field_manager=field_manager, force=force),
        ).obj

    def patch_ex(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch_type: str,
        patch: Any,
        subresource: str | None = None,
        opts: WriteOptions | None = None,
    ) -> WriteResult:
        """PATCH with the request's options; ``patch`` is the decoded body (engines check its shape)."""
        from tfjob_sim import patch as patch_mod

        opts = opts or WriteOptions()
        rt = self.resource_type(resource)
        if "patch" not in rt.verbs:
            raise errors.method_not_allowed("patch", rt.plural)
        if patch_type == "strategic" and rt.custom:
            raise errors.unsupported_media_type(
                ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
            )
        if patch_type not in ("json", "merge", "strategic", "apply"):
            raise errors.unsupported_media_type(
                ["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"]
                + ([] if rt.custom else ["application/strategic-merge-patch+json"])
            )
        if patch_type == "apply" and not opts.field_manager:
            raise errors.invalid(
                "PatchOptions", "", [required_value("fieldManager", "is required for apply patch")], "meta.k8s.io"
            )
        if (
            patch_type == "apply"
            and isinstance(patch, dict)
            and isinstance(patch.get("metadata"), dict)
            and patch["metadata"].get("managedFields") is not None
        ):
            raise errors.bad_request("metadata.managedFields must be nil")
        ns = self._ns_key(rt, namespace)
        if subresource == "scale":
            current = scales.scale_of(rt, self.get_or_404(resource, ns or None, name))
            patched = self._apply_patch(patch_mod, patch_type, current, patch, "Scale")
            return self._update_scale(rt, ns or None, name, patched, opts)
        self._check_subresource(rt, subresource)
        bucket = self._bucket(rt)
        existing = bucket.objects.get((ns, name))
        if existing is None:
            if patch_type == "apply" and subresource is None:
                if not isinstance(patch, dict):
                    raise errors.bad_request("the apply patch must be an object")
                body = deep_copy(patch)
                if body.get("metadata") is None:
                    body["metadata"] = {}
                elif not isinstance(body["metadata"], dict):
                    raise errors.bad_request("the apply patch's metadata must be an object")
                body["metadata"]["name"] = name
                self._check_kind(rt, body, require=True)
                return self.create_ex(
                    resource,
                    namespace,
                    body,
                    opts,
                    owned=True,
                    apply_config=self._applied_config(rt, patch, subresource),
                )
            raise errors.not_found(rt.plural, name, rt.group)
        if patch_type == "apply":
            if not isinstance(patch, dict):
                raise errors.bad_request("the apply patch must be an object")
            self._check_kind(rt, patch, require=True)
            body_name = (patch.get("metadata") or {}).get("name")
            if body_name and body_name != name:
                raise errors.bad_request(
                    f"the name of the object ({body_name}) does not match the name on the URL ({name})"
                )
        if patch_type == "merge" and subresource == "status" and not rt.custom:
            # A built-in's status write keeps only the patched status and writes into nothing of it
            # (the rest is the stored object's, see Updates._update_existing): no copy of the untouched
            # parts. The kubelet's status writes of every pod start come this way.
            patched = patch_mod.merge_patch(existing, patch, share=True)
        else:
            # No copy: the patch engines' results share no mutable structure with their inputs
            # (sim/tfjob_sim/patch.py contract), so the update pipeline may write into them.
            patched = self._apply_patch(
                patch_mod,
                patch_type,
                existing,
                patch,
                rt.kind,
                strip_status=rt.status_subresource and subresource != "status",
            )
        if patched.get("kind") not in (None, rt.kind) or not isinstance(patched.get("metadata", {}), dict):
            raise errors.bad_request(f"the kind in the patched object ({patched.get('kind')}) does not match {rt.kind}")
        self._check_structs(rt, patched)
        return self._update_existing(
            rt,
            bucket,
            existing,
            patched,
            subresource,
            opts,
            precondition_required=False,
            apply_config=self._applied_config(rt, patch, subresource) if patch_type == "apply" else None,
        )

    @staticmethod
    def _applied_config(rt: ResourceType, patch: dict, subresource: str | None) -> dict:
        # The fields an apply sets: through the main resource a kind with a status endpoint ignores
        # the configuration's status; through /status only status counts.
        if subresource == "status":
            return {"status": patch["status"]} if "status" in patch else {}
        if rt.status_subresource:
            return {k: v for k, v in patch.items() if k != "status"}
        return patch

    @staticmethod
    def _apply_patch(
        patch_mod: Any, patch_type: str, doc: dict, patch: Any, kind: str, *, strip_status: bool = True
    ) -> Any:
        # The decoded body goes straight to the engines: they own the real server's answers to bad
        # bodies (null JSON patch = no-op, array merge patch = 422, ...), so no pre-checks here.
        if patch_type == "json":
            return patch_mod.json_patch(doc, patch)
        if patch_type == "merge":
            return patch_mod.merge_patch(doc, patch)
        if patch_type == "strategic":
            return patch_mod.strategic_merge_patch(doc, patch, kind)
        # Server-side apply: the applied configuration is merged over the live object (strategic
        # merge for built-ins so keyed lists merge, JSON merge for custom resources); ownership,
        # conflicts and the removal of fields a manager stopped applying are the field manager's
        # (``_own_updated``). The engine is chosen by kind, up front: its error is the answer.
        applied = dict(patch)
        if strip_status:
            applied.pop("status", None)
        if kind in patch_mod.STRATEGIC_MERGE_KINDS:
            return patch_mod.strategic_merge_patch(doc, applied, kind)
        return patch_mod.merge_patch(doc, applied)
