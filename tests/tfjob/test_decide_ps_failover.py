"""The table of replica type x cause x restartPolicy -> outcome for a dynamic job, docs/tfjob-compatibility.md §3.9.

A disrupted PS is re-created at its name and address whatever its restartPolicy, the job never leaves Running,
the workers are untouched, one PSFailover event and one tfjob_replica_failovers_total increment per disrupted
pod; a PS's own failure, and every Chief and Evaluator row, decide exactly what a static job decides; a Worker
row follows the dynamic workers' state machine (docs/tfjob-compatibility.md §3.2)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.tfjob.actions import Decision, MetricInc

from .builders import (
    Cluster,
    assert_converged,
    assert_still_running,
    at,
    condition_types,
    created_pod_names,
    deleted_pod_names,
    disruption_condition,
    event_reasons,
    failover_events,
    make_job,
    running_cluster,
    ts,
    workers_status,
)

PS0 = "test-tfjob-ps-0"
POLICIES = ("Never", "OnFailure", "ExitCode", "Always")


def lose(cluster: Cluster, name: str, cause: str) -> None:
    """Make pod ``name`` meet ``cause`` as the API server and kubelet show it."""
    if cause == "deleted":
        cluster.terminate_pod(name)
    elif cause == "evicted":  # the Eviction API (a drain): DisruptionTarget, then graceful deletion
        cluster.terminate_pod(name, conditions=[disruption_condition("EvictionByEvictionAPI")])
    elif cause == "pressure":  # the kubelet's node-pressure eviction: phase Failed, reason Evicted
        cluster.set_phase(
            name, "Failed", reason="Evicted", exit_code=137, conditions=[disruption_condition("TerminationByKubelet")]
        )
    elif cause == "preempted":
        cluster.terminate_pod(name, conditions=[disruption_condition("PreemptionByScheduler")])
    elif cause == "node-lost":  # the node stopped reporting: the pod's phase is Unknown
        cluster.set_phase(name, "Unknown")
    elif cause == "node-lost-taint":  # the node NotReady past its toleration: the taint manager deletes the pod
        cluster.terminate_pod(name, conditions=[disruption_condition("DeletionByTaintManager")])
    elif cause == "node-lost-gc":  # the node is gone: pod GC deletes its pods
        cluster.terminate_pod(name, conditions=[disruption_condition("DeletionByPodGC")])
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
    "node-lost-taint": "NodeLost",
    "node-lost-gc": "NodeLost",
    "vanished": "Deleted",
}
OWN_FAILURES = ("error", "oom")
CAUSES = (*sorted(DISRUPTIONS), *OWN_FAILURES)


def uids(cluster: Cluster, part: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods if part in p["metadata"]["name"]}


# --- PS x disruption x any restartPolicy: re-created at its address, the job runs on ---------------------------
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cause", sorted(DISRUPTIONS))
def test_a_disrupted_ps_is_re_created_at_its_address_and_the_job_runs_on(cause: str, policy: str) -> None:
    cluster = running_cluster(restart_policy=policy)
    workers = uids(cluster, "-worker-")
    service = cluster.service(PS0)
    old_uid = cluster.pod(PS0)["metadata"]["uid"]
    lose(cluster, PS0, cause)
    decision = cluster.step(at(10))
    assert_still_running(decision.status)
    assert event_reasons(decision).count("PSFailover") == 1
    [event] = [e for e in decision.events if e.reason == "PSFailover"]
    assert event.type == "Warning" and f"({DISRUPTIONS[cause]})" in event.message and PS0 in event.message
    assert "at the same address" in event.message and "the workers keep running" in event.message
    assert decision.metrics == (
        MetricInc(
            "tfjob_replica_failovers_total",
            (("job_namespace", "default"), ("replica_type", "PS"), ("reason", DISRUPTIONS[cause])),
        ),
    )
    assert "Restarting" not in event_reasons(decision), "a failover is no restart"
    assert not [n for n in deleted_pod_names(decision) if "-worker-" in n], "the workers are left alone"
    for _ in range(4):  # the old pod goes, a new one at the same name comes; disruptions never wait
        if cluster.pod(PS0) is not None and "deletionTimestamp" in cluster.pod(PS0)["metadata"]:
            cluster.remove_pod(PS0)
        decision = cluster.step(at(10))
        assert "PSFailover" not in event_reasons(decision), "one disruption, one event"
        assert_still_running(decision.status)
    new = cluster.pod(PS0)
    assert new is not None and new["metadata"]["uid"] != old_uid
    assert cluster.service(PS0) == service, "the same headless service: the same DNS name in every TF_CONFIG"
    assert uids(cluster, "-worker-") == workers
    cluster.run_all()
    decision = cluster.step(at(30))
    assert_still_running(decision.status)
    ps_status = decision.status["replicaStatuses"]["PS"]
    assert ps_status["active"] == 1 and not ps_status.get("failed"), ps_status
    record = cluster.job["status"]["dynamicWorkers"]["parameterServers"]["0"]
    assert record["failovers"] == 1 and record["lastReason"] == DISRUPTIONS[cause] and record["state"] == "Replaced"
    assert_converged(cluster, at(30))


@pytest.mark.parametrize("cause", ["pressure", "evicted", "deleted"])
def test_a_disrupted_ps_does_not_count_toward_a_zero_backoff_limit(cause: str) -> None:
    cluster = running_cluster(restart_policy="Never", run_policy={"backoffLimit": 0})
    lose(cluster, PS0, cause)
    decision = cluster.step(at(10))
    assert_still_running(decision.status)
    assert "PSFailover" in event_reasons(decision)


def test_a_pressure_evicted_ps_reports_its_exit_code() -> None:
    cluster = running_cluster(restart_policy="Never")
    lose(cluster, PS0, "pressure")
    decision = cluster.step(at(10))
    facts = [e.message for e in decision.events if e.reason == "ExitedWithCode"]
    assert facts == [f"Pod: default.{PS0} exited with code 137"]


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
    others = {n: u for n, u in uids(cluster, "").items() if n != PS0}
    lose(cluster, PS0, "deleted")
    cluster.step(at(10))
    cluster.remove_pod(PS0)
    assert created_pod_names(cluster.step(at(11))) == [PS0]
    assert {n: u for n, u in uids(cluster, "").items() if n != PS0} == others


# --- a disruption seen only as the pod's deletion -------------------------------------------------------------
# Events coalesced, or a relist standing in for missed ones: the controller never saw the pod disrupted or
# terminating, only its deletion, whose final object still shows why it went.
def gone_unseen(cluster: Cluster, name: str, cause: str) -> None:
    lose(cluster, name, cause)
    if cluster.pod(name) is not None:  # "vanished" is gone already
        cluster.remove_pod(name)


@pytest.mark.parametrize("cause", sorted(DISRUPTIONS))
def test_a_ps_gone_unseen_is_failed_over_for_what_its_last_state_shows(cause: str) -> None:
    cluster = running_cluster(restart_policy="OnFailure")
    gone_unseen(cluster, PS0, cause)
    decision = cluster.step(at(10))
    [event] = [e for e in decision.events if e.reason == "PSFailover"]
    assert f"({DISRUPTIONS[cause]})" in event.message, event.message
    assert [m.labels[-1] for m in decision.metrics] == [("reason", DISRUPTIONS[cause])]
    record = cluster.job["status"]["dynamicWorkers"]["parameterServers"]["0"]
    assert record["failovers"] == 1 and record["lastReason"] == DISRUPTIONS[cause]
    assert_still_running(decision.status)


@pytest.mark.parametrize("cause", sorted(DISRUPTIONS))
def test_a_worker_gone_unseen_is_failed_over_for_what_its_last_state_shows(cause: str) -> None:
    cluster = running_cluster(restart_policy="OnFailure")
    gone_unseen(cluster, "test-tfjob-worker-1", cause)
    decision = cluster.step(at(10))
    [event] = failover_events(decision)
    assert f"({DISRUPTIONS[cause]})" in event.message, event.message
    assert workers_status(cluster)["1"]["lastReason"] == DISRUPTIONS[cause]
    assert created_pod_names(decision) == [], "the failover is recorded before the replacement is created"
    assert created_pod_names(cluster.step(at(11))) == ["test-tfjob-worker-1"]


def test_a_departed_pod_a_failover_already_counted_says_nothing_of_the_next_loss() -> None:
    """The evicted PS is seen and counted; its replacement (created a second later) then goes without any
    event reaching the controller: the evicted pod is still the last departed one of the index, but it is
    older than the failover, so the new loss is a deletion, not a second eviction."""
    cluster = running_cluster(restart_policy="OnFailure")
    lose(cluster, PS0, "evicted")
    assert event_reasons(cluster.step(at(10))).count("PSFailover") == 1
    cluster.remove_pod(PS0)
    assert created_pod_names(cluster.step(at(11))) == [PS0]
    cluster.run_all()
    cluster.step(at(12))
    replacement = cluster.pod(PS0)
    assert replacement is not None
    cluster.pods.remove(replacement)  # gone, its deletion never delivered
    decision = cluster.step(at(20))
    [event] = [e for e in decision.events if e.reason == "PSFailover"]
    assert "(Deleted)" in event.message and "(failover 2)" in event.message, event.message
    assert cluster.job["status"]["dynamicWorkers"]["parameterServers"]["0"]["lastReason"] == "Deleted"


def test_a_departed_pod_of_another_job_says_nothing() -> None:
    """A departed pod is used only if the job controls it (by uid): an earlier job of the same name's
    evicted PS does not make this one's loss an eviction."""
    cluster = running_cluster(restart_policy="OnFailure")
    gone_unseen(cluster, PS0, "evicted")
    cluster.departed[-1]["metadata"]["ownerReferences"][0]["uid"] = "uid-of-an-earlier-job"
    [event] = [e for e in cluster.step(at(10)).events if e.reason == "PSFailover"]
    assert "(Deleted)" in event.message, event.message


