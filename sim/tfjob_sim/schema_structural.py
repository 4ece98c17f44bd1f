"""A CRD version's structural schema applied to custom resources: pruning of unknown fields,
defaulting, validation (OpenAPI values, list types, ``x-kubernetes-validations`` CEL rules) and ratcheting
on update.

Why here: clients rely on pruning and defaulting, and users meet the validation through ``kubectl apply``
errors, so the order of the checks and which errors block the CEL rules are kube-apiserver's; on update, an
unchanged invalid value is not an error again (ratcheting, on by default since 1.30).

Contract: :class:`StructuralSchema` ``(schema, server_minor=...)``; ``prune``/``prune_status`` remove and
return the unknown fields, ``apply_defaults``/``apply_status_defaults`` default in place, ``validate`` returns
Status causes (``validate_errors`` the field errors). Pure: no I/O, no clocks.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from tfjob_sim.cel import MISSING, CelCompileError, CelEvalError, CelRule, from_cel
from tfjob_sim.gotext import go_json
from tfjob_sim.resources import OBJECT_META_FIELDS
from tfjob_sim.schema_errors import (
    BLOCKING_TYPES,
    DEFAULT_SERVER_MINOR,
    OMIT,
    FieldError,
    child_path,
    duplicate,
    forbidden,
    index_path,
    invalid,
    key_path,
    required,
    to_causes,
)
from tfjob_sim.schema_values import OpenAPIValidator

META_FIELDS = ("apiVersion", "kind", "metadata")

# The nested types of ObjectMeta the strict decoder knows (ObjectMeta's own fields: OBJECT_META_FIELDS).
_OWNER_REF_FIELDS = {"apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"}
_MANAGED_FIELDS_FIELDS = {"manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource"}


def _prune_object_meta(meta: Any, prefix: str, removed: list[str]) -> None:
    """What the strict ObjectMeta decode drops (reported as ``metadata.<path>``)."""
    if not isinstance(meta, dict):
        return
    for key in list(meta):
        if key not in OBJECT_META_FIELDS:
            removed.append(f"{prefix}.{key}")
            del meta[key]
    for field_name, known in (("ownerReferences", _OWNER_REF_FIELDS), ("managedFields", _MANAGED_FIELDS_FIELDS)):
        entries = meta.get(field_name)
        if isinstance(entries, list):
            for i, entry in enumerate(entries):
                if isinstance(entry, dict):
                    for key in list(entry):
                        if key not in known:
                            removed.append(f"{prefix}.{field_name}[{i}].{key}")
                            del entry[key]


@dataclass
class _CompiledRule:
    spec: dict  # the x-kubernetes-validations entry
    rule: CelRule | None
    error: str  # compile error detail, "" when compiled
    message_expression: CelRule | None
    field_path: str  # normalized fieldPath (CEL field.Path form), "" if none


def _schema_type_name(schema: dict) -> str:
    t = schema.get("type")
    return t if isinstance(t, str) else ""


def normalize_field_path(field_path: str, schema: dict) -> str:
    """apiextensions ``ValidFieldPath``; returns the field.Path string or raises ValueError."""
    tokens = re.findall(r"'(?:[^'\\]|\\.)*'|[.\[\]]|[^.\[\]']+", field_path)
    path = ""
    current = schema
    i = 0

    def step(name: str, named: bool) -> None:
        nonlocal path, current
        if named:
            path = child_path(path, name)
            props = current.get("properties") or {}
            if name not in props:
                raise ValueError("does not refer to a valid field")
            current = props[name]
        else:
            path = key_path(path, name)
            current = current.get("additionalProperties") or {}

    while i < len(tokens):
        tok = tokens[i]
        if tok == ".":
            i += 1
            if i >= len(tokens):
                raise ValueError("unexpected end of JSON path")
            name = tokens[i]
            if current.get("properties") is not None:
                step(name, True)
            elif current.get("additionalProperties") is not None:
                step(name, False)
            else:
                raise ValueError("does not refer to a valid field")
        elif tok == "[":
            i += 1
            if i >= len(tokens):
                raise ValueError("unexpected end of JSON path")
            quoted = tokens[i]
            if len(quoted) < 2 or quoted[0] != "'" or quoted[-1] != "'":
                raise ValueError(f"expected single quoted string but got {quoted}")
            name = re.sub(r"\\(.)", r"\1", quoted[1:-1])
            if current.get("properties") is not None:
                step(name, True)
            elif current.get("additionalProperties") is not None:
                step(name, False)
            else:
                raise ValueError("does not refer to a valid field")
            i += 1
            if i >= len(tokens) or tokens[i] != "]":
                raise ValueError(f"expected ] but got {tokens[i] if i < len(tokens) else ''}")
        else:
            raise ValueError(f"expected [ or . but got: {tok}")
        i += 1
    return path


class StructuralSchema:
    """A version's ``schema.openAPIV3Schema``, with its CEL rules compiled once.

    ``server_minor`` selects the Kubernetes release whose messages are reproduced (default
    :data:`DEFAULT_SERVER_MINOR`). The schema is assumed to have passed :func:`validate_crd`; rules
    that still fail to compile are reported at validation time as ``rule compile error: ...``.
    """

    def __init__(
        self, openapi_v3_schema: dict, *, server_minor: int = DEFAULT_SERVER_MINOR, _resource_root: bool = True
    ) -> None:
        if not isinstance(openapi_v3_schema, dict):
            raise TypeError("openAPIV3Schema must be an object")
        self.schema = openapi_v3_schema
        self.server_minor = server_minor
        self._rules: dict[int, list[_CompiledRule]] = {}
        # Per schema node (by id): (any rule at or below it, any transition rule at or below it).
        # Lets validation skip subtrees without rules, and unchanged subtrees without oldSelf rules.
        self._below: dict[int, tuple[bool, bool]] = {}
        self._compile(openapi_v3_schema, is_root=_resource_root)
        # Per schema node (by id): whether it or a node below it declares a default, a set or map
        # list. A pod template has hundreds of schema properties and next to no defaults (the TFJob
        # CRD declares no list types at all): defaulting and the list checks skip the rest.
        self._defaulting: dict[int, bool] = {}
        _mark_subtrees(openapi_v3_schema, self._defaulting, lambda node: node.get("default") is not None)
        self._list_typed: dict[int, bool] = {}
        _mark_subtrees(
            openapi_v3_schema, self._list_typed, lambda node: node.get("x-kubernetes-list-type") in ("set", "map")
        )

    # -- CEL rule compilation ------------------------------------------------------------------
    def _compile(self, schema: Any, is_root: bool) -> tuple[bool, bool]:
        if not isinstance(schema, dict):
            return False, False
        rules = schema.get("x-kubernetes-validations")
        any_rule = any_transition = False
        if isinstance(rules, list) and rules:
            compiled = [
                self._compile_rule(spec, schema, is_root or bool(schema.get("x-kubernetes-embedded-resource")))
                for spec in rules
                if isinstance(spec, dict)
            ]
            self._rules[id(schema)] = compiled
            any_rule = bool(compiled)
            # a rule that failed to compile is reported on every validation: treat it like a transition rule
            any_transition = any(c.rule is None or c.rule.references_old_self for c in compiled)
        children = list((schema.get("properties") or {}).values())
        children += [schema[key] for key in ("items", "additionalProperties") if isinstance(schema.get(key), dict)]
        for sub in children:
            sub_rule, sub_transition = self._compile(sub, False)
            any_rule = any_rule or sub_rule
            any_transition = any_transition or sub_transition
        self._below[id(schema)] = (any_rule, any_transition)
        return any_rule, any_transition

    @staticmethod
    def _compile_rule(spec: dict, schema: dict, is_root: bool) -> _CompiledRule:
        text = spec.get("rule", "")
        try:
            rule = CelRule(text, schema, is_root=is_root)
            error = ""
        except CelCompileError as exc:
            rule, error = None, str(exc)
        message_expression = None
        if spec.get("messageExpression"):
            try:
                message_expression = CelRule(spec["messageExpression"], schema, is_root=is_root)
            except CelCompileError:
                message_expression = None
        field_path = ""
        if spec.get("fieldPath"):
            try:
                field_path = normalize_field_path(spec["fieldPath"].strip(), schema)
            except ValueError:
                field_path = ""
        return _CompiledRule(spec, rule, error, message_expression, field_path)

    # -- pruning --------------------------------------------------------------------------------
    def prune(self, obj: dict) -> list[str]:
        """Drop unknown fields in place; returns their paths (metadata ones first, then sorted).

        Also drops ``null`` values of non-nullable fields without a default, as the decoder does.
        """
        removed_meta: list[str] = []
        removed: list[str] = []
        if isinstance(obj, dict) and "metadata" in obj:
            _prune_object_meta(obj["metadata"], "metadata", removed_meta)
        self._prune(obj, self.schema, [], removed, embedded=True, root=True)
        self._prune_nulls(obj, self.schema)
        return removed_meta + sorted(removed)

    def prune_status(self, obj: dict) -> list[str]:
        """:meth:`prune` of an object whose every field but ``status`` is already pruned by this schema
        (a stored object with a new status): the same result, walking the status only. Pruning works
        field by field from the root, so the status is pruned alone inside a root of its own."""
        if "status" not in obj:
            return []
        root = {"status": obj["status"]}
        removed: list[str] = []
        self._prune(root, self.schema, [], removed, embedded=True, root=True)
        self._prune_nulls(root, self.schema)
        if "status" in root:
            obj["status"] = root["status"]
        else:
            del obj["status"]
        return sorted(removed)

    def _prune(
        self, x: Any, s: dict | None, path: list[str], removed: list[str], *, embedded: bool, root: bool = False
    ) -> None:
        if isinstance(s, dict) and s.get("x-kubernetes-preserve-unknown-fields"):
            self._skip_prune(x, s, path, removed)
            return
        embedded = embedded or bool(isinstance(s, dict) and s.get("x-kubernetes-embedded-resource"))
        if isinstance(x, dict):
            if s is None:
                for k in list(x):
                    removed.append(_join(path, k))
                    del x[k]
                return
            props = s.get("properties") or {}
            addl = s.get("additionalProperties")
            for k in list(x):
                if embedded and k in META_FIELDS:
                    if not root and k == "metadata":
                        _prune_object_meta(x[k], _join(path, k), removed)
                    continue
                if k in props:
                    self._prune(x[k], props[k], path + [_seg(path, k)], removed, embedded=False)
                elif isinstance(addl, dict) or addl is True:
                    # additionalProperties: true keeps the key but knows nothing below it
                    self._prune(
                        x[k], addl if isinstance(addl, dict) else None, path + [_seg(path, k)], removed, embedded=False
                    )
                else:
                    removed.append(_join(path, k))
                    del x[k]
        elif isinstance(x, list):
            items = s.get("items") if isinstance(s, dict) else None
            for i, v in enumerate(x):
                self._prune(v, items if isinstance(items, dict) else None, path + [f"[{i}]"], removed, embedded=False)

    def _skip_prune(self, x: Any, s: dict, path: list[str], removed: list[str]) -> None:
        if isinstance(x, dict):
            props = s.get("properties") or {}
            addl = s.get("additionalProperties")
            for k, v in x.items():
                if s.get("x-kubernetes-embedded-resource") and k in META_FIELDS:
                    continue
                if k in props:
                    self._prune(v, props[k], path + [_seg(path, k)], removed, embedded=False)
                elif isinstance(addl, dict):
                    self._prune(v, addl, path + [_seg(path, k)], removed, embedded=False)
        elif isinstance(x, list):
            items = s.get("items")
            if isinstance(items, dict):
                for i, v in enumerate(x):
                    self._skip_prune(v, items, path + [f"[{i}]"], removed)

    def _prune_nulls(self, x: Any, s: dict | None) -> None:
        if isinstance(x, dict):
            for k in list(x):
                sub = _field_schema(s, k)
                if x[k] is None and sub is not None and not sub.get("nullable") and "default" not in sub:
                    del x[k]
                else:
                    self._prune_nulls(x[k], sub)
        elif isinstance(x, list):
            items = s.get("items") if isinstance(s, dict) and isinstance(s.get("items"), dict) else None
            for v in x:
                self._prune_nulls(v, items)

    # -- defaulting -----------------------------------------------------------------------------
    def apply_defaults(self, obj: dict) -> None:
        """Apply ``default`` values in place (parents must exist; defaults are deep-copied)."""
        _default(obj, self.schema, self._defaulting)

    def apply_status_defaults(self, obj: dict) -> None:
        """:meth:`apply_defaults` of an object whose every field but ``status`` is already defaulted by
        this schema: defaults only the status (and gives a missing status its default, if any)."""
        root = {"status": obj["status"]} if "status" in obj else {}
        _default(root, self.schema, self._defaulting)
        if "status" in root:
            obj["status"] = root["status"]

    # -- field lookup ---------------------------------------------------------------------------
    def field_exists(self, path: list[str]) -> bool:
        """Whether the schema declares ``path`` (``properties`` or ``additionalProperties``)."""
        current: Any = self.schema
        for part in path:
            if not isinstance(current, dict):
                return False
            if current.get("x-kubernetes-preserve-unknown-fields") and not current.get("properties"):
                return True
            props = current.get("properties") or {}
            if part in props:
                current = props[part]
            elif isinstance(current.get("additionalProperties"), dict):
                current = current["additionalProperties"]
            else:
                return False
        return True

    def schema_at(self, path: list[str]) -> dict | None:
        """The schema node for ``path`` (or None)."""
        current: Any = self.schema
        for part in path:
            if not isinstance(current, dict):
                return None
            props = current.get("properties") or {}
            if part in props:
                current = props[part]
            elif isinstance(current.get("additionalProperties"), dict):
                current = current["additionalProperties"]
            else:
                return None
        return current if isinstance(current, dict) else None

    # -- validation -----------------------------------------------------------------------------
    def validate(self, obj: dict, old: dict | None = None, *, status_only: bool = False) -> list[dict]:
        """Validate a custom resource (create when ``old`` is None, else update).

        ``status_only`` is the ``/status`` subresource: only ``status`` is schema-checked (messages
        relative to ``status``), CEL still runs over the whole object. On update, unchanged parts
        of the object are not re-checked against the schema (CRD validation ratcheting, on by
        default since 1.30); transition rules (``oldSelf``) run where old and new values correlate.
        """
        return to_causes(self.validate_errors(obj, old, status_only=status_only))

    def validate_errors(self, obj: dict, old: dict | None = None, *, status_only: bool = False) -> list[FieldError]:
        errors: list[FieldError] = []
        if status_only:
            status_schema = (self.schema.get("properties") or {}).get("status")
            if isinstance(obj, dict) and "status" in obj and isinstance(status_schema, dict):
                validator = OpenAPIValidator("status", self.server_minor)
                old_status = old.get("status", MISSING) if isinstance(old, dict) else MISSING
                _ratcheted_validate(validator, obj["status"], old_status, status_schema, "")
                errors.extend(validator.errors)
            # ratcheting: list-type violations already present in the old object are tolerated
            list_errors = _list_type_errors(None, self.schema, obj, self._list_typed)
            if list_errors and not (
                isinstance(old, dict) and _list_type_errors(None, self.schema, old, self._list_typed)
            ):
                errors.extend(list_errors)
        else:
            validator = OpenAPIValidator(None, self.server_minor)
            root_schema = self._resource_schema()
            body = self._resource_body(obj)
            old_body = self._resource_body(old) if isinstance(old, dict) else MISSING
            _ratcheted_validate(validator, body, old_body, root_schema, "")
            errors.extend(validator.errors)
            if old is None or not _list_type_errors(None, self.schema, old, self._list_typed):
                errors.extend(_list_type_errors(None, self.schema, obj, self._list_typed))
        if self._rules:
            if any(e.type in BLOCKING_TYPES for e in errors):
                errors.append(
                    invalid(
                        None,
                        None,
                        "some validation rules were not checked because the object was "
                        "invalid; correct the existing errors to complete validation",
                    )
                )
            else:
                errors.extend(
                    self._cel(None, obj, MISSING if old is None else old, self.schema, correlatable=old is not None)
                )
        return errors

    def _resource_schema(self) -> dict:
        """The root schema minus apiVersion/kind; metadata keeps only its name/generateName rules."""
        props = dict(self.schema.get("properties") or {})
        props.pop("apiVersion", None)
        props.pop("kind", None)
        meta = props.get("metadata")
        if isinstance(meta, dict):
            mprops = {k: v for k, v in (meta.get("properties") or {}).items() if k in ("name", "generateName")}
            props["metadata"] = {"type": "object", "properties": mprops} if mprops else {}
        root = dict(self.schema)
        root["properties"] = props
        root["required"] = [r for r in self.schema.get("required") or [] if r not in META_FIELDS]
        return root

    def _resource_body(self, obj: Any) -> Any:
        if not isinstance(obj, dict):
            return obj
        body = {k: v for k, v in obj.items() if k not in META_FIELDS}
        meta_schema = (self.schema.get("properties") or {}).get("metadata")
        if isinstance(meta_schema, dict) and meta_schema.get("properties") and isinstance(obj.get("metadata"), dict):
            body["metadata"] = {k: obj["metadata"][k] for k in ("name", "generateName") if k in obj["metadata"]}
        return body

    def _cel(self, path: str | None, value: Any, old: Any, schema: dict, *, correlatable: bool) -> list[FieldError]:
        if value is None or not isinstance(schema, dict):
            return []
        any_rule, any_transition = self._below.get(id(schema), (False, False))
        if not any_rule:
            return []
        errors: list[FieldError] = []
        old_value = old if correlatable and old is not None else MISSING
        unchanged = old_value is not MISSING and _deep_equal(value, old_value)
        if unchanged and not any_transition:
            # Ratcheting would suppress every failure below an unchanged value: nothing to evaluate.
            return []
        for compiled in self._rules.get(id(schema), ()):
            errors.extend(self._run_rule(path, value, old_value, schema, compiled, unchanged))
        if isinstance(value, list):
            items = schema.get("items")
            if isinstance(items, dict):
                old_by_key = _map_list_index(schema, old_value)
                for i, item in enumerate(value):
                    old_item = old_by_key(item)
                    errors.extend(
                        self._cel(index_path(path, i), item, old_item, items, correlatable=old_item is not MISSING)
                    )
        elif isinstance(value, dict):
            props = schema.get("properties") or {}
            addl = schema.get("additionalProperties")
            old_map = old_value if isinstance(old_value, dict) else {}
            if isinstance(addl, dict):
                for k, v in value.items():
                    if k in props:
                        continue
                    errors.extend(
                        self._cel(key_path(path, k), v, old_map.get(k, MISSING), addl, correlatable=k in old_map)
                    )
            for k, v in value.items():
                if k in props:
                    errors.extend(
                        self._cel(child_path(path, k), v, old_map.get(k, MISSING), props[k], correlatable=k in old_map)
                    )
        return errors

    def _run_rule(
        self, path: str | None, value: Any, old: Any, schema: dict, compiled: _CompiledRule, unchanged: bool
    ) -> list[FieldError]:
        type_name = _schema_type_name(schema)
        spec = compiled.spec
        if compiled.rule is None:
            return [invalid(path, type_name, f"rule compile error: {compiled.error}")]
        rule = compiled.rule
        optional_old_self = bool(spec.get("optionalOldSelf"))
        if rule.references_old_self and old is MISSING and not optional_old_self:
            return []  # transition rules run only when there is a comparable old value
        try:
            ok = rule.evaluate(value, old, optional_old_self=optional_old_self and rule.references_old_self)
        except CelEvalError as exc:
            error_string = _rule_error_string(spec)
            if exc.no_such_overload:
                return [
                    invalid(
                        path,
                        type_name,
                        f"'{exc}': call arguments did not match a supported operator, "
                        f"function or macro signature for rule: {error_string}",
                    )
                ]
            return [invalid(path, type_name, f"{exc} evaluating rule: {error_string}")]
        if ok:
            return []
        if unchanged and not rule.references_old_self:
            return []  # ratcheting: an unchanged value keeps passing (the real server only warns)
        field_path = child_path(path, compiled.field_path) if compiled.field_path else path
        detail = None
        if compiled.message_expression is not None:
            try:
                message = compiled.message_expression.evaluate_value(
                    value, old if rule.references_old_self else MISSING
                )
                text = from_cel(message)
                if isinstance(text, str) and text.strip() and "\n" not in text.strip():
                    detail = text.strip()
            except CelEvalError:
                detail = None  # the real server logs and falls back to the static message
        if detail is None:
            detail = _rule_message_or_default(spec)
        if self.server_minor >= 35:
            shown: Any = OMIT if type_name in ("object", "array") or isinstance(value, (dict, list)) else value
        else:
            shown = type_name
        return [_error_for_reason(field_path, shown, detail, spec.get("reason"))]


def _rule_error_string(spec: dict) -> str:
    message = (spec.get("message") or "").strip()
    return message if message else (spec.get("rule") or "").strip()


def _rule_message_or_default(spec: dict) -> str:
    message = (spec.get("message") or "").strip()
    return message if message else f"failed rule: {(spec.get('rule') or '').strip()}"


def _error_for_reason(path: str | None, value: Any, detail: str, reason: Any) -> FieldError:
    if reason == "FieldValueForbidden":
        return forbidden(path, detail)
    if reason == "FieldValueRequired":
        return required(path, detail)
    if reason == "FieldValueDuplicate":
        return duplicate(path, value)
    return invalid(path, value, detail)


def _seg(path: list[str], key: str) -> str:
    return ("." if path else "") + key


def _join(path: list[str], key: str) -> str:
    return "".join(path) + _seg(path, key)


def _field_schema(s: dict | None, key: str) -> dict | None:
    if not isinstance(s, dict):
        return None
    props = s.get("properties") or {}
    if key in props:
        return props[key]
    addl = s.get("additionalProperties")
    return addl if isinstance(addl, dict) else None


def _mark_subtrees(s: Any, marks: dict[int, bool], holds: Any) -> bool:
    """Whether ``holds(node)`` is true of schema ``s`` or of a node below it; records that in ``marks``
    for every node (by id)."""
    if not isinstance(s, dict):
        return False
    props = s.get("properties") or {}
    children = [p for p in props.values() if isinstance(p, dict)] if isinstance(props, dict) else []
    children += [s[key] for key in ("items", "additionalProperties") if isinstance(s.get(key), dict)]
    found = bool(holds(s))
    for child in children:
        found = _mark_subtrees(child, marks, holds) or found  # every child walked: each node gets its mark
    marks[id(s)] = found
    return found


def _default(x: Any, s: Any, below: dict[int, bool]) -> None:
    if not isinstance(s, dict) or not below.get(id(s), True):
        return
    if isinstance(x, dict):
        props = s.get("properties") or {}
        for k, prop in props.items():
            if not isinstance(prop, dict) or "default" not in prop or prop["default"] is None:
                continue
            if k not in x or (x[k] is None and not prop.get("nullable")):
                x[k] = copy.deepcopy(prop["default"])
        addl = s.get("additionalProperties")
        for k in list(x):
            if k in props:
                _default(x[k], props[k], below)
            elif isinstance(addl, dict):
                if x[k] is None and not addl.get("nullable") and addl.get("default") is not None:
                    x[k] = copy.deepcopy(addl["default"])
                _default(x[k], addl, below)
    elif isinstance(x, list):
        items = s.get("items")
        if isinstance(items, dict):
            for i in range(len(x)):
                if x[i] is None and not items.get("nullable") and items.get("default") is not None:
                    x[i] = copy.deepcopy(items["default"])
                _default(x[i], items, below)


def _deep_equal(a: Any, b: Any) -> bool:
    if type(a) is not type(b) and not (
        isinstance(a, (int, float))
        and isinstance(b, (int, float))
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return False
    return a == b


def _map_list_index(schema: dict, old: Any):
    """Correlation of old items for ``x-kubernetes-list-type: map`` lists (by key fields)."""
    keys = schema.get("x-kubernetes-list-map-keys")
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list) or not isinstance(keys, list):
        return lambda item: MISSING
    index: dict[str, Any] = {}
    for entry in old:
        if isinstance(entry, dict):
            index.setdefault(go_json([entry.get(k) for k in keys]), entry)

    def lookup(item: Any) -> Any:
        if not isinstance(item, dict):
            return MISSING
        return index.get(go_json([item.get(k) for k in keys]), MISSING)

    return lookup


def _ratcheted_validate(validator: OpenAPIValidator, value: Any, old: Any, schema: dict, name: str) -> None:
    """Schema validation with ratcheting: skip subtrees equal to their correlated old value."""
    if old is not MISSING and _deep_equal(value, old):
        return
    if old is MISSING or not isinstance(value, dict) or not isinstance(old, dict) or not isinstance(schema, dict):
        if (
            old is not MISSING
            and isinstance(value, list)
            and isinstance(old, list)
            and isinstance(schema, dict)
            and schema.get("x-kubernetes-list-type") == "map"
            and isinstance(schema.get("items"), dict)
        ):
            node_only = {k: v for k, v in schema.items() if k != "items"}
            validator.validate(value, node_only, name)
            lookup = _map_list_index(schema, old)
            for i, item in enumerate(value):
                _ratcheted_validate(validator, item, lookup(item), schema["items"], f"{name}[{i}]")
            return
        validator.validate(value, schema, name)
        return
    # Object whose old version exists: check this node's own constraints, recurse per key.
    node_only = {k: v for k, v in schema.items() if k not in ("properties", "additionalProperties", "required")}
    validator.validate(value, node_only, name)
    props = schema.get("properties") or {}
    addl = schema.get("additionalProperties")
    for key, item in value.items():
        if key in props:
            continue
        if isinstance(addl, dict):
            _ratcheted_validate(validator, item, old.get(key, MISSING), addl, f"{name}.{key}")
        elif addl is False:
            validator.validate({key: item}, {"type": "object", "additionalProperties": False}, name)
    for key, item in value.items():
        if key in props:
            _ratcheted_validate(validator, item, old.get(key, MISSING), props[key], f"{name}.{key}" if name else key)
    for key in schema.get("required") or []:
        if isinstance(key, str) and key not in value:
            validator._add(required(validator._path(f"{name}.{key}")))


def _list_type_errors(path: str | None, schema: Any, value: Any, marks: dict[int, bool]) -> list[FieldError]:
    """apiextensions ``ValidateListSetsAndMaps`` (uniqueness of set items / map-list keys). ``marks``:
    :func:`_mark_subtrees` of the list types (subtrees without one are skipped)."""
    errors: list[FieldError] = []
    if not isinstance(schema, dict) or not marks.get(id(schema), True):
        return errors
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for k, v in value.items():
                errors.extend(_list_type_errors(key_path(path, k), addl, v, marks))
        for k, v in value.items():
            if k in props:
                errors.extend(_list_type_errors(child_path(path, k), props[k], v, marks))
    elif isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            for i in _non_unique(value):
                errors.append(duplicate(index_path(path, i), value[i]))
        elif list_type == "map":
            errors.extend(_map_list_errors(path, schema, value))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                errors.extend(_list_type_errors(index_path(path, i), items, v, marks))
    return errors


def _scalar_key(value: Any) -> Any:
    # Go map keys distinguish int64(1), float64(1) and true; Python's 1 == 1.0 == True must not merge them.
    return (type(value).__name__, go_json(value) if isinstance(value, (dict, list)) else value)


def _non_unique(values: list) -> list[int]:
    seen: dict[Any, int] = {}
    out = []
    for i, v in enumerate(values):
        key = _scalar_key(v)
        times = seen.get(key, 0)
        seen[key] = times + 1
        if times == 1:
            out.append(i)
    return out


def _map_list_errors(path: str | None, schema: dict, value: list) -> list[FieldError]:
    for i, x in enumerate(value):
        if x is not None and not isinstance(x, dict):
            return [invalid(index_path(path, i), x, "must be an object for an array of list-type map")]
    if len(value) <= 1:
        return []
    keys = [k for k in schema.get("x-kubernetes-list-map-keys") or [] if isinstance(k, str)]
    errors = []
    if len(keys) == 1:
        key_field = keys[0]
        unspecified = ("<unspecified>",)
        key_values = [unspecified if x is None or key_field not in x else x[key_field] for x in value]
        seen: dict[Any, int] = {}
        for i, kv in enumerate(key_values):
            k = kv if kv is unspecified else _scalar_key(kv)
            times = seen.get(k, 0)
            seen[k] = times + 1
            if times == 1:
                errors.append(duplicate(index_path(path, i), {} if kv is unspecified else {key_field: kv}))
        return errors
    composite = []
    for x in value:
        entry = {}
        if isinstance(x, dict):
            for k in keys:
                if k in x:
                    entry[k] = x[k]
        composite.append(entry)
    for i in _non_unique(composite):
        errors.append(duplicate(index_path(path, i), composite[i]))
    return errors
