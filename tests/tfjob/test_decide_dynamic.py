"""Dynamic workers (``enableDynamicWorker: true``): failover, back-off, permanent failures,
scaling, success rules and the persisted history. Each scenario runs decisions against the
in-memory Cluster of builders.py, so every step also checks what the previous one left behind."""

from __future__ import annotations

import json

import pytest

from controller.tfjob.actions import CreatePod, CreateService, DeletePod, DeleteService, Event, MetricInc
from controller.tfjob.decide import DecideConfig, decide

from .builders import (
    NOW,
    Cluster,
    actions_of,
    assert_converged,
    assert_still_running,
    at,
    condition_types,
    created_pod_names,
    deleted_pod_names,
    event_reasons,
    make_job,
    running_cluster,
    ts,
    workers_status,
)

W1 = "test-tfjob-worker-1"


# --- scaling ---------------------------------------------------------------------------------------------
def test_scale_up_creates_new_indices_only():
    cluster = running_cluster(workers=2)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4
    decision = cluster.step(at(10))
    assert created_pod_names(decision) == ["test-tfjob-worker-2", "test-tfjob-worker-3"]
    assert [a.service["metadata"]["name"] for a in actions_of(decision, CreateService)] == [
        "test-tfjob-worker-2",
        "test-tfjob-worker-3",
    ]
    assert actions_of(decision, DeletePod) == []
    assert_still_running(decision.status)
    tf_config = json.loads(
        next(
            e["value"]
            for e in actions_of(decision, CreatePod)[1].pod["spec"]["containers"][0]["env"]
            if e["name"] == "TF_CONFIG"
        )
    )
    assert tf_config == {
        "cluster": {
            "worker": {"3": "test-tfjob-worker-3.default.svc:2222"},
            "ps": ["test-tfjob-ps-0.default.svc:2222"],
        },
        "task": {"type": "worker", "index": 3},
    }


def test_scale_down_deletes_highest_first_and_never_counts_failures():
    cluster = running_cluster(workers=4)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    decision = cluster.step(at(10))
    assert [(type(a).__name__, a.name, a.reason) for a in decision.actions] == [
        ("DeletePod", "test-tfjob-worker-3", "ScaleDown"),
        ("DeleteService", "test-tfjob-worker-3", "ScaleDown"),
        ("DeletePod", "test-tfjob-worker-2", "ScaleDown"),
        ("DeleteService", "test-tfjob-worker-2", "ScaleDown"),
    ]
    assert decision.events == (
        Event(
            "Normal",
            "WorkerScaledDown",
            "Scaled down to 2 worker(s): removed test-tfjob-worker-3 (highest index), test-tfjob-worker-2 "
            "(highest index); workers now 0,1",
        ),
    )
    assert (
        decision.metrics
        == (MetricInc("tfjob_worker_scaled_down_total", (("job_namespace", "default"), ("chosen_by", "highestIndex"))),)
        * 2
    )
    assert_still_running(decision.status)
    assert decision.status["replicaStatuses"]["Worker"].get("failed", 0) == 0
    assert decision.status["replicaStatuses"]["Worker"]["active"] == 2
    assert_converged(cluster, at(11))  # terminating: neither recreated nor deleted again nor counted


def test_terminating_higher_index_never_causes_an_out_of_range_create():
    cluster = running_cluster(workers=4)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    cluster.step(at(10))
    cluster.remove_pod("test-tfjob-worker-1")  # 1 and 2 gone, 3 still terminating
    cluster.remove_pod("test-tfjob-worker-2")
    decision = cluster.step(at(11))
    assert decision.actions == () and decision.events == ()
    assert [p["metadata"]["name"] for p in cluster.pods if "worker" in p["metadata"]["name"]] == [
        "test-tfjob-worker-0",
        "test-tfjob-worker-3",
    ]


