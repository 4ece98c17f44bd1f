"""PATCH engines of the simulated apiserver: JSON patch, JSON merge patch, strategic merge patch.

Why this exists: controllers and kubectl patch objects all the time (status conditions,
finalizers, labels, ``kubectl patch``/``edit``/``label``/``annotate``), and what a patch does to
an object — and which error comes back when it cannot apply — must match kube-apiserver, or a
controller that works against the simulator breaks against a real cluster.

What "match" means here, after reading the sources (apiserver ``endpoints/handlers/patch.go``,
``gopkg.in/evanphx/json-patch.v4``, apimachinery ``util/strategicpatch``):

* ``json_patch`` — RFC 6902 as evanphx/json-patch v4 implements it, quirks included: ``replace``
  of a missing object member adds it, negative array indices count from the end, ``test`` treats a
  missing member like ``null``, ``copy`` from a missing member inserts ``null``. A body that is not
  a list of objects is 400 (the decoder's message); more than 10,000 operations is 413; any
  operation that fails to apply is **422 Invalid with the fixed message** ``the server rejected
  our request due to an error in our request`` (the server discards the library's detail; ours
  is kept as the exception's ``__cause__`` for logs and tests).
* ``merge_patch`` — RFC 7386 as evanphx implements it: ``null`` deletes, objects merge, arrays
  are replaced (``null`` members inside newly added objects are pruned). A ``null`` or scalar
  body is 400 ``Invalid JSON Patch``; an array body replaces the document and then fails to
  decode as an object, which the server reports as 422.
* ``strategic_merge_patch`` — apimachinery's algorithm, driven by a data table of patch
  strategies and merge keys per kind (``_KIND_SCHEMAS``). Kinds not in the table are custom
  resources, for which the server offers no strategic merge: 415. Error codes follow
  ``interpretStrategicMergePatchError``: malformed directives 400, lists of lists and
  retainKeys mismatches 422, anything else 500 with the algorithm's message.

Contract: inputs are never mutated (callers pass stored objects and the decoded request body);
the returned document shares no mutable structure with either input (except ``merge_patch(...,
share=True)``'s, which keeps the document's untouched subtrees). No I/O, no asyncio.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from tfjob_sim.errors import ApiError, bad_request, unsupported_media_type
from tfjob_sim.gotext import go_quote, go_type

__all__ = [
    "MAX_JSON_PATCH_OPERATIONS",
    "STRATEGIC_MERGE_KINDS",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
]

MAX_JSON_PATCH_OPERATIONS: Final = 10_000

# The media types a custom resource accepts for PATCH (no strategic merge for CRs).
_CR_PATCH_MEDIA_TYPES: Final = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/apply-patch+yaml",
]


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _clone(value: Any) -> Any:
    """Deep copy of a JSON tree (dicts, lists, scalars); faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {key: _clone(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clone(item) for item in value]
    return value


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality without Python's cross-type equalities (True == 1, 1 == 1.0)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        if len(left) != len(right):
            return False
        for key, item in left.items():
            if key not in right or not _json_equal(item, right[key]):
                return False
        return True
    if isinstance(left, list):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)


def _json_type(value: Any) -> str:
    """The JSON type word encoding/json uses in ``cannot unmarshal <type>`` messages."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "null"


def _compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _rejected(_detail: str) -> ApiError:
    """422 as ``errors.NewGenericServerResponse(422, ...)`` builds it: the detail is dropped.

    Callers raise it ``from`` the failure, so the detail survives as ``__cause__`` for logs.
    """
    return ApiError(422, "Invalid", "the server rejected our request due to an error in our request")


def _too_large(message: str) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"Request entity too large: {message}")


def _server_error(message: str) -> ApiError:
    """A plain Go error reaching the handler: 500 with no reason (StatusReasonUnknown)."""
    return ApiError(500, "", message)


def _undecodable(document: Any) -> ApiError:
    """The patched document is not an object, so decoding it into the kind fails (422)."""
    detail = (
        "couldn't get version/kind; json parse error: json: cannot unmarshal "
        f"{_json_type(document)} into Go value of type struct {{ "
        'APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
    )
    cause_message = f"Invalid value: {go_quote(_compact_json(document))}: {detail}"
    return ApiError(
        422,
        "Invalid",
        f' "" is invalid: patch: {cause_message}',
        {"causes": [{"reason": "FieldValueInvalid", "message": cause_message, "field": "patch"}]},
    )


def _require_document(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise TypeError(f"the patched document must be a dict, not {type(doc).__name__}")
    return doc


# --------------------------------------------------------------------------------------------
# JSON patch (RFC 6902, evanphx/json-patch v4 semantics)
# --------------------------------------------------------------------------------------------

_POINTER_ESCAPE: Final = re.compile("~[01]")
_ATOI: Final = re.compile(r"[+-]?[0-9]+")


def _decode_pointer_token(token: str) -> str:
    return _POINTER_ESCAPE.sub(lambda match: "/" if match.group() == "~1" else "~", token)


def _atoi(text: str) -> int | None:
    """strconv.Atoi: optional sign and ASCII digits, nothing else."""
    return int(text) if _ATOI.fullmatch(text) else None


class _JsonPatchFailure(Exception):
    """An operation that does not apply; becomes the server's generic 422."""


