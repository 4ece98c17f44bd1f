"""The scale subresource's mapping: a Scale (autoscaling/v1) read from an object, written into one.

Why a module of functions: which fields a Scale maps to is the resource type's (``ScaleSpec``: the
built-in workloads', a CRD's ``subresources.scale`` paths); reading and writing them needs no store
state, so the update pipeline (:mod:`tfjob_sim.storeparts.updates`) and PATCH share these.

Contract: ``scale_spec`` raises 404 for a type without the subresource; ``scale_of`` builds the Scale
(500 when the spec replicas path is missing, as the real server); ``scaled`` validates the replicas
and returns a copy of the object with them set.
"""

from __future__ import annotations

from typing import Any

from tfjob_sim import errors
from tfjob_sim.resources import ResourceType, ScaleSpec, invalid_value
from tfjob_sim.storeparts.values import deep_copy


def scale_spec(rt: ResourceType) -> ScaleSpec:
    """Where ``rt``'s Scale reads and writes; 404 when ``rt`` has no scale subresource."""
    if rt.scale is None or "scale" not in rt.subresources:
        raise errors.page_not_found()
    return rt.scale


def scale_of(rt: ResourceType, obj: dict) -> dict:
    """The Scale of ``obj``: its replicas, status replicas and selector, its name, uid and RV."""
    spec = scale_spec(rt)
    meta = obj["metadata"]
    replicas = _get_path(obj, spec.spec_replicas_path)
    if replicas is _MISSING:
        raise errors.internal(f'the spec replicas field "{spec.spec_replicas_path}" does not exist')
    status_replicas = _get_path(obj, spec.status_replicas_path)
    status: dict[str, Any] = {"replicas": status_replicas if isinstance(status_replicas, int) else 0}
    if spec.label_selector_path:
        selector = _get_path(obj, spec.label_selector_path)
        if isinstance(selector, str):
            status["selector"] = selector
    elif spec.selector_of is not None:
        text = spec.selector_of(obj)
        if text:
            status["selector"] = text
    scale_meta = {"name": meta["name"]}
    if rt.namespaced:
        scale_meta["namespace"] = meta.get("namespace")
    scale_meta.update(
        uid=meta.get("uid"),
        resourceVersion=meta.get("resourceVersion"),
        creationTimestamp=meta.get("creationTimestamp"),
    )
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_meta,
        "spec": {"replicas": replicas},
        "status": status,
    }


_MISSING = object()


def _get_path(obj: dict, path: str) -> Any:
    cur: Any = obj
    for part in path.lstrip(".").split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _set_path(obj: dict, path: str, value: Any) -> None:
    parts = path.lstrip(".").split(".")
    cur = obj
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = cur[part] = {}
        cur = nxt
    cur[parts[-1]] = value


def scaled(spec: ScaleSpec, existing: dict, scale: dict, name: str) -> dict:
    """A copy of ``existing`` with the replicas of ``scale`` (422 unless a non-negative integer) and the
    Scale's resourceVersion as the update's precondition (none when the Scale has none)."""
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise errors.invalid(
            "Scale",
            name,
            [invalid_value("spec.replicas", replicas, "must be greater than or equal to 0")],
            "autoscaling",
        )
    new = deep_copy(existing)
    _set_path(new, spec.spec_replicas_path, replicas)
    scale_rv = (scale.get("metadata") or {}).get("resourceVersion")
    if scale_rv:
        new["metadata"]["resourceVersion"] = scale_rv
    else:
        new["metadata"].pop("resourceVersion", None)
    return new