def test_scale_down_then_up_while_old_pod_terminates():
    cluster = running_cluster(workers=3)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    cluster.step(at(10))
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    decision = cluster.step(at(11))
    assert decision.actions == () and decision.events == ()  # ours and leaving: not a failover
    cluster.remove_pod("test-tfjob-worker-2")
    back = cluster.step(at(12))
    assert created_pod_names(back) == ["test-tfjob-worker-2"]
    assert [a.service["metadata"]["name"] for a in actions_of(back, CreateService)] == ["test-tfjob-worker-2"]
    assert back.events == ()


def test_scale_to_zero_with_a_chief():
    cluster = running_cluster(workers=2, chief=1)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 0
    decision = cluster.step(at(10))
    assert sorted(deleted_pod_names(decision)) == ["test-tfjob-worker-0", "test-tfjob-worker-1"]
    assert len(actions_of(decision, DeleteService)) == 2
    assert_still_running(decision.status)
    for name in ("test-tfjob-worker-0", "test-tfjob-worker-1"):
        cluster.remove_pod(name)
    assert_converged(cluster, at(20))
    assert cluster.job["status"]["replicaStatuses"]["Worker"].get("active", 0) == 0


def test_scale_to_zero_without_a_chief_idles_instead_of_succeeding():
    # upstream: replicas 0 means "expected == 0" -> Succeeded at once
    cluster = running_cluster(workers=2, ps=None)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 0
    decision = cluster.step(at(10))
    assert_still_running(decision.status)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    for name in ("test-tfjob-worker-0", "test-tfjob-worker-1"):
        cluster.remove_pod(name)
    assert created_pod_names(cluster.step(at(20))) == ["test-tfjob-worker-0", "test-tfjob-worker-1"]


def tf_configs_of(decision) -> dict[str, dict | None]:
    """Created pod name -> its parsed TF_CONFIG (None when it has none)."""
    configs: dict[str, dict | None] = {}
    for action in actions_of(decision, CreatePod):
        env = action.pod["spec"]["containers"][0].get("env") or []
        values = [e["value"] for e in env if e["name"] == "TF_CONFIG"]
        configs[action.pod["metadata"]["name"]] = json.loads(values[0]) if values else None
    return configs


PS0 = "test-tfjob-ps-0.default.svc:2222"


@pytest.mark.parametrize("restart_policy", ["OnFailure", "ExitCode"])
def test_a_ps_recreated_while_workers_are_zero_keeps_its_tf_config(restart_policy):
    # 1 PS + 2 workers scaled to 0; the PS pod is then lost (deleted, node gone): the job has one
    # replica in total when the PS is re-created, and it must still get its TF_CONFIG, or the
    # workers scaled back up would have a PS that cannot join them.
    cluster = running_cluster(workers=2, restart_policy=restart_policy)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 0
    cluster.step(at(10))
    for name in ("test-tfjob-worker-0", "test-tfjob-worker-1"):
        cluster.remove_pod(name)
    assert_converged(cluster, at(11))
    cluster.remove_pod("test-tfjob-ps-0")
    recorded = cluster.step(at(12))  # the failover is recorded first; the next pass re-creates the PS
    assert created_pod_names(recorded) == [] and recorded.status_first
    ps_back = cluster.step(at(12))
    assert tf_configs_of(ps_back) == {
        "test-tfjob-ps-0": {"cluster": {"worker": {}, "ps": [PS0]}, "task": {"type": "ps", "index": 0}}
    }
    cluster.run_all(started_at=ts(13))
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    workers_back = cluster.step(at(14))
    assert tf_configs_of(workers_back) == {
        f"test-tfjob-worker-{i}": {
            "cluster": {"worker": {str(i): f"test-tfjob-worker-{i}.default.svc:2222"}, "ps": [PS0]},
            "task": {"type": "worker", "index": i},
        }
        for i in (0, 1)
    }


def test_a_dynamic_job_created_with_one_replica_gives_it_a_tf_config():
    cluster = Cluster(make_job(worker=1, dynamic=True))
    assert tf_configs_of(cluster.step(NOW)) == {
        "test-tfjob-worker-0": {
            "cluster": {"worker": {"0": "test-tfjob-worker-0.default.svc:2222"}, "ps": []},
            "task": {"type": "worker", "index": 0},
        }
    }


