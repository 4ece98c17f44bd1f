"""The values the store's API takes and answers, and the helpers every part of the store shares.

Why a module of its own: the HTTP layer, the watch hub, the kubelet and the store's parts all build
or read these (options, results, committed events, timestamps, resourceVersions); keeping them apart
from the write pipeline lets every part import them without importing each other.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from tfjob_sim import errors, fieldmanager
from tfjob_sim.errors import ApiError

# fn(event_type, resource, old, new): see Store.add_listener.
Listener = Callable[[str, str, "dict | None", "dict | None"], None]

GC_FINALIZERS = ("orphan", "foregroundDeletion")
CRD_CLEANUP_FINALIZER = "customresourcecleanup.apiextensions.k8s.io"
CRD_RESOURCE = "customresourcedefinitions.apiextensions.k8s.io"
# The NamespaceLifecycle admission plugin refuses to delete these.
PROTECTED_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})


@dataclass
class StoreConfig:
    """Knobs tests turn; defaults mirror a real apiserver's orders of magnitude."""

    # Watch-cache-like history per resource: a resume from an RV older than what is kept gets 410.
    history_max_events: int = 50_000
    history_max_age: float = 300.0
    # generateName retries before giving up with AlreadyExists (the real registry tries 8 times).
    generate_name_attempts: int = 8
    # The Kubernetes minor version (1.N) the API server behaves as: /version, and which CRD validation features it
    # accepts (tfjob_sim.versions).
    kubernetes_minor: int = 33


@dataclass
class WriteOptions:
    """Per-request write options (query parameters of the real API)."""

    dry_run: bool = False
    field_validation: str = "Ignore"  # Strict | Warn | Ignore (the HTTP layer defaults to Warn)
    field_manager: str | None = None
    force: bool = False
    # The request's User-Agent: the manager name when ``field_manager`` is not given.
    user_agent: str = ""
    # False for the few writes a real registry makes outside the field manager (eviction's condition).
    track_ownership: bool = True

    @property
    def manager(self) -> str:
        return self.field_manager or fieldmanager.manager_from_user_agent(self.user_agent) or "unknown"


@dataclass
class WriteResult:
    """What a write answered: the body, the HTTP code (200/201/202) and warning texts."""

    obj: dict
    code: int = 200
    warnings: list[str] = field(default_factory=list)


@dataclass
class ListResult:
    items: list[dict]
    resource_version: str
    continue_token: str = ""
    remaining: int | None = None


class Event:
    """One committed change. ``object`` is what a watch delivers; ``line()`` is serialised once."""

    __slots__ = ("rv", "type", "resource", "old", "new", "object", "time", "_line")

    def __init__(self, rv: int, type_: str, resource: str, old: dict | None, new: dict | None, when: float):
        self.rv = rv
        self.type = type_
        self.resource = resource
        self.old = old
        self.new = new
        if type_ == "DELETED":
            assert old is not None
            self.object = with_resource_version(old, rv)
        else:
            assert new is not None
            self.object = new
        self.time = when
        self._line: bytes | None = None

    def line(self) -> bytes:
        """The watch line ``{"type":..,"object":..}\\n``; built once, shared by every watcher."""
        if self._line is None:
            self._line = orjson.dumps({"type": self.type, "object": self.object}) + b"\n"
        return self._line


def with_resource_version(obj: dict, rv: int) -> dict:
    """A shallow copy of ``obj`` whose metadata.resourceVersion is ``rv`` (shared sub-objects)."""
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta["resourceVersion"] = str(rv)
    out["metadata"] = meta
    return out


def deep_copy(obj: Any) -> Any:
    """A JSON-faithful deep copy (orjson round trip: faster than copy.deepcopy for JSON data)."""
    try:
        return orjson.loads(orjson.dumps(obj))
    except TypeError as exc:
        raise errors.bad_request(f"the object is not valid JSON data: {exc}") from exc


def uid_from_bytes(raw: bytes) -> str:
    """The RFC 4122 version-4 UUID text of 16 random bytes: what ``str(uuid.UUID(bytes=raw, version=4))``
    gives, built directly (the ``uuid.UUID`` object costs several times more, once per create)."""
    text = bytes((*raw[:6], (raw[6] & 0x0F) | 0x40, raw[7], (raw[8] & 0x3F) | 0x80, *raw[9:16])).hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def new_uid() -> str:
    """metadata.uid of a new object: a random (version 4) UUID, as the apiserver's uuid.NewUUID."""
    return uid_from_bytes(os.urandom(16))


def canonical(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


_last_second: list = [None, ""]  # [whole second, its text]: a burst stamps thousands of writes per second


def rfc3339(ts: float) -> str:
    """metav1.Time: RFC 3339, UTC, whole seconds (truncated toward the past, as gmtime does)."""
    second = math.floor(ts)
    if second != _last_second[0]:
        _last_second[:] = [second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))]
    return _last_second[1]


def parse_rv(text: str) -> int:
    """An RV query parameter: a non-negative decimal integer, else 400 like the real server."""
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {text!r}".replace("'", '"')) from None
    if value < 0:
        raise errors.bad_request(f'invalid resource version: "{text}"')
    return value


def rv_too_large(requested: int, current: int) -> ApiError:
    """The 504 of a read at a resourceVersion the store has not reached, with the real server's cause."""
    return ApiError(
        504,
        "Timeout",
        f"Timeout: Too large resource version: {requested}, current: {current}",
        {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        },
        retry_after=1,
    )
