"""Create: POST semantics and the in-process writers' cheaper path (``put_internal``).

Why this is its own part: a create is where the server sets what only it sets (uid, creationTimestamp,
generation, generateName's random suffix, a Service's IP, a Namespace's name label) before admission,
ownership and validation (:mod:`tfjob_sim.storeparts.admission`, :mod:`tfjob_sim.storeparts.ownership`).

Contract: ``create_ex`` answers 201 with the stored object (or, dry run, what would be stored) and
raises 409 AlreadyExists for a taken name; ``put_internal`` trusts its caller (see its docstring).
"""

from __future__ import annotations

import random
from typing import Any

from tfjob_sim import errors
from tfjob_sim.resources import prepare_for_create, required_value, validate_name
from tfjob_sim.storeparts.admission import Admission
from tfjob_sim.storeparts.crds import CrdServing
from tfjob_sim.storeparts.ownership import FieldOwnership
from tfjob_sim.storeparts.values import CRD_RESOURCE, WriteOptions, WriteResult, deep_copy, new_uid, rfc3339

# The characters of a generateName suffix: the apiserver's (no vowels, no look-alike digits).
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class Creation(Admission, FieldOwnership, CrdServing):
    """create, create_ex and put_internal."""

    def create(self, resource: str, namespace: str | None, obj: dict, *, field_manager: str | None = None) -> dict:
        """POST semantics. Returns the stored object."""
        return self.create_ex(resource, namespace, obj, WriteOptions(field_manager=field_manager)).obj

    def create_ex(
        self,
        resource: str,
        namespace: str | None,
        obj: dict,
        opts: WriteOptions | None = None,
        *,
        owned: bool = False,
        require_kind: bool = False,
        apply_config: dict | None = None,
    ) -> WriteResult:
        """Create with options. ``owned`` = the caller hands over ``obj`` (no defensive copy);
        ``apply_config``: the create is a server-side apply of that configuration."""
        opts = opts or WriteOptions()
        rt = self.resource_type(resource)
        self._check_kind(rt, obj, require=require_kind)
        if "create" not in rt.verbs:
            raise errors.method_not_allowed("create", rt.plural)
        obj = obj if owned else deep_copy(obj)
        obj["apiVersion"] = rt.api_version if not rt.custom else obj.get("apiVersion") or rt.api_version
        obj["kind"] = rt.kind
        meta: Any = obj.get("metadata")  # the request's JSON
        if meta is None:
            meta = obj["metadata"] = {}
        warnings: list[str] = []
        ns = self._ns_key(rt, namespace)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != ns:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.internal("resourceVersion should not be set on objects to be created")
        for server_set in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(server_set, None)
        if rt.custom and rt.status_subresource:
            obj.pop("status", None)
        self._schema_pass(rt, obj, None, opts, warnings)
        submitted_spec = obj.get("spec")
        submitted_spec = set(submitted_spec) if isinstance(submitted_spec, dict) else set()
        prepare_for_create(rt, obj, self._allocate_service_ip)
        name = meta.get("name") or ""
        generate = meta.get("generateName") or ""
        if not name and not generate:
            raise errors.invalid(
                rt.kind, "", [required_value("metadata.name", "name or generateName is required")], rt.group
            )
        bucket = self._bucket(rt)
        if not name:
            for _attempt in range(self.config.generate_name_attempts):
                candidate = generate + "".join(random.choices(_GENERATE_ALPHABET, k=5))
                if (ns, candidate) not in bucket.objects:
                    name = candidate
                    break
            else:
                err = errors.already_exists(rt.plural, generate, rt.group)
                err.message += ", the server was not able to generate a unique name for the object"
                err.retry_after = 1
                raise err
            meta["name"] = name
        if rt.kind == "Namespace" and not rt.group:
            labels = meta.setdefault("labels", {})
            if isinstance(labels, dict):
                labels["kubernetes.io/metadata.name"] = name
        name_causes = validate_name(rt, name)
        if name_causes:
            raise errors.invalid(rt.kind, name, name_causes, rt.group)
        if generate and not meta.get("generateName"):
            meta["generateName"] = generate
        now = self.clock()
        meta["uid"] = new_uid()
        meta["creationTimestamp"] = rfc3339(now)
        if rt.custom or rt.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        if rt.qualified == CRD_RESOURCE:
            self._prepare_crd(obj)
        self._own_created(rt, obj, opts, rfc3339(now), apply_config, submitted_spec)
        self._validate(rt, obj, None)
        self._check_namespace(rt, ns, name)
        key = (ns, name)
        if key in bucket.objects:
            raise errors.already_exists(rt.plural, name, rt.group)
        if opts.dry_run:
            return WriteResult(obj, 201, warnings)
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self._commit(bucket, "ADDED", key, None, obj, rv)
        if rt.qualified == CRD_RESOURCE:
            self._serve_crd(obj)
        return WriteResult(obj, 201, warnings)

    def put_internal(self, resource: str, obj: dict) -> dict:
        """Create or replace ``obj`` as an in-process component built it: the caller guarantees it is
        exactly what the API write would store (defaults, validity, ``metadata.managedFields``). Only
        the store's own fields are set: ``uid`` and ``creationTimestamp`` (kept on replace) and the
        resourceVersion; a create needs an active namespace. For high-volume writers whose objects have
        a fixed shape (the simulated components' Events, see tfjob_sim.events): the full write
        pipeline costs several times more. The store takes ``obj`` over (no copy)."""
        rt = self.resource_type(resource)
        meta = obj["metadata"]
        ns = self._ns_key(rt, meta.get("namespace"))
        key = (ns, meta["name"])
        bucket = self._bucket(rt)
        if rt.custom:
            bucket.normalized = None  # the caller's object skipped pruning and defaulting
        existing = bucket.objects.get(key)
        if existing is None:
            self._check_namespace(rt, ns, meta["name"])
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = rfc3339(self.clock())
        else:
            meta["uid"] = existing["metadata"]["uid"]
            meta["creationTimestamp"] = existing["metadata"]["creationTimestamp"]
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        self._commit(bucket, "ADDED" if existing is None else "MODIFIED", key, existing, obj, rv)
        return obj
