"""Label and field selectors, parsed and matched the way kube-apiserver does it.

Why this exists: every list and watch the simulator serves is filtered through a selector, and
clients (kubectl, client-go, kubernetes-asyncio, our informers) rely on the exact grammar, the
exact matching rules (``!=`` and ``notin`` match objects that lack the label) and the exact
400 messages. The grammar and messages follow apimachinery's ``labels.Parse``,
``fields.ParseSelector`` and ``metav1.LabelSelectorAsSelector``.

Contract:

* ``parse_label_selector`` / ``parse_field_selector`` parse once and raise :class:`ApiError`
  400 ``BadRequest`` with the server's message on bad input. The returned selectors are
  immutable and cheap to match: a list of 100,000 pods is filtered through ``matches``.
* ``label_selector_from_dict`` converts a ``metav1.LabelSelector`` (as found in object specs)
  and raises ``ValueError`` on bad input, because that input comes from an object body, whose
  validation error the caller reports (a 422), not from a query string.
* ``pod_fields`` / ``object_fields`` give the field set a field selector is matched against:
  field path -> string value, ``""`` when unset.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tfjob_sim.errors import bad_request
from tfjob_sim.gotext import go_json, go_quote

__all__ = [
    "POD_FIELDS",
    "FieldSelector",
    "LabelSelector",
    "Requirement",
    "field_selector_escape",
    "label_selector_from_dict",
    "object_fields",
    "parse_field_selector",
    "parse_label_selector",
    "pod_fields",
]

# --------------------------------------------------------------------------------------------
# Validation of label keys and values (apimachinery content.IsLabelKey / IsLabelValue).
# The messages are the server's, byte for byte, because users read them in kubectl output.
# --------------------------------------------------------------------------------------------

_LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_ERR: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_FMT: Final = "(" + _LABEL_KEY_FMT + ")?"
_LABEL_VALUE_ERR: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT: Final = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_NAME_MAX: Final = 63
_LABEL_VALUE_MAX: Final = 63
_DNS1123_SUBDOMAIN_MAX: Final = 253

_LABEL_KEY_RE: Final = re.compile(_LABEL_KEY_FMT)
_LABEL_VALUE_RE: Final = re.compile(_LABEL_VALUE_FMT)
_DNS1123_SUBDOMAIN_RE: Final = re.compile(_DNS1123_SUBDOMAIN_FMT)
# strconv.ParseInt(s, 10, 64): optional sign, ASCII digits only, int64 range.
_INT64_RE: Final = re.compile(r"[+-]?[0-9]+")
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    # Mirrors validation.RegexError, including its doubled spaces between examples.
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _byte_len(text: str) -> int:
    return len(text.encode("utf-8"))


def label_key_errors(key: str) -> list[str]:
    """Problems with ``key`` as a label key; empty when valid (content.IsLabelKey)."""
    errors: list[str] = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if _byte_len(prefix) > _DNS1123_SUBDOMAIN_MAX:
                errors.append(f"prefix part must be no more than {_DNS1123_SUBDOMAIN_MAX} bytes")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append(
                    "prefix part " + _regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com")
                )
    else:
        return [
            "a valid label key "
            + _regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errors.append("name part must be non-empty")
    elif _byte_len(name) > _LABEL_NAME_MAX:
        errors.append(f"name part must be no more than {_LABEL_NAME_MAX} bytes")
    if not _LABEL_KEY_RE.fullmatch(name):
        errors.append("name part " + _regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errors


def label_value_errors(value: str) -> list[str]:
    """Problems with ``value`` as a label value; empty when valid (content.IsLabelValue)."""
    errors: list[str] = []
    if _byte_len(value) > _LABEL_VALUE_MAX:
        errors.append(f"must be no more than {_LABEL_VALUE_MAX} bytes")
    if not _LABEL_VALUE_RE.fullmatch(value):
        errors.append(_regex_error(_LABEL_VALUE_ERR, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errors


def _parse_int64(text: str) -> int | None:
    if text.isascii() and text.isdigit() and len(text) < 19:  # fast path: plain small number
        return int(text)
    if not _INT64_RE.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _go_json_strings(values: Iterable[str]) -> str:
    # field.Invalid renders a []string bad value with encoding/json; a nil slice (the only empty one
    # callers produce) marshals as null.
    values = list(values)
    return go_json(values) if values else "null"


def _invalid(path: str, bad_value: str, detail: str) -> str:
    """One ``field.Invalid(...).Error()`` string."""
    return f"{path}: Invalid value: {bad_value}: {detail}"


def _aggregate(messages: list[str]) -> str:
    """``field.ErrorList.ToAggregate().Error()``: duplicates dropped, several wrapped in [...]."""
    unique = list(dict.fromkeys(messages))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


# --------------------------------------------------------------------------------------------
# Label selectors
# --------------------------------------------------------------------------------------------

# Operator spellings are apimachinery's selection.Operator values; they appear in messages.
OP_DOES_NOT_EXIST: Final = "!"
OP_EQUALS: Final = "="
OP_DOUBLE_EQUALS: Final = "=="
OP_IN: Final = "in"
OP_NOT_EQUALS: Final = "!="
OP_NOT_IN: Final = "notin"
OP_EXISTS: Final = "exists"
OP_GREATER_THAN: Final = "gt"
OP_LESS_THAN: Final = "lt"

_BINARY_OPERATORS: Final = (
    OP_IN,
    OP_NOT_IN,
    OP_EQUALS,
    OP_DOUBLE_EQUALS,
    OP_NOT_EQUALS,
    OP_GREATER_THAN,
    OP_LESS_THAN,
)
_SET_OPERATORS: Final = frozenset({OP_IN, OP_NOT_IN})
_EXACT_OPERATORS: Final = frozenset({OP_EQUALS, OP_DOUBLE_EQUALS, OP_NOT_EQUALS})
_UNARY_OPERATORS: Final = frozenset({OP_EXISTS, OP_DOES_NOT_EXIST})
_NUMERIC_OPERATORS: Final = frozenset({OP_GREATER_THAN, OP_LESS_THAN})
_OPERATOR_TEXT: Final = {
    OP_EQUALS: "=",
    OP_DOUBLE_EQUALS: "==",
    OP_NOT_EQUALS: "!=",
    OP_IN: " in ",
    OP_NOT_IN: " notin ",
    OP_GREATER_THAN: ">",
    OP_LESS_THAN: "<",
}

_NO_LABELS: Final[Mapping[str, str]] = {}


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ANDed term of a label selector: ``key``, operator, and the values it relates them by.

    Build it with :func:`_new_requirement`, which validates like ``labels.NewRequirement``.
    """

    key: str
    operator: str
    values: tuple[str, ...]

    def __str__(self) -> str:
        if self.operator == OP_DOES_NOT_EXIST:
            return "!" + self.key
        if self.operator == OP_EXISTS:
            return self.key
        values = self.values if len(self.values) == 1 else sorted(self.values)
        joined = ",".join(values)
        if self.operator in _SET_OPERATORS:
            joined = f"({joined})"
        return self.key + _OPERATOR_TEXT[self.operator] + joined

    def predicate(self) -> Callable[[Mapping[str, str]], bool]:
        """A closure deciding this requirement for a label map (labels.Requirement.Matches)."""
        key = self.key
        op = self.operator
        if op == OP_EXISTS:
            return lambda labels: key in labels
        if op == OP_DOES_NOT_EXIST:
            return lambda labels: key not in labels
        if op in _NUMERIC_OPERATORS:
            bound = _parse_int64(self.values[0])
            greater = op == OP_GREATER_THAN

            def compare(labels: Mapping[str, str]) -> bool:
                raw = labels.get(key)
                if raw is None or bound is None:
                    return False
                number = _parse_int64(raw)
                if number is None:
                    return False
                return number > bound if greater else number < bound

            return compare
        if len(self.values) == 1:
            only = self.values[0]
            if op in (OP_NOT_IN, OP_NOT_EQUALS):
                # An absent key matches: labels.get gives None, which never equals a str.
                return lambda labels: labels.get(key) != only
            return lambda labels: labels.get(key) == only
        allowed = frozenset(self.values)
        if op == OP_NOT_IN:
            return lambda labels: labels.get(key) not in allowed
        return lambda labels: labels.get(key) in allowed