# --- PS x own failure: upstream's rules for its restartPolicy ---------------------------------------------------
def lose_in(dynamic: bool, replica_type: str, cause: str, policy: str) -> tuple[Cluster, Decision]:
    """A running job (2 workers, 1 PS, one pod of ``replica_type`` if not those) whose ``replica_type`` pod 0
    meets ``cause``; the decision on it."""
    extra = {} if replica_type in ("ps", "worker") else {replica_type: 1}
    cluster = Cluster(make_job(worker=2, ps=1, dynamic=dynamic, restart_policy=policy, **extra))
    cluster.step(at(0))
    cluster.run_all(started_at=ts())
    assert ("Running", "True") in condition_types(cluster.step(at(1)).status)
    lose(cluster, f"test-tfjob-{replica_type}-0", cause)
    return cluster, cluster.step(at(10))


def outcome(decision: Decision) -> tuple[Any, ...]:
    """What a row of the table compares: the last condition, the pods deleted and created, the events, the metrics."""
    return (
        condition_types(decision.status)[-1],
        sorted(deleted_pod_names(decision)),
        sorted(created_pod_names(decision)),
        sorted((e.type, e.reason, e.message) for e in decision.events),
        sorted(m.name for m in decision.metrics),
    )


OWN_FAILURE_OUTCOMES = {
    ("error", "Never"): "Failed",
    ("error", "OnFailure"): "Restarting",
    ("error", "ExitCode"): "Failed",  # exit code 1: permanent under ExitCode
    ("error", "Always"): "Restarting",
    ("oom", "Never"): "Failed",
    ("oom", "OnFailure"): "Restarting",
    ("oom", "ExitCode"): "Restarting",  # 137: retryable under ExitCode
    ("oom", "Always"): "Restarting",
}


