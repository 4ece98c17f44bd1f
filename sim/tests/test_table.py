"""Server-side Table printing of custom resources (sim/tfjob_sim/table.py)."""

from __future__ import annotations

from tfjob_sim.resources import ResourceType
from tfjob_sim.table import to_table


def _widgets(columns: list[dict]) -> ResourceType:
    return ResourceType(
        group="example.com",
        version="v1",
        plural="widgets",
        singular="widget",
        kind="Widget",
        namespaced=True,
        custom=True,
        printer_columns=columns,
    )


WIDGET = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w", "namespace": "default", "creationTimestamp": "2024-01-01T00:00:00Z"},
    "spec": {"replicas": 3, "mode": "fast"},
    "status": {"phase": "Ready"},
}


def test_an_unparsable_json_path_drops_its_column_and_every_later_one() -> None:
    """Like the apiextensions TableConvertor: it stops at the first bad path and keeps what came before."""
    rt = _widgets(
        [
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Broken", "type": "string", "jsonPath": ".status["},
            {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
        ]
    )
    table = to_table(rt, [WIDGET], include_object="None")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Replicas"]
    assert table["rows"] == [{"cells": ["w", 3]}]


def test_a_bad_first_column_leaves_only_the_name() -> None:
    rt = _widgets(
        [
            {"name": "Broken", "type": "string", "jsonPath": ".a[?(@.x=="},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        ]
    )
    table = to_table(rt, [WIDGET], include_object="None")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name"]
    assert table["rows"] == [{"cells": ["w"]}]


def test_valid_columns_all_print() -> None:
    rt = _widgets(
        [
            {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            {"name": "Missing", "type": "string", "jsonPath": ".status.nothing"},
        ]
    )
    table = to_table(rt, [WIDGET], include_object="None")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Replicas", "Phase", "Missing"]
    assert table["rows"] == [{"cells": ["w", 3, "Ready", None]}]
