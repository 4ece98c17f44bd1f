"""A fast path for CEL rules: cel-python's parse tree compiled once into nested Python closures.

Why: cel-python walks the lark parse tree on every evaluation, through a dozen grammar levels per
literal, at 0.5-50 ms a rule; a TFJob create runs eight rules, so CRD validation capped the simulated
apiserver at ~10 creates/s. The closures do the same operations -- the same cel-python functions
(``base_functions`` plus our extras) on the same cel-python values -- without the walk.

Contract, and why it is safe:

- :func:`compile_tree` returns a callable ``run(activation) -> value`` or None when the rule uses a
  construct it does not compile (map literals, type names, ``dyn``, messages,
  ``reduce``/``min``...); those rules keep the interpreter.
- The closures only claim the *successful* evaluations they are sure of. Whenever the interpreter
  could produce an error value or do something subtler (a function raising, a non-boolean operand
  of ``&&``, field selection on anything but a plain map...), they raise :class:`Fallback` and the
  caller evaluates the rule with the interpreter, so every error keeps cel-python's exact wording.
- Errors the interpreter would treat as *values* (a missing map key under ``has()``, ``&&``, ``||``,
  ``all``, ``exists``) are reproduced by handing cel-python's own ``logical_and``/``logical_or`` an
  error value, so error absorption (``false && error == false``) is the interpreter's.
- Like the interpreter, both operands of ``&&``/``||`` are evaluated (no short circuit), so a host
  exception in the right operand is never hidden by the left one.
- Variables may be bound to :class:`Deferred` values: JSON converted to CEL only as far as the rule
  looks into it. Field selection, indexing and macro iteration step into them; every other use (an
  operator, a function, the result) takes the whole value, converted exactly as it would have been up
  front. A TFJob's rules read a few fields of values holding whole pod templates, and converting those
  templates to cel-python values cost more than evaluating the rules.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from functools import reduce
from typing import Any

import celpy.celtypes as ct
import celpy.evaluation as ce
import lark
import re2
from celpy.evaluation import CELEvalError, NameContainer, base_functions, eval_error

Run = Callable[[dict[str, Any]], Any]

_RELATIONS = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_ge": "_>=_",
    "relation_gt": "_>_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "_in_",
}
_ARITHMETIC = {
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}
_MACROS = {"all", "exists", "exists_one", "filter", "map"}
_AND: Callable[[Any, Any], Any] = eval_error("no such overload", TypeError)(ct.logical_and)
_OR: Callable[[Any, Any], Any] = eval_error("no such overload", TypeError)(ct.logical_or)
_ERROR = CELEvalError("error value (compiled path)")


@functools.lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern)


def _matches(text: Any, pattern: Any) -> Any:
    """cel-python's ``matches`` (``re2.search(pattern, text)``) with each pattern compiled once."""
    try:
        found = _regex(str(pattern)).search(text)
    except re2.error as ex:
        return CELEvalError("match error", ex.__class__, ex.args)
    return ct.BoolType(found is not None)


_INT64_MIN, _INT64_END = -(2**63), 2**63


def int64(value: int) -> ct.IntType:
    """``ct.IntType(value)`` for a Python int: the same value, or the same ``ValueError("overflow")``.
    cel-python's constructor builds a range-check wrapper (functools.wraps) on every call, which
    made creating integers the largest cost of a TFJob's rules (``size()``, ``+``, replica counts)."""
    if _INT64_MIN <= value < _INT64_END:
        return int.__new__(ct.IntType, value)
    raise ValueError("overflow")


def _size(container: Any) -> Any:
    """cel-python's ``size`` (``IntType(len(container))``, 0 for null) with :func:`int64`."""
    return int64(0 if container is None else len(container))


def _add(left: Any, right: Any) -> Any:
    """``+``: ``IntType.__add__`` (the int64-checked sum) for two ints, otherwise cel-python's operator."""
    if type(left) is ct.IntType and type(right) is ct.IntType:
        return int64(int.__add__(left, right))
    return operator.add(left, right)


def _sub(left: Any, right: Any) -> Any:
    if type(left) is ct.IntType and type(right) is ct.IntType:
        return int64(int.__sub__(left, right))
    return operator.sub(left, right)


