"""Expectations: pending until observed, failed, settled by a later list, or expired (never longer)."""

import pytest

from controller.tfjob.expectations import Expectations


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_nothing_pending_by_default():
    assert Expectations(Clock()).pending_until("ns/a") is None


def test_pending_until_every_create_and_delete_is_observed():
    clock = Clock()
    exp = Expectations(clock, timeout=300)
    exp.expect_create("ns/a", "Pod", "a-worker-0")
    exp.expect_create("ns/a", "Service", "a-worker-0")
    exp.expect_delete("ns/a", "uid-1", "Pod")
    assert exp.pending_until("ns/a") == 400.0
    exp.creation_observed("ns/a", "Pod", "a-worker-0")
    exp.creation_observed("ns/a", "Service", "a-worker-0")
    assert exp.pending_until("ns/a") == 400.0
    exp.deletion_observed("ns/a", "uid-1")
    assert exp.pending_until("ns/a") is None


def test_kinds_do_not_satisfy_each_other():
    exp = Expectations(Clock())
    exp.expect_create("ns/a", "Pod", "x")
    exp.creation_observed("ns/a", "Service", "x")
    assert exp.pending_until("ns/a") is not None


def test_jobs_are_independent():
    exp = Expectations(Clock())
    exp.expect_create("ns/a", "Pod", "x")
    assert exp.pending_until("ns/b") is None
    exp.creation_observed("ns/b", "Pod", "x")
    assert exp.pending_until("ns/a") is not None


def test_entries_expire_so_a_lost_event_cannot_wedge_a_job():
    clock = Clock()
    exp = Expectations(clock, timeout=300)
    exp.expect_create("ns/a", "Pod", "x")
    clock.t = 399.9
    assert exp.pending_until("ns/a") == 400.0
    clock.t = 400.0
    assert exp.pending_until("ns/a") is None


def test_forget_drops_everything_for_the_job():
    exp = Expectations(Clock())
    exp.expect_delete("ns/a", "u", "Pod")
    exp.forget("ns/a")
    assert exp.pending_until("ns/a") is None


def test_observing_unknown_entries_is_harmless():
    exp = Expectations(Clock())
    exp.creation_observed("ns/a", "Pod", "x")
    exp.deletion_observed("ns/a", "u")
    assert exp.pending_until("ns/a") is None


class Generations:
    """The informers' list generations, per (kind, namespace), as the controller wires them."""

    def __init__(self) -> None:
        self.by: dict[tuple[str, str], int] = {}

    def __call__(self, kind: str, namespace: str) -> int:
        return self.by.get((kind, namespace), 1)

    def relist(self, exp: Expectations, kind: str, namespace: str | None) -> list[str]:
        keys = [k for k in self.by if k[0] == kind and namespace in (None, k[1])] or [(kind, namespace or "ns")]
        generation = 0
        for key in keys:
            self.by[key] = generation = self.by.get(key, 1) + 1
        return exp.relisted(kind, namespace, generation)


@pytest.mark.parametrize(
    ("acknowledged", "relist_kind", "relist_namespace", "settled"),
    [
        # The frozen-job bug: created, acknowledged, gone before the watch showed it; a later list settles it.
        (True, "Pod", "ns", True),
        (True, "Pod", None, True),  # an all-namespaces informer
        (False, "Pod", "ns", False),  # still in flight: a racing list may not contain it
        (True, "Service", "ns", False),  # another informer's list says nothing about pods
        (True, "Pod", "other", False),  # another namespace's list neither
    ],
)
def test_a_list_begun_after_the_acknowledgement_settles_a_create(acknowledged, relist_kind, relist_namespace, settled):
    generations = Generations()
    exp = Expectations(Clock(), generation=generations)
    exp.expect_create("ns/a", "Pod", "a-worker-2")
    if acknowledged:
        exp.create_acknowledged("ns/a", "Pod", "a-worker-2")
    keys = generations.relist(exp, relist_kind, relist_namespace)
    assert (exp.pending_until("ns/a") is None) is settled
    assert keys == (["ns/a"] if settled else [])


def test_a_list_begun_before_the_acknowledgement_does_not_settle_it():
    generations = Generations()
    exp = Expectations(Clock(), generation=generations)
    exp.expect_create("ns/a", "Pod", "x")
    # The list in flight while the create is sent: generation 2 began before the acknowledgement.
    generations.by[("Pod", "ns")] = 2
    exp.create_acknowledged("ns/a", "Pod", "x")
    assert exp.relisted("Pod", "ns", 2) == []
    assert exp.pending_until("ns/a") is not None
    assert exp.relisted("Pod", "ns", 3) == ["ns/a"]
    assert exp.pending_until("ns/a") is None


def test_a_list_settles_acknowledged_deletes_of_its_kind_and_leaves_the_rest():
    generations = Generations()
    exp = Expectations(Clock(), generation=generations)
    exp.expect_delete("ns/a", "pod-uid", "Pod")
    exp.delete_acknowledged("ns/a", "pod-uid")
    exp.expect_delete("ns/a", "svc-uid", "Service")
    exp.delete_acknowledged("ns/a", "svc-uid")
    exp.expect_create("ns/a", "Pod", "in-flight")
    exp.expect_create("ns/b", "Pod", "other-job")
    exp.create_acknowledged("ns/b", "Pod", "other-job")
    assert sorted(generations.relist(exp, "Pod", "ns")) == ["ns/a", "ns/b"]
    assert exp.pending_until("ns/b") is None
    exp.creation_observed("ns/a", "Pod", "in-flight")
    assert exp.pending_until("ns/a") is not None  # the service delete is still unseen
    generations.relist(exp, "Service", "ns")
    assert exp.pending_until("ns/a") is None


def test_without_generations_only_observation_failure_or_expiry_settle():
    clock = Clock()
    exp = Expectations(clock, timeout=300)
    exp.expect_create("ns/a", "Pod", "x")
    exp.create_acknowledged("ns/a", "Pod", "x")
    assert exp.relisted("Pod", "ns", 99) == []
    clock.t = 400.0
    assert exp.pending_until("ns/a") is None


def test_acknowledging_what_is_no_longer_expected_is_harmless():
    exp = Expectations(Clock(), generation=Generations())
    exp.create_acknowledged("ns/a", "Pod", "x")
    exp.delete_acknowledged("ns/a", "u")
    assert exp.pending_until("ns/a") is None