def _new_requirement(key: str, operator: str, values: list[str], path: str | None) -> Requirement:
    """Validate like labels.NewRequirement; raise ``_SelectorError`` with the aggregated message.

    ``path`` is the field path the messages name; ``None`` stands for apimachinery's nil path,
    whose children print as ``key`` and ``values``.
    """
    errors: list[str] = []
    key_path = "key" if path is None else f"{path}.key"
    values_path = "values" if path is None else f"{path}.values"
    key_problems = label_key_errors(key)
    if key_problems:
        errors.append(_invalid(key_path, go_quote(key), "; ".join(key_problems)))
    if operator in _SET_OPERATORS:
        if not values:
            errors.append(
                _invalid(
                    values_path, _go_json_strings(values), "for 'in', 'notin' operators, values set can't be empty"
                )
            )
    elif operator in _EXACT_OPERATORS:
        if len(values) != 1:
            errors.append(
                _invalid(values_path, _go_json_strings(values), "exact-match compatibility requires one single value")
            )
    elif operator in _UNARY_OPERATORS:
        if values:
            errors.append(
                _invalid(
                    values_path, _go_json_strings(values), "values set must be empty for exists and does not exist"
                )
            )
    elif operator in _NUMERIC_OPERATORS:
        if len(values) != 1:
            errors.append(
                _invalid(
                    values_path, _go_json_strings(values), "for 'Gt', 'Lt' operators, exactly one value is required"
                )
            )
        for index, value in enumerate(values):
            if _parse_int64(value) is None:
                errors.append(
                    _invalid(
                        f"{values_path}[{index}]",
                        go_quote(value),
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )
                )
    else:
        supported = ", ".join(go_quote(op) for op in (*_BINARY_OPERATORS, OP_EXISTS, OP_DOES_NOT_EXIST))
        operator_path = "operator" if path is None else f"{path}.operator"
        errors.append(f"{operator_path}: Unsupported value: {go_quote(operator)}: supported values: {supported}")
    for index, value in enumerate(values):
        value_problems = label_value_errors(value)
        if value_problems:
            errors.append(_invalid(f"{values_path}[{index}][{key}]", go_quote(value), "; ".join(value_problems)))
    if errors:
        raise _SelectorError(_aggregate(errors))
    return Requirement(key, operator, tuple(values))


