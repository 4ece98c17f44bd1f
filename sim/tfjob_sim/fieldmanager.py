"""Field ownership: ``metadata.managedFields``, kept the way kube-apiserver's field manager keeps it.

Why this module exists: every object a real apiserver returns carries managedFields, one entry per
(manager, operation, subresource) with the set of fields that manager last set. ``kubectl`` shows them
(``--show-managed-fields``); server-side apply needs them to detect conflicts between managers and to
remove the fields a manager stopped applying; and they are a large share of every object on the wire,
so a client's decoding cost is only realistic when they are there. The simulator omitting them was a
difference any client could see.

Semantics reproduced (structured-merge-diff, as the apiserver runs it):

- **Update** (create, PUT, JSON/merge/strategic PATCH): the writer gains every field it added or
  changed; every other entry loses those fields (updates never conflict); fields that disappeared are
  removed from every entry; entries left empty are dropped. A node that did not exist before (a new
  map, a new list item) is itself a member, shown as ``".": {}``. On create the "before" object is the
  type's zero value: for a built-in its non-pointer structs (``spec``, ``status``) already exist, for
  a custom resource nothing does (hence ``f:spec: {".": {}}`` on CRs only, as on a real cluster).
- **Apply** (server-side apply): the applier's entry becomes exactly the applied configuration's field
  set. A field the apply would change that another entry owns is a conflict: 409 with
  ``FieldManagerConflict`` causes, unless ``force`` (then the other entries lose it). Fields the
  applier owned before, no longer applies, and nobody else owns are removed from the object.
- Never owned: ``apiVersion``, ``kind``, ``metadata`` itself and its server-set fields (name,
  namespace, uid, resourceVersion, generation, creationTimestamp, selfLink, managedFields).
- Field paths follow the schema: ``f:<field>``; items of associative lists ``k:{"name":"x"}`` (the
  list-map keys, JSON with sorted keys); items of sets ``v:"value"``; atomic lists and maps are one
  field. Built-in kinds use the list types of k8s.io/api (below); custom resources use their CRD
  schema (``x-kubernetes-list-type``, ``x-kubernetes-list-map-keys``, ``x-kubernetes-map-type``);
  ``metadata`` always follows ObjectMeta. A list whose items lack their keys (or repeat them) is
  treated as atomic rather than failing the write.
- An Update entry per (manager, subresource, API version); one Apply entry per (manager, subresource).
- At most 10 Update entries are kept; the oldest are merged into ``ancient-changes`` (per version).
- Entries are ordered Apply before Update, then by time, manager, API version and subresource.

A field set is kept in its wire form (FieldsV1) throughout: nested dicts keyed by path element, a
node is a member when it is ``{}`` or holds ``"."``. Stored entries are shared with the stored objects,
so every edit works on a copy (:func:`_wire_copy`) of the entries it touches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "ANCIENT_CHANGES",
    "BEFORE_FIRST_APPLY",
    "Entry",
    "FieldConflict",
    "MAX_UPDATE_MANAGERS",
    "apply_ownership",
    "decode_entries",
    "encode_entries",
    "field_path_string",
    "is_reset",
    "manager_from_user_agent",
    "root_schema",
    "update_ownership",
    "validate_entries",
]

MAX_UPDATE_MANAGERS = 10
ANCIENT_CHANGES = "ancient-changes"
BEFORE_FIRST_APPLY = "before-first-apply"

Path = tuple[str, ...]
FieldSet = dict[str, Any]  # a FieldsV1 object

_MEMBER = "."
_STRIPPED_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "selfLink",
        "managedFields",
        "clusterName",
    }
)
_STRIPPED_TOP = frozenset({"apiVersion", "kind"})


# -- schemas of the built-in kinds ---------------------------------------------------------------------
# OpenAPI-shaped dicts, the same shape a CRD schema has, so one walker serves both. Only what decides
# ownership granularity is listed: associative lists and their keys, sets, atomic maps. Lists not listed
# are atomic (k8s.io/api's default), maps not listed are granular.


def _map_list(*keys: str, items: dict | None = None) -> dict:
    return {
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": list(keys),
        "items": items or {},
    }


# Port lists are keyed by (port, protocol) and protocol defaults to TCP: an applied configuration that
# leaves it out still names the item k:{"port":80,"protocol":"TCP"}, as the apiserver fills key defaults.
_PROTOCOL_DEFAULT: dict = {"properties": {"protocol": {"default": "TCP"}}}


_SET: dict = {"type": "array", "x-kubernetes-list-type": "set"}
_ATOMIC_MAP: dict = {"type": "object", "x-kubernetes-map-type": "atomic"}

OBJECT_META: dict = {"properties": {"finalizers": _SET, "ownerReferences": _map_list("uid", items=_ATOMIC_MAP)}}
_CONTAINER: dict = {
    "properties": {
        "ports": _map_list("containerPort", "protocol", items=_PROTOCOL_DEFAULT),
        "env": _map_list("name"),
        "volumeMounts": _map_list("mountPath"),
        "volumeDevices": _map_list("devicePath"),
    }
}
_POD_SPEC: dict = {
    "properties": {
        "containers": _map_list("name", items=_CONTAINER),
        "initContainers": _map_list("name", items=_CONTAINER),
        "ephemeralContainers": _map_list("name", items=_CONTAINER),
        "volumes": _map_list("name"),
        "imagePullSecrets": _map_list("name"),
        "hostAliases": _map_list("ip"),
        "topologySpreadConstraints": _map_list("topologyKey", "whenUnsatisfiable"),
        "schedulingGates": _map_list("name"),
        "resourceClaims": _map_list("name"),
        "nodeSelector": _ATOMIC_MAP,
    }
}
_CONDITIONS: dict = {"properties": {"conditions": _map_list("type")}}
_POD_STATUS: dict = {
    "properties": {
        "conditions": _map_list("type"),
        "podIPs": _map_list("ip"),
        "hostIPs": _map_list("ip"),
        "resourceClaimStatuses": _map_list("name"),
    }
}
_OBJECT_REFERENCE = _ATOMIC_MAP  # ObjectReference is a structType=atomic
# apps/v1 Deployment and ReplicaSet: the selector is atomic, the template a pod's metadata and spec.
_WORKLOAD: dict = {
    "properties": {
        "spec": {
            "properties": {
                "selector": _ATOMIC_MAP,
                "template": {"properties": {"metadata": OBJECT_META, "spec": _POD_SPEC}},
            }
        },
        "status": _CONDITIONS,
    }
}
_BUILTIN_SCHEMAS: dict[str, dict] = {
    "Pod": {"properties": {"spec": _POD_SPEC, "status": _POD_STATUS}},
    "Service": {
        "properties": {
            "spec": {
                "properties": {"ports": _map_list("port", "protocol", items=_PROTOCOL_DEFAULT), "selector": _ATOMIC_MAP}
            },
            "status": _CONDITIONS,
        }
    },
    "Node": {
        "properties": {
            "spec": {"properties": {"podCIDRs": _SET}},
            "status": {"properties": {"conditions": _map_list("type"), "addresses": _map_list("type")}},
        }
    },
    "Namespace": {"properties": {"status": _CONDITIONS}},
    # RoleRef is a structType=atomic.
    "RoleBinding": {"properties": {"roleRef": _ATOMIC_MAP}},
    "ClusterRoleBinding": {"properties": {"roleRef": _ATOMIC_MAP}},
    "PodDisruptionBudget": {"properties": {"spec": {"properties": {"selector": _ATOMIC_MAP}}, "status": _CONDITIONS}},
    "Deployment": _WORKLOAD,
    "ReplicaSet": _WORKLOAD,
    # core/v1 and events.k8s.io/v1 Events share the kind: both sets of reference fields are atomic.
    "Event": {
        "properties": {
            "involvedObject": _OBJECT_REFERENCE,
            "regarding": _OBJECT_REFERENCE,
            "related": _OBJECT_REFERENCE,
        }
    },
}

# The Go zero value of a built-in as the apiserver serialises it: non-pointer structs are present. This
# is the "before" of a create, so these nodes are never new (no "." member) on a built-in.
_ZERO_SPEC_STATUS: dict[str, dict[str, Any]] = {"metadata": {}, "spec": {}, "status": {}}
_BUILTIN_ZERO: dict[str, dict] = {
    "Pod": {"metadata": {}, "spec": {"containers": None}, "status": {}},
    **{
        kind: _ZERO_SPEC_STATUS
        for kind in ("Service", "Node", "Namespace", "CustomResourceDefinition", "PodDisruptionBudget")
    },
    # The template's metadata and spec are non-pointer structs too.
    **{
        kind: {"metadata": {}, "spec": {"template": {"metadata": {}, "spec": {"containers": None}}}, "status": {}}
        for kind in ("Deployment", "ReplicaSet")
    },
    "Lease": {"metadata": {}, "spec": {}},
    "RoleBinding": {"metadata": {}, "roleRef": {}},
    "ClusterRoleBinding": {"metadata": {}, "roleRef": {}},
    "Event": {"metadata": {}, "involvedObject": {}, "source": {}},
}
_NOTHING: dict = {}


def root_schema(kind: str, custom: bool, crd_schema: dict | None) -> dict:
    """The ownership schema of a kind: a CRD's openAPIV3Schema (with ObjectMeta for metadata), or the
    built-in table. Callers cache it per resource type."""
    if custom:
        props = dict((crd_schema or {}).get("properties") or {})
        props["metadata"] = OBJECT_META
        return {**(crd_schema or {}), "properties": props}
    base = _BUILTIN_SCHEMAS.get(kind, {"properties": {}})
    return {"properties": {**base["properties"], "metadata": OBJECT_META}}


def zero_object(kind: str, custom: bool) -> dict:
    return _NOTHING if custom else _BUILTIN_ZERO.get(kind, {"metadata": {}})


def _child(schema: dict, key: str) -> dict:
    props = schema.get("properties")
    if type(props) is dict:
        sub = props.get(key)
        if type(sub) is dict:
            return sub
    extra = schema.get("additionalProperties")
    return extra if type(extra) is dict else _NOTHING


def _keyed_items(items: Any, schema: dict) -> dict[str, Any] | None:
    """Path element → item of an associative list or set; None when the list must count as atomic."""
    if type(items) is not list:
        return None
    list_type = schema.get("x-kubernetes-list-type")
    out: dict[str, Any] = {}
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or ()
        if not keys:
            return None
        key_schemas = (schema.get("items") or _NOTHING).get("properties") or _NOTHING
        for item in items:
            if type(item) is not dict:
                return None
            key: dict[str, Any] = {}
            for k in keys:
                if k in item:
                    key[k] = item[k]
                elif "default" in (key_schemas.get(k) or _NOTHING):
                    key[k] = key_schemas[k]["default"]
                else:
                    return None
            pe = "k:" + orjson.dumps(key, option=orjson.OPT_SORT_KEYS).decode()
            if pe in out:
                return None
            out[pe] = item
        return out
    if list_type == "set":
        for item in items:
            if type(item) in (dict, list):
                return None
            pe = "v:" + orjson.dumps(item).decode()
            if pe in out:
                return None
            out[pe] = item
        return out
    return None


def _granular_map(value: Any, schema: dict) -> bool:
    return type(value) is dict and bool(value) and schema.get("x-kubernetes-map-type") != "atomic"


# -- comparing two objects (Update) ----------------------------------------------------------------------
# The comparison builds the field set of what changed in its wire form directly, in one walk, each node's
# children sorted once: every write of every object comes through here, and a set of path tuples
# inserted one by one from the root (each insert walking down again) cost several times the walk itself.


def _diff(old: Any, new: Any, schema: dict, path: Path, present: bool, removed: list[Path]) -> dict | None:
    """The field set (wire form) of what turning ``old`` into ``new`` at ``path`` added or changed, or
    None when it added and changed nothing; what it removed is appended to ``removed``.

    ``present``: the node existed before (possibly as null). Callers skip equal subtrees.
    """
    if _granular_map(new, schema):
        member = False
        if type(old) is not dict:
            member = _node_is_new(old, path, present, removed)
            old = _NOTHING
        return _diff_map(old, new, schema, path, removed, member, top=not path, meta=path == _META_PATH)
    if type(new) is list and new:
        items = _keyed_items(new, schema)
        if items is not None:
            old_items = _keyed_items(old, schema) if type(old) is list else {}
            if old_items is not None:
                member = type(old) is not list and _node_is_new(old, path, present, removed)
                item_schema = schema.get("items") or _NOTHING
                children: list[tuple[str, dict]] = []
                for pe, item in items.items():
                    if pe in old_items:
                        before = old_items[pe]
                        if before == item:
                            continue
                        child = _diff_item(before, item, item_schema, path + (pe,), removed, False)
                        if child is None:
                            continue
                    else:  # a new item is a member itself
                        child = _diff_item(None, item, item_schema, path + (pe,), removed, True)
                    children.append((pe, child))  # type: ignore[arg-type]
                for pe in old_items:
                    if pe not in items:
                        removed.append(path + (pe,))
                return _node(member, children)
    # A leaf: scalar, null, empty map or list, atomic map or list.
    if present and (type(old) in (dict, list)) and old:
        if type(new) is type(old) and not new:
            old_children = _children(old, schema)
            if old_children is not None:
                # Emptying a map or keyed list removes the fields inside; the writer gains nothing.
                removed.extend(path + (pe,) for pe in old_children)
                return None
        removed.append(path)  # whatever was owned inside the old value is gone
        if new is None and _children(old, schema) is not None:
            return None  # a granular field set to null is gone, like a removed one
    return {}


_META_PATH: Path = ("f:metadata",)


def _node(member: bool, children: list[tuple[str, dict]]) -> dict | None:
    """A wire node of sorted ``children`` ("." first when the node is a member itself)."""
    if not children:
        return {} if member else None
    children.sort()  # path elements of one node are distinct: the field sets are never compared
    node: dict = {_MEMBER: {}} if member else {}
    node.update(children)
    return node


def _children(value: Any, schema: dict) -> list[str] | None:
    """Path elements of a granular container's members; None for a leaf (scalar or atomic)."""
    if _granular_map(value, schema):
        return ["f:" + k for k in value]
    items = _keyed_items(value, schema) if type(value) is list else None
    return list(items) if items is not None else None


