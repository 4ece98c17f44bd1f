"""client-go JSONPath semantics for CRD printer columns, and the Table cells the server emits."""

from __future__ import annotations

import datetime as dt

import pytest

from tfjob_sim.jsonpath import (
    JSONPathError,
    JSONPathEvalError,
    compile_path,
    evaluate,
    format_cell,
    human_duration,
)

JOB = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "TFJob",
    "metadata": {
        "name": "mnist",
        "creationTimestamp": "2024-05-01T12:00:00Z",
        "labels": {"app.kubernetes.io/name": "mnist", "a.b": "dotted", "plain": "p"},
    },
    "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2}, "PS": {"replicas": 1}}, "ratio": 1.5, "flag": True},
    "status": {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "TFJobCreated"},
            {"type": "Running", "status": "True", "reason": "TFJobRunning"},
            {"type": "Restarting", "status": "False", "count": 3},
        ],
        "empty": [],
        "nothing": None,
    },
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".metadata.name", ["mnist"]),
        (".status.conditions[-1:].type", ["Restarting"]),  # upstream TFJob "State" column
        (".status.conditions[0].type", ["Created"]),
        (".status.conditions[-1].type", ["Restarting"]),
        (".status.conditions[1:].type", ["Running", "Restarting"]),
        (".status.conditions[0:3:2].type", ["Created", "Restarting"]),
        (".status.conditions[*].type", ["Created", "Running", "Restarting"]),
        (".spec.tfReplicaSpecs.*.replicas", [2, 1]),
        (".spec.tfReplicaSpecs.Worker.replicas", [2]),
        ("['spec']['tfReplicaSpecs']['PS']['replicas']", [1]),
        (".metadata.labels.app\\.kubernetes\\.io/name", ["mnist"]),
        # client-go re-parses ['a.b'] as .a.b: the dots are separators, the key is not found
        (".metadata.labels['a.b']", []),
        (".metadata.labels.a\\.b", ["dotted"]),
        ('.status.conditions[?(@.type=="Running")].reason', ["TFJobRunning"]),
        ('.status.conditions[?(@.status!="True")].type', ["Restarting"]),
        (".status.conditions[?(@.count>2)].type", ["Restarting"]),
        (".status.conditions[?(@.count<2)].type", []),
        (".status.conditions[?(@.count)].type", ["Restarting"]),  # existence filter
        ("..replicas", [2, 1]),
        (".status.conditions[0]['type','reason']", ["Created", "TFJobCreated"]),
        (".missing", []),
        (".missing.deeper[-1:]", []),
        # evaluation errors give an empty cell, as in the TableConvertor
        (".status.empty[-1:].type", []),
        (".status.conditions[7].type", []),
        (".metadata.name[0]", []),
        ('.status.conditions[?(@.count=="3")].type', []),  # int vs string: incomparable
    ],
)
def test_printer_column_paths(path: str, expected: list) -> None:
    assert evaluate(JOB, path) == expected


def test_find_reports_evaluation_errors() -> None:
    with pytest.raises(JSONPathEvalError, match="array index out of bounds: index -1, length 0"):
        compile_path(".status.empty[-1:]").find(JOB)
    with pytest.raises(JSONPathEvalError, match="incompatible types for comparison"):
        compile_path('.status.conditions[?(@.count=="3")]').find(JOB)
    with pytest.raises(JSONPathEvalError, match="string is not array or slice"):
        compile_path(".metadata.name[0]").find(JOB)


def test_find_returns_every_template_segment() -> None:
    assert compile_path(".metadata.name}-{.spec.flag").find(JOB) == [["mnist"], ["-"], [True]]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (".status.conditions[", "unterminated array"),
        (".a[x]", "invalid array index x"),
        ('.a[?(@.x=="1")', "unclosed array expect ]"),
        (".a[?(@.x==1", "unterminated filter"),
        ("....a", "invalid multiple recursive descent"),
        (".a\n", "unclosed action"),
        ('.a "abc', "unterminated quoted string"),
        (".a %", "unrecognized character in action"),
        (".a[1:x]", "invalid array index 1:x"),
    ],
)
def test_invalid_paths_raise_value_error(path: str, message: str) -> None:
    with pytest.raises(JSONPathError, match=message.replace("[", "\\[")) as info:
        compile_path(path)
    assert isinstance(info.value, ValueError)


def test_compile_is_cached() -> None:
    assert compile_path(".status.conditions[-1:].type") is compile_path(".status.conditions[-1:].type")


NOW = dt.datetime(2024, 5, 1, 12, 5, 10, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("values", "column_type", "expected"),
    [
        ([], "string", None),  # no match → null → kubectl prints <none>
        (["Running", "ignored"], "string", "Running"),  # only the first result counts
        ([{"b": 1, "a": [1, 2]}], "string", '{"a":[1,2],"b":1}'),  # maps as compact JSON, sorted keys
        ([None], "string", "<no value>"),
        ([3], "string", "3"),
        ([1.5], "string", "1.5"),
        ([1e6], "string", "1e+06"),  # Go %v
        ([True], "string", "true"),
        ([3], "integer", 3),
        ([3.9], "integer", 3),
        (["3"], "integer", None),
        ([True], "integer", None),
        ([2], "number", 2.0),
        ([True], "boolean", True),
        (["true"], "boolean", None),
        ([None], "integer", None),
        (["2024-05-01T12:00:00Z"], "date", "5m10s"),  # the server sends the age, not the timestamp
        (["2024-05-01T14:00:00+02:00"], "date", "5m10s"),
        (["not-a-date"], "date", "<invalid>"),
        ([""], "date", "<unknown>"),
        ([5], "date", None),
        (["x"], "unknown-type", None),
    ],
)
def test_format_cell(values: list, column_type: str, expected: object) -> None:
    assert format_cell(values, column_type, "", now=NOW) == expected


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-0.5, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (310, "5m10s"),
        (600, "10m"),
        (3 * 3600 - 1, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60 * 5, "3h5m"),
        (8 * 3600, "8h"),
        (47 * 3600, "47h"),
        (48 * 3600, "2d"),
        (50 * 3600, "2d2h"),
        (8 * 86400, "8d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_table_cells_for_the_tfjob_columns() -> None:
    state = compile_path(".status.conditions[-1:].type")
    age = compile_path(".metadata.creationTimestamp")
    assert format_cell(state(JOB), "string", "") == "Restarting"
    assert format_cell(age(JOB), "date", "", now=NOW) == "5m10s"
    fresh = {"metadata": {"name": "new"}}
    assert format_cell(state(fresh), "string", "") is None
    assert format_cell(state({"status": {"conditions": []}}), "string", "") is None