class _SelectorError(Exception):
    """A parse/validation failure carrying the exact apimachinery message."""


class LabelSelector:
    """An immutable label selector: requirements ANDed, matched against a label map.

    Matching is on the hot path, so construction splits the requirements into an exact-match
    item set (checked with one C-level ``dict_items`` subset test) and closures for the rest.
    """

    __slots__ = ("_checks", "_matches_nothing", "_required_items", "_requirements", "_text")

    def __init__(self, requirements: Iterable[Requirement] = (), *, matches_nothing: bool = False) -> None:
        ordered = tuple(sorted(requirements, key=lambda requirement: requirement.key))
        self._requirements = ordered
        self._matches_nothing = matches_nothing
        required: dict[str, str] = {}
        checks: list[Callable[[Mapping[str, str]], bool]] = []
        for requirement in ordered:
            exact = requirement.operator in (OP_EQUALS, OP_DOUBLE_EQUALS) or (
                requirement.operator == OP_IN and len(requirement.values) == 1
            )
            if exact:
                wanted = requirement.values[0]
                if required.setdefault(requirement.key, wanted) != wanted:
                    # Two different exact values for one key can never both hold.
                    self._matches_nothing = True
                continue
            checks.append(requirement.predicate())
        self._required_items = required.items() if required else None
        self._checks = tuple(checks)
        self._text = "" if matches_nothing else ",".join(str(r) for r in ordered)

    @classmethod
    def nothing(cls) -> LabelSelector:
        """The selector that matches no object (``labels.Nothing``, from a nil LabelSelector)."""
        return cls(matches_nothing=True)

    @property
    def requirements(self) -> tuple[Requirement, ...]:
        return self._requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self._matches_nothing:
            return False
        if labels is None:
            labels = _NO_LABELS
        required = self._required_items
        if required is not None and not (required <= labels.items()):
            return False
        for check in self._checks:
            if not check(labels):
                return False
        return True

    def is_empty(self) -> bool:
        """True when the selector does not restrict anything (``""``, ``{}``)."""
        return not self._requirements and not self._matches_nothing

    def requires_exact_match(self, key: str) -> str | None:
        """The single value ``key`` must have (``k=v``, ``k==v``, ``k in (v)``), for index lookups."""
        for requirement in self._requirements:
            if requirement.key == key:
                exact = requirement.operator in (OP_EQUALS, OP_DOUBLE_EQUALS, OP_IN)
                if exact and len(requirement.values) == 1:
                    return requirement.values[0]
                return None
        return None

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        if self._matches_nothing and not self._requirements:
            return "LabelSelector.nothing()"
        return f"LabelSelector({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabelSelector):
            return NotImplemented
        return self._requirements == other._requirements and self._matches_nothing == other._matches_nothing

    def __hash__(self) -> int:
        return hash((self._requirements, self._matches_nothing))