# cel-python's comparison functions build their wrapper (functools.wraps) on every call; these are
# the same wrappers built once, and the integer functions above. Each replaces only cel-python's own
# function, never an override.
_SAME_BUT_FASTER: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "_<_": (ce.bool_lt, ce.boolean(operator.lt)),
    "_<=_": (ce.bool_le, ce.boolean(operator.le)),
    "_>_": (ce.bool_gt, ce.boolean(operator.gt)),
    "_>=_": (ce.bool_ge, ce.boolean(operator.ge)),
    "_==_": (ce.bool_eq, ce.boolean(operator.eq)),
    "_!=_": (ce.bool_ne, ce.boolean(operator.ne)),
    "matches": (ce.function_matches, _matches),
    "size": (ce.function_size, _size),
    "_+_": (operator.add, _add),
    "_-_": (operator.sub, _sub),
}


class Fallback(Exception):
    """This evaluation needs the interpreter (an error, or a case the closures do not claim)."""


class _CelError(Fallback):
    """The interpreter would produce an error *value* here (absorbable by ``&&``/``||``/``has``)."""


class _Unsupported(Exception):
    pass


class Deferred:
    """A map or list whose CEL value is built only when needed (the subclass knows how).

    ``select(field)``: the value of a present field of a map (a CEL value or another Deferred),
    KeyError when the field is absent or this is not a map. ``item(key)``: ``m[key]`` for a string
    key the map has, ``l[i]`` for an int index in range, LookupError otherwise. ``members()``: what
    iterating the value yields (a map's keys as CEL strings, a list's items). ``whole()``: the CEL
    value, the one the caller would have bound without deferring; every part reached through
    ``select``/``item``/``members`` must be the corresponding part of it."""

    __slots__ = ()

    def select(self, field: str) -> Any:
        raise NotImplementedError

    def item(self, key: Any) -> Any:
        raise NotImplementedError

    def members(self) -> list[Any]:
        raise NotImplementedError

    def whole(self) -> Any:
        raise NotImplementedError


def _whole(value: Any) -> Any:
    return value.whole() if isinstance(value, Deferred) else value


class Compiled:
    """A compiled rule: ``run(activation)`` (a CEL value, never a Deferred), and ``observed``: the parts
    of ``self`` the rule can observe (:class:`Observed`), or None when it may observe all of it."""

    __slots__ = ("run", "observed")

    def __init__(self, run: Run, observed: Observed | None) -> None:
        self.run = run
        self.observed = observed


def compile_tree(
    tree: lark.Tree,
    functions: Mapping[str, Callable[..., Any]],
    literal: Callable[[lark.Tree], Any],
    variables: frozenset[str],
) -> Compiled | None:
    """Closures for ``tree``; None if some construct is not compiled. ``literal(tree)`` evaluates a
    literal subtree with the interpreter (once, here); ``variables`` are the rule's bound names."""
    table = {**base_functions, **functions}
    for name, (original, faster) in _SAME_BUT_FASTER.items():
        if table.get(name) is original:
            table[name] = faster
    compiler = _Compiler(table, literal)
    try:
        run = compiler.expr(tree, variables)
    except _Unsupported:
        return None
    return Compiled(lambda env: _whole(run(env)), observed(tree))


class Observed:
    """What a rule can observe of a value, as a trie: ``whole`` (used as a value: compared, passed to a
    function...), ``fields`` selected by name, ``items`` reached by index (a list's items, a map's
    values), ``elements`` bound to a macro variable (a list's items; a map yields its keys, all of
    them observed). Anything else -- a field's value when only ``has()`` asks for it, a map's values
    when only its keys are iterated -- cannot change the rule's result or error.

    Why: CEL is pure, so results can be remembered by input, but TFJobs differ in their images and
    names while a rule on a replica spec reads only container names: remembered by what they read,
    the rules of distinct jobs cost what jobs from one template cost."""

    __slots__ = ("whole", "fields", "items", "elements")

    def __init__(self) -> None:
        self.whole = False
        self.fields: dict[str, Observed] = {}
        self.items: Observed | None = None
        self.elements: Observed | None = None

    def field(self, name: str) -> Observed:
        node = self.fields.get(name)
        if node is None:
            node = self.fields[name] = Observed()
        return node

    def item(self) -> Observed:
        if self.items is None:
            self.items = Observed()
        return self.items

    def element(self) -> Observed:
        if self.elements is None:
            self.elements = Observed()
        return self.elements

    def project(self, value: Any) -> Any:
        """``value`` reduced to what the rule observes: two values with the same projection give the
        same result. Unobserved values become 0; a node read in two ways is kept whole."""
        if self.whole or not isinstance(value, (dict, list)):
            return value
        if isinstance(value, dict):
            if self.items is None and self.elements is None:
                return {name: node.project(value[name]) for name, node in self.fields.items() if name in value}
            if self.fields:
                return value
            items = self.items
            return {k: 0 if items is None else items.project(v) for k, v in value.items()}
        if self.fields or (self.items is not None and self.elements is not None):
            return value  # a field of a list is an error; a list read both ways: keep it whole
        node = self.items or self.elements
        if node is None:
            return 0  # only its presence is observed
        return [node.project(item) for item in value]


