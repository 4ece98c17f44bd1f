"""Who wrote an object: reading ``metadata.managedFields`` (no TFJob knowledge).

The API server keeps, on every object, one managedFields entry per (manager, operation, subresource, API
version): the fields that writer last set (``fieldsV1``) and when it last changed one of them (``time``).
Without ``fieldManager`` on a request, the manager is the client's User-Agent up to its first ``/``
(``kubectl-edit``, ``manager`` for a controller-runtime binary called ``/manager``, ``tfjob-controller``
for this one). A write that changes nothing a writer owns leaves that writer's entry untouched, and a
write that only removes fields updates no ``time`` at all: managedFields tell who set what, not every
request that was made.

Informers drop managedFields from their caches (``cache.strip_managed_fields``); whoever needs them reads
them in a transform, before that happens.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from controller.runtime.jsonfields import field_str


@dataclass(frozen=True)
class Writer:
    """One managedFields entry, without its field set."""

    manager: str
    operation: str  # "Update" (create, PUT, PATCH) or "Apply" (server-side apply)
    subresource: str  # "" for the main resource, "status", "scale", ...
    time: str  # RFC 3339 seconds; "" when the entry has none


def manager_from_user_agent(user_agent: str) -> str:
    """The manager name the API server records for a request without ``fieldManager``."""
    prefix = user_agent.split("/", 1)[0]
    return "".join(ch for ch in prefix if ch.isprintable())[:128]


def _entries(obj: Any) -> list[dict[str, Any]]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    entries = meta.get("managedFields") if isinstance(meta, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def writers(obj: Any, subresource: str | None = None) -> tuple[Writer, ...]:
    """The writers of ``obj`` (of one ``subresource`` only, if given: ``""`` is the main resource)."""
    out = []
    for entry in _entries(obj):
        manager = entry.get("manager")
        if not isinstance(manager, str):
            continue
        sub = field_str(entry, "subresource")
        if subresource is not None and sub != subresource:
            continue
        out.append(Writer(manager, field_str(entry, "operation"), sub, field_str(entry, "time")))
    return tuple(out)


def owner_reference_setter(obj: Any, owner_uid: str) -> str | None:
    """The manager that set the ownerReference to ``owner_uid`` on ``obj`` (for a pod created by a controller:
    the controller that created it), or None when no entry owns that reference."""
    key = "k:" + json.dumps({"uid": owner_uid}, separators=(",", ":"))
    for entry in _entries(obj):
        fields = entry.get("fieldsV1")
        meta = fields.get("f:metadata") if isinstance(fields, dict) else None
        refs = meta.get("f:ownerReferences") if isinstance(meta, dict) else None
        if isinstance(refs, dict) and key in refs and isinstance(entry.get("manager"), str):
            return str(entry["manager"])
    return None