_Container = dict[str, Any] | list[Any]


def _array_index(key: str, length: int) -> int:
    """The position ``key`` names in an array of ``length`` slots (negative counts from the end)."""
    index = _atoi(key)
    if index is None:
        raise _JsonPatchFailure(f"value was not a proper array index: '{key}'")
    if index >= length or index < -length:
        raise _JsonPatchFailure(f"Unable to access invalid index: {index}")
    return index + length if index < 0 else index


def _container_get(container: _Container, key: str) -> Any:
    """Value at ``key``; ``None`` for a missing object member (the library cannot tell them apart)."""
    if isinstance(container, dict):
        return container.get(key)
    return container[_array_index(key, len(container))]


def _container_set(container: _Container, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    container[_array_index(key, len(container))] = value


def _container_add(container: _Container, key: str, value: Any) -> None:
    if isinstance(container, dict):
        container[key] = value
        return
    if key == "-":
        container.append(value)
        return
    container.insert(_array_index(key, len(container) + 1), value)  # one more slot: the end itself


def _container_remove(container: _Container, key: str) -> None:
    if isinstance(container, dict):
        if key not in container:
            raise _JsonPatchFailure(f"Unable to remove nonexistent key: {key}")
        del container[key]
        return
    del container[_array_index(key, len(container))]


def _find_container(root: _Container, path: str) -> tuple[_Container, str] | None:
    """The container holding the last token of ``path`` and that token (library findObject).

    Like the library, the first segment is dropped whatever it is, so a path must start with "/"
    to mean what it says; intermediate members must exist and be objects or arrays.
    """
    segments = path.split("/")
    if len(segments) < 2:
        return None
    container: _Container = root
    for raw in segments[1:-1]:
        try:
            child = _container_get(container, _decode_pointer_token(raw))
        except _JsonPatchFailure:
            return None
        if not isinstance(child, (dict, list)):
            return None
        container = child
    return container, _decode_pointer_token(segments[-1])


_ABSENT: Final = object()


class _Operation:
    """One operation of the body. Members are read only when the operation needs them, as the
    library does, so a malformed member an operation never uses is no error."""

    __slots__ = ("_raw", "kind")

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        self._raw: Mapping[str, Any] = raw or {}
        op = self._raw.get("op")
        self.kind = op if isinstance(op, str) else "unknown"

    def _string_member(self, name: str) -> str:
        member = self._raw.get(name)
        if member is None:
            raise _JsonPatchFailure(f"{self.kind} operation failed to decode {name}: missing value")
        if not isinstance(member, str):
            raise _JsonPatchFailure(f"{self.kind} operation failed to decode {name}: not a string")
        return member

    def require_path(self) -> str:
        return self._string_member("path")

    def require_from(self) -> str:
        return self._string_member("from")

    @property
    def value(self) -> Any:
        """The ``value`` member: _ABSENT when missing, None for JSON null."""
        return self._raw.get("value", _ABSENT)

    def new_value(self) -> Any:
        value = self.value
        return None if value is _ABSENT else _clone(value)


def _locate(root: _Container, path: str, kind: str, what: str = "path") -> tuple[_Container, str]:
    found = _find_container(root, path)
    if found is None:
        raise _JsonPatchFailure(f'{kind} operation does not apply: doc is missing {what}: "{path}"')
    return found


def _apply_operation(root: _Container, operation: _Operation) -> _Container:
    """Apply one operation in place; returns the (possibly replaced) root."""
    kind = operation.kind
    if kind == "add":
        container, key = _locate(root, operation.require_path(), kind)
        _container_add(container, key, operation.new_value())
    elif kind == "remove":
        container, key = _locate(root, operation.require_path(), kind)
        _container_remove(container, key)
    elif kind == "replace":
        path = operation.require_path()
        if path == "":
            value = operation.new_value()
            if not isinstance(value, (dict, list)):
                raise _JsonPatchFailure("replace operation value must be object or array")
            return value
        container, key = _locate(root, path, kind)
        _container_get(container, key)  # arrays: the index must exist; objects: anything goes (v4)
        _container_set(container, key, operation.new_value())
    elif kind == "move":
        container, key = _locate(root, operation.require_from(), kind, "from path")
        value = _container_get(container, key)
        _container_remove(container, key)
        container, key = _locate(root, operation.require_path(), kind, "destination path")
        _container_add(container, key, value)
    elif kind == "copy":
        container, key = _locate(root, operation.require_from(), kind, "from path")
        value = _clone(_container_get(container, key))
        container, key = _locate(root, operation.require_path(), kind, "destination path")
        _container_add(container, key, value)
    elif kind == "test":
        path = operation.require_path()
        if path == "":
            actual: Any = root
        else:
            container, key = _locate(root, path, kind)
            actual = _container_get(container, key)
        expected = operation.value
        if actual is None:
            # A missing member and a null one look the same; both pass against null or no value.
            passed = expected is _ABSENT or expected is None
        else:
            passed = expected is not _ABSENT and _json_equal(actual, expected)
        if not passed:
            raise _JsonPatchFailure(f"testing value {path} failed: test failed")
    else:
        raise _JsonPatchFailure(f"Unexpected kind: {kind}")
    return root


def json_patch(doc: dict[str, Any], ops: Any) -> dict[str, Any]:
    """Apply an ``application/json-patch+json`` body (the decoded JSON) to ``doc``.

    Raises ApiError: 400 when the body is not a list of objects, 413 beyond 10,000 operations,
    422 Invalid (generic message) when an operation does not apply or the result is no object.
    """
    document = _require_document(doc)
    if ops is None:  # JSON null decodes to an empty patch
        return _clone(document)
    if not isinstance(ops, list):
        raise bad_request(f"json: cannot unmarshal {_json_type(ops)} into Go value of type jsonpatch.Patch")
    for raw in ops:
        if raw is not None and not isinstance(raw, dict):
            raise bad_request(f"json: cannot unmarshal {_json_type(raw)} into Go value of type jsonpatch.Operation")
    if len(ops) > MAX_JSON_PATCH_OPERATIONS:
        raise _too_large(
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {len(ops)}"
        )
    root: _Container = _clone(document)
    try:
        for raw in ops:
            root = _apply_operation(root, _Operation(raw))
    except _JsonPatchFailure as failure:
        raise _rejected(str(failure)) from failure
    if not isinstance(root, dict):
        raise _undecodable(root)
    return root


# --------------------------------------------------------------------------------------------
# JSON merge patch (RFC 7386, evanphx/json-patch v4 semantics)
# --------------------------------------------------------------------------------------------


def _prune_nulls(value: Any) -> Any:
    """Drop null object members recursively; nulls inside arrays stay (library pruneNulls)."""
    if isinstance(value, dict):
        return {key: _prune_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [item if item is None else _prune_nulls(item) for item in value]
    return value


def _merge_documents(target: dict[str, Any], patch: Mapping[str, Any], share: bool = False) -> None:
    # ``share``: ``target``'s maps are the input document's; each map on a patched path is copied
    # before it changes, every other subtree stays the input's.
    for key, patch_value in patch.items():
        if patch_value is None:
            target.pop(key, None)
            continue
        current = target.get(key)
        if current is None or not isinstance(current, dict):
            target[key] = _prune_nulls(patch_value)
        elif not isinstance(patch_value, dict):
            target[key] = _clone(patch_value)
        else:
            if share:
                target[key] = current = dict(current)
            _merge_documents(current, patch_value, share)


def merge_patch(doc: dict[str, Any], patch: Any, *, share: bool = False) -> dict[str, Any]:
    """Apply an ``application/merge-patch+json`` body (the decoded JSON) to ``doc``.

    ``share``: the result keeps every subtree of ``doc`` the patch leaves alone (only the maps on
    patched paths are new), for a caller that never writes into those; copying a whole pod to
    change its status was ~4 % of the simulator's CPU in a burst of pod starts.

    Raises ApiError 400 ``Invalid JSON Patch`` for a null or scalar body, 422 for an array body
    (it replaces the document, which then is no object).
    """
    document = _require_document(doc)
    if isinstance(patch, list):
        raise _undecodable(_prune_nulls(patch))
    if not isinstance(patch, dict):
        raise bad_request("Invalid JSON Patch")
    result = dict(document) if share else _clone(document)
    _merge_documents(result, patch, share)
    return result


# --------------------------------------------------------------------------------------------
# Strategic merge patch (apimachinery util/strategicpatch)
# --------------------------------------------------------------------------------------------

_DIRECTIVE: Final = "$patch"
_RETAIN_KEYS: Final = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST: Final = "$deleteFromPrimitiveList"
_SET_ELEMENT_ORDER: Final = "$setElementOrder"

_MERGE: Final = "merge"
_REPLACE: Final = "replace"
_DELETE: Final = "delete"


class _SmpBadRequest(Exception):
    """mergepatch sentinel errors the server maps to 400."""


class _SmpUnprocessable(Exception):
    """mergepatch sentinel errors the server maps to its generic 422."""


class _SmpServerError(Exception):
    """Every other algorithm error: the server answers 500 with the message."""


_BAD_PRIMITIVE_LIST: Final = "invalid patch format of primitive list"
_BAD_RETAIN_KEYS: Final = "invalid patch format of retainKeys"
_BAD_SET_ELEMENT_ORDER: Final = "invalid patch format of setElementOrder list"
_NO_LIST_OF_LISTS: Final = "lists of lists are not supported"


@dataclass(frozen=True, slots=True)
class _Schema:
    """Patch metadata of one struct type: json field name -> how a patch merges that field.

    Fields absent from ``fields`` (and everything below them) merge generically: objects merge
    recursively, lists are replaced. ``element`` names the Go element kind of a list type for
    the one error message that shows it.
    """

    fields: Mapping[str, _Field] = field(default_factory=dict)
    element: str = "struct"

    def lookup(self, name: str) -> _Field:
        return self.fields.get(name, _GENERIC_FIELD)


@dataclass(frozen=True, slots=True)
class _Field:
    """``patchStrategy``/``patchMergeKey`` of a field, and the schema of its value or items.

    ``strategy`` is the non-retainKeys strategy (``merge``, ``replace`` or ``""``); retainKeys
    only shapes how clients build patches, the server applies ``$retainKeys`` wherever it is.
    """

    strategy: str = ""
    merge_key: str = ""
    schema: _Schema | None = None

    @property
    def sub_schema(self) -> _Schema:
        return self.schema if self.schema is not None else _GENERIC_SCHEMA


_GENERIC_SCHEMA: Final = _Schema()
_GENERIC_FIELD: Final = _Field()


def _merge_list(key: str, item_schema: _Schema | None = None) -> _Field:
    return _Field(_MERGE, key, item_schema)


def _primitive_set() -> _Field:
    return _Field(_MERGE, "", _Schema(element="string"))


# The table. Tags come from k8s.io/api (core/v1, apps/v1, batch/v1, policy/v1) and
# apimachinery meta/v1; only fields with a strategy are listed, plus the structs leading to them.
_OBJECT_META: Final = _Schema({"finalizers": _primitive_set(), "ownerReferences": _merge_list("uid")})
_CONTAINER: Final = _Schema(
    {
        "ports": _merge_list("containerPort"),
        "env": _merge_list("name"),
        "volumeMounts": _merge_list("mountPath"),
        "volumeDevices": _merge_list("devicePath"),
    }
)
_POD_SPEC: Final = _Schema(
    {
        "volumes": _merge_list("name"),  # merge,retainKeys
        "initContainers": _merge_list("name", _CONTAINER),
        "containers": _merge_list("name", _CONTAINER),
        "ephemeralContainers": _merge_list("name", _CONTAINER),
        "imagePullSecrets": _merge_list("name"),
        "hostAliases": _merge_list("ip"),
        "topologySpreadConstraints": _merge_list("topologyKey"),
        "schedulingGates": _merge_list("name"),
        "resourceClaims": _merge_list("name"),  # merge,retainKeys
        # tolerations, readinessGates, ...: no strategy, replaced wholesale.
    }
)
_POD_STATUS: Final = _Schema(
    {
        "conditions": _merge_list("type"),
        "podIPs": _merge_list("ip"),
        "hostIPs": _merge_list("ip"),
        "resourceClaimStatuses": _merge_list("name"),  # merge,retainKeys
    }
)
_POD_TEMPLATE_SPEC: Final = _Schema({"metadata": _Field(schema=_OBJECT_META), "spec": _Field(schema=_POD_SPEC)})
_CONDITIONS_STATUS: Final = _Schema({"conditions": _merge_list("type")})
# Job, ReplicaSet, Deployment, ... specs: what matters is the embedded pod template.
_TEMPLATED_SPEC: Final = _Schema({"template": _Field(schema=_POD_TEMPLATE_SPEC)})


def _kind(**fields: _Field) -> _Schema:
    return _Schema({"metadata": _Field(schema=_OBJECT_META), **fields})


def _with_template() -> _Schema:
    """A workload kind whose spec embeds a pod template, with conditions in its status."""
    return _kind(spec=_Field(schema=_TEMPLATED_SPEC), status=_Field(schema=_CONDITIONS_STATUS))


_PLAIN: Final = _kind()

_KIND_SCHEMAS: Final[Mapping[str, _Schema]] = {
    "Pod": _kind(spec=_Field(schema=_POD_SPEC), status=_Field(schema=_POD_STATUS)),
    "PodTemplate": _kind(template=_Field(schema=_POD_TEMPLATE_SPEC)),
    "Node": _kind(
        spec=_Field(schema=_Schema({"podCIDRs": _primitive_set()})),
        status=_Field(schema=_Schema({"conditions": _merge_list("type"), "addresses": _merge_list("type")})),
    ),
    "Service": _kind(
        spec=_Field(schema=_Schema({"ports": _merge_list("port")})),
        status=_Field(schema=_CONDITIONS_STATUS),
    ),
    "Namespace": _kind(status=_Field(schema=_CONDITIONS_STATUS)),
    "ServiceAccount": _kind(secrets=_merge_list("name")),
    "PersistentVolumeClaim": _kind(status=_Field(schema=_CONDITIONS_STATUS)),
    "ReplicationController": _with_template(),
    "Job": _with_template(),
    "CronJob": _kind(
        spec=_Field(schema=_Schema({"jobTemplate": _Field(schema=_Schema({"spec": _Field(schema=_TEMPLATED_SPEC)}))}))
    ),
    "Deployment": _with_template(),
    "ReplicaSet": _with_template(),
    "StatefulSet": _with_template(),
    "DaemonSet": _with_template(),
    "PodDisruptionBudget": _kind(
        spec=_Field(schema=_Schema({"selector": _Field(strategy=_REPLACE)})),
        status=_Field(schema=_CONDITIONS_STATUS),
    ),
    # Built-in kinds without strategic fields beyond metadata still accept strategic merge.
    **{
        kind: _PLAIN
        for kind in (
            "ConfigMap",
            "Secret",
            "Event",
            "Endpoints",
            "LimitRange",
            "ResourceQuota",
            "PersistentVolume",
            "Lease",
            "EndpointSlice",
            "PriorityClass",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "HorizontalPodAutoscaler",
            "CustomResourceDefinition",  # served from Go types, so strategic merge works on it
            "Scale",  # autoscaling/v1 Scale of the /scale subresource
        )
    },
}

STRATEGIC_MERGE_KINDS: Final[frozenset[str]] = frozenset(_KIND_SCHEMAS)


def _go_fmt(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value, as the algorithm's error messages print it."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "map[" + " ".join(f"{key}:{_go_fmt(value[key])}" for key in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_fmt(item) for item in value) + "]"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    return str(value)


def _go_type_name(value: Any) -> str:
    """``reflect.TypeOf(v)`` printed with %s, for ErrBadArgType messages (a nil interface has no type)."""
    return "%!s(<nil>)" if value is None else go_type(value)


def _bad_arg_type(expected: str, actual: Any) -> _SmpServerError:
    return _SmpServerError(f"expected a {expected}, but received a {_go_type_name(actual)}")


def _no_merge_key(item: Mapping[str, Any], merge_key: str) -> _SmpServerError:
    return _SmpServerError(f"map: {_go_fmt(item)} does not contain declared merge key: {merge_key}")


def _scalar_key(value: Any) -> tuple[type, Any]:
    # Go compares interface values by dynamic type and value (int64 1 != float64 1); so does this.
    return (type(value), value)


def _map_directive(directive: Any, patch: dict[str, Any]) -> dict[str, Any]:
    if directive == _REPLACE and isinstance(directive, str):
        del patch[_DIRECTIVE]
        return patch
    if directive == _DELETE and isinstance(directive, str):
        return {}
    raise _SmpServerError(f"unknown patch type: {_go_fmt(directive)} in map: {_go_fmt(patch)}")


def _extract_key(key: str, prefix: str, error: str) -> str:
    head, slash, rest = key.partition("/")
    if not slash or head != prefix:
        raise _SmpBadRequest(error)
    return rest


def _discard_nulls(value: Any) -> None:
    if isinstance(value, dict):
        for key in [key for key, item in value.items() if item is None]:
            del value[key]
        for item in value.values():
            _discard_nulls(item)
    elif isinstance(value, list):
        for item in value:
            _discard_nulls(item)


def _remove_directives(value: Any) -> tuple[Any, bool]:
    """Strip ``$patch`` maps from a value that has nothing to merge with; (value, keep it?)."""
    if isinstance(value, dict):
        if _DIRECTIVE in value:
            return None, False
        for key in list(value):
            cleaned, keep = _remove_directives(value[key])
            if keep:
                value[key] = cleaned
            else:
                del value[key]
        return value, True
    if isinstance(value, list):
        kept = []
        for item in value:
            cleaned, keep = _remove_directives(item)
            if keep:
                kept.append(cleaned)
        return kept, True
    return value, True


def _slice_element_type(*lists: list[Any]) -> type:
    element: type | None = None
    for items in lists:
        for item in items:
            kind = type(item)
            if element is None:
                element = kind
                if kind is list:
                    raise _SmpUnprocessable(_NO_LIST_OF_LISTS)
            elif element is not kind:
                raise _SmpServerError(f"list element types are not identical: {_go_fmt(list(lists))}")
    if element is None:
        raise _SmpServerError("no elements in any of the given slices")
    return element


def _find_by_merge_key(items: list[Any], merge_key: str, value: Any) -> int:
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise _SmpServerError(f"value for key {index} is not a map")
        if merge_key in item and _json_equal(item[merge_key], value):
            return index
    return -1


def _order_position(order: list[Any], item: Any, merge_key: str, maps: bool) -> int:
    """Index of ``item`` in ``order`` by merge key (maps) or by value (primitives); -1 if absent."""
    if maps:
        wanted = item.get(merge_key) if isinstance(item, dict) else None
        for index, candidate in enumerate(order):
            if _json_equal(candidate.get(merge_key) if isinstance(candidate, dict) else None, wanted):
                return index
        return -1
    for index, candidate in enumerate(order):
        if _json_equal(candidate, item):
            return index
    return -1


def _sort_by_order(items: list[Any], order: list[Any], merge_key: str, maps: bool) -> list[Any]:
    """Stable sort of ``items`` by their position in ``order`` (normalizeSliceOrder)."""
    if maps:
        for group in (items, order):
            for item in group:
                if not isinstance(item, dict):
                    raise _bad_arg_type("map[string]interface {}", item)
                if merge_key not in item:
                    raise _no_merge_key(item, merge_key)
        deleted = [item for item in items if item.get(_DIRECTIVE) == _DELETE]
        items = [item for item in items if item.get(_DIRECTIVE) != _DELETE]
    else:
        deleted = []
    positions = [_order_position(order, item, merge_key, maps) for item in items]
    if all(position >= 0 for position in positions):
        ranked = sorted(range(len(items)), key=positions.__getitem__)
        return [items[index] for index in ranked] + deleted
    # Items missing from the order: reproduce Go's insertion sort with its "less is true when
    # either is unknown" comparator, which moves unknown items forward.
    ordered = list(zip(positions, items, strict=True))
    for start in range(1, len(ordered)):
        index = start
        while index > 0:
            right, left = ordered[index][0], ordered[index - 1][0]
            if right >= 0 and left >= 0 and not right < left:
                break
            ordered[index], ordered[index - 1] = ordered[index - 1], ordered[index]
            index -= 1
    return [item for _, item in ordered] + deleted


def _interleave(
    server_only: list[Any], patch_items: list[Any], server_order: list[Any], merge_key: str, maps: bool
) -> list[Any]:
    """mergeSortedSlice: keep both relative orders, server items first where the live order says so."""
    merged: list[Any] = []
    left = right = 0
    while left < len(server_only) or right < len(patch_items):
        if left >= len(server_only):
            merged.append(patch_items[right])
            right += 1
        elif right >= len(patch_items):
            merged.append(server_only[left])
            left += 1
        else:
            left_position = _order_position(server_order, server_only[left], merge_key, maps)
            right_position = _order_position(server_order, patch_items[right], merge_key, maps)
            if 0 <= left_position < right_position:
                merged.append(server_only[left])
                left += 1
            else:
                merged.append(patch_items[right])
                right += 1
    return merged


def _normalize_order(
    patch_items: list[Any],
    server_only: list[Any],
    patch_order: list[Any],
    server_order: list[Any],
    merge_key: str,
    maps: bool,
) -> list[Any]:
    patch_items = _sort_by_order(patch_items, patch_order, merge_key, maps)
    server_only = _sort_by_order(server_only, server_order, merge_key, maps)
    return _interleave(server_only, patch_items, server_order, merge_key, maps)


def _partition(merged: list[Any], partition_by: list[Any], merge_key: str) -> tuple[list[Any], list[Any]]:
    """Split ``merged`` into items present in ``partition_by`` and the rest (server-only)."""
    in_patch: list[Any] = []
    server_only: list[Any] = []
    if not merge_key:
        wanted = {_scalar_key(item) for item in partition_by if not isinstance(item, (dict, list))}
        for item in merged:
            (in_patch if _scalar_key(item) in wanted else server_only).append(item)
        return in_patch, server_only
    for item in merged:
        if not isinstance(item, dict):
            raise _bad_arg_type("map[string]interface {}", item)
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        found = _find_by_merge_key(partition_by, merge_key, item[merge_key]) >= 0
        (in_patch if found else server_only).append(item)
    return in_patch, server_only


def _dedupe_scalars(items: Iterable[Any]) -> list[Any]:
    seen: set[tuple[type, Any]] = set()
    unique = []
    for item in items:
        key = _scalar_key(item)
        if key not in seen:
            seen.add(key)
            unique.append(item)
    return unique


def _merge_list_of_maps(
    original: list[Any], patch: list[Any], merge_key: str, item_schema: _Schema
) -> tuple[list[Any], list[Any], list[Any]]:
    """Apply ``$patch`` items, then merge the rest by key. Returns (merged, patch, original)."""
    plain: list[Any] = []
    replace = False
    for item in patch:
        if _DIRECTIVE not in item:
            plain.append(item)
            continue
        directive = item[_DIRECTIVE]
        if directive == _DELETE and isinstance(directive, str):
            if merge_key not in item:
                raise _no_merge_key(item, merge_key)
            doomed = item[merge_key]
            # Every element is a map here (the element type was checked), so no type errors.
            original = [
                entry for entry in original if not (merge_key in entry and _json_equal(entry[merge_key], doomed))
            ]
        elif directive == _REPLACE and isinstance(directive, str):
            replace = True  # keep scanning: the other directives are still pruned
        elif directive == _MERGE and isinstance(directive, str):
            raise _SmpServerError("merging lists cannot yet be specified in the patch")
        else:
            raise _SmpServerError(f"unknown patch type: {_go_fmt(directive)} in map: {_go_fmt(item)}")
    if replace:
        original, plain = plain, []
    merged = list(original)
    for item in plain:
        if merge_key not in item:
            raise _no_merge_key(item, merge_key)
        index = _find_by_merge_key(merged, merge_key, item[merge_key])
        if index >= 0:
            merged[index] = _merge_map(merged[index], item, item_schema)
        else:
            merged.append(item)
    return merged, plain, original


def _merge_slice(original: list[Any], patch: list[Any], meta: _Field, delete_list: bool) -> list[Any]:
    if not original and not patch:
        return original
    element = _slice_element_type(original, patch)
    merge_key = meta.merge_key
    if element is not dict:
        if delete_list:
            doomed = {_scalar_key(item) for item in patch}
            return [item for item in original if _scalar_key(item) not in doomed]
        merged = _dedupe_scalars([*original, *patch])
    else:
        if not merge_key:
            raise _SmpServerError(f"cannot merge lists without merge key for {meta.sub_schema.element}")
        merged, patch, original = _merge_list_of_maps(original, patch, merge_key, meta.sub_schema)
    patch_items, server_only = _partition(merged, patch, merge_key)
    return _normalize_order(patch_items, server_only, patch, original, merge_key, element is dict)


def _merge_slice_field(original: Any, patch: Any, meta: _Field, delete_list: bool) -> list[Any]:
    if not isinstance(original, list):
        raise _bad_arg_type("[]interface {}", original)
    if not isinstance(patch, list):
        raise _bad_arg_type("[]interface {}", patch)
    if meta.strategy == _MERGE or delete_list:
        return _merge_slice(original, patch, meta, delete_list)
    return patch


def _apply_retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
    if _RETAIN_KEYS not in patch:
        return
    retained = patch.pop(_RETAIN_KEYS)
    if not isinstance(retained, list):
        raise _SmpBadRequest(_BAD_RETAIN_KEYS)
    allowed = {item for item in retained if isinstance(item, str)}
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER)):
            continue
        if key not in allowed:
            raise _SmpBadRequest(_BAD_RETAIN_KEYS)
    for key in [key for key in original if key not in allowed]:
        del original[key]


def _validate_against_order(patch_list: list[Any], order: list[Any], merge_key: str) -> None:
    """The patch list must follow the relative order of its ``$setElementOrder`` list."""
    if not order or not patch_list:
        return
    if merge_key:
        for item in patch_list:
            if not isinstance(item, dict):
                raise _bad_arg_type("map[string]interface {}", item)
        candidates = [item for item in patch_list if item.get(_DIRECTIVE) != _DELETE]
    else:
        candidates = patch_list
    position = order_position = 0
    while position < len(candidates) and order_position < len(order):
        item = candidates[position]
        if isinstance(item, dict) and _DIRECTIVE in item:
            position += 1
            continue
        if _merge_key_equal(item, order[order_position], merge_key):
            position += 1
        order_position += 1
    if position < len(candidates) and order_position >= len(order):
        raise _SmpServerError(
            f"The order in patch list:\n{_go_fmt(patch_list)}\n doesn't match {_SET_ELEMENT_ORDER} list:\n"
            f"{_go_fmt(order)}\n"
        )


def _merge_key_equal(left: Any, right: Any, merge_key: str) -> bool:
    if not merge_key:
        return _json_equal(left, right)
    for side in (left, right):
        if not isinstance(side, dict):
            raise _bad_arg_type("map[string]interface {}", side)
        if merge_key not in side:
            raise _no_merge_key(side, merge_key)
    return _json_equal(left[merge_key], right[merge_key])


def _apply_set_element_order(original: dict[str, Any], patch: dict[str, Any], schema: _Schema) -> None:
    """Merge every list that comes with a ``$setElementOrder/<field>`` and impose that order."""
    for directive_key in [key for key in patch if key.startswith(_SET_ELEMENT_ORDER)]:
        order = patch.pop(directive_key)
        if not isinstance(order, list):
            raise _bad_arg_type("[]interface {}", order)
        name = _extract_key(directive_key, _SET_ELEMENT_ORDER, _BAD_SET_ELEMENT_ORDER)
        in_original = name in original
        in_patch = name in patch
        original_list: list[Any] = []
        patch_list: list[Any] = []
        if in_original:
            if not isinstance(original[name], list):
                raise _bad_arg_type("[]interface {}", original[name])
            original_list = original[name]
        if in_patch:
            if not isinstance(patch[name], list):
                raise _bad_arg_type("[]interface {}", patch[name])
            patch_list = patch[name]
        meta = schema.lookup(name)
        _validate_against_order(patch_list, order, meta.merge_key)
        if in_original and not in_patch:
            merged = original_list
        elif in_patch and not in_original:
            merged = _remove_directives(patch_list)[0]
        elif in_original and in_patch:
            merged = _merge_slice_field(original_list, patch_list, meta, False)
        else:
            continue
        patch_items, server_only = _partition(merged, order, meta.merge_key)
        element = _slice_element_type(original_list, patch_list)
        original[name] = _normalize_order(
            patch_items, server_only, order, original_list, meta.merge_key, element is dict
        )
        patch.pop(name, None)


def _set_or_drop(original: dict[str, Any], key: str, value: Any) -> None:
    _discard_nulls(value)
    cleaned, keep = _remove_directives(value)
    if keep:
        original[key] = cleaned
    else:
        original.pop(key, None)


def _merge_map(original: dict[str, Any] | None, patch: dict[str, Any], schema: _Schema) -> dict[str, Any]:
    """mergeMap with the server's options (parallel lists merged, unmatched nulls ignored).

    Works in place on ``original`` and ``patch``, which the caller owns (both are clones).
    """
    if _DIRECTIVE in patch:
        return _map_directive(patch[_DIRECTIVE], patch)
    if original is None:
        original = {}
    _apply_retain_keys(original, patch)
    _apply_set_element_order(original, patch, schema)
    for raw_key, patch_value in list(patch.items()):
        key = raw_key
        delete_list = False
        if raw_key.startswith(_DELETE_FROM_PRIMITIVE_LIST):
            key = _extract_key(raw_key, _DELETE_FROM_PRIMITIVE_LIST, _BAD_PRIMITIVE_LIST)
            delete_list = True
        if patch_value is None:
            original.pop(key, None)
            continue
        if key not in original:
            if not delete_list:
                _set_or_drop(original, key, patch_value)
            continue
        current = original[key]
        if type(current) is not type(patch_value):
            if not delete_list:
                _set_or_drop(original, key, patch_value)
            continue
        if isinstance(current, dict):
            meta = schema.lookup(key)
            if meta.strategy == _REPLACE:
                original[key] = patch_value
            else:
                original[key] = _merge_map(current, patch_value, meta.sub_schema)
        elif isinstance(current, list):
            original[key] = _merge_slice_field(current, patch_value, schema.lookup(key), delete_list)
        else:
            _set_or_drop(original, key, patch_value)
    return original


def _is_directive_key(key: str) -> bool:
    return key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(
        (_SET_ELEMENT_ORDER + "/", _DELETE_FROM_PRIMITIVE_LIST + "/")
    )


def _drop_directive_keys(value: Any) -> None:
    """Remove directive keys the algorithm leaves in raw patch values.

    The real server decodes the result into the Go type, which silently drops such unknown
    keys; without this they would be stored. No built-in field name starts with "$".
    """
    if isinstance(value, dict):
        for key in [key for key in value if key.startswith("$") and _is_directive_key(key)]:
            del value[key]
        for item in value.values():
            _drop_directive_keys(item)
    elif isinstance(value, list):
        for item in value:
            _drop_directive_keys(item)


_ERROR_MAPPERS: Final[tuple[tuple[type[Exception], Callable[[str], ApiError]], ...]] = (
    (_SmpBadRequest, bad_request),
    (_SmpUnprocessable, _rejected),
    (_SmpServerError, _server_error),
)


def strategic_merge_patch(doc: dict[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    """Apply an ``application/strategic-merge-patch+json`` body (decoded JSON) to a ``kind`` object.

    Raises ApiError 415 for kinds without strategic merge (custom resources), 400 for a body
    that is not an object or a malformed directive, 422/500 as described in the module docstring.
    """
    document = _require_document(doc)
    schema = _KIND_SCHEMAS.get(kind)
    if schema is None:
        raise unsupported_media_type(_CR_PATCH_MEDIA_TYPES)
    if patch is None:  # JSON null decodes to an empty patch map
        return _clone(document)
    if not isinstance(patch, dict):
        raise bad_request(f"json: cannot unmarshal {_json_type(patch)} into Go value of type map[string]interface {{}}")
    try:
        result = _merge_map(_clone(document), _clone(patch), schema)
    except (_SmpBadRequest, _SmpUnprocessable, _SmpServerError) as failure:
        for error_type, build in _ERROR_MAPPERS:
            if isinstance(failure, error_type):
                raise build(str(failure)) from failure
        raise
    _drop_directive_keys(result)
    return result
