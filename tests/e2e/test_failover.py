"""Worker failover end to end: OOM kills, non-zero exits, evictions, lost nodes and crash loops.

The promise of ``enableDynamicWorker: true``: a worker that fails or is disrupted never
fails the job; it is replaced (same name and index) when it was disrupted or its restart policy
allows a retry, kept failed otherwise; replacements back off per index so a crash-looping worker
cannot hammer the cluster, and the back-off end is a timed requeue, not a poll. The controller runs
as in production against the simulated cluster; faults come only from pod annotations and the
simulator's node faults, outcomes are read through the API.
"""

from __future__ import annotations

from itertools import pairwise

from controller.runtime.client import PODS
from controller.tfjob.decide import DecideConfig
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    NODES,
    Operator,
    annotate_pod,
    by_name,
    condition,
    create_and_wait_running,
    eventually,
    is_true,
    phase,
    reconciled_once_more,
    running_operator,
    running_pods,
    start_operator,
    tfjob,
    worker_record,
)
from tfjob_sim.kubelet import EVICT, EXIT_CODE, RUN_SECONDS


def failovers(operator: Operator, reason: str) -> float:
    return operator.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": reason})


def uids(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def assert_stays_running(job: dict) -> None:
    assert is_true(job, "Running"), job["status"]
    assert condition(job, "Failed") is None and condition(job, "Restarting") is None, job["status"]["conditions"]


async def test_oom_kill_under_exit_code_is_replaced_with_the_same_name(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("oom", workers=2, restart_policy="ExitCode"), running=2)
    before = uids(await operator.pods("oom"))

    await annotate_pod(operator, "oom-worker-1", {EXIT_CODE: "137"})

    async def replaced() -> bool:
        pods = by_name(running_pods(await operator.pods("oom")))
        return "oom-worker-1" in pods and pods["oom-worker-1"]["metadata"]["uid"] != before["oom-worker-1"]

    await eventually(replaced, what="oom-worker-1 replaced by a new running pod")
    pods = await operator.pods("oom")
    assert [p["metadata"]["name"] for p in pods] == ["oom-worker-0", "oom-worker-1"]
    assert uids(pods)["oom-worker-0"] == before["oom-worker-0"]
    job = await operator.job("oom")
    assert_stays_running(job)
    record = worker_record(job, 1)
    assert record is not None and record["failovers"] == 1 and record["lastReason"] == "OOMKilled", record
    assert record["exitCode"] == 137
    assert failovers(operator, "OOMKilled") == 1
    events = await operator.events("oom")
    failover_events = [e for e in events if e["reason"] == "WorkerFailover"]
    assert len(failover_events) == 1 and failover_events[0]["type"] == "Warning"
    assert "oom-worker-1" in failover_events[0]["message"] and "OOM-killed" in failover_events[0]["message"]
    assert (
        operator.metric("training_operator_jobs_failed_total", {"job_namespace": "default", "framework": "tensorflow"})
        == 0
    )


async def test_oom_kill_under_never_stays_failed_and_the_job_goes_on(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("never", workers=2, restart_policy="Never"), running=2)
    before = uids(await operator.pods("never"))

    await annotate_pod(operator, "never-worker-1", {EXIT_CODE: "137"})

    async def reported() -> dict | None:
        job = await operator.job("never")
        record = worker_record(job, 1)
        worker = job["status"]["replicaStatuses"]["Worker"]
        return job if record and record["state"] == "Failed" and worker.get("failed") == 1 else None

    job = await eventually(reported, what="worker 1 reported permanently failed in status")
    assert job["status"]["replicaStatuses"]["Worker"].get("active") == 1
    assert worker_record(job, 1)["exitCode"] == 137
    await reconciled_once_more(operator, "never")
    pods = by_name(await operator.pods("never"))
    assert uids(pods.values()) == before, "a Never worker must not be replaced"
    assert phase(pods["never-worker-1"]) == "Failed"
    job = await operator.job("never")
    assert_stays_running(job)
    assert failovers(operator, "OOMKilled") == 0
    events = await operator.events("never")
    failed = [e for e in events if e["reason"] == "WorkerFailed"]
    assert len(failed) == 1 and "never-worker-1" in failed[0]["message"] and "Never" in failed[0]["message"]
    assert failed[0].get("count", 1) == 1, "the WorkerFailed event is emitted once, on the transition"


async def test_oom_kill_under_on_failure_is_restarted_in_place_by_the_kubelet(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("onfail", workers=2, restart_policy="OnFailure"), running=2)
    before = uids(await operator.pods("onfail"))

    await annotate_pod(operator, "onfail-worker-1", {EXIT_CODE: "137"})

    async def restarted() -> bool:
        pod = by_name(await operator.pods("onfail"))["onfail-worker-1"]
        statuses = pod["status"].get("containerStatuses") or []
        return (
            phase(pod) == "Running"
            and bool(statuses)
            and statuses[0].get("restartCount") == 1
            and "running" in statuses[0].get("state", {})
        )

    await eventually(restarted, what="the kubelet restarting the OOM-killed container in place")
    await reconciled_once_more(operator, "onfail")
    assert uids(await operator.pods("onfail")) == before, "the pod itself must be kept"
    last = by_name(await operator.pods("onfail"))["onfail-worker-1"]["status"]["containerStatuses"][0]["lastState"]
    assert last["terminated"]["exitCode"] == 137 and last["terminated"]["reason"] == "OOMKilled"
    job = await operator.job("onfail")
    assert_stays_running(job)
    assert failovers(operator, "OOMKilled") == 0
    assert worker_record(job, 1) is None


async def test_exit_1_under_exit_code_is_not_retried_and_the_job_goes_on(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("code1", workers=3, restart_policy="ExitCode"), running=3)
    before = uids(await operator.pods("code1"))

    await annotate_pod(operator, "code1-worker-2", {EXIT_CODE: "1"})

    async def reported() -> dict | None:
        job = await operator.job("code1")
        record = worker_record(job, 2)
        return job if record and record["state"] == "Failed" else None

    job = await eventually(reported, what="worker 2 reported failed (non-retryable exit code)")
    assert worker_record(job, 2)["exitCode"] == 1 and worker_record(job, 2)["lastReason"] == "Error"
    await reconciled_once_more(operator, "code1")
    assert uids(await operator.pods("code1")) == before
    job = await operator.job("code1")
    assert_stays_running(job)  # upstream would fail the job (non-retryable exit code); dynamic workers never do
    assert job["status"]["replicaStatuses"]["Worker"] == {
        "active": 2,
        "failed": 1,
        "selector": job["status"]["replicaStatuses"]["Worker"]["selector"],
    }
    assert failovers(operator, "Error") == 0
    messages = [e["message"] for e in await operator.events("code1") if e["reason"] == "WorkerFailed"]
    assert len(messages) == 1 and "code1-worker-2" in messages[0] and "exited with code 1" in messages[0]


async def test_evicted_worker_is_replaced_even_under_never(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("evict", workers=2, restart_policy="Never"), running=2)
    before = uids(await operator.pods("evict"))

    await annotate_pod(operator, "evict-worker-0", {EVICT: "true"})

    async def replaced() -> bool:
        pods = by_name(running_pods(await operator.pods("evict")))
        return "evict-worker-0" in pods and pods["evict-worker-0"]["metadata"]["uid"] != before["evict-worker-0"]

    await eventually(replaced, what="the evicted worker replaced")
    assert uids(await operator.pods("evict"))["evict-worker-1"] == before["evict-worker-1"]
    job = await operator.job("evict")
    assert_stays_running(job)
    assert failovers(operator, "Evicted") == 1
    assert worker_record(job, 0)["lastReason"] == "Evicted"
    messages = [e["message"] for e in await operator.events("evict") if e["reason"] == "WorkerFailover"]
    assert len(messages) == 1 and "evict-worker-0" in messages[0] and "evicted" in messages[0]


async def test_lost_node_waits_for_the_terminating_pod_then_replaces_it(operator: Operator) -> None:
    """A NotReady node: after the NoExecute toleration the taint manager deletes its pods, which stay
    Terminating because no kubelet confirms it. The controller records one NodeLost failover per
    worker and keeps the job Running; it does not force-delete (the partitioned pod may still be
    running, and a second copy of the same worker would corrupt training) nor create a duplicate.
    Once the node is removed, pod GC deletes the pods and the workers come back on healthy nodes."""
    faults = operator.cluster.faults
    await create_and_wait_running(operator, tfjob("lost", workers=3), running=3)
    pods = await operator.pods("lost")
    node = pods[1]["spec"]["nodeName"]
    on_node = sorted(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node)
    before = uids(pods)

    mark = faults.mark()
    faults.set_node_ready(node, False)

    async def terminating() -> bool:
        current = by_name(await operator.pods("lost"))
        return all(current[n]["metadata"].get("deletionTimestamp") for n in on_node)

    await eventually(terminating, what=f"the taint manager deleting {on_node}")

    async def failed_over() -> dict | None:
        job = await operator.job("lost")
        records = [worker_record(job, int(n.rsplit("-", 1)[1])) for n in on_node]
        return job if all(r and r["lastReason"] == "NodeLost" for r in records) else None

    job = await eventually(failed_over, what="a NodeLost failover recorded for each lost worker")
    await reconciled_once_more(operator, "lost")
    assert_stays_running(await operator.job("lost"))
    assert failovers(operator, "NodeLost") == len(on_node)
    current = await operator.pods("lost")
    assert uids(current) == before, "no duplicate or replacement while the old pod terminates"
    assert faults.count("create", "pods", since=mark) == 0
    for record in (worker_record(job, int(n.rsplit("-", 1)[1])) for n in on_node):
        assert record["state"] == "Replacing" and record["failovers"] == 1

    await operator.client.delete(NODES, node)

    async def back() -> bool:
        current = running_pods(await operator.pods("lost"))
        return (
            len(current) == 3
            and all(p["spec"]["nodeName"] != node for p in current)
            and all(uids(current)[n] != before[n] for n in on_node)
        )

    await eventually(back, what="the lost workers replaced on healthy nodes")
    job = await operator.job("lost")
    assert_stays_running(job)
    assert failovers(operator, "NodeLost") == len(on_node), "the pod's disappearance is the same failover"
    assert sum(failovers(operator, r) for r in ("Deleted", "Evicted", "Error", "OOMKilled")) == 0
    assert faults.count("create", "pods", since=mark) == len(on_node)
    for name in on_node:
        assert worker_record(job, int(name.rsplit("-", 1)[1]))["failovers"] == 1


async def test_crash_looping_worker_backs_off_and_is_requeued_for_the_backoff_end(sim_cluster) -> None:
    """Every instance of the worker is OOM-killed shortly after it starts. The first failover is
    replaced as soon as the pod is gone; the repeats must be spaced by the per-index back-off (1 s,
    2 s, then capped at 2 s), each backed-off replacement must come from
    the timed requeue at the back-off end (nothing else happens to the job meanwhile), and the
    controller must be idle in between (no polling, no repeated deletes)."""
    config = DecideConfig(failover_backoff_base=1.0, failover_backoff_cap=2.0, failover_reset_after=60.0)
    operator = await start_operator(sim_cluster, config=config)
    try:
        faults = sim_cluster.faults
        manifest = tfjob(
            "crash", workers=1, restart_policy="ExitCode", annotations={RUN_SECONDS: "20", EXIT_CODE: "137"}
        )  # 0.2 s real, then OOM
        store = sim_cluster.store
        start = store.resource_version
        await operator.client.create(TFJOBS, manifest, namespace="default")
        mark = faults.mark()

        def creations() -> list[float]:
            """When the server committed each pod of the job: its own clock, not the test's polling."""
            events = store.history_since("pods", start)
            assert events is not None, "the history must still hold the job's pods"
            return [e.time for e in events if e.type == "ADDED" and e.new["metadata"]["name"].startswith("crash-")]

        await eventually(lambda: len(creations()) >= 5, timeout=30, what="four replacements of the crashing worker")
        gaps = [b - a for a, b in pairwise(creations())]
        # gap = run time (0.2 s) + deletion (prompt: the process has exited) + back-off, rounded up to
        # the next whole second; measured between the server's commits of the creations.
        for gap, backoff in zip(gaps[:4], (0.0, 1.0, 2.0, 2.0), strict=True):
            assert backoff <= gap < backoff + 2.5, (gaps, "at once, then back-off 1 s, 2 s, capped at 2 s")

        job = await operator.job("crash")
        assert is_true(job, "Running") and condition(job, "Failed") is None and condition(job, "Restarting") is None
        record = worker_record(job, 0)
        assert record is not None and record["failovers"] >= 4 and record["lastReason"] == "OOMKilled", record
        seen = creations()
        creates = faults.count("create", "pods", since=mark)
        deletes = faults.count("delete", "pods", since=mark)
        # Each pod was created once (one more request may be on its way to the store).
        assert len(seen) <= creates <= len(seen) + 1, (creates, len(seen))
        assert deletes <= len(seen), f"{deletes} pod deletes for {len(seen)} pods: repeated deletes"
        # Idle between failovers: pod lists and reads here are the test's own; the controller's
        # requests are writes, at most a handful per failover (delete, create, status, events).
        writes = faults.writes(since=mark)
        assert writes <= 10 * len(seen), (f"{writes} writes for {len(seen)} failovers", faults.counts(mark))
        status_writes = faults.count("update", "tfjobs.kubeflow.org/status", since=mark)
        assert status_writes <= 4 * len(seen), (status_writes, faults.counts(mark))
        assert failovers(operator, "OOMKilled") >= 4
        messages = [e["message"] for e in await operator.events("crash") if e["reason"] == "WorkerFailover"]
        assert any("as soon as it is gone (failover 1)" in m for m in messages), messages
        assert any("1s back-off (failover 2)" in m for m in messages), messages
        assert any("2s back-off (failover 3)" in m for m in messages), messages
        assert any("2s back-off (failover 4)" in m for m in messages), messages
    finally:
        crashed = operator.task is not None and operator.task.done() and not operator.task.cancelled()
        await operator.stop()
        assert not crashed, "the controller task ended during the test"


async def test_failover_does_not_touch_pods_of_other_jobs(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("a", workers=1, restart_policy="ExitCode"), running=1)
    await create_and_wait_running(operator, tfjob("b", workers=1, restart_policy="ExitCode"), running=1)
    other = uids(await operator.pods("b"))
    old = uids(await operator.pods("a"))["a-worker-0"]
    await annotate_pod(operator, "a-worker-0", {EXIT_CODE: "143"})

    async def replaced() -> bool:
        pods = by_name(running_pods(await operator.pods("a")))
        return "a-worker-0" in pods and pods["a-worker-0"]["metadata"]["uid"] != old

    await eventually(replaced, what="a-worker-0 replaced")
    assert uids(await operator.pods("b")) == other
    assert worker_record(await operator.job("b"), 0) is None
    assert (await operator.client.get(PODS, "b-worker-0", namespace="default"))["metadata"]["uid"] == other[
        "b-worker-0"
    ]


async def test_lost_node_coming_back_confirms_the_deletion_and_the_worker_returns(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("flaky", workers=2), running=2)
    pods = await operator.pods("flaky")
    node = pods[0]["spec"]["nodeName"]
    on_node = sorted(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node)
    before = uids(pods)
    operator.cluster.faults.set_node_ready(node, False)

    async def failed_over() -> bool:
        job = await operator.job("flaky")
        return all(
            (worker_record(job, int(n.rsplit("-", 1)[1])) or {}).get("lastReason") == "NodeLost" for n in on_node
        )

    await eventually(failed_over, what="NodeLost failovers recorded")
    operator.cluster.faults.set_node_ready(node, True)

    async def back() -> bool:
        current = running_pods(await operator.pods("flaky"))
        return len(current) == 2 and all(uids(current)[n] != before[n] for n in on_node)

    await eventually(back, what="the lost workers replaced once their node confirmed the deletion")
    assert_stays_running(await operator.job("flaky"))
    assert failovers(operator, "NodeLost") == len(on_node)


async def test_drained_node_evicts_through_the_eviction_api_and_workers_move(operator: Operator, kubectl) -> None:
    """``kubectl drain`` cordons the node and evicts its pods through the eviction API (a
    DisruptionTarget condition, then a graceful delete): each worker there fails over as Evicted
    and comes back on another node; workers elsewhere are untouched."""
    await create_and_wait_running(operator, tfjob("drain", workers=3, restart_policy="Never"), running=3)
    pods = await operator.pods("drain")
    node = pods[0]["spec"]["nodeName"]
    moved = sorted(p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == node)
    before = uids(pods)

    rc, out, err = await kubectl("drain", node, "--ignore-daemonsets", "--timeout=30s")
    assert rc == 0, (out, err)

    async def back() -> bool:
        current = running_pods(await operator.pods("drain"))
        return (
            len(current) == 3
            and all(p["spec"]["nodeName"] != node for p in current)
            and all(uids(current)[n] != before[n] for n in moved)
        )

    await eventually(back, what=f"{moved} evicted from {node} and running elsewhere")
    await reconciled_once_more(operator, "drain")
    after = uids(await operator.pods("drain"))
    assert {n: u for n, u in after.items() if n not in moved} == {n: u for n, u in before.items() if n not in moved}
    assert_stays_running(await operator.job("drain"))
    assert failovers(operator, "Evicted") == len(moved), {
        r: failovers(operator, r) for r in ("Deleted", "NodeLost", "Evicted", "Disrupted")
    }
    assert sum(failovers(operator, r) for r in ("Deleted", "NodeLost", "Error", "OOMKilled", "Disrupted")) == 0


async def test_the_same_worker_disrupted_again_and_again_is_replaced_each_time_without_back_off(
    sim_cluster, kubectl
) -> None:
    """Disruptions never wait. The back-off is 300 s here, so a repeat that took it would be replaced
    long after the test's deadlines: worker 1 is deleted with kubectl, deleted again as soon as its
    replacement runs, then evicted by its kubelet; each time it comes back as soon as the old pod is
    gone, and its record never carries a retryAfter. Worker 0 is untouched throughout."""
    config = DecideConfig(failover_backoff_base=300.0, failover_backoff_cap=300.0)
    async with running_operator(sim_cluster, config=config) as operator:
        await create_and_wait_running(operator, tfjob("again", workers=2, restart_policy="Never"), running=2)
        worker0 = uids(await operator.pods("again"))["again-worker-0"]
        disruptions = [
            ("Deleted", lambda: kubectl("delete", "pod", "again-worker-1", "--wait=false")),
            ("Deleted", lambda: kubectl("delete", "pod", "again-worker-1", "--wait=false")),
            ("Evicted", lambda: annotate_pod(operator, "again-worker-1", {EVICT: "true"})),
        ]
        for n, (reason, disrupt) in enumerate(disruptions, start=1):
            old = uids(await operator.pods("again"))["again-worker-1"]
            result = await disrupt()
            assert result is None or result[0] == 0, result

            async def replaced(old: str = old, n: int = n) -> dict | None:
                pod = by_name(running_pods(await operator.pods("again"))).get("again-worker-1")
                record = worker_record(await operator.job("again"), 1)
                new = pod is not None and pod["metadata"]["uid"] != old
                return record if new and record and record["failovers"] == n and record["state"] == "Replaced" else None

            record = await eventually(replaced, what=f"again-worker-1 replaced after disruption {n} ({reason})")
            assert record["lastReason"] == reason and "retryAfter" not in record and "failures" not in record, record
        job = await operator.job("again")
        assert_stays_running(job)
        assert uids(await operator.pods("again"))["again-worker-0"] == worker0
        assert (failovers(operator, "Deleted"), failovers(operator, "Evicted")) == (2, 1)
        messages = [e["message"] for e in await operator.events("again") if e["reason"] == "WorkerFailover"]
        assert messages == [
            "Worker again-worker-1 (index 1) was deleted (Deleted): replacing it as soon as it is gone (failover 1)",
            "Worker again-worker-1 (index 1) was deleted (Deleted): replacing it as soon as it is gone (failover 2)",
            "Worker again-worker-1 (index 1) was evicted (Evicted): replacing it as soon as it is gone (failover 3)",
        ], messages