# Lexer tokens of labels.Parse.
_T_ERROR: Final = 0
_T_END: Final = 1
_T_CLOSE_PAREN: Final = 2
_T_COMMA: Final = 3
_T_NOT: Final = 4
_T_DOUBLE_EQUALS: Final = 5
_T_EQUALS: Final = 6
_T_GREATER: Final = 7
_T_IDENTIFIER: Final = 8
_T_IN: Final = 9
_T_LESS: Final = 10
_T_NOT_EQUALS: Final = 11
_T_NOT_IN: Final = 12
_T_OPEN_PAREN: Final = 13

_LITERAL_TOKENS: Final = {
    ")": _T_CLOSE_PAREN,
    ",": _T_COMMA,
    "!": _T_NOT,
    "==": _T_DOUBLE_EQUALS,
    "=": _T_EQUALS,
    ">": _T_GREATER,
    "in": _T_IN,
    "<": _T_LESS,
    "!=": _T_NOT_EQUALS,
    "notin": _T_NOT_IN,
    "(": _T_OPEN_PAREN,
}
_TOKEN_OPERATORS: Final = {
    _T_IN: OP_IN,
    _T_EQUALS: OP_EQUALS,
    _T_DOUBLE_EQUALS: OP_DOUBLE_EQUALS,
    _T_GREATER: OP_GREATER_THAN,
    _T_LESS: OP_LESS_THAN,
    _T_NOT_IN: OP_NOT_IN,
    _T_NOT_EQUALS: OP_NOT_EQUALS,
}
_SPECIAL: Final = frozenset("=!(),><")
_WHITESPACE: Final = frozenset(" \t\r\n")


def _lex(text: str) -> list[tuple[int, str]]:
    """Tokenise like labels.Lexer: special symbols greedily, everything else up to a delimiter."""
    tokens: list[tuple[int, str]] = []
    position = 0
    length = len(text)
    while True:
        while position < length and text[position] in _WHITESPACE:
            position += 1
        if position >= length:
            tokens.append((_T_END, ""))
            return tokens
        if text[position] in _SPECIAL:
            # Longest run of special characters that still spells a token ("!=" over "!").
            best_token, best_end = _T_ERROR, position
            end = position
            while end < length and text[end] in _SPECIAL:
                candidate = _LITERAL_TOKENS.get(text[position : end + 1])
                if candidate is not None:
                    best_token, best_end = candidate, end + 1
                elif best_token != _T_ERROR:
                    break
                end += 1
            if best_token == _T_ERROR:  # unreachable with today's token table; kept for parity
                tokens.append((_T_ERROR, f"error expected: keyword found '{text[position:end]}'"))
                position = end
            else:
                tokens.append((best_token, text[position:best_end]))
                position = best_end
            continue
        start = position
        while position < length and text[position] not in _SPECIAL and text[position] not in _WHITESPACE:
            position += 1
        word = text[start:position]
        tokens.append((_LITERAL_TOKENS.get(word, _T_IDENTIFIER), word))