def _node_is_new(old: Any, path: Path, present: bool, removed: list[Path]) -> bool:
    """Whether a map or list at ``path`` that was not one before becomes a member."""
    if not present:
        return bool(path) and path != _META_PATH
    if old is not None:  # a different type before: its ownership goes, the node is new
        removed.append(path)
        return True
    return False


def _diff_map(
    old_map: dict,
    new: dict,
    schema: dict,
    path: Path,
    removed: list[Path],
    member: bool,
    *,
    top: bool = False,
    meta: bool = False,
) -> dict | None:
    """The fields of a granular map (``top``/``meta``: the object root or its metadata, whose
    server-set fields nobody owns)."""
    children: list[tuple[str, dict]] = []
    for key, value in new.items():
        if (top and key in _STRIPPED_TOP) or (meta and key in _STRIPPED_META):
            continue
        pe = "f:" + key
        if key in old_map:
            before = old_map[key]
            if before is value or (before == value and type(before) is type(value)):
                continue
            present = True
        else:
            before = None
            present = False
        if type(value) in _CONTAINERS or type(before) in _CONTAINERS:
            child = _diff(before, value, _child(schema, key), path + (pe,), present, removed)
            if child is None:
                continue
        else:
            child = {}  # a scalar set or changed: a leaf, without making its path
        children.append((pe, child))
    for key in old_map:
        if key not in new and not ((top and key in _STRIPPED_TOP) or (meta and key in _STRIPPED_META)):
            removed.append(path + ("f:" + key,))
    return _node(member, children)


