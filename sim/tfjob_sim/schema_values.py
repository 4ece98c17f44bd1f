"""The OpenAPI value validator: a value against one schema node, as kube-openapi's
``validate.SchemaValidator`` checks it and apiextensions turns its results into field errors.

Why here: custom resources (:mod:`tfjob_sim.schema_structural`) and the defaults of CRD definitions
(:mod:`tfjob_sim.schema_crd`) are both checked with it, and the messages must be kube-openapi's
(``spec.replicas in body must be of type integer: "string"``, the ``<nil>`` field of its summaries).

Contract: ``OpenAPIValidator(prefix, minor).validate(value, schema)`` collects the errors of ``value``
in ``.errors``; the shortcuts for plain leaves and objects answer exactly as the full check does.
"""

from __future__ import annotations

from typing import Any

import re2

from controller.runtime.jsonfields import field_dict
from tfjob_sim.gotext import go_json, go_quote
from tfjob_sim.schema_errors import (
    FieldError,
    child_path,
    go_value,
    invalid,
    not_supported,
    path_or_nil,
    required,
    too_long,
    too_many,
)
from tfjob_sim.schema_formats import effective_format, format_ok


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return ""


def _types(schema: dict) -> list[str]:
    if schema.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    t = schema.get("type")
    return [t] if isinstance(t, str) and t else []


def _enum_equal(data: Any, enum_value: Any) -> bool:
    if isinstance(enum_value, bool) or isinstance(data, bool):
        return isinstance(enum_value, bool) and isinstance(data, bool) and data == enum_value
    if isinstance(enum_value, (int, float)) and isinstance(data, (int, float)):
        return float(data) == float(enum_value)
    if isinstance(enum_value, str):
        return isinstance(data, str) and data == enum_value
    return data == enum_value and type(data) is type(enum_value)


_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
# Every schema keyword OpenAPIValidator reads besides "type" and "nullable".
_CONSTRAINT_KEYWORDS = frozenset(
    {
        "format",
        "x-kubernetes-int-or-string",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "maxLength",
        "minLength",
        "pattern",
        "multipleOf",
        "minimum",
        "exclusiveMinimum",
        "maximum",
        "exclusiveMaximum",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "enum",
        "minProperties",
        "maxProperties",
        "properties",
        "additionalProperties",
        "required",
    }
)
# ... of which those only _object reads: a plain object schema is checked by _object alone.
_NON_OBJECT_KEYWORDS = _CONSTRAINT_KEYWORDS - {
    "properties",
    "additionalProperties",
    "required",
    "minProperties",
    "maxProperties",
}


def _plainly_valid(value: Any, schema: dict) -> bool:
    """True when ``value`` is a scalar of the schema's type and the schema constrains nothing else: most
    of an object's leaves (names, images, flags), which the full check below would also pass."""
    kind = type(value)
    if kind is str:
        expected = "string"
    elif kind is bool:
        expected = "boolean"
    elif kind is int:
        if not _INT64[0] <= value <= _INT64[1]:
            return False
        expected = "integer"
    else:
        return False
    return schema.get("type") == expected and schema.keys().isdisjoint(_CONSTRAINT_KEYWORDS)


_FLOAT32_MAX = 3.4028234663852886e38


