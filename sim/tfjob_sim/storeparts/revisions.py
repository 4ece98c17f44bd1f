"""Objects and revisions: the buckets of stored objects, the global resourceVersion and type lookup.

Why this is the bottom layer: every other part of the store reads or writes objects through a bucket
and numbers its writes with the one global resourceVersion counter, as etcd does. This part knows
nothing of validation or subscribers; :class:`tfjob_sim.storeparts.feed.ChangeFeed` commits changes.

Contract: :class:`Revisions` owns ``config``, ``clock``, ``registry``, ``resource_version`` and the
buckets; a bucket's objects are only changed by a commit. ``resource_type`` raises the 404 of an
unknown resource; ``_bucket`` creates a bucket on first use and follows a CRD's re-registered type.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from tfjob_sim import errors
from tfjob_sim.resources import Registry, ResourceType
from tfjob_sim.storeparts.values import Event, StoreConfig


class Bucket:
    """All objects of one resource type, plus that type's bounded change history."""

    __slots__ = ("rt", "objects", "history", "history_rvs", "compacted_rv", "_sorted", "normalized")

    def __init__(self, rt: ResourceType, start_rv: int) -> None:
        self.rt = rt
        # The CRD schema under which every stored object's fields (status aside) are known to be pruned
        # and defaulted, or None when that is not known: a /status write then normalizes only the
        # status it brings (see tfjob_sim.storeparts.updates.Updates._update_existing).
        self.normalized: Any = rt.schema if rt.custom else None
        self.objects: dict[tuple[str, str], dict] = {}
        self.history: deque[Event] = deque()
        self.history_rvs: deque[int] = deque()
        # Every change with rv > compacted_rv is still in history.
        self.compacted_rv = start_rv
        self._sorted: list[tuple[str, str]] | None = None

    def sorted_keys(self) -> list[tuple[str, str]]:
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted

    def put(self, key: tuple[str, str], obj: dict) -> None:
        if key not in self.objects:
            self._sorted = None
        self.objects[key] = obj

    def remove(self, key: tuple[str, str]) -> None:
        if self.objects.pop(key, None) is not None:
            self._sorted = None


class Revisions:
    """The stored objects by resource, the global resourceVersion counter and resource type lookup."""

    def __init__(
        self,
        config: StoreConfig | None = None,
        clock: Callable[[], float] = time.time,
        registry: Registry | None = None,
    ) -> None:
        self.config = config or StoreConfig()
        self.clock = clock
        self.registry = registry or Registry()
        self.resource_version = 0
        self._buckets: dict[str, Bucket] = {}

    def resource_type(self, resource: str) -> ResourceType:
        """The type ``resource`` (a qualified plural) names; 404 when nothing serves it."""
        rt = self.registry.get(resource)
        if rt is None:
            raise errors.page_not_found()
        return rt

    def _bucket(self, rt: ResourceType) -> Bucket:
        """The bucket of ``rt``'s objects, created empty on first use."""
        bucket = self._buckets.get(rt.qualified)
        if bucket is None:
            bucket = self._buckets[rt.qualified] = Bucket(rt, self.resource_version)
        elif bucket.rt is not rt:  # a CRD update re-registers its type; objects stay
            bucket.normalized = _still_normalized(bucket.normalized, rt.schema) if bucket.objects else rt.schema
            bucket.rt = rt
        return bucket

    def _ns_key(self, rt: ResourceType, namespace: str | None) -> str:
        """The namespace part of a key: "" for cluster-scoped types; 400 when a namespaced type has none."""
        if rt.namespaced:
            if not namespace:
                raise errors.bad_request(
                    "the server could not find the requested resource: namespace is required "
                    f"for namespaced resource {rt.qualified}"
                )
            return namespace
        return ""

    def _next_rv(self) -> int:
        """The resourceVersion of the next commit (one global counter, as etcd's revision)."""
        self.resource_version += 1
        return self.resource_version

    def _drop_crd_type(self, crd: dict) -> None:
        """Forget the resource type a deleted CRD defined and every object of it (the CRD's cleanup
        deleted them first; whatever is left goes with the type)."""
        spec = crd.get("spec") or {}
        qualified = f"{(spec.get('names') or {}).get('plural')}.{spec.get('group')}"
        self.registry.remove(qualified)
        self._buckets.pop(qualified, None)


def _still_normalized(before: Any, schema: Any) -> Any:
    """The bucket's ``normalized`` mark after its CRD was re-registered with ``schema``: kept when the
    schema is the same document (another field of the CRD changed), lost otherwise."""
    if before is None or schema is None:
        return None
    if before.schema == schema.schema and before.server_minor == schema.server_minor:
        return schema
    return None
