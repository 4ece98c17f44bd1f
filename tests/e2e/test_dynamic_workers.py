"""The two failures from the original report, and the failover paths, end to end.

Upstream training-operator turned a dynamic TFJob Failed when a worker pod was deleted, and removed
nothing when Worker replicas were lowered. Here the controller runs as in production against the
simulated cluster; the tests act only through the API, kubectl and pod annotations.
"""

from __future__ import annotations

from controller.runtime.client import PODS
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import Operator, eventually, is_true, tfjob


def running(pods: list[dict]) -> list[dict]:
    return [
        p for p in pods if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


async def start_job(operator: Operator, manifest: dict, running_workers: int) -> dict:
    await operator.client.create(TFJOBS, manifest, namespace="default")
    name = manifest["metadata"]["name"]

    async def up() -> bool:
        job = await operator.job(name)
        return (
            is_true(job, "Running")
            and len(running(await operator.pods(name, replica_type="worker"))) == running_workers
        )

    await eventually(up, what=f"{name} Running with {running_workers} running workers")
    return await operator.job(name)


async def test_deleted_worker_pod_comes_back_and_the_job_stays_running(operator: Operator, kubectl) -> None:
    await start_job(operator, tfjob("mnist", workers=3), running_workers=3)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await operator.pods("mnist")}

    rc, out, err = await kubectl("delete", "pod", "mnist-worker-1", "--wait=false")
    assert rc == 0, err

    async def replaced() -> bool:
        pods = {p["metadata"]["name"]: p for p in running(await operator.pods("mnist"))}
        new = pods.get("mnist-worker-1")
        return new is not None and new["metadata"]["uid"] != before["mnist-worker-1"]

    await eventually(replaced, what="mnist-worker-1 replaced by a new running pod")
    job = await operator.job("mnist")
    assert is_true(job, "Running") and not is_true(job, "Failed") and not is_true(job, "Restarting")
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await operator.pods("mnist")}
    assert after["mnist-worker-0"] == before["mnist-worker-0"]
    assert after["mnist-worker-2"] == before["mnist-worker-2"]
    await eventually(
        lambda: operator.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": "Deleted"}) == 1,
        what="one failover counted",
    )
    events = await operator.events("mnist")
    assert any(e["reason"] == "WorkerFailover" and "mnist-worker-1" in e["message"] for e in events), events


async def test_lowering_worker_replicas_removes_the_extra_pods_and_services(operator: Operator) -> None:
    await start_job(operator, tfjob("online", workers=4), running_workers=4)
    kept = {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in await operator.pods("online")
        if p["metadata"]["name"] in ("online-worker-0", "online-worker-1")
    }

    await operator.client.patch(
        TFJOBS, "online", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2}}}}, namespace="default"
    )

    async def scaled() -> bool:
        pods = [p["metadata"]["name"] for p in await operator.pods("online")]
        services = [s["metadata"]["name"] for s in await operator.services("online")]
        return pods == ["online-worker-0", "online-worker-1"] and services == pods

    await eventually(scaled, what="workers 2 and 3 (pods and services) removed")
    job = await operator.job("online")
    assert is_true(job, "Running") and not is_true(job, "Failed")
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in await operator.pods("online")} == kept
    # The executor counts after its writes, and pods that exit on SIGTERM can be gone before that.
    await eventually(
        lambda: (
            operator.metric("tfjob_worker_scaled_down_total", {"job_namespace": "default", "chosen_by": "highestIndex"})
            == 2
        ),
        what="two scale-downs counted",
    )
    assert operator.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": "Deleted"}) == 0


async def test_status_writes_read_their_own_writes_instead_of_earning_conflicts(operator: Operator) -> None:
    """A reconcile that runs before the informer delivered our last status write must not PUT with the
    stale resourceVersion (a 409 and a retry per write). The controller decides on the version it wrote."""
    mark = operator.cluster.faults.mark()
    await start_job(operator, tfjob("quiet", workers=3), running_workers=3)
    await operator.client.delete(PODS, "quiet-worker-2", namespace="default")

    async def replaced() -> bool:
        return len(running(await operator.pods("quiet", replica_type="worker"))) == 3

    await eventually(replaced, what="quiet-worker-2 replaced")
    updates = [
        r
        for r in operator.cluster.faults.requests(since=mark, resource="tfjobs.kubeflow.org/status")
        if r.method == "PUT"
    ]
    assert updates, "the controller wrote status"
    assert [r.code for r in updates if r.code == 409] == [], [(r.seq, r.code) for r in updates]


async def test_scale_down_is_counted_even_when_the_status_write_conflicts(operator: Operator) -> None:
    await start_job(operator, tfjob("busy", workers=3), running_workers=3)
    # The status write of the scale-down loses a race with another writer. It is sent before any deletion (the
    # members that stay are recorded before anyone leaves), so nothing is removed; the retry decides on the same
    # pods, removes the same workers and reports them once, with the status write that records the change.
    operator.cluster.faults.fail_next("update", "tfjobs.kubeflow.org/status", 409)
    mark = operator.cluster.faults.mark()
    await operator.client.patch(
        TFJOBS, "busy", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}}, namespace="default"
    )

    async def scaled() -> bool:
        return [p["metadata"]["name"] for p in await operator.pods("busy")] == ["busy-worker-0"]

    await eventually(scaled, what="workers 1 and 2 removed")
    await eventually(
        lambda: (
            operator.metric("tfjob_worker_scaled_down_total", {"job_namespace": "default", "chosen_by": "highestIndex"})
            == 2
        ),
        what="both scale-downs counted despite the conflict",
    )

    async def reported() -> list:  # events are written in the background, after the metric
        return [e for e in await operator.events("busy") if e["reason"] == "WorkerScaledDown"]

    events = await eventually(reported, what="the WorkerScaledDown event written")
    assert len(events) == 1 and events[0].get("count", 1) == 1, events
    assert events[0]["message"] == (
        "Scaled down to 1 worker(s): removed busy-worker-2 (highest index), busy-worker-1 (highest index); "
        "workers now 0"
    ), events
    assert operator.cluster.faults.rules == []  # the injected conflict was used
    # ... by the scale-down's status write, sent before any pod of the job was deleted; each leaver's pod
    # is deleted once.
    sent = operator.cluster.faults.requests(since=mark)
    conflict = next(r for r in sent if r.resource == "tfjobs.kubeflow.org/status" and r.code == 409)
    deletes = [r for r in sent if r.verb == "delete" and r.resource == "pods"]
    assert sorted(r.name or "" for r in deletes) == ["busy-worker-1", "busy-worker-2"], deletes
    assert all(r.seq > conflict.seq for r in deletes), (conflict, deletes)
