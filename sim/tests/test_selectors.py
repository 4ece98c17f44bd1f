"""Label and field selectors: grammar, matching rules and the server's exact 400 messages."""

from __future__ import annotations

import pytest

from tfjob_sim.errors import ApiError
from tfjob_sim.selectors import (
    POD_FIELDS,
    FieldSelector,
    LabelSelector,
    field_selector_escape,
    label_selector_from_dict,
    object_fields,
    parse_field_selector,
    parse_label_selector,
    pod_fields,
)
from tfjob_sim.store import Store
from tfjob_sim.testing.objects import pod

KEY_NAME_RULE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
OPERATORS_EXPECTED = "in, notin, =, ==, !=, gt, lt"


# ------------------------------------------------------------------------------------------
# Label selector matching
# ------------------------------------------------------------------------------------------

LABEL_MATCH_CASES = [
    # (selector, labels, matches)
    ("app=web", {"app": "web"}, True),
    ("app=web", {"app": "db"}, False),
    ("app=web", {}, False),
    ("app==web", {"app": "web", "x": "y"}, True),
    ("app!=web", {"app": "db"}, True),
    ("app!=web", {"app": "web"}, False),
    ("app!=web", {}, True),  # absent key matches !=
    ("tier in (a,b)", {"tier": "b"}, True),
    ("tier in (a,b)", {"tier": "c"}, False),
    ("tier in (a,b)", {}, False),
    ("tier in (a)", {"tier": "a"}, True),
    ("tier notin (a,b)", {"tier": "c"}, True),
    ("tier notin (a,b)", {"tier": "a"}, False),
    ("tier notin (a,b)", {}, True),  # absent key matches notin
    ("tier", {"tier": ""}, True),
    ("tier", {"other": "x"}, False),
    ("!tier", {"other": "x"}, True),
    ("!tier", {"tier": "x"}, False),
    ("n>3", {"n": "4"}, True),
    ("n>3", {"n": "3"}, False),
    ("n<3", {"n": "-7"}, True),
    ("n<3", {"n": "3"}, False),
    ("n>3", {"n": "four"}, False),  # non-integer label values never match
    ("n>3", {"n": "4.5"}, False),
    ("n>3", {}, False),
    ("n<3", {"n": "+2"}, True),  # strconv.ParseInt accepts a sign
    ("x in (foo,,baz)", {"x": ""}, True),  # empty values are legal members
    ("x in (foo,,baz)", {"x": "foo"}, True),
    ("x in (foo,,baz)", {"x": "bar"}, False),
    ("x in ()", {"x": ""}, True),  # "()" is the set holding the empty value
    ("x=", {"x": ""}, True),
    ("x=", {"x": "a"}, False),
    ("in in (in,notin)", {"in": "notin"}, True),  # keywords are identifiers in key/value positions
    ("example.com/role=master", {"example.com/role": "master"}, True),
    ("  app = web ,\ttier\n", {"app": "web", "tier": "x"}, True),
    ("app=web,tier in (a,b),!gone,n>1", {"app": "web", "tier": "a", "n": "2"}, True),
    ("app=web,tier in (a,b),!gone,n>1", {"app": "web", "tier": "a", "n": "2", "gone": ""}, False),
    ("app=a,app=b", {"app": "a"}, False),  # contradictory exact matches never hold
    ("", {"anything": "goes"}, True),
]


