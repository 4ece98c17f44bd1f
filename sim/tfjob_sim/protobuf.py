"""Decoding of Kubernetes protobuf request bodies for the few kinds kubectl sends that way.

Why: kubectl (1.33+) encodes the objects its ``create <generator>`` subcommands build (``create
configmap``, ``create secret``, ``create namespace``, ``create serviceaccount``, ``create role``...),
and those of ``auth can-i`` / ``auth whoami`` / ``create token``, as
``application/vnd.kubernetes.protobuf``. A real apiserver accepts that, so the simulator must too.
Only request bodies are decoded (responses are always JSON, which every such client also accepts).

Contract: :func:`decode` takes the raw body (``k8s\\x00`` magic + ``runtime.Unknown`` envelope) and
returns the object as the JSON dict the same request would have carried, or raises an
:class:`~tfjob_sim.errors.ApiError` (400 for a malformed body, 415 for a kind whose schema is
not modelled here). Field numbers follow the upstream ``generated.proto`` files; empty optional
scalars are dropped, as Go's ``omitempty`` JSON encoding would.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

from tfjob_sim import errors
from tfjob_sim.errors import ApiError
from tfjob_sim.store import rfc3339

MAGIC = b"k8s\x00"

# A schema maps field number -> (json name, kind, sub-schema, repeated). Kinds: "str", "bytes",
# "bool", "int", "time", "msg", "map_str", "map_bytes".
Schema = dict[int, tuple[str, str, Any, bool]]

_OWNER_REF: Schema = {
    1: ("kind", "str", None, False),
    3: ("name", "str", None, False),
    4: ("uid", "str", None, False),
    5: ("apiVersion", "str", None, False),
    6: ("controller", "bool", None, False),
    7: ("blockOwnerDeletion", "bool", None, False),
}
_OBJECT_META: Schema = {
    1: ("name", "str", None, False),
    2: ("generateName", "str", None, False),
    3: ("namespace", "str", None, False),
    5: ("uid", "str", None, False),
    6: ("resourceVersion", "str", None, False),
    7: ("generation", "int", None, False),
    8: ("creationTimestamp", "time", None, False),
    9: ("deletionTimestamp", "time", None, False),
    10: ("deletionGracePeriodSeconds", "int", None, False),
    11: ("labels", "map_str", None, False),
    12: ("annotations", "map_str", None, False),
    13: ("ownerReferences", "msg", _OWNER_REF, True),
    14: ("finalizers", "str", None, True),
}
_OBJECT_REF: Schema = {
    1: ("kind", "str", None, False),
    2: ("namespace", "str", None, False),
    3: ("name", "str", None, False),
    4: ("uid", "str", None, False),
    5: ("apiVersion", "str", None, False),
    6: ("resourceVersion", "str", None, False),
    7: ("fieldPath", "str", None, False),
}
_POLICY_RULE: Schema = {
    1: ("verbs", "str", None, True),
    2: ("apiGroups", "str", None, True),
    3: ("resources", "str", None, True),
    4: ("resourceNames", "str", None, True),
    5: ("nonResourceURLs", "str", None, True),
}
_SUBJECT: Schema = {
    1: ("kind", "str", None, False),
    2: ("apiGroup", "str", None, False),
    3: ("name", "str", None, False),
    4: ("namespace", "str", None, False),
}
_ROLE_REF: Schema = {
    1: ("apiGroup", "str", None, False),
    2: ("kind", "str", None, False),
    3: ("name", "str", None, False),
}
_META = ("metadata", "msg", _OBJECT_META, False)
# authorization.k8s.io/v1 and authentication.k8s.io/v1 (kubectl auth can-i / whoami, create token).
_RESOURCE_ATTRIBUTES: Schema = {
    1: ("namespace", "str", None, False),
    2: ("verb", "str", None, False),
    3: ("group", "str", None, False),
    4: ("version", "str", None, False),
    5: ("resource", "str", None, False),
    6: ("subresource", "str", None, False),
    7: ("name", "str", None, False),
}
_NON_RESOURCE_ATTRIBUTES: Schema = {1: ("path", "str", None, False), 2: ("verb", "str", None, False)}
_ACCESS_REVIEW_SPEC: Schema = {
    1: ("resourceAttributes", "msg", _RESOURCE_ATTRIBUTES, False),
    2: ("nonResourceAttributes", "msg", _NON_RESOURCE_ATTRIBUTES, False),
}
_BOUND_OBJECT_REF: Schema = {
    1: ("kind", "str", None, False),
    2: ("apiVersion", "str", None, False),
    3: ("name", "str", None, False),
    4: ("uid", "str", None, False),
}
_TOKEN_REQUEST_SPEC: Schema = {
    1: ("audiences", "str", None, True),
    3: ("boundObjectRef", "msg", _BOUND_OBJECT_REF, False),
    4: ("expirationSeconds", "int", None, False),
}

KINDS: dict[tuple[str, str], Schema] = {
    ("v1", "ConfigMap"): {
        1: _META,
        2: ("data", "map_str", None, False),
        3: ("binaryData", "map_bytes", None, False),
        4: ("immutable", "bool", None, False),
    },
    ("v1", "Secret"): {
        1: _META,
        2: ("data", "map_bytes", None, False),
        3: ("type", "str", None, False),
        4: ("stringData", "map_str", None, False),
        5: ("immutable", "bool", None, False),
    },
    ("v1", "Namespace"): {1: _META, 2: ("spec", "msg", {1: ("finalizers", "str", None, True)}, False)},
    ("v1", "ServiceAccount"): {
        1: _META,
        2: ("secrets", "msg", _OBJECT_REF, True),
        3: ("imagePullSecrets", "msg", {1: ("name", "str", None, False)}, True),
        4: ("automountServiceAccountToken", "bool", None, False),
    },
    ("rbac.authorization.k8s.io/v1", "Role"): {1: _META, 2: ("rules", "msg", _POLICY_RULE, True)},
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): {1: _META, 2: ("rules", "msg", _POLICY_RULE, True)},
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): {
        1: _META,
        2: ("subjects", "msg", _SUBJECT, True),
        3: ("roleRef", "msg", _ROLE_REF, False),
    },
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): {
        1: _META,
        2: ("subjects", "msg", _SUBJECT, True),
        3: ("roleRef", "msg", _ROLE_REF, False),
    },
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): {1: _META, 2: ("spec", "msg", _ACCESS_REVIEW_SPEC, False)},
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): {
        1: _META,
        2: ("spec", "msg", {1: ("namespace", "str", None, False)}, False),
    },
    ("authorization.k8s.io/v1", "SubjectAccessReview"): {
        1: _META,
        2: (
            "spec",
            "msg",
            {
                **_ACCESS_REVIEW_SPEC,
                3: ("user", "str", None, False),
                4: ("groups", "str", None, True),
                6: ("uid", "str", None, False),
            },
            False,
        ),
    },
    ("authentication.k8s.io/v1", "SelfSubjectReview"): {1: _META},
    ("authentication.k8s.io/v1", "TokenReview"): {
        1: _META,
        2: ("spec", "msg", {1: ("token", "str", None, False), 2: ("audiences", "str", None, True)}, False),
    },
    ("authentication.k8s.io/v1", "TokenRequest"): {1: _META, 2: ("spec", "msg", _TOKEN_REQUEST_SPEC, False)},
}


class _Malformed(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise _Malformed("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Malformed("varint too long")


def _fields(data: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) for each field; value is int or bytes by wire type (Any: the caller
    knows which from its schema)."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise _Malformed("truncated length-delimited field")
            value, pos = data[pos : pos + length], pos + length
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise _Malformed(f"unsupported wire type {wire}")
        yield number, wire, value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, _wire, value in _fields(data):
        spec = schema.get(number)
        if spec is None:
            continue  # a field this subset does not model (e.g. managedFields) is dropped
        name, kind, sub, repeated = spec
        if kind in ("map_str", "map_bytes"):
            entry = {n: v for n, _w, v in _fields(value)}
            key = entry.get(1, b"").decode()
            raw = entry.get(2, b"")
            out.setdefault(name, {})[key] = raw.decode() if kind == "map_str" else base64.b64encode(raw).decode()
            continue
        if kind == "str":
            decoded: Any = value.decode()
        elif kind == "bytes":
            decoded = base64.b64encode(value).decode()
        elif kind == "bool":
            decoded = bool(value)
        elif kind == "int":
            decoded = _signed(value)
        elif kind == "time":
            parts = {n: v for n, _w, v in _fields(value)}
            decoded = rfc3339(_signed(parts[1])) if parts.get(1) else None
        else:
            decoded = _message(value, sub)
        if repeated:
            out.setdefault(name, []).append(decoded)
        elif decoded not in ("", None, {}) and not (kind == "int" and decoded == 0 and name == "generation"):
            out[name] = decoded
    return out


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded request object (see the module contract)."""
    if not body.startswith(MAGIC):
        raise errors.bad_request("the object provided is unrecognized: protobuf body without the k8s magic prefix")
    try:
        envelope = {n: v for n, _w, v in _fields(body[len(MAGIC) :])}
        type_meta = {n: v.decode() for n, _w, v in _fields(envelope.get(1, b""))}
        api_version, kind = type_meta.get(1, ""), type_meta.get(2, "")
        schema = KINDS.get((api_version, kind))
        if schema is None:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the simulator does not decode protobuf bodies of {api_version}/{kind}; send "
                "application/json (supported protobuf kinds: " + ", ".join(sorted(k for _v, k in KINDS)) + ")",
            )
        obj = _message(envelope.get(2, b""), schema)
    except (_Malformed, UnicodeDecodeError, KeyError) as exc:
        raise errors.bad_request(f"the object provided is unrecognized: invalid protobuf body: {exc}") from None
    return {"apiVersion": api_version, "kind": kind, **obj}