_CONTAINERS = (dict, list)


def _diff_item(old: Any, new: Any, schema: dict, path: Path, removed: list[Path], member: bool) -> dict | None:
    """A list item (``member``: a new one): its fields are compared like a map's."""
    if type(new) is dict and schema.get("x-kubernetes-map-type") != "atomic":
        return _diff_map(old if type(old) is dict else _NOTHING, new, schema, path, removed, member)
    if member or old is not None:
        return {}  # a new item, or an atomic item that changed
    return None


# -- the field set of an applied configuration (Apply) -----------------------------------------------------


def _field_set(value: Any, schema: dict, path: Path, out: list[Path]) -> None:
    if _granular_map(value, schema):
        top = not path
        meta = path == ("f:metadata",)
        for key, child in value.items():
            if (top and key in _STRIPPED_TOP) or (meta and key in _STRIPPED_META):
                continue
            _field_set(child, _child(schema, key), path + ("f:" + key,), out)
        return
    if type(value) is list and value:
        items = _keyed_items(value, schema)
        if items is not None:
            item_schema = schema.get("items") or _NOTHING
            for pe, item in items.items():
                item_path = path + (pe,)
                out.append(item_path)
                if type(item) is dict and item_schema.get("x-kubernetes-map-type") != "atomic":
                    for key, child in item.items():
                        _field_set(child, _child(item_schema, key), item_path + ("f:" + key,), out)
            return
    if path and path != ("f:metadata",):
        out.append(path)


