"""The CEL wrapper: Kubernetes-style compile/eval errors, schema-typed values, the TFJob rules."""

from __future__ import annotations

import pytest

from tfjob_sim.cel import MISSING, CelCompileError, CelEvalError, CelRule

CONTAINER = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "image": {"type": "string"}},
}
CONTAINERS = {"type": "array", "items": CONTAINER}
REPLICA_SPECS = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer", "format": "int32"},
            "template": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {"containers": CONTAINERS}}},
            },
        },
    },
}


def replica(*containers: dict) -> dict:
    return {"replicas": 1, "template": {"spec": {"containers": list(containers)}}}


TF = {"name": "tensorflow", "image": "tf:2"}

# -- the TFJob CRD rules ---------------------------------------------------------------------------

AT_MOST_ONE_CHIEF = "!(has(self.Chief) && has(self.Master))"
TENSORFLOW_CONTAINER = (
    "self.all(k, has(self[k].template) && self[k].template.spec.containers.exists(c, c.name == 'tensorflow'))"
)
NON_EMPTY_IMAGES = "self.all(c, has(c.image) && size(c.image) > 0)"
DNS1035 = "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self) <= 63"
KNOWN_TYPES = "self.all(k, k.matches('^(?i)(chief|master|ps|worker|evaluator)$'))"


@pytest.mark.parametrize(
    ("rule", "schema", "value", "expected"),
    [
        (AT_MOST_ONE_CHIEF, REPLICA_SPECS, {"Worker": replica(TF)}, True),
        (AT_MOST_ONE_CHIEF, REPLICA_SPECS, {"Chief": replica(TF), "Worker": replica(TF)}, True),
        (AT_MOST_ONE_CHIEF, REPLICA_SPECS, {"Chief": replica(TF), "Master": replica(TF)}, False),
        (
            TENSORFLOW_CONTAINER,
            REPLICA_SPECS,
            {"Worker": replica(TF), "PS": replica({"name": "x", "image": "i"}, TF)},
            True,
        ),
        (TENSORFLOW_CONTAINER, REPLICA_SPECS, {"Worker": replica({"name": "main", "image": "i"})}, False),
        (TENSORFLOW_CONTAINER, REPLICA_SPECS, {"Worker": {"replicas": 1}}, False),
        (NON_EMPTY_IMAGES, CONTAINERS, [TF, {"name": "sidecar", "image": "busybox"}], True),
        (NON_EMPTY_IMAGES, CONTAINERS, [TF, {"name": "sidecar", "image": ""}], False),
        (NON_EMPTY_IMAGES, CONTAINERS, [{"name": "tensorflow"}], False),
        (DNS1035, {"type": "string"}, "mnist-1", True),
        (DNS1035, {"type": "string"}, "1mnist", False),
        (DNS1035, {"type": "string"}, "Mnist", False),
        (DNS1035, {"type": "string"}, "a" * 63, True),
        (DNS1035, {"type": "string"}, "a" * 64, False),
        (KNOWN_TYPES, REPLICA_SPECS, {"worker": replica(TF), "PS": replica(TF), "Evaluator": replica(TF)}, True),
        (KNOWN_TYPES, REPLICA_SPECS, {"Launcher": replica(TF)}, False),
    ],
)
def test_tfjob_rules(rule: str, schema: dict, value: object, expected: bool) -> None:
    assert CelRule(rule, schema).evaluate(value) is expected


def test_immutability_transition_rule() -> None:
    rule = CelRule("self == oldSelf", {"type": "string"})
    assert rule.references_old_self
    assert rule.evaluate("queue-a", "queue-a") is True
    assert rule.evaluate("queue-b", "queue-a") is False
    assert not CelRule("self.size() > 0", {"type": "string"}).references_old_self


def test_transition_rule_without_old_value_is_an_error_not_a_pass() -> None:
    # The schema layer skips such rules on create; calling evaluate without oldSelf is a bug.
    with pytest.raises(CelEvalError, match="no such attribute"):
        CelRule("self == oldSelf").evaluate("a")


