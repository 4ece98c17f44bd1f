"""kubectl/client-go JSONPath, as the apiserver uses it for CRD ``additionalPrinterColumns``.

Why this exists: the simulated apiserver renders ``Table`` responses for custom resources, and
``kubectl get`` shows whatever the server puts in the cells. The real server evaluates each
column's ``jsonPath`` with client-go's ``util/jsonpath`` (template ``{<jsonPath>}``, missing keys
allowed) and keeps only the *first* result. Reproducing that engine's quirks matters more than
implementing the JSONPath "standard":

- ``['a.b']`` is **not** a quoted key: client-go re-parses the bracket content as ``.a.b``, so the
  dots are separators. A literal dot is written ``a\\.b`` (e.g. ``.metadata.labels.app\\.kubernetes\\.io/name``).
- ``[-1:]`` on an empty list is an "index out of bounds" error, and every evaluation error yields an
  empty cell (``None``), never a failed request.
- Filters compare with Go-template rules: int vs float, or anything vs ``null``, is an error.

Contract:
- :func:`compile_path` parses once (cached) and raises :class:`JSONPathError` (a ``ValueError``)
  for text client-go's parser rejects.
- The compiled :class:`CompiledPath` is callable: ``path(obj) -> list`` (the values of the first
  template segment, ``[]`` on evaluation errors — the printer-column semantics); ``path.find(obj)``
  returns every segment's values and raises :class:`JSONPathEvalError` instead.
- :func:`format_cell` turns those values into the Table cell the real TableConvertor emits.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from tfjob_sim.gotext import go_float, go_type

__all__ = [
    "JSONPathError",
    "JSONPathEvalError",
    "CompiledPath",
    "compile_path",
    "evaluate",
    "format_cell",
    "human_duration",
]


class JSONPathError(ValueError):
    """The path does not parse (the real server then falls back to default table columns)."""


class JSONPathEvalError(Exception):
    """Evaluation failed (index out of bounds, non-list filtered, incomparable filter operands)."""


# ----------------------------------------------------------------------------------------------
# AST
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Text:
    text: str


@dataclass(frozen=True)
class _Field:
    name: str


@dataclass(frozen=True)
class _Wildcard:
    pass


@dataclass(frozen=True)
class _Recursive:
    pass


@dataclass(frozen=True)
class _Int:
    value: int


@dataclass(frozen=True)
class _Float:
    value: float


@dataclass(frozen=True)
class _Bool:
    value: bool


@dataclass(frozen=True)
class _Identifier:
    name: str


@dataclass(frozen=True)
class _Param:
    value: int
    known: bool
    derived: bool = False


@dataclass(frozen=True)
class _Array:
    start: _Param
    end: _Param
    step: _Param


@dataclass(frozen=True)
class _Filter:
    left: tuple
    right: tuple
    operator: str


@dataclass(frozen=True)
class _Union:
    branches: tuple  # of node tuples


@dataclass
class _Action:
    nodes: list = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# Parser (follows client-go's util/jsonpath/parser.go grammar and error texts)
# ----------------------------------------------------------------------------------------------

_DICT_KEY = re.compile(r"^'([^']*)'$")
_SLICE = re.compile(r"^(-?\d*)(:-?\d*)?(:-?\d*)?$")
_FILTER = re.compile(r"^([^!<>=]+)([!<>=]+)(.+?)$", re.S)
_TERMINATORS = set(" \t\r\n.,[]$@{}")


def _is_alnum(ch: str) -> bool:
    return ch == "_" or ch.isalpha() or ch.isdigit()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.start = 0

    # -- scanning helpers --------------------------------------------------------------------
    def _next(self) -> str:
        if self.pos >= len(self.text):
            return ""
        ch = self.text[self.pos]
        self.pos += 1
        return ch

    def _backup(self) -> None:
        self.pos -= 1

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _consume(self) -> str:
        value = self.text[self.start : self.pos]
        self.start = self.pos
        return value

    # -- grammar -------------------------------------------------------------------------------
    def parse(self) -> list:
        """Returns the template segments: ``_Text`` and ``_Action`` items."""
        segments: list = []
        while True:
            brace = self.text.find("{", self.pos)
            if brace < 0:
                if len(self.text) > self.start:
                    segments.append(_Text(self.text[self.start :]))
                return segments
            self.pos = brace
            if self.pos > self.start:
                segments.append(_Text(self._consume()))
            self.pos += 1
            self._consume()
            action = _Action()
            segments.append(action)
            self._inside_action(action.nodes)

    def _inside_action(self, nodes: list) -> None:
        while True:
            rest = self.text[self.pos :]
            if rest.startswith("}"):
                self.pos += 1
                self._consume()
                return
            if rest.startswith("[?("):
                self._filter(nodes)
                continue
            if rest.startswith(".."):
                self._recursive(nodes)
                continue
            ch = self._next()
            if ch == "" or ch in "\r\n":
                raise JSONPathError("unclosed action")
            if ch == " ":
                self._consume()
            elif ch in "@$":
                self._consume()
            elif ch == "[":
                self._array(nodes)
            elif ch in "\"'":
                self._quote(nodes, ch)
            elif ch == ".":
                self._field(nodes)
            elif ch in "+-" or ch.isdigit():
                self._backup()
                self._number(nodes)
            elif _is_alnum(ch):
                self._backup()
                self._identifier(nodes)
            else:
                raise JSONPathError(f"unrecognized character in action: U+{ord(ch):04X} {ch!r}")

    def _identifier(self, nodes: list) -> None:
        while True:
            ch = self._next()
            if ch == "" or ch in _TERMINATORS:
                if ch:
                    self._backup()
                break
        value = self._consume()
        if value in ("true", "false"):
            nodes.append(_Bool(value == "true"))
        else:
            nodes.append(_Identifier(value))

    def _recursive(self, nodes: list) -> None:
        if nodes and isinstance(nodes[-1], _Recursive):
            raise JSONPathError("invalid multiple recursive descent")
        self.pos += 2
        self._consume()
        nodes.append(_Recursive())
        if _is_alnum(self._peek()):
            self._field(nodes)

    def _number(self, nodes: list) -> None:
        if self._peek() in ("+", "-"):
            self._next()
        while True:
            ch = self._next()
            if ch != "." and not ch.isdigit() or ch == "":
                if ch:
                    self._backup()
                break
        value = self._consume()
        try:
            nodes.append(_Int(int(value)))
            return
        except ValueError:
            pass
        try:
            nodes.append(_Float(float(value)))
        except ValueError:
            raise JSONPathError(f"cannot parse number {value}") from None

    def _array(self, nodes: list) -> None:
        while True:
            ch = self._next()
            if ch in ("", "\n"):
                raise JSONPathError("unterminated array")
            if ch == "]":
                break
        text = self._consume()[1:-1]
        if text == "*":
            text = ":"
        parts = text.split(",")
        if len(parts) > 1:
            branches = []
            for part in parts:
                branches.append(tuple(_parse_action(f"[{part.strip(' ')}]")))
            nodes.append(_Union(tuple(branches)))
            return
        key = _DICT_KEY.match(text)
        if key:
            # client-go re-parses the key as a dotted field path: ['a.b'] == .a.b
            nodes.extend(_parse_action("." + key.group(1)))
            return
        m = _SLICE.match(text)
        if m is None:
            raise JSONPathError(f"invalid array index {text}")
        raw = [m.group(1), m.group(2), m.group(3)]
        params: list[_Param] = []
        for i in range(3):
            value = raw[i] or ""
            if value != "":
                if i > 0:
                    value = value[1:]
                if i > 0 and value == "":
                    params.append(_Param(0, False))
                else:
                    try:
                        params.append(_Param(int(value), True))
                    except ValueError:
                        raise JSONPathError(f"array index {value} is not a number") from None
            elif i == 1:
                params.append(_Param(params[0].value + 1, True, derived=True))
            else:
                params.append(_Param(0, False))
        nodes.append(_Array(params[0], params[1], params[2]))

    def _filter(self, nodes: list) -> None:
        self.pos += 3
        self._consume()
        begin = end = False
        pair = ""
        while True:
            ch = self._next()
            if ch in ("", "\n"):
                raise JSONPathError("unterminated filter")
            if ch in "\"'":
                if not begin:
                    begin, pair = True, ch
                    continue
                if self.text[self.pos - 2] != "\\" and ch == pair:
                    end = True
            elif ch == ")" and begin == end:
                break
        if self._next() != "]":
            raise JSONPathError("unclosed array expect ]")
        text = self._consume()[:-2]
        m = _FILTER.match(text)
        if m is None:
            nodes.append(_Filter(tuple(_parse_action(text)), (), "exists"))
        else:
            nodes.append(_Filter(tuple(_parse_action(m.group(1))), tuple(_parse_action(m.group(3))), m.group(2)))

    def _quote(self, nodes: list, quote: str) -> None:
        while True:
            ch = self._next()
            if ch in ("", "\n"):
                raise JSONPathError("unterminated quoted string")
            if ch == quote and self.text[self.pos - 2] != "\\":
                break
        raw = self._consume()
        nodes.append(_Text(_unquote(raw)))

    def _field(self, nodes: list) -> None:
        self._consume()
        while True:
            ch = self._next()
            if ch == "\\":
                self._next()
            elif ch == "" or ch in _TERMINATORS:
                if ch:
                    self._backup()
                break
        value = self._consume()
        if value == "*":
            nodes.append(_Wildcard())
        else:
            nodes.append(_Field(value.replace("\\", "")))


def _unquote(raw: str) -> str:
    body = raw[1:-1]
    if "\\" not in body:
        return body
    try:
        # Go's strconv.UnquoteChar escapes are a superset of what JSON strings allow; the common
        # ones (\t, \n, \", \', \\, \uXXXX) decode identically with Python's unicode_escape.
        return body.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError) as exc:
        raise JSONPathError(f"unquote string {raw} error {exc}") from None


def _parse_action(text: str) -> list:
    segments = _Parser("{" + text + "}").parse()
    return segments[0].nodes


# ----------------------------------------------------------------------------------------------
# Evaluation (client-go jsonpath.go semantics with AllowMissingKeys(true))
# ----------------------------------------------------------------------------------------------


def _children(value: Any) -> list:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, list):
        return list(value)
    if isinstance(value, str):
        return list(value.encode("utf-8"))  # Go indexes a string by byte
    return []


def _walk(values: list, node: Any) -> list:
    if isinstance(node, _Field):
        out = []
        for v in values:
            if isinstance(v, dict) and node.name in v:
                out.append(v[node.name])
        return out
    if isinstance(node, _Array):
        return _eval_array(values, node)
    if isinstance(node, _Filter):
        return _eval_filter(values, node)
    if isinstance(node, _Wildcard):
        out = []
        for v in values:
            if v is not None:
                out.extend(_children(v))
        return out
    if isinstance(node, _Recursive):
        return _eval_recursive(values)
    if isinstance(node, _Union):
        out = []
        for branch in node.branches:
            out.extend(_eval_list(values, branch))
        return out
    if isinstance(node, _Text):
        return [node.text]
    if isinstance(node, (_Int, _Float, _Bool)):
        return [node.value for _ in values]
    if isinstance(node, _Identifier):
        if node.name in ("range", "end"):
            raise JSONPathEvalError(f"{{{node.name}}} is not supported in printer column paths")
        raise JSONPathEvalError(f"unrecognized identifier {node.name}")
    raise JSONPathEvalError(f"unexpected Node {node!r}")


def _eval_list(values: list, nodes: tuple | list) -> list:
    current = values
    for node in nodes:
        current = _walk(current, node)
    return current


def _eval_array(values: list, node: _Array) -> list:
    out: list = []
    for v in values:
        if v is None:
            continue
        if not isinstance(v, list):
            raise JSONPathEvalError(f"{go_type(v)} is not array or slice")
        length = len(v)
        start = node.start.value if node.start.known else 0
        if start < 0:
            start += length
        end = node.end.value if node.end.known else length
        if end < 0 or (end == 0 and node.end.derived):
            end += length
        if end == start:
            return out
        if start >= length or start < 0:
            raise JSONPathEvalError(f"array index out of bounds: index {start}, length {length}")
        if end > length or end < 0:
            raise JSONPathEvalError(f"array index out of bounds: index {end - 1}, length {length}")
        if start > end:
            raise JSONPathEvalError(f"starting index {start} is greater than ending index {end}")
        step = 1
        if node.step.known:
            if node.step.value <= 0:
                raise JSONPathEvalError("step must be > 0")
            step = node.step.value
        out.extend(v[start:end][::step])
    return out


def _eval_recursive(values: list) -> list:
    out: list = []
    for v in values:
        if v is None:
            continue
        kids = _children(v)
        if kids:
            out.append(v)
            out.extend(_eval_recursive(kids))
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    raise JSONPathEvalError("invalid type for comparison")


def _compare(op: str, left: Any, right: Any) -> bool:
    k1, k2 = _kind(left), _kind(right)
    if op in ("==", "!="):
        if k1 != k2:
            raise JSONPathEvalError("incompatible types for comparison")
        equal = left == right
        return equal if op == "==" else not equal
    if op in ("<", ">", "<=", ">="):
        if k1 != k2:
            raise JSONPathEvalError("incompatible types for comparison")
        if k1 == "bool":
            raise JSONPathEvalError("invalid type for comparison")
        if op == "<":
            return left < right
        if op == ">":
            return left > right
        if op == "<=":
            return left <= right
        return left >= right
    raise JSONPathEvalError(f"unrecognized filter operator {op}")


def _eval_filter(values: list, node: _Filter) -> list:
    out: list = []
    for v in values:
        if not isinstance(v, list):
            raise JSONPathEvalError(f"{json.dumps(v)} is not array or slice and cannot be filtered")
        for item in v:
            if node.operator == "exists":
                try:
                    if _eval_list([item], node.left):
                        out.append(item)
                except JSONPathEvalError:
                    pass  # client-go ignores evaluation errors of an existence test
                continue
            lefts = _eval_list([item], node.left)
            if not lefts:
                continue
            if len(lefts) > 1:
                raise JSONPathEvalError("can only compare one element at a time")
            rights = _eval_list([item], node.right)
            if not rights:
                continue
            if len(rights) > 1:
                raise JSONPathEvalError("can only compare one element at a time")
            if _compare(node.operator, lefts[0], rights[0]):
                out.append(item)
    return out


class CompiledPath:
    """A parsed ``jsonPath``; see the module docstring for the call contract."""

    __slots__ = ("path", "_segments")

    def __init__(self, path: str, segments: list) -> None:
        self.path = path
        self._segments = segments

    def find(self, obj: Any) -> list[list]:
        """Every template segment's results (client-go ``FindResults``); raises JSONPathEvalError."""
        results = []
        for segment in self._segments:
            if isinstance(segment, _Text):
                results.append([segment.text])
            else:
                results.append(_eval_list([obj], segment.nodes))
        return results

    def __call__(self, obj: Any) -> list:
        try:
            results = self.find(obj)
        except JSONPathEvalError:
            return []  # the TableConvertor turns any evaluation error into an empty cell
        return results[0] if results else []

    def __repr__(self) -> str:
        return f"CompiledPath({self.path!r})"


