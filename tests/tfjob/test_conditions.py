"""Condition updates (upstream's UpdateJobConditions / setCondition), terminal freezing (Q1) and
timestamp handling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from controller.tfjob import api
from controller.tfjob.conditions import (
    find,
    format_epoch,
    format_time,
    is_finished,
    is_true,
    parse_time,
    sanitize,
    set_condition,
)

T0, T1, T2, T3, T4 = (f"2024-05-01T12:00:0{i}Z" for i in range(5))


def types(conditions):
    return [(c["type"], c["status"]) for c in conditions]


def test_upstream_sequence_created_running_restarting_running_failed():
    c = set_condition([], "Created", "True", "TFJobCreated", "created", T0)
    c = set_condition(c, "Running", "True", "TFJobRunning", "running", T1)
    assert types(c) == [("Created", "True"), ("Running", "True")]
    c = set_condition(c, "Restarting", "True", "TFJobRestarting", "restarting", T2)
    assert types(c) == [("Created", "True"), ("Restarting", "True")]  # replaces Running at index 1
    c = set_condition(c, "Running", "True", "TFJobRunning", "running", T3)
    assert types(c) == [("Created", "True"), ("Running", "True")]  # replaces Restarting
    c = set_condition(c, "Failed", "True", "TFJobFailed", "failed", T4)
    assert types(c) == [("Created", "True"), ("Running", "False"), ("Failed", "True")]
    # the Running entry only had its status flipped: its timestamps are untouched
    assert c[1]["lastTransitionTime"] == T3


def test_same_status_and_reason_is_no_change_even_with_another_message():
    c = set_condition([], "Running", "True", "TFJobRunning", "a", T0)
    again = set_condition(c, "Running", "True", "TFJobRunning", "b", T1)
    assert again is c
    assert again[0]["message"] == "a" and again[0]["lastUpdateTime"] == T0


def test_reason_change_keeps_transition_time_and_moves_to_end():
    c = set_condition([], "Suspended", "True", "TFJobSuspended", "s", T0)
    c = set_condition(c, "Created", "True", "TFJobCreated", "c", T1)
    c = set_condition(c, "Suspended", "True", "OtherReason", "s2", T2)
    assert types(c) == [("Created", "True"), ("Suspended", "True")]
    assert c[1]["lastTransitionTime"] == T0 and c[1]["lastUpdateTime"] == T2


def test_status_change_gets_new_transition_time():
    c = set_condition([], "Suspended", "True", "TFJobSuspended", "s", T0)
    c = set_condition(c, "Suspended", "False", "TFJobResumed", "r", T1)
    assert c[0]["lastTransitionTime"] == T1


def test_failed_freezes_everything():
    c = set_condition([], "Failed", "True", "TFJobFailed", "f", T0)
    assert set_condition(c, "Running", "True", "TFJobRunning", "r", T1) is c
    assert set_condition(c, "Succeeded", "True", "TFJobSucceeded", "s", T1) is c


def test_succeeded_also_freezes_so_failed_never_joins_it():
    # upstream appends Failed after Succeeded (status_test #18, quirk Q1)
    c = set_condition([], "Succeeded", "True", "TFJobSucceeded", "s", T0)
    assert set_condition(c, "Failed", "True", "TFJobFailed", "f", T1) is c


def test_terminal_forces_restarting_false_too():
    c = set_condition([], "Restarting", "True", "TFJobRestarting", "r", T0)
    c = set_condition(c, "Failed", "True", "TFJobFailed", "f", T1)
    assert types(c) == [("Restarting", "False"), ("Failed", "True")]


def test_set_condition_does_not_mutate_input():
    c = set_condition([], "Running", "True", "TFJobRunning", "r", T0)
    snapshot = [dict(x) for x in c]
    set_condition(c, "Succeeded", "True", "TFJobSucceeded", "s", T1)
    assert c == snapshot


def test_predicates():
    succeeded = [{"type": "Succeeded", "status": "True"}]
    failed = [{"type": "Failed", "status": "True"}]
    suspended = [{"type": "Suspended", "status": "True"}]
    assert is_finished(succeeded) and is_finished(failed) and not is_finished(suspended)
    assert not is_finished([{"type": "Failed", "status": "False"}])
    assert is_true(suspended, api.COND_SUSPENDED) and not is_true(suspended, api.COND_RUNNING)
    assert find(failed, "Failed") is failed[0] and find(failed, "Running") is None


def test_sanitize_drops_malformed_entries():
    good = {"type": "Created", "status": "True"}
    assert sanitize([good, None, 3, {"type": 1, "status": "True"}, {"type": "X"}]) == [good]
    assert sanitize("nope") == [] and sanitize(None) == []


def test_time_format_is_rfc3339_seconds_utc():
    moment = datetime(2024, 5, 1, 12, 34, 56, 789000, tzinfo=UTC)
    assert format_time(moment) == "2024-05-01T12:34:56Z"
    assert format_time(moment.astimezone(timezone(timedelta(hours=2)))) == "2024-05-01T12:34:56Z"
    assert format_epoch(moment.timestamp()) == "2024-05-01T12:34:56Z"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-01T12:34:56Z", 1714566896.0),
        ("2024-05-01T12:34:56.5Z", 1714566896.5),
        ("2024-05-01T14:34:56+02:00", 1714566896.0),
        ("", None),
        ("yesterday", None),
        (None, None),
        (5, None),
        ("0001-01-01T00:00:00-23:59", -62135510460.0),
    ],
)
def test_parse_time(value, expected):
    assert parse_time(value) == expected
