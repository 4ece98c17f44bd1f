"""Every table-driven test of upstream's TFJob controller (training-operator v1.8.1: status_test.go,
job_test.go, pod_test.go, tensorflow_test.go, tfjob_controller_test.go), as table tests of :func:`decide`.

Fixtures follow upstream's testutil: job ``test-tfjob`` in ``default``, replica restartPolicy
empty (defaults to Never) unless a case sets it, one ``tensorflow`` container with tfjob-port.
Pods carry no container statuses unless a case needs an exit code.

Where upstream's actual result is a quirk we fix, the expected value is our documented decision
(docs/tfjob-compatibility.md), marked "QUIRK Qn" in the case. Everywhere we also expect the
``Created`` condition first: decide adds it (Q11) where upstream's create predicate did.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.tfjob import api
from controller.tfjob.actions import CreatePod, CreateService, DeleteJob, DeletePod, DeleteService
from controller.tfjob.decide import decide, worker0_completed
from controller.tfjob.defaults import defaulted

from .builders import (
    NOW,
    Cluster,
    actions_of,
    assert_converged,
    at,
    condition_types,
    created_pod_names,
    deleted_pod_names,
    event_reasons,
    make_job,
    make_pod,
    make_service,
    metric_names,
    replica,
    services_for,
    ts,
)

CREATED = ("Created", "True")


def fsa_pods(
    job: dict,
    replica_type: str,
    fsa: tuple[int, int, int],
    *,
    exit_code: int | None = None,
    worker0_exit0: bool = False,
) -> list[dict]:
    """Pods in upstream's status-test order: succeeded first, then failed, then active."""
    failed, succeeded, active = fsa
    phases = ["Succeeded"] * succeeded + ["Failed"] * failed + ["Running"] * active
    out = []
    for i, phase in enumerate(phases):
        kwargs: dict[str, Any] = {}
        if phase == "Failed" and exit_code is not None:
            kwargs["exit_code"] = exit_code
        if phase == "Succeeded" and worker0_exit0 and replica_type == "Worker" and i == 0:
            kwargs["exit_code"] = 0
        out.append(make_pod(job, replica_type, i, phase, **kwargs))
    return out


# --- 8.1 status_test.go "Test Status" ----------------------------------------------------------
STATUS_CASES = [
    # id, job kwargs, PS f/s/a, Worker f/s/a, Chief f/s/a, flags, expected conditions after Created
    ("01 chief succeeded", {"chief": 1, "worker": 1}, None, (0, 1, 0), (0, 1, 0), {}, [("Succeeded", "True")]),
    ("02 chief running", {"chief": 1, "worker": 1}, None, (0, 0, 0), (0, 0, 1), {}, [("Running", "True")]),
    ("03 chief failed", {"chief": 1, "worker": 1}, None, (0, 0, 0), (1, 0, 0), {}, [("Failed", "True")]),
    ("04 no chief, worker failed", {"worker": 1}, None, (1, 0, 0), None, {}, [("Failed", "True")]),
    ("05 no chief, worker succeeded", {"worker": 1}, None, (0, 1, 0), None, {}, [("Succeeded", "True")]),
    ("06 no chief, worker running", {"worker": 1}, None, (0, 0, 1), None, {}, [("Running", "True")]),
    (
        "07 2 succeeded 2 active, worker 0 not completed",
        {"worker": 4, "ps": 2},
        (0, 0, 2),
        (0, 2, 2),
        None,
        {},
        [("Running", "True")],
    ),
    (
        "08 2 running 2 failed",
        {"worker": 4, "ps": 2},
        (0, 0, 2),
        (2, 0, 2),
        None,
        {},
        [("Running", "False"), ("Failed", "True")],
    ),
    ("09 2 succeeded 2 failed", {"worker": 4, "ps": 2}, (0, 0, 2), (2, 2, 0), None, {}, [("Failed", "True")]),
    (
        "10 worker 0 completed, 3 active",
        {"worker": 4, "ps": 2},
        (0, 0, 2),
        (0, 1, 3),
        None,
        {"worker0": True},
        [("Succeeded", "True")],
    ),
    (
        "11 AllWorkers, worker 0 completed, 3 active",
        {"worker": 4, "success_policy": "AllWorkers"},
        None,
        (0, 1, 3),
        None,
        {"worker0": True},
        [("Running", "True")],
    ),
    (
        "12 AllWorkers, 4 succeeded",
        {"worker": 4, "success_policy": "AllWorkers"},
        None,
        (0, 4, 0),
        None,
        {"worker0": True},
        [("Succeeded", "True")],
    ),
    (
        "13 AllWorkers, worker 0 completed, 2 running, 1 failed",
        {"worker": 4, "success_policy": "AllWorkers"},
        None,
        (1, 1, 2),
        None,
        {"worker0": True},
        [("Running", "False"), ("Failed", "True")],
    ),
    # Q2 kept: the job fails although the chief runs (upstream's headline says Running).
    (
        "14 chief running, workers failed",
        {"chief": 1, "worker": 4, "ps": 2},
        (0, 0, 2),
        (4, 0, 0),
        (0, 0, 1),
        {},
        [("Running", "False"), ("Failed", "True")],
    ),
    (
        "15 chief running, workers succeeded",
        {"chief": 1, "worker": 4, "ps": 2},
        (0, 0, 2),
        (0, 4, 0),
        (0, 0, 1),
        {},
        [("Running", "True")],
    ),
    (
        "16 chief running, a PS failed",
        {"chief": 1, "worker": 4, "ps": 2},
        (1, 0, 1),
        (0, 4, 0),
        (0, 0, 1),
        {},
        [("Running", "False"), ("Failed", "True")],
    ),
    (
        "17 chief failed, workers succeeded",
        {"chief": 1, "worker": 4, "ps": 2},
        (0, 0, 2),
        (0, 4, 0),
        (1, 0, 0),
        {},
        [("Failed", "True")],
    ),
    # QUIRK Q1: upstream ends with [Succeeded=True, Failed=True]; terminal states are exclusive here.
    (
        "18 chief succeeded, workers failed",
        {"chief": 1, "worker": 4, "ps": 2},
        (0, 0, 2),
        (4, 0, 0),
        (0, 1, 0),
        {},
        [("Succeeded", "True")],
    ),
    (
        "19 chief failed and restarting",
        {"chief": 1, "worker": 4, "ps": 2, "restart_policy": "ExitCode"},
        (0, 0, 2),
        (4, 0, 0),
        (1, 0, 0),
        {"restart": True},
        [("Restarting", "True")],
    ),
]