# -- field-set tries ---------------------------------------------------------------------------------------


def _parse_fields(fields: Any) -> dict:
    """A client-sent FieldsV1 object in the normal form (a member leaf is ``{}``); raises ValueError
    when it is not one."""
    if type(fields) is not dict:
        raise ValueError("fieldsV1 must be an object")
    out: dict = {}
    for pe, child in fields.items():
        if pe == _MEMBER:
            if child != {}:
                raise ValueError('the "." element must be empty')
            continue
        if not isinstance(pe, str) or pe[:2] not in ("f:", "k:", "v:", "i:"):
            raise ValueError(f"unknown path element {pe!r}")
        if pe[:2] != "f:":
            _check_value_element(pe)
        if type(child) is not dict:
            raise ValueError(f"the value of {pe!r} must be an object")
        out[pe] = _parse_fields(child)
    if _MEMBER in fields and out:
        out = {_MEMBER: {}, **out}
    return out


def _check_value_element(pe: str) -> None:
    try:
        value = orjson.loads(pe[2:])
    except orjson.JSONDecodeError:
        raise ValueError(f"path element {pe!r} is not valid JSON") from None
    if pe[:2] == "k:" and type(value) is not dict:
        raise ValueError(f"path element {pe!r} must hold a JSON object of keys")
    if pe[:2] == "i:" and type(value) is not int:
        raise ValueError(f"path element {pe!r} must hold an integer index")


def field_path_string(path: Path) -> str:
    """``.spec.containers[name="x"].image``, as apiserver conflict messages print a field."""
    out = []
    for pe in path:
        tag, text = pe[:2], pe[2:]
        if tag == "f:":
            out.append("." + text)
        elif tag == "k:":
            keys = orjson.loads(text)
            out.append("[" + ",".join(f"{k}={orjson.dumps(v).decode()}" for k, v in keys.items()) + "]")
        elif tag == "v:":
            out.append(f"[={text}]")
        else:
            out.append(f"[{text}]")
    return "".join(out)


# -- entries -----------------------------------------------------------------------------------------------