def observed(tree: lark.Tree) -> Observed | None:
    """What the rule ``tree`` can observe of ``self``; None if it may observe all of it."""
    root = Observed()
    _Observe(root).use(tree, {})
    return None if root.whole else root


class _Observe:
    """Walks a rule, building the :class:`Observed` trie of ``self``. An expression denoting a part
    of ``self`` (``self.a.b``, ``self.m[k]``, a macro variable) returns its node; any use other than
    selecting into it, iterating it or ``has()`` marks it whole. Unknown constructs use their
    operands whole, so the trie errs only towards observing more."""

    def __init__(self, root: Observed) -> None:
        self.root = root

    def use(self, tree: Any, scope: dict[str, Observed | None]) -> None:
        node = self.visit(tree, scope)
        if node is not None:
            node.whole = True

    def visit(self, tree: Any, scope: dict[str, Observed | None]) -> Observed | None:
        if not isinstance(tree, lark.Tree):
            return None
        data, children = tree.data, tree.children
        if data in _PASS_THROUGH and len(children) == 1:
            return self.visit(children[0], scope)
        if data == "ident":
            name = str(children[0])
            if name in scope:
                return scope[name]
            return self.root if name == "self" else None
        if data == "member_dot":
            base = self.visit(children[0], scope)
            return base.field(str(children[1])) if base is not None else None
        if data == "member_index":
            base = self.visit(children[0], scope)
            self.use(children[1], scope)
            return base.item() if base is not None else None
        if data == "ident_arg" and str(children[0]) == "has" and len(children) == 2:
            args = children[1]
            if isinstance(args, lark.Tree) and len(args.children) == 1:
                self.visit(args.children[0], scope)  # presence only
                return None
        if data == "member_dot_arg" and str(children[1]) in _MACROS and len(children) == 3:
            args = children[2]
            var = _macro_variable(args)
            if var is not None:
                base = self.visit(children[0], scope)
                element = base.element() if base is not None else None
                self.use(args.children[1], {**scope, var: element})
                if str(children[1]) == "filter" and element is not None:
                    element.whole = True  # the result holds the elements themselves
                return None
        for child in children:
            self.use(child, scope)
        return None


def _macro_variable(args: Any) -> str | None:
    if not isinstance(args, lark.Tree) or len(args.children) != 2:
        return None
    idents = list(args.children[0].find_data("ident")) if isinstance(args.children[0], lark.Tree) else []
    return str(idents[0].children[0]) if len(idents) == 1 else None


_PASS_THROUGH = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
        "paren_expr",
    }
)


def _value_or_error(run: Run, env: dict[str, Any]) -> Any:
    try:
        return run(env)
    except _CelError:
        return _ERROR


def _check(value: Any) -> Any:
    if isinstance(value, CELEvalError):
        raise _CelError()
    return value


