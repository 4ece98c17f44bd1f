"""The checks of a CustomResourceDefinition itself: names, versions, subresources, printer columns, and each
version's schema (structural rules, the keywords a CRD may use, defaults valid against their schema, CEL rules
that compile).

Why here: ``kubectl apply`` of a CRD fails with these messages on a real server, and a CRD this simulator
accepted but a cluster refuses would pass every test and fail in production. The field paths are the
internal API's (``spec.validation.openAPIV3Schema`` when every version has the same schema).

Contract: :func:`validate_crd` returns the Status causes of a CRD (none when valid),
:func:`validate_crd_errors` its field errors, for the server minor version given.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import re2

from controller.runtime.jsonfields import field_dict, field_str
from tfjob_sim.cel import CelCompileError, CelRule
from tfjob_sim.gotext import go_json
from tfjob_sim.schema_errors import (
    DEFAULT_SERVER_MINOR,
    TYPE_TEXT,
    FieldError,
    child_path,
    forbidden,
    index_path,
    invalid,
    key_path,
    not_supported,
    required,
    to_causes,
)
from tfjob_sim.schema_structural import META_FIELDS, StructuralSchema, normalize_field_path
from tfjob_sim.schema_values import OpenAPIValidator
from tfjob_sim.versions import keeps_optional_old_self

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + r")*"
_DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_RX_1123_SUB = re.compile("^" + _DNS1123_SUBDOMAIN + "$")
_RX_1035 = re.compile("^" + _DNS1035_LABEL + "$")


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    # Go appends "'<example>', " per example, joined by " or " (hence the double space).
    shown = "".join((" or " if i else "") + f"'{e}', " for i, e in enumerate(examples))
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _RX_1123_SUB.match(value):
        errs.append(
            _regex_error(
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                "'-' or '.', and must start and end with an alphanumeric character",
                _DNS1123_SUBDOMAIN,
                "example.com",
            )
        )
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _RX_1035.match(value):
        errs.append(
            _regex_error(
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start "
                "with an alphabetic character, and end with an alphanumeric character",
                _DNS1035_LABEL,
                "my-name",
                "abc-123",
            )
        )
    return errs


_OPENAPI_V3_TYPES = ["array", "boolean", "integer", "number", "object", "string"]
_PRINTER_TYPES = ["boolean", "date", "integer", "number", "string"]
_PRINTER_FORMATS = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"]
_VALIDATION_REASONS = ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"]
_ROOT_ALLOWED_WITH_STATUS = {
    "description",
    "type",
    "format",
    "title",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
}
_ROOT_ALLOWED_DISPLAY = (
    "[Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength "
    "MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties "
    "ExternalDocs Example XPreserveUnknownFields XValidations]"
)
_VALUE_VALIDATION_FORBIDDEN = [
    # (key, message) checked inside anyOf/allOf/oneOf/not (structural schema rules)
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
]


def _is_int_or_string_any_of(any_of: Any) -> bool:
    return (
        isinstance(any_of, list)
        and len(any_of) == 2
        and any_of[0] == {"type": "integer"}
        and any_of[1] == {"type": "string"}
    )


def _rule_value(spec: dict) -> dict:
    """Go json.Marshal of the internal (tag-less) ``apiextensions.ValidationRule`` struct."""
    reason = spec.get("reason")
    optional = spec.get("optionalOldSelf")
    return {
        "Rule": spec.get("rule", ""),
        "Message": spec.get("message", ""),
        "MessageExpression": spec.get("messageExpression", ""),
        "Reason": reason,
        "FieldPath": spec.get("fieldPath", ""),
        "OptionalOldSelf": optional,
    }


def _ordered_rule_json(spec: dict) -> _GoStruct:
    return _GoStruct(_rule_value(spec))


class _GoStruct(dict):
    """A dict rendered by :func:`go_json` in field order (Go structs keep declaration order)."""


def _go_json_struct(value: Any) -> str:
    if isinstance(value, _GoStruct):
        return "{" + ",".join(f"{go_json(k)}:{_go_json_struct(v)}" for k, v in value.items()) + "}"
    return go_json(value)


class _StructError(FieldError):
    """A FieldError whose BadValue is a Go struct (rendered in field order)."""

    def body(self) -> str:
        text = f"{TYPE_TEXT[self.type]}: {_go_json_struct(self.bad_value)}"
        return f"{text}: {self.detail}" if self.detail else text


# -- whether a schema is structural: functions of the schema alone, whatever the server version


def _structural(s: Any, level: str, path: str) -> list[FieldError]:
    """The structural-schema errors of node ``s`` at ``level`` (root, item or field) and below it."""
    errors: list[FieldError] = []
    if not isinstance(s, dict):
        return errors
    stype = s.get("type") or ""
    items = s.get("items")
    if stype == "array" and items is None:
        errors.append(required(child_path(path, "items"), "must be specified"))
    if isinstance(items, dict):
        errors.extend(_structural(items, "item", child_path(path, "items")))
    for k, v in (s.get("properties") or {}).items():
        errors.extend(_structural(v, "field", key_path(child_path(path, "properties"), k)))
    addl = s.get("additionalProperties")
    if addl is not None and addl is not False:
        if level == "root":
            errors.append(forbidden(child_path(path, "additionalProperties"), "must not be used at the root"))
        if isinstance(addl, dict):
            errors.extend(_structural(addl, "field", child_path(path, "additionalProperties")))
    if s.get("x-kubernetes-int-or-string") and s.get("x-kubernetes-preserve-unknown-fields"):
        errors.append(
            invalid(
                child_path(path, "x-kubernetes-preserve-unknown-fields"),
                True,
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    if s.get("x-kubernetes-int-or-string") and s.get("x-kubernetes-embedded-resource"):
        errors.append(
            invalid(
                child_path(path, "x-kubernetes-embedded-resource"),
                True,
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    skip_any_of = _is_int_or_string_any_of(s.get("anyOf"))
    all_of = s.get("allOf")
    skip_first_all_of = (
        isinstance(all_of, list)
        and all_of
        and isinstance(all_of[0], dict)
        and _is_int_or_string_any_of(all_of[0].get("anyOf"))
    )
    errors.extend(_value_validation(s, skip_any_of, bool(skip_first_all_of), path, nested=False))
    embedded = bool(s.get("x-kubernetes-embedded-resource"))
    check_meta = level == "root" or embedded
    if embedded and stype != "object":
        if not stype:
            errors.append(
                required(child_path(path, "type"), "must be object if x-kubernetes-embedded-resource is true")
            )
        else:
            errors.append(
                invalid(child_path(path, "type"), stype, "must be object if x-kubernetes-embedded-resource is true")
            )
    elif not stype and not s.get("x-kubernetes-int-or-string") and not s.get("x-kubernetes-preserve-unknown-fields"):
        what = {"root": "at the root", "item": "for specified array items", "field": "for specified object fields"}[
            level
        ]
        errors.append(required(child_path(path, "type"), f"must not be empty {what}"))
    if embedded and addl is not None and addl is not False:
        errors.append(
            forbidden(
                child_path(path, "additionalProperties"),
                "must not be used if x-kubernetes-embedded-resource is set",
            )
        )
    if level == "root" and stype and stype != "object":
        errors.append(invalid(child_path(path, "type"), stype, "must be object at the root"))
    props = s.get("properties") or {}
    for meta_field in ("kind", "apiVersion"):
        if meta_field in props and check_meta and (props[meta_field] or {}).get("type") != "string":
            errors.append(
                invalid(
                    child_path(key_path(child_path(path, "properties"), meta_field), "type"),
                    (props[meta_field] or {}).get("type", ""),
                    "must be string",
                )
            )
    if "metadata" in props:
        meta = props["metadata"] if isinstance(props["metadata"], dict) else {}
        mpath = key_path(child_path(path, "properties"), "metadata")
        if check_meta and meta.get("type") != "object":
            errors.append(invalid(child_path(mpath, "type"), meta.get("type", ""), "must be object"))
        if level == "root":
            rest = {k: v for k, v in meta.items() if k not in ("type", "default", "description")}
            mprops = rest.pop("properties", None) or {}
            if set(mprops) - {"name", "generateName"} or rest:
                errors.append(
                    forbidden(
                        mpath,
                        "must not specify anything other than name and generateName, but "
                        "metadata is implicitly specified",
                    )
                )
    if embedded and not s.get("x-kubernetes-preserve-unknown-fields") and not props:
        errors.append(
            required(
                child_path(path, "properties"),
                "must not be empty if x-kubernetes-embedded-resource "
                "is true without x-kubernetes-preserve-unknown-fields",
            )
        )
    return errors


def _value_validation(
    s: dict, skip_any_of: bool, skip_first_all_of: bool, path: str, *, nested: bool
) -> list[FieldError]:
    """The errors of the value validations (anyOf, allOf, oneOf, not) below ``s``, and of its pattern."""
    errors: list[FieldError] = []
    if not skip_any_of:
        for i, sub in enumerate(s.get("anyOf") or []):
            errors.extend(_nested(sub, False, index_path(child_path(path, "anyOf"), i)))
    for i, sub in enumerate(s.get("allOf") or []):
        errors.extend(_nested(sub, skip_first_all_of and i == 0, index_path(child_path(path, "allOf"), i)))
    for i, sub in enumerate(s.get("oneOf") or []):
        errors.extend(_nested(sub, False, index_path(child_path(path, "oneOf"), i)))
    if isinstance(s.get("not"), dict):
        errors.extend(_nested(s["not"], False, child_path(path, "not")))
    pattern = s.get("pattern")
    if isinstance(pattern, str) and pattern:
        try:
            re2.compile(pattern)
        except re2.error as exc:
            errors.append(
                invalid(child_path(path, "pattern"), pattern, f"must be a valid regular expression, but isn't: {exc}")
            )
    return errors


def _nested(v: Any, skip_any_of: bool, path: str) -> list[FieldError]:
    """The errors of a schema nested in a value validation, and of its items and properties."""
    if not isinstance(v, dict):
        return []
    errors = _value_validation(v, skip_any_of, False, path, nested=True)
    if isinstance(v.get("items"), dict):
        errors.extend(_nested(v["items"], False, child_path(path, "items")))
    for k, sub in (v.get("properties") or {}).items():
        errors.extend(_nested(sub, False, key_path(child_path(path, "properties"), k)))
    for key, message in _VALUE_VALIDATION_FORBIDDEN:
        if key == "additionalProperties":
            if v.get(key) is not None:
                errors.append(forbidden(child_path(path, key), message))
            continue
        if v.get(key) not in (None, False, "", [], {}):
            errors.append(forbidden(child_path(path, key), message))
    if "metadata" in (v.get("properties") or {}):
        errors.append(
            forbidden(key_path(child_path(path, "properties"), "metadata"), "must not be specified in a nested context")
        )
    return errors


# defaulting.ValidateDefaults ----------------------------------------------------------------


class _CRDSchemaChecker:
    """``ValidateCustomResourceDefinitionOpenAPISchema`` + structural + defaults + CEL compile."""

    def __init__(self, minor: int) -> None:
        self.minor = minor

    def check_validation(self, schema: Any, path: str, status_enabled: bool) -> list[FieldError]:
        errors: list[FieldError] = []
        if not isinstance(schema, dict):
            return [invalid(child_path(path, "openAPIV3Schema"), "", "must be an object")]
        root = child_path(path, "openAPIV3Schema")
        if status_enabled:
            for key, value in schema.items():
                if value in (None, False, "", [], {}, 0):
                    continue
                if key == "type":
                    if value != "object":
                        errors.append(
                            invalid(
                                child_path(path, "openAPIV3Schema.type"),
                                value,
                                'only "object" is allowed as the type at the root of the schema if the '
                                "status subresource is enabled",
                            )
                        )
                        break
                    continue
                if key not in _ROOT_ALLOWED_WITH_STATUS:
                    errors.append(
                        invalid(
                            root,
                            schema,
                            f"only {_ROOT_ALLOWED_DISPLAY} fields are allowed at the root "
                            "of the schema if the status subresource is enabled",
                        )
                    )
                    break
        if schema.get("nullable"):
            errors.append(
                forbidden(child_path(path, "openAPIV3Schema.nullable"), "nullable cannot be true at the root")
            )

        structural = sorted(_structural(schema, "root", root), key=lambda e: e.error())
        cel_ok = False
        if structural:
            errors.extend(structural)
        else:
            default_errors = self._defaults(schema, root, schema, inside_meta=False, is_root=True)
            errors.extend(default_errors)
            cel_ok = not default_errors
        schema_errors, cel_errors = self._openapi(
            schema,
            root,
            is_root=True,
            allow_defaults=True,
            defaults_reason="",
            inside_meta=False,
            uncorrelatable=None,
            cel_ok=cel_ok,
            rule_is_root=True,
        )
        errors.extend(schema_errors)
        errors.extend(cel_errors)
        return errors

    # structural.ValidateStructural --------------------------------------------------------------
    def _defaults(self, s: Any, path: str, root: dict, *, inside_meta: bool, is_root: bool) -> list[FieldError]:
        errors: list[FieldError] = []
        if not isinstance(s, dict):
            return errors
        if s.get("x-kubernetes-embedded-resource"):
            inside_meta = False
        if "default" in s and s["default"] is not None and not inside_meta:
            default = s["default"]
            pruned = copy.deepcopy(default)
            node = StructuralSchema.__new__(StructuralSchema)
            node.schema, node.server_minor, node._rules = s, self.minor, {}
            if isinstance(pruned, (dict, list)):
                node._prune(pruned, s, [], [], embedded=bool(s.get("x-kubernetes-embedded-resource")))
            if pruned != default:
                errors.append(invalid(child_path(path, "default"), default, "must not have unknown fields"))
            validator = OpenAPIValidator(child_path(path, "default"), self.minor)
            validator.validate(default, s, "")
            if validator.errors:
                errors.extend(validator.errors)
            else:
                checker = StructuralSchema(s, server_minor=self.minor, _resource_root=is_root)
                cel_errors = checker._cel(child_path(path, "default"), default, default, s, correlatable=True)
                errors.extend(cel_errors)
        if isinstance(s.get("items"), dict):
            errors.extend(
                self._defaults(s["items"], child_path(path, "items"), root, inside_meta=inside_meta, is_root=False)
            )
        for k, sub in (s.get("properties") or {}).items():
            sub_meta = inside_meta or ((is_root or s.get("x-kubernetes-embedded-resource")) and k in META_FIELDS)
            errors.extend(
                self._defaults(
                    sub, key_path(child_path(path, "properties"), k), root, inside_meta=bool(sub_meta), is_root=False
                )
            )
        return errors

    # ValidateCustomResourceDefinitionOpenAPISchema ---------------------------------------------
    def _openapi(
        self,
        s: Any,
        path: str,
        *,
        is_root: bool,
        allow_defaults: bool,
        defaults_reason: str,
        inside_meta: bool,
        uncorrelatable: str | None,
        cel_ok: bool,
        rule_is_root: bool,
    ) -> tuple[list[FieldError], list[FieldError]]:
        schema_errors: list[FieldError] = []
        cel_errors: list[FieldError] = []
        if not isinstance(s, dict):
            if s is not None:  # the apiserver cannot even decode a non-object where a schema belongs
                schema_errors.append(invalid(path, s, "must be a schema object"))
            return schema_errors, cel_errors
        stype = s.get("type") or ""
        if stype and stype not in _OPENAPI_V3_TYPES:
            schema_errors.append(not_supported(child_path(path, "type"), stype, _OPENAPI_V3_TYPES))
        if "default" in s and s["default"] is not None and not allow_defaults:
            detail = "must not be set" + (f" {defaults_reason}" if defaults_reason else "")
            schema_errors.append(forbidden(child_path(path, "default"), detail))
        for key, label in (
            ("id", "id is not supported"),
            ("additionalItems", "additionalItems is not supported"),
            ("patternProperties", "patternProperties is not supported"),
            ("definitions", "definitions is not supported"),
            ("dependencies", "dependencies is not supported"),
            ("$ref", "$ref is not supported"),
        ):
            if s.get(key) not in (None, "", {}):
                schema_errors.append(forbidden(child_path(path, key), label))
        if stype == "null":
            schema_errors.append(
                forbidden(child_path(path, "type"), "type cannot be set to null, use nullable as an alternative")
            )
        if isinstance(s.get("items"), list):
            schema_errors.append(forbidden(child_path(path, "items"), "items must be a schema object and not an array"))
        if inside_meta and s.get("x-kubernetes-embedded-resource"):
            schema_errors.append(
                forbidden(
                    child_path(path, "x-kubernetes-embedded-resource"), "must not be used inside of resource meta"
                )
            )
        if s.get("uniqueItems"):
            schema_errors.append(
                forbidden(
                    child_path(path, "uniqueItems"),
                    "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
                )
            )

        def check_child(sub: Any, sub_path: str, **context: Any) -> None:
            """Checks a nested schema in this one's context but for ``context``; adds its errors to ours."""
            inherited = {
                "is_root": False,
                "allow_defaults": allow_defaults,
                "defaults_reason": defaults_reason,
                "inside_meta": inside_meta,
                "uncorrelatable": uncorrelatable,
                "cel_ok": cel_ok,
                "rule_is_root": False,
            }
            se, ce = self._openapi(sub, sub_path, **{**inherited, **context})
            schema_errors.extend(se)
            cel_errors.extend(ce)

        addl = s.get("additionalProperties")
        props = s.get("properties") or {}
        if addl is not None:
            if props and (addl is False or isinstance(addl, dict)):
                schema_errors.append(
                    forbidden(
                        child_path(path, "additionalProperties"),
                        "additionalProperties and properties are mutual exclusive",
                    )
                )
            if isinstance(addl, dict):
                no_defaults = "inside additionalProperties applying to object metadata"
                meta = {"allow_defaults": False, "defaults_reason": no_defaults} if inside_meta else {}
                check_child(addl, child_path(path, "additionalProperties"), **meta)
        map_type = s.get("x-kubernetes-map-type")
        for prop, sub in props.items():
            sub_uncorrelatable = uncorrelatable
            if map_type not in (None, "granular", "atomic") and sub_uncorrelatable is None:
                sub_uncorrelatable = path
            sub_meta, sub_allow, sub_reason = inside_meta, allow_defaults, defaults_reason
            if (is_root or s.get("x-kubernetes-embedded-resource")) and prop in META_FIELDS:
                sub_meta = True
                if is_root:
                    sub_allow, sub_reason = False, f"in top-level {prop}"
            check_child(
                sub,
                key_path(child_path(path, "properties"), prop),
                allow_defaults=sub_allow,
                defaults_reason=sub_reason,
                inside_meta=sub_meta,
                uncorrelatable=sub_uncorrelatable,
                rule_is_root=bool(isinstance(sub, dict) and sub.get("x-kubernetes-embedded-resource")),
            )
        # Rules under not/allOf/oneOf/anyOf are checked but never compiled (so they add no CEL errors).
        if isinstance(s.get("not"), dict):
            check_child(s["not"], child_path(path, "not"), cel_ok=False)
        for junctor in ("allOf", "oneOf", "anyOf"):
            for i, sub in enumerate(s.get(junctor) or []):
                check_child(sub, index_path(child_path(path, junctor), i), cel_ok=False)
        items = s.get("items")
        if isinstance(items, dict):
            sub_uncorrelatable = uncorrelatable
            if s.get("x-kubernetes-list-type") != "map" and sub_uncorrelatable is None:
                sub_uncorrelatable = path
            check_child(
                items,
                child_path(path, "items"),
                uncorrelatable=sub_uncorrelatable,
                rule_is_root=bool(items.get("x-kubernetes-embedded-resource")),
            )
        if s.get("x-kubernetes-preserve-unknown-fields") is False:
            schema_errors.append(
                invalid(child_path(path, "x-kubernetes-preserve-unknown-fields"), False, "must be true or undefined")
            )
        if map_type is not None and stype != "object":
            if not stype:
                schema_errors.append(
                    required(child_path(path, "type"), "must be object if x-kubernetes-map-type is specified")
                )
            else:
                schema_errors.append(
                    invalid(child_path(path, "type"), stype, "must be object if x-kubernetes-map-type is specified")
                )
        if map_type is not None and map_type not in ("atomic", "granular"):
            schema_errors.append(
                not_supported(child_path(path, "x-kubernetes-map-type"), map_type, ["atomic", "granular"])
            )
        list_type = s.get("x-kubernetes-list-type")
        if list_type is not None and stype != "array":
            if not stype:
                schema_errors.append(
                    required(child_path(path, "type"), "must be array if x-kubernetes-list-type is specified")
                )
            else:
                schema_errors.append(
                    invalid(child_path(path, "type"), stype, "must be array if x-kubernetes-list-type is specified")
                )
        elif list_type == "set" and isinstance(items, dict):
            if items.get("type") == "array" and items.get("x-kubernetes-list-type") not in (None, "atomic"):
                schema_errors.append(
                    invalid(
                        child_path(child_path(path, "items"), "x-kubernetes-list-type"),
                        items.get("x-kubernetes-list-type"),
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    )
                )
            if items.get("type") == "object" and items.get("x-kubernetes-map-type") != "atomic":
                schema_errors.append(
                    invalid(
                        child_path(child_path(path, "items"), "x-kubernetes-map-type"),
                        list_type,
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    )
                )
        if list_type is not None and list_type not in ("atomic", "set", "map"):
            schema_errors.append(
                not_supported(child_path(path, "x-kubernetes-list-type"), list_type, ["atomic", "set", "map"])
            )
        map_keys = s.get("x-kubernetes-list-map-keys") or []
        if map_keys:
            if list_type is None:
                schema_errors.append(
                    required(
                        child_path(path, "x-kubernetes-list-type"),
                        "must be map if x-kubernetes-list-map-keys is non-empty",
                    )
                )
            elif list_type != "map":
                schema_errors.append(
                    invalid(
                        child_path(path, "x-kubernetes-list-type"),
                        list_type,
                        "must be map if x-kubernetes-list-map-keys is non-empty",
                    )
                )
        if list_type == "map":
            if not map_keys:
                schema_errors.append(
                    required(
                        child_path(path, "x-kubernetes-list-map-keys"),
                        "must not be empty if x-kubernetes-list-type is map",
                    )
                )
            if items is None:
                schema_errors.append(
                    required(child_path(path, "items"), "must have a schema if x-kubernetes-list-type is map")
                )
            if isinstance(items, dict) and items.get("type") != "object":
                schema_errors.append(
                    invalid(
                        child_path(child_path(path, "items"), "type"),
                        items.get("type", ""),
                        "must be object if parent array's x-kubernetes-list-type is map",
                    )
                )
            if isinstance(items, dict) and items.get("type") == "object":
                seen: set[str] = set()
                iprops = items.get("properties") or {}
                for k in map_keys:
                    if k in iprops:
                        if isinstance(iprops[k], dict) and iprops[k].get("type") in ("array", "object"):
                            schema_errors.append(
                                invalid(
                                    child_path(
                                        key_path(child_path(child_path(path, "items"), "properties"), k), "type"
                                    ),
                                    items.get("type"),
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                )
                            )
                    else:
                        schema_errors.append(
                            invalid(
                                child_path(path, "x-kubernetes-list-map-keys"),
                                map_keys,
                                "entries must all be names of item properties",
                            )
                        )
                    if k in seen:
                        schema_errors.append(
                            invalid(
                                child_path(path, "x-kubernetes-list-map-keys"),
                                map_keys,
                                "must not contain duplicate entries",
                            )
                        )
                    seen.add(k)
        if list_type in ("set", "map") and isinstance(items, dict):
            if items.get("nullable"):
                schema_errors.append(
                    forbidden(
                        child_path(child_path(path, "items"), "nullable"),
                        f"cannot be nullable when x-kubernetes-list-type is {list_type}",
                    )
                )
            if list_type == "map":
                req = set(items.get("required") or [])
                for k in map_keys:
                    ks = (items.get("properties") or {}).get(k)
                    if not isinstance(ks, dict):
                        continue
                    kpath = key_path(child_path(child_path(path, "items"), "properties"), k)
                    if k not in req and ks.get("default") is None:
                        schema_errors.append(
                            required(
                                child_path(kpath, "default"),
                                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                            )
                        )
                    if ks.get("nullable"):
                        schema_errors.append(
                            forbidden(
                                child_path(kpath, "nullable"),
                                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                            )
                        )
        rules = s.get("x-kubernetes-validations")
        if isinstance(rules, list) and rules:
            vpath = child_path(path, "x-kubernetes-validations")
            for i, spec in enumerate(rules):
                rpath = index_path(vpath, i)
                if not isinstance(spec, dict):
                    schema_errors.append(invalid(rpath, spec, "must be an object"))
                    continue
                rule = field_str(spec, "rule")
                message = field_str(spec, "message")
                if not rule.strip():
                    schema_errors.append(required(child_path(rpath, "rule"), "rule is not specified"))
                elif message and not message.strip():
                    schema_errors.append(
                        invalid(child_path(rpath, "message"), message, "must be non-empty if specified")
                    )
                elif re.search(r"[\n\r]", message.strip()):
                    schema_errors.append(invalid(child_path(rpath, "message"), message, "must not contain line breaks"))
                elif re.search(r"[\n\r]", rule.strip()) and not message.strip():
                    schema_errors.append(
                        required(child_path(rpath, "message"), "message must be specified if rule contains line breaks")
                    )
                mexpr = spec.get("messageExpression")
                if isinstance(mexpr, str) and mexpr and not mexpr.strip():
                    schema_errors.append(
                        required(
                            child_path(rpath, "messageExpression"), "messageExpression must be non-empty if specified"
                        )
                    )
                reason = spec.get("reason")
                if reason is not None and reason not in _VALIDATION_REASONS:
                    schema_errors.append(not_supported(child_path(rpath, "reason"), reason, _VALIDATION_REASONS))
                fp = spec.get("fieldPath")
                if isinstance(fp, str) and fp:
                    if not fp.strip():
                        schema_errors.append(
                            invalid(child_path(rpath, "fieldPath"), fp, "must be non-empty if specified")
                        )
                    if re.search(r"[\n\r]", fp):
                        schema_errors.append(
                            invalid(child_path(rpath, "fieldPath"), fp, "must not contain line breaks")
                        )
                    try:
                        normalize_field_path(fp, s)
                    except ValueError:
                        schema_errors.append(invalid(child_path(rpath, "fieldPath"), fp, "must be a valid path"))
            if not schema_errors and cel_ok:
                cel_errors.extend(self._compile_rules(s, rules, vpath, uncorrelatable, rule_is_root))
        return schema_errors, cel_errors

    def _compile_rules(
        self, s: dict, rules: list, vpath: str, uncorrelatable: str | None, is_root: bool
    ) -> list[FieldError]:
        errors: list[FieldError] = []
        for i, spec in enumerate(rules):
            rpath = index_path(vpath, i)
            optional = spec.get("optionalOldSelf") is True and keeps_optional_old_self(self.minor)
            try:
                compiled = CelRule(spec.get("rule", ""), s, is_root=is_root, optional_old_self=optional)
            except CelCompileError as exc:
                errors.append(
                    _StructError("FieldValueInvalid", child_path(rpath, "rule"), _ordered_rule_json(spec), str(exc))
                )
                compiled = None
            mexpr = spec.get("messageExpression")
            if isinstance(mexpr, str) and mexpr.strip():
                try:
                    CelRule(mexpr, s, is_root=is_root)
                except CelCompileError as exc:
                    detail = str(exc).replace("compilation failed:", "messageExpression compilation failed:", 1)
                    errors.append(
                        _StructError(
                            "FieldValueInvalid",
                            child_path(rpath, "messageExpression"),
                            _ordered_rule_json(spec),
                            detail,
                        )
                    )
            if compiled is None:
                continue
            if compiled.references_old_self:
                if uncorrelatable is not None:
                    errors.append(
                        invalid(
                            child_path(rpath, "rule"),
                            spec.get("rule", ""),
                            f"oldSelf cannot be used on the uncorrelatable portion of the schema within {uncorrelatable}",
                        )
                    )
            elif spec.get("optionalOldSelf") is not None:
                errors.append(
                    invalid(
                        child_path(rpath, "optionalOldSelf"),
                        bool(spec.get("optionalOldSelf")),
                        "may not be set if oldSelf is not used in rule",
                    )
                )
        return errors