@dataclass
class Entry:
    manager: str
    operation: str  # "Apply" | "Update"
    api_version: str
    time: str | None
    subresource: str
    fields: FieldSet

    @property
    def identity(self) -> tuple[str, str, str, str]:
        # As the apiserver builds manager identifiers: an Update entry per API version, one Apply
        # entry whatever version was applied.
        return (self.manager, self.operation, self.subresource, self.api_version if self.operation == "Update" else "")

    def encode(self) -> dict:
        out: dict = {"manager": self.manager} if self.manager else {}
        out["operation"] = self.operation
        out["apiVersion"] = self.api_version
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = self.fields
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def validate_entries(value: Any) -> list[dict[str, str]]:
    """Causes (``reason``/``field``/``message``) for a client-sent ``metadata.managedFields`` that is
    not a valid list of entries; empty when it is valid."""

    def cause(where: str, message: str, reason: str = "FieldValueInvalid") -> dict[str, str]:
        return {"reason": reason, "field": where, "message": message}

    if type(value) is not list:
        return [cause("metadata.managedFields", "Invalid value: must be a list of entries")]
    causes = []
    for i, entry in enumerate(value):
        where = f"metadata.managedFields[{i}]"
        if type(entry) is not dict:
            causes.append(cause(where, "Invalid value: must be an object"))
            continue
        operation = entry.get("operation")
        if operation not in ("Apply", "Update"):
            causes.append(
                cause(
                    f"{where}.operation",
                    f'Unsupported value: "{operation}": supported values: "Apply", "Update"',
                    "FieldValueNotSupported",
                )
            )
        fields_type = entry.get("fieldsType")
        if fields_type != "FieldsV1":
            causes.append(
                cause(
                    f"{where}.fieldsType",
                    f'Unsupported value: "{fields_type}": supported values: "FieldsV1"',
                    "FieldValueNotSupported",
                )
            )
        for key in ("manager", "subresource", "apiVersion", "time"):
            if entry.get(key) is not None and not isinstance(entry[key], str):
                causes.append(cause(f"{where}.{key}", "Invalid value: must be a string"))
        if not entry.get("apiVersion"):
            causes.append(cause(f"{where}.apiVersion", "Required value: must not be empty", "FieldValueRequired"))
        try:
            _parse_fields(entry.get("fieldsV1") or {})
        except ValueError as exc:
            causes.append(cause(f"{where}.fieldsV1", f"Invalid value: {exc}"))
    return causes


def is_reset(value: Any) -> bool:
    """Whether a client-sent managedFields asks to drop all ownership: an empty list, or a single
    entry with nothing set."""
    if type(value) is not list:
        return False
    if not value:
        return True
    # The zero entry: every field the API knows absent, null or empty (unknown keys do not count).
    return (
        len(value) == 1
        and type(value[0]) is dict
        and all(
            value[0].get(k) in (None, "")
            for k in ("manager", "operation", "apiVersion", "time", "fieldsType", "subresource")
        )
        and value[0].get("fieldsV1") is None
    )


def decode_entries(value: Any) -> list[Entry]:
    """Entries of a (validated) managedFields list, with field sets of their own to edit."""
    out = []
    for raw in value or ():
        out.append(
            Entry(
                raw.get("manager", ""),
                raw["operation"],
                raw.get("apiVersion", ""),
                raw.get("time"),
                raw.get("subresource", ""),
                _parse_fields(raw.get("fieldsV1") or {}),
            )
        )
    return out


def encode_entries(entries: list[Entry]) -> list[dict]:
    live = [e for e in entries if e.fields]
    live.sort(key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource))
    return [e.encode() for e in live]


def manager_from_user_agent(user_agent: str) -> str:
    """The default manager name: the User-Agent up to its first "/", printable characters only, at most
    128 of them (what the apiserver uses when ``fieldManager`` is not given)."""
    prefix = user_agent.split("/", 1)[0]
    return "".join(ch for ch in prefix if ch.isprintable())[:128]


def _entry_for(entries: list[Entry], manager: str, operation: str, subresource: str, api_version: str) -> Entry:
    for entry in entries:
        if entry.identity == (manager, operation, subresource, api_version if operation == "Update" else ""):
            return entry
    entry = Entry(manager, operation, api_version, None, subresource, {})
    entries.append(entry)
    return entry


def _cap_update_managers(entries: list[Entry], now: str) -> list[Entry]:
    """Keep at most MAX_UPDATE_MANAGERS Update entries: walking them oldest first, every further entry
    of an API version already seen is merged into that version's ``ancient-changes`` bucket (which
    takes the time of the newest update merged into it), until the cap holds."""
    updates = [e for e in entries if e.operation == "Update" and e.fields]
    if len(updates) <= MAX_UPDATE_MANAGERS:
        return entries
    updates.sort(key=lambda e: (e.time or "", e.manager))
    first_of_version: dict[str, Entry] = {}
    buckets: dict[str, Entry] = {
        e.api_version: e for e in updates if e.manager == ANCIENT_CHANGES and not e.subresource
    }
    dropped: set[int] = set()
    count = len(updates)
    for entry in updates:
        if count <= MAX_UPDATE_MANAGERS:
            break
        version = entry.api_version
        first = first_of_version.get(version)
        if first is None:
            first_of_version[version] = entry
            continue
        bucket = buckets.get(version)
        if bucket is None:
            bucket = buckets[version] = Entry(ANCIENT_CHANGES, "Update", version, first.time, "", first.fields)
            dropped.add(id(first))
            entries = entries + [bucket]
        if bucket is not entry:
            bucket.fields = _wire_build(set(_wire_members(bucket.fields)) | set(_wire_members(entry.fields)))
            bucket.time = entry.time
            dropped.add(id(entry))
            count -= 1
    return [e for e in entries if id(e) not in dropped]