def test_optional_old_self() -> None:
    rule = CelRule("!oldSelf.hasValue() || self >= oldSelf.value()", {"type": "integer"})
    assert rule.evaluate(1, MISSING, optional_old_self=True) is True
    assert rule.evaluate(3, 2, optional_old_self=True) is True
    assert rule.evaluate(1, 2, optional_old_self=True) is False
    assert CelRule("oldSelf.orValue(5) == 5").evaluate(1, MISSING, optional_old_self=True) is True


# -- compile errors (surface at CRD creation) --------------------------------------------------------

OBJ = {
    "type": "object",
    "properties": {
        "x": {"type": "integer"},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
        "any": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "ios": {"x-kubernetes-int-or-string": True},
    },
}


@pytest.mark.parametrize(
    ("rule", "schema", "message"),
    [
        (
            "self.x ==",
            OBJ,
            "compilation failed: ERROR: <input>:1:10: Syntax error: mismatched input '<EOF>'\n | self.x ==\n | .........^",
        ),
        (
            "self.x # 1",
            OBJ,
            "compilation failed: ERROR: <input>:1:8: Syntax error: token recognition error at: '#'\n | self.x # 1\n | .......^",
        ),
        (
            "self.nope == 1",
            OBJ,
            "compilation failed: ERROR: <input>:1:5: undefined field 'nope'\n | self.nope == 1\n | ....^",
        ),
        ("has(self.nope)", OBJ, "compilation failed: ERROR: <input>:1:9: undefined field 'nope'"),
        ("self.all(c, c.imag == 'x')", CONTAINERS, "compilation failed: ERROR: <input>:1:14: undefined field 'imag'"),
        (
            "self.frob()",
            OBJ,
            "compilation failed: ERROR: <input>:1:10: undeclared reference to 'frob' (in container '')",
        ),
        ("frob(self)", OBJ, "compilation failed: ERROR: <input>:1:5: undeclared reference to 'frob' (in container '')"),
        (
            "other == 1",
            OBJ,
            "compilation failed: ERROR: <input>:1:1: undeclared reference to 'other' (in container '')",
        ),
    ],
)
def test_compile_errors(rule: str, schema: dict, message: str) -> None:
    with pytest.raises(CelCompileError) as info:
        CelRule(rule, schema)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    "rule",
    [
        "self.m.anything == 'x'",  # maps accept any key
        "self.any.whatever == 1",  # preserve-unknown-fields without properties: dynamic
        "self.ios == 1 || self.ios == 'a'",  # int-or-string: dynamic
        "type(self.x) == int",
    ],
)
def test_dynamic_parts_compile(rule: str) -> None:
    CelRule(rule, OBJ)


def test_root_rules_only_see_name_and_generate_name() -> None:
    root = {"type": "object", "properties": {"metadata": {"type": "object"}, "spec": {"type": "object"}}}
    CelRule("self.metadata.name.startsWith('a') && self.kind == 'TFJob'", root, is_root=True)
    with pytest.raises(CelCompileError, match="undefined field 'namespace'"):
        CelRule("self.metadata.namespace == 'x'", root, is_root=True)
    rule = CelRule("self.metadata.name == 'abc' && !has(self.metadata.generateName)", root, is_root=True)
    assert (
        rule.evaluate({"kind": "TFJob", "metadata": {"name": "abc", "namespace": "ns", "labels": {"a": "b"}}}) is True
    )


# -- evaluation errors (Kubernetes wording) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "value", "message", "overload"),
    [
        ("self.x == 1", {}, "no such key: x", False),
        ("self.Worker.replicas == 1", {"PS": {"replicas": 1}}, "no such key: Worker", False),
        ("self[3] == 1", [1], "index out of bounds", False),
        ("1 / self == 1", 0, "division by zero", False),
        ("self + 'a' == 'b'", 1, "no such overload", True),
        ("self", 1, "rule did not evaluate to a bool", False),
    ],
)
def test_evaluation_errors(rule: str, value: object, message: str, overload: bool) -> None:
    with pytest.raises(CelEvalError) as info:
        CelRule(rule).evaluate(value)
    assert str(info.value).startswith(message)
    assert info.value.no_such_overload is overload


