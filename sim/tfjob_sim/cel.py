"""CEL for CRD ``x-kubernetes-validations``, on top of cel-python (``celpy``).

Why this exists: the simulated apiserver must accept and reject custom resources exactly where a
real one does, and the rules live in CEL. cel-python evaluates CEL but differs from the
Kubernetes CEL environment in ways that would leak to users, so this module wraps it:

- **Compile-time errors surface at CRD creation**, as the real server reports them
  (``compilation failed: ERROR: <input>:L:C: ...`` with the source snippet). cel-python is dynamically
  typed, so two checks the real (type-checking) compiler performs are added here: unknown functions
  (``undeclared reference to 'f' (in container '')``) and, when the rule's schema is given, fields
  the schema does not declare (``undefined field 'x'``).
- **Values are converted by schema**, like apiserver's ``UnstructuredToVal``: ``type: number`` is a
  double even for ``1``, ``format: date-time``/``date`` strings are timestamps, ``duration`` durations,
  ``byte`` bytes; ``x-kubernetes-list-type: set|map`` lists compare without regard to order; at the
  resource root ``self.metadata`` exposes only ``name`` and ``generateName``.
- **Evaluation errors carry the Kubernetes wording** (``no such key: x``, ``no such overload``,
  ``division by zero``...), so the caller can build ``<err> evaluating rule: <rule>`` messages.
- A few functions of the Kubernetes CEL libraries that cel-python lacks are added (strings:
  ``lowerAscii upperAscii trim split join replace indexOf lastIndexOf substring charAt``; lists:
  ``isSorted sum max indexOf lastIndexOf slice``; regex: ``find findAll``; ``dyn``; optionals for
  ``optionalOldSelf``: ``hasValue value orValue``).

Contract: ``CelRule(rule, schema=None, is_root=False)`` compiles once (parse cached per text) and
raises :class:`CelCompileError`; ``evaluate(self_value, old_self=MISSING) -> bool`` takes plain JSON
values and raises :class:`CelEvalError`. Not thread-safe-sensitive: no shared mutable state.
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import celpy
import celpy.celtypes as ct
import lark
import lark.exceptions
import orjson
import re2

from tfjob_sim.celcompile import Deferred, Fallback, compile_tree, int64

__all__ = [
    "MISSING",
    "CelCompileError",
    "CelEvalError",
    "CelRule",
    "to_cel",
    "from_cel",
]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Sentinel for "no old value" (create, or a field that did not exist before the update)."""


class CelCompileError(Exception):
    """The rule does not compile. ``str(err)`` is the detail the apiserver prints."""


class CelEvalError(Exception):
    """Evaluation failed. ``str(err)`` uses cel-go's wording (``no such key: x``)."""

    def __init__(self, message: str, *, no_such_overload: bool = False) -> None:
        super().__init__(message)
        self.no_such_overload = no_such_overload


# ----------------------------------------------------------------------------------------------
# Extra functions (the Kubernetes CEL libraries that cel-python lacks and that are cheap)
# ----------------------------------------------------------------------------------------------


def _err(message: str) -> celpy.CELEvalError:
    return celpy.CELEvalError(message, ValueError, (message,))


def _lower_ascii(s: ct.StringType) -> ct.StringType:
    return ct.StringType("".join(c.lower() if c.isascii() else c for c in s))


def _upper_ascii(s: ct.StringType) -> ct.StringType:
    return ct.StringType("".join(c.upper() if c.isascii() else c for c in s))


def _trim(s: ct.StringType) -> ct.StringType:
    return ct.StringType(s.strip())


def _split(s: ct.StringType, sep: ct.StringType, limit: ct.IntType | None = None) -> ct.ListType:
    if limit is not None:
        n = int(limit)
        if n == 0:
            return ct.ListType([])
        parts = s.split(sep, n - 1) if n > 0 else s.split(sep)
    elif sep == "":
        parts = list(s)
    else:
        parts = s.split(sep)
    return ct.ListType([ct.StringType(p) for p in parts])