@pytest.mark.parametrize(
    ("case", "job_kwargs", "ps", "worker", "chief", "flags", "expected"), STATUS_CASES, ids=[c[0] for c in STATUS_CASES]
)
def test_status_table(case, job_kwargs, ps, worker, chief, flags, expected):
    job = make_job(**job_kwargs)
    exit_code = 130 if flags.get("restart") else None
    pods: list[dict] = []
    for replica_type, fsa in (("PS", ps), ("Worker", worker), ("Chief", chief)):
        if fsa is not None:
            pods += fsa_pods(job, replica_type, fsa, exit_code=exit_code, worker0_exit0=flags.get("worker0", False))
    decision = decide(job, pods, [], NOW)
    assert condition_types(decision.status) == [CREATED, *expected]
    finished = any(t in ("Succeeded", "Failed") and s == "True" for t, s in condition_types(decision.status))
    if finished:
        # upstream's invariant: never Running=True once Succeeded or Failed
        assert ("Running", "True") not in condition_types(decision.status)
    if flags.get("restart"):
        failed = {p["metadata"]["name"] for p in pods if p["status"]["phase"] == "Failed"}
        assert set(deleted_pod_names(decision)) == failed and len(failed) == 5
        assert all(a.reason == "Restart" for a in actions_of(decision, DeletePod))
    if case.startswith("02"):
        assert created_pod_names(decision) == ["test-tfjob-worker-0"]
    if case.startswith("03"):
        # a job that fails in this pass creates nothing (upstream still created worker-0)
        assert created_pod_names(decision) == []


def test_status_messages():
    job = make_job(chief=1, worker=4, ps=2)
    pods = fsa_pods(job, "PS", (1, 0, 1)) + fsa_pods(job, "Worker", (0, 4, 0)) + fsa_pods(job, "Chief", (0, 0, 1))
    status = decide(job, pods, [], NOW).status
    assert status["conditions"][-1] == {
        "type": "Failed",
        "status": "True",
        "reason": "TFJobFailed",
        "message": "TFJob default/test-tfjob has failed because 1 PS replica(s) failed.",
        "lastUpdateTime": ts(),
        "lastTransitionTime": ts(),
    }
    assert status["conditions"][1]["reason"] == "TFJobRunning"
    assert status["conditions"][1]["message"] == "TFJob default/test-tfjob is running."