def test_missing_key_inside_a_macro_is_an_evaluation_error() -> None:
    rule = CelRule("self.all(k, self[k].template.spec.containers.exists(c, c.name == 'tensorflow'))", REPLICA_SPECS)
    with pytest.raises(CelEvalError, match="^no such key: template$"):
        rule.evaluate({"Worker": {"replicas": 1}})


# -- schema-typed values --------------------------------------------------------------------------------


def test_values_follow_the_schema_types() -> None:
    num = {"type": "object", "properties": {"ratio": {"type": "number"}, "count": {"type": "integer"}}}
    assert CelRule("self.ratio == 1.0 && self.count == 1", num).evaluate({"ratio": 1, "count": 1}) is True
    ts = {
        "type": "object",
        "properties": {"t": {"type": "string", "format": "date-time"}, "d": {"type": "string", "format": "duration"}},
    }
    rule = CelRule("self.t > timestamp('2020-01-01T00:00:00Z') && self.d == duration('90s')", ts)
    assert rule.evaluate({"t": "2024-01-01T00:00:00Z", "d": "1m30s"}) is True
    assert CelRule("self.t.getFullYear() == 2024", ts).evaluate({"t": "2024-06-01T00:00:00Z"}) is True


def test_set_and_map_lists_compare_without_order() -> None:
    set_list = {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
    atomic = {"type": "array", "items": {"type": "string"}}
    assert CelRule("self == oldSelf", set_list).evaluate(["a", "b"], ["b", "a"]) is True
    assert CelRule("self == oldSelf", set_list).evaluate(["a", "b"], ["a", "c"]) is False
    assert CelRule("self == oldSelf", atomic).evaluate(["a", "b"], ["b", "a"]) is False


@pytest.mark.parametrize(
    ("rule", "value"),
    [
        ("self.lowerAscii() == 'abc' && self.upperAscii() == 'ABC'", "aBc"),
        ("self.trim() == 'x'", "  x "),
        ("self.split(',') == ['a', 'b', 'c'] && self.split(',', 2) == ['a', 'b,c']", "a,b,c"),
        ("['a', 'b'].join('-') == 'a-b' && ['a', 'b'].join() == 'ab'", ""),
        ("self.replace('a', 'o') == 'foo' && self.replace('a', 'o', 1) == 'foa'", "faa"),
        ("self.indexOf('b') == 1 && self.lastIndexOf('a') == 2 && self.indexOf('z') == -1", "aba"),
        ("self.substring(1) == 'bc' && self.substring(0, 1) == 'a' && self.charAt(2) == 'c'", "abc"),
        ("self.isSorted() && self.sum() == 6 && self.max() == 3 && self.min() == 1", [1, 2, 3]),
        ("!self.isSorted() && self.indexOf(2) == 0 && self.slice(1, 2) == [1]", [2, 1]),
        ("self.find('[0-9]+') == '42' && self.findAll('[a-z]') == ['a', 'b']", "a42b"),
        ("'a' in self && !('z' in self) && size(self) == 2", {"a": 1, "b": 2}),
        ("self.exists_one(x, x > 2) && self.filter(x, x > 1) == [2, 3] && self.map(x, x * 2) == [2, 4, 6]", [1, 2, 3]),
        ("self.startsWith('ab') && self.endsWith('yz') && self.contains('mn')", "abmnyz"),
        ("int('5') == 5 && string(5) == '5' && double(1) == 1.0 && uint(2) == 2u && bool('true')", ""),
        ("dyn(self) == 1", 1),
    ],
)
def test_library_functions(rule: str, value: object) -> None:
    assert CelRule(rule).evaluate(value) is True


def test_parse_is_cached_per_text() -> None:
    from tfjob_sim import cel

    cel._parse.cache_clear()
    CelRule("self > 1")
    CelRule("self > 1")
    assert cel._parse.cache_info().hits >= 1


# -- the compiled fast path (tfjob_sim.celcompile); conftest cross-checks every evaluation -----


def test_every_tfjob_crd_rule_runs_compiled() -> None:
    """The speed of TFJob creates rests on this: no rule of our CRD falls back to the interpreter."""
    from pathlib import Path

    import yaml

    crd = yaml.safe_load((Path(__file__).resolve().parents[2] / "manifests/crd/kubeflow.org_tfjobs.yaml").read_text())
    rules: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            rules.extend(r["rule"] for r in node.get("x-kubernetes-validations") or [])
            for child in node.values():
                walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(crd)
    assert len(rules) >= 7
    assert [r for r in rules if CelRule(r, is_root=r.startswith("size(self.metadata"))._fast is None] == []


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("has(self.a) && self.a > 1", {"a": 2}, True),
        ("has(self.a) && self.a > 1", {}, False),
        ("has(self.a.b)", {"a": {}}, False),
        ("has(self.a.b)", {}, False),
        ("false && self.missing", {}, False),
        ("self.missing || true", {}, True),
        ("self.missing == 1 || self.x == 2", {"x": 2}, True),
        ("self.l.all(x, x > 0)", {"l": [1, 2]}, True),
        ("self.l.all(x, x.missing > 0)", {"l": []}, True),
        ("self.l.exists(x, x == 2)", {"l": [1, 2]}, True),
        ("self.l.exists_one(x, x >= 2)", {"l": [1, 2, 3]}, False),
        ("self.l.filter(x, x > 1).size() == 2", {"l": [1, 2, 3]}, True),
        ("self.l.map(x, x * 2) == [2, 4]", {"l": [1, 2]}, True),
        ("self.m.all(k, k.startsWith('a'))", {"m": {"ab": 1, "ac": 2}}, True),
        ("self.s + 'x' == 'yx' ? true : false", {"s": "y"}, True),
        ("!(self.n - 1 == 0)", {"n": 1}, False),
        ("size(self.s) <= 3 && self.s.matches('^[a-z]+$')", {"s": "abc"}, True),
        ("self.s.lowerAscii() == 'abc'", {"s": "ABC"}, True),
        ("'b' in self.m", {"m": {"b": 1}}, True),
        ("self.n / 2 == 1 && self.n % 2 == 0", {"n": 2}, True),
        ("self.m.all(k, !has(self.m[k].r) || self.m[k].r > 0)", {"m": {"a": {"r": 1}, "b": {}}}, True),
        ("self.m.all(k, has(self.m[k].r))", {"m": {"a": {"r": 1}, "b": {}}}, False),
        ("self.l[1] == 'y' && size(string(self.n - 1)) == 2", {"l": ["x", "y"], "n": 11}, True),
    ],
)
def test_compiled_rules_agree_with_the_interpreter(rule: str, value: dict, expected: bool) -> None:
    compiled = CelRule(rule)
    assert compiled._fast is not None, "the rule should take the compiled path"
    assert compiled.evaluate(value) is expected