# -- the two operations ------------------------------------------------------------------------------------


def update_ownership(
    schema: dict, before: dict, after: dict, managed: Any, manager: str, subresource: str, api_version: str, now: str
) -> Any:
    """managedFields after ``manager`` turned ``before`` into ``after`` with an Update operation.

    ``managed`` is the (validated) list to start from; the result is the list to store (``managed``
    itself when nothing changed). Works on the wire form directly and copies only the entries it
    changes, because every write of every object comes through here: unaffected entries stay the
    very dicts the previous version of the object holds (stored objects are never mutated).
    """
    removed: list[Path] = []
    changed = _diff(before, after, schema, (), True, removed)
    if changed is None and not removed:
        return managed
    identity = (manager, "Update", subresource, api_version)
    out: list[dict] = []
    mine: dict | None = None
    mine_fields: dict = {}
    for raw in managed or ():
        fields = raw.get("fieldsV1") or {}
        if _wire_identity(raw) == identity:
            mine, mine_fields = raw, _wire_copy(fields)
            continue
        hit_removed = [p for p in removed if _wire_find(fields, p) is not None]
        hit_changed = _wire_common_members(fields, changed) if changed else []
        if not hit_removed and not hit_changed:
            out.append(raw)
            continue
        fields = _wire_copy(fields)
        for path in hit_removed:
            _wire_remove(fields, path, subtree=True)
        for path in hit_changed:
            _wire_remove(fields, path, subtree=False)
        if fields:
            out.append({**raw, "fieldsV1": fields})
    for path in removed:
        _wire_remove(mine_fields, path, subtree=True)
    if not mine_fields:
        mine_fields = changed or {}  # made by this call: nothing else holds it
    elif changed:
        _wire_merge(mine_fields, changed)
    if mine_fields:
        if changed is not None or mine is None:
            out.append(Entry(manager, "Update", api_version, now, subresource, mine_fields).encode())
        else:  # the write only removed fields: the entry keeps its time, as on a real apiserver
            out.append({**mine, "fieldsV1": mine_fields})
    if sum(1 for raw in out if raw.get("operation") == "Update") > MAX_UPDATE_MANAGERS:
        return encode_entries(_cap_update_managers(decode_entries(out), now))
    out.sort(key=_wire_order)
    return out


def _wire_identity(raw: dict) -> tuple[str, str, str, str]:
    operation = raw.get("operation", "")
    return (
        raw.get("manager", ""),
        operation,
        raw.get("subresource", ""),
        raw.get("apiVersion", "") if operation == "Update" else "",
    )


def _wire_order(raw: dict) -> tuple[str, str, str, str, str]:
    return (
        raw.get("operation", ""),
        raw.get("time") or "",
        raw.get("manager", ""),
        raw.get("apiVersion", ""),
        raw.get("subresource", ""),
    )


# -- the wire form as a trie -------------------------------------------------------------------------------
# A FieldsV1 node is a member when it is empty (a leaf) or holds ".". These helpers edit nodes the caller
# owns (``_wire_copy``) and keep that invariant: a member that loses its last child becomes ``{}``, a
# non-member that loses its last child disappears.


def _wire_copy(node: dict) -> dict:
    return {pe: _wire_copy(child) if child else {} for pe, child in node.items()}


def _wire_find(node: dict, path: Path) -> dict | None:
    for pe in path:
        child = node.get(pe)
        if child is None:
            return None
        node = child
    return node


def _wire_keeps(node: dict, path: Path) -> bool:
    """Whether a set keeps ``path`` when pruning: as a member, or as a named field (``f:``) with owned
    fields below it (structured-merge-diff's EnsureNamedFieldsAreMembers). An applier that owned a
    list as a member (say after the client-side apply migration gave it ``f:ports: {".": {}}``) and
    now applies items of it keeps the list: only fields under it that nobody owns go."""
    found = _wire_find(node, path)
    return found is not None and (not found or _MEMBER in found or path[-1].startswith("f:"))


def _wire_remove(root: dict, path: Path, *, subtree: bool) -> None:
    nodes = [root]
    node = root
    for pe in path:
        child = node.get(pe)
        if child is None:
            return
        node = child
        nodes.append(node)
    if not path:
        if subtree:
            root.clear()
        return
    if not subtree and node:
        if _MEMBER in node:
            del node[_MEMBER]  # it keeps its children, so it stays
        return
    del nodes[-2][path[-1]]
    for depth in range(len(path) - 1, 0, -1):
        parent = nodes[depth]
        if len(parent) > 1 or (parent and _MEMBER not in parent):
            return
        if parent:  # only "." is left: a member leaf now
            parent.clear()
            return
        del nodes[depth - 1][path[depth - 1]]