def test_scaled_down_succeeded_workers_do_not_inflate_succeeded():
    cluster = running_cluster(workers=3, success_policy="AllWorkers", ps=None)
    cluster.set_phase("test-tfjob-worker-2", "Succeeded", exit_code=0)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    decision = cluster.step(at(10))
    assert "test-tfjob-worker-2" in deleted_pod_names(decision)
    assert decision.status["replicaStatuses"]["Worker"].get("succeeded", 0) == 0
    assert_still_running(decision.status)


# --- success rules ---------------------------------------------------------------------------------------
def test_success_via_replaced_worker_zero():
    cluster = running_cluster(workers=2, ps=None)
    cluster.remove_pod("test-tfjob-worker-0")
    cluster.step(at(10))
    cluster.step(at(20))
    cluster.set_phase("test-tfjob-worker-0", "Succeeded", exit_code=0)
    decision = cluster.step(at(30))
    assert condition_types(decision.status)[-1] == ("Succeeded", "True")


def test_a_succeeded_worker_forgets_its_failover_history():
    cluster = running_cluster(workers=2, ps=None, success_policy="AllWorkers")
    cluster.remove_pod(W1)
    cluster.step(at(10))
    cluster.step(at(20))
    assert workers_status(cluster)["1"]["state"] == "Replaced"
    cluster.set_phase(W1, "Succeeded", exit_code=0)
    decision = cluster.step(at(30))
    assert_still_running(decision.status)
    assert workers_status(cluster) == {}


def test_success_when_remaining_workers_finish_after_worker_zero_failed_for_good():
    cluster = running_cluster(workers=3, restart_policy="Never", ps=None)
    cluster.set_phase("test-tfjob-worker-0", "Failed", exit_code=1)
    assert_still_running(cluster.step(at(10)).status)
    cluster.set_phase("test-tfjob-worker-1", "Succeeded", exit_code=0)
    assert_still_running(cluster.step(at(20)).status)
    cluster.set_phase("test-tfjob-worker-2", "Succeeded", exit_code=0)
    decision = cluster.step(at(30))
    assert condition_types(decision.status)[-1] == ("Succeeded", "True")
    assert decision.status["replicaStatuses"]["Worker"] == {
        "succeeded": 2,
        "failed": 1,
        "selector": decision.status["replicaStatuses"]["Worker"]["selector"],
    }


def test_all_workers_failed_for_good_leaves_the_job_running():
    cluster = running_cluster(workers=2, restart_policy="Never", ps=None)
    for name in ("test-tfjob-worker-0", "test-tfjob-worker-1"):
        cluster.set_phase(name, "Failed", exit_code=1)
    decision = cluster.step(at(10))
    assert_still_running(decision.status)
    assert decision.status["replicaStatuses"]["Worker"]["failed"] == 2


def test_all_workers_policy_waits_for_every_worker():
    cluster = running_cluster(workers=2, success_policy="AllWorkers", ps=None)
    cluster.set_phase("test-tfjob-worker-0", "Succeeded", exit_code=0)
    assert_still_running(cluster.step(at(10)).status)
    cluster.set_phase("test-tfjob-worker-1", "Succeeded", exit_code=0)
    assert condition_types(cluster.step(at(20)).status)[-1] == ("Succeeded", "True")


def test_chief_decides_success_in_a_dynamic_job():
    cluster = running_cluster(workers=2, chief=1)
    cluster.set_phase("test-tfjob-worker-0", "Failed", exit_code=1)
    cluster.step(at(5))
    cluster.set_phase("test-tfjob-chief-0", "Succeeded", exit_code=0)
    assert condition_types(cluster.step(at(10)).status)[-1] == ("Succeeded", "True")


