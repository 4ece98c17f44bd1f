"""Targeted scale-down of dynamic workers through decide(): who leaves (pod-deletion-cost, the explicit
``spec.workersToDelete``, else the highest index), holes kept in ``status.dynamicWorkers.members`` through
failovers and controller restarts, scale-up refilling the lowest hole, and static jobs untouched. Each
scenario runs on the in-memory Cluster of builders.py, so every step also checks what the previous one
left behind (and that deciding again changes nothing)."""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.tfjob.actions import CreatePod, DeletePod, DeleteService, Event, MetricInc
from controller.tfjob.decide import DecideConfig

from .builders import (
    Cluster,
    actions_of,
    assert_converged,
    assert_still_running,
    at,
    created_pod_names,
    deleted_pod_names,
    disruption_condition,
    event_reasons,
    failover_events,
    make_job,
    running_cluster,
    ts,
)

COST = "controller.kubernetes.io/pod-deletion-cost"


def worker(i: int) -> str:
    return f"test-tfjob-worker-{i}"


def set_workers(cluster: Cluster, replicas: int) -> None:
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = replicas


def members(cluster: Cluster) -> list[int]:
    return cluster.job["status"]["dynamicWorkers"]["members"]


def worker_pods(cluster: Cluster, live: bool = True) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in cluster.pods
        if "-worker-" in p["metadata"]["name"] and not (live and "deletionTimestamp" in p["metadata"])
    )


def scaled_down(decision) -> list[Event]:
    return [e for e in decision.events if e.reason == "WorkerScaledDown"]


def chosen_by(decision) -> list[str]:
    return [dict(m.labels)["chosen_by"] for m in decision.metrics if m.name == "tfjob_worker_scaled_down_total"]


def gone(cluster: Cluster, *indices: int) -> None:
    """The kubelet finished the terminating pods of ``indices``."""
    for i in indices:
        cluster.remove_pod(worker(i))


def test_the_worker_with_the_lowest_deletion_cost_leaves_and_the_others_keep_everything():
    cluster = running_cluster(workers=5)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods}
    tf_configs = {p["metadata"]["name"]: json.dumps(p["spec"]) for p in cluster.pods}
    cluster.annotate(worker(1), {COST: "-100"})
    set_workers(cluster, 4)
    decision = cluster.step(at(10))
    assert [(type(a).__name__, a.name, a.reason) for a in decision.actions] == [
        ("DeletePod", worker(1), "ScaleDown"),
        ("DeleteService", worker(1), "ScaleDown"),
    ]
    assert scaled_down(decision) == [
        Event(
            "Normal",
            "WorkerScaledDown",
            f"Scaled down to 4 worker(s): removed {worker(1)} (pod-deletion-cost -100); workers now 0,2-4",
        )
    ]
    assert decision.metrics == (
        MetricInc("tfjob_worker_scaled_down_total", (("job_namespace", "default"), ("chosen_by", "deletionCost"))),
    )
    dynamic = decision.status["dynamicWorkers"]
    assert (dynamic["members"], dynamic["summary"]) == ([0, 2, 3, 4], "0,2-4")
    assert decision.status["replicaStatuses"]["Worker"]["active"] == 4  # members, not indices
    assert_still_running(decision.status)
    assert_converged(cluster, at(11))  # worker 1 terminates: not deleted again, not replaced
    gone(cluster, 1)
    assert_converged(cluster, at(12))
    for pod in cluster.pods:
        name = pod["metadata"]["name"]
        assert (pod["metadata"]["uid"], json.dumps(pod["spec"])) == (before[name], tf_configs[name])


def test_without_annotations_the_highest_index_leaves_as_upstream():
    cluster = running_cluster(workers=5)
    set_workers(cluster, 3)
    decision = cluster.step(at(10))
    assert deleted_pod_names(decision) == [worker(4), worker(3)]
    assert chosen_by(decision) == ["highestIndex", "highestIndex"]
    assert members(cluster) == [0, 1, 2]


