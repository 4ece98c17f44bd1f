"""CRD structural schemas as kube-apiserver applies them: CRD validation, pruning, defaulting,
custom-resource validation (OpenAPI v3 + ``x-kubernetes-validations`` CEL).

Why this exists: users meet these rules through ``kubectl apply`` errors, and clients depend on
pruning and defaulting; the simulator must produce the *same* Status causes as a real server. The
message forms are taken from the real code paths (kube-openapi ``validate`` → apiextensions
``kubeOpenAPIResultToFieldErrors``; apiextensions CEL validator; apimachinery ``field.Error``):

- schema errors: ``spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"``;
  ``Required value``; ``Unsupported value: "x": supported values: "a", "b"``; ``Too long: may not be
  more than 2 bytes``; ``Too many: 3: must have at most 2 items``; errors that kube-openapi reports
  without a path (anyOf/allOf summaries, 1.36+ int32 range checks) carry the field ``<nil>``.
- CEL errors use CEL field paths (``spec.tfReplicaSpecs[Worker]`` for map entries, ``[i]`` for items);
  a failed rule says ``Invalid value: "object": <message or "failed rule: <rule>">`` up to 1.34 and
  omits object/array values (shows scalar values) from 1.35 — see ``server_minor``.
- an error of type Required/NotSupported/TooLong/TooMany/TypeInvalid blocks CEL and adds
  ``<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; ...``.
- CRD errors follow the internal-API field names (``spec.validation.openAPIV3Schema...`` when every
  version has the same schema, ``additionalPrinterColumns[0].JSONPath``) as the real server reports.

Causes are dicts ``{"reason", "message", "field"}`` (``field`` omitted when empty), ready for
:func:`tfjob_sim.errors.invalid`. Everything here is pure: no I/O, no clocks, no asyncio.
"""

from __future__ import annotations

import base64
import copy
import datetime as _dt
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import re2

from controller.runtime.jsonfields import field_dict, field_str
from tfjob_sim.cel import MISSING, CelCompileError, CelEvalError, CelRule, from_cel
from tfjob_sim.gotext import go_float, go_json, go_quote
from tfjob_sim.resources import OBJECT_META_FIELDS

__all__ = [
    "DEFAULT_SERVER_MINOR",
    "StructuralSchema",
    "validate_crd",
]

DEFAULT_SERVER_MINOR = 33
"""Kubernetes minor version whose messages are reproduced; the simulator's ``/version`` says 1.33.
Differences handled: 1.34 singular "1 byte"/"1 item" and the k8s-short-name/k8s-long-name formats;
1.35 CEL failure values; 1.36 int32/float range checks."""

# ----------------------------------------------------------------------------------------------
# Go value formatting (what apimachinery prints for a field.Error's BadValue)
# ----------------------------------------------------------------------------------------------