def _wire_common_members(node: dict, other: dict, prefix: Path = (), out: list[Path] | None = None) -> list[Path]:
    """The members of ``other`` that are members of ``node`` too."""
    out = [] if out is None else out
    for pe, theirs in other.items():
        mine = node.get(pe)
        if mine is None or pe == _MEMBER:
            continue
        path = prefix + (pe,)
        if (not theirs or _MEMBER in theirs) and (not mine or _MEMBER in mine):
            out.append(path)
        if theirs and mine:
            _wire_common_members(mine, theirs, path, out)
    return out


def _wire_merge(root: dict, other: dict) -> None:
    """Add the members of ``other`` (sorted, made by the caller, taken over) to ``root``: the same as
    inserting each of them in order (:func:`_wire_insert_all`), down to the order of keys."""
    resort = False
    inserted = False
    for pe, theirs in other.items():
        if pe == _MEMBER:
            continue
        mine = root.get(pe)
        if mine is None:
            # Later keys come in order: only the first new one can land before an old one.
            if not inserted and root and pe < next(reversed(root)):
                resort = True
            inserted = True
            root[pe] = theirs
            continue
        if (not theirs or _MEMBER in theirs) and mine and _MEMBER not in mine:
            mine = root[pe] = {_MEMBER: {}, **mine}
        if len(theirs) > (_MEMBER in theirs):
            if not mine:  # a member leaf gaining children
                mine[_MEMBER] = {}
            _wire_merge(mine, theirs)
    if resort:
        items = sorted(root.items())
        root.clear()
        root.update(items)


def _wire_members(node: dict, prefix: Path = ()) -> Iterator[Path]:
    for pe, child in node.items():
        if pe == _MEMBER:
            continue
        path = prefix + (pe,)
        if not child or _MEMBER in child:
            yield path
        yield from _wire_members(child, path)


def _wire_build(paths: Any) -> dict:
    """A new field set of ``paths``."""
    root: dict = {}
    _wire_insert_all(root, paths)
    return root


def _wire_insert_all(root: dict, paths: Any) -> None:
    # In sorted order, new nodes come out sorted; a node that gets a key out of order is re-sorted.
    unsorted: list[dict] = []
    for path in sorted(paths):
        _wire_insert(root, path, unsorted)
    for node in unsorted:
        items = sorted(node.items())
        node.clear()
        node.update(items)


def _wire_insert(root: dict, path: Path, unsorted: list[dict]) -> None:
    node = root
    last = len(path) - 1
    for depth, pe in enumerate(path):
        child = node.get(pe)
        if child is None:
            if node and pe < next(reversed(node)):
                unsorted.append(node)
            child = node[pe] = {}
            if depth < last:
                node = child
                continue
            return
        if depth == last:
            if child and _MEMBER not in child:
                node[pe] = {_MEMBER: {}, **child}
            return
        if not child:  # a member leaf gaining children
            child[_MEMBER] = {}
        node = child


def _print_manager(entry: Entry) -> str:
    # As the apiserver prints a manager identifier: the version only for Update managers (an Apply
    # manager is one identity across versions).
    text = f'"{entry.manager}"'
    if entry.subresource:
        text += f' with subresource "{entry.subresource}"'
    if entry.operation == "Update":
        text += f" using {entry.api_version}"
    return text


class FieldConflict(Exception):
    """An apply would change fields other managers own. ``conflicts``: (entry, field paths) pairs."""

    def __init__(self, conflicts: list[tuple[Entry, list[Path]]]) -> None:
        conflicts = sorted(conflicts, key=lambda c: _identifier_order(c[0]))
        self.conflicts = conflicts
        count = sum(len(paths) for _, paths in conflicts)
        if count == 1:
            entry, paths = conflicts[0]
            detail = f"conflict with {_print_manager(entry)}: {field_path_string(paths[0])}"
        else:
            lines = []
            for entry, paths in conflicts:
                lines.append(f"conflicts with {_print_manager(entry)}:")
                lines.extend(f"- {field_path_string(p)}" for p in paths)
            detail = "\n".join(lines)
        self.message = f"Apply failed with {count} conflict{'' if count == 1 else 's'}: {detail}"
        self.causes = [
            {
                "reason": "FieldManagerConflict",
                "message": f"conflict with {_print_manager(entry)}",
                "field": field_path_string(path),
            }
            for entry, paths in conflicts
            for path in paths
        ]
        super().__init__(self.message)


def _identifier_order(entry: Entry) -> str:
    # The apiserver sorts conflicting managers by their identifier: the entry's JSON without fields/time.
    ident: dict[str, str] = {"manager": entry.manager, "operation": entry.operation}
    if entry.operation == "Update":
        ident["apiVersion"] = entry.api_version
    if entry.subresource:
        ident["subresource"] = entry.subresource
    return orjson.dumps(ident).decode()


