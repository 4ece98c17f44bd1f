"""Whole-job lifecycles through :func:`decide`: idempotence, transitions-only events and metrics,
upstream failure semantics of non-dynamic jobs, cleanPodPolicy, TTL, activeDeadlineSeconds,
backoffLimit, suspend/resume, invalid jobs, and a property-style test over mutated inputs."""

from __future__ import annotations

import copy
import json
import random
from datetime import datetime
from typing import Any

import pytest

from controller.tfjob import api
from controller.tfjob.actions import CreatePod, CreateService, Decision, DeleteJob, DeletePod, DeleteService
from controller.tfjob.decide import DecideConfig, decide

from .builders import (
    NOW,
    Cluster,
    actions_of,
    assert_converged,
    at,
    condition_types,
    container,
    created_pod_names,
    deleted_pod_names,
    disruption_condition,
    event_reasons,
    make_job,
    make_pod,
    make_service,
    metric_names,
    replica,
    ts,
)


def started(job: dict) -> Cluster:
    cluster = Cluster(job)
    cluster.step(NOW)
    cluster.run_all(started_at=ts())
    cluster.step(at(1))
    assert_converged(cluster, at(1))
    return cluster


# --- idempotence and transitions ----------------------------------------------------------------
@pytest.mark.parametrize("dynamic", [False, True])
def test_full_lifecycle_is_idempotent_at_every_stable_point(dynamic):
    cluster = Cluster(
        make_job(
            chief=1,
            worker=2,
            ps=1,
            evaluator=1,
            dynamic=dynamic,
            run_policy={"ttlSecondsAfterFinished": 60, "cleanPodPolicy": "Running"},
        )
    )
    first = cluster.step()
    assert len(actions_of(first, CreatePod)) == 5 and len(actions_of(first, CreateService)) == 5
    assert metric_names(first) == ["training_operator_jobs_created_total"]
    assert_converged(cluster, at(0))
    cluster.run_all(started_at=ts())
    running = cluster.step(at(1))
    assert running.events == () and running.metrics == ()  # Running is a condition, not an event
    assert_converged(cluster, at(2))
    cluster.set_phase("test-tfjob-chief-0", "Succeeded", exit_code=0)
    done = cluster.step(at(100))
    assert condition_types(done.status)[-1] == ("Succeeded", "True")
    assert event_reasons(done) == ["TFJobSucceeded"]
    assert metric_names(done) == ["training_operator_jobs_successful_total"]
    # cleanPodPolicy Running: the still running PS, workers and evaluator go in the same pass
    assert sorted(deleted_pod_names(done)) == [
        "test-tfjob-evaluator-0",
        "test-tfjob-ps-0",
        "test-tfjob-worker-0",
        "test-tfjob-worker-1",
    ]
    assert done.status["replicaStatuses"]["Worker"]["succeeded"] == 2  # active booked as succeeded
    assert done.requeue_after == 60.0
    assert assert_converged(cluster, at(101)).requeue_after == 59.0
    assert actions_of(cluster.decide(at(160)), DeleteJob) == [DeleteJob("TTL")]


def test_created_is_counted_once_even_across_controller_restarts():
    cluster = Cluster(make_job(worker=1))
    assert metric_names(cluster.step()) == ["training_operator_jobs_created_total"]
    # a new controller sees the job again ("add" event): Created is present, nothing counted (Q11)
    assert metric_names(cluster.decide(at(5))) == []


def test_created_is_added_to_a_job_written_by_upstream_without_it():
    job = make_job(
        worker=1,
        status={
            "conditions": [
                {
                    "type": "Running",
                    "status": "True",
                    "reason": "TFJobRunning",
                    "message": "m",
                    "lastUpdateTime": ts(-5),
                    "lastTransitionTime": ts(-5),
                }
            ],
            "startTime": ts(-5),
        },
    )
    decision = decide(job, [make_pod(job, "Worker", 0)], [make_service(job, "Worker", 0)], NOW)
    assert condition_types(decision.status) == [("Running", "True"), ("Created", "True")]
    assert decision.status["startTime"] == ts(-5)


