"""What a pass stores before its pod writes, so that a controller killed between them leaves its successor a
record that still says what happened (docs/tfjob-compatibility.md, "Membership is recorded", and section 4).

Each row kills the controller at the worst point: the status of the pass is stored and its pod writes are not
(or only some are) sent, and a fresh decision on what the cluster then holds must end where an uninterrupted
run ends.
"""

from __future__ import annotations

import copy

import pytest

from controller.tfjob.actions import DeletePod, DeleteService

from .builders import (
    Cluster,
    assert_converged,
    at,
    created_pod_names,
    deleted_pod_names,
    event_reasons,
    failover_events,
    make_job,
    running_cluster,
    ts,
    workers_status,
)

W1 = "test-tfjob-worker-1"
PS0 = "test-tfjob-ps-0"


def store_status_only(cluster: Cluster, now_offset: float) -> None:
    """One pass killed right after its status write: the status stored, no pod or service write sent."""
    decision = cluster.decide(at(now_offset))
    assert decision.status_first, "a pass whose pod writes act on its record stores the record first"
    cluster.job["status"] = copy.deepcopy(decision.status)


@pytest.mark.parametrize(("phase_kwargs", "reason"), [({"exit_code": 137}, "OOMKilled"), ({"exit_code": 1}, "Error")])
def test_a_failed_worker_killed_before_its_deletion_keeps_its_cause(phase_kwargs: dict, reason: str) -> None:
    cluster = running_cluster(restart_policy="OnFailure")
    cluster.set_phase(W1, "Failed", **phase_kwargs)
    store_status_only(cluster, 10)
    record = workers_status(cluster)["1"]
    assert (record["state"], record["lastReason"], record["failures"]) == ("Replacing", reason, 1)
    again = cluster.step(at(11))  # the successor: deletes the pod, counts nothing again
    assert deleted_pod_names(again) == [W1] and failover_events(again) == []
    if cluster.pod(W1) is not None:  # a graceful deletion: gone once it terminated
        cluster.remove_pod(W1)
    replaced = cluster.step(at(12))
    assert created_pod_names(replaced) == [W1] and failover_events(replaced) == []
    assert workers_status(cluster)["1"]["failovers"] == 1 and workers_status(cluster)["1"]["lastReason"] == reason


def test_a_vanished_worker_is_recorded_before_it_is_re_created() -> None:
    cluster = running_cluster(restart_policy="Never")
    cluster.remove_pod(W1)
    store_status_only(cluster, 10)
    assert workers_status(cluster)["1"]["state"] == "Replacing" and workers_status(cluster)["1"]["failovers"] == 1
    replaced = cluster.step(at(11))
    assert created_pod_names(replaced) == [W1] and failover_events(replaced) == []
    assert workers_status(cluster)["1"]["state"] == "Replaced" and workers_status(cluster)["1"]["failovers"] == 1


def test_a_re_created_worker_killed_before_its_status_write_is_counted_once() -> None:
    cluster = running_cluster(restart_policy="Never")
    cluster.remove_pod(W1)
    cluster.step(at(10))  # recorded: Replacing
    create = cluster.decide(at(11))
    assert created_pod_names(create) == [W1] and not create.status_first
    stored = copy.deepcopy(cluster.job["status"])
    cluster.apply(create)
    cluster.job["status"] = stored  # the create sent, the process killed before its status write
    after = cluster.step(at(12))
    assert failover_events(after) == [] and workers_status(cluster)["1"]["failovers"] == 1
    assert workers_status(cluster)["1"]["state"] == "Replaced"


def test_an_evicted_ps_is_recorded_before_its_deletion() -> None:
    cluster = running_cluster(restart_policy="Always")
    cluster.set_phase(PS0, "Failed", reason="Evicted", exit_code=137)
    store_status_only(cluster, 10)
    record = cluster.job["status"]["dynamicWorkers"]["parameterServers"]["0"]
    assert (record["state"], record["lastReason"], record["failovers"]) == ("Replacing", "Evicted", 1)
    again = cluster.step(at(11))
    assert deleted_pod_names(again) == [PS0] and "PSFailover" not in event_reasons(again)


@pytest.mark.parametrize("policy", ["All", "Running"])
def test_a_finished_job_killed_during_its_cleanup_stays_finished_and_finishes_the_cleanup(policy: str) -> None:
    job = make_job(worker=2, ps=1, dynamic=True, restart_policy="Never")
    job["spec"].setdefault("runPolicy", {})["cleanPodPolicy"] = policy
    cluster = Cluster(job)
    cluster.step(at(0))
    cluster.run_all(started_at=ts())
    cluster.step(at(1))
    cluster.set_phase("test-tfjob-worker-0", "Succeeded", exit_code=0)
    finishing = cluster.decide(at(10))
    assert finishing.status_first and ("Succeeded", "True") in [
        (c["type"], c["status"]) for c in finishing.status["conditions"]
    ]
    # Killed after the status write and the first pod's deletion, before its service's.
    cluster.job["status"] = copy.deepcopy(finishing.status)
    first = next(a for a in finishing.actions if isinstance(a, DeletePod))
    cluster.pods.remove(cluster.pod(first.name))
    rest = cluster.step(at(11))
    assert created_pod_names(rest) == []  # never run again
    assert first.name in [a.name for a in rest.actions if isinstance(a, DeleteService)]  # its service goes too
    assert_converged(cluster, at(12))
    assert cluster.service(first.name) is None


def test_suspension_clears_the_parameter_servers_records() -> None:
    cluster = running_cluster(restart_policy="Always")
    cluster.set_phase(PS0, "Failed", reason="Evicted", exit_code=137)
    cluster.step(at(10))
    assert "parameterServers" in cluster.job["status"]["dynamicWorkers"]
    cluster.job["spec"].setdefault("runPolicy", {})["suspend"] = True
    cluster.step(at(11))
    assert "parameterServers" not in cluster.job["status"]["dynamicWorkers"]
    assert workers_status(cluster) == {}


@pytest.mark.parametrize("limit", ["backoffLimit", "activeDeadlineSeconds"])
def test_a_job_failed_on_a_limit_and_killed_before_its_deletions_still_loses_every_pod(limit: str) -> None:
    job = make_job(worker=2, ps=1, dynamic=True, restart_policy="OnFailure")
    job["spec"].setdefault("runPolicy", {})["cleanPodPolicy"] = "None"  # a limit deletes everything regardless
    cluster = Cluster(job)
    cluster.step(at(0))
    cluster.run_all(started_at=ts())
    cluster.step(at(1))
    if limit == "backoffLimit":
        cluster.job["spec"]["runPolicy"]["backoffLimit"] = 0
        cluster.set_phase(PS0, "Failed", exit_code=1)
    else:
        cluster.job["spec"]["runPolicy"]["activeDeadlineSeconds"] = 1
    store_status_only(cluster, 10)
    assert ("Failed", "True") in [(c["type"], c["status"]) for c in cluster.job["status"]["conditions"]]
    rest = cluster.step(at(11))
    assert created_pod_names(rest) == []
    assert sorted(deleted_pod_names(rest)) == ["test-tfjob-ps-0", "test-tfjob-worker-0", "test-tfjob-worker-1"]
    assert len([a for a in rest.actions if isinstance(a, DeleteService)]) == 3