def _join(items: ct.ListType, sep: ct.StringType | None = None) -> ct.StringType:
    return ct.StringType(("" if sep is None else str(sep)).join(str(i) for i in items))


def _replace(s: ct.StringType, old: ct.StringType, new: ct.StringType, n: ct.IntType | None = None) -> ct.StringType:
    count = -1 if n is None else int(n)
    return ct.StringType(s.replace(old, new, count))


def _index_of(container: Any, item: Any, offset: ct.IntType | None = None) -> ct.IntType | celpy.CELEvalError:
    if isinstance(container, ct.StringType):
        start = 0 if offset is None else int(offset)
        if start < 0 or start > len(container):
            return _err(f"index out of range: {start}")
        return ct.IntType(container.find(item, start))
    for i, value in enumerate(container):
        if value == item:
            return ct.IntType(i)
    return ct.IntType(-1)


def _last_index_of(container: Any, item: Any) -> ct.IntType:
    if isinstance(container, ct.StringType):
        return ct.IntType(container.rfind(item))
    for i in range(len(container) - 1, -1, -1):
        if container[i] == item:
            return ct.IntType(i)
    return ct.IntType(-1)


def _substring(
    s: ct.StringType, start: ct.IntType, end: ct.IntType | None = None
) -> ct.StringType | celpy.CELEvalError:
    b, e = int(start), len(s) if end is None else int(end)
    if b < 0 or b > len(s) or e < b or e > len(s):
        return _err(f"index out of range: {b if b < 0 or b > len(s) else e}")
    return ct.StringType(s[b:e])


def _char_at(s: ct.StringType, index: ct.IntType) -> ct.StringType | celpy.CELEvalError:
    i = int(index)
    if i < 0 or i > len(s):
        return _err(f"index out of range: {i}")
    return ct.StringType(s[i : i + 1])


def _is_sorted(items: Sequence[Any]) -> ct.BoolType:  # CEL values: the interpreter checks their types
    return ct.BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))


def _sum(items: Sequence[Any]) -> Any:
    if not items:
        return ct.IntType(0)
    total = items[0]
    for value in items[1:]:
        total = total + value
    return total


def _max(items: Any, *more: Any) -> Any:
    values: list[Any] = list(items) if not more and isinstance(items, ct.ListType) else [items, *more]
    if not values:
        return _err("max(list) argument must not be empty")
    return functools.reduce(lambda a, b: b if b > a else a, values)


def _slice(items: ct.ListType, start: ct.IntType, end: ct.IntType) -> ct.ListType | celpy.CELEvalError:
    b, e = int(start), int(end)
    if b < 0 or e < b or e > len(items):
        return _err(f"cannot slice({b}, {e}), list is length {len(items)}")
    return ct.ListType(items[b:e])


def _find(s: ct.StringType, pattern: ct.StringType) -> ct.StringType:
    m = re2.search(str(pattern), str(s))
    return ct.StringType(m.group(0) if m else "")


def _find_all(s: ct.StringType, pattern: ct.StringType, limit: ct.IntType | None = None) -> ct.ListType:
    found = [ct.StringType(m.group(0)) for m in re2.finditer(str(pattern), str(s))]
    if limit is not None and int(limit) >= 0:
        found = found[: int(limit)]
    return ct.ListType(found)


def _dyn(value: Any) -> Any:
    return value


class _Optional:
    """CEL ``optional`` value bound to ``oldSelf`` when a rule sets ``optionalOldSelf: true``."""

    __slots__ = ("present", "_inner", "_make")

    def __init__(self, inner: Any = MISSING, *, make: Callable[[], Any] | None = None) -> None:
        # ``make``: builds the value when a rule first reaches it. A rule such as the TFJob's name
        # length check reads oldSelf only for long names, yet every status write of every job
        # evaluated it with the whole old object converted to CEL values up front.
        self.present = inner is not MISSING or make is not None
        self._inner = inner
        self._make = make

    @property
    def inner(self) -> Any:
        if self._make is not None:
            self._inner, self._make = self._make(), None
        return self._inner

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Optional):
            return self.present == other.present and (not self.present or self.inner == other.inner)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _has_value(opt: _Optional) -> ct.BoolType:
    return ct.BoolType(opt.present)