def test_status_restarting_message():
    job = make_job(chief=1, worker=4, ps=2, restart_policy="ExitCode")
    pods = fsa_pods(job, "PS", (0, 0, 2)) + fsa_pods(job, "Worker", (4, 0, 0), exit_code=130)
    pods += fsa_pods(job, "Chief", (1, 0, 0), exit_code=130)
    decision = decide(job, pods, [], NOW)
    restarting = decision.status["conditions"][-1]
    assert (restarting["reason"], restarting["message"]) == (
        "TFJobRestarting",
        "job test-tfjob is restarting because Chief replica(s) failed.",
    )
    assert event_reasons(decision).count("TFJobRestarting") == 5
    # a restart is counted once per restarted pod (upstream also counted per type per pass, Q9)
    assert metric_names(decision).count("training_operator_jobs_restarted_total") == 5


def test_status_failed():
    # "Test Failed": NewTFJob(3, 0) with one failed worker
    job = make_job(worker=3)
    decision = decide(job, [make_pod(job, "Worker", 0, "Failed")], [], NOW)
    failed = decision.status["conditions"][-1]
    assert (failed["type"], failed["status"], failed["message"]) == (
        "Failed",
        "True",
        "TFJob default/test-tfjob has failed because 1 Worker replica(s) failed.",
    )
    assert "TFJobFailed" in event_reasons(decision)
    assert metric_names(decision).count("training_operator_jobs_failed_total") == 1
    assert decision.status["completionTime"] == ts()


# --- 8.5 tfjob_controller_test.go "Test Normal Path" -------------------------------------------
def normal_path_pods(job: dict, replica_type: str, pending: int, active: int, succeeded: int, failed: int) -> list:
    phases = ["Pending"] * pending + ["Running"] * active + ["Succeeded"] * succeeded + ["Failed"] * failed
    return [make_pod(job, replica_type, i, phase) for i, phase in enumerate(phases)]


NORMAL_PATH = [
    # name, (W, PS), W pods p/a/s/f, PS pods p/a/s/f, (W svcs, PS svcs), (creates, deletes, svc creates),
    # Worker a/s/f, PS a/s/f, condition reason or None
    ("local created", (1, 0), (0, 0, 0, 0), None, (0, 0), (1, 0, 1), (0, 0, 0), None, None),
    ("distributed created", (4, 2), (0, 0, 0, 0), (0, 0, 0, 0), (0, 0), (6, 0, 6), (0, 0, 0), (0, 0, 0), None),
    ("all pending", (4, 2), (4, 0, 0, 0), (2, 0, 0, 0), (4, 2), (0, 0, 0), (0, 0, 0), (0, 0, 0), None),
    ("all running", (4, 2), (0, 4, 0, 0), (0, 2, 0, 0), (4, 2), (0, 0, 0), (4, 0, 0), (2, 0, 0), "TFJobRunning"),
    ("2 W 1 PS pending", (4, 2), (2, 0, 0, 0), (1, 0, 0, 0), (2, 1), (3, 0, 3), (0, 0, 0), (0, 0, 0), None),
    (
        "2 W 1 PS pending, 1 W running",
        (4, 2),
        (2, 1, 0, 0),
        (1, 0, 0, 0),
        (3, 1),
        (2, 0, 2),
        (1, 0, 0),
        (0, 0, 0),
        "TFJobRunning",
    ),
    (
        "2 W 1 PS pending, 1 W succeeded",
        (4, 2),
        (2, 0, 1, 0),
        (1, 0, 0, 0),
        (3, 1),
        (2, 0, 2),
        (0, 1, 0),
        (0, 0, 0),
        None,
    ),
    (
        "distributed succeeded",
        (4, 2),
        (0, 0, 4, 0),
        (0, 0, 2, 0),
        (4, 2),
        (0, 0, 0),
        (0, 4, 0),
        (0, 2, 0),
        "TFJobSucceeded",
    ),
]