@pytest.mark.parametrize(("text", "labels", "expected"), LABEL_MATCH_CASES)
def test_label_selector_matches(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_label_selector(text).matches(labels) is expected


def test_label_selector_treats_missing_labels_as_empty() -> None:
    assert parse_label_selector("").matches(None)
    assert parse_label_selector("app!=web").matches(None)
    assert not parse_label_selector("app").matches(None)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("b=2,a=1", "a=1,b=2"),  # requirements sort by key
        ("a==1", "a==1"),
        ("x in (foo,,baz),y,z notin ()", "x in (,baz,foo),y,z notin ()"),
        ("tier in (b,a,b)", "tier in (a,b)"),  # values are a sorted set
        ("!a", "!a"),
        ("n>3,m<4", "m<4,n>3"),
        ("  a  !=  b ", "a!=b"),
    ],
)
def test_label_selector_canonical_string(text: str, canonical: str) -> None:
    assert str(parse_label_selector(text)) == canonical
    # The canonical form parses back to the same selector.
    assert parse_label_selector(canonical) == parse_label_selector(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a b", f"unable to parse requirement: found 'b', expected: {OPERATORS_EXPECTED}"),
        ("a!b", f"unable to parse requirement: found '!', expected: {OPERATORS_EXPECTED}"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        ("a,", "found '', expected: identifier after ','"),
        ("a=b,,c", "found ',', expected: identifier after ','"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("a in b", "unable to parse requirement: found 'b' expected: '('"),
        ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("a in (b c)", "unable to parse requirement: found 'c', expected: ',' or ')'"),
        ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("a in (b,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("a=(", "unable to parse requirement: found '(', expected: identifier"),
        ("k$=v", f'unable to parse requirement: <nil>: Invalid value: "k$": {KEY_NAME_RULE}'),
        ("a=b$", f'unable to parse requirement: values[0][a]: Invalid value: "b$": {VALUE_RULE}'),
        (
            "a>x",
            'unable to parse requirement: values[0]: Invalid value: "x": '
            "for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            # The bound must also be a valid label value, so negative bounds cannot be written.
            "n>-1",
            f'unable to parse requirement: values[0][n]: Invalid value: "-1": {VALUE_RULE}',
        ),
        (
            "/a",
            'unable to parse requirement: <nil>: Invalid value: "/a": prefix part must be non-empty',
        ),
        (
            "Ex.com/a",
            'unable to parse requirement: <nil>: Invalid value: "Ex.com/a": prefix part a lowercase RFC 1123 '
            "subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
            "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        (
            "a/b/c",
            'unable to parse requirement: <nil>: Invalid value: "a/b/c": a valid label key must consist of '
            "alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character "
            "(e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' "
            "(e.g. 'example.com/MyName')",
        ),
        (
            "k" * 64,
            f'unable to parse requirement: <nil>: Invalid value: "{"k" * 64}": name part must be no more than 63 bytes',
        ),
        (
            "a=" + "v" * 64,
            f'unable to parse requirement: values[0][a]: Invalid value: "{"v" * 64}": must be no more than 63 bytes',
        ),
    ],
)
def test_label_selector_parse_errors_are_400_with_server_message(text: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_label_selector(text)
    assert (caught.value.code, caught.value.reason) == (400, "BadRequest")
    assert caught.value.message == message


def test_label_selector_accepts_the_longest_valid_key_and_value() -> None:
    key = "a" * 63
    selector = parse_label_selector(f"{'p' * 20}.example.com/{key}={'v' * 63}")
    assert selector.matches({f"{'p' * 20}.example.com/{key}": "v" * 63})


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_blank_label_selector_is_empty_and_matches_everything(text: str) -> None:
    selector = parse_label_selector(text)
    assert selector.is_empty()
    assert str(selector) == ""
    assert selector.matches({}) and selector.matches({"a": "b"})


def test_label_selector_requires_exact_match_for_index_lookups() -> None:
    selector = parse_label_selector("job=j1,tier in (a),x in (a,b),y!=z")
    assert selector.requires_exact_match("job") == "j1"
    assert selector.requires_exact_match("tier") == "a"
    assert selector.requires_exact_match("x") is None
    assert selector.requires_exact_match("y") is None
    assert selector.requires_exact_match("absent") is None


# ------------------------------------------------------------------------------------------
# metav1.LabelSelector conversion
# ------------------------------------------------------------------------------------------


def test_nil_label_selector_matches_nothing_and_empty_matches_everything() -> None:
    nothing = label_selector_from_dict(None)
    assert not nothing.matches({}) and not nothing.matches({"a": "b"})
    assert not nothing.is_empty()
    everything = label_selector_from_dict({})
    assert everything.is_empty() and everything.matches({"a": "b"})
    assert label_selector_from_dict({"matchLabels": {}, "matchExpressions": []}).is_empty()


def test_label_selector_from_dict_combines_labels_and_expressions() -> None:
    selector = label_selector_from_dict(
        {
            "matchLabels": {"job-name": "mnist", "app": "tf"},
            "matchExpressions": [
                {"key": "replica-type", "operator": "In", "values": ["worker", "ps"]},
                {"key": "replica-index", "operator": "NotIn", "values": ["0"]},
                {"key": "owned", "operator": "Exists"},
                {"key": "orphan", "operator": "DoesNotExist"},
            ],
        }
    )
    assert str(selector) == "app=tf,job-name=mnist,!orphan,owned,replica-index notin (0),replica-type in (ps,worker)"
    labels = {"job-name": "mnist", "app": "tf", "replica-type": "ps", "replica-index": "1", "owned": ""}
    assert selector.matches(labels)
    assert not selector.matches({**labels, "replica-index": "0"})
    assert not selector.matches({**labels, "orphan": "yes"})
    assert not selector.matches({k: v for k, v in labels.items() if k != "owned"})


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            '"Gt" is not a valid label selector operator',
        ),
        ({"matchExpressions": [{"key": "a"}]}, '"" is not a valid label selector operator'),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            'values: Invalid value: ["x"]: values set must be empty for exists and does not exist',
        ),
        ({"matchLabels": {"a b": "c"}}, f'key: Invalid value: "a b": {KEY_NAME_RULE}'),
        (
            {"matchLabels": {"a b": "c d"}},
            f'[key: Invalid value: "a b": {KEY_NAME_RULE}, values[0][a b]: Invalid value: "c d": {VALUE_RULE}]',
        ),
        ({"matchLabels": ["a"]}, "matchLabels must be an object, not array"),
        ({"matchLabels": {"a": 1}}, "matchLabels[a] must be a string, not number"),
        ({"matchExpressions": {"key": "a"}}, "matchExpressions must be an array, not object"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
            "matchExpressions[0].values must be an array of strings",
        ),
    ],
)
def test_label_selector_from_dict_rejects_bad_input(selector: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        label_selector_from_dict(selector)
    assert str(caught.value) == message


def test_a_rejected_list_of_values_is_printed_as_encoding_json_prints_it() -> None:
    # HTML-safe, control characters as \u00XX (not %q's \a); each bad value is then reported with %q.
    selector = {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["<x>", "a\tb", "bell\a"]}]}
    with pytest.raises(ValueError) as caught:
        label_selector_from_dict(selector)
    assert str(caught.value).startswith(
        '[values: Invalid value: ["\\u003cx\\u003e","a\\tb","bell\\u0007"]: '
        "values set must be empty for exists and does not exist, "
        'values[0][a]: Invalid value: "<x>": '
    ), caught.value
    assert 'values[2][a]: Invalid value: "bell\\a": ' in str(caught.value)