def _value(opt: _Optional) -> Any:
    if not opt.present:
        return _err("optional.none() dereference")
    return opt.inner


def _or_value(opt: _Optional, default: Any) -> Any:
    return opt.inner if opt.present else default


EXTRA_FUNCTIONS: dict[str, Any] = {
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "trim": _trim,
    "split": _split,
    "join": _join,
    "replace": _replace,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "charAt": _char_at,
    "isSorted": _is_sorted,
    "sum": _sum,
    "max": _max,
    "slice": _slice,
    "find": _find,
    "findAll": _find_all,
    "dyn": _dyn,
    "hasValue": _has_value,
    "value": _value,
    "orValue": _or_value,
}

# cel-python handles these itself (macros and built-ins) ...
_MACROS = {"has", "all", "exists", "exists_one", "map", "filter", "min", "reduce"}
_KNOWN_FUNCTIONS = frozenset(celpy.evaluation.base_functions) | frozenset(EXTRA_FUNCTIONS) | _MACROS
# ... and these identifiers name types (``type(x) == int``).
_TYPE_IDENTS = {
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "duration",
    "timestamp",
}

# ----------------------------------------------------------------------------------------------
# JSON <-> CEL values, by schema
# ----------------------------------------------------------------------------------------------


class _UnorderedList(ct.ListType):
    """A ``x-kubernetes-list-type: set`` or ``map`` list: equality ignores element order."""

    def __eq__(self, other: Any) -> Any:
        if not isinstance(other, list):
            return super().__eq__(other)
        if len(self) != len(other):
            return ct.BoolType(False)
        remaining = list(other)
        for item in self:
            for i, candidate in enumerate(remaining):
                if bool(item == candidate):
                    del remaining[i]
                    break
            else:
                return ct.BoolType(False)
        return ct.BoolType(True)

    def __ne__(self, other: Any) -> Any:
        return ct.BoolType(not bool(self.__eq__(other)))

    __hash__ = None  # type: ignore[assignment]


def _schema_type(schema: dict | None) -> str:
    return (schema or {}).get("type", "") if isinstance(schema, dict) else ""


def to_cel(value: Any, schema: dict | None = None, *, is_root: bool = False) -> Any:
    """Convert a JSON value to CEL, following ``schema`` (``None`` = dynamic, JSON-typed)."""
    if value is None:
        return None
    if not isinstance(schema, dict):
        return celpy.json_to_cel(value)
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool):
            return ct.BoolType(value)
        if isinstance(value, int):
            return ct.IntType(value)
        return celpy.json_to_cel(value)
    kind = schema.get("type", "")
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if is_root and key == "metadata":
                out[ct.StringType(key)] = _root_metadata(item)
                continue
            out[ct.StringType(key)] = to_cel(item, _property_schema(schema, key))
        return ct.MapType(out)
    if isinstance(value, list):
        items_schema = _items_schema(schema)
        converted = [to_cel(item, items_schema) for item in value]
        if schema.get("x-kubernetes-list-type") in ("set", "map"):
            return _UnorderedList(converted)
        return ct.ListType(converted)
    if isinstance(value, bool):
        return ct.BoolType(value)
    if kind == "number" and isinstance(value, (int, float)):
        return ct.DoubleType(float(value))
    if isinstance(value, int):
        return int64(value)
    if isinstance(value, float):
        return ct.DoubleType(value)
    if isinstance(value, str) and kind == "string":
        fmt = schema.get("format", "")
        try:
            if fmt == "date-time":
                return ct.TimestampType(value)
            if fmt == "date":
                return ct.TimestampType(_dt.datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=_dt.UTC))
            if fmt == "duration":
                return ct.DurationType(value)
            if fmt == "byte":
                return ct.BytesType(base64.b64decode(value, validate=True))
        except (ValueError, TypeError) as exc:
            # The schema validator reports the format error itself; CEL sees the raw string.
            del exc
        return ct.StringType(value)
    return celpy.json_to_cel(value)


