"""The oracle of spec changes (benchmarks/chaos/oracle.py) on its own: the examples docs/tfjob-compatibility.md gives
for members and holes, and the judge of a settled cluster (benchmarks/chaos/specs.py) catching each kind of
difference. Pure: no cluster."""

from __future__ import annotations

from benchmarks.chaos.oracle import (
    Create,
    DeleteJob,
    Disrupt,
    Expected,
    Record,
    SetCost,
    SetSpec,
    Spec,
    cost_value,
    expect,
    joiners,
    leavers,
    outcomes,
)
from benchmarks.chaos.specs import Observed, differences, random_story

J = "j"


def test_costs_read_as_a_replicaset_reads_them() -> None:
    assert [cost_value(v) for v in ("-100", "+5", "0", None, "x", "1.5", " 3", "99999999999", "-2147483648")] == [
        -100,
        5,
        0,
        0,
        0,
        0,
        0,
        0,
        -(2**31),
    ]


def test_who_leaves_listed_first_then_lowest_cost_then_highest_index() -> None:
    assert leavers([0, 1, 2, 3, 4], [], {}, 2) == [4, 3]  # upstream's rule without annotations or list
    assert leavers([0, 1, 2, 3, 4], [], {1: "-100"}, 1) == [1]
    assert leavers([0, 1, 2, 3, 4], [3, 0], {4: "-100"}, 2) == [3, 0]  # the list wins over costs
    assert leavers([0, 1, 2, 3, 4], [3, 0], {4: "-100"}, 1) == [3]  # more listed than leave: the first go
    assert leavers([0, 2, 4], [1], {}, 1) == [4]  # a listed hole is ignored
    assert leavers([0, 1, 2], [], {0: "x", 1: "5"}, 2) == [2, 0]  # unparsable counts 0: ties go highest first


def test_who_joins_the_lowest_free_index_that_is_not_listed() -> None:
    assert joiners([0, 2, 3, 4], [], 1) == [1]
    assert joiners([0, 2, 3], [1], 2) == [4, 5]  # a listed index is never refilled
    assert joiners([], [], 0) == []


def test_the_documented_example_worker_one_leaves_the_hole_stays_through_a_failover_and_is_refilled() -> None:
    history = [Create(Spec(5)), SetCost(1, "-100"), SetSpec(Spec(4))]
    state = expect(history, J)
    assert state.members == (0, 2, 3, 4)
    assert state.pods(J) == ["j-worker-0", "j-worker-2", "j-worker-3", "j-worker-4"]
    failed_over = expect([*history, Disrupt("Worker", 4, "delete")], J)
    assert failed_over.members == (0, 2, 3, 4) and failed_over.workers == {4: Record(1, "Deleted")}
    assert failed_over.generations["j-worker-4"] == 2 and failed_over.generations["j-worker-0"] == 1
    refilled = expect([*history, Disrupt("Worker", 4, "delete"), SetSpec(Spec(5))], J)
    assert refilled.members == (0, 1, 2, 3, 4) and refilled.generations["j-worker-1"] == 2


def test_a_failover_resets_the_cost_its_pod_carried_and_own_failures_are_counted() -> None:
    state = expect([Create(Spec(3)), SetCost(0, "-100"), Disrupt("Worker", 0, "oom"), SetSpec(Spec(2))], J)
    assert state.members == (0, 1), "the new pod of worker 0 has no annotation: the highest index leaves"
    assert state.workers == {0: Record(1, "OOMKilled", 1)}
    gone = expect([Create(Spec(3)), Disrupt("Worker", 2, "evict"), SetSpec(Spec(2))], J)
    assert gone.workers == {}, "the records of workers that leave are dropped"