# --- non-dynamic jobs fail exactly as upstream -----------------------------------------------------
def test_non_dynamic_deleted_worker_fails_the_job_under_never():
    cluster = started(make_job(worker=2, ps=1))
    cluster.terminate_pod("test-tfjob-worker-1")  # kubectl delete pod: terminating Running pod
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-2:] == [("Running", "False"), ("Failed", "True")]
    assert decision.status["conditions"][-1]["message"] == (
        "TFJob default/test-tfjob has failed because 1 Worker replica(s) failed."
    )
    assert [(e.type, e.reason) for e in decision.events] == [("Normal", "TFJobFailed")]
    assert metric_names(decision) == ["training_operator_jobs_failed_total"]
    assert decision.status["completionTime"] == ts(10)
    assert_converged(cluster, at(11))


def test_non_dynamic_worker_exit_under_never_fails_the_job_once():
    cluster = started(make_job(worker=2, ps=1))
    cluster.set_phase("test-tfjob-worker-1", "Failed", exit_code=3)
    decision = cluster.step(at(10))
    assert [(e.reason, e.message) for e in decision.events] == [
        ("ExitedWithCode", "Pod: default.test-tfjob-worker-1 exited with code 3"),
        ("TFJobFailed", "TFJob default/test-tfjob has failed because 1 Worker replica(s) failed."),
    ]
    assert decision.actions == ()  # cleanPodPolicy None keeps everything
    assert_converged(cluster, at(11))


def test_non_dynamic_missing_worker_is_recreated_immediately():
    cluster = started(make_job(worker=2, ps=1))
    cluster.remove_pod("test-tfjob-worker-1")
    decision = cluster.step(at(10))
    assert created_pod_names(decision) == ["test-tfjob-worker-1"]
    assert decision.events == ()


def test_non_dynamic_restart_flow_under_on_failure():
    cluster = started(make_job(worker=2, ps=1, restart_policy="OnFailure"))
    pod = cluster.set_phase("test-tfjob-worker-1", "Failed", reason="Evicted")
    restart = cluster.step(at(10))
    assert actions_of(restart, DeletePod) == [DeletePod("test-tfjob-worker-1", pod["metadata"]["uid"], "Restart")]
    assert condition_types(restart.status)[-1] == ("Restarting", "True")
    assert event_reasons(restart) == ["TFJobRestarting"]
    assert metric_names(restart) == ["training_operator_jobs_restarted_total"]
    recreate = cluster.step(at(11))  # the failed pod is gone: recreated under the same name
    assert created_pod_names(recreate) == ["test-tfjob-worker-1"]
    assert recreate.events == () and recreate.metrics == ()
    cluster.run_all(started_at=ts(12))
    back = cluster.step(at(12))
    assert condition_types(back.status)[-1] == ("Running", "True")
    assert_converged(cluster, at(13))


def test_non_dynamic_restart_while_failed_pod_still_terminates_is_not_repeated():
    cluster = started(make_job(worker=2, restart_policy="ExitCode"))
    cluster.set_phase("test-tfjob-worker-0", "Failed", exit_code=137)
    cluster.pod("test-tfjob-worker-0")["metadata"]["finalizers"] = ["example.com/hold"]
    decision = cluster.step(at(10))
    assert len(actions_of(decision, DeletePod)) == 1
    assert "deletionTimestamp" in cluster.pod("test-tfjob-worker-0")["metadata"]  # the finalizer holds it
    assert_converged(cluster, at(11))


def test_stale_restarting_does_not_mask_a_permanent_failure():
    # Q3: upstream keeps the job Restarting while any Restarting condition exists
    job = make_job(worker=replica(2, "OnFailure"), ps=replica(1, "Never"))
    cluster = started(job)
    cluster.set_phase("test-tfjob-worker-0", "Failed", reason="Evicted")
    cluster.step(at(10))
    cluster.set_phase("test-tfjob-ps-0", "Failed", exit_code=1)
    decision = cluster.step(at(11))
    assert condition_types(decision.status)[-1] == ("Failed", "True")
    assert ("Restarting", "True") not in condition_types(decision.status)


def test_exit_code_deleted_pod_restarts_instead_of_failing():
    # upstream's shared job library once failed the whole job for ExitCode + a deleted (137) pod
    cluster = started(make_job(worker=2, ps=1, restart_policy="ExitCode"))
    cluster.terminate_pod("test-tfjob-ps-0")
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == ("Restarting", "True")
    cluster.remove_pod("test-tfjob-ps-0")
    assert created_pod_names(cluster.step(at(11))) == ["test-tfjob-ps-0"]