@pytest.mark.parametrize(
    ("name", "sizes", "w", "p", "svcs", "expected_actions", "w_asf", "p_asf", "reason"),
    NORMAL_PATH,
    ids=[c[0] for c in NORMAL_PATH],
)
def test_normal_path(name, sizes, w, p, svcs, expected_actions, w_asf, p_asf, reason):
    workers, ps = sizes
    job = make_job(worker=workers, ps=ps if ps else None)
    pods = normal_path_pods(job, "Worker", *w) + (normal_path_pods(job, "PS", *p) if p else [])
    services = services_for(job, "Worker", svcs[0]) + services_for(job, "PS", svcs[1])
    decision = decide(job, pods, services, NOW)
    creates, deletes, service_creates = expected_actions
    assert len(actions_of(decision, CreatePod)) == creates
    assert len(actions_of(decision, DeletePod)) == deletes
    assert len(actions_of(decision, CreateService)) == service_creates
    for action in actions_of(decision, CreatePod) + actions_of(decision, CreateService):
        obj = action.pod if isinstance(action, CreatePod) else action.service
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"]) == (
            "kubeflow.org/v1",
            "TFJob",
            "test-tfjob",
            job["metadata"]["uid"],
        )

    def asf(replica_type: str) -> tuple[int, int, int]:
        entry = decision.status["replicaStatuses"][replica_type]
        return entry.get("active", 0), entry.get("succeeded", 0), entry.get("failed", 0)

    assert asf("Worker") == w_asf
    if p_asf is not None:
        assert asf("PS") == p_asf
    if reason is not None:
        last = decision.status["conditions"][-1]
        assert (last["status"], last["reason"]) == ("True", reason)
    elif name == "2 W 1 PS pending, 1 W succeeded":
        assert condition_types(decision.status) == [CREATED]  # worker 0 has no exit code: not completed
    assert decision.status["startTime"] == ts()


# --- 8.2 job_test.go ----------------------------------------------------------------------------
def test_add_tfjob_ignores_other_jobs_children():
    job = make_job("test-case-12", worker=1)
    decoy = make_job("decoy-case-34", worker=2, ps=3, uid="decoy-uid")
    decoy_pods = [make_pod(decoy, "Worker", i) for i in range(2)]
    decision = decide(job, decoy_pods, [make_service(decoy, "Worker", 0)], NOW)
    assert created_pod_names(decision) == ["test-case-12-worker-0"]
    assert deleted_pod_names(decision) == []


def succeeded_status() -> dict:
    return {
        "conditions": [
            {
                "type": "Succeeded",
                "status": "True",
                "reason": "TFJobSucceeded",
                "message": "done",
                "lastUpdateTime": ts(-10),
                "lastTransitionTime": ts(-10),
            }
        ],
        "completionTime": ts(-10),
        "startTime": ts(-100),
    }


@pytest.mark.parametrize(
    ("phase", "policy", "deleted"),
    [("Running", "All", 6), ("Running", "Running", 6), ("Succeeded", "Running", 0), ("Succeeded", "None", 0)],
)
def test_delete_pods_and_services(phase, policy, deleted):
    job = make_job(worker=4, ps=2, run_policy={"cleanPodPolicy": policy}, status=succeeded_status())
    pods = [make_pod(job, t, i, phase) for t, n in (("Worker", 4), ("PS", 2)) for i in range(n)]
    services = services_for(job, "Worker", 4) + services_for(job, "PS", 2)
    decision = decide(job, pods, services, NOW)
    assert len(actions_of(decision, DeletePod)) == deleted
    assert len(actions_of(decision, DeleteService)) == deleted  # remaining pods == remaining services
    assert {a.reason for a in decision.actions} <= {"Cleanup"}
    assert decision.requeue_after is None


def running_cluster(run_policy: dict, restart_policy: str | None = None) -> tuple[dict, list, list]:
    job = make_job(
        worker=replica(4, restart_policy),
        ps=2,
        run_policy=run_policy,
        status={
            "startTime": ts(),
            "conditions": [
                {
                    "type": "Created",
                    "status": "True",
                    "reason": "TFJobCreated",
                    "message": "m",
                    "lastUpdateTime": ts(),
                    "lastTransitionTime": ts(),
                }
            ],
        },
    )
    pods = [make_pod(job, t, i, "Running", restart_count=1) for t, n in (("Worker", 4), ("PS", 2)) for i in range(n)]
    return job, pods, services_for(job, "Worker", 4) + services_for(job, "PS", 2)


def test_active_deadline_unset_keeps_everything():
    job, pods, services = running_cluster({"cleanPodPolicy": "All"})
    decision = decide(job, pods, services, at(2))
    assert decision.actions == ()
    assert decision.requeue_after is None


def test_active_deadline_reached_deletes_everything():
    job, pods, services = running_cluster({"cleanPodPolicy": "All", "activeDeadlineSeconds": 2})
    before = decide(job, pods, services, at(1))
    assert before.actions == () and before.requeue_after == 1.0  # enforced on time (Q4)
    decision = decide(job, pods, services, at(2))
    assert len(actions_of(decision, DeletePod)) == 6 and len(actions_of(decision, DeleteService)) == 6
    assert {a.reason for a in decision.actions} == {"Deadline"}
    last = decision.status["conditions"][-1]
    assert (last["type"], last["status"], last["reason"], last["message"]) == (
        "Failed",
        "True",
        "TFJobFailed",
        "Job test-tfjob has failed because it was active longer than specified deadline",
    )