@pytest.mark.parametrize(("cause", "policy"), sorted(OWN_FAILURE_OUTCOMES))
def test_a_ps_that_fails_by_itself_follows_upstreams_rules(cause: str, policy: str) -> None:
    cluster, decision = lose_in(True, "ps", cause, policy)
    assert condition_types(decision.status)[-1] == (OWN_FAILURE_OUTCOMES[cause, policy], "True")
    assert "PSFailover" not in event_reasons(decision)
    records = cluster.job["status"]["dynamicWorkers"].get("parameterServers", {})
    if "test-tfjob-ps-0" in deleted_pod_names(decision):
        # Upstream's restart, recorded before the deletion so that the pod going is not taken for a deletion by
        # someone else; no failover counted.
        assert decision.status_first
        assert records["0"]["state"] == "Replacing" and records["0"]["failovers"] == 0
        assert records["0"]["lastReason"] == ("OOMKilled" if cause == "oom" else "Error")
        back = cluster.step(at(11))  # the pod is gone (Cluster.step applies the deletion)
        assert created_pod_names(back) == ["test-tfjob-ps-0"] and "PSFailover" not in event_reasons(back)
    else:
        assert records == {}
    assert not [n for n in deleted_pod_names(decision) if "-worker-" in n]
    assert outcome(decision) == outcome(lose_in(False, "ps", cause, policy)[1]), "the same as a static job"