def test_non_dynamic_scale_down_fails_the_job_as_upstream():
    # upstream: scaling in fails a non-dynamic job (its maintainers call it intended); the pods still go
    cluster = started(make_job(worker=3, ps=1))
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    decision = cluster.step(at(10))
    assert deleted_pod_names(decision) == ["test-tfjob-worker-2"]
    assert condition_types(decision.status)[-1] == ("Failed", "True")
    assert_converged(cluster, at(11))


# --- cleanPodPolicy --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "deleted"),
    [
        ("None", []),
        ("Running", ["test-tfjob-ps-0", "test-tfjob-worker-2"]),
        ("All", ["test-tfjob-ps-0", "test-tfjob-worker-0", "test-tfjob-worker-1", "test-tfjob-worker-2"]),
    ],
)
def test_clean_pod_policy_on_success(policy, deleted):
    cluster = started(make_job(worker=3, ps=1, run_policy={"cleanPodPolicy": policy}))
    cluster.set_phase("test-tfjob-worker-0", "Succeeded", exit_code=0)
    cluster.set_phase("test-tfjob-worker-1", "Failed", exit_code=1)
    cluster.set_phase("test-tfjob-worker-2", "Pending")
    # Within the Worker type, upstream checks success (worker 0 completed) before failures; the
    # first terminal outcome wins (Q1), so worker 1's failure does not add Failed.
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == ("Succeeded", "True")
    assert sorted(deleted_pod_names(decision)) == deleted
    assert sorted(a.name for a in actions_of(decision, DeleteService)) == deleted
    assert_converged(cluster, at(11))


# --- TTL ---------------------------------------------------------------------------------------------
def test_ttl_after_failure_requeues_exactly_and_deletes():
    cluster = started(make_job(worker=1, run_policy={"ttlSecondsAfterFinished": 30}))
    cluster.set_phase("test-tfjob-worker-0", "Failed", exit_code=1)
    failed = cluster.step(at(50))
    assert failed.status["completionTime"] == ts(50)
    assert failed.requeue_after == 30.0
    assert cluster.decide(at(79.5)).requeue_after == 0.5
    final = cluster.decide(at(80))
    assert final.actions == (DeleteJob("TTL"),)
    assert final.metrics[-1].name == "training_operator_jobs_deleted_total"


def test_ttl_is_skipped_while_suspended():
    job = make_job(
        worker=1,
        run_policy={"ttlSecondsAfterFinished": 0, "suspend": True},
        status={
            "conditions": [{"type": "Failed", "status": "True", "reason": "TFJobFailed", "message": "m"}],
            "completionTime": ts(-100),
        },
    )
    decision = decide(job, [], [], NOW)
    assert decision.actions == () and decision.requeue_after is None


# --- activeDeadlineSeconds ----------------------------------------------------------------------------
def test_active_deadline_is_enforced_on_time():
    cluster = Cluster(make_job(worker=2, ps=1, run_policy={"activeDeadlineSeconds": 100, "ttlSecondsAfterFinished": 5}))
    assert cluster.step(at(0.25)).requeue_after == 99.75
    cluster.run_all()
    assert cluster.step(at(40)).requeue_after == 60.0
    decision = cluster.step(at(100))
    assert condition_types(decision.status)[-1] == ("Failed", "True")
    assert decision.status["conditions"][-1]["message"] == (
        "Job test-tfjob has failed because it was active longer than specified deadline"
    )
    assert sorted(deleted_pod_names(decision)) == ["test-tfjob-ps-0", "test-tfjob-worker-0", "test-tfjob-worker-1"]
    assert len(actions_of(decision, DeleteService)) == 3
    assert {a.reason for a in decision.actions} == {"Deadline"}
    assert [(e.type, e.reason) for e in decision.events] == [("Normal", "TFJobFailed")]
    assert metric_names(decision) == ["training_operator_jobs_failed_total"]  # Q9: counted
    assert decision.status["completionTime"] == ts(100)
    assert decision.requeue_after == 5.0  # TTL starts
    assert_converged(cluster, at(101))


def test_deadline_restarts_with_resume():
    cluster = Cluster(make_job(worker=1, run_policy={"activeDeadlineSeconds": 100, "suspend": True}))
    assert cluster.step().requeue_after is None  # suspended: no deadline
    cluster.job["spec"]["runPolicy"]["suspend"] = False
    assert cluster.step(at(500)).requeue_after == 100.0