def apply_ownership(
    schema: dict,
    live: dict,
    config: dict,
    merged: dict,
    managed: Any,
    manager: str,
    subresource: str,
    api_version: str,
    force: bool,
    now: str,
    prunable: tuple[str, ...] | None = None,
) -> list[dict]:
    """managedFields after ``manager`` applied ``config`` to ``live``, giving ``merged``.

    Raises :class:`FieldConflict` when the apply changes fields other entries own and ``force`` is
    false. Fields the applier owned before and no longer applies (and no one else owns) are deleted from
    ``merged`` in place, only under the top-level fields ``prunable`` lists (None: any but the ones
    nobody owns); the caller guarantees ``merged`` shares no dict it may not change there.
    """
    applied_paths: list[Path] = []
    _field_set(config, schema, (), applied_paths)
    applied = _wire_build(applied_paths)
    removed: list[Path] = []
    changed = _diff(live, merged, schema, (), True, removed)
    entries = decode_entries(managed)
    identity = (manager, "Apply", subresource, "")
    conflicts = []
    for entry in entries:
        if entry.identity == identity:
            continue
        hits = _wire_common_members(entry.fields, changed) if changed else []
        if hits:
            conflicts.append((entry, sorted(hits, key=_set_order)))
    if conflicts and not force:
        raise FieldConflict(conflicts)
    for entry, hits in conflicts:
        for path in hits:
            _wire_remove(entry.fields, path, subtree=False)
    previous = next((e for e in entries if e.identity == identity), None)
    if previous is not None:
        others = [e for e in entries if e is not previous]
        dropped = [
            path
            for path in _wire_members(previous.fields)
            if _prunable(path, prunable)
            and not _wire_keeps(applied, path)
            and not any(_wire_keeps(e.fields, path) for e in others)
        ]
        # As the apiserver prunes before it records the apply: what is deleted leaves every entry.
        for path in _prune(merged, schema, dropped, [applied] + [e.fields for e in others]):
            removed.append(path)
    for entry in entries:
        for path in removed:
            _wire_remove(entry.fields, path, subtree=True)
    mine = _entry_for(entries, manager, "Apply", subresource, api_version)
    mine.fields = applied
    mine.time = now
    mine.api_version = api_version
    return encode_entries(_cap_update_managers(entries, now))


def _set_order(path: Path) -> list[tuple[int, str]]:
    # The order a field set is walked in: at each node its own members, then its children, each sorted.
    return [(0 if depth == len(path) - 1 else 1, pe) for depth, pe in enumerate(path)]


def _prunable(path: Path, roots: tuple[str, ...] | None) -> bool:
    # Never the identity of the object: whatever a (client-edited) entry claims, apiVersion, kind,
    # metadata itself and its server-set fields stay.
    head = path[0]
    if roots is not None and head not in roots:
        return False
    if head in ("f:apiVersion", "f:kind"):
        return False
    if head == "f:metadata":
        return len(path) > 1 and path[1][2:] not in _STRIPPED_META
    return True


def _locate(obj: Any, path: Path, schema: dict) -> list[tuple[Any, Any, dict]]:
    """(container, key or index, schema of the value) for every step of ``path`` into ``obj``, found
    the way the path was made (keyed items by their keys, defaults included); [] when it is not there."""
    steps: list[tuple[Any, Any, dict]] = []
    node: Any = obj
    for pe in path:
        tag = pe[:2]
        if tag == "f:" and type(node) is dict and pe[2:] in node:
            key: Any = pe[2:]
            schema = _child(schema, key)
        elif tag in ("k:", "v:") and type(node) is list:
            items = _keyed_items(node, schema) or {}
            item = items.get(pe)
            key = next((i for i, candidate in enumerate(node) if candidate is item), None)
            if key is None:
                return []
            schema = schema.get("items") or _NOTHING
        else:
            return []
        steps.append((node, key, schema))
        node = node[key]
    return steps


def _prune(merged: dict, schema: dict, dropped: list[Path], owners: list[FieldSet]) -> list[Path]:
    """Delete the ``dropped`` fields from ``merged`` (in place), then every map or list that held only
    them and that no one in ``owners`` owns anything in. Returns the paths deleted."""
    deleted: list[Path] = []
    for path in sorted(dropped, key=len):  # an item before its key fields, which locate it
        if any(path[: len(d)] == d for d in deleted):
            continue
        steps = _locate(merged, path, schema)
        if not steps:
            continue
        container, key, _ = steps[-1]
        del container[key]
        deleted.append(path)
        for depth in range(len(steps) - 1, 0, -1):
            container, key, _ = steps[depth - 1]
            value = container[key]
            prefix = path[:depth]
            if (
                type(value) not in (dict, list)
                or value
                or prefix == ("f:metadata",)
                or any(_wire_find(trie, prefix) is not None for trie in owners)
            ):
                break
            del container[key]
            deleted.append(prefix)
    return deleted
