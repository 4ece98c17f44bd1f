"""The dynamic-worker state machine (controller/tfjob/dynamic.py): one table row per transition of
one worker index, then the back-off policy, then scenarios through decide() on the in-memory
Cluster of builders.py, where every step also checks what the previous one left behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from controller.tfjob.actions import CreateService, DeletePod, Event, MetricInc
from controller.tfjob.decide import DecideConfig
from controller.tfjob.dynamic import DynamicWorkers, WorkerRecord, failover_delay, next_streak
from controller.tfjob.outputs import Counts, Outputs
from controller.tfjob.pods import exit_code

from .builders import (
    NOW,
    actions_of,
    assert_converged,
    assert_still_running,
    at,
    created_pod_names,
    disruption_condition,
    event_reasons,
    failover_events,
    make_job,
    make_pod,
    running_cluster,
    ts,
    workers_status,
)

W1 = "test-tfjob-worker-1"
JOB = make_job(worker=3, dynamic=True)
UID = "pod-a"


def pod(phase: str = "Running", **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("uid", UID)
    return make_pod(JOB, "Worker", 1, phase, **kwargs)


REPLACING = WorkerRecord("Replacing", failovers=1, last_failover_time=ts(-5), last_reason="Deleted", pod_uid=UID)
BACKING_OFF = WorkerRecord(
    "Replacing", failovers=2, failures=2, last_failover_time=ts(-5), last_reason="Error", retry_after=ts(5)
)
REPLACED = WorkerRecord("Replaced", failovers=1, last_failover_time=ts(-5), last_reason="Deleted")
FAILED = WorkerRecord("Failed", failovers=0, last_reason="Error", pod_uid=UID, exit_code=1)
EVICTED = [disruption_condition("EvictionByEvictionAPI")]


def failover(reason: str, failovers: int = 1, pod_uid: str | None = UID, **kwargs: Any) -> WorkerRecord:
    return WorkerRecord(
        "Replacing", failovers=failovers, last_failover_time=ts(), last_reason=reason, pod_uid=pod_uid, **kwargs
    )


def machine(
    record: WorkerRecord | None,
    now: float = 0,
    create: Callable[[int], bool] = lambda index: True,
    timers: list[float] | None = None,
) -> DynamicWorkers:
    """The state machine of test-tfjob at ``now``, index 1 holding ``record``."""

    def exited(p: dict[str, Any], out: Outputs) -> None:
        if exit_code(p) is not None:
            out.facts.append(Event("Normal", "ExitedWithCode", ""))

    return DynamicWorkers(
        job_name="test-tfjob",
        namespace="default",
        records={1: record} if record is not None else {},
        now_ts=at(now).timestamp(),
        now_str=ts(now),
        timings=DecideConfig(),
        create=lambda index, out: create(index),
        timer=timers.append if timers is not None else lambda seconds: None,
        exited_fact=exited,
    )


# Each row: the index's stored record, its pod (None: no pod), whether its service exists, the Worker
# restartPolicy -> the record written, whether a pod is created, the deletions' reasons, the events'
# reasons, the counts (active, succeeded, failed, permanently failed), the timers asked for.
ROWS = [
    # no pod
    ("first pod of a fresh index", None, None, False, "Never", None, True, [], [], (0, 0, 0, 0), []),
    (
        "vanished (its service is left): failover Deleted, replaced at once",
        None,
        None,
        True,
        "Never",
        WorkerRecord("Replaced", failovers=1, last_failover_time=ts(), last_reason="Deleted"),
        True,
        [],
        ["WorkerFailover"],
        (0, 0, 0, 0),
        [],
    ),
    (
        "replacing, back-off over: replacement created",
        WorkerRecord(
            "Replacing", failovers=2, failures=2, last_failover_time=ts(-5), last_reason="Error", retry_after=ts()
        ),
        None,
        True,
        "Never",
        WorkerRecord("Replaced", failovers=2, failures=2, last_failover_time=ts(-5), last_reason="Error"),
        True,
        [],
        [],
        (0, 0, 0, 0),
        [],
    ),
    # terminating pod
    ("terminating, removed by us (no service, no record)", None, pod(terminating=True), False, "Never")
    + (None, False, [], [], (0, 0, 0, 0), []),
    ("terminating, our own failover deletion", REPLACING, pod(terminating=True), True, "Never")
    + (REPLACING, False, [], [], (0, 0, 0, 0), []),
    ("terminating, deleted by someone else", None, pod(terminating=True), True, "Never")
    + (failover("Deleted"), False, [], ["WorkerFailover"], (0, 0, 0, 0), []),
    ("terminating, evicted", None, pod(terminating=True, conditions=EVICTED), True, "Never")
    + (failover("Evicted"), False, [], ["WorkerFailover"], (0, 0, 0, 0), []),
    # live pod
    ("succeeded: counted, history dropped", REPLACED, pod("Succeeded", exit_code=0), True, "Never")
    + (None, False, [], [], (0, 1, 0, 0), []),
    ("our replacement decided, deletion not seen yet: delete again", REPLACING, pod(), True, "Never")
    + (REPLACING, False, ["Failover"], [], (0, 0, 0, 0), []),
    ("failed for good: counted, left alone", FAILED, pod("Failed", exit_code=1), True, "Never")
    + (FAILED, False, [], [], (0, 0, 1, 1), []),
    ("running but disrupted: deleted and failed over", None, pod(conditions=EVICTED), True, "Never")
    + (failover("Evicted"), False, ["Failover"], ["WorkerFailover"], (0, 0, 0, 0), []),
    ("failed, OnFailure retries", None, pod("Failed", exit_code=1), True, "OnFailure")
    + (
        failover("Error", failures=1, exit_code=1),
        False,
        ["Failover"],
        ["ExitedWithCode", "WorkerFailover"],
        (0, 0, 0, 0),
        [],
    ),
    (
        "failed OOM-killed, ExitCode retries 137",
        None,
        pod("Failed", exit_code=137, termination_reason="OOMKilled"),
        True,
        "ExitCode",
    )
    + (failover("OOMKilled", failures=1, exit_code=137), False, ["Failover"], ["ExitedWithCode", "WorkerFailover"])
    + ((0, 0, 0, 0), []),
    ("failed exit 1, ExitCode does not retry", None, pod("Failed", exit_code=1), True, "ExitCode")
    + (FAILED, False, [], ["ExitedWithCode", "WorkerFailed"], (0, 0, 1, 1), []),
    ("failed, Never does not retry", REPLACED, pod("Failed", exit_code=1), True, "Never")
    + (
        WorkerRecord("Failed", failovers=1, last_failover_time=ts(-5), last_reason="Error", pod_uid=UID, exit_code=1),
        False,
        [],
        ["ExitedWithCode", "WorkerFailed"],
        (0, 0, 1, 1),
        [],
    ),
    (
        "repeated own failure before the reset: the second failure backs off 10 s",
        WorkerRecord("Replaced", failovers=1, failures=1, last_failover_time=ts(-5), last_reason="Error"),
        pod("Failed", exit_code=1, started_at=ts(-3), finished_at=ts()),
        True,
        "Always",
    )
    + (failover("Error", failovers=2, failures=2, retry_after=ts(10), exit_code=1), False, ["Failover"])
    + (["ExitedWithCode", "WorkerFailover"], (0, 0, 0, 0), [10.0]),
    (
        "own failure after a disruption: the first failure, replaced at once",
        REPLACED,
        pod("Failed", exit_code=1, started_at=ts(-3), finished_at=ts()),
        True,
        "Always",
    )
    + (failover("Error", failovers=2, failures=1, exit_code=1), False, ["Failover"])
    + (["ExitedWithCode", "WorkerFailover"], (0, 0, 0, 0), []),
    (
        "deleted again during a crash loop: replaced at once, the streak of failures kept",
        WorkerRecord("Replaced", failovers=2, failures=2, last_failover_time=ts(-5), last_reason="Error"),
        pod(terminating=True),
        True,
        "Always",
    )
    + (failover("Deleted", failovers=3, failures=2), False, [], ["WorkerFailover"], (0, 0, 0, 0), []),
    ("pending replacement: Replaced", REPLACING, pod("Pending", uid="pod-b"), True, "Never")
    + (WorkerRecord("Replaced", failovers=1, last_failover_time=ts(-5), last_reason="Deleted"), False, [], [])
    + ((0, 0, 0, 0), []),
    ("running replacement: kept until it ran 10 min", REPLACED, pod(started_at=ts(-60), uid="pod-b"), True, "Never")
    + (REPLACED, False, [], [], (1, 0, 0, 0), [540.0]),
    ("running 10 min: history forgotten", REPLACED, pod(started_at=ts(-600), uid="pod-b"), True, "Never")
    + (None, False, [], [], (1, 0, 0, 0), []),
    ("pending, nothing remembered", None, pod("Pending"), True, "Never") + (None, False, [], [], (0, 0, 0, 0), []),
]


@pytest.mark.parametrize(
    ("record", "the_pod", "has_service", "policy", "new_record", "created", "deletions", "events", "counts", "timers"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_one_index_one_pass(
    record, the_pod, has_service, policy, new_record, created, deletions, events, counts, timers
):
    creations: list[int] = []
    timer_calls: list[float] = []
    one = machine(record, create=lambda index: creations.append(index) is None, timers=timer_calls)
    out = Outputs()
    got = Counts()
    assert one.step(1, the_pod, has_service, policy, got, out) == new_record
    assert creations == ([1] if created else [])
    assert [a.reason for a in out.deletions] == deletions
    assert all(isinstance(a, DeletePod) and a.uid == the_pod["metadata"]["uid"] for a in out.deletions)
    assert [e.reason for e in out.facts + out.events] == events
    assert (got.active, got.succeeded, got.failed, got.permanent_failed) == counts
    assert timer_calls == timers
    assert [m.name for m in out.metrics] == ["tfjob_worker_failovers_total"] * events.count("WorkerFailover")


@pytest.mark.parametrize("created", [True, False])
def test_a_replacement_waits_while_back_off_runs_or_the_creation_budget_is_spent(created):
    timers: list[float] = []
    waiting = machine(BACKING_OFF, 2, create=lambda index: pytest.fail("created during the back-off"), timers=timers)
    assert waiting.step(1, None, True, "Never", Counts(), Outputs()) == BACKING_OFF
    assert timers == [3.0]  # woken when the back-off ends
    due = machine(BACKING_OFF, 5, create=lambda index: created).step(1, None, True, "Never", Counts(), Outputs())
    assert due is not None and due.state == ("Replaced" if created else "Replacing")


def test_duplicates_are_neither_counted_nor_touched_and_keep_their_record():
    duplicates = machine(FAILED, create=lambda index: pytest.fail("no creation"))
    out = Outputs()
    counts = duplicates.reconcile([1], {1: [pod("Failed", exit_code=1), pod(uid="pod-b")]}, {}, "Never", out)
    assert counts == Counts() and out == Outputs()
    assert duplicates.new_records == {1: FAILED}


# --- the back-off policy ---------------------------------------------------------------------------------
CRASH_LOOPING = WorkerRecord("Replaced", failovers=3, failures=2, last_failover_time=ts(-5), last_reason="Error")


@pytest.mark.parametrize(
    ("record", "the_pod", "reason", "expected"),
    [
        (None, None, "Deleted", (1, 0)),
        (None, None, "OOMKilled", (1, 1)),
        (REPLACED, None, "Deleted", (2, 0)),
        (REPLACED, None, "Error", (2, 1)),
        (CRASH_LOOPING, None, "Evicted", (4, 2)),  # a disruption neither lengthens nor ends the streak
        (CRASH_LOOPING, None, "Error", (4, 3)),
        (CRASH_LOOPING, pod("Failed", exit_code=1, started_at=ts(-599), finished_at=ts()), "Error", (4, 3)),
        (CRASH_LOOPING, pod("Failed", exit_code=1, started_at=ts(-600), finished_at=ts()), "Error", (1, 1)),
        (CRASH_LOOPING, pod(terminating=True, started_at=ts(-600)), "Deleted", (1, 0)),  # ran long enough
    ],
)
def test_next_streak(record, the_pod, reason, expected):
    assert next_streak(record, the_pod, reason, NOW.timestamp(), DecideConfig()) == expected


def streak(failovers: int, failures: int, reason: str) -> WorkerRecord:
    return WorkerRecord(
        "Replaced", failovers=failovers, failures=failures, last_failover_time=ts(-5), last_reason=reason
    )


# Which failovers wait: the index's streak so far, what happens to it now -> the failover's number, the
# own failures in the streak, the back-off before the replacement. Disruptions never wait, however often;
# only the worker's own failures back off, the first of them at once.
FAILOVERS: list[tuple[str, WorkerRecord | None, str, tuple[int, int, float]]] = [
    ("first deletion", None, "Deleted", (1, 0, 0.0)),
    ("first eviction", None, "Evicted", (1, 0, 0.0)),
    ("first OOM kill", None, "OOMKilled", (1, 1, 0.0)),
    ("deleted for the second time", streak(1, 0, "Deleted"), "Deleted", (2, 0, 0.0)),
    ("deleted for the fifth time", streak(4, 0, "Deleted"), "Deleted", (5, 0, 0.0)),
    ("preempted after evictions", streak(3, 0, "Evicted"), "Preempted", (4, 0, 0.0)),
    ("evicted again", streak(1, 0, "Evicted"), "Evicted", (2, 0, 0.0)),
    ("lost with its node after OOM kills", streak(2, 2, "OOMKilled"), "NodeLost", (3, 2, 0.0)),
    ("disrupted (another DisruptionTarget reason)", streak(2, 2, "Error"), "Disrupted", (3, 2, 0.0)),
    ("second own failure", streak(1, 1, "Error"), "Error", (2, 2, 10.0)),
    ("own failure after a disruption in a crash loop", streak(3, 2, "NodeLost"), "OOMKilled", (4, 3, 20.0)),
    ("own failure after many deletions: a first failure", streak(4, 0, "Deleted"), "Error", (5, 1, 0.0)),
]
DISRUPTION_TARGET = {
    "Evicted": "EvictionByEvictionAPI",
    "Preempted": "PreemptionByScheduler",
    "NodeLost": "DeletionByTaintManager",
    "Disrupted": "SomethingElse",
}


def failing_pod(reason: str) -> dict[str, Any] | None:
    """Worker 1 as it is seen when it fails over for ``reason`` (None: gone, deleted by someone)."""
    if reason == "Deleted":
        return None
    if reason in DISRUPTION_TARGET:
        return pod(terminating=True, conditions=[disruption_condition(DISRUPTION_TARGET[reason])])
    code = 137 if reason == "OOMKilled" else 1
    return pod("Failed", exit_code=code, started_at=ts(-3), finished_at=ts())


@pytest.mark.parametrize(("record", "reason", "expected"), [pytest.param(*row[1:], id=row[0]) for row in FAILOVERS])
def test_which_failovers_wait(record, reason, expected):
    failovers, failures, delay = expected
    timers: list[float] = []
    one = machine(record, timers=timers)
    new = one.step(1, failing_pod(reason), True, "Always", Counts(), out := Outputs())
    assert new is not None and new.state == ("Replaced" if reason == "Deleted" and not delay else "Replacing")
    assert (new.failovers, new.failures, new.last_reason) == (failovers, failures, reason)
    assert new.retry_after == (ts(delay) if delay else None)
    assert timers == ([delay] if delay else [])
    when = f"after a {delay:g}s back-off" if delay else "as soon as it is gone"
    assert [e.message.endswith(f"replacing it {when} (failover {failovers})") for e in out.events] == [True]


# --- a worker that disappears ---------------------------------------------------------------------
def test_a_deleted_worker_is_replaced_at_once_however_often():
    cluster = running_cluster(restart_policy="ExitCode")
    for n, now in enumerate((100, 200, 300), start=1):
        cluster.remove_pod(W1)  # deleted by someone else, gone at once; again before it ran 10 minutes
        decision = cluster.step(at(now))
        assert created_pod_names(cluster.step(at(now))) == [W1]  # a disruption never backs off
        assert actions_of(decision, CreateService) == []  # the service stayed
        assert_still_running(decision.status)
        assert failover_events(decision) == [
            Event(
                "Warning",
                "WorkerFailover",
                f"Worker {W1} (index 1) was deleted (Deleted): replacing it as soon as it is gone (failover {n})",
            )
        ]
        assert decision.metrics == (
            MetricInc("tfjob_worker_failovers_total", (("job_namespace", "default"), ("reason", "Deleted"))),
        )
        assert decision.requeue_after is None
        assert workers_status(cluster) == {
            "1": {"state": "Replaced", "failovers": n, "lastFailoverTime": ts(now), "lastReason": "Deleted"}
        }
        assert_converged(cluster, at(now + 1))
        cluster.run_all(started_at=ts(now + 1))
    # An own failure after the deletions is the index's first failure: replaced at once too; its
    # repeat backs off.
    cluster.set_phase(
        W1, "Failed", exit_code=137, termination_reason="OOMKilled", started_at=ts(301), finished_at=ts(310)
    )
    first = cluster.step(at(310))
    assert first.requeue_after is None and "(failover 4)" in failover_events(first)[0].message
    assert created_pod_names(cluster.step(at(310.5))) == [W1]
    cluster.set_phase(
        W1, "Failed", exit_code=137, termination_reason="OOMKilled", started_at=ts(311), finished_at=ts(320)
    )
    second = cluster.step(at(320))
    assert second.requeue_after == 10.0
    assert "after a 10s back-off (failover 5)" in failover_events(second)[0].message
    assert workers_status(cluster)["1"] == {
        "state": "Replacing",
        "failovers": 5,
        "failures": 2,
        "lastFailoverTime": ts(320),
        "lastReason": "OOMKilled",
        "retryAfter": ts(330),
        "podUID": second.actions[0].uid,
        "exitCode": 137,
    }
    assert assert_converged(cluster, at(325)).requeue_after == 5.0  # a controller restart changes nothing
    replaced = cluster.step(at(330))
    assert created_pod_names(replaced) == [W1]
    assert workers_status(cluster)["1"]["state"] == "Replaced"
    assert replaced.events == () and replaced.metrics == ()
    assert_converged(cluster, at(331))


def test_gracefully_deleted_worker_waits_for_its_name():
    cluster = running_cluster()
    cluster.terminate_pod(W1)  # kubectl delete: terminating, blocks the name
    decision = cluster.step(at(50))
    assert decision.actions == ()  # not deleted again
    assert [e.message.split(":")[0] for e in failover_events(decision)] == [
        f"Worker {W1} (index 1) was deleted (Deleted)"
    ]
    assert decision.status["replicaStatuses"]["Worker"] == {
        "active": 2,
        "selector": "training.kubeflow.org/job-name=test-tfjob,"
        "training.kubeflow.org/operator-name=tfjob-controller,training.kubeflow.org/replica-type=worker",
    }
    assert_still_running(decision.status)
    assert_converged(cluster, at(70))  # no back-off, but the old pod still holds the name
    cluster.remove_pod(W1)
    assert created_pod_names(cluster.step(at(70.5))) == [W1]  # replaced as soon as it is gone


@pytest.mark.parametrize("restart_policy", ["Never", "OnFailure", "Always", "ExitCode"])
def test_evicted_worker_is_replaced_whatever_the_restart_policy(restart_policy):
    cluster = running_cluster(restart_policy=restart_policy, run_policy={"backoffLimit": 0})
    evicted = cluster.set_phase(
        W1, "Failed", reason="Evicted", conditions=[disruption_condition("TerminationByKubelet")]
    )
    decision = cluster.step(at(30))
    assert actions_of(decision, DeletePod) == [DeletePod(W1, evicted["metadata"]["uid"], "Failover")]
    assert "(Evicted)" in failover_events(decision)[0].message
    assert_still_running(decision.status)  # and backoffLimit 0 is not consumed by disruptions
    assert "failed" not in decision.status["replicaStatuses"]["Worker"]
    # The Failed pod is removed at once; the pass that sees it gone replaces it (the first failover
    # of the index: no back-off).
    assert created_pod_names(cluster.step(at(30.5))) == [W1]


@pytest.mark.parametrize(
    ("pod_change", "reason"),
    [
        ({"phase": "Running", "conditions": [disruption_condition("PreemptionByScheduler")]}, "Preempted"),
        ({"phase": "Running", "conditions": [disruption_condition("EvictionByEvictionAPI")]}, "Evicted"),
        ({"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "NodeLost"}]}, "NodeLost"),
        ({"phase": "Unknown"}, "NodeLost"),
    ],
)
def test_disrupted_running_worker_is_deleted_and_replaced(pod_change, reason):
    cluster = running_cluster()
    phase = pod_change.pop("phase")
    pod = cluster.set_phase(W1, phase, started_at=ts(), **pod_change)
    decision = cluster.step(at(30))
    assert actions_of(decision, DeletePod) == [DeletePod(W1, pod["metadata"]["uid"], "Failover")]
    assert f"({reason})" in failover_events(decision)[0].message
    assert decision.metrics[-1].labels == (("job_namespace", "default"), ("reason", reason))
    assert_still_running(decision.status)
    assert_converged(cluster, at(31))  # it is terminating now: not deleted again, not counted again


def test_node_lost_worker_terminating_by_taint_manager():
    cluster = running_cluster()
    cluster.set_phase(W1, "Running", started_at=ts(), conditions=[disruption_condition("DeletionByTaintManager")])
    cluster.terminate_pod(W1)
    decision = cluster.step(at(300))
    assert decision.actions == ()
    assert "was lost with its node (NodeLost)" in failover_events(decision)[0].message
    assert_converged(cluster, at(400))  # stays terminating (no kubelet): we wait, nothing else
    cluster.remove_pod(W1)  # node deleted, pod GC removed it
    assert created_pod_names(cluster.step(at(401))) == [W1]


# --- workers that fail by their own exit ------------------------------------------------------------
@pytest.mark.parametrize(
    ("restart_policy", "replaced"), [("ExitCode", True), ("Never", False), ("OnFailure", True), ("Always", True)]
)
def test_oom_killed_worker(restart_policy, replaced):
    cluster = running_cluster(restart_policy=restart_policy)
    pod = cluster.set_phase(
        W1, "Failed", exit_code=137, termination_reason="OOMKilled", started_at=ts(), finished_at=ts(20)
    )
    decision = cluster.step(at(20))
    assert_still_running(decision.status)
    assert f"Pod: default.{W1} exited with code 137" in [e.message for e in decision.events]
    if replaced:
        assert actions_of(decision, DeletePod) == [DeletePod(W1, pod["metadata"]["uid"], "Failover")]
        assert failover_events(decision)[0].message == (
            f"Worker {W1} (index 1) was OOM-killed (exit code 137) (OOMKilled): replacing it as soon as it is gone "
            "(failover 1)"
        )
        assert created_pod_names(cluster.step(at(20.5))) == [W1]  # the Failed pod was removed at once
    else:
        assert decision.actions == ()
        assert [e for e in decision.events if e.reason == "WorkerFailed"] == [
            Event(
                "Warning",
                "WorkerFailed",
                f"Worker {W1} (index 1) was OOM-killed (exit code 137) and restartPolicy "
                "Never does not retry it: the job continues without it",
            )
        ]
        assert decision.status["replicaStatuses"]["Worker"]["failed"] == 1
        assert workers_status(cluster)["1"] == {
            "state": "Failed",
            "failovers": 0,
            "lastReason": "OOMKilled",
            "podUID": pod["metadata"]["uid"],
            "exitCode": 137,
        }
        assert_converged(cluster, at(1000))


def test_oom_restarted_in_place_under_on_failure_is_the_kubelets_business():
    cluster = running_cluster(restart_policy="OnFailure", run_policy={"backoffLimit": 0})
    cluster.set_phase(W1, "Running", started_at=ts(30), restart_count=1)
    decision = cluster.step(at(40))
    assert decision.actions == () and decision.events == ()
    assert_still_running(decision.status)  # worker restarts do not consume backoffLimit


def test_exit_1_under_exit_code_stays_failed_and_the_job_goes_on():
    cluster = running_cluster(restart_policy="ExitCode", run_policy={"ttlSecondsAfterFinished": 60})
    cluster.set_phase(W1, "Failed", exit_code=1)
    decision = cluster.step(at(20))
    assert decision.actions == ()
    assert_still_running(decision.status)
    assert "completionTime" not in decision.status
    assert event_reasons(decision) == ["WorkerFailed", "ExitedWithCode"]
    assert workers_status(cluster)["1"]["state"] == "Failed"
    assert_converged(cluster, at(21))


def test_user_deleting_a_permanently_failed_worker_retries_it():
    cluster = running_cluster(restart_policy="Never")
    cluster.set_phase(W1, "Failed", exit_code=2)
    cluster.step(at(20))
    cluster.remove_pod(W1)
    decision = cluster.step(at(25))
    assert "was deleted (Deleted)" in failover_events(decision)[0].message
    assert created_pod_names(cluster.step(at(25))) == [W1]


# --- crash loops back off per index -----------------------------------------------------------------
def test_crash_loop_backoff_sequence_and_reset():
    cluster = running_cluster(restart_policy="ExitCode")
    now = 100.0
    delays = []
    for _ in range(8):
        cluster.set_phase(W1, "Failed", exit_code=143, started_at=ts(now - 5), finished_at=ts(now))
        decision = cluster.step(at(now))  # deletes the Failed pod (gone at once)
        delay = decision.requeue_after or 0.0
        delays.append(delay)
        assert_still_running(decision.status)
        if delay:
            assert_converged(cluster, at(now + delay - 1))  # no replacement before the back-off ends
        now += delay
        assert created_pod_names(cluster.step(at(now))) == [W1]
        cluster.set_phase(W1, "Running", started_at=ts(now))
    # The first failover is replaced at once; repeats back off as kubelet's crash loop does.
    assert delays == [0.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert workers_status(cluster)["1"]["failovers"] == workers_status(cluster)["1"]["failures"] == 8

    # running: the history is reset exactly when the pod has run for 10 minutes
    decision = cluster.step(at(now + 1))
    assert decision.requeue_after == 599.0
    reset = cluster.step(at(now + 600))
    assert workers_status(cluster) == {}
    assert reset.actions == () and reset.events == ()
    cluster.set_phase(W1, "Failed", exit_code=143, started_at=ts(now), finished_at=ts(now + 700))
    fresh = cluster.step(at(now + 700))
    assert "(failover 1)" in failover_events(fresh)[0].message and fresh.requeue_after is None
    assert created_pod_names(cluster.step(at(now + 700))) == [W1]


def test_failure_after_a_long_run_starts_the_backoff_afresh_even_without_the_reset_pass():
    cluster = running_cluster(restart_policy="ExitCode")
    cluster.job["status"]["dynamicWorkers"]["workers"]["1"] = {
        "state": "Replaced",
        "failovers": 5,
        "failures": 5,
        "lastFailoverTime": ts(-2000),
        "lastReason": "Error",
    }
    cluster.set_phase(W1, "Failed", exit_code=143, started_at=ts(0), finished_at=ts(900))
    decision = cluster.step(at(900))
    assert decision.requeue_after is None  # a first failure: no back-off
    assert workers_status(cluster)["1"]["failovers"] == workers_status(cluster)["1"]["failures"] == 1


def test_backoff_is_per_index():
    cluster = running_cluster(restart_policy="ExitCode")
    cluster.set_phase(W1, "Failed", exit_code=143)
    cluster.step(at(10))
    assert created_pod_names(cluster.step(at(11))) == [W1]
    cluster.set_phase(W1, "Failed", exit_code=143)
    assert cluster.step(at(21)).requeue_after == 10.0  # worker 1: second failover, replaced at 31
    cluster.set_phase("test-tfjob-worker-2", "Failed", exit_code=143)
    decision = cluster.step(at(22))
    assert "(failover 1)" in failover_events(decision)[0].message  # worker 2: first
    assert decision.requeue_after == 9.0  # worker 1's timer; worker 2 has none
    assert created_pod_names(cluster.step(at(23))) == ["test-tfjob-worker-2"]  # worker 1 still waits
    assert created_pod_names(cluster.step(at(31))) == [W1]


@pytest.mark.parametrize(("n", "delay"), [(0, 0), (1, 0), (2, 10), (3, 20), (4, 40), (6, 160), (7, 300), (10**6, 300)])
def test_failover_delay(n, delay):
    assert failover_delay(n, DecideConfig()) == delay


def test_backoff_timings_are_configurable():
    config = DecideConfig(failover_backoff_base=0.5, failover_backoff_cap=2.0)
    assert [failover_delay(n, config) for n in (1, 2, 3, 4, 5)] == [0.0, 0.5, 1.0, 2.0, 2.0]