def _property_schema(schema: dict, key: str) -> dict | None:
    props = schema.get("properties")
    if isinstance(props, dict) and key in props:
        return props[key]
    addl = schema.get("additionalProperties")
    return addl if isinstance(addl, dict) else None


def _items_schema(schema: dict) -> dict | None:
    items = schema.get("items")
    return items if isinstance(items, dict) else None


def _root_metadata(meta: Any) -> ct.MapType:
    """At the resource root, ``self.metadata`` holds only ``name`` and ``generateName``."""
    meta = meta if isinstance(meta, dict) else {}
    return ct.MapType(
        {ct.StringType(k): ct.StringType(meta[k]) for k in ("name", "generateName") if isinstance(meta.get(k), str)}
    )


class _Lazy(Deferred):
    """A JSON map or list whose CEL value (``to_cel`` by its schema) is built only as far as a compiled
    rule reads it: a rule on a TFJob replica spec that checks container names should not convert the
    pod template, and the tfReplicaSpecs rules that read only the keys should not convert the specs."""

    __slots__ = ("doc", "schema", "is_root", "_fields")

    def __init__(self, doc: Any, schema: dict, is_root: bool) -> None:
        self.doc = doc  # a JSON map or list
        self.schema = schema
        self.is_root = is_root
        self._fields: dict[str, Any] | None = None  # converted fields: rules read a path many times

    def select(self, field: str) -> Any:
        fields = self._fields
        if fields is None:
            if not isinstance(self.doc, dict):
                raise KeyError(field)
            fields = self._fields = {}
        elif field in fields:
            return fields[field]
        item = self.doc[field]
        if self.is_root and field == "metadata":
            value = _root_metadata(item)
        else:
            value = _deferred(item, _property_schema(self.schema, field))
        fields[field] = value
        return value

    def item(self, key: Any) -> Any:
        doc = self.doc
        if isinstance(doc, dict):
            if isinstance(key, ct.StringType):
                return self.select(str(key))
            raise LookupError(key)
        if type(key) is ct.IntType and 0 <= key < len(doc):
            return _deferred(doc[key], _items_schema(self.schema))
        raise LookupError(key)

    def members(self) -> list[Any]:
        doc = self.doc
        if isinstance(doc, dict):
            return [ct.StringType(k) for k in doc]
        items_schema = _items_schema(self.schema)
        return [_deferred(item, items_schema) for item in doc]

    def whole(self) -> Any:
        return to_cel(self.doc, self.schema, is_root=self.is_root)


def _deferred(value: Any, schema: dict | None, *, is_root: bool = False) -> Any:
    """``to_cel(value, schema)``, deferred where that builds a map or list by schema."""
    if isinstance(value, (dict, list)) and isinstance(schema, dict) and not schema.get("x-kubernetes-int-or-string"):
        return _Lazy(value, schema, is_root)
    return to_cel(value, schema, is_root=is_root)


def from_cel(value: Any) -> Any:
    """CEL value → plain Python/JSON (used for messageExpression results and tests)."""
    if isinstance(value, ct.BoolType):
        return bool(value)
    if isinstance(value, (ct.IntType, ct.UintType)):
        return int(value)
    if isinstance(value, ct.DoubleType):
        return float(value)
    if isinstance(value, ct.StringType):
        return str(value)
    if isinstance(value, ct.ListType):
        return [from_cel(v) for v in value]
    if isinstance(value, ct.MapType):
        return {from_cel(k): from_cel(v) for k, v in value.items()}
    return value


# ----------------------------------------------------------------------------------------------
# Compilation
# ----------------------------------------------------------------------------------------------

_ENV = celpy.Environment()


@functools.lru_cache(maxsize=2048)
def _parse(text: str) -> lark.Tree:
    return _ENV.compile(text)