def _lift_identical(versions: list[dict], key: str) -> tuple[bool, Any]:
    """v1 → internal conversion: identical per-version fields move to the top level."""
    if not versions:
        return False, None
    first = versions[0].get(key)
    if all(v.get(key) == first for v in versions):
        return True, first
    return False, None


def validate_crd(crd: dict, *, server_minor: int = DEFAULT_SERVER_MINOR) -> list[dict]:
    """Validate an ``apiextensions.k8s.io/v1`` CustomResourceDefinition for create.

    Returns the Status causes (``[]`` when valid). Covered: metadata.name (DNS subdomain and
    ``<plural>.<group>``), spec.group, names, scope, versions (names, exactly one storage version,
    schemas present), structural schema rules, defaults (valid and pruned), OpenAPI restrictions,
    list/map types, x-kubernetes-validations (static checks and CEL compilation), subresources
    (scale paths), printer columns (type/format/jsonPath), preserveUnknownFields.
    """
    return to_causes(validate_crd_errors(crd, server_minor=server_minor))


def validate_crd_errors(crd: dict, *, server_minor: int = DEFAULT_SERVER_MINOR) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(crd, dict):
        return [invalid(None, "", "CustomResourceDefinition must be an object")]
    meta = field_dict(crd, "metadata")
    spec = field_dict(crd, "spec")
    names = field_dict(spec, "names")
    group = field_str(spec, "group")
    plural = field_str(names, "plural")

    # metadata (ValidateObjectMeta with the CRD name function)
    name = field_str(meta, "name")
    if not name:
        if not meta.get("generateName"):
            errors.append(required("metadata.name", "name or generateName is required"))
    else:
        for msg in is_dns1123_subdomain(name) + (
            [] if name == f"{plural}.{group}" else ['must be spec.names.plural+"."+spec.group']
        ):
            errors.append(invalid("metadata.name", name, msg))
    if meta.get("namespace"):
        errors.append(forbidden("metadata.namespace", "not allowed on this type"))

    # spec.group / scope
    if not group:
        errors.append(required("spec.group"))
    elif is_dns1123_subdomain(group):
        errors.append(invalid("spec.group", group, ",".join(is_dns1123_subdomain(group))))
    elif len(group.split(".")) < 2:
        errors.append(invalid("spec.group", group, "should be a domain with at least one dot"))
    scope = field_str(spec, "scope")
    if not scope:
        errors.append(required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errors.append(not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))

    versions = (
        [v for v in spec.get("versions") or [] if isinstance(v, dict)] if isinstance(spec.get("versions"), list) else []
    )
    schema_lifted, lifted_schema = _lift_identical(versions, "schema")
    sub_lifted, lifted_sub = _lift_identical(versions, "subresources")
    col_lifted, lifted_cols = _lift_identical(versions, "additionalPrinterColumns")
    top_validation = lifted_schema if schema_lifted else None
    if top_validation is None or not isinstance(top_validation, dict) or top_validation.get("openAPIV3Schema") is None:
        for i, v in enumerate(versions):
            s = v.get("schema")
            if not isinstance(s, dict) or s.get("openAPIV3Schema") is None:
                errors.append(required(f"spec.versions[{i}].schema.openAPIV3Schema"))

    checker = _CRDSchemaChecker(server_minor)

    def status_enabled(subresources: Any) -> bool:
        return isinstance(subresources, dict) and subresources.get("status") is not None

    storage_count = 0
    seen_names: set[str] = set()
    unique = True
    for i, v in enumerate(versions):
        vpath = f"spec.versions[{i}]"
        vname = field_str(v, "name")
        if v.get("storage"):
            storage_count += 1
        if vname in seen_names:
            unique = False
        seen_names.add(vname)
        dns = is_dns1035_label(vname)
        if dns:
            errors.append(invalid(f"{vpath}.name", vname, ",".join(dns)))
        if v.get("deprecationWarning") is not None and not v.get("deprecated"):
            errors.append(
                invalid(
                    f"{vpath}.deprecationWarning",
                    v.get("deprecationWarning"),
                    "can only be set for deprecated versions",
                )
            )
        subresources = lifted_sub if sub_lifted else v.get("subresources")
        if not schema_lifted and isinstance(v.get("schema"), dict) and v["schema"].get("openAPIV3Schema") is not None:
            errors.extend(
                checker.check_validation(
                    v["schema"]["openAPIV3Schema"], f"{vpath}.schema", status_enabled(subresources)
                )
            )
        if not sub_lifted:
            errors.extend(_check_subresources(v.get("subresources"), f"{vpath}.subresources"))
        if not col_lifted:
            for j, col in enumerate(v.get("additionalPrinterColumns") or []):
                errors.extend(_check_column(col, f"{vpath}.additionalPrinterColumns[{j}]"))
    if not unique:
        errors.append(invalid("spec.versions", versions, "must contain unique version names"))
    if storage_count != 1:
        errors.append(invalid("spec.versions", versions, "must have exactly one version marked as storage version"))
    if versions:
        first = field_str(versions[0], "name")
        dns = is_dns1035_label(first)
        if dns:
            errors.append(invalid("spec.version", first, ",".join(dns)))

    for field_name in ("plural", "singular", "kind", "listKind"):
        value = names.get(field_name)
        if not isinstance(value, str) or not value:
            errors.append(required(f"spec.names.{field_name}"))
    errors.extend(_check_names(names, "spec.names"))

    any_status = any(status_enabled(lifted_sub if sub_lifted else v.get("subresources")) for v in versions)
    if schema_lifted and isinstance(lifted_schema, dict) and lifted_schema.get("openAPIV3Schema") is not None:
        errors.extend(checker.check_validation(lifted_schema["openAPIV3Schema"], "spec.validation", any_status))
    if sub_lifted:
        errors.extend(_check_subresources(lifted_sub, "spec.subresources"))
    if col_lifted:
        for j, col in enumerate(lifted_cols or []):
            errors.extend(_check_column(col, f"spec.additionalPrinterColumns[{j}]"))

    conversion = spec.get("conversion")
    if isinstance(conversion, dict):
        strategy = conversion.get("strategy")
        if strategy not in (None, "None", "Webhook"):
            errors.append(not_supported("spec.conversion.strategy", strategy, ["None", "Webhook"]))
        if strategy == "Webhook" and not isinstance(conversion.get("webhook"), dict):
            errors.append(required("spec.conversion.webhook", "required when strategy is set to Webhook"))
    if spec.get("preserveUnknownFields") is True:
        errors.append(
            invalid(
                "spec.preserveUnknownFields",
                True,
                "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
            )
        )
    return errors