# ------------------------------------------------------------------------------------------
# Field selectors
# ------------------------------------------------------------------------------------------

RUNNING_POD = {
    "metadata": {"name": "tf-worker-0", "namespace": "ml"},
    "spec": {"nodeName": "node-1", "restartPolicy": "Never", "schedulerName": "default-scheduler"},
    "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}], "podIP": "10.0.0.7"},
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("metadata.name=tf-worker-0", True),
        ("metadata.name==tf-worker-0", True),
        ("metadata.name!=tf-worker-0", False),
        ("metadata.name=other", False),
        ("spec.nodeName=node-1,status.phase=Running", True),
        ("spec.nodeName=node-1,status.phase!=Running", False),
        ("spec.serviceAccountName=", True),  # unset fields compare as ""
        ("status.nominatedNodeName!=", False),
        ("spec.hostNetwork=false", True),
        ("status.podIP=10.0.0.7", True),
        ("spec.host=node-1", True),  # legacy alias of spec.nodeName
        ("", True),
        (",", True),  # empty terms are skipped
    ],
)
def test_field_selector_matches_pod_fields(text: str, expected: bool) -> None:
    selector = parse_field_selector(text, POD_FIELDS, "pods")
    assert selector.matches(pod_fields(RUNNING_POD)) is expected


def test_field_selector_values_unescape() -> None:
    selector = parse_field_selector(r"metadata.name=a\,b\=c\\d", {"metadata.name"}, "configmaps")
    assert selector.exact_value("metadata.name") == "a,b=c\\d"
    assert selector.matches({"metadata.name": "a,b=c\\d"})
    assert str(selector) == r"metadata.name=a\,b\=c\\d"
    assert field_selector_escape("a,b=c\\d") == r"a\,b\=c\\d"