class _LabelParser:
    """Recursive-descent parser over the token list (labels.Parser)."""

    __slots__ = ("_position", "_tokens")

    def __init__(self, text: str) -> None:
        self._tokens = _lex(text)
        self._position = 0

    def _peek(self, values_context: bool) -> tuple[int, str]:
        token, literal = self._tokens[min(self._position, len(self._tokens) - 1)]
        # In a value position the keywords "in"/"notin" are ordinary identifiers.
        if values_context and token in (_T_IN, _T_NOT_IN):
            token = _T_IDENTIFIER
        return token, literal

    def _take(self, values_context: bool) -> tuple[int, str]:
        item = self._peek(values_context)
        self._position += 1
        return item

    def parse(self) -> list[Requirement]:
        requirements: list[Requirement] = []
        while True:
            token, literal = self._peek(True)
            if token in (_T_IDENTIFIER, _T_NOT):
                try:
                    requirements.append(self._requirement())
                except _SelectorError as error:
                    raise _SelectorError(f"unable to parse requirement: {error}") from None
                token, literal = self._take(True)
                if token == _T_END:
                    return requirements
                if token == _T_COMMA:
                    next_token, next_literal = self._peek(True)
                    if next_token not in (_T_IDENTIFIER, _T_NOT):
                        raise _SelectorError(f"found '{next_literal}', expected: identifier after ','")
                    continue
                raise _SelectorError(f"found '{literal}', expected: ',' or 'end of string'")
            if token == _T_END:
                return requirements
            raise _SelectorError(f"found '{literal}', expected: !, identifier, or 'end of string'")

    def _requirement(self) -> Requirement:
        key, operator = self._key_and_inferred_operator()
        if operator in (OP_EXISTS, OP_DOES_NOT_EXIST):
            return _new_requirement(key, operator, [], None)
        operator = self._operator()
        values = self._set_values() if operator in _SET_OPERATORS else self._exact_value()
        return _new_requirement(key, operator, sorted(values), None)

    def _key_and_inferred_operator(self) -> tuple[str, str | None]:
        operator: str | None = None
        token, literal = self._take(True)
        if token == _T_NOT:
            operator = OP_DOES_NOT_EXIST
            token, literal = self._take(True)
        if token != _T_IDENTIFIER:
            raise _SelectorError(f"found '{literal}', expected: identifier")
        problems = label_key_errors(literal)
        if problems:
            # The parser validates with a nil field path, which Go prints as "<nil>".
            raise _SelectorError(_invalid("<nil>", go_quote(literal), "; ".join(problems)))
        next_token, _ = self._peek(True)
        if next_token in (_T_END, _T_COMMA) and operator != OP_DOES_NOT_EXIST:
            operator = OP_EXISTS
        return literal, operator

    def _operator(self) -> str:
        token, literal = self._take(False)
        operator = _TOKEN_OPERATORS.get(token)
        if operator is None:
            raise _SelectorError(f"found '{literal}', expected: {', '.join(_BINARY_OPERATORS)}")
        return operator

    def _set_values(self) -> set[str]:
        token, literal = self._take(True)
        if token != _T_OPEN_PAREN:
            raise _SelectorError(f"found '{literal}' expected: '('")
        token, literal = self._peek(True)
        if token in (_T_IDENTIFIER, _T_COMMA):
            values = self._identifier_list()
            self._take(True)  # the ')' that ended the list
            return values
        if token == _T_CLOSE_PAREN:
            # "k in ()" is accepted and means the empty value.
            self._take(True)
            return {""}
        raise _SelectorError(f"found '{literal}', expected: ',', ')' or identifier")

    def _identifier_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            token, literal = self._take(True)
            if token == _T_IDENTIFIER:
                values.add(literal)
                next_token, next_literal = self._peek(True)
                if next_token == _T_COMMA:
                    continue
                if next_token == _T_CLOSE_PAREN:
                    return values
                raise _SelectorError(f"found '{next_literal}', expected: ',' or ')'")
            if token == _T_COMMA:
                # Empty values are legal: "(,a)", "(a,,b)" and "(a,)" all contain "".
                if not values:
                    values.add("")
                next_token, _ = self._peek(True)
                if next_token == _T_CLOSE_PAREN:
                    values.add("")
                    return values
                if next_token == _T_COMMA:
                    self._take(True)
                    values.add("")
                continue
            raise _SelectorError(f"found '{literal}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        token, _ = self._peek(True)
        if token in (_T_END, _T_COMMA):
            return {""}
        token, literal = self._take(True)
        if token == _T_IDENTIFIER:
            return {literal}
        raise _SelectorError(f"found '{literal}', expected: identifier")


def parse_label_selector(text: str) -> LabelSelector:
    """Parse a ``labelSelector`` query value; 400 BadRequest with the server's message if bad."""
    try:
        return LabelSelector(_LabelParser(text).parse())
    except _SelectorError as error:
        raise bad_request(str(error)) from None


_SELECTOR_OPERATORS: Final = {
    "In": OP_IN,
    "NotIn": OP_NOT_IN,
    "Exists": OP_EXISTS,
    "DoesNotExist": OP_DOES_NOT_EXIST,
}


def label_selector_from_dict(selector: Mapping[str, Any] | None) -> LabelSelector:
    """Convert a ``metav1.LabelSelector`` like ``LabelSelectorAsSelector``.

    ``None`` selects nothing, ``{}`` (no labels, no expressions) selects everything. Raises
    ``ValueError`` with apimachinery's message on an unknown operator or invalid key/value.
    """
    if selector is None:
        return LabelSelector.nothing()
    if not isinstance(selector, Mapping):
        raise ValueError(f"label selector must be an object, not {_json_type(selector)}")
    match_labels = selector.get("matchLabels") or {}
    match_expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping):
        raise ValueError(f"matchLabels must be an object, not {_json_type(match_labels)}")
    if not isinstance(match_expressions, list):
        raise ValueError(f"matchExpressions must be an array, not {_json_type(match_expressions)}")
    requirements: list[Requirement] = []
    try:
        for key, value in match_labels.items():
            if not isinstance(value, str):
                raise ValueError(f"matchLabels[{key}] must be a string, not {_json_type(value)}")
            requirements.append(_new_requirement(key, OP_EQUALS, [value], None))
        for index, expression in enumerate(match_expressions):
            if not isinstance(expression, Mapping):
                raise ValueError(f"matchExpressions[{index}] must be an object, not {_json_type(expression)}")
            raw_operator = expression.get("operator", "")
            operator = _SELECTOR_OPERATORS.get(raw_operator) if isinstance(raw_operator, str) else None
            if operator is None:
                shown = raw_operator if isinstance(raw_operator, str) else str(raw_operator)
                raise ValueError(f"{go_quote(shown)} is not a valid label selector operator")
            key = expression.get("key", "")
            values = expression.get("values") or []
            if not isinstance(key, str):
                raise ValueError(f"matchExpressions[{index}].key must be a string, not {_json_type(key)}")
            if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
                raise ValueError(f"matchExpressions[{index}].values must be an array of strings")
            requirements.append(_new_requirement(key, operator, list(values), None))
    except _SelectorError as error:
        raise ValueError(str(error)) from None
    if not requirements:
        return LabelSelector()
    return LabelSelector(requirements)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