def test_backoff_for_on_failure():
    job, pods, services = running_cluster({"cleanPodPolicy": "All", "backoffLimit": 4}, restart_policy="OnFailure")
    decision = decide(job, pods, services, NOW)
    assert len(actions_of(decision, DeletePod)) == 6 and len(actions_of(decision, DeleteService)) == 6
    assert {a.reason for a in decision.actions} == {"BackoffLimit"}
    last = decision.status["conditions"][-1]
    assert (last["type"], last["message"]) == (
        "Failed",
        "Job test-tfjob has failed because it has reached the specified backoff limit",
    )
    assert decision.status["completionTime"] == ts()


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_ttl_seconds_after_finished(outcome):
    cluster = Cluster(make_job(worker=1, run_policy={"ttlSecondsAfterFinished": 3}))
    cluster.step()
    cluster.set_phase("test-tfjob-worker-0", outcome, exit_code=0 if outcome == "Succeeded" else 1)
    finished = cluster.step(at(10))
    assert (outcome, "True") in condition_types(finished.status)
    assert finished.status["completionTime"] == ts(10)
    assert finished.requeue_after == 3.0
    assert actions_of(cluster.decide(at(12)), DeleteJob) == []
    assert actions_of(cluster.decide(at(13)), DeleteJob) == [DeleteJob("TTL")]
    assert "training_operator_jobs_deleted_total" in metric_names(cluster.decide(at(13)))


CLEANUP_JOB = [
    # name, ttl, suspend, completionTime, expect delete, expect requeue
    ("ttl nil", None, False, ts(-10), False, None),
    ("ttl nil, suspended, no completionTime", None, True, None, False, None),
    ("ttl 10, suspended, no completionTime", 10, True, None, False, None),
    # upstream errors forever ("job completion time is nil"); we set it now and start the TTL
    ("ttl 10, no completionTime", 10, False, None, False, 10.0),
    ("ttl 180, completed a day ago", 180, False, ts(-86400), True, None),
    ("ttl 0, completed now", 0, False, ts(), True, None),
]


@pytest.mark.parametrize(
    ("name", "ttl", "suspend", "completion", "delete", "requeue"), CLEANUP_JOB, ids=[c[0] for c in CLEANUP_JOB]
)
def test_cleanup_job(name, ttl, suspend, completion, delete, requeue):
    run_policy: dict[str, Any] = {"suspend": suspend}
    if ttl is not None:
        run_policy["ttlSecondsAfterFinished"] = ttl
    status = succeeded_status()
    if completion is None:
        del status["completionTime"]
    else:
        status["completionTime"] = completion
    decision = decide(make_job(chief=1, worker=2, run_policy=run_policy, status=status), [], [], NOW)
    assert (actions_of(decision, DeleteJob) != []) is delete
    assert decision.requeue_after == requeue
    assert decision.status["completionTime"] == (completion or ts())


# --- 8.3 pod_test.go ----------------------------------------------------------------------------
def test_exit_code_retryable_pod_is_deleted():
    job = make_job("test-exit-code", worker=1, restart_policy="ExitCode")
    pod = make_pod(job, "Worker", 0, "Failed", exit_code=130)
    decision = decide(job, [pod], [make_service(job, "Worker", 0)], NOW)
    assert actions_of(decision, DeletePod) == [DeletePod("test-exit-code-worker-0", pod["metadata"]["uid"], "Restart")]
    assert ("Restarting", "True") in condition_types(decision.status)
    assert "ExitedWithCode" in event_reasons(decision)


def test_unretryable_exit_code_fails_the_job():
    cluster = Cluster(make_job("test-noretry-exit-code", worker=1, restart_policy="ExitCode"))
    assert created_pod_names(cluster.step()) == ["test-noretry-exit-code-worker-0"]
    cluster.set_phase("test-noretry-exit-code-worker-0", "Failed", exit_code=1)
    decision = cluster.step(at(5))
    failed = decision.status["conditions"][-1]
    assert {k: failed[k] for k in ("type", "status", "reason", "message")} == {
        "type": "Failed",
        "status": "True",
        "reason": "TFJobFailed",
        "message": 'job "test-noretry-exit-code" is failing because "Worker" replica(s) failed.',
    }
    assert [(e.type, e.reason) for e in decision.events if e.reason == "TFJobFailed"] == [("Warning", "TFJobFailed")]
    assert actions_of(decision, DeletePod) == []  # the failed pod is kept
    assert decision.status["completionTime"] == ts(5)  # upstream leaves it nil here (5.4 #2)
    assert_converged(cluster, at(6))