@functools.lru_cache(maxsize=512)
def compile_path(path: str) -> CompiledPath:
    """Parse a printer-column ``jsonPath`` (wrapped as ``{path}`` like the server does)."""
    if not isinstance(path, str):
        raise JSONPathError(f"jsonPath must be a string, not {type(path).__name__}")
    # Identifiers (range/end/unknown words) parse fine and fail at evaluation, as in client-go.
    return CompiledPath(path, _Parser("{" + path + "}").parse())


def evaluate(obj: dict, path: str) -> list[Any]:
    """Values the printer column ``path`` selects in ``obj`` (``[]`` when nothing or on error)."""
    return compile_path(path)(obj)


# ----------------------------------------------------------------------------------------------
# Table cells (apiextensions-apiserver tableconvertor.go)
# ----------------------------------------------------------------------------------------------


def _print_value(value: Any) -> str:
    """client-go ``PrintResults`` for a single value: JSON for maps/lists, fmt.Fprint otherwise."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if value is None:
        return "<no value>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    return str(value)


def human_duration(seconds: float) -> str:
    """apimachinery ``duration.HumanDuration`` (what ``kubectl get`` shows in AGE columns)."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    secs = int(seconds)
    if secs < 120:
        return f"{secs}s"
    minutes = secs // 60
    if minutes < 10:
        s = secs % 60
        return f"{minutes}m" if s == 0 else f"{minutes}m{s}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = secs // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def parse_rfc3339(text: str) -> _dt.datetime | None:
    """Go ``time.Parse(time.RFC3339, text)`` (fractional seconds accepted); None if invalid."""
    m = _RFC3339.match(text)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = m.group(7)
    micro = int((frac[1:] + "000000")[:6]) if frac else 0
    zone = m.group(8)
    if zone in ("Z", "z"):
        tz = _dt.UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        zh, zm = int(zone[1:3]), int(zone[4:6])
        if zh > 23 or zm > 59:
            return None
        tz = _dt.timezone(sign * _dt.timedelta(hours=zh, minutes=zm))
    try:
        return _dt.datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        return None