# --------------------------------------------------------------------------------------------
# Field selectors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FieldTerm:
    """``field=value`` (``equal``) or ``field!=value``; ``value`` already unescaped."""

    field: str
    value: str
    equal: bool

    def __str__(self) -> str:
        return f"{self.field}{'=' if self.equal else '!='}{field_selector_escape(self.value)}"


class FieldSelector:
    """An immutable field selector: terms ANDed over a ``field path -> string`` map."""

    __slots__ = ("_checks", "_terms")

    def __init__(self, terms: Iterable[FieldTerm] = ()) -> None:
        self._terms = tuple(terms)
        self._checks = tuple((term.field, term.value, term.equal) for term in self._terms)

    @property
    def terms(self) -> tuple[FieldTerm, ...]:
        return self._terms

    def matches(self, fields: Mapping[str, str]) -> bool:
        for field, value, equal in self._checks:
            if (fields.get(field, "") == value) != equal:
                return False
        return True

    def fields(self) -> set[str]:
        return {term.field for term in self._terms}

    def is_empty(self) -> bool:
        return not self._terms

    def exact_value(self, field: str) -> str | None:
        """The value a ``field=value`` term requires, if any (RequiresExactMatch)."""
        for term in self._terms:
            if term.equal and term.field == field:
                return term.value
        return None

    def __str__(self) -> str:
        return ",".join(str(term) for term in self._terms)

    def __repr__(self) -> str:
        return f"FieldSelector({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FieldSelector):
            return NotImplemented
        return self._terms == other._terms

    def __hash__(self) -> int:
        return hash(self._terms)