# --- other replica types keep upstream behaviour ------------------------------------------------------
def test_failed_ps_fails_a_dynamic_job():
    cluster = running_cluster()
    cluster.set_phase("test-tfjob-ps-0", "Failed", exit_code=1)
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == ("Failed", "True")
    assert decision.status["conditions"][-1]["message"] == (
        "TFJob default/test-tfjob has failed because 1 PS replica(s) failed."
    )


def test_deleted_ps_of_a_dynamic_job_is_failed_over_under_never():
    # A disruption of a dynamic job's PS is no failure (test_decide_ps_failover.py holds the whole table).
    cluster = running_cluster()
    cluster.terminate_pod("test-tfjob-ps-0")
    assert_still_running(cluster.step(at(10)).status)


def test_failed_evaluator_and_chief_fail_a_dynamic_job():
    for replica_type, kwargs in (("evaluator", {"evaluator": 1}), ("chief", {"chief": 1})):
        cluster = running_cluster(**kwargs)
        cluster.set_phase(f"test-tfjob-{replica_type}-0", "Failed", exit_code=1)
        assert condition_types(cluster.step(at(10)).status)[-1] == ("Failed", "True")


def test_ps_restart_in_a_dynamic_job_uses_restarting_as_upstream():
    cluster = running_cluster(restart_policy="OnFailure")
    cluster.set_phase("test-tfjob-ps-0", "Failed", exit_code=1)
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == ("Restarting", "True")
    assert deleted_pod_names(decision) == ["test-tfjob-ps-0"]


def test_an_evicted_ps_of_a_dynamic_job_is_failed_over_not_restarted():
    cluster = running_cluster(restart_policy="OnFailure")
    cluster.set_phase("test-tfjob-ps-0", "Failed", reason="Evicted")
    decision = cluster.step(at(10))
    assert_still_running(decision.status)
    assert deleted_pod_names(decision) == ["test-tfjob-ps-0"]
    assert "PSFailover" in event_reasons(decision)


# --- persisted state ------------------------------------------------------------------------------------
def oom_kill(cluster, name: str, now: float):
    """The pod ``name`` is OOM-killed at ``now`` (it ran 5 s); decide on it."""
    cluster.set_phase(
        name, "Failed", exit_code=137, termination_reason="OOMKilled", started_at=ts(now - 5), finished_at=ts(now)
    )
    return cluster.step(at(now))


def test_state_lives_only_in_the_status():
    cluster = running_cluster(restart_policy="ExitCode")
    oom_kill(cluster, W1, 100)
    assert created_pod_names(cluster.step(at(100.5))) == [W1]  # first failure: replaced at once
    cluster.run_all(started_at=ts(101))
    oom_kill(cluster, W1, 150)  # second: backs off until 160
    # a new controller process: only the stored job (JSON round trip), no memory
    stored = json.loads(json.dumps(cluster.job))
    restarted = decide(stored, cluster.pods, cluster.services, at(154))
    assert restarted.actions == () and restarted.events == ()
    assert restarted.requeue_after == 6.0
    assert created_pod_names(decide(stored, cluster.pods, cluster.services, at(160))) == [W1]
    # and the first failover's record survives a restart too: the next one is the third
    assert stored["status"]["dynamicWorkers"]["workers"]["1"]["failovers"] == 2


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        5,
        "x",
        {"workers": 3},
        {"workers": {"1": 5, "x": {"state": "Failed"}, "-1": {"state": "Replacing"}, "2": {"state": "Weird"}}},
        {"members": "0-2"},
        {"members": [0, 1, 1]},
        {"members": [2, 1, 0]},
        {"members": [0, -1, 2]},
        {"members": [0, True, 2]},
        {"members": [0, 1, 10**12]},
    ],
)
def test_malformed_dynamic_status_is_ignored(garbage):
    """An unreadable record counts as none: the members are 0..replicas-1 (here the pods that run)."""
    cluster = running_cluster()
    cluster.job["status"]["dynamicWorkers"] = garbage
    decision = cluster.decide(at(10))
    assert decision.actions == () and decision.events == ()
    assert decision.status["dynamicWorkers"] == {"members": [0, 1, 2], "summary": "0-2", "workers": {}}