def _go_v(value: Any) -> str:
    """Go ``%v`` of int64/float64/bool (the scalar forms field.Error prints without quotes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


# ----------------------------------------------------------------------------------------------
# field.Error
# ----------------------------------------------------------------------------------------------

_OMIT = object()  # field.OmitValueType{}: the value is not printed

_TYPE_TEXT = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "FieldValueTooFew": "Too few",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
    "FieldValueTooShort": "Too short",
}
_NO_VALUE_TYPES = {
    "FieldValueRequired",
    "FieldValueForbidden",
    "FieldValueTooLong",
    "FieldValueTooShort",
    "InternalError",
}
_BLOCKING_TYPES = {
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
}


@dataclass
class FieldError:
    """apimachinery ``field.Error``; ``field`` is the rendered ``field.Path`` (``<nil>`` for none)."""

    type: str
    field: str
    bad_value: Any = ""
    detail: str = ""

    def body(self) -> str:
        text = _TYPE_TEXT.get(self.type, f"<unknown error {go_quote(self.type)}>")
        if self.type not in _NO_VALUE_TYPES and self.bad_value is not _OMIT:
            value = self.bad_value
            if isinstance(value, (bool, int, float)):
                text = f"{text}: {_go_v(value)}"
            elif isinstance(value, str):
                text = f"{text}: {go_quote(value)}"
            else:
                text = f"{text}: {go_json(value)}"
        if self.detail:
            text = f"{text}: {self.detail}"
        return text

    def error(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict[str, str]:
        cause = {"reason": self.type, "message": self.body()}
        if self.field:
            cause["field"] = self.field
        return cause


def _child(path: str | None, name: str) -> str:
    return f"{path}.{name}" if path else name


def _key(path: str | None, key: str) -> str:
    return f"{path or ''}[{key}]"


def _index(path: str | None, i: int) -> str:
    return f"{path or ''}[{i}]"


def _f(path: str | None) -> str:
    return path if path else "<nil>"


def required(path: str | None, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", _f(path), "", detail)


def invalid(path: str | None, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", _f(path), value, detail)


def forbidden(path: str | None, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", _f(path), "", detail)


def not_supported(path: str | None, value: Any, valid: Iterable[str]) -> FieldError:
    quoted = [go_quote(str(v)) for v in valid]
    return FieldError(
        "FieldValueNotSupported", _f(path), value, "supported values: " + ", ".join(quoted) if quoted else ""
    )


def duplicate(path: str | None, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", _f(path), value, "")


def too_many(path: str | None, actual: int, maximum: int, minor: int = DEFAULT_SERVER_MINOR) -> FieldError:
    unit = "item" if maximum == 1 and minor >= 34 else "items"
    detail = f"must have at most {maximum} {unit}" if maximum >= 0 else "has too many items"
    return FieldError("FieldValueTooMany", _f(path), actual if actual >= 0 else _OMIT, detail)


def too_long(path: str | None, maximum: int, minor: int = DEFAULT_SERVER_MINOR) -> FieldError:
    unit = "byte" if maximum == 1 and minor >= 34 else "bytes"
    detail = f"may not be more than {maximum} {unit}" if maximum >= 0 else "value is too long"
    return FieldError("FieldValueTooLong", _f(path), "<value omitted>", detail)


def _causes(errors: Iterable[FieldError]) -> list[dict[str, str]]:
    return [e.cause() for e in errors]


# ----------------------------------------------------------------------------------------------
# Formats (kube-openapi strfmt registry, limited to what CRD schemas support)
# ----------------------------------------------------------------------------------------------

_RX_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_RX_TIME = re.compile(r"^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$")
_RX_UUID = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_RX_UUID3 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_RX_UUID4 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
_RX_UUID5 = re.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
_RX_SHORT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_RX_LONG = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RX_HOSTNAME = re2.compile(
    r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}"
    r"[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$"
)
_RX_MAC = re.compile(r"^([0-9A-Fa-f]{2}[:-]){5}([0-9A-Fa-f]{2})$|^([0-9A-Fa-f]{4}\.){2}([0-9A-Fa-f]{4})$")
_RX_HEXCOLOR = re.compile(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$")
_RX_BSON = re.compile(r"^[0-9a-fA-F]{24}$")
_RX_DURATION_SCALA = re.compile(r"((\d+)\s*([A-Za-zµ]+))")
_RX_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$")
_SCALA_UNITS = {
    "ns",
    "us",
    "µs",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "w",
    "nanosecond",
    "nanoseconds",
    "microsecond",
    "microseconds",
    "millisecond",
    "milliseconds",
    "second",
    "seconds",
    "sec",
    "secs",
    "minute",
    "minutes",
    "min",
    "mins",
    "hour",
    "hours",
    "hr",
    "hrs",
    "day",
    "days",
    "week",
    "weeks",
    "nanos",
    "micros",
    "millis",
}


def _is_date(s: str) -> bool:
    if not _RX_DATE.match(s):
        return False
    y, m, d = (int(x) for x in s.split("-"))
    try:
        _dt.date(y, m, d)
    except ValueError:
        return False
    return True


def _is_datetime(s: str) -> bool:
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _RX_TIME.search(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _is_duration(s: str) -> bool:
    if _RX_GO_DURATION.match(s):
        return True
    matches = _RX_DURATION_SCALA.findall(s)
    return bool(matches) and all(unit.lower().strip() in _SCALA_UNITS for _, _, unit in matches)


def _is_base64(s: str) -> bool:
    try:
        base64.b64decode(s, validate=True)
    except (ValueError, TypeError):
        return False
    return True


def _is_ip(s: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(s).version == version
    except ValueError:
        return False


def _is_cidr(s: str) -> bool:
    try:
        ipaddress.ip_network(s, strict=False)
    except ValueError:
        return False
    return "/" in s


def _is_email(s: str) -> bool:
    return bool(re.match(r"^[^@\s<>]+@[^@\s<>]+$", s)) or bool(re.match(r"^[^<>]*<[^@\s<>]+@[^@\s<>]+>$", s))


def _is_uri(s: str) -> bool:
    # govalidator.IsRequestURI == net/url.ParseRequestURI: absolute URI or an absolute path.
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:\S*$", s)) or s.startswith("/")


_FORMAT_CHECKS_BASE = {
    "bsonobjectid": lambda s: bool(_RX_BSON.match(s)),
    "uri": _is_uri,
    "email": _is_email,
    "hostname": lambda s: bool(_RX_HOSTNAME.match(s)),
    "ipv4": lambda s: _is_ip(s, 4),
    "ipv6": lambda s: _is_ip(s, 6),
    "cidr": _is_cidr,
    "mac": lambda s: bool(_RX_MAC.match(s)),
    "uuid": lambda s: bool(_RX_UUID.match(s)),
    "uuid3": lambda s: bool(_RX_UUID3.match(s)),
    "uuid4": lambda s: bool(_RX_UUID4.match(s)),
    "uuid5": lambda s: bool(_RX_UUID5.match(s)),
    "hexcolor": lambda s: bool(_RX_HEXCOLOR.match(s)),
    "byte": _is_base64,
    "password": lambda s: True,
    "date": _is_date,
    "duration": _is_duration,
    "datetime": _is_datetime,
    # Not checked (accepted as-is): isbn, isbn10, isbn13, creditcard, ssn, rgbcolor.
    "isbn": lambda s: True,
    "isbn10": lambda s: True,
    "isbn13": lambda s: True,
    "creditcard": lambda s: True,
    "ssn": lambda s: True,
    "rgbcolor": lambda s: True,
}
_FORMAT_CHECKS_134 = {
    "k8s-short-name": lambda s: len(s) <= 63 and bool(_RX_SHORT.match(s)),
    "k8s-long-name": lambda s: len(s) <= 253 and bool(_RX_LONG.match(s)),
}


def _effective_format(schema: dict, minor: int) -> str:
    """apiextensions ``StripUnsupportedFormatsPostProcessor``: unknown formats are ignored."""
    fmt = schema.get("format") or ""
    if not isinstance(fmt, str) or not fmt:
        return ""
    stype = schema.get("type") or ""
    if schema.get("x-kubernetes-int-or-string"):
        return ""  # two types: the post processor strips the format
    if stype in ("", "string"):
        normalized = fmt.replace("-", "")
        if normalized in _FORMAT_CHECKS_BASE or (minor >= 34 and fmt in _FORMAT_CHECKS_134):
            return fmt
        return ""
    if stype == "integer":
        return fmt if fmt in ("int32", "int64") else ""
    if stype == "number":
        return fmt if fmt in ("float", "double") else ""
    return ""


def _format_ok(fmt: str, value: str) -> bool:
    check = _FORMAT_CHECKS_BASE.get(fmt.replace("-", "")) or _FORMAT_CHECKS_134.get(fmt)
    return True if check is None else bool(check(value))


# ----------------------------------------------------------------------------------------------
# kube-openapi schema validation (validate.SchemaValidator) → field errors
# ----------------------------------------------------------------------------------------------


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
# Every schema keyword _OpenAPIValidator reads besides "type" and "nullable".
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


class _OpenAPIValidator:
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
            return _child(self.prefix, name[1:] if name.startswith(".") else name)
        return self.prefix

    # Validation errors (openapierrors.Validation) mapped like kubeOpenAPIResultToFieldErrors.
    def _type_error(self, name: str, type_name: str, value: Any) -> None:
        where = f"{name} in body must be of type {type_name}"
        detail = f"{where}: {go_quote(value)}" if isinstance(value, str) else where
        self._add(FieldError("FieldValueTypeInvalid", _f(self._path(name)), "" if value is None else value, detail))

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
        fmt = _effective_format(schema, self.minor)
        self._type(value, schema, name, types, fmt)
        self._schema_props(value, schema, name)
        if isinstance(value, str):
            self._string(value, schema, name)
            if fmt and fmt not in ("int32", "int64", "float", "double"):
                if not _format_ok(fmt, value):
                    self._add(
                        FieldError(
                            "FieldValueTypeInvalid",
                            _f(self._path(name)),
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
                trial = _OpenAPIValidator(self.prefix, self.minor)
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
                trial = _OpenAPIValidator(self.prefix, self.minor)
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
            if _OpenAPIValidator(self.prefix, self.minor).validate(value, not_schema, name):
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
            return _go_v(float(bound))

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
                    self._invalid(name, value, f"{name} in body should be a multiple of {_go_v(float(multiple))}")
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


# ----------------------------------------------------------------------------------------------
# The structural schema
# ----------------------------------------------------------------------------------------------

_META_FIELDS = ("apiVersion", "kind", "metadata")

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


def _normalize_field_path(field_path: str, schema: dict) -> str:
    """apiextensions ``ValidFieldPath``; returns the field.Path string or raises ValueError."""
    tokens = re.findall(r"'(?:[^'\\]|\\.)*'|[.\[\]]|[^.\[\]']+", field_path)
    path = ""
    current = schema
    i = 0

    def step(name: str, named: bool) -> None:
        nonlocal path, current
        if named:
            path = _child(path, name)
            props = current.get("properties") or {}
            if name not in props:
                raise ValueError("does not refer to a valid field")
            current = props[name]
        else:
            path = _key(path, name)
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
                field_path = _normalize_field_path(spec["fieldPath"].strip(), schema)
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
                if embedded and k in _META_FIELDS:
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
                if s.get("x-kubernetes-embedded-resource") and k in _META_FIELDS:
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
        return _causes(self.validate_errors(obj, old, status_only=status_only))

    def validate_errors(self, obj: dict, old: dict | None = None, *, status_only: bool = False) -> list[FieldError]:
        errors: list[FieldError] = []
        if status_only:
            status_schema = (self.schema.get("properties") or {}).get("status")
            if isinstance(obj, dict) and "status" in obj and isinstance(status_schema, dict):
                validator = _OpenAPIValidator("status", self.server_minor)
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
            validator = _OpenAPIValidator(None, self.server_minor)
            root_schema = self._resource_schema()
            body = self._resource_body(obj)
            old_body = self._resource_body(old) if isinstance(old, dict) else MISSING
            _ratcheted_validate(validator, body, old_body, root_schema, "")
            errors.extend(validator.errors)
            if old is None or not _list_type_errors(None, self.schema, old, self._list_typed):
                errors.extend(_list_type_errors(None, self.schema, obj, self._list_typed))
        if self._rules:
            if any(e.type in _BLOCKING_TYPES for e in errors):
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
        root["required"] = [r for r in self.schema.get("required") or [] if r not in _META_FIELDS]
        return root

    def _resource_body(self, obj: Any) -> Any:
        if not isinstance(obj, dict):
            return obj
        body = {k: v for k, v in obj.items() if k not in _META_FIELDS}
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
                        self._cel(_index(path, i), item, old_item, items, correlatable=old_item is not MISSING)
                    )
        elif isinstance(value, dict):
            props = schema.get("properties") or {}
            addl = schema.get("additionalProperties")
            old_map = old_value if isinstance(old_value, dict) else {}
            if isinstance(addl, dict):
                for k, v in value.items():
                    if k in props:
                        continue
                    errors.extend(self._cel(_key(path, k), v, old_map.get(k, MISSING), addl, correlatable=k in old_map))
            for k, v in value.items():
                if k in props:
                    errors.extend(
                        self._cel(_child(path, k), v, old_map.get(k, MISSING), props[k], correlatable=k in old_map)
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
        field_path = _child(path, compiled.field_path) if compiled.field_path else path
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
            shown: Any = _OMIT if type_name in ("object", "array") or isinstance(value, (dict, list)) else value
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


def _ratcheted_validate(validator: _OpenAPIValidator, value: Any, old: Any, schema: dict, name: str) -> None:
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
                errors.extend(_list_type_errors(_key(path, k), addl, v, marks))
        for k, v in value.items():
            if k in props:
                errors.extend(_list_type_errors(_child(path, k), props[k], v, marks))
    elif isinstance(value, list):
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            for i in _non_unique(value):
                errors.append(duplicate(_index(path, i), value[i]))
        elif list_type == "map":
            errors.extend(_map_list_errors(path, schema, value))
        items = schema.get("items")
        if isinstance(items, dict):
            for i, v in enumerate(value):
                errors.extend(_list_type_errors(_index(path, i), items, v, marks))
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
            return [invalid(_index(path, i), x, "must be an object for an array of list-type map")]
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
                errors.append(duplicate(_index(path, i), {} if kv is unspecified else {key_field: kv}))
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
        errors.append(duplicate(_index(path, i), composite[i]))
    return errors


# ----------------------------------------------------------------------------------------------
# CustomResourceDefinition validation
# ----------------------------------------------------------------------------------------------

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
        text = f"{_TYPE_TEXT[self.type]}: {_go_json_struct(self.bad_value)}"
        return f"{text}: {self.detail}" if self.detail else text


class _CRDSchemaChecker:
    """``ValidateCustomResourceDefinitionOpenAPISchema`` + structural + defaults + CEL compile."""

    def __init__(self, minor: int) -> None:
        self.minor = minor

    def check_validation(self, schema: Any, path: str, status_enabled: bool) -> list[FieldError]:
        errors: list[FieldError] = []
        if not isinstance(schema, dict):
            return [invalid(_child(path, "openAPIV3Schema"), "", "must be an object")]
        root = _child(path, "openAPIV3Schema")
        if status_enabled:
            for key, value in schema.items():
                if value in (None, False, "", [], {}, 0):
                    continue
                if key == "type":
                    if value != "object":
                        errors.append(
                            invalid(
                                _child(path, "openAPIV3Schema.type"),
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
            errors.append(forbidden(_child(path, "openAPIV3Schema.nullable"), "nullable cannot be true at the root"))

        structural = sorted(self._structural(schema, "root", root), key=lambda e: e.error())
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
    def _structural(self, s: Any, level: str, path: str) -> list[FieldError]:
        errors: list[FieldError] = []
        if not isinstance(s, dict):
            return errors
        stype = s.get("type") or ""
        items = s.get("items")
        if stype == "array" and items is None:
            errors.append(required(_child(path, "items"), "must be specified"))
        if isinstance(items, dict):
            errors.extend(self._structural(items, "item", _child(path, "items")))
        for k, v in (s.get("properties") or {}).items():
            errors.extend(self._structural(v, "field", _key(_child(path, "properties"), k)))
        addl = s.get("additionalProperties")
        if addl is not None and addl is not False:
            if level == "root":
                errors.append(forbidden(_child(path, "additionalProperties"), "must not be used at the root"))
            if isinstance(addl, dict):
                errors.extend(self._structural(addl, "field", _child(path, "additionalProperties")))
        if s.get("x-kubernetes-int-or-string") and s.get("x-kubernetes-preserve-unknown-fields"):
            errors.append(
                invalid(
                    _child(path, "x-kubernetes-preserve-unknown-fields"),
                    True,
                    "must be false if x-kubernetes-int-or-string is true",
                )
            )
        if s.get("x-kubernetes-int-or-string") and s.get("x-kubernetes-embedded-resource"):
            errors.append(
                invalid(
                    _child(path, "x-kubernetes-embedded-resource"),
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
        errors.extend(self._value_validation(s, skip_any_of, bool(skip_first_all_of), path, nested=False))
        embedded = bool(s.get("x-kubernetes-embedded-resource"))
        check_meta = level == "root" or embedded
        if embedded and stype != "object":
            if not stype:
                errors.append(
                    required(_child(path, "type"), "must be object if x-kubernetes-embedded-resource is true")
                )
            else:
                errors.append(
                    invalid(_child(path, "type"), stype, "must be object if x-kubernetes-embedded-resource is true")
                )
        elif (
            not stype and not s.get("x-kubernetes-int-or-string") and not s.get("x-kubernetes-preserve-unknown-fields")
        ):
            what = {"root": "at the root", "item": "for specified array items", "field": "for specified object fields"}[
                level
            ]
            errors.append(required(_child(path, "type"), f"must not be empty {what}"))
        if embedded and addl is not None and addl is not False:
            errors.append(
                forbidden(
                    _child(path, "additionalProperties"), "must not be used if x-kubernetes-embedded-resource is set"
                )
            )
        if level == "root" and stype and stype != "object":
            errors.append(invalid(_child(path, "type"), stype, "must be object at the root"))
        props = s.get("properties") or {}
        for meta_field in ("kind", "apiVersion"):
            if meta_field in props and check_meta and (props[meta_field] or {}).get("type") != "string":
                errors.append(
                    invalid(
                        _child(_key(_child(path, "properties"), meta_field), "type"),
                        (props[meta_field] or {}).get("type", ""),
                        "must be string",
                    )
                )
        if "metadata" in props:
            meta = props["metadata"] if isinstance(props["metadata"], dict) else {}
            mpath = _key(_child(path, "properties"), "metadata")
            if check_meta and meta.get("type") != "object":
                errors.append(invalid(_child(mpath, "type"), meta.get("type", ""), "must be object"))
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
                    _child(path, "properties"),
                    "must not be empty if x-kubernetes-embedded-resource "
                    "is true without x-kubernetes-preserve-unknown-fields",
                )
            )
        return errors

    def _value_validation(
        self, s: dict, skip_any_of: bool, skip_first_all_of: bool, path: str, *, nested: bool
    ) -> list[FieldError]:
        errors: list[FieldError] = []
        if not skip_any_of:
            for i, sub in enumerate(s.get("anyOf") or []):
                errors.extend(self._nested(sub, False, _index(_child(path, "anyOf"), i)))
        for i, sub in enumerate(s.get("allOf") or []):
            errors.extend(self._nested(sub, skip_first_all_of and i == 0, _index(_child(path, "allOf"), i)))
        for i, sub in enumerate(s.get("oneOf") or []):
            errors.extend(self._nested(sub, False, _index(_child(path, "oneOf"), i)))
        if isinstance(s.get("not"), dict):
            errors.extend(self._nested(s["not"], False, _child(path, "not")))
        pattern = s.get("pattern")
        if isinstance(pattern, str) and pattern:
            try:
                re2.compile(pattern)
            except re2.error as exc:
                errors.append(
                    invalid(_child(path, "pattern"), pattern, f"must be a valid regular expression, but isn't: {exc}")
                )
        return errors

    def _nested(self, v: Any, skip_any_of: bool, path: str) -> list[FieldError]:
        if not isinstance(v, dict):
            return []
        errors = self._value_validation(v, skip_any_of, False, path, nested=True)
        if isinstance(v.get("items"), dict):
            errors.extend(self._nested(v["items"], False, _child(path, "items")))
        for k, sub in (v.get("properties") or {}).items():
            errors.extend(self._nested(sub, False, _key(_child(path, "properties"), k)))
        for key, message in _VALUE_VALIDATION_FORBIDDEN:
            if key == "additionalProperties":
                if v.get(key) is not None:
                    errors.append(forbidden(_child(path, key), message))
                continue
            if v.get(key) not in (None, False, "", [], {}):
                errors.append(forbidden(_child(path, key), message))
        if "metadata" in (v.get("properties") or {}):
            errors.append(
                forbidden(_key(_child(path, "properties"), "metadata"), "must not be specified in a nested context")
            )
        return errors

    # defaulting.ValidateDefaults ----------------------------------------------------------------
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
                errors.append(invalid(_child(path, "default"), default, "must not have unknown fields"))
            validator = _OpenAPIValidator(_child(path, "default"), self.minor)
            validator.validate(default, s, "")
            if validator.errors:
                errors.extend(validator.errors)
            else:
                checker = StructuralSchema(s, server_minor=self.minor, _resource_root=is_root)
                cel_errors = checker._cel(_child(path, "default"), default, default, s, correlatable=True)
                errors.extend(cel_errors)
        if isinstance(s.get("items"), dict):
            errors.extend(
                self._defaults(s["items"], _child(path, "items"), root, inside_meta=inside_meta, is_root=False)
            )
        for k, sub in (s.get("properties") or {}).items():
            sub_meta = inside_meta or ((is_root or s.get("x-kubernetes-embedded-resource")) and k in _META_FIELDS)
            errors.extend(
                self._defaults(
                    sub, _key(_child(path, "properties"), k), root, inside_meta=bool(sub_meta), is_root=False
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
            schema_errors.append(not_supported(_child(path, "type"), stype, _OPENAPI_V3_TYPES))
        if "default" in s and s["default"] is not None and not allow_defaults:
            detail = "must not be set" + (f" {defaults_reason}" if defaults_reason else "")
            schema_errors.append(forbidden(_child(path, "default"), detail))
        for key, label in (
            ("id", "id is not supported"),
            ("additionalItems", "additionalItems is not supported"),
            ("patternProperties", "patternProperties is not supported"),
            ("definitions", "definitions is not supported"),
            ("dependencies", "dependencies is not supported"),
            ("$ref", "$ref is not supported"),
        ):
            if s.get(key) not in (None, "", {}):
                schema_errors.append(forbidden(_child(path, key), label))
        if stype == "null":
            schema_errors.append(
                forbidden(_child(path, "type"), "type cannot be set to null, use nullable as an alternative")
            )
        if isinstance(s.get("items"), list):
            schema_errors.append(forbidden(_child(path, "items"), "items must be a schema object and not an array"))
        if inside_meta and s.get("x-kubernetes-embedded-resource"):
            schema_errors.append(
                forbidden(_child(path, "x-kubernetes-embedded-resource"), "must not be used inside of resource meta")
            )
        if s.get("uniqueItems"):
            schema_errors.append(
                forbidden(
                    _child(path, "uniqueItems"),
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
                        _child(path, "additionalProperties"), "additionalProperties and properties are mutual exclusive"
                    )
                )
            if isinstance(addl, dict):
                no_defaults = "inside additionalProperties applying to object metadata"
                meta = {"allow_defaults": False, "defaults_reason": no_defaults} if inside_meta else {}
                check_child(addl, _child(path, "additionalProperties"), **meta)
        map_type = s.get("x-kubernetes-map-type")
        for prop, sub in props.items():
            sub_uncorrelatable = uncorrelatable
            if map_type not in (None, "granular", "atomic") and sub_uncorrelatable is None:
                sub_uncorrelatable = path
            sub_meta, sub_allow, sub_reason = inside_meta, allow_defaults, defaults_reason
            if (is_root or s.get("x-kubernetes-embedded-resource")) and prop in _META_FIELDS:
                sub_meta = True
                if is_root:
                    sub_allow, sub_reason = False, f"in top-level {prop}"
            check_child(
                sub,
                _key(_child(path, "properties"), prop),
                allow_defaults=sub_allow,
                defaults_reason=sub_reason,
                inside_meta=sub_meta,
                uncorrelatable=sub_uncorrelatable,
                rule_is_root=bool(isinstance(sub, dict) and sub.get("x-kubernetes-embedded-resource")),
            )
        # Rules under not/allOf/oneOf/anyOf are checked but never compiled (so they add no CEL errors).
        if isinstance(s.get("not"), dict):
            check_child(s["not"], _child(path, "not"), cel_ok=False)
        for junctor in ("allOf", "oneOf", "anyOf"):
            for i, sub in enumerate(s.get(junctor) or []):
                check_child(sub, _index(_child(path, junctor), i), cel_ok=False)
        items = s.get("items")
        if isinstance(items, dict):
            sub_uncorrelatable = uncorrelatable
            if s.get("x-kubernetes-list-type") != "map" and sub_uncorrelatable is None:
                sub_uncorrelatable = path
            check_child(
                items,
                _child(path, "items"),
                uncorrelatable=sub_uncorrelatable,
                rule_is_root=bool(items.get("x-kubernetes-embedded-resource")),
            )
        if s.get("x-kubernetes-preserve-unknown-fields") is False:
            schema_errors.append(
                invalid(_child(path, "x-kubernetes-preserve-unknown-fields"), False, "must be true or undefined")
            )
        if map_type is not None and stype != "object":
            if not stype:
                schema_errors.append(
                    required(_child(path, "type"), "must be object if x-kubernetes-map-type is specified")
                )
            else:
                schema_errors.append(
                    invalid(_child(path, "type"), stype, "must be object if x-kubernetes-map-type is specified")
                )
        if map_type is not None and map_type not in ("atomic", "granular"):
            schema_errors.append(not_supported(_child(path, "x-kubernetes-map-type"), map_type, ["atomic", "granular"]))
        list_type = s.get("x-kubernetes-list-type")
        if list_type is not None and stype != "array":
            if not stype:
                schema_errors.append(
                    required(_child(path, "type"), "must be array if x-kubernetes-list-type is specified")
                )
            else:
                schema_errors.append(
                    invalid(_child(path, "type"), stype, "must be array if x-kubernetes-list-type is specified")
                )
        elif list_type == "set" and isinstance(items, dict):
            if items.get("type") == "array" and items.get("x-kubernetes-list-type") not in (None, "atomic"):
                schema_errors.append(
                    invalid(
                        _child(_child(path, "items"), "x-kubernetes-list-type"),
                        items.get("x-kubernetes-list-type"),
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    )
                )
            if items.get("type") == "object" and items.get("x-kubernetes-map-type") != "atomic":
                schema_errors.append(
                    invalid(
                        _child(_child(path, "items"), "x-kubernetes-map-type"),
                        list_type,
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    )
                )
        if list_type is not None and list_type not in ("atomic", "set", "map"):
            schema_errors.append(
                not_supported(_child(path, "x-kubernetes-list-type"), list_type, ["atomic", "set", "map"])
            )
        map_keys = s.get("x-kubernetes-list-map-keys") or []
        if map_keys:
            if list_type is None:
                schema_errors.append(
                    required(
                        _child(path, "x-kubernetes-list-type"), "must be map if x-kubernetes-list-map-keys is non-empty"
                    )
                )
            elif list_type != "map":
                schema_errors.append(
                    invalid(
                        _child(path, "x-kubernetes-list-type"),
                        list_type,
                        "must be map if x-kubernetes-list-map-keys is non-empty",
                    )
                )
        if list_type == "map":
            if not map_keys:
                schema_errors.append(
                    required(
                        _child(path, "x-kubernetes-list-map-keys"), "must not be empty if x-kubernetes-list-type is map"
                    )
                )
            if items is None:
                schema_errors.append(
                    required(_child(path, "items"), "must have a schema if x-kubernetes-list-type is map")
                )
            if isinstance(items, dict) and items.get("type") != "object":
                schema_errors.append(
                    invalid(
                        _child(_child(path, "items"), "type"),
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
                                    _child(_key(_child(_child(path, "items"), "properties"), k), "type"),
                                    items.get("type"),
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                )
                            )
                    else:
                        schema_errors.append(
                            invalid(
                                _child(path, "x-kubernetes-list-map-keys"),
                                map_keys,
                                "entries must all be names of item properties",
                            )
                        )
                    if k in seen:
                        schema_errors.append(
                            invalid(
                                _child(path, "x-kubernetes-list-map-keys"),
                                map_keys,
                                "must not contain duplicate entries",
                            )
                        )
                    seen.add(k)
        if list_type in ("set", "map") and isinstance(items, dict):
            if items.get("nullable"):
                schema_errors.append(
                    forbidden(
                        _child(_child(path, "items"), "nullable"),
                        f"cannot be nullable when x-kubernetes-list-type is {list_type}",
                    )
                )
            if list_type == "map":
                req = set(items.get("required") or [])
                for k in map_keys:
                    ks = (items.get("properties") or {}).get(k)
                    if not isinstance(ks, dict):
                        continue
                    kpath = _key(_child(_child(path, "items"), "properties"), k)
                    if k not in req and ks.get("default") is None:
                        schema_errors.append(
                            required(
                                _child(kpath, "default"),
                                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                            )
                        )
                    if ks.get("nullable"):
                        schema_errors.append(
                            forbidden(
                                _child(kpath, "nullable"),
                                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                            )
                        )
        rules = s.get("x-kubernetes-validations")
        if isinstance(rules, list) and rules:
            vpath = _child(path, "x-kubernetes-validations")
            for i, spec in enumerate(rules):
                rpath = _index(vpath, i)
                if not isinstance(spec, dict):
                    schema_errors.append(invalid(rpath, spec, "must be an object"))
                    continue
                rule = field_str(spec, "rule")
                message = field_str(spec, "message")
                if not rule.strip():
                    schema_errors.append(required(_child(rpath, "rule"), "rule is not specified"))
                elif message and not message.strip():
                    schema_errors.append(invalid(_child(rpath, "message"), message, "must be non-empty if specified"))
                elif re.search(r"[\n\r]", message.strip()):
                    schema_errors.append(invalid(_child(rpath, "message"), message, "must not contain line breaks"))
                elif re.search(r"[\n\r]", rule.strip()) and not message.strip():
                    schema_errors.append(
                        required(_child(rpath, "message"), "message must be specified if rule contains line breaks")
                    )
                mexpr = spec.get("messageExpression")
                if isinstance(mexpr, str) and mexpr and not mexpr.strip():
                    schema_errors.append(
                        required(_child(rpath, "messageExpression"), "messageExpression must be non-empty if specified")
                    )
                reason = spec.get("reason")
                if reason is not None and reason not in _VALIDATION_REASONS:
                    schema_errors.append(not_supported(_child(rpath, "reason"), reason, _VALIDATION_REASONS))
                fp = spec.get("fieldPath")
                if isinstance(fp, str) and fp:
                    if not fp.strip():
                        schema_errors.append(invalid(_child(rpath, "fieldPath"), fp, "must be non-empty if specified"))
                    if re.search(r"[\n\r]", fp):
                        schema_errors.append(invalid(_child(rpath, "fieldPath"), fp, "must not contain line breaks"))
                    try:
                        _normalize_field_path(fp, s)
                    except ValueError:
                        schema_errors.append(invalid(_child(rpath, "fieldPath"), fp, "must be a valid path"))
            if not schema_errors and cel_ok:
                cel_errors.extend(self._compile_rules(s, rules, vpath, uncorrelatable, rule_is_root))
        return schema_errors, cel_errors

    def _compile_rules(
        self, s: dict, rules: list, vpath: str, uncorrelatable: str | None, is_root: bool
    ) -> list[FieldError]:
        errors: list[FieldError] = []
        for i, spec in enumerate(rules):
            rpath = _index(vpath, i)
            try:
                compiled = CelRule(spec.get("rule", ""), s, is_root=is_root)
            except CelCompileError as exc:
                errors.append(
                    _StructError("FieldValueInvalid", _child(rpath, "rule"), _ordered_rule_json(spec), str(exc))
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
                            "FieldValueInvalid", _child(rpath, "messageExpression"), _ordered_rule_json(spec), detail
                        )
                    )
            if compiled is None:
                continue
            if compiled.references_old_self:
                if uncorrelatable is not None:
                    errors.append(
                        invalid(
                            _child(rpath, "rule"),
                            spec.get("rule", ""),
                            f"oldSelf cannot be used on the uncorrelatable portion of the schema within {uncorrelatable}",
                        )
                    )
            elif spec.get("optionalOldSelf") is not None:
                errors.append(
                    invalid(
                        _child(rpath, "optionalOldSelf"),
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
    return _causes(validate_crd_errors(crd, server_minor=server_minor))


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
