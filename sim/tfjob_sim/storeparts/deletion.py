"""Delete: preconditions, graceful deletion of pods, finalizers and propagation policies.

Why this is its own part: a DELETE is often not a removal: an object with finalizers, a pod with a
grace period on a node, a Namespace or a CRD is marked (deletionTimestamp, GC finalizers of the
propagation policy) and removed by whoever finishes it: the kubelet, the garbage collector, the
cleanup of a namespace's or CRD's contents (:mod:`tfjob_sim.storeparts.cascades`), or the update that
removes the last finalizer.

Contract: ``delete_ex`` answers the object (marked, or as deleted for kinds that return it) or a
success Status, raises 404 and the precondition 409s; a second DELETE of a terminating object can
only shorten a pod's grace period or change GC finalizers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tfjob_sim import errors
from tfjob_sim.errors import ApiError
from tfjob_sim.resources import Registry, ResourceType
from tfjob_sim.storeparts.cascades import Cleanup
from tfjob_sim.storeparts.crds import CrdServing
from tfjob_sim.storeparts.reads import Reads
from tfjob_sim.storeparts.revisions import Bucket
from tfjob_sim.storeparts.values import (
    CRD_CLEANUP_FINALIZER,
    CRD_RESOURCE,
    GC_FINALIZERS,
    PROTECTED_NAMESPACES,
    StoreConfig,
    WriteResult,
    rfc3339,
)


class Deletion(Reads, CrdServing):
    """delete, delete_ex and delete_collection."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        super().__init__(config, clock, registry)
        self._cleanup = Cleanup(self)
        self._deletion_followups.append(self._cleanup.after_delete)

    def delete(self, resource: str, namespace: str | None, name: str, options: dict | None = None) -> dict:
        """DELETE semantics; returns what the HTTP DELETE answers (the object or a success Status)."""
        return self.delete_ex(resource, namespace, name, options).obj

    def delete_ex(
        self, resource: str, namespace: str | None, name: str, options: dict | None = None, dry_run: bool = False
    ) -> WriteResult:
        """DELETE with ``options`` (a DeleteOptions body: preconditions, gracePeriodSeconds,
        propagationPolicy or orphanDependents); ``dry_run`` answers without storing anything."""
        rt = self.resource_type(resource)
        if "delete" not in rt.verbs:
            raise errors.method_not_allowed("delete", rt.plural)
        options = options or {}
        if not isinstance(options, dict):
            raise errors.bad_request("DeleteOptions must be an object")
        ns = self._ns_key(rt, namespace)
        bucket = self._bucket(rt)
        key = (ns, name)
        existing = bucket.objects.get(key)
        if existing is None:
            raise errors.not_found(rt.plural, name, rt.group)
        meta = existing["metadata"]
        if rt.kind == "Namespace" and not rt.group and name in PROTECTED_NAMESPACES:
            raise ApiError(
                403,
                "Forbidden",
                f'namespaces "{name}" is forbidden: this namespace may not be deleted',
                {"name": name, "kind": "namespaces"},
            )
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != meta.get("uid"):
            raise errors.conflict(
                rt.plural,
                name,
                rt.group,
                f"the UID in the precondition ({pre['uid']}) does not match the UID in record "
                f"({meta.get('uid')}). The object might have been deleted and then recreated",
            )
        if pre.get("resourceVersion") and str(pre["resourceVersion"]) != meta.get("resourceVersion"):
            raise errors.conflict(
                rt.plural,
                name,
                rt.group,
                f"the ResourceVersion in the precondition ({pre['resourceVersion']}) does not "
                f"match the ResourceVersion in record ({meta.get('resourceVersion')}). The object "
                "might have been modified",
            )
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        if policy not in (None, "Orphan", "Foreground", "Background"):
            raise errors.invalid(
                "DeleteOptions",
                "",
                [
                    {
                        "reason": "FieldValueNotSupported",
                        "field": "propagationPolicy",
                        "message": f'Unsupported value: "{policy}": supported values: "Foreground", "Background", '
                        '"Orphan", "nil"',
                    }
                ],
                "meta.k8s.io",
            )
        grace = options.get("gracePeriodSeconds")
        if grace is not None:
            if isinstance(grace, bool) or not isinstance(grace, (int, float)):
                raise errors.bad_request(f"invalid gracePeriodSeconds: {grace!r}")
            grace = int(grace)
            if grace < 0:
                grace = 1
        graceful_type = rt.kind == "Pod" and not rt.group
        if graceful_type:
            spec = existing.get("spec") or {}
            if grace is None:
                grace = int(spec.get("terminationGracePeriodSeconds", 30) or 0)
            phase = (existing.get("status") or {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
        else:
            grace = 0

        finalizers = list(meta.get("finalizers") or [])
        if policy == "Orphan":
            finalizers = [f for f in finalizers if f != "foregroundDeletion"]
            if "orphan" not in finalizers:
                finalizers.append("orphan")
        elif policy == "Foreground":
            finalizers = [f for f in finalizers if f != "orphan"]
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        elif policy == "Background":
            finalizers = [f for f in finalizers if f not in GC_FINALIZERS]
        if rt.qualified == CRD_RESOURCE and CRD_CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CRD_CLEANUP_FINALIZER)
        namespace_cleanup = rt.kind == "Namespace" and not rt.group

        now = self.clock()
        if meta.get("deletionTimestamp"):
            # Already terminating: only a shorter grace period (pods) or new GC finalizers change it.
            new_meta = dict(meta)
            changed = False
            if finalizers != list(meta.get("finalizers") or []):
                new_meta["finalizers"] = finalizers
                changed = True
            current_grace = meta.get("deletionGracePeriodSeconds")
            if graceful_type and current_grace is not None and grace < current_grace:
                new_meta["deletionGracePeriodSeconds"] = grace
                new_meta["deletionTimestamp"] = rfc3339(now + grace)
                changed = True
            if graceful_type and grace == 0 and not new_meta.get("finalizers"):
                return self._remove(rt, bucket, key, existing, dry_run)
            if not changed:
                return WriteResult(existing, 200)
            return self._mark_deleting(rt, bucket, key, existing, new_meta, dry_run)

        if finalizers or grace > 0 or namespace_cleanup:
            new_meta = dict(meta)
            new_meta["deletionTimestamp"] = rfc3339(now + grace)
            new_meta["deletionGracePeriodSeconds"] = grace
            if finalizers:
                new_meta["finalizers"] = finalizers
            else:
                new_meta.pop("finalizers", None)
            if new_meta.get("generation"):
                new_meta["generation"] = int(new_meta["generation"]) + 1
            result = self._mark_deleting(rt, bucket, key, existing, new_meta, dry_run)
            if not dry_run:
                if namespace_cleanup:
                    self._cleanup.start_namespace(name)
                elif rt.qualified == CRD_RESOURCE:
                    self._cleanup.start_crd(name)
                current = bucket.objects.get(key)
                if current is not None:
                    result.obj = current
            return result
        return self._remove(rt, bucket, key, existing, dry_run)

    def _mark_deleting(
        self, rt: ResourceType, bucket: Bucket, key: tuple[str, str], existing: dict, new_meta: dict, dry_run: bool
    ) -> WriteResult:
        new = dict(existing)
        new["metadata"] = new_meta
        if rt.kind == "Namespace" and not rt.group:
            new["status"] = dict(existing.get("status") or {}, phase="Terminating")
        if rt.qualified == CRD_RESOURCE:
            status = dict(existing.get("status") or {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
            conditions.append(
                {
                    "type": "Terminating",
                    "status": "True",
                    "reason": "InstanceDeletionPending",
                    "message": "CustomResourceDefinition marked for deletion; deleting instances",
                    "lastTransitionTime": rfc3339(self.clock()),
                }
            )
            status["conditions"] = conditions
            new["status"] = status
        if dry_run:
            return WriteResult(new, 200)
        rv = self._next_rv()
        new_meta["resourceVersion"] = str(rv)
        self._commit(bucket, "MODIFIED", key, existing, new, rv)
        if rt.qualified == CRD_RESOURCE:
            self._serve_crd(new)
        return WriteResult(new, 200)

    def _remove(
        self, rt: ResourceType, bucket: Bucket, key: tuple[str, str], existing: dict, dry_run: bool
    ) -> WriteResult:
        meta = existing["metadata"]
        if dry_run:
            return WriteResult(existing if rt.return_deleted_object else self._success_status(rt, meta), 200)
        rv = self._next_rv()
        event = self._commit(bucket, "DELETED", key, existing, None, rv)
        if rt.return_deleted_object:
            return WriteResult(event.object, 200)
        return WriteResult(self._success_status(rt, meta), 200)

    @staticmethod
    def _success_status(rt: ResourceType, meta: dict) -> dict:
        details: dict[str, Any] = {"name": meta.get("name")}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = meta.get("uid")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def delete_collection(
        self,
        resource: str,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
        options: dict | None = None,
        dry_run: bool = False,
    ) -> dict:
        """DELETE on a collection: deletes every match; answers the list of what was deleted."""
        rt = self.resource_type(resource)
        if "deletecollection" not in rt.verbs:
            raise errors.method_not_allowed("deletecollection", rt.plural)
        items, _rv = self.list(resource, namespace, label_selector, field_selector)
        deleted = []
        for obj in items:
            meta = obj["metadata"]
            try:
                result = self.delete_ex(resource, meta.get("namespace"), meta["name"], options, dry_run)
            except ApiError as exc:
                if exc.code == 404:  # deleted meanwhile (e.g. by a cascade of an earlier item)
                    continue
                raise
            deleted.append(result.obj if result.obj.get("kind") != "Status" else obj)
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": deleted,
        }