@pytest.mark.parametrize(
    ("rule", "value", "message"),
    [
        ("self.missing > 1", {}, "no such key: missing"),
        ("self.n / 0 == 1", {"n": 1}, "division by zero"),
        ("self.s > 1", {"s": "a"}, "no such overload"),
        ("self.l.all(x, x.missing > 0)", {"l": [{"a": 1}]}, "no such key: missing"),
        ("self.m['absent'] == 1", {"m": {}}, "absent"),
        ("self.l[2] == 1", {"l": [1]}, "index"),
    ],
)
def test_compiled_rules_leave_errors_to_the_interpreter(rule: str, value: dict, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        CelRule(rule).evaluate(value)


TYPED = {
    "type": "object",
    "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}, "uid": {"type": "string"}}},
        "n": {"type": "number"},
        "i": {"x-kubernetes-int-or-string": True},
        "t": {"type": "string", "format": "date-time"},
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "l": {
            "type": "array",
            "items": {"type": "object", "properties": {"a": {"type": "integer"}, "d": {"type": "number"}}},
        },
        "m": {"type": "object", "additionalProperties": {"type": "object", "properties": {"r": {"type": "integer"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}
TYPED_VALUE = {
    "apiVersion": "v1",
    "kind": "K",
    "metadata": {"name": "a", "uid": "u"},
    "n": 1,
    "i": "50%",
    "t": "2024-01-01T00:00:00Z",
    "set": ["x", "y"],
    "l": [{"a": 1, "d": 2}, {"a": 2}],
    "m": {"a": {"r": 1}, "b": {}},
    "free": {"x": [1, {"y": 2}]},
}


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("self.n == 1.0 && self.l[0].d == 2.0", True),
        ("self.set == ['y', 'x'] && self.set.exists(s, s == 'y')", True),
        ("self.l.filter(x, x.a > 1).size() == 1 && self.l.filter(x, x.a > 1)[0].a == 2", True),
        ("self.l.map(x, x.a) == [1, 2] && self.l[0] == self.l[0]", True),
        ("size(self.metadata) == 1 && !('uid' in self.metadata) && self.metadata.name == 'a'", True),
        ("self.m.all(k, has(self.m[k].r) ? self.m[k].r == 1 : true) && self['m']['a'].r == 1", True),
        ("(self.n > 0 ? self.m : self.free).a.r == 1", True),
        ("self.free.x[1].y == 2 && self.i == '50%' && self.t < timestamp('2025-01-01T00:00:00Z')", True),
        ("size(self) == 10 && [self.m.a] == [self.m.a] && self.m.map(k, self.m[k]).size() == 2", True),
        ("self.m.exists_one(k, has(self.m[k].r)) && self.m.b != self.m.a", True),
        ("self.l.all(x, x.a > 1)", False),
        ("self.m.filter(k, k == 'b') == ['b'] && self.l.exists(x, x == self.l[1])", True),
    ],
)
def test_schema_typed_values_read_in_part_agree_with_the_interpreter(rule: str, expected: bool) -> None:
    """Compiled rules read ``self`` converted only as far as they look into it; every answer must be the
    interpreter's on the whole value (the sim tests' cross-check compares both)."""
    compiled = CelRule(rule, TYPED, is_root=True)
    assert compiled._fast is not None, "the rule should take the compiled path"
    assert compiled.evaluate(TYPED_VALUE) is expected


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("self.l[5].a == 1", "index"),
        ("self.m.c.r == 1", "no such key: c"),
        ("self.free.nope == 1", "no such key: nope"),
        ("self.m.b.r == 1", "no such key: r"),
    ],
)
def test_schema_typed_values_read_in_part_keep_the_interpreter_errors(rule: str, message: str) -> None:
    with pytest.raises(CelEvalError, match=message):
        CelRule(rule, TYPED, is_root=True).evaluate(TYPED_VALUE)


def test_transition_rules_read_old_values_in_part_too() -> None:
    old = {**TYPED_VALUE, "m": {"a": {"r": 2}}}
    assert CelRule("self.l == oldSelf.l && oldSelf.m.a.r == 2", TYPED, is_root=True).evaluate(TYPED_VALUE, old)
    assert not CelRule("self.m == oldSelf.m", TYPED, is_root=True).evaluate(TYPED_VALUE, old)


def test_a_rule_converts_only_the_parts_of_self_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TFJob rule reading a replica count must not pay for converting the pod template to CEL."""
    from tfjob_sim import cel

    monkeypatch.setattr(cel, "CROSS_CHECK", False)  # the interpreter would convert everything
    converted: list[object] = []
    real = cel.to_cel

    def spy(value: object, schema: dict | None = None, *, is_root: bool = False) -> object:
        converted.append(value)
        return real(value, schema, is_root=is_root)

    monkeypatch.setattr(cel, "to_cel", spy)
    rule = CelRule("size(self.metadata.name) <= 63 && self.m.a.r == 1 && self.l.all(x, x.a > 0)", TYPED, is_root=True)
    assert rule.evaluate(TYPED_VALUE) is True
    assert not any(v is TYPED_VALUE["free"] or v is TYPED_VALUE["m"] or v is TYPED_VALUE["l"] for v in converted)
    assert 1 in converted  # the leaves it reads, alone
    whole = CelRule("self.a == 1 && size(self) == 2")
    assert whole.evaluate({"a": 1, "b": 2}) is True


def test_results_are_remembered_by_what_the_rule_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Distinct TFJobs (other images, other replica counts) share what their rules read: replica types,
    container names. Each rule is evaluated once per distinct view, and never answers for a value
    whose view differs."""
    from tfjob_sim import cel

    monkeypatch.setattr(cel, "CROSS_CHECK", False)  # it re-evaluates remembered results
    keys_only = CelRule("self.all(k, k.matches('^[a-z]+$')) && self.filter(k, k == 'b').size() <= 1", REPLICA_SPECS)
    reads_values = CelRule("self.all(k, self[k].replicas > 0)", REPLICA_SPECS)
    names = CelRule(TENSORFLOW_CONTAINER, REPLICA_SPECS)
    images = CelRule(NON_EMPTY_IMAGES, CONTAINERS)
    evaluated: list[str] = []
    real = CelRule._evaluate

    def spy(rule: CelRule, *args: object) -> object:
        evaluated.append(rule.rule)
        return real(rule, *args)

    monkeypatch.setattr(CelRule, "_evaluate", spy)
    assert keys_only.evaluate({"a": replica(TF), "b": replica(TF)}) is True
    assert keys_only.evaluate({"a": {"replicas": 3}, "b": {"replicas": -1}}) is True
    assert keys_only.evaluate({"a": {}, "B": {}}) is False
    assert evaluated.count(keys_only.rule) == 2  # the second map has the first one's keys
    assert reads_values.evaluate({"a": {"replicas": 1}}) is True
    assert reads_values.evaluate({"a": {"replicas": 0}}) is False
    assert CelRule("size(self) == 1 && self.all(k, true)", REPLICA_SPECS)._observed is None
    for image in ("tf:1", "tf:2", "tf:3"):
        assert names.evaluate({"w": replica({"name": "tensorflow", "image": image}, {"name": "side", "image": image})})
    assert not names.evaluate({"w": replica({"name": "tensor", "image": "tf:1"})})
    assert evaluated.count(names.rule) == 2
    assert images.evaluate([{"name": "a", "image": "x"}]) is True
    assert images.evaluate([{"name": "b", "image": "x"}]) is True
    assert images.evaluate([{"name": "a"}]) is False
    assert images.evaluate([{"name": "a", "image": ""}]) is False
    assert evaluated.count(images.rule) == 3


def test_what_a_rule_reads_is_a_safe_view() -> None:
    """Every use other than selecting, indexing, iterating or has() keeps the value whole."""
    views = {
        "self.a.b == 1 && has(self.c)": ({"a": {"b": 1, "x": 2}, "c": {"d": 3}, "e": 4}, {"a": {"b": 1}, "c": {}}),
        "self.l.exists(x, x.n == 1)": ({"l": [{"n": 1, "m": 2}, {"m": 3}]}, {"l": [{"n": 1}, {}]}),
        "self.l.filter(x, x.n == 1).size() == 1": ({"l": [{"n": 1, "m": 2}]}, {"l": [{"n": 1, "m": 2}]}),
        "self.m.all(k, self.m[k].r > 0)": ({"m": {"a": {"r": 1, "s": 2}}}, {"m": {"a": {"r": 1}}}),
        "self.m.all(k, k != 'x') && self.m.a == self.m.a": ({"m": {"a": {"r": 1}}}, {"m": {"a": {"r": 1}}}),
        "[self.a] == [self.a] && self.b.c > 0": (
            {"a": {"x": 1}, "b": {"c": 1, "d": 2}},
            {"a": {"x": 1}, "b": {"c": 1}},
        ),
        "(self.n > 0 ? self.a : self.b).c == 1": (
            {"n": 1, "a": {"c": 1, "d": 2}, "b": {}, "z": 0},
            {"n": 1, "a": {"c": 1, "d": 2}, "b": {}},
        ),
    }
    for rule, (value, view) in views.items():
        observed = CelRule(rule)._observed
        assert observed is not None and observed.project(value) == view, rule
    assert CelRule("self == oldSelf")._observed is None
    assert CelRule("size(self) > 0")._observed is None