# --- backoffLimit ---------------------------------------------------------------------------------------
def test_backoff_limit_zero_fails_on_the_first_new_failure():
    cluster = started(make_job(worker=2, run_policy={"backoffLimit": 0}))
    cluster.set_phase("test-tfjob-worker-1", "Failed", exit_code=1)
    decision = cluster.step(at(10))
    assert decision.status["conditions"][-1]["message"] == (
        "Job test-tfjob has failed because it has reached the specified backoff limit"
    )
    # every pod and service goes, whatever cleanPodPolicy says (upstream)
    assert sorted(deleted_pod_names(decision)) == ["test-tfjob-worker-0", "test-tfjob-worker-1"]
    assert len(actions_of(decision, DeleteService)) == 2
    assert {a.reason for a in decision.actions} == {"BackoffLimit"}
    assert_converged(cluster, at(11))


def test_backoff_limit_ignores_dynamic_workers_but_not_ps():
    cluster = started(
        make_job(worker=2, ps=1, dynamic=True, restart_policy="OnFailure", run_policy={"backoffLimit": 2})
    )
    cluster.set_phase("test-tfjob-worker-0", "Running", started_at=ts(), restart_count=5)
    assert condition_types(cluster.step(at(10)).status)[-1] == ("Running", "True")
    cluster.set_phase("test-tfjob-ps-0", "Running", started_at=ts(), restart_count=2)
    assert condition_types(cluster.step(at(11)).status)[-1] == ("Failed", "True")


# --- suspend --------------------------------------------------------------------------------------------
def test_suspend_emits_its_event_once():
    cluster = started(make_job(worker=2))
    cluster.job["spec"]["runPolicy"] = {"suspend": True}
    assert event_reasons(cluster.step(at(10))) == ["TFJobSuspended"]
    for pod in list(cluster.pods):
        cluster.remove_pod(pod["metadata"]["name"])
    for t in (11, 12, 500):
        assert_converged(cluster, at(t))


def test_finished_job_ignores_suspend():
    job = make_job(
        worker=1,
        run_policy={"suspend": True},
        status={
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "m"}],
            "completionTime": ts(),
        },
    )
    decision = decide(job, [make_pod(job, "Worker", 0, "Succeeded")], [make_service(job, "Worker", 0)], NOW)
    assert decision.actions == () and condition_types(decision.status) == [("Succeeded", "True")]


# --- invalid jobs ---------------------------------------------------------------------------------------
INVALID = [
    (
        "no tensorflow container",
        lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[container("main")]),
        "must have at least one container with name tensorflow",
    ),
    (
        "empty image",
        lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"].update(containers=[container(image="")]),
        "containers[0].image: Required value",
    ),
    (
        "chief and master",
        lambda j: j["spec"]["tfReplicaSpecs"].update(Chief=replica(1), Master=replica(1)),
        "must not have more than 1 Chief or Master role",
    ),
    ("bad name", lambda j: j["metadata"].update(name="Bad_Name"), 'metadata.name: Invalid value: "Bad_Name"'),
    (
        "unknown replica type",
        lambda j: j["spec"]["tfReplicaSpecs"].update(Launcher=replica(1)),
        'spec.tfReplicaSpecs[Launcher]: Unsupported value: "Launcher"',
    ),
    (
        "negative replicas",
        lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=-1),
        "spec.tfReplicaSpecs[Worker].replicas: Invalid value: -1: must be greater than or equal to 0",
    ),
]