def field_selector_escape(value: str) -> str:
    """Escape a value for a field selector string (fields.EscapeValue)."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _split_terms(text: str) -> list[str]:
    # A backslash protects the next character, so "\," does not end a term.
    terms: list[str] = []
    start = 0
    escaped = False
    for index, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    # The first position where an operator starts wins; "!=" and "==" before "=".
    for index in range(len(term)):
        for operator in ("!=", "==", "="):
            if term.startswith(operator, index):
                return term[:index], operator, term[index + len(operator) :]
    return None


def _unescape_field_value(value: str) -> str:
    if "\\" not in value and "," not in value and "=" not in value:
        return value
    out: list[str] = []
    escaped = False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise _SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            # apimachinery formats the offending rune with %v, i.e. as its code point.
            raise _SelectorError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise _SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


# Field-label aliases the real server converts before matching (old v1 clients send spec.host).
_FIELD_ALIASES: Final = {"pods": {"spec.host": "spec.nodeName"}}


def parse_field_selector(text: str, supported: set[str] | frozenset[str], resource: str) -> FieldSelector:
    """Parse a ``fieldSelector`` query value for ``resource`` (plural, e.g. ``pods``).

    ``supported`` is the set of field paths the resource can be selected by. Raises 400
    BadRequest: ``invalid selector: ...`` for malformed terms, ``field label not supported:
    <name>`` for a field outside ``supported``.
    """
    try:
        parts = sorted(_split_terms(text)) if text else []
        parsed: list[FieldTerm] = []
        for part in parts:
            if not part:
                continue
            split = _split_term(part)
            if split is None:
                raise _SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
            field, operator, raw_value = split
            parsed.append(FieldTerm(field, _unescape_field_value(raw_value), operator != "!="))
    except _SelectorError as error:
        raise bad_request(str(error)) from None
    aliases = _FIELD_ALIASES.get(resource, {})
    converted: list[FieldTerm] = []
    for term in parsed:
        field = aliases.get(term.field, term.field)
        if field not in supported:
            raise bad_request(f"field label not supported: {term.field}")
        converted.append(term if field == term.field else FieldTerm(field, term.value, term.equal))
    return FieldSelector(converted)


POD_FIELDS: Final[frozenset[str]] = frozenset(
    {
        "metadata.name",
        "metadata.namespace",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    }
)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def object_fields(obj: Mapping[str, Any], namespaced: bool) -> dict[str, str]:
    """The fields every resource can be selected by: name, and namespace when namespaced."""
    metadata = obj.get("metadata") or {}
    fields = {"metadata.name": _text(metadata.get("name"))}
    if namespaced:
        fields["metadata.namespace"] = _text(metadata.get("namespace"))
    return fields


def pod_fields(pod: Mapping[str, Any]) -> dict[str, str]:
    """The selectable fields of a v1 Pod (pod strategy ToSelectableFields)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    pod_ips = status.get("podIPs")
    if pod_ips and isinstance(pod_ips[0], Mapping):
        pod_ip = _text(pod_ips[0].get("ip"))
    else:
        # v1 conversion fills podIPs from podIP, so a lone podIP is the first IP.
        pod_ip = _text(status.get("podIP"))
    return {
        "metadata.name": _text(metadata.get("name")),
        "metadata.namespace": _text(metadata.get("namespace")),
        "spec.nodeName": _text(spec.get("nodeName")),
        "spec.restartPolicy": _text(spec.get("restartPolicy")),
        "spec.schedulerName": _text(spec.get("schedulerName")),
        "spec.serviceAccountName": _text(spec.get("serviceAccountName")),
        "spec.hostNetwork": "true" if spec.get("hostNetwork") is True else "false",
        "status.phase": _text(status.get("phase")),
        "status.podIP": pod_ip,
        "status.nominatedNodeName": _text(status.get("nominatedNodeName")),
    }