def test_scale_down_deletes_out_of_range_worker():
    job = make_job("test-scale-down", worker=2, dynamic=True)
    pods = [make_pod(job, "Worker", i) for i in range(3)]
    decision = decide(job, pods, services_for(job, "Worker", 3), NOW)
    assert deleted_pod_names(decision) == ["test-scale-down-worker-2"]


def test_scale_up_creates_missing_workers():
    job = make_job("test-scale-up", worker=3, dynamic=True)
    decision = decide(job, [make_pod(job, "Worker", 0)], [make_service(job, "Worker", 0)], NOW)
    assert created_pod_names(decision) == ["test-scale-up-worker-1", "test-scale-up-worker-2"]


WORKER0 = [
    ("W1+PS1, 1 active", {"worker": 1, "ps": 1}, (0, 0, 1), False),
    ("W1, 1 succeeded", {"worker": 1}, (0, 1, 0), True),
    ("Master only", {"master": 1}, None, True),
    ("Chief only", {"chief": 1}, None, True),
    ("W2, index 0 succeeded, index 1 failed", {"worker": 2}, (1, 1, 0), True),
    ("W2, index 0 failed, index 1 running", {"worker": 2}, (1, 0, 1), False),
]


@pytest.mark.parametrize(("name", "kwargs", "fsa", "expected"), WORKER0, ids=[c[0] for c in WORKER0])
def test_is_worker0_completed(name, kwargs, fsa, expected):
    job = make_job(**kwargs)
    pods = []
    if fsa is not None:
        failed, succeeded, active = fsa
        phases = ["Succeeded"] * succeeded + ["Failed"] * failed + ["Running"] * active
        pods = [
            make_pod(job, "Worker", i, ph, exit_code=0 if ph == "Succeeded" else None) for i, ph in enumerate(phases)
        ]
    assert worker0_completed(defaulted(job), pods) is expected