@pytest.mark.parametrize(("name", "mutate", "fragment"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_job_is_failed_and_creates_nothing(name, mutate, fragment):
    job = make_job(worker=2)
    mutate(job)
    cluster = Cluster(job)
    decision = cluster.step()
    assert decision.actions == ()
    job_name = job["metadata"]["name"]
    (event,) = decision.events
    assert (event.type, event.reason) == ("Warning", "TFJobFailedValidation")
    assert event.message.startswith(f"TFJob default/{job_name} failed validation because ")
    assert fragment in event.message
    failed = decision.status["conditions"][-1]
    assert (failed["type"], failed["status"], failed["reason"], failed["message"]) == (
        "Failed",
        "True",
        "TFJobFailedValidation",
        event.message,
    )
    assert decision.status["completionTime"] == ts()
    assert sorted(metric_names(decision)) == [
        "training_operator_jobs_created_total",
        "training_operator_jobs_failed_total",
    ]
    assert_converged(cluster, at(60))


def test_invalid_job_gets_ttl_cleanup():
    job = make_job(worker=replica(-3), run_policy={"ttlSecondsAfterFinished": 10})
    cluster = Cluster(job)
    assert cluster.step().requeue_after == 10.0
    assert actions_of(cluster.decide(at(10)), DeleteJob) == [DeleteJob("TTL")]


def test_invalid_job_with_garbage_everywhere_reports_every_problem():
    job = {
        "metadata": {"name": 5, "namespace": "ns", "uid": "u"},
        "spec": {"tfReplicaSpecs": "nope", "runPolicy": {"backoffLimit": "x"}},
        "status": {"conditions": "garbage", "startTime": 7},
    }
    decision = decide(job, ["pod", None], [{"metadata": None}], NOW)
    assert decision.actions == ()
    message = decision.status["conditions"][-1]["message"]
    assert message.startswith("TFJob ns/ failed validation because [metadata.name: Required value")
    assert "spec.runPolicy.backoffLimit" in message


def test_naive_now_is_taken_as_utc():
    job = make_job(worker=1)
    assert decide(job, [], [], NOW.replace(tzinfo=None)) == decide(job, [], [], NOW)


# --- property-style: mutated inputs never make decide raise -------------------------------------------
GARBAGE: list[Any] = [
    None,
    -1,
    0,
    1,
    2**40,
    1.5,
    float("nan"),
    True,
    "",
    "x",
    "Worker",
    "-3",
    [],
    [1, None],
    {},
    {"a": 1},
    {"name": "tensorflow"},
    "2024-05-01T12:00:00Z",
    "Failed",
    "Running",
]


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, (*prefix, i))
    return out


def _mutate(rng: random.Random, obj: Any) -> Any:
    obj = copy.deepcopy(obj)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(obj) if p]
        if not paths:
            return rng.choice(GARBAGE)
        path = rng.choice(paths)
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        action = rng.random()
        if action < 0.2 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.3 and isinstance(parent, dict):
            parent[rng.choice(["replicas", "phase", "deletionTimestamp", "WORKER", "ps", "exitCode"])] = copy.deepcopy(
                rng.choice(GARBAGE)
            )
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(GARBAGE))
    return obj