class _Compiler:
    def __init__(self, functions: dict[str, Callable[..., Any]], literal: Callable[[lark.Tree], Any]) -> None:
        self.functions = functions
        self.literal = literal

    def function(self, name: str) -> Callable[..., Any]:
        func = self.functions.get(name)
        if func is None:
            raise _Unsupported(name)
        return func

    def expr(self, tree: Any, names: frozenset[str]) -> Run:
        if not isinstance(tree, lark.Tree):
            raise _Unsupported(repr(tree))
        method = getattr(self, "c_" + tree.data, None)
        if method is None:
            raise _Unsupported(tree.data)
        return method(tree, names)

    # -- levels of the grammar that only pass their single child through --------------------------

    def _single(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        if len(tree.children) != 1:
            raise _Unsupported(tree.data)
        return self.expr(tree.children[0], names)

    c_member = c_primary = c_paren_expr = _single

    def c_expr(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        if len(tree.children) == 1:
            return self.expr(tree.children[0], names)
        if len(tree.children) != 3:
            raise _Unsupported("expr")
        cond, then, other = (self.expr(c, names) for c in tree.children)

        def ternary(env: dict[str, Any]) -> Any:
            chosen = cond(env)
            if not isinstance(chosen, ct.BoolType):
                raise Fallback()
            return then(env) if chosen else other(env)

        return ternary

    def _logical(self, tree: lark.Tree, names: frozenset[str], op: Callable[[Any, Any], Any]) -> Run:
        if len(tree.children) == 1:
            return self.expr(tree.children[0], names)
        left, right = (self.expr(c, names) for c in tree.children)

        def logical(env: dict[str, Any]) -> Any:
            result = op(_whole(_value_or_error(left, env)), _whole(_value_or_error(right, env)))
            return _check(result)

        return logical

    def c_conditionalor(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        return self._logical(tree, names, _plain_logical(self.function("_||_")))

    def c_conditionaland(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        return self._logical(tree, names, _plain_logical(self.function("_&&_")))

    def _binary(self, tree: lark.Tree, names: frozenset[str], ops: dict[str, str]) -> Run:
        if len(tree.children) == 1:
            return self.expr(tree.children[0], names)
        op_tree, right_tree = tree.children
        if not isinstance(op_tree, lark.Tree) or op_tree.data not in ops or len(op_tree.children) != 1:
            raise _Unsupported(str(getattr(op_tree, "data", op_tree)))
        func = self.function(ops[op_tree.data])
        left, right = self.expr(op_tree.children[0], names), self.expr(right_tree, names)

        def binary(env: dict[str, Any]) -> Any:
            try:
                result = func(_whole(left(env)), _whole(right(env)))
            except _CelError:
                raise Fallback() from None  # the interpreter's error message names this operator
            except Exception:
                raise Fallback() from None
            return _check(result)

        return binary

    def c_relation(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        return self._binary(tree, names, _RELATIONS)

    def c_addition(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        return self._binary(tree, names, _ARITHMETIC)

    c_multiplication = c_addition

    def c_unary(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        if len(tree.children) == 1:
            return self.expr(tree.children[0], names)
        op_tree, operand_tree = tree.children
        if getattr(op_tree, "data", None) not in ("unary_not", "unary_neg"):
            raise _Unsupported("unary")
        func = self.function("!_" if op_tree.data == "unary_not" else "-_")
        operand = self.expr(operand_tree, names)

        def unary(env: dict[str, Any]) -> Any:
            try:
                result = func(_whole(operand(env)))
            except Exception:
                raise Fallback() from None
            return _check(result)

        return unary

    # -- values -------------------------------------------------------------------------------------

    def c_literal(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        value = self.literal(tree)
        if isinstance(value, CELEvalError):
            raise _Unsupported("literal")
        return lambda env: value

    def c_ident(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        name = str(tree.children[0])
        if name not in names:
            raise _Unsupported(name)  # type names, packages: the interpreter resolves them

        def ident(env: dict[str, Any]) -> Any:
            try:
                return env[name]
            except KeyError:
                raise Fallback() from None

        return ident

    def c_list_lit(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        items = self.exprlist(tree.children[0] if tree.children else None, names)
        return lambda env: ct.ListType([_whole(item(env)) for item in items])

    def exprlist(self, tree: Any, names: frozenset[str]) -> list[Run]:
        if tree is None:
            return []
        if not isinstance(tree, lark.Tree) or tree.data != "exprlist":
            raise _Unsupported("exprlist")
        return [self.expr(c, names) for c in tree.children]

    def c_member_dot(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        member_tree, field_token = tree.children
        member = self.expr(member_tree, names)
        field = str(field_token)

        def member_dot(env: dict[str, Any]) -> Any:
            value = member(env)
            if isinstance(value, Deferred):
                try:
                    return value.select(field)
                except KeyError:
                    raise _CelError() from None  # as below, for a map without the field or not a map
            if isinstance(value, (NameContainer, ct.MessageType)):
                raise Fallback()
            if isinstance(value, ct.MapType):
                try:
                    return value[field]
                except KeyError:
                    raise _CelError() from None  # the interpreter: "no such member in mapping"
            raise _CelError()  # the interpreter: "... does not support field selection"

        return member_dot

    def c_member_index(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        """``m[key]`` on a plain map with a string key it has, ``l[i]`` on a list with an int index in range;
        anything else (a missing key, a bad index, another type) is left to the interpreter."""
        member_tree, index_tree = tree.children
        member = self.expr(member_tree, names)
        index = self.expr(index_tree, names)

        def member_index(env: dict[str, Any]) -> Any:
            value, key = member(env), index(env)
            if isinstance(value, Deferred):
                try:
                    return value.item(key)
                except LookupError:
                    raise Fallback() from None
            if isinstance(value, ct.MapType) and isinstance(key, ct.StringType) and key in value:
                return value[key]
            if isinstance(value, ct.ListType) and type(key) is ct.IntType and 0 <= key < len(value):
                return value[key]
            raise Fallback()

        return member_index

    def _call(self, func: Callable[..., Any], args: list[Run]) -> Run:
        def call(env: dict[str, Any]) -> Any:
            values = [_whole(arg(env)) for arg in args]
            try:
                result = func(*values)
            except Exception:
                raise Fallback() from None
            return _check(result)

        return call

    def c_ident_arg(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        name = str(tree.children[0])
        arglist = tree.children[1] if len(tree.children) > 1 else None
        if name == "has":
            args = self.exprlist(arglist, names)
            if len(args) != 1:
                raise _Unsupported("has")
            selection = args[0]

            def has(env: dict[str, Any]) -> Any:
                try:
                    selection(env)
                except _CelError:
                    return ct.BoolType(False)
                return ct.BoolType(True)

            return has
        if name == "dyn":
            raise _Unsupported("dyn")
        return self._call(self.function(name), self.exprlist(arglist, names))

    def c_member_dot_arg(self, tree: lark.Tree, names: frozenset[str]) -> Run:
        member_tree, method_token = tree.children[:2]
        arglist = tree.children[2] if len(tree.children) > 2 else None
        method = str(method_token)
        member = self.expr(member_tree, names)
        if method in _MACROS:
            return self.macro(method, member, arglist, names)
        if method in ("reduce", "min"):
            raise _Unsupported(method)
        func = self.function(method)
        args = self.exprlist(arglist, names)

        def method_call(env: dict[str, Any]) -> Any:
            receiver = _whole(member(env))
            values = [_whole(arg(env)) for arg in args]
            try:
                result = func(receiver, *values)
            except Exception:
                raise Fallback() from None
            return _check(result)

        return method_call

    def macro(self, name: str, member: Run, arglist: Any, names: frozenset[str]) -> Run:
        if not isinstance(arglist, lark.Tree) or len(arglist.children) != 2:
            raise _Unsupported(name)
        var_tree, body_tree = arglist.children
        idents = list(var_tree.find_data("ident")) if isinstance(var_tree, lark.Tree) else []
        if len(idents) != 1:
            raise _Unsupported(name)
        var = str(idents[0].children[0])
        if var in ("self", "oldSelf"):
            raise _Unsupported("a comprehension variable shadowing " + var)
        body = self.expr(body_tree, names | {var})

        def each(env: dict[str, Any]) -> tuple[Any, list[Any]]:
            collection = member(env)
            if isinstance(collection, Deferred):
                collection = collection.members()
            elif not isinstance(collection, (ct.ListType, ct.MapType)) or isinstance(collection, ct.MessageType):
                raise Fallback()
            scope = dict(env)
            results = []
            for item in collection:
                scope[var] = item
                results.append(_whole(_value_or_error(body, scope)))
            return collection, results

        if name in ("all", "exists"):
            op, start = (_AND, ct.BoolType(True)) if name == "all" else (_OR, ct.BoolType(False))

            def quantifier(env: dict[str, Any]) -> Any:
                _collection, results = each(env)
                return _check(reduce(op, results, start))

            return quantifier

        def strict(env: dict[str, Any]) -> tuple[Any, list[Any]]:
            collection, results = each(env)
            if any(isinstance(r, CELEvalError) for r in results):
                raise Fallback()  # errors inside filter/map/exists_one: the interpreter decides
            return collection, results

        if name == "filter":

            def filter_(env: dict[str, Any]) -> Any:
                collection, results = strict(env)
                if not all(isinstance(r, ct.BoolType) for r in results):
                    raise Fallback()
                return ct.ListType([_whole(item) for item, keep in zip(collection, results, strict=True) if keep])

            return filter_
        if name == "map":
            return lambda env: ct.ListType(strict(env)[1])

        def exists_one(env: dict[str, Any]) -> Any:
            _collection, results = strict(env)
            if not all(isinstance(r, ct.BoolType) for r in results):
                raise Fallback()
            return ct.BoolType(sum(1 for r in results if r) == 1)

        return exists_one


def _plain_logical(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``&&``/``||`` as the interpreter applies them (a TypeError there becomes an error value)."""

    def apply(left: Any, right: Any) -> Any:
        try:
            return op(left, right)
        except TypeError:
            return _ERROR

    return apply
