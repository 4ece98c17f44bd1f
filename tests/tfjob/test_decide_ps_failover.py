"""A dynamic job's parameter servers: the table of replica type x cause x restartPolicy -> outcome
(docs/tfjob-compatibility.md §3.9). A disrupted PS is re-created at its name and address whatever its
restartPolicy, the job never leaves Running, the workers are untouched, one PSFailover event and one
tfjob_replica_failovers_total increment per disrupted pod; a PS's own failure, and every other type,
follow upstream's rules."""

from __future__ import annotations

import pytest

from controller.tfjob.actions import MetricInc

from .builders import (
    assert_converged,
    assert_still_running,
    at,
    condition_types,
    created_pod_names,
    deleted_pod_names,
    disruption_condition,
    event_reasons,
    running_cluster,
)

PS0 = "test-tfjob-ps-0"
POLICIES = ("Never", "OnFailure", "ExitCode", "Always")


def lose(cluster, name: str, cause: str) -> None:
    """Make pod ``name`` meet ``cause`` as the API server and kubelet show it."""
    if cause == "deleted":
        cluster.terminate_pod(name)
    elif cause == "evicted":  # the Eviction API: DisruptionTarget, then graceful deletion
        cluster.terminate_pod(name, conditions=[disruption_condition("EvictionByEvictionAPI")])
    elif cause == "pressure":  # the kubelet's node-pressure eviction: phase Failed, reason Evicted
        cluster.set_phase(name, "Failed", reason="Evicted")
    elif cause == "preempted":
        cluster.terminate_pod(name, conditions=[disruption_condition("PreemptionByScheduler")])
    elif cause == "node-lost":
        cluster.set_phase(name, "Unknown")
    elif cause == "vanished":  # gone before the controller saw it go (force deletion, a missed watch event)
        cluster.remove_pod(name)
    elif cause == "error":
        cluster.set_phase(name, "Failed", exit_code=1)
    elif cause == "oom":
        cluster.set_phase(name, "Failed", exit_code=137, termination_reason="OOMKilled")
    else:
        raise AssertionError(cause)


DISRUPTIONS = {
    "deleted": "Deleted",
    "evicted": "Evicted",
    "pressure": "Evicted",
    "preempted": "Preempted",
    "node-lost": "NodeLost",
    "vanished": "Deleted",
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cause", sorted(DISRUPTIONS))
def test_a_disrupted_ps_is_re_created_at_its_address_and_the_job_runs_on(cause: str, policy: str) -> None:
    cluster = running_cluster(restart_policy=policy)
    workers = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods if "-worker-" in p["metadata"]["name"]}
    old_uid = cluster.pod(PS0)["metadata"]["uid"]
    lose(cluster, PS0, cause)
    decision = cluster.step(at(10))
    assert_still_running(decision.status)
    assert event_reasons(decision).count("PSFailover") == 1
    [event] = [e for e in decision.events if e.reason == "PSFailover"]
    assert event.type == "Warning" and f"({DISRUPTIONS[cause]})" in event.message and PS0 in event.message
    assert "the workers keep running" in event.message
    assert decision.metrics == (
        MetricInc(
            "tfjob_replica_failovers_total",
            (("job_namespace", "default"), ("replica_type", "PS"), ("reason", DISRUPTIONS[cause])),
        ),
    )
    assert not [n for n in deleted_pod_names(decision) if "-worker-" in n], "the workers are left alone"
    for _ in range(4):  # the old pod goes, a new one at the same name comes
        if cluster.pod(PS0) is not None and "deletionTimestamp" in cluster.pod(PS0)["metadata"]:
            cluster.remove_pod(PS0)
        decision = cluster.step(at(20))
        assert "PSFailover" not in event_reasons(decision), "one disruption, one event"
        assert_still_running(decision.status)
    new = cluster.pod(PS0)
    assert new is not None and new["metadata"]["uid"] != old_uid
    assert cluster.service(PS0) is not None
    assert {n: cluster.pod(n)["metadata"]["uid"] for n in workers} == workers
    cluster.run_all()
    decision = cluster.step(at(30))
    assert_still_running(decision.status)
    record = cluster.job["status"]["dynamicWorkers"]["parameterServers"]["0"]
    assert record["failovers"] == 1 and record["lastReason"] == DISRUPTIONS[cause] and record["state"] == "Replaced"
    assert_converged(cluster, at(30))


def test_a_second_disruption_of_the_same_index_counts_again() -> None:
    cluster = running_cluster(restart_policy="Never")
    for round_, at_s in ((1, 10), (2, 40)):
        lose(cluster, PS0, "deleted")
        assert event_reasons(cluster.step(at(at_s))).count("PSFailover") == 1
        cluster.remove_pod(PS0)
        assert created_pod_names(cluster.step(at(at_s + 1))) == [PS0]
        cluster.run_all()
        cluster.step(at(at_s + 2))
        assert cluster.job["status"]["dynamicWorkers"]["parameterServers"]["0"]["failovers"] == round_


def test_with_two_ps_only_the_lost_one_is_replaced() -> None:
    cluster = running_cluster(ps=2, restart_policy="Never")
    ps1 = cluster.pod("test-tfjob-ps-1")["metadata"]["uid"]
    lose(cluster, PS0, "deleted")
    cluster.step(at(10))
    cluster.remove_pod(PS0)
    assert created_pod_names(cluster.step(at(11))) == [PS0]
    assert cluster.pod("test-tfjob-ps-1")["metadata"]["uid"] == ps1


@pytest.mark.parametrize(
    ("cause", "policy", "outcome"),
    [
        ("error", "Never", "Failed"),
        ("oom", "Never", "Failed"),
        ("error", "OnFailure", "Restarting"),
        ("oom", "Always", "Restarting"),
        ("error", "ExitCode", "Failed"),  # exit code 1: permanent under ExitCode
        ("oom", "ExitCode", "Restarting"),  # 137: retryable under ExitCode
    ],
)
def test_a_ps_that_fails_by_itself_follows_upstreams_rules(cause: str, policy: str, outcome: str) -> None:
    cluster = running_cluster(restart_policy=policy)
    lose(cluster, PS0, cause)
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == (outcome, "True")
    assert "PSFailover" not in event_reasons(decision)
    assert "parameterServers" not in cluster.job["status"]["dynamicWorkers"]


@pytest.mark.parametrize("replica_type", ["chief", "evaluator"])
def test_a_disrupted_chief_or_evaluator_is_unchanged_upstream(replica_type: str) -> None:
    cluster = running_cluster(restart_policy="Never", **{replica_type: 1})
    lose(cluster, f"test-tfjob-{replica_type}-0", "deleted")
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == ("Failed", "True")
    assert "PSFailover" not in event_reasons(decision)


def test_a_static_job_keeps_upstreams_ps_rules() -> None:
    from .builders import Cluster, make_job

    cluster = Cluster(make_job(worker=2, ps=1, dynamic=False, restart_policy="Never"))
    cluster.step(at(0))
    cluster.run_all()
    cluster.step(at(1))
    lose(cluster, PS0, "deleted")
    decision = cluster.step(at(10))
    assert condition_types(decision.status)[-1] == ("Failed", "True")
    assert "PSFailover" not in event_reasons(decision)