def test_suspension_removes_pods_clears_records_and_keeps_the_members_until_resumed() -> None:
    base = [Create(Spec(4, ps=1)), SetSpec(Spec(3, ps=1, workers_to_delete=(1,))), Disrupt("PS", 0, "delete")]
    suspended = expect([*base, SetSpec(Spec(3, ps=1, workers_to_delete=(1,), suspend=True))], J)
    assert suspended.pods(J) == [] and suspended.members == (0, 2, 3)
    assert suspended.workers == {} and suspended.parameter_servers == {}
    assert suspended.true_conditions() == {"Created", "Suspended"}
    scaled = expect([*base, SetSpec(Spec(3, 1, (1,), True)), SetSpec(Spec(1, 1, (2,), True))], J)
    assert scaled.members == (0, 2, 3), "a suspended job's members wait for its resumption"
    resumed = expect(
        [*base, SetSpec(Spec(3, 1, (1,), True)), SetSpec(Spec(1, 1, (2,), True)), SetSpec(Spec(1, 1, (2,)))], J
    )
    assert resumed.members == (0,) and resumed.pods(J) == ["j-ps-0", "j-worker-0"]
    assert resumed.generations["j-worker-0"] == 2 and resumed.generations["j-ps-0"] == 3


def test_changes_made_at_once_allow_every_subsequence_the_controller_may_have_seen() -> None:
    start = expect([Create(Spec(5))], J)
    batch = [SetSpec(Spec(3, workers_to_delete=(1, 3))), SetSpec(Spec(5, workers_to_delete=(1, 3)))]
    allowed = outcomes(start, batch, J)
    assert sorted(o.members for o in allowed) == [(0, 1, 2, 3, 4), (0, 2, 4, 5, 6)]
    assert len(outcomes(start, [SetSpec(Spec(5))], J)) == 1


def test_a_deleted_job_leaves_nothing() -> None:
    state = expect([Create(Spec(2, ps=1)), DeleteJob()], J)
    assert not state.exists and state.pods(J) == []


def test_seeded_stories_are_the_same_for_the_same_seed() -> None:
    assert random_story(3) == random_story(3)
    assert random_story(3) != random_story(4)
    assert all(isinstance(random_story(s)[0], Create) for s in range(20))


def _observed(expected: Expected, **changes: object) -> Observed:
    pods = expected.pods(J)
    seen = Observed(
        exists=expected.exists,
        pods=pods,
        services=list(pods),
        members=expected.members,
        active=expected.active(),
        true_conditions=expected.true_conditions(),
        workers=dict(expected.workers),
        parameter_servers=dict(expected.parameter_servers),
        uids={p: f"uid-{p}" for p in pods},
    )
    for key, value in changes.items():
        setattr(seen, key, value)
    return seen


def test_the_judge_catches_each_kind_of_difference() -> None:
    before = expect([Create(Spec(3, ps=1))], J)
    uids = {p: f"uid-{p}" for p in before.pods(J)}
    after = expect([Create(Spec(3, ps=1)), Disrupt("Worker", 1, "evict")], J)
    fine = _observed(after, uids={**uids, "j-worker-1": "new"})
    assert differences(after, fine, J, before, uids) == []
    evicted_seen_deleted = _observed(after, workers={1: Record(1, "Deleted")}, uids={**uids, "j-worker-1": "new"})
    assert differences(after, evicted_seen_deleted, J, before, uids) == [], "an eviction may be recorded as a deletion"
    cases = {
        "members": _observed(after, members=(0, 1), uids={**uids, "j-worker-1": "new"}),
        "pods": _observed(after, pods=["j-ps-0", "j-worker-0"], uids={**uids, "j-worker-1": "new"}),
        "services": _observed(after, services=[], uids={**uids, "j-worker-1": "new"}),
        "active": _observed(after, active={"Worker": 2, "PS": 1}, uids={**uids, "j-worker-1": "new"}),
        "conditions": _observed(
            after, true_conditions={"Created", "Running", "Failed"}, uids={**uids, "j-worker-1": "new"}
        ),
        "worker records": _observed(after, workers={1: Record(2, "Evicted")}, uids={**uids, "j-worker-1": "new"}),
        "not replaced": _observed(after),
        "was replaced": _observed(after, uids={**uids, "j-worker-1": "new", "j-worker-0": "other"}),
    }
    for what, seen in cases.items():
        found = differences(after, seen, J, before, uids)
        assert found and what.split()[0] in " ".join(found), (what, found)