def format_cell(
    values: list,
    column_type: str,
    column_format: str = "",
    *,
    now: _dt.datetime | None = None,
) -> Any:
    """The cell the apiserver's CRD TableConvertor emits for a column.

    Only ``values[0]`` counts (the server ignores further matches); no value → ``None`` (JSON
    ``null``, which kubectl prints as ``<none>``). ``string`` prints the value like kubectl's
    jsonpath printer (maps/lists as compact JSON, ``null`` as ``<no value>``); ``integer``/``number``
    /``boolean`` pass matching JSON types through (``None`` otherwise); ``date`` is **not** a
    timestamp: the server sends the human-readable age (``"5m10s"``), ``"<invalid>"`` for an
    unparsable string and ``"<unknown>"`` for ``""``/``"null"``. ``column_format`` (e.g. ``name``)
    only affects kubectl's rendering, not the cell. ``now`` defaults to the current UTC time.
    """
    del column_format  # does not change the server-side cell value
    if not values:
        return None
    value = values[0]
    if column_type == "string":
        return _print_value(value)
    if value is None:
        return None
    if column_type == "integer":
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        return None
    if column_type == "number":
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value)
        return None
    if column_type == "boolean":
        return value if isinstance(value, bool) else None
    if column_type == "date":
        if not isinstance(value, str):
            return None
        if value in ("", "null"):
            return "<unknown>"
        parsed = parse_rfc3339(value)
        if parsed is None:
            return "<invalid>"
        current = now or _dt.datetime.now(_dt.UTC)
        return human_duration((current - parsed).total_seconds())
    return None