def _scenario(rng: random.Random) -> tuple[dict, list, list]:
    kwargs: dict[str, Any] = {"worker": rng.randint(0, 4)}
    for key in ("ps", "chief", "evaluator"):
        if rng.random() < 0.4:
            kwargs[key] = rng.randint(0, 2)
    job = make_job(
        **kwargs,
        dynamic=rng.random() < 0.5,
        restart_policy=rng.choice(api.RESTART_POLICIES + (None,)),
        success_policy=rng.choice(["", "AllWorkers", None]),
        run_policy=rng.choice(
            [
                None,
                {"backoffLimit": rng.randint(0, 3)},
                {"activeDeadlineSeconds": rng.randint(0, 50), "ttlSecondsAfterFinished": rng.randint(0, 50)},
                {"suspend": rng.random() < 0.5, "cleanPodPolicy": "All"},
            ]
        ),
    )
    pods, services = [], []
    for replica_type in ("Worker", "PS", "Chief", "Evaluator"):
        for index in range(6):
            if rng.random() < 0.4:
                pods.append(
                    make_pod(
                        job,
                        replica_type,
                        index,
                        rng.choice(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
                        exit_code=rng.choice([None, 0, 1, 137, 143]),
                        terminating=rng.random() < 0.2,
                        reason=rng.choice([None, None, "Evicted", "NodeLost"]),
                        restart_count=rng.randint(0, 2),
                        conditions=rng.choice([None, [disruption_condition()]]),
                        started_at=ts(-rng.randint(0, 900)),
                    )
                )
            if rng.random() < 0.4:
                services.append(make_service(job, replica_type, index))
    return job, pods, services


def _check_invariants(job: dict, pods: list, services: list, decision: Decision) -> None:
    assert isinstance(decision, Decision)
    json.dumps(decision.status, allow_nan=True)
    types = condition_types(decision.status) if isinstance(decision.status.get("conditions"), list) else []
    assert not (("Succeeded", "True") in types and ("Failed", "True") in types)
    existing = {
        p["metadata"]["name"]
        for p in pods
        if isinstance(p, dict) and isinstance(p.get("metadata"), dict) and isinstance(p["metadata"].get("name"), str)
    }
    specs = job.get("spec", {}).get("tfReplicaSpecs", {}) if isinstance(job.get("spec"), dict) else {}
    created = [a.pod["metadata"]["name"] for a in decision.actions if isinstance(a, CreatePod)]
    assert len(created) == len(set(created)) and not set(created) & existing
    for action in decision.actions:
        if isinstance(action, CreatePod | CreateService):
            spec = specs.get(action.replica_type) or specs.get(action.replica_type.lower()) or {}
            assert action.index < spec.get("replicas", 1)  # never an out-of-range create (Q6)
    if decision.requeue_after is not None:
        assert decision.requeue_after > 0


@pytest.mark.parametrize("seed", range(8))
def test_random_valid_scenarios_keep_invariants(seed):
    rng = random.Random(seed)
    for _ in range(150):
        job, pods, services = _scenario(rng)
        now: datetime = at(rng.randint(0, 1000))
        snapshot = copy.deepcopy((job, pods, services))
        decision = decide(job, pods, services, now)
        assert (job, pods, services) == snapshot  # inputs are never mutated
        assert decide(job, pods, services, now) == decision  # deterministic
        _check_invariants(job, pods, services, decision)
        # feed the decision's status back: the next pass must still hold the invariants
        job2 = {**job, "status": decision.status}
        _check_invariants(job2, pods, services, decide(job2, pods, services, now))


@pytest.mark.parametrize("seed", range(8))
def test_mutated_jobs_and_children_never_raise(seed):
    rng = random.Random(1000 + seed)
    for _ in range(150):
        job, pods, services = _scenario(rng)
        job = {**job, "status": decide(job, pods, services, NOW).status}
        target = rng.random()
        if target < 0.5:
            job = _mutate(rng, job)
        elif target < 0.8:
            pods = [_mutate(rng, p) if rng.random() < 0.5 else p for p in pods] or [_mutate(rng, {"a": {}})]
        else:
            services = [_mutate(rng, s) for s in services] + [rng.choice(GARBAGE)]
        decision = decide(job, pods, services, at(rng.randint(0, 100)))
        assert isinstance(decision, Decision) and isinstance(decision.status, dict)
        assert all(
            isinstance(a, CreatePod | DeletePod | CreateService | DeleteService | DeleteJob) for a in decision.actions
        )


@pytest.mark.parametrize("garbage", GARBAGE)
def test_garbage_job_never_raises(garbage):
    decision = decide(garbage, [garbage], [garbage], NOW)
    assert isinstance(decision, Decision)


# --- a large job gets its status early and keeps it up to date while it is built -------------------
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_large_job_is_created_and_has_replica_statuses_after_a_small_first_pass(dynamic):
    config = DecideConfig()
    cluster = Cluster(make_job(worker=600, ps=2, dynamic=dynamic), config=config)
    first = cluster.step(NOW)
    # A handful of creations, then the status: Created and a replicaStatuses entry per type.
    assert len(first.actions) == config.first_pass_creations
    assert condition_types(first.status) == [("Created", "True")]
    assert set(first.status["replicaStatuses"]) == {"PS", "Worker"}
    assert "startTime" in first.status
    passes, statuses = 1, [first.status]
    while True:
        created = sum(isinstance(a, (CreatePod, CreateService)) for a in cluster.step(at(passes)).actions)
        if created == 0:
            break
        assert created <= config.max_creations  # every pass is bounded and ends with its status
        cluster.run_all(started_at=ts(passes))  # the kubelet starts what was created
        statuses.append(cluster.job["status"])
        passes += 1
    assert len(cluster.pods) == 602 and len(cluster.services) == 602
    actives = [s["replicaStatuses"]["Worker"].get("active", 0) for s in statuses]
    assert actives == sorted(actives) and 0 < actives[2] < actives[-1]  # the status grows with the job
    assert passes == 1 + -(-(1204 - config.first_pass_creations) // config.max_creations)
    assert_converged(cluster, at(passes + 1))


def test_a_small_job_is_still_created_in_one_pass():
    cluster = Cluster(make_job(worker=4, ps=1, dynamic=True))
    first = cluster.step(NOW)
    assert len(actions_of(first, CreatePod)) == 5 and len(actions_of(first, CreateService)) == 5