def _check_names(names: dict, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for field_name in ("plural", "singular"):
        value = names.get(field_name)
        if isinstance(value, str) and value and is_dns1035_label(value):
            errors.append(invalid(f"{path}.{field_name}", value, ",".join(is_dns1035_label(value))))
    for field_name in ("kind", "listKind"):
        value = names.get(field_name)
        if isinstance(value, str) and value and is_dns1035_label(value.lower()):
            errors.append(
                invalid(
                    f"{path}.{field_name}",
                    value,
                    "may have mixed case, but should otherwise match: " + ",".join(is_dns1035_label(value.lower())),
                )
            )
    for i, short in enumerate(names.get("shortNames") or []):
        if not isinstance(short, str) or is_dns1035_label(short):
            errors.append(invalid(f"{path}.shortNames[{i}]", short, ",".join(is_dns1035_label(str(short)))))
    kind, list_kind = names.get("kind"), names.get("listKind")
    if kind and kind == list_kind:
        errors.append(invalid(f"{path}.listKind", list_kind, "kind and listKind may not be the same"))
    for i, category in enumerate(names.get("categories") or []):
        if not isinstance(category, str) or is_dns1035_label(category):
            errors.append(invalid(f"{path}.categories[{i}]", category, ",".join(is_dns1035_label(str(category)))))
    return errors


def _simple_json_path_errors(value: str, path: str) -> list[FieldError]:
    if not value:
        return [invalid(path, value, "must not be empty")]
    if value[0] != ".":
        return [invalid(path, value, "must be a simple json path starting with .")]
    return []


def _check_subresources(subresources: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(subresources, dict):
        return errors
    scale = subresources.get("scale")
    if not isinstance(scale, dict):
        return errors
    spec_path = scale.get("specReplicasPath") or ""
    if not spec_path:
        errors.append(required(f"{path}.scale.specReplicasPath"))
    else:
        errs = _simple_json_path_errors(spec_path, f"{path}.scale.specReplicasPath")
        if errs:
            errors.extend(errs)
        elif not spec_path.startswith(".spec."):
            errors.append(invalid(f"{path}.scale.specReplicasPath", spec_path, "should be a json path under .spec"))
    status_path = scale.get("statusReplicasPath") or ""
    if not status_path:
        errors.append(required(f"{path}.scale.statusReplicasPath"))
    else:
        errs = _simple_json_path_errors(status_path, f"{path}.scale.statusReplicasPath")
        if errs:
            errors.extend(errs)
        elif not status_path.startswith(".status."):
            errors.append(
                invalid(f"{path}.scale.statusReplicasPath", status_path, "should be a json path under .status")
            )
    selector = scale.get("labelSelectorPath")
    if isinstance(selector, str) and selector:
        errs = _simple_json_path_errors(selector, f"{path}.scale.labelSelectorPath")
        if errs:
            errors.extend(errs)
        elif not selector.startswith(".spec.") and not selector.startswith(".status."):
            errors.append(
                invalid(
                    f"{path}.scale.labelSelectorPath", selector, "should be a json path under either .spec or .status"
                )
            )
    return errors


def _check_column(col: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if not isinstance(col, dict):
        return [invalid(path, col, "must be an object")]
    if not col.get("name"):
        errors.append(required(f"{path}.name"))
    ctype = col.get("type") or ""
    if not ctype:
        errors.append(required(f"{path}.type", f"must be one of {','.join(_PRINTER_TYPES)}"))
    elif ctype not in _PRINTER_TYPES:
        errors.append(invalid(f"{path}.type", ctype, f"must be one of {','.join(_PRINTER_TYPES)}"))
    fmt = col.get("format") or ""
    if fmt and fmt not in _PRINTER_FORMATS:
        errors.append(invalid(f"{path}.format", fmt, f"must be one of {','.join(_PRINTER_FORMATS)}"))
    json_path = col.get("jsonPath") or ""
    if not json_path:
        errors.append(required(f"{path}.JSONPath"))
    else:
        errors.extend(_simple_json_path_errors(json_path, f"{path}.JSONPath"))
    return errors