def test_the_explicit_list_removes_the_listed_workers():
    cluster = running_cluster(workers=5)
    cluster.annotate(worker(4), {COST: "-100"})  # the list wins over costs
    cluster.job["spec"]["workersToDelete"] = [2, 0]
    assert_converged(cluster, at(5))  # listing alone changes nothing
    set_workers(cluster, 3)
    decision = cluster.step(at(10))
    assert sorted(deleted_pod_names(decision)) == [worker(0), worker(2)]
    assert scaled_down(decision)[0].message == (
        f"Scaled down to 3 worker(s): removed {worker(2)} (listed in spec.workersToDelete), {worker(0)} (listed in "
        "spec.workersToDelete); workers now 1,3,4"
    )
    assert chosen_by(decision) == ["workersToDelete", "workersToDelete"]
    assert members(cluster) == [1, 3, 4]
    gone(cluster, 0, 2)
    # A listed index is not refilled while it is listed: the scale-up appends.
    set_workers(cluster, 4)
    assert created_pod_names(cluster.step(at(20))) == [worker(5)]
    assert members(cluster) == [1, 3, 4, 5]
    # Unlisted, the lowest hole comes back first.
    del cluster.job["spec"]["workersToDelete"]
    set_workers(cluster, 5)
    assert created_pod_names(cluster.step(at(30))) == [worker(0)]


def without_worker_1() -> Cluster:
    """5 workers scaled to 4 with worker 1 annotated to go: it went; the members are 0, 2, 3, 4."""
    cluster = running_cluster(workers=5)
    cluster.annotate(worker(1), {COST: "-100"})
    set_workers(cluster, 4)
    cluster.step(at(10))
    gone(cluster, 1)
    return cluster


def tf_config(create: CreatePod) -> dict:
    env = {e["name"]: e["value"] for e in create.pod["spec"]["containers"][0]["env"]}
    return json.loads(env["TF_CONFIG"])


def test_a_failover_replaces_the_member_and_never_the_hole():
    cluster = without_worker_1()
    cluster.remove_pod(worker(4))  # deleted by someone: a failover of member 4
    recorded = cluster.step(at(20))  # recorded first; replaced in the next pass
    assert "index 4" in failover_events(recorded)[0].message and created_pod_names(recorded) == []
    decision = cluster.step(at(20))
    assert created_pod_names(decision) == [worker(4)]
    assert members(cluster) == [0, 2, 3, 4]
    assert worker(1) not in worker_pods(cluster)
    # The replacement's TF_CONFIG names its own index (sparse form).
    [create] = actions_of(decision, CreatePod)
    assert tf_config(create)["task"] == {"type": "worker", "index": 4}
    assert list(tf_config(create)["cluster"]["worker"]) == ["4"]


def test_a_controller_restart_keeps_the_hole_because_it_is_recorded():
    cluster = without_worker_1()
    # A fresh controller knows only the API: the same job, pods and services decide the same.
    restarted = Cluster(copy.deepcopy(cluster.job), copy.deepcopy(cluster.pods), copy.deepcopy(cluster.services))
    assert_converged(restarted, at(100))
    # Without the record, the hole would be refilled and worker 4 would be out of range.
    assert restarted.decide(at(100)).status["dynamicWorkers"]["members"] == [0, 2, 3, 4]