def _literal(tree: lark.Tree) -> Any:
    """A literal's value, as the interpreter reads it (escapes, bytes, uint...): computed once per rule."""
    return _ENV.program(tree, functions=EXTRA_FUNCTIONS).evaluate({})


_VARIABLES = frozenset({"self", "oldSelf"})
# Tests set this to evaluate every rule both ways and fail on any difference, and to check every
# remembered result against a fresh evaluation (sim/tests/conftest.py).
CROSS_CHECK = False


def _snippet(text: str, line: int, column0: int) -> str:
    lines = text.split("\n")
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    return f"\n | {src}\n | {'.' * column0}^"


def _compile_error(text: str, line: int, column0: int, message: str) -> CelCompileError:
    return CelCompileError(
        f"compilation failed: ERROR: <input>:{line}:{column0 + 1}: {message}{_snippet(text, line, column0)}"
    )


def _syntax_error(text: str, exc: celpy.CELParseError) -> CelCompileError:
    """cel-go (ANTLR) wording where it can be derived from lark's error; the expected-token sets
    ANTLR lists (``expecting {...}``) are not reproduced."""
    cause = exc.__context__
    line = exc.line or 1
    column0 = max((exc.column or 1) - 1, 0)
    lines = text.split("\n")
    if isinstance(cause, lark.exceptions.UnexpectedToken) and cause.token.type == "$END":
        line = len(lines)
        column0 = len(lines[-1])
        return _compile_error(text, line, column0, "Syntax error: mismatched input '<EOF>'")
    if isinstance(cause, lark.exceptions.UnexpectedToken):
        return _compile_error(text, line, column0, f"Syntax error: mismatched input '{cause.token}'")
    src = lines[line - 1] if 0 < line <= len(lines) else ""
    near = src[column0 : column0 + 1] or "<EOF>"
    return _compile_error(text, line, column0, f"Syntax error: token recognition error at: '{near}'")


def _token_pos(node: Any) -> tuple[int, int]:
    if isinstance(node, lark.Token):
        return (node.line or 1), max((node.column or 1) - 1, 0)
    if isinstance(node, lark.Tree):
        for child in node.children:
            pos = _token_pos(child)
            if pos != (0, 0):
                return pos
    return 0, 0


_OPTIONAL_METHODS = {"hasValue": 0, "value": 0, "orValue": 1}  # a CEL optional's methods and their arity


def _is_old_self(node: Any) -> bool:
    while isinstance(node, lark.Tree) and node.data in ("member", "primary") and len(node.children) == 1:
        node = node.children[0]
    return isinstance(node, lark.Tree) and node.data == "ident" and str(node.children[0]) == "oldSelf"


def _self_type_name() -> str:
    """The name kube-apiserver gives a rule's object type: ``selfType`` and the nanoseconds of the clock when the
    CRD is compiled, so it differs from one compilation to the next."""
    return f"selfType{time.time_ns() % 1_000_000_000}"