class OpenAPIValidator:
    """One run of kube-openapi validation; collects field errors with a path prefix.

    ``prefix`` is the ``fldPath`` apiextensions passes (``None`` for the resource, ``status`` for
    the status subresource, ``...default`` when checking a default value).
    """

    def __init__(self, prefix: str | None, minor: int) -> None:
        self.prefix = prefix
        self.minor = minor
        self.errors: list[FieldError] = []
        self._seen: set[str] = set()

    def _add(self, err: FieldError) -> None:
        # kube-openapi's Result.AddErrors drops messages already reported.
        key = err.error()
        if key not in self._seen:
            self._seen.add(key)
            self.errors.append(err)

    def _path(self, name: str) -> str | None:
        if name and name != ".":
            return child_path(self.prefix, name[1:] if name.startswith(".") else name)
        return self.prefix

    # Validation errors (openapierrors.Validation) mapped like kubeOpenAPIResultToFieldErrors.
    def _type_error(self, name: str, type_name: str, value: Any) -> None:
        where = f"{name} in body must be of type {type_name}"
        detail = f"{where}: {go_quote(value)}" if isinstance(value, str) else where
        self._add(
            FieldError("FieldValueTypeInvalid", path_or_nil(self._path(name)), "" if value is None else value, detail)
        )

    def _invalid(self, name: str, value: Any, message: str) -> None:
        self._add(invalid(self._path(name), "" if value is None else value, message))

    def _plain(self, message: str) -> None:
        # Errors kube-openapi reports as plain Go errors: field.Invalid(fldPath, "", msg).
        self._add(invalid(self.prefix, "", message))

    def validate(self, value: Any, schema: dict, name: str = "") -> bool:
        """Validate ``value``; returns True if this call added no error."""
        before = len(self.errors)
        if not isinstance(schema, dict) or _plainly_valid(value, schema):
            return True
        if type(value) is dict and schema.get("type") == "object" and schema.keys().isdisjoint(_NON_OBJECT_KEYWORDS):
            self._object(value, schema, name)
            return len(self.errors) == before
        types = _types(schema)
        nullable = bool(schema.get("nullable"))
        if value is None:
            if types and not nullable:
                self._type_error(name, ",".join(types), "null")
            self._enum(value, schema, name)
            return len(self.errors) == before
        fmt = effective_format(schema, self.minor)
        self._type(value, schema, name, types, fmt)
        self._schema_props(value, schema, name)
        if isinstance(value, str):
            self._string(value, schema, name)
            if fmt and fmt not in ("int32", "int64", "float", "double"):
                if not format_ok(fmt, value):
                    self._add(
                        FieldError(
                            "FieldValueTypeInvalid",
                            path_or_nil(self._path(name)),
                            value,
                            f"{name} in body must be of type {fmt}: {go_quote(value)}",
                        )
                    )
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            self._number(value, schema, name, types, fmt)
        if isinstance(value, list):
            self._array(value, schema, name)
        self._enum(value, schema, name)
        if isinstance(value, dict):
            self._object(value, schema, name)
        return len(self.errors) == before

    def _type(self, value: Any, schema: dict, name: str, types: list[str], fmt: str) -> None:
        if not types and not fmt:
            return
        data_type = _json_type(value)
        is_float_int = data_type == "number" and float(value).is_integer() and "integer" in types
        is_int_float = data_type == "integer" and "number" in types
        if not isinstance(value, (str, list)) and fmt:
            data_format = {"integer": "int64", "number": "float64"}.get(data_type, "")
            lower_int = fmt == "int64" and data_format == "int32"
            if not (data_type in types or data_format == fmt or is_float_int or is_int_float or lower_int):
                self._type_error(name, fmt, data_format)
                return
        if "number" not in types and "integer" not in types and fmt and isinstance(value, (str, list)):
            return
        if not (data_type in types or is_float_int or is_int_float):
            self._type_error(name, ",".join(types), data_type)

    def _schema_props(self, value: Any, schema: dict, name: str) -> None:
        any_of = schema.get("anyOf")
        if isinstance(any_of, list) and any_of:
            best: list[FieldError] | None = None
            ok = False
            for sub in any_of:
                trial = OpenAPIValidator(self.prefix, self.minor)
                if trial.validate(value, sub, name):
                    ok = True
                    break
                if best is None:
                    best = trial.errors
            if not ok:
                self._plain(f"{go_quote(name)} must validate at least one schema (anyOf)")
                for err in best or []:
                    self._add(err)
        one_of = schema.get("oneOf")
        if isinstance(one_of, list) and one_of:
            valid = 0
            best = None
            for sub in one_of:
                trial = OpenAPIValidator(self.prefix, self.minor)
                if trial.validate(value, sub, name):
                    valid += 1
                elif valid == 0 and best is None:
                    best = trial.errors
            if valid != 1:
                extra = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
                self._plain(f"{go_quote(name)} must validate one and only one schema (oneOf). {extra}")
                for err in best or []:
                    self._add(err)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            valid = 0
            for sub in all_of:
                if self.validate(value, sub, name):
                    valid += 1
            if valid != len(all_of):
                self._plain(
                    f"{go_quote(name)} must validate all the schemas (allOf){'. None validated' if valid == 0 else ''}"
                )
        not_schema = schema.get("not")
        if isinstance(not_schema, dict):
            if OpenAPIValidator(self.prefix, self.minor).validate(value, not_schema, name):
                self._plain(f"{go_quote(name)} must not validate the schema (not)")

    def _string(self, value: str, schema: dict, name: str) -> None:
        max_len, min_len, pattern = schema.get("maxLength"), schema.get("minLength"), schema.get("pattern")
        length = len(value)
        if isinstance(max_len, int) and length > max_len:
            self._add(too_long(self._path(name), max_len, self.minor))
            return
        if isinstance(min_len, int) and length < min_len:
            self._invalid(name, value, f"{name} in body should be at least {min_len} chars long")
            return
        if isinstance(pattern, str) and pattern:
            try:
                matched = re2.search(pattern, value) is not None
            except re2.error as exc:
                self._invalid(name, value, f"{name} in body should match '{pattern}, but pattern is invalid: {exc}'")
                return
            if not matched:
                self._invalid(name, value, f"{name} in body should match '{pattern}'")

    def _number(self, value: int | float, schema: dict, name: str, types: list[str], fmt: str) -> None:
        type_name = types[0] if len(types) == 1 and types[0] in ("integer", "number") else ""
        num_format = fmt if type_name else ""

        def fits(v: int | float) -> bool:
            if type_name == "integer":
                if isinstance(v, float) and not v.is_integer():
                    return False
                lo, hi = _INT32 if num_format == "int32" else _INT64
                return lo <= v <= hi
            if num_format == "float":
                return abs(v) <= _FLOAT32_MAX
            return True

        def range_error(prefix: str) -> None:
            kind = type_name or "number"
            if num_format:
                self._plain(f"{prefix} value must be of type {kind} with format {num_format} in {name}")
            else:
                self._plain(f"{prefix} value must be of type {kind} (default format) in {name}")

        if self.minor >= 36 and not fits(value):
            range_error("Checked")

        def fmt_bound(bound: float, data: int | float) -> str:
            if isinstance(data, int) and bound_native:
                return str(int(bound))
            return go_value(float(bound))

        multiple = schema.get("multipleOf")
        if isinstance(multiple, (int, float)) and not isinstance(multiple, bool):
            bound_native = self.minor < 36 or fits(multiple)
            if self.minor >= 36 and not fits(multiple):
                range_error("MultipleOf")
            if multiple <= 0:
                factor = int(multiple) if isinstance(value, int) and bound_native else float(multiple)
                self._invalid(
                    name,
                    factor,
                    f"factor MultipleOf declared for {name} must be positive: {fmt_bound(multiple, value)}",
                )
            elif isinstance(value, int) and bound_native:
                if value % int(multiple) != 0:
                    self._invalid(name, value, f"{name} in body should be a multiple of {int(multiple)}")
            else:
                quotient = (1 / multiple * value) if multiple < 1 else value / multiple
                if not float(quotient).is_integer():
                    self._invalid(name, value, f"{name} in body should be a multiple of {go_value(float(multiple))}")
        minimum = schema.get("minimum")
        if isinstance(minimum, (int, float)) and not isinstance(minimum, bool):
            bound_native = self.minor < 36 or fits(minimum)
            if self.minor >= 36 and not fits(minimum):
                range_error("Minimum boundary")
            exclusive = bool(schema.get("exclusiveMinimum"))
            bound = int(minimum) if isinstance(value, int) and bound_native else float(minimum)
            if (not exclusive and value < bound) or (exclusive and value <= bound):
                word = "greater than" if exclusive else "greater than or equal to"
                self._invalid(name, value, f"{name} in body should be {word} {fmt_bound(minimum, value)}")
        maximum = schema.get("maximum")
        if isinstance(maximum, (int, float)) and not isinstance(maximum, bool):
            bound_native = self.minor < 36 or fits(maximum)
            if self.minor >= 36 and not fits(maximum):
                range_error("Maximum boundary")
            exclusive = bool(schema.get("exclusiveMaximum"))
            bound = int(maximum) if isinstance(value, int) and bound_native else float(maximum)
            if (not exclusive and value > bound) or (exclusive and value >= bound):
                word = "less than" if exclusive else "less than or equal to"
                self._invalid(name, value, f"{name} in body should be {word} {fmt_bound(maximum, value)}")

    def _array(self, value: list, schema: dict, name: str) -> None:
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                self.validate(item, items, f"{name}[{i}]")
        size = len(value)
        min_items, max_items = schema.get("minItems"), schema.get("maxItems")
        if isinstance(min_items, int) and size < min_items:
            self._invalid(name, size, f"{name} in body should have at least {min_items} items")
        if isinstance(max_items, int) and size > max_items:
            self._add(too_many(self._path(name), size, max_items, self.minor))
        if schema.get("uniqueItems"):
            seen: list[str] = []
            for item in value:
                key = go_json(item)
                if key in seen:
                    self._invalid(name, None, f"{name} in body shouldn't contain duplicates")
                    break
                seen.append(key)

    def _enum(self, value: Any, schema: dict, name: str) -> None:
        enum = schema.get("enum")
        if not isinstance(enum, list) or not enum:
            return
        if value is not None and any(_enum_equal(value, e) for e in enum):
            return
        allowed = [e if isinstance(e, str) else go_json(e) for e in enum]
        self._add(not_supported(self._path(name), value, allowed))

    def _object(self, value: dict, schema: dict, name: str) -> None:
        count = len(value)
        min_props, max_props = schema.get("minProperties"), schema.get("maxProperties")
        if isinstance(min_props, int) and count < min_props:
            self._invalid(name, count, f"{name} in body should have at least {min_props} properties")
        if isinstance(max_props, int) and count > max_props:
            self._add(too_many(self._path(name), count, max_props, self.minor))
        props = field_dict(schema, "properties")
        addl = schema.get("additionalProperties")
        for key, item in value.items():
            if key in props:
                continue
            if isinstance(addl, dict):
                self.validate(item, addl, f"{name}.{key}")
            elif addl is False:
                self._invalid(name, key, f"{name}.{key} in body is a forbidden property")
        for key, item in value.items():
            if key in props:
                self.validate(item, props[key], f"{name}.{key}" if name else key)
        for key in schema.get("required") or []:
            if isinstance(key, str) and key not in value:
                self._add(required(self._path(f"{name}.{key}")))