def test_a_ps_restarted_in_place_by_the_kubelet_needs_nothing() -> None:
    cluster = running_cluster(restart_policy="OnFailure")
    cluster.set_phase(PS0, "Running", restart_count=1, started_at=ts(5))
    decision = cluster.step(at(10))
    assert (decision.actions, decision.events, decision.metrics) == ((), (), ())
    assert_still_running(decision.status)


# --- Chief and Evaluator: every row decides what a static job decides -------------------------------------------
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cause", CAUSES)
@pytest.mark.parametrize("replica_type", ["chief", "evaluator"])
def test_a_lost_chief_or_evaluator_is_unchanged_from_upstream(replica_type: str, cause: str, policy: str) -> None:
    _, dynamic = lose_in(True, replica_type, cause, policy)
    _, static = lose_in(False, replica_type, cause, policy)
    assert outcome(dynamic) == outcome(static)
    assert "PSFailover" not in event_reasons(dynamic)


def test_a_static_job_keeps_upstreams_ps_rules() -> None:
    _, decision = lose_in(False, "ps", "deleted", "Never")
    assert condition_types(decision.status)[-1] == ("Failed", "True")
    assert "PSFailover" not in event_reasons(decision)


# --- Worker of a dynamic job: the state machine of docs/tfjob-compatibility.md §3.2 -----------------------------
def worker_outcome(cause: str, policy: str) -> str:
    """The event a lost worker gets: a failover for a disruption or a retryable own failure, else WorkerFailed."""
    if cause in DISRUPTIONS:
        return "WorkerFailover"
    retryable = policy in ("OnFailure", "Always") or (policy == "ExitCode" and cause == "oom")
    return "WorkerFailover" if retryable else "WorkerFailed"


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("cause", CAUSES)
def test_a_lost_worker_of_a_dynamic_job_never_stops_it(cause: str, policy: str) -> None:
    cluster = running_cluster(restart_policy=policy)
    others = {n: u for n, u in uids(cluster, "").items() if n != "test-tfjob-worker-1"}
    lose(cluster, "test-tfjob-worker-1", cause)
    decision = cluster.step(at(10))
    assert_still_running(decision.status)
    expected = worker_outcome(cause, policy)
    assert expected in event_reasons(decision) and "PSFailover" not in event_reasons(decision)
    record = cluster.job["status"]["dynamicWorkers"]["workers"]["1"]
    if cause == "vanished":  # already gone: recorded first (status_first), replaced in the next pass
        assert record["state"] == "Replacing" and created_pod_names(decision) == [] and decision.status_first
        assert created_pod_names(cluster.step(at(10))) == ["test-tfjob-worker-1"]
        assert cluster.job["status"]["dynamicWorkers"]["workers"]["1"]["state"] == "Replaced"
    else:
        assert record["state"] == ("Replacing" if expected == "WorkerFailover" else "Failed")
    assert {n: u for n, u in uids(cluster, "").items() if n != "test-tfjob-worker-1"} == others
