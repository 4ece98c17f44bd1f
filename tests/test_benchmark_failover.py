"""The failover benchmark's plan and its per-action measurement: workers drawn with replacement, and each
action matched to the pod uid it hit, so a repeat on a worker is measured as its own action instead of
being folded into the first one by pod name."""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.scale import (
    DISRUPTIONS,
    OWN_FAILURE,
    action_agent,
    arrivals,
    failover_figures,
    failover_plan,
    follow,
    job_names,
)


def test_the_plan_repeats_workers_and_holds_each_kind_a_third() -> None:
    names = job_names("fo", 1000)
    plan = failover_plan(names, 4, 1200)
    assert plan == failover_plan(names, 4, 1200), "seeded: ours and the peer must get the same plan"
    hits = Counter(pod for pod, _ in plan)
    assert len(plan) == 1200 and max(hits.values()) > 1, "drawn with replacement: some worker is hit again"
    for start in range(0, len(plan), 3):
        assert sorted(kind for _, kind in plan[start : start + 3]) == sorted((*DISRUPTIONS, OWN_FAILURE))
    assert len(failover_plan(names[:5], 4, 3)) == 3


def ev(time: float, kind: str, uid: str, phase: str | None = None) -> dict:
    return {"time": time, "type": kind, "uid": uid, **({"phase": phase} if phase else {})}


PLAN = [
    ("w0", "delete"),  # 0: hits A; its replacement B is evicted before it runs
    ("w0", "evict"),  # 1: a repeat on the replacement B while it still starts
    ("w1", "delete"),  # 2: 404, the pod was already gone
    ("w1", "oom"),  # 3: a repeat on w1, but its first own failure
    ("w2", "oom"),  # 4: first own failure of w2
    ("w2", "oom"),  # 5: its second: the replacement waits out the back-off
    ("w3", "evict"),  # 6: refused (429)
    ("w4", "delete"),  # 7: arrives between the pod's removal and its replacement: hits the replacement J
]
ANSWERED = [(1.0, 200), (1.3, 201), (2.0, 404), (2.1, 200), (3.0, 200), (4.0, 200), (5.0, 429), (6.05, 200)]
INITIAL = {"w0": "A", "w1": "D", "w2": "F", "w3": "X", "w4": "I"}
EVENTS = {
    "w0": [ev(1.2, "DELETED", "A"), ev(1.21, "ADDED", "B", "Pending"), ev(1.6, "DELETED", "B")]
    + [ev(1.62, "ADDED", "C", "Pending"), ev(1.9, "MODIFIED", "C", "Running")],
    "w1": [ev(2.2, "MODIFIED", "D", "Failed"), ev(2.3, "DELETED", "D")]
    + [ev(2.31, "ADDED", "E", "Pending"), ev(2.4, "MODIFIED", "E", "Running")],
    "w2": [ev(3.1, "DELETED", "F"), ev(3.11, "ADDED", "G", "Pending"), ev(3.2, "MODIFIED", "G", "Running")]
    + [ev(4.2, "DELETED", "G"), ev(14.3, "ADDED", "H", "Pending"), ev(14.4, "MODIFIED", "H", "Running")],
    "w4": [ev(6.0, "DELETED", "I"), ev(6.1, "ADDED", "J", "Pending"), ev(6.5, "DELETED", "J")]
    + [ev(6.51, "ADDED", "K", "Pending"), ev(6.6, "MODIFIED", "K", "Running")],
}


def test_each_action_is_matched_to_the_pod_uid_it_hit() -> None:
    out = follow(PLAN, ANSWERED, INITIAL, EVENTS)
    assert [(o.uid, o.gone, o.created, o.running) for o in out] == [
        ("A", 1.2, 1.21, None),
        ("B", 1.6, 1.62, 1.9),
        (None, None, None, None),
        ("D", 2.3, 2.31, 2.4),
        ("F", 3.1, 3.11, 3.2),
        ("G", 4.2, 14.3, 14.4),
        (None, None, None, None),
        ("J", 6.5, 6.51, 6.6),
    ]
    assert [o.superseded for o in out] == [True] + [False] * 7
    assert [o.repeat for o in out] == [False, True, False, True, False, True, False, False]
    assert [o.own_repeat for o in out] == [False, False, False, False, False, True, False, False]
    assert [o.starting for o in out] == [False, True, False, False, False, False, False, True]
    assert all(o.settled for o in out)
    # Before the last replacement runs, the run is not over.
    assert not all(o.settled for o in follow(PLAN, ANSWERED, INITIAL, {**EVENTS, "w4": EVENTS["w4"][:-1]}))


def test_disruptions_and_own_failures_are_counted_apart() -> None:
    figures = failover_figures(follow(PLAN, ANSWERED, INITIAL, EVENTS))
    disruptions = figures["disruptions"]
    assert {k: disruptions[k] for k in ("actions", "applied", "skipped", "refused", "repeats", "on_starting")} == {
        "actions": 5,
        "applied": 3,
        "skipped": 1,
        "refused": 1,
        "repeats": 1,
        "on_starting": 2,
    }
    assert disruptions["superseded"] == 1 and disruptions["unreplaced"] == 0
    assert disruptions["gone_to_create"]["n"] == 3 and disruptions["disruption_to_running"]["n"] == 2
    assert figures["disruption_repeats"]["applied"] == 1
    assert (figures["own_first"]["applied"], figures["own_repeat"]["applied"]) == (2, 1)
    assert figures["own_repeat"]["gone_to_create"]["max"] == pytest.approx(10.1)
    assert figures["own_first"]["gone_to_create"]["max"] == pytest.approx(0.01)


def test_an_action_is_timed_by_its_answered_request() -> None:
    plan = [("w0", "delete"), ("w1", "evict")]
    requests = [
        {"seq": 3, "time": 2.5, "code": 200, "userAgent": action_agent(0)},  # the retry, answered
        {"seq": 1, "time": 1.0, "code": 429, "userAgent": action_agent(0)},  # API Priority and Fairness said later
        {"seq": 2, "time": 1.1, "code": 201, "userAgent": action_agent(1)},
        {"seq": 4, "time": 2.6, "code": 200, "userAgent": "tfjob-controller"},
    ]
    assert arrivals(plan, requests) == [(2.5, 200), (1.1, 201)]
    with pytest.raises(RuntimeError, match="lacks 1 of the 2 actions"):
        arrivals(plan, requests[:2])
