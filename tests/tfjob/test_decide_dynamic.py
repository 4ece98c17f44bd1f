"""Dynamic workers (``enableDynamicWorker: true``): failover, back-off, permanent failures,
scaling, success rules and the persisted history. Each scenario runs decisions against the
in-memory Cluster of builders.py, so every step also checks what the previous one left behind."""

from __future__ import annotations

import json

import pytest

from controller.tfjob.actions import CreatePod, CreateService, DeletePod, DeleteService, Event, MetricInc
from controller.tfjob.decide import DecideConfig, decide, failover_delay

from .builders import (
    NOW,
    Cluster,
    actions_of,
    assert_converged,
    at,
    condition_types,
    created_pod_names,
    deleted_pod_names,
    disruption_condition,
    event_reasons,
    make_job,
    ts,
)

W1 = "test-tfjob-worker-1"


def running_cluster(workers: int = 3, restart_policy: str | None = None, **kwargs) -> Cluster:
    """A dynamic job whose pods all run (workers + 1 PS unless ps=None given), converged at t=1."""
    kwargs.setdefault("ps", 1)
    cluster = Cluster(make_job(worker=workers, dynamic=True, restart_policy=restart_policy, **kwargs))
    cluster.step(NOW)
    cluster.run_all(started_at=ts())
    decision = cluster.step(at(1))
    assert ("Running", "True") in condition_types(decision.status)
    assert_converged(cluster, at(1))
    return cluster


def workers_status(cluster: Cluster) -> dict:
    return cluster.job["status"]["dynamicWorkers"]["workers"]


def assert_still_running(status: dict) -> None:
    types = condition_types(status)
    assert types[-1] == ("Running", "True"), types  # no flap to Restarting, never Failed
    assert not any(t in ("Failed", "Restarting") for t, _ in types)


def failover_events(decision) -> list[Event]:
    return [e for e in decision.events if e.reason == "WorkerFailover"]


# --- a worker that disappears ---------------------------------------------------------------------
def test_deleted_worker_is_replaced_at_once_and_a_repeat_backs_off():
    cluster = running_cluster()
    cluster.remove_pod(W1)  # deleted by someone else, gone at once
    decision = cluster.step(at(100))
    assert created_pod_names(decision) == [W1]  # the first failover: no back-off
    assert actions_of(decision, CreateService) == []  # the service stayed
    assert_still_running(decision.status)
    assert failover_events(decision) == [
        Event(
            "Warning",
            "WorkerFailover",
            f"Worker {W1} (index 1) was deleted (Deleted): replacing it as soon as it is gone (failover 1)",
        )
    ]
    assert decision.metrics == (
        MetricInc("tfjob_worker_failovers_total", (("job_namespace", "default"), ("reason", "Deleted"))),
    )
    assert decision.requeue_after is None
    assert workers_status(cluster) == {
        "1": {"state": "Replaced", "failovers": 1, "lastFailoverTime": ts(100), "lastReason": "Deleted"}
    }
    assert_converged(cluster, at(101))

    cluster.remove_pod(W1)  # the same index again, before it ran 10 minutes: now it backs off
    again = cluster.step(at(200))
    assert again.actions == ()
    assert failover_events(again) == [
        Event(
            "Warning",
            "WorkerFailover",
            f"Worker {W1} (index 1) was deleted (Deleted): replacing it after a 10s back-off (failover 2)",
        )
    ]
    assert again.requeue_after == 10.0
    assert workers_status(cluster) == {
        "1": {
            "state": "Replacing",
            "failovers": 2,
            "lastFailoverTime": ts(200),
            "lastReason": "Deleted",
            "retryAfter": ts(210),
        }
    }
    assert assert_converged(cluster, at(205)).requeue_after == 5.0  # a controller restart changes nothing
    replaced = cluster.step(at(210))
    assert created_pod_names(replaced) == [W1]
    assert workers_status(cluster)["1"]["state"] == "Replaced"
    assert replaced.events == () and replaced.metrics == ()
    assert_converged(cluster, at(211))


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
    assert created_pod_names(decision) == [W1]


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
    assert workers_status(cluster)["1"]["failovers"] == 8

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
        "lastFailoverTime": ts(-2000),
        "lastReason": "Error",
    }
    cluster.set_phase(W1, "Failed", exit_code=143, started_at=ts(0), finished_at=ts(900))
    decision = cluster.step(at(900))
    assert decision.requeue_after is None  # a first failover: no back-off
    assert workers_status(cluster)["1"]["failovers"] == 1


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
            "Normal", "WorkerScaledDown", "Scaled down to 2 worker(s): removed test-tfjob-worker-3, test-tfjob-worker-2"
        ),
    )
    assert decision.metrics == (MetricInc("tfjob_worker_scaled_down_total", (("job_namespace", "default"),)),) * 2
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


def test_deleted_ps_fails_a_dynamic_job_under_never():
    cluster = running_cluster()
    cluster.terminate_pod("test-tfjob-ps-0")
    assert condition_types(cluster.step(at(10)).status)[-1] == ("Failed", "True")


def test_failed_evaluator_and_chief_fail_a_dynamic_job():
    for replica_type, kwargs in (("evaluator", {"evaluator": 1}), ("chief", {"chief": 1})):
        cluster = running_cluster(**kwargs)
        cluster.set_phase(f"test-tfjob-{replica_type}-0", "Failed", exit_code=1)
        assert condition_types(cluster.step(at(10)).status)[-1] == ("Failed", "True")


def test_ps_restart_in_a_dynamic_job_uses_restarting_as_upstream():
    cluster = running_cluster(restart_policy="OnFailure")
    cluster.set_phase("test-tfjob-ps-0", "Failed", reason="Evicted")
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == ("Restarting", "True")
    assert deleted_pod_names(decision) == ["test-tfjob-ps-0"]


# --- persisted state ------------------------------------------------------------------------------------
def test_state_lives_only_in_the_status():
    cluster = running_cluster()
    cluster.remove_pod(W1)
    cluster.step(at(100))  # first failover: replaced at once
    cluster.remove_pod(W1)
    cluster.step(at(150))  # second: backs off until 160
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
    ],
)
def test_malformed_dynamic_status_is_ignored(garbage):
    cluster = running_cluster()
    cluster.job["status"]["dynamicWorkers"] = garbage
    decision = cluster.decide(at(10))
    assert decision.actions == () and decision.events == ()
    assert decision.status["dynamicWorkers"] == {"workers": {}}


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
    cluster = running_cluster(workers=3)
    cluster.remove_pod("test-tfjob-worker-2")
    cluster.step(at(10))  # replaced at once
    cluster.remove_pod("test-tfjob-worker-2")
    cluster.step(at(10.5))  # again: waits for its back-off
    assert workers_status(cluster)["2"]["state"] == "Replacing"
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    decision = cluster.step(at(11))
    assert workers_status(cluster) == {}
    assert [a.name for a in actions_of(decision, DeleteService)] == ["test-tfjob-worker-2"]
    assert decision.events == ()  # no pod was removed