# --- suspend semantics (tfjob_controller_test.go) ----------------------------------------------
def test_created_suspended():
    cluster = Cluster(make_job("test-job", chief=1, worker=1, run_policy={"suspend": True}))
    decision = cluster.step()
    assert decision.actions == ()
    assert "startTime" not in decision.status
    assert [{k: c[k] for k in ("type", "status", "reason", "message")} for c in decision.status["conditions"]] == [
        {"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "TFJob test-job is created."},
        {"type": "Suspended", "status": "True", "reason": "TFJobSuspended", "message": "TFJob test-job is suspended."},
    ]
    assert_converged(cluster, at(60))


def conditions_brief(status: dict) -> list[tuple[str, str, str, str]]:
    return [(c["type"], c["status"], c["reason"], c["message"]) for c in status["conditions"]]


def test_suspend_and_resume_sequence():
    cluster = Cluster(make_job("test-job", "ns", chief=1, worker=1))
    first = cluster.step()
    assert sorted(created_pod_names(first)) == ["test-job-chief-0", "test-job-worker-0"]
    assert first.status["startTime"] == ts()
    cluster.run_all()
    running = cluster.step(at(1))
    assert conditions_brief(running.status) == [
        ("Created", "True", "TFJobCreated", "TFJob test-job is created."),
        ("Running", "True", "TFJobRunning", "TFJob ns/test-job is running."),
    ]

    cluster.job["spec"]["runPolicy"] = {"suspend": True}
    suspended = cluster.step(at(10))
    assert sorted(deleted_pod_names(suspended)) == ["test-job-chief-0", "test-job-worker-0"]
    assert len(actions_of(suspended, DeleteService)) == 2
    assert suspended.status["replicaStatuses"]["Chief"].get("active", 0) == 0
    assert suspended.status["replicaStatuses"]["Worker"].get("active", 0) == 0
    assert suspended.status["startTime"] == ts()  # unchanged by suspending
    assert conditions_brief(suspended.status) == [
        ("Created", "True", "TFJobCreated", "TFJob test-job is created."),
        ("Running", "False", "TFJobSuspended", "TFJob test-job is suspended."),
        ("Suspended", "True", "TFJobSuspended", "TFJob test-job is suspended."),
    ]
    assert event_reasons(suspended) == ["TFJobSuspended"]
    assert_converged(cluster, at(11))  # pods terminating: not deleted again, no event again (Q12)
    for name in ("test-job-chief-0", "test-job-worker-0"):
        cluster.remove_pod(name)
    assert_converged(cluster, at(12))  # stay deleted

    cluster.job["spec"]["runPolicy"] = {"suspend": False}
    resumed = cluster.step(at(20))
    assert resumed.status["startTime"] == ts(20)
    assert sorted(created_pod_names(resumed)) == ["test-job-chief-0", "test-job-worker-0"]
    assert len(actions_of(resumed, CreateService)) == 2
    assert "TFJobResumed" in event_reasons(resumed)
    cluster.run_all()
    again = cluster.step(at(21))
    assert conditions_brief(again.status) == [
        ("Created", "True", "TFJobCreated", "TFJob test-job is created."),
        ("Suspended", "False", "TFJobResumed", "TFJob test-job is resumed."),
        ("Running", "True", "TFJobRunning", "TFJob ns/test-job is running."),
    ]
    assert_converged(cluster, at(22))


def test_managed_by_external_controller_is_not_reconciled():
    job = make_job(
        "test-job", chief=1, worker=1, run_policy={"managedBy": "kueue.x-k8s.io/multikueue", "suspend": True}
    )
    decision = decide(job, [], [], NOW)
    assert decision == decide(job, [], [], at(5))
    assert decision.actions == () and decision.events == () and decision.metrics == ()
    assert decision.status == {}  # not even Created
    job["spec"]["runPolicy"]["suspend"] = False
    assert decide(job, [], [], NOW).status == {}


@pytest.mark.parametrize(
    ("managed_by", "reconciled"),
    [(None, True), ("kubeflow.org/training-operator", True), ("kueue.x-k8s.io/multikueue", False)],
)
def test_managed_by_values(managed_by, reconciled):
    job = make_job(worker=1, run_policy={} if managed_by is None else {"managedBy": managed_by})
    assert bool(actions_of(decide(job, [], [], NOW), CreatePod)) is reconciled


@pytest.mark.parametrize("managed_by", ["", "other-job-controller"])
def test_managed_by_unknown_value_is_invalid(managed_by):
    # upstream treats "" as external (and skips the job); its webhook rejects both values
    decision = decide(make_job(worker=1, run_policy={"managedBy": managed_by}), [], [], NOW)
    assert decision.status["conditions"][-1]["reason"] == "TFJobFailedValidation"


# --- common package tests -------------------------------------------------------------------------
DELETE_PODS_AND_SERVICES = [
    # job state, cleanPodPolicy, names of pods (and services) that remain
    ("Succeeded", "Running", {"succeeded"}),
    ("Suspended", "Running", set()),
    ("Succeeded", "All", set()),
    ("Failed", "None", {"running", "succeeded"}),
    ("Suspended", "None", set()),
]


@pytest.mark.parametrize(("state", "policy", "remaining"), DELETE_PODS_AND_SERVICES)
def test_delete_pods_and_services_by_state(state, policy, remaining):
    run_policy: dict[str, Any] = {"cleanPodPolicy": policy}
    status: dict[str, Any] = {}
    if state == "Suspended":
        run_policy["suspend"] = True
    else:
        status = {
            "conditions": [
                {
                    "type": state,
                    "status": "True",
                    "reason": f"TFJob{state}",
                    "message": "m",
                    "lastUpdateTime": ts(),
                    "lastTransitionTime": ts(),
                }
            ],
            "completionTime": ts(),
        }
    job = make_job(worker=2, run_policy=run_policy, status=status)
    pods = {"running": make_pod(job, "Worker", 0, "Running"), "succeeded": make_pod(job, "Worker", 1, "Succeeded")}
    services = [make_service(job, "Worker", 0), make_service(job, "Worker", 1)]
    decision = decide(job, list(pods.values()), services, NOW)
    names = {"test-tfjob-worker-0": "running", "test-tfjob-worker-1": "succeeded"}
    assert {names[n] for n in deleted_pod_names(decision)} == set(pods) - remaining
    assert {names[a.name] for a in actions_of(decision, DeleteService)} == set(pods) - remaining


@pytest.mark.parametrize(
    ("limit", "pods_spec", "past"),
    [
        (0, [("Running", 0), ("Succeeded", 0)], False),
        (3, [("Running", 3)], True),
        (3, [("Running", 2)], False),
        (0, [("Running", 1)], True),
    ],
)
def test_past_backoff_limit(limit, pods_spec, past):
    job = make_job(worker=len(pods_spec), restart_policy="OnFailure", run_policy={"backoffLimit": limit})
    pods = [make_pod(job, "Worker", i, ph, restart_count=rc) for i, (ph, rc) in enumerate(pods_spec)]
    decision = decide(job, pods, services_for(job, "Worker", len(pods)), NOW)
    failed = decision.status["conditions"][-1]
    reached = failed["type"] == "Failed" and "backoff limit" in failed["message"]
    assert reached is past


def test_backoff_counts_only_restartable_types():
    # restartCount of pods whose type has restartPolicy Never does not count
    job = make_job(worker=1, run_policy={"backoffLimit": 1})
    decision = decide(job, [make_pod(job, "Worker", 0, "Running", restart_count=5)], [], NOW)
    assert ("Failed", "True") not in condition_types(decision.status)


@pytest.mark.parametrize(("deadline", "past"), [(0, True), (2, False)])
def test_past_active_deadline(deadline, past):
    job = make_job(worker=1, run_policy={"activeDeadlineSeconds": deadline}, status={"startTime": ts()})
    decision = decide(job, [make_pod(job, "Worker", 0, "Running")], [make_service(job, "Worker", 0)], NOW)
    assert (("Failed", "True") in condition_types(decision.status)) is past
    assert decision.requeue_after == (None if past else 2.0)


def test_zero_deadline_fails_on_the_first_pass():
    decision = decide(make_job(worker=2, run_policy={"activeDeadlineSeconds": 0}), [], [], NOW)
    assert ("Failed", "True") in condition_types(decision.status) and decision.actions == ()


def test_update_job_replica_statuses():
    # 2 failed + 3 succeeded + 1 running + 1 running with deletionTimestamp -> failed 3, succeeded 3, active 1
    job = make_job(worker=7)
    phases = ["Failed", "Failed", "Succeeded", "Succeeded", "Succeeded", "Running"]
    pods = [make_pod(job, "Worker", i, ph) for i, ph in enumerate(phases)]
    pods.append(make_pod(job, "Worker", 6, "Running", terminating=True))
    decision = decide(job, pods, services_for(job, "Worker", 7), NOW)
    entry = decision.status["replicaStatuses"]["Worker"]
    assert (entry["failed"], entry["succeeded"], entry["active"]) == (3, 3, 1)


def test_pod_slices_beyond_replicas_are_never_filled():
    # CalculatePodSliceSize: indices 0,1,2 with replicas 2 -> slice 3; index 4 with replicas 3 -> 5.
    # Upstream would (re)create the empty slots below the highest index (quirk Q6); we never do.
    job = make_job(worker=3, dynamic=True)
    pods = [make_pod(job, "Worker", i) for i in (0, 1, 2, 4)]
    services = [make_service(job, "Worker", i) for i in (0, 1, 2, 4)]
    decision = decide(job, pods, services, NOW)
    assert created_pod_names(decision) == [] and actions_of(decision, CreateService) == []
    assert deleted_pod_names(decision) == ["test-tfjob-worker-4"]
    job = make_job(worker=2)
    decision = decide(job, [make_pod(job, "Worker", i) for i in range(3)], services_for(job, "Worker", 3), NOW)
    assert created_pod_names(decision) == [] and deleted_pod_names(decision) == ["test-tfjob-worker-2"]


def test_filter_pods_by_replica_type():
    job = make_job(worker=2, ps=1)
    pods = [make_pod(job, "PS", 0), make_pod(job, "Worker", 1), make_pod(job, "Worker", 0)]
    decision = decide(job, pods, [], NOW)
    assert decision.status["replicaStatuses"]["Worker"]["active"] == 2
    assert decision.status["replicaStatuses"]["PS"]["active"] == 1


def test_duration_until_expire():
    running = make_job(worker=1, run_policy={"ttlSecondsAfterFinished": 100})
    assert decide(running, [make_pod(running, "Worker", 0)], [], NOW).requeue_after is None  # running: no TTL
    status = succeeded_status()
    finished = make_job(worker=1, run_policy={"ttlSecondsAfterFinished": 100}, status=status)
    assert decide(finished, [], [], NOW).requeue_after == 90.0  # completed 10 s ago
    no_ttl = make_job(worker=1, status=succeeded_status())
    assert decide(no_ttl, [], [], NOW).requeue_after is None


def test_labels_of_created_pods_for_every_type():
    job = make_job("j", "ns", chief=1, ps=1, worker=1, evaluator=1)
    decision = decide(job, [], [], NOW)
    names = created_pod_names(decision)
    assert names == ["j-chief-0", "j-evaluator-0", "j-ps-0", "j-worker-0"]
    for action in actions_of(decision, CreatePod):
        labels = action.pod["metadata"]["labels"]
        assert labels[api.LABEL_REPLICA_TYPE] == action.replica_type.lower()
        assert labels[api.LABEL_REPLICA_INDEX] == str(action.index)
    assert [a.service["metadata"]["name"] for a in actions_of(decision, CreateService)] == names
