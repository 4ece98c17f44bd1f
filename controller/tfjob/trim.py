"""Informer transforms that cache only what the TFJob controller reads of its pods and services.

Why: at 10,000 jobs the caches hold 60,000 pods and 60,000 services, and a pod as the apiserver
sends it (spec with the whole template, TF_CONFIG, managedFields, status with every condition and
container state) is several kilobytes of dicts. :func:`decide`, the event handlers and the
expectations read a small, fixed set of fields; everything else is dead weight. These transforms
build a new, small dict holding exactly those fields (shared strings interned), so the cache costs
a fraction of the memory and the decision is unchanged -- the tfjob table tests decide every
scenario on both the full and the trimmed objects and require the same decision.

What is kept (the readers: controller.tfjob.pods, decide, the handlers in controller.tfjob.controller,
the metrics observer in controller.tfjob.observe, the informer's resourceVersion bookkeeping, the
controlling-owner index):

- ``apiVersion``, ``kind``;
- ``metadata``: ``name``, ``namespace``, ``uid``, ``resourceVersion``, ``creationTimestamp``
  (controller.tfjob.observe), ``deletionTimestamp``, the replica-type, replica-index and job-name labels (controller.tfjob.confirm), the
  ``controller.kubernetes.io/pod-deletion-cost`` annotation (controller.tfjob.members) and the
  controlling ownerReference (apiVersion, kind, name, uid, controller);
- pods' ``status``: ``phase``, ``reason``, ``startTime``; the ``type``, ``status`` and ``reason``
  of the ``DisruptionTarget`` and ``Ready`` conditions; of container statuses the ``restartCount`` of every container and, of the
  ``tensorflow`` container, ``name`` and ``state.running.startedAt`` /
  ``state.terminated.{exitCode, reason, startedAt, finishedAt}``.

Contract: the result is a fresh dict (the input is not modified) and the transforms are idempotent.
A field added to a reader above must be added here, or the equivalence tests fail.
"""

from __future__ import annotations

import sys
from typing import Any

from . import api

_intern = sys.intern
_LABELS = (api.LABEL_REPLICA_TYPE, api.LABEL_REPLICA_INDEX, api.LABEL_JOB_NAME)
_CONDITIONS = (api.POD_CONDITION_DISRUPTION_TARGET, api.POD_CONDITION_READY)
_META_SCALARS = ("name", "uid", "resourceVersion", "creationTimestamp", "deletionTimestamp")
_OWNER_FIELDS = ("apiVersion", "kind", "name", "uid", "controller")
_TERMINATED_FIELDS = ("exitCode", "reason", "startedAt", "finishedAt")


def _metadata(meta: Any) -> dict[str, Any]:
    if not isinstance(meta, dict):
        return {}
    out: dict[str, Any] = {}
    for key in _META_SCALARS:
        value = meta.get(key)
        if value is not None:
            out[key] = value
    namespace = meta.get("namespace")
    if isinstance(namespace, str):
        out["namespace"] = _intern(namespace)
    labels = meta.get("labels")
    if isinstance(labels, dict):
        kept = {k: _intern(v) if isinstance(v, str) else v for k in _LABELS if (v := labels.get(k)) is not None}
        if kept:
            out["labels"] = kept
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and api.ANNOTATION_POD_DELETION_COST in annotations:
        out["annotations"] = {api.ANNOTATION_POD_DELETION_COST: annotations[api.ANNOTATION_POD_DELETION_COST]}
    refs = meta.get("ownerReferences")
    if isinstance(refs, list):
        for ref in refs:
            if isinstance(ref, dict) and ref.get("controller"):
                out["ownerReferences"] = [
                    {k: _intern(v) if isinstance(v, str) else v for k, v in ref.items() if k in _OWNER_FIELDS}
                ]
                break
    return out


def _head(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("apiVersion", "kind"):
        value = obj.get(key)
        if isinstance(value, str):
            out[key] = _intern(value)
    out["metadata"] = _metadata(obj.get("metadata"))
    return out


def _container_status(status: Any) -> dict[str, Any] | None:
    if not isinstance(status, dict):
        return None
    out: dict[str, Any] = {}
    count = status.get("restartCount")
    if count is not None:
        out["restartCount"] = count
    name = status.get("name")
    if name == api.DEFAULT_CONTAINER_NAME:
        out["name"] = api.DEFAULT_CONTAINER_NAME
        state = status.get("state")
        if isinstance(state, dict):
            kept: dict[str, Any] = {}
            running = state.get("running")
            if isinstance(running, dict) and "startedAt" in running:
                kept["running"] = {"startedAt": running["startedAt"]}
            terminated = state.get("terminated")
            if isinstance(terminated, dict):
                kept["terminated"] = {
                    k: _intern(v) if k == "reason" and isinstance(v, str) else v
                    for k, v in terminated.items()
                    if k in _TERMINATED_FIELDS
                }
            if kept:
                out["state"] = kept
    return out


def trim_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as the controller reads it (see the module docstring)."""
    out = _head(obj)
    status = obj.get("status")
    if isinstance(status, dict):
        kept: dict[str, Any] = {}
        for key in ("phase", "reason"):
            value = status.get(key)
            if isinstance(value, str):
                kept[key] = _intern(value)
        if "startTime" in status:
            kept["startTime"] = status["startTime"]
        conditions = status.get("conditions")
        if isinstance(conditions, list):
            kept["conditions"] = [
                {k: _intern(v) if isinstance(v, str) else v for k, v in c.items() if k in ("type", "status", "reason")}
                for c in conditions
                if isinstance(c, dict) and c.get("type") in _CONDITIONS
            ]
        for key in ("initContainerStatuses", "containerStatuses"):
            statuses = status.get(key)
            if isinstance(statuses, list):
                kept[key] = [s for s in map(_container_status, statuses) if s is not None]
        out["status"] = kept
    return out


def trim_service(obj: dict[str, Any]) -> dict[str, Any]:
    """The service as the controller reads it: identity, labels, owner, deletion (no spec, no status)."""
    return _head(obj)