def test_suspend_clears_failover_history_and_resume_starts_fresh():
    cluster = running_cluster()
    cluster.remove_pod(W1)
    cluster.step(at(10))
    cluster.job["spec"]["runPolicy"] = {"suspend": True}
    cluster.step(at(11))
    assert workers_status(cluster) == {}
    cluster.job["spec"]["runPolicy"] = {"suspend": False}
    resumed = cluster.step(at(12))
    # worker 1 was already gone: a fresh start; the others still terminate: wait, no failover
    assert created_pod_names(resumed) == [W1]
    assert [a.service["metadata"]["name"] for a in actions_of(resumed, CreateService)] == [W1]
    assert resumed.events == (Event("Normal", "TFJobResumed", "TFJob test-tfjob is resumed."),)
    for pod in list(cluster.pods):
        if "deletionTimestamp" in pod["metadata"]:
            cluster.remove_pod(pod["metadata"]["name"])
    fresh = cluster.step(at(13))
    assert len(actions_of(fresh, CreatePod)) == 3 and len(actions_of(fresh, CreateService)) == 3
    assert fresh.events == ()


def test_dynamic_status_dropped_when_flag_turned_off():
    cluster = running_cluster()
    cluster.job["spec"]["enableDynamicWorker"] = False
    assert "dynamicWorkers" not in cluster.decide(at(10)).status


def test_service_deleted_by_someone_is_recreated():
    cluster = running_cluster()
    cluster.services.remove(cluster.service(W1))
    decision = cluster.step(at(10))
    assert [a.service["metadata"]["name"] for a in actions_of(decision, CreateService)] == [W1]
    assert decision.events == ()


def test_creation_cap_does_not_look_like_vanished_workers():
    config = DecideConfig(max_creations=4, first_pass_creations=4)
    cluster = Cluster(make_job(worker=5, dynamic=True), config=config)
    first = cluster.step()
    assert len(actions_of(first, CreatePod)) == 4 and len(actions_of(first, CreateService)) == 0
    second = cluster.step(at(1))  # pods come first within a type, then the services of the pods that exist
    assert created_pod_names(second) == ["test-tfjob-worker-4"] and second.events == ()
    assert [a.index for a in actions_of(second, CreateService)] == [0, 1, 2]
    third = cluster.step(at(2))
    assert [a.index for a in actions_of(third, CreateService)] == [3, 4] and third.events == ()
    assert third.status["replicaStatuses"]["Worker"].get("failed", 0) == 0
    assert_converged(cluster, at(3))


def test_duplicate_pods_for_one_index_are_left_alone():
    cluster = running_cluster()
    dup = json.loads(json.dumps(cluster.pod(W1)))
    dup["metadata"]["name"] = "someone-elses-copy"
    dup["metadata"]["uid"] = "dup-uid"
    cluster.pods.append(dup)
    decision = cluster.decide(at(10))
    assert decision.actions == () and decision.events == ()
    assert decision.status["replicaStatuses"]["Worker"]["active"] == 2


def test_failover_history_of_removed_indices_is_dropped():
    cluster = running_cluster(workers=3, restart_policy="ExitCode")
    oom_kill(cluster, "test-tfjob-worker-2", 10)
    cluster.step(at(10.2))  # replaced at once
    oom_kill(cluster, "test-tfjob-worker-2", 10.5)  # again: waits for its back-off
    assert workers_status(cluster)["2"]["state"] == "Replacing"
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    decision = cluster.step(at(11))
    assert workers_status(cluster) == {}
    assert [a.name for a in actions_of(decision, DeleteService)] == ["test-tfjob-worker-2"]
    # Worker 2 had no pod, but it was a member: it leaves, and that is reported.
    assert event_reasons(decision) == ["WorkerScaledDown"]