def test_scale_up_refills_the_lowest_hole_first_then_appends():
    cluster = running_cluster(workers=5)
    for i in (1, 3):
        cluster.annotate(worker(i), {COST: "-1"})
    set_workers(cluster, 3)
    cluster.step(at(10))
    gone(cluster, 1, 3)
    assert members(cluster) == [0, 2, 4]
    set_workers(cluster, 4)
    decision = cluster.step(at(20))
    assert created_pod_names(decision) == [worker(1)]
    [create] = actions_of(decision, CreatePod)
    assert tf_config(create) == {
        "cluster": {
            "worker": {"1": "test-tfjob-worker-1.default.svc:2222"},
            "ps": ["test-tfjob-ps-0.default.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
    }
    set_workers(cluster, 6)
    assert created_pod_names(cluster.step(at(30))) == [worker(3), worker(5)]
    assert members(cluster) == [0, 1, 2, 3, 4, 5]
    assert cluster.job["status"]["dynamicWorkers"]["summary"] == "0-5"


def test_a_lost_status_write_chooses_the_same_worker_again():
    cluster = running_cluster(workers=5)
    cluster.annotate(worker(1), {COST: "-100"})
    old_status = copy.deepcopy(cluster.job["status"])
    set_workers(cluster, 4)
    first = cluster.step(at(10))
    cluster.job["status"] = old_status  # the deletions went through, the status write did not
    del cluster.pod(worker(1))["metadata"]["annotations"]  # and nothing of the choice is left on the pod
    retry = cluster.step(at(11))
    assert retry.actions == ()  # worker 1 is already leaving: nobody else is removed
    assert retry.status["dynamicWorkers"]["members"] == [0, 2, 3, 4]
    assert event_reasons(retry) == ["WorkerScaledDown"]  # reported with the transition that is now recorded
    assert len(scaled_down(first)) == 1


def test_an_unparsable_deletion_cost_counts_as_zero_with_a_warning_naming_the_pod():
    cluster = running_cluster(workers=3)
    cluster.annotate(worker(0), {COST: "low"})
    set_workers(cluster, 2)
    decision = cluster.step(at(10))
    assert deleted_pod_names(decision) == [worker(2)]
    assert [e for e in decision.events if e.type == "Warning"] == [
        Event(
            "Warning",
            "InvalidPodDeletionCost",
            f"Pod {worker(0)} has annotation {COST}='low', which is not an int32: it counts as 0 when choosing the "
            "workers to remove",
        )
    ]
    assert_converged(cluster, at(11))  # reported with the choice, not on every pass


def test_removing_worker_zero_leaves_success_to_the_remaining_workers():
    cluster = running_cluster(workers=3, ps=None)
    cluster.annotate(worker(0), {COST: "-1"})
    set_workers(cluster, 2)
    cluster.step(at(10))
    assert members(cluster) == [1, 2]
    cluster.set_phase(worker(0), "Succeeded", exit_code=0)  # the leaving pod finished on its way out
    assert_still_running(cluster.step(at(11)).status)
    cluster.set_phase(worker(1), "Succeeded", exit_code=0)
    assert_still_running(cluster.step(at(12)).status)
    cluster.set_phase(worker(2), "Succeeded", exit_code=0)
    assert cluster.step(at(13)).status["conditions"][-1]["type"] == "Succeeded"


def test_static_jobs_ignore_annotations_and_record_no_members():
    cluster = Cluster(make_job(worker=3, ps=1))
    cluster.step(at(0))
    cluster.run_all(started_at=ts())
    cluster.step(at(1))
    cluster.annotate(worker(0), {COST: "-100"})
    set_workers(cluster, 2)
    decision = cluster.step(at(10))
    assert deleted_pod_names(decision) == [worker(2)]
    assert [a.name for a in actions_of(decision, DeleteService)] == [worker(2)]
    assert "dynamicWorkers" not in decision.status
    assert not scaled_down(decision) and chosen_by(decision) == []


def test_scale_down_and_failover_in_one_pass():
    cluster = running_cluster(workers=4, restart_policy="ExitCode")
    cluster.annotate(worker(3), {COST: "-1"})
    cluster.set_phase(worker(1), "Failed", exit_code=137, termination_reason="OOMKilled")
    set_workers(cluster, 3)
    decision = cluster.step(at(10))
    assert [(a.name, a.reason) for a in actions_of(decision, DeletePod)] == [
        (worker(3), "ScaleDown"),
        (worker(1), "Failover"),
    ]
    assert members(cluster) == [0, 1, 2]
    assert created_pod_names(cluster.step(at(11))) == [worker(1)]


# --- any sequence keeps the members right ------------------------------------------------------------------
FAST = DecideConfig(failover_backoff_base=1.0, failover_backoff_cap=2.0, failover_reset_after=5.0)
OPS = st.one_of(
    st.tuples(st.just("scale"), st.integers(0, 6)),
    st.tuples(st.just("cost"), st.integers(0, 9), st.integers(-100, 100), st.integers(1, 3)),
    st.tuples(st.just("list"), st.lists(st.integers(0, 9), max_size=3), st.integers(0, 3)),
    st.tuples(st.just("unlist")),
    st.tuples(st.just("failover"), st.integers(0, 9), st.sampled_from(["remove", "terminate", "oom", "evict"])),
    st.tuples(st.just("crash")),  # the controller dies after its writes to pods, before its status write
    st.tuples(st.just("restart")),  # a new controller: nothing but what the API holds
    st.tuples(st.just("kubelet")),  # terminating pods finish, pending ones run
)


class Run:
    """A dynamic job driven by ``decide`` through a sequence of operations, checking every decision."""

    def __init__(self) -> None:
        self.cluster = running_cluster(workers=3, restart_policy="ExitCode")
        self.cluster.config = FAST
        self.now = 10.0

    def live_workers(self) -> list[dict]:
        return [
            p
            for p in self.cluster.pods
            if "-worker-" in p["metadata"]["name"] and "deletionTimestamp" not in p["metadata"]
        ]

    def pick(self, n: int) -> str | None:
        live = sorted(p["metadata"]["name"] for p in self.live_workers())
        return live[n % len(live)] if live else None

    def reconcile(self, lose_status: bool = False) -> None:
        self.now += 1
        cluster = self.cluster
        old_status = copy.deepcopy(cluster.job["status"])
        before = tuple(members(cluster))
        replicas = cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
        decision = cluster.step(at(self.now))
        after = decision.status["dynamicWorkers"]["members"]
        assert after == sorted(set(after)), after
        assert len(after) == replicas, (after, replicas)  # the members follow replicas in one pass
        joined = set(after) - set(before)
        assert not joined or replicas > len(before), f"{joined} rejoined unasked"
        listed = set(cluster.job["spec"].get("workersToDelete") or [])
        assert not joined & listed, "a listed index was refilled"
        for create in actions_of(decision, CreatePod):
            assert create.index in after, f"pod created for {create.index}, no member of {after}"
        if lose_status:
            cluster.job["status"] = old_status

    def apply(self, op: tuple) -> None:
        cluster, workers = self.cluster, cluster_workers(self.cluster)
        if op[0] == "scale":
            set_workers(cluster, op[1])
        elif op[0] == "cost" and (name := self.pick(op[1])) is not None:
            cluster.annotate(name, {COST: str(op[2])})
            set_workers(cluster, max(0, workers - op[3]))
        elif op[0] == "list":
            current = members(cluster)
            cluster.job["spec"]["workersToDelete"] = (
                list(dict.fromkeys(current[i % len(current)] for i in op[1]))[: len(current)] if current else []
            )
            set_workers(cluster, max(0, workers - op[2]))
        elif op[0] == "unlist":
            cluster.job["spec"].pop("workersToDelete", None)
        elif op[0] == "failover" and (name := self.pick(op[1])) is not None:
            if op[2] == "remove":
                cluster.remove_pod(name)
            elif op[2] == "terminate":
                cluster.terminate_pod(name)
            elif op[2] == "oom":
                cluster.set_phase(name, "Failed", exit_code=137, termination_reason="OOMKilled")
            else:
                cluster.set_phase(name, "Running", conditions=[disruption_condition()])
        elif op[0] == "kubelet":
            self.kubelet()
        elif op[0] == "restart":
            self.cluster = Cluster(
                copy.deepcopy(cluster.job), copy.deepcopy(cluster.pods), copy.deepcopy(cluster.services), FAST
            )
        self.reconcile(lose_status=op[0] == "crash")

    def kubelet(self) -> None:
        for pod in list(self.cluster.pods):
            if "deletionTimestamp" in pod["metadata"]:
                self.cluster.pods.remove(pod)
            elif pod["status"].get("phase") == "Pending":
                self.cluster.set_phase(pod["metadata"]["name"], "Running", started_at=ts(self.now))

    def settle(self) -> None:
        for _ in range(20):
            self.kubelet()
            self.now += 3
            decision = self.cluster.step(at(self.now))
            if not decision.actions and all(p["status"].get("phase") == "Running" for p in self.cluster.pods):
                break
        replicas = self.cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
        indices = sorted(int(p["metadata"]["name"].rsplit("-", 1)[1]) for p in self.live_workers())
        assert indices == members(self.cluster), (indices, members(self.cluster))
        assert len(indices) == replicas


def cluster_workers(cluster: Cluster) -> int:
    return len(members(cluster))


@settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(OPS, min_size=1, max_size=12))
def test_any_sequence_keeps_members_unique_refills_only_when_asked_and_converges(ops):
    run = Run()
    for op in ops:
        run.apply(op)
    run.settle()


def test_a_pass_that_removes_leavers_or_records_a_failover_writes_its_status_first_and_creates_nothing():
    # A pure scale-down records the members before the removals (executor.py); a pass that also records a
    # failover writes its status first as well, and holds the replacement back for the next pass, so that the
    # record written first never says "replaced" before the replacement was sent.
    cluster = running_cluster(workers=3)
    set_workers(cluster, 2)
    assert cluster.decide(at(10)).status_first

    cluster = running_cluster(workers=3)
    cluster.remove_pod(worker(0))  # vanished: recorded in this pass, replaced in the next
    set_workers(cluster, 2)
    decision = cluster.step(at(10))
    assert created_pod_names(decision) == [] and worker(2) in deleted_pod_names(decision)
    assert decision.status_first
    assert cluster.job["status"]["dynamicWorkers"]["workers"]["0"]["state"] == "Replacing"
    replaced = cluster.step(at(10))
    assert created_pod_names(replaced) == [worker(0)] and not replaced.status_first
    assert cluster.job["status"]["dynamicWorkers"]["workers"]["0"]["state"] == "Replaced"
