"""Who is in a dynamic job (controller/tfjob/members.py): one table row per rule of choosing who leaves
and which index joins, the deletion-cost annotation as a ReplicaSet reads it, and the summary kubectl
shows."""

from __future__ import annotations

from typing import Any

import pytest

from controller.tfjob.members import Leaver, Membership, deletion_cost, members_of, plan, recorded, summary

from .builders import make_job, make_pod, make_service

JOB = make_job(worker=5, dynamic=True)
COST = "controller.kubernetes.io/pod-deletion-cost"


def pod(index: int, cost: str | None = None, terminating: bool = False) -> dict[str, Any]:
    out = make_pod(JOB, "Worker", index, terminating=terminating)
    if cost is not None:
        out["metadata"]["annotations"] = {COST: cost}
    return out


def slots(
    members: list[int],
    costs: dict[int, str] | None = None,
    *,
    gone: tuple[int, ...] = (),
    leaving: tuple[int, ...] = (),
) -> tuple[dict[int, list[dict[str, Any]]], dict[int, list[dict[str, Any]]]]:
    """Pods and services of ``members``: running with the given costs; ``gone`` have neither pod nor service,
    ``leaving`` a terminating pod and no service (removed by us)."""
    costs = costs or {}
    pods = {i: [pod(i, costs.get(i), terminating=i in leaving)] for i in members if i not in gone}
    services = {i: [make_service(JOB, "Worker", i)] for i in members if i not in gone and i not in leaving}
    return pods, services


def leavers(*pairs: tuple[int, str, int]) -> tuple[Leaver, ...]:
    return tuple(Leaver(index, chosen_by, cost) for index, chosen_by, cost in pairs)


FIVE = [0, 1, 2, 3, 4]
HOLE_1 = [0, 2, 3, 4]

# Each row: recorded members (None: no record), replicas, spec.workersToDelete, the pods' deletion costs by
# index, pods/services gone or leaving, indices with a failover record -> the Membership planned.
ROWS: list[tuple[str, list[int] | None, int, list[int], dict[int, str], dict[str, Any], set[int], Membership]] = [
    ("no record: 0..replicas-1", None, 3, [], {}, {}, set(), Membership((0, 1, 2))),
    ("nothing changes", HOLE_1, 4, [], {}, {}, set(), Membership((0, 2, 3, 4))),
    (
        "no annotation: the highest index leaves, as upstream",
        FIVE,
        3,
        [],
        {},
        {},
        set(),
        Membership((0, 1, 2), leavers((4, "highestIndex", 0), (3, "highestIndex", 0))),
    ),
    (
        "the lowest deletion cost leaves",
        FIVE,
        4,
        [],
        {1: "-100"},
        {},
        set(),
        Membership((0, 2, 3, 4), leavers((1, "deletionCost", -100))),
    ),
    (
        "a positive cost protects: the highest unprotected index leaves, by deletion cost",
        FIVE,
        4,
        [],
        {4: "10"},
        {},
        set(),
        Membership((0, 1, 2, 4), leavers((3, "deletionCost", 0))),
    ),
    (
        "equal costs: highest index first",
        FIVE,
        3,
        [],
        {1: "-1", 2: "-1"},
        {},
        set(),
        Membership((0, 3, 4), leavers((2, "deletionCost", -1), (1, "deletionCost", -1))),
    ),
    (
        "every pod with the same cost: highest index",
        FIVE,
        4,
        [],
        dict.fromkeys(FIVE, "7"),
        {},
        set(),
        Membership((0, 1, 2, 3), leavers((4, "highestIndex", 7))),
    ),
    (
        "unparsable cost counts as 0 and is reported",
        FIVE,
        4,
        [],
        {1: "cheap", 3: "-2"},
        {},
        set(),
        Membership((0, 1, 2, 4), leavers((3, "deletionCost", -2)), invalid_costs=(("test-tfjob-worker-1", "cheap"),)),
    ),
    (
        "the explicit list wins over costs, unparsable costs unread",
        FIVE,
        4,
        [2],
        {1: "-100", 3: "cheap"},
        {},
        set(),
        Membership((0, 1, 3, 4), leavers((2, "workersToDelete", 0))),
    ),
    (
        "more listed than leave: the list's order",
        FIVE,
        4,
        [3, 1],
        {},
        {},
        set(),
        Membership((0, 1, 2, 4), leavers((3, "workersToDelete", 0))),
    ),
    (
        "fewer listed than leave: then by cost",
        FIVE,
        3,
        [3],
        {0: "-5"},
        {},
        set(),
        Membership((1, 2, 4), leavers((3, "workersToDelete", 0), (0, "deletionCost", -5))),
    ),
    (
        "a listed hole is no member: ignored",
        HOLE_1,
        3,
        [1],
        {},
        {},
        set(),
        Membership((0, 2, 3), leavers((4, "highestIndex", 0))),
    ),
    (
        "a member we already removed (status write lost) is chosen again",
        FIVE,
        4,
        [],
        {1: "-100"},
        {"leaving": (1,)},
        set(),
        Membership((0, 2, 3, 4), leavers((1, "deletionCost", -100))),
    ),
    (
        "members we already removed leave first, ranked as the rest",
        FIVE,
        4,
        [],
        {1: "5"},
        {"leaving": (1, 2)},
        set(),
        Membership((0, 1, 3, 4), leavers((2, "deletionCost", 0))),
    ),
    (
        "a member whose pod never came does not jump the queue (a failed create)",
        FIVE,
        4,
        [],
        {},
        {"gone": (1,)},
        set(),
        Membership((0, 1, 2, 3), leavers((4, "highestIndex", 0))),
    ),
    (
        "a vanished member waiting for its failover is no removal of ours",
        FIVE,
        4,
        [],
        {},
        {"gone": (1,)},
        {1},
        Membership((0, 1, 2, 3), leavers((4, "highestIndex", 0))),
    ),
    (
        "scale to 0: everyone leaves",
        HOLE_1,
        0,
        [],
        {},
        {},
        set(),
        Membership((), leavers(*((i, "highestIndex", 0) for i in (4, 3, 2, 0)))),
    ),
    ("scale-up refills the lowest hole", HOLE_1, 5, [], {}, {}, set(), Membership(tuple(FIVE), joining=(1,))),
    (
        "then appends",
        [0, 2, 4],
        6,
        [],
        {},
        {},
        set(),
        Membership((0, 1, 2, 3, 4, 5), joining=(1, 3, 5)),
    ),
    ("a listed index is not refilled", HOLE_1, 5, [1], {}, {}, set(), Membership((0, 2, 3, 4, 5), joining=(5,))),
    ("from 0 members", [], 2, [], {}, {}, set(), Membership((0, 1), joining=(0, 1))),
    ("no record, replicas 0", None, 0, [], {}, {}, set(), Membership(())),
]


