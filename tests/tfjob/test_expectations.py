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
    exp.expect_delete("ns/a", "uid-1")
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
    exp.expect_delete("ns/a", "u")
    exp.forget("ns/a")
    assert exp.pending_until("ns/a") is None


def test_observing_unknown_entries_is_harmless():
    exp = Expectations(Clock())
    exp.creation_observed("ns/a", "Pod", "x")
    exp.deletion_observed("ns/a", "u")
    assert exp.pending_until("ns/a") is None