def test_field_selector_introspection() -> None:
    selector = parse_field_selector("status.phase!=Failed,metadata.name=p1,spec.nodeName=n", POD_FIELDS, "pods")
    assert selector.fields() == {"status.phase", "metadata.name", "spec.nodeName"}
    assert selector.exact_value("metadata.name") == "p1"
    assert selector.exact_value("status.phase") is None  # only '=' terms pin a value
    assert selector.exact_value("metadata.namespace") is None
    assert not selector.is_empty()
    # Terms are kept sorted by their source text, as the server does.
    assert str(selector) == "metadata.name=p1,spec.nodeName=n,status.phase!=Failed"
    assert parse_field_selector("", POD_FIELDS, "pods").is_empty()
    assert FieldSelector().is_empty()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("metadata.name", "invalid selector: 'metadata.name'; can't understand 'metadata.name'"),
        ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
        ("metadata.name=a=b", "invalid field selector: unescaped character in value: 61"),
        (r"metadata.name=x\y", r"invalid field selector: invalid escape sequence: \y"),
        ("metadata.name=x\\", "invalid field selector: invalid escape sequence: \\"),
        ("spec.foo=x", "field label not supported: spec.foo"),
        ("metadata.name = x", "field label not supported: metadata.name "),
        ("spec.unschedulable=true", "field label not supported: spec.unschedulable"),
    ],
)
def test_field_selector_errors_are_400_with_server_message(text: str, message: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_field_selector(text, POD_FIELDS, "pods")
    assert (caught.value.code, caught.value.reason) == (400, "BadRequest")
    assert caught.value.message == message


def test_field_label_support_depends_on_the_resource() -> None:
    namespaced = set(object_fields({}, namespaced=True))
    cluster_scoped = set(object_fields({}, namespaced=False))
    assert parse_field_selector("metadata.namespace=ml", namespaced, "tfjobs").matches({"metadata.namespace": "ml"})
    with pytest.raises(ApiError, match=r"^field label not supported: metadata\.namespace$"):
        parse_field_selector("metadata.namespace=ml", cluster_scoped, "nodes")
    # The spec.host alias exists for pods only.
    with pytest.raises(ApiError, match=r"^field label not supported: spec\.host$"):
        parse_field_selector("spec.host=n", {"metadata.name", "spec.nodeName"}, "services")


def test_pod_fields_cover_every_supported_field_with_defaults() -> None:
    assert pod_fields({}) == {name: ("false" if name == "spec.hostNetwork" else "") for name in POD_FIELDS}
    fields = pod_fields(
        {
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {
                "nodeName": "node",
                "restartPolicy": "OnFailure",
                "schedulerName": "volcano",
                "serviceAccountName": "sa",
                "hostNetwork": True,
            },
            "status": {"phase": "Pending", "podIP": "10.1.1.1", "nominatedNodeName": "other"},
        }
    )
    assert set(fields) == POD_FIELDS
    assert fields["spec.hostNetwork"] == "true"
    assert fields["status.podIP"] == "10.1.1.1"  # a lone podIP stands for podIPs[0]
    assert fields["spec.schedulerName"] == "volcano"
    assert pod_fields(RUNNING_POD)["status.podIP"] == "10.0.0.7"


def test_object_fields() -> None:
    obj = {"metadata": {"name": "job", "namespace": "ml"}}
    assert object_fields(obj, namespaced=True) == {"metadata.name": "job", "metadata.namespace": "ml"}
    assert object_fields(obj, namespaced=False) == {"metadata.name": "job"}


def test_selectors_are_value_objects() -> None:
    assert parse_label_selector("b=1,a in (x)") == parse_label_selector("a in (x), b=1")
    assert hash(parse_label_selector("a=1")) == hash(parse_label_selector("a = 1"))
    assert LabelSelector.nothing() != LabelSelector()
    assert parse_field_selector("metadata.name=a", POD_FIELDS, "pods") == parse_field_selector(
        "metadata.name==a", POD_FIELDS, "pods"
    )


def test_pod_field_selectors_use_the_one_pod_fields_definition() -> None:
    """The store's pod type selects by selectors.pod_fields (one definition of pod ToSelectableFields)."""
    store = Store()
    rt = store.resource_type("pods")
    assert rt.supported_fields == set(POD_FIELDS)
    store.create("pods", "default", pod("p", node="n1"))
    status = {"phase": "Running", "podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}]}
    stored = store.patch("pods", "default", "p", "merge", {"status": status}, subresource="status")
    assert rt.fields_of(stored) == pod_fields(stored)

    def names(selector: str) -> list[str]:
        return [o["metadata"]["name"] for o in store.list("pods", "default", field_selector=selector)[0]]

    assert names("status.podIP=10.0.0.9,spec.hostNetwork=false,spec.nodeName=n1") == ["p"]
    assert names("spec.host=n1") == ["p"]  # the pod-only alias of spec.nodeName
    assert names("status.nominatedNodeName!=") == []