@pytest.mark.parametrize(
    ("current", "replicas", "to_delete", "costs", "absent", "records", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_plan(current, replicas, to_delete, costs, absent, records, expected):
    pods, services = slots(current if current is not None else list(range(replicas)), costs, **absent)
    assert plan(current, replicas, to_delete, pods, services, records) == expected


def test_the_lowest_cost_of_duplicate_pods_counts():
    pods = {i: [pod(i)] for i in range(3)}
    pods[0].append(pod(0, "-9"))
    services = {i: [make_service(JOB, "Worker", i)] for i in range(3)}
    assert plan([0, 1, 2], 2, [], pods, services, set()).leaving == leavers((0, "deletionCost", -9))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, (0, None)),
        ("0", (0, None)),
        ("-100", (-100, None)),
        ("+5", (5, None)),
        ("2147483647", (2147483647, None)),
        ("-2147483648", (-2147483648, None)),
        ("2147483648", (0, "2147483648")),  # beyond int32
        (" 5", (0, " 5")),
        ("1_000", (0, "1_000")),
        ("1.5", (0, "1.5")),
        ("", (0, "")),
        ("١٢", (0, "١٢")),  # digits, but not ASCII ones
    ],
)
def test_deletion_cost_reads_an_int32_as_a_replicaset_does(value, expected):
    assert deletion_cost(pod(0, value)) == expected


def test_a_non_string_annotation_is_reported_not_raised():
    odd = pod(0)
    odd["metadata"]["annotations"] = {COST: 5}
    assert deletion_cost(odd) == (0, "5")


@pytest.mark.parametrize(
    ("members", "text"),
    [([], "none"), ([0], "0"), ([0, 1], "0,1"), ([0, 2, 3, 4], "0,2-4"), ([1, 2, 3, 7, 9, 10], "1-3,7,9,10")],
)
def test_summary(members, text):
    assert summary(members) == text


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"dynamicWorkers": {"members": [0, 2, 3]}}, (0, 2, 3)),
        ({"dynamicWorkers": {"members": []}}, ()),
        ({"dynamicWorkers": {"workers": {}}}, None),
        ({"dynamicWorkers": {"members": [3, 2]}}, None),
        ({"dynamicWorkers": {"members": [0, 0]}}, None),
        ({"dynamicWorkers": {"members": [0, "1"]}}, None),
        ({"dynamicWorkers": {"members": [False]}}, None),
        ({"dynamicWorkers": "x"}, None),
        ("x", None),
    ],
)
def test_recorded_members(status, expected):
    assert recorded(status) == expected


def test_members_of_a_job_for_readers_outside_the_decision():
    job = make_job(worker=3, dynamic=True)
    assert members_of(job) == (0, 1, 2)
    job["status"] = {"dynamicWorkers": {"members": [0, 2, 3]}}
    assert members_of(job) == (0, 2, 3)
    assert members_of(make_job(worker=3)) is None  # static: no members
    assert members_of({"spec": {"enableDynamicWorker": True, "tfReplicaSpecs": {"Worker": {"replicas": "3"}}}}) is None
