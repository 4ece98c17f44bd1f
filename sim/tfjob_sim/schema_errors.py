"""apimachinery's ``field.Error`` as the CRD validators report it: the error types, the value forms
(Go ``%v``, quoted strings, JSON), the rendered field paths and the Status causes.

Why a module of its own: the three validators of :mod:`tfjob_sim.schema` (values, structural schemas, CRD
definitions) must print the same error the same way, down to the singular "1 byte" a newer server says,
and a client that matches on these messages must not see two spellings of one error.

Contract: the constructors (:func:`required`, :func:`invalid`, ...) take the rendered path (None: none,
printed ``<nil>``); :meth:`FieldError.cause` is one Status cause; ``DEFAULT_SERVER_MINOR`` is the
Kubernetes minor version whose messages are reproduced unless a validator is given another.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tfjob_sim.gotext import go_float, go_json, go_quote

DEFAULT_SERVER_MINOR = 33
"""Kubernetes minor version whose messages are reproduced; the simulator's ``/version`` says 1.33.
Differences handled: 1.34 singular "1 byte"/"1 item" and the k8s-short-name/k8s-long-name formats;
1.35 CEL failure values; 1.36 int32/float range checks."""

# ----------------------------------------------------------------------------------------------
# Go value formatting (what apimachinery prints for a field.Error's BadValue)
# ----------------------------------------------------------------------------------------------


def go_value(value: Any) -> str:
    """Go ``%v`` of int64/float64/bool (the scalar forms field.Error prints without quotes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


# ----------------------------------------------------------------------------------------------
# field.Error
# ----------------------------------------------------------------------------------------------

OMIT = object()  # field.OmitValueType{}: the value is not printed

TYPE_TEXT = {
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
BLOCKING_TYPES = {
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
        text = TYPE_TEXT.get(self.type, f"<unknown error {go_quote(self.type)}>")
        if self.type not in _NO_VALUE_TYPES and self.bad_value is not OMIT:
            value = self.bad_value
            if isinstance(value, (bool, int, float)):
                text = f"{text}: {go_value(value)}"
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


def child_path(path: str | None, name: str) -> str:
    return f"{path}.{name}" if path else name


def key_path(path: str | None, key: str) -> str:
    return f"{path or ''}[{key}]"


def index_path(path: str | None, i: int) -> str:
    return f"{path or ''}[{i}]"


def path_or_nil(path: str | None) -> str:
    return path if path else "<nil>"


def required(path: str | None, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", path_or_nil(path), "", detail)


def invalid(path: str | None, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path_or_nil(path), value, detail)


def forbidden(path: str | None, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path_or_nil(path), "", detail)


def not_supported(path: str | None, value: Any, valid: Iterable[str]) -> FieldError:
    quoted = [go_quote(str(v)) for v in valid]
    return FieldError(
        "FieldValueNotSupported", path_or_nil(path), value, "supported values: " + ", ".join(quoted) if quoted else ""
    )


def duplicate(path: str | None, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", path_or_nil(path), value, "")


def too_many(path: str | None, actual: int, maximum: int, minor: int = DEFAULT_SERVER_MINOR) -> FieldError:
    unit = "item" if maximum == 1 and minor >= 34 else "items"
    detail = f"must have at most {maximum} {unit}" if maximum >= 0 else "has too many items"
    return FieldError("FieldValueTooMany", path_or_nil(path), actual if actual >= 0 else OMIT, detail)


def too_long(path: str | None, maximum: int, minor: int = DEFAULT_SERVER_MINOR) -> FieldError:
    unit = "byte" if maximum == 1 and minor >= 34 else "bytes"
    detail = f"may not be more than {maximum} {unit}" if maximum >= 0 else "value is too long"
    return FieldError("FieldValueTooLong", path_or_nil(path), "<value omitted>", detail)


def to_causes(errors: Iterable[FieldError]) -> list[dict[str, str]]:
    return [e.cause() for e in errors]