class _Checker:
    """Static checks cel-python skips: unknown functions; fields the schema does not declare.

    Types are schema dicts (``None`` = dynamic, nothing checked). Macro variables are bound to the
    element schema of the list (or ``{"type": "string"}`` for map keys).
    """

    def __init__(self, text: str, schema: dict | None, is_root: bool, plain_old_self: bool = False) -> None:
        self.text = text
        self.root = self._root_schema(schema, is_root) if isinstance(schema, dict) else None
        self.uses_old_self = False
        self.plain_old_self = plain_old_self

    @staticmethod
    def _root_schema(schema: dict, is_root: bool) -> dict:
        if not is_root:
            return schema
        props = dict(schema.get("properties") or {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props["metadata"] = {
            "type": "object",
            "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}},
        }
        return {**schema, "properties": props}

    def check(self, tree: lark.Tree) -> None:
        self._type(tree, {})

    def _not_optional(self, method: Any, name: str, args: Any) -> None:
        """cel-go's error for an optional's method called on a plain ``oldSelf``, at the call's open parenthesis."""
        line, column0 = _token_pos(method)
        lines = self.text.split("\n")
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        column0 += len(name)
        while column0 < len(src) and src[column0] != "(":
            column0 += 1
        target = _self_type_name()
        argument_types = ", ".join([target] * _OPTIONAL_METHODS[name])
        raise _compile_error(
            self.text,
            line,
            column0,
            f"found no matching overload for '{name}' applied to '{target}.({argument_types})'",
        )

    # Returns the schema (type) of the expression, or None when unknown/dynamic.
    def _type(self, node: Any, scope: dict[str, dict | None]) -> dict | None:
        if isinstance(node, lark.Token):
            return None
        data = node.data
        if data == "ident":
            name = str(node.children[0])
            if name == "oldSelf":
                self.uses_old_self = True
                return self.root
            if name == "self":
                return self.root
            if name in scope:
                return scope[name]
            if name not in _TYPE_IDENTS:
                line, col = _token_pos(node.children[0])
                raise _compile_error(self.text, line, col, f"undeclared reference to '{name}' (in container '')")
            return None
        if data == "member_dot":
            operand, field = node.children[0], node.children[1]
            base = self._type(operand, scope)
            return self._select(base, str(field), field)
        if data == "member_index":
            base = self._type(node.children[0], scope)
            self._type(node.children[1], scope)
            if base is None:
                return None
            if _schema_type(base) == "array":
                return base.get("items") if isinstance(base.get("items"), dict) else None
            addl = base.get("additionalProperties")
            return addl if isinstance(addl, dict) else None
        if data == "member_dot_arg":
            operand, method = node.children[0], node.children[1]
            args = node.children[2] if len(node.children) > 2 else None
            name = str(method)
            if self.plain_old_self and name in _OPTIONAL_METHODS and _is_old_self(operand):
                self._not_optional(method, name, args)
            base = self._type(operand, scope)
            arg_nodes = list(args.children) if isinstance(args, lark.Tree) else []
            if name in ("all", "exists", "exists_one", "map", "filter") and arg_nodes:
                var = self._macro_var(arg_nodes[0])
                elem = self._element(base)
                inner = dict(scope)
                if var is not None:
                    inner[var] = elem
                for arg in arg_nodes[1:]:
                    self._type(arg, inner)
                return base if name == "filter" else None
            if name not in _KNOWN_FUNCTIONS:
                # cel-go locates a call at its '(' token
                line, col = _token_pos(method)
                raise _compile_error(
                    self.text, line, col + len(name), f"undeclared reference to '{name}' (in container '')"
                )
            for arg in arg_nodes:
                self._type(arg, scope)
            return None
        if data == "ident_arg":
            name = str(node.children[0])
            args = node.children[1] if len(node.children) > 1 else None
            if name not in _KNOWN_FUNCTIONS:
                line, col = _token_pos(node.children[0])
                raise _compile_error(
                    self.text, line, col + len(name), f"undeclared reference to '{name}' (in container '')"
                )
            if isinstance(args, lark.Tree):
                for arg in args.children:
                    self._type(arg, scope)
            return None
        if data in ("dot_ident", "dot_ident_arg"):
            return None
        for child in node.children:
            if isinstance(child, lark.Tree):
                result = self._type(child, scope)
                if len(node.children) == 1:
                    return result
        return None

    @staticmethod
    def _macro_var(arg: Any) -> str | None:
        while isinstance(arg, lark.Tree):
            if arg.data == "ident":
                return str(arg.children[0])
            if len(arg.children) != 1:
                return None
            arg = arg.children[0]
        return None

    @staticmethod
    def _element(base: dict | None) -> dict | None:
        if base is None:
            return None
        if _schema_type(base) == "array":
            return base.get("items") if isinstance(base.get("items"), dict) else None
        if _schema_type(base) == "object":
            return {"type": "string"}
        return None

    def _select(self, base: dict | None, name: str, token: Any) -> dict | None:
        if base is None or base.get("x-kubernetes-int-or-string"):
            return None
        if _schema_type(base) != "object":
            return None
        props = base.get("properties")
        addl = base.get("additionalProperties")
        if isinstance(props, dict) and props:
            if name in props:
                return props[name]
            line, col = _token_pos(token)
            raise _compile_error(self.text, line, max(col - 1, 0), f"undefined field '{name}'")
        if isinstance(addl, dict):
            return addl
        return None


def _eval_message(exc: celpy.CELEvalError) -> CelEvalError:
    args = exc.args
    message = str(args[0]) if args else "evaluation error"
    kind = args[1] if len(args) > 1 else None
    m = re.match(r"no such member in mapping: '(.*)'$", message, re.S)
    if m or kind is KeyError and "undeclared reference" not in message:
        key = m.group(1) if m else (args[2][0] if len(args) > 2 and args[2] else "")
        return CelEvalError(f"no such key: {key}")
    if "undeclared reference to" in message:
        name = re.search(r"undeclared reference to '([^']*)'", message)
        return CelEvalError(f"no such attribute(s): {name.group(1) if name else '?'}")
    if kind is ZeroDivisionError:
        return CelEvalError(
            "modulus by zero" if "modulus" in message and "divide" not in message else "division by zero"
        )
    if kind is IndexError:
        return CelEvalError("index out of bounds")
    if "overflow" in message:
        return CelEvalError("integer overflow")
    if "no matching overload" in message or "no such overload" in message or kind is TypeError:
        return CelEvalError("no such overload", no_such_overload=True)
    return CelEvalError(message)


_MEMO_LIMIT = 4096  # remembered results per rule; the memo starts over when full


class CelRule:
    """One compiled ``x-kubernetes-validations`` rule (or messageExpression).

    ``schema`` is the schema node the rule is attached to (enables field checks and typed value
    conversion); ``is_root`` marks the resource root (``apiVersion``/``kind``/``metadata.name``).
    """

    __slots__ = ("rule", "schema", "is_root", "references_old_self", "_program", "_fast", "_observed", "_memo")

    def __init__(
        self, rule: str, schema: dict | None = None, *, is_root: bool = False, optional_old_self: bool | None = None
    ) -> None:
        """Compile ``rule``; CelCompileError with cel-go's message when it does not compile. ``optional_old_self``
        False: ``oldSelf`` is a plain value, and its optional's methods do not compile (the CRD checks say which;
        None: not checked)."""
        if not isinstance(rule, str):
            raise CelCompileError(f"rule must be a string, not {type(rule).__name__}")
        self.rule = rule
        self.schema = schema if isinstance(schema, dict) else None
        self.is_root = is_root
        try:
            tree = _parse(rule)
        except celpy.CELParseError as exc:
            raise _syntax_error(rule, exc) from None
        checker = _Checker(rule, self.schema, is_root, plain_old_self=optional_old_self is False)
        checker.check(tree)
        self.references_old_self = checker.uses_old_self
        self._program = _ENV.program(tree, functions=EXTRA_FUNCTIONS)
        self._fast = compile_tree(tree, EXTRA_FUNCTIONS, _literal, _VARIABLES)
        # What the rule can observe of self: results are remembered by that part alone.
        self._observed = self._fast.observed if self._fast is not None else None
        # Results by input: CEL is pure, so the same JSON in gives the same value (or error) out, and
        # cel-python's tree-walking interpreter costs 0.5-50 ms a rule. Jobs share replica types
        # and container names, whatever else differs, so a burst of creates evaluates each rule
        # below the root about once. At the root, a rule reading the name sees a value that never
        # repeats: no memo there.
        self._memo: dict[bytes, Any] | None = {}
        if is_root and (self._observed is None or "metadata" in self._observed.fields):
            self._memo = None

    def __repr__(self) -> str:
        return f"CelRule({self.rule!r})"

    def evaluate_value(self, self_value: Any, old_self: Any = MISSING, *, optional_old_self: bool = False) -> Any:
        """Evaluate to a CEL value. ``self_value``/``old_self`` are plain JSON. The value returned may be
        shared with other callers: do not mutate it."""
        memo = self._memo
        if memo is None:
            return self._evaluate(self_value, old_self, optional_old_self)
        observed = self._observed
        try:
            key = orjson.dumps(
                (
                    self_value if observed is None else observed.project(self_value),
                    old_self is MISSING,
                    None if old_self is MISSING else old_self,
                    optional_old_self,
                )
            )
        except TypeError:  # not plain JSON (e.g. an integer beyond 64 bits): evaluate without the memo
            return self._evaluate(self_value, old_self, optional_old_self)
        found = memo.get(key)
        if found is None:
            found = self._outcome(self_value, old_self, optional_old_self)
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[key] = found
        elif CROSS_CHECK:  # a remembered result must be what evaluating this very value gives
            fresh = self._outcome(self_value, old_self, optional_old_self)
            if type(fresh) is not type(found) or fresh != found:
                raise AssertionError(
                    f"CEL {self.rule!r} remembered {found!r} for {self_value!r}, which gives {fresh!r}"
                )
        if isinstance(found, tuple):  # a remembered evaluation error; a fresh exception each time
            raise CelEvalError(found[0], no_such_overload=found[1])
        return found

    def _outcome(self, self_value: Any, old_self: Any, optional_old_self: bool) -> Any:
        """The value, or the evaluation error as (message, no_such_overload)."""
        try:
            return self._evaluate(self_value, old_self, optional_old_self)
        except CelEvalError as exc:
            return (str(exc), exc.no_such_overload)

    def _activation(
        self, self_value: Any, old_self: Any, optional_old_self: bool, convert: Any = to_cel
    ) -> dict[str, Any]:
        """CEL values of ``self`` and ``oldSelf`` (``convert=_deferred``: built as far as they are read)."""
        activation: dict[str, Any] = {"self": convert(self_value, self.schema, is_root=self.is_root)}
        if optional_old_self:
            # Whole: an optional's value reaches the rule only through value()/orValue() calls.
            activation["oldSelf"] = (
                _Optional()
                if old_self is MISSING
                else _Optional(make=lambda: to_cel(old_self, self.schema, is_root=self.is_root))
            )
        elif old_self is not MISSING:
            activation["oldSelf"] = convert(old_self, self.schema, is_root=self.is_root)
        return activation

    def _evaluate(self, self_value: Any, old_self: Any, optional_old_self: bool) -> Any:
        if self._fast is not None:
            try:
                fast = self._fast.run(self._activation(self_value, old_self, optional_old_self, _deferred))
            except Fallback:
                pass  # an error or a case the closures do not claim: the interpreter decides
            else:
                if not CROSS_CHECK:
                    return fast
                slow = self._program.evaluate(self._activation(self_value, old_self, optional_old_self))
                if type(slow) is not type(fast) or slow != fast:
                    raise AssertionError(f"compiled CEL {self.rule!r} gave {fast!r}, the interpreter {slow!r}")
                return fast
        activation = self._activation(self_value, old_self, optional_old_self)
        try:
            result = self._program.evaluate(activation)
        except celpy.CELEvalError as exc:
            raise _eval_message(exc) from None
        except (TypeError, ValueError, KeyError, IndexError, ZeroDivisionError, AttributeError, re2.error) as exc:
            # cel-python lets some host errors escape its CELEvalError wrapping (e.g. bad regex).
            raise CelEvalError(f"{type(exc).__name__}: {exc}") from None
        if isinstance(result, celpy.CELEvalError):
            raise _eval_message(result)
        return result

    def evaluate(self, self_value: Any, old_self: Any = MISSING, *, optional_old_self: bool = False) -> bool:
        """True if the rule holds. Non-boolean results raise :class:`CelEvalError`."""
        result = self.evaluate_value(self_value, old_self, optional_old_self=optional_old_self)
        if not isinstance(result, ct.BoolType):
            raise CelEvalError(f"rule did not evaluate to a bool, got {type(result).__name__}")
        return bool(result)
