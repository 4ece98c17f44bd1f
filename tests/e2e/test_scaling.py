"""Scaling dynamic workers end to end: up, down (highest index first), to 0 with a chief, through
the scale subresource with ``kubectl scale``, and never an out-of-range pod while a higher index
is still terminating (upstream quirk Q6).

Scale up creates pods and services for the new indices and leaves existing pods alone;
scale down deletes pods and services with index >= replicas gracefully, highest first, never
counted as failures and never recreated; workers may scale to 0 when a Chief exists; the CRD's
scale subresource (selector filled by the controller) makes ``kubectl scale`` and an HPA work.
"""

from __future__ import annotations

import json
from datetime import UTC

from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    Operator,
    condition,
    create_and_wait_running,
    eventually,
    is_true,
    live,
    reconciled_once_more,
    running_pods,
    tfjob,
)
from tfjob_sim.kubelet import EXIT_CODE

SELECTOR = (
    "training.kubeflow.org/job-name={job},training.kubeflow.org/operator-name=tfjob-controller,"
    "training.kubeflow.org/replica-type=worker"
)


def names(objects: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in objects]


def uids(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def index_of(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


async def set_workers(operator: Operator, job: str, replicas: int) -> None:
    await operator.client.patch(
        TFJOBS, job, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas}}}}, namespace="default"
    )


def assert_healthy(job: dict) -> None:
    assert is_true(job, "Running"), job["status"]
    assert condition(job, "Failed") is None and condition(job, "Restarting") is None, job["status"]["conditions"]


async def test_scale_up_adds_pods_and_services_and_leaves_existing_ones_alone(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("grow", workers=2), running=2)
    before = uids(await operator.pods("grow"))
    services_before = uids(await operator.services("grow"))

    await set_workers(operator, "grow", 4)

    async def grown() -> bool:
        pods = running_pods(await operator.pods("grow"))
        return names(pods) == [f"grow-worker-{i}" for i in range(4)] and names(
            await operator.services("grow")
        ) == names(pods)

    await eventually(grown, what="workers 2 and 3 created with their services")
    after = uids(await operator.pods("grow"))
    assert {n: after[n] for n in before} == before, "existing workers must not be restarted"
    services = uids(await operator.services("grow"))
    assert {n: services[n] for n in services_before} == services_before
    # The status counts the new workers once the controller has seen them run, a moment after they do.

    async def counted() -> dict:
        job = await operator.job("grow")
        return job if job["status"]["replicaStatuses"]["Worker"].get("active") == 4 else None

    job = await eventually(counted, what="status counting 4 active workers")
    assert_healthy(job)
    # Sparse TF_CONFIG: each new worker knows its own address under its own type.
    pod = next(p for p in await operator.pods("grow") if p["metadata"]["name"] == "grow-worker-3")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": {"3": "grow-worker-3.default.svc:2222"}, "ps": []},
        "task": {"type": "worker", "index": 3},
    }


async def test_scale_down_deletes_highest_index_first_and_never_counts_a_failure(operator: Operator) -> None:
    faults = operator.cluster.faults
    await create_and_wait_running(operator, tfjob("shrink", workers=5), running=5)
    kept = {n: u for n, u in uids(await operator.pods("shrink")).items() if index_of(n) < 2}
    mark = faults.mark()

    await set_workers(operator, "shrink", 2)

    async def shrunk() -> bool:
        return names(await operator.pods("shrink")) == ["shrink-worker-0", "shrink-worker-1"] and names(
            await operator.services("shrink")
        ) == ["shrink-worker-0", "shrink-worker-1"]

    await eventually(shrunk, what="workers 4, 3, 2 removed with their services")
    await reconciled_once_more(operator, "shrink")  # the scale-down pass's events and metrics are out
    deleted = [r.name for r in faults.requests(mark, verb="delete", resource="pods")]
    assert deleted == ["shrink-worker-4", "shrink-worker-3", "shrink-worker-2"], deleted
    deleted_services = [r.name for r in faults.requests(mark, verb="delete", resource="services")]
    assert sorted(deleted_services) == ["shrink-worker-2", "shrink-worker-3", "shrink-worker-4"]
    assert faults.count("create", "pods", since=mark) == 0, "scaled-down workers must never be recreated"
    assert uids(await operator.pods("shrink")) == kept
    job = await operator.job("shrink")
    assert_healthy(job)
    worker = job["status"]["replicaStatuses"]["Worker"]
    assert worker.get("active") == 2 and not worker.get("failed"), worker
    assert (
        operator.metric("tfjob_worker_scaled_down_total", {"job_namespace": "default", "chosen_by": "highestIndex"})
        == 3
    )
    assert (
        sum(
            operator.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": r})
            for r in ("Deleted", "Evicted", "NodeLost", "Error", "OOMKilled", "Disrupted")
        )
        == 0
    )
    scaled = [e for e in await operator.events("shrink") if e["reason"] == "WorkerScaledDown"]
    assert len(scaled) == 1 and "shrink-worker-4" in scaled[0]["message"] and "shrink-worker-2" in scaled[0]["message"]
    assert not [e for e in await operator.events("shrink") if e["reason"] in ("WorkerFailover", "TFJobFailed")]


async def test_workers_scale_to_zero_when_a_chief_exists(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("zero", workers=2, chief=1), running=3)
    chief = uids(await operator.pods("zero", replica_type="chief"))

    await set_workers(operator, "zero", 0)

    async def no_workers() -> bool:
        return not await operator.pods("zero", replica_type="worker") and names(await operator.services("zero")) == [
            "zero-chief-0"
        ]

    await eventually(no_workers, what="every worker pod and service removed")
    assert uids(await operator.pods("zero", replica_type="chief")) == chief
    job = await operator.job("zero")
    assert_healthy(job)
    assert condition(job, "Succeeded") is None
    assert not job["status"]["replicaStatuses"]["Worker"].get("active")

    await set_workers(operator, "zero", 1)

    async def back() -> bool:
        return names(running_pods(await operator.pods("zero", replica_type="worker"))) == ["zero-worker-0"]

    await eventually(back, what="a worker again after scaling back to 1")
    assert uids(await operator.pods("zero", replica_type="chief")) == chief
    assert_healthy(await operator.job("zero"))


async def test_kubectl_scale_goes_through_the_scale_subresource(operator: Operator, kubectl) -> None:
    await create_and_wait_running(operator, tfjob("hpa", workers=1), running=1)

    rc, out, err = await kubectl("get", "tfjob", "hpa", "-o", "jsonpath={.status.replicaStatuses.Worker.selector}")
    assert rc == 0, err
    assert out == SELECTOR.format(job="hpa")
    rc, out, err = await kubectl("get", "tfjob", "hpa", "--subresource=scale", "-o", "json")
    assert rc == 0, err
    scale = json.loads(out)
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 1
    assert scale["status"] == {"replicas": 1, "selector": SELECTOR.format(job="hpa")}

    rc, out, err = await kubectl("scale", "tfjob/hpa", "--replicas=3")
    assert rc == 0, err
    assert out.strip() == "tfjob.kubeflow.org/hpa scaled"

    async def three() -> bool:
        return names(running_pods(await operator.pods("hpa"))) == ["hpa-worker-0", "hpa-worker-1", "hpa-worker-2"]

    await eventually(three, what="three running workers after kubectl scale")
    job = await operator.job("hpa")
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 3

    async def scale_status() -> dict | None:
        rc, out, err = await kubectl("get", "tfjob", "hpa", "--subresource=scale", "-o", "json")
        assert rc == 0, err
        scale = json.loads(out)
        return scale if scale["status"].get("replicas") == 3 else None

    scale = await eventually(scale_status, what="the scale subresource reporting 3 active workers")
    assert scale["spec"]["replicas"] == 3

    rc, out, err = await kubectl("scale", "tfjob/hpa", "--replicas=1")
    assert rc == 0, err

    async def one() -> bool:
        return names(await operator.pods("hpa")) == ["hpa-worker-0"]

    await eventually(one, what="back to one worker after kubectl scale")
    await reconciled_once_more(operator, "hpa")
    assert_healthy(await operator.job("hpa"))
    assert (
        operator.metric("tfjob_worker_scaled_down_total", {"job_namespace": "default", "chosen_by": "highestIndex"})
        == 2
    )


async def test_no_out_of_range_pod_is_created_while_a_higher_index_terminates(operator: Operator, kubectl) -> None:
    """Upstream (quirk Q6) sizes the slots by the highest existing index, so an empty slot below a
    terminating higher index gets a new pod that the next pass deletes again. The kubelet is
    paused so the scaled-down pods stay terminating."""
    faults = operator.cluster.faults
    await create_and_wait_running(operator, tfjob("range", workers=4), running=4)
    faults.pause_kubelet()
    try:
        mark = faults.mark()
        await set_workers(operator, "range", 2)

        async def terminating() -> bool:
            pods = {p["metadata"]["name"]: p for p in await operator.pods("range")}
            return all(pods[n]["metadata"].get("deletionTimestamp") for n in ("range-worker-2", "range-worker-3"))

        await eventually(terminating, what="workers 2 and 3 terminating")
        # Slot 2 empties while index 3 is still terminating.
        rc, _, err = await kubectl("delete", "pod", "range-worker-2", "--grace-period=0", "--force")
        assert rc == 0, err

        async def slot_two_empty() -> bool:
            return "range-worker-2" not in names(await operator.pods("range"))

        await eventually(slot_two_empty, what="range-worker-2 gone")
        # Scaling back up to 3 while index 3 terminates: index 2 is in range again, 3 is not.
        await set_workers(operator, "range", 3)

        async def two_recreated() -> bool:
            return "range-worker-2" in names(live(await operator.pods("range")))

        await eventually(two_recreated, what="range-worker-2 created again for replicas 3")
        # Creates carry the name in the body, not the path: count them; the one new pod is worker 2.
        assert faults.count("create", "pods", since=mark) == 1
        pods = {p["metadata"]["name"]: p for p in await operator.pods("range")}
        assert pods["range-worker-3"]["metadata"].get("deletionTimestamp"), "index 3 still terminating"
    finally:
        faults.resume_kubelet()

    async def settled() -> bool:
        return names(running_pods(await operator.pods("range"))) == [
            "range-worker-0",
            "range-worker-1",
            "range-worker-2",
        ] and names(await operator.pods("range")) == ["range-worker-0", "range-worker-1", "range-worker-2"]

    await eventually(settled, what="three workers and no terminating pod left")
    assert faults.count("create", "pods", since=mark) == 1, "an out-of-range or duplicate pod was created"
    assert faults.count("create", "services", since=mark) == 1, "only worker 2's service comes back"
    assert names(await operator.services("range")) == ["range-worker-0", "range-worker-1", "range-worker-2"]
    assert_healthy(await operator.job("range"))


async def test_scaling_down_a_worker_waiting_for_its_failover_backoff_cancels_the_replacement(
    sim_cluster,
) -> None:
    """Worker 2 failed again and waits for its back-off when the job is scaled to 2: its service and its
    failover record go, and when the back-off's timed requeue fires nothing is created."""
    import time
    from datetime import datetime

    from controller.tfjob.decide import DecideConfig
    from tests.e2e.conftest import annotate_pod, fail_over_once, start_operator, worker_record

    faults = sim_cluster.faults
    # The scale-down must be reconciled before the back-off ends: 8 s leave a busy machine room for it.
    operator = await start_operator(
        sim_cluster, config=DecideConfig(failover_backoff_base=8.0, failover_backoff_cap=8.0)
    )
    try:
        await create_and_wait_running(operator, tfjob("cancel", workers=3, restart_policy="ExitCode"), running=3)
        await fail_over_once(operator, "cancel", 2)  # replaced at once; the next failover backs off
        await annotate_pod(operator, "cancel-worker-2", {EXIT_CODE: "137"})

        async def waiting() -> dict | None:
            record = worker_record(await operator.job("cancel"), 2)
            gone = "cancel-worker-2" not in names(await operator.pods("cancel"))
            return record if gone and record and record["state"] == "Replacing" else None

        record = await eventually(waiting, what="worker 2 gone and waiting for its back-off")
        retry_after = datetime.strptime(record["retryAfter"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        mark = faults.mark()
        await set_workers(operator, "cancel", 2)

        async def shrunk() -> dict | None:
            job = await operator.job("cancel")
            done = names(await operator.services("cancel")) == ["cancel-worker-0", "cancel-worker-1"]
            return job if done and worker_record(job, 2) is None else None

        job = await eventually(shrunk, what="worker 2's service and failover record dropped")
        assert job["status"]["replicaStatuses"]["Worker"].get("active") == 2
        queue = operator.controller.controller.queue

        def backoff_requeue_done() -> bool:
            return (
                time.time() > retry_after and queue.num_waiting == 0 and len(queue) == 0 and queue.num_processing == 0
            )

        await eventually(backoff_requeue_done, what="the back-off's timed requeue to fire and finish")
        assert names(await operator.pods("cancel")) == ["cancel-worker-0", "cancel-worker-1"]
        assert faults.count("create", "pods", since=mark) == 0
        assert faults.count("create", "services", since=mark) == 0
        assert_healthy(await operator.job("cancel"))
    finally:
        crashed = operator.task is not None and operator.task.done() and not operator.task.cancelled()
        await operator.stop()
        assert not crashed


def tf_config(pod: dict) -> dict | None:
    """The parsed TF_CONFIG of a pod's ``tensorflow`` container (None when it has none)."""
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "tensorflow")
    values = [e.get("value") for e in container.get("env") or [] if e["name"] == "TF_CONFIG"]
    return json.loads(values[0]) if values else None


async def test_a_ps_lost_while_workers_are_zero_comes_back_distributed(operator: Operator, kubectl) -> None:
    """A dynamic job is distributed whatever its Worker count: 1 PS + 2 workers scaled to 0, then the PS
    pod is deleted and re-created while the job has one replica in total. Upstream's rule ("distributed
    = more than one replica") would give the new PS no TF_CONFIG, and the workers scaled back up would
    have no PS to join. Every pod, the new PS and the new workers, carries its sparse TF_CONFIG."""
    await create_and_wait_running(operator, tfjob("elastic", workers=2, ps=1), running=3)
    await set_workers(operator, "elastic", 0)

    async def only_the_ps() -> bool:
        return names(await operator.pods("elastic")) == ["elastic-ps-0"]

    await eventually(only_the_ps, what="both workers removed, the PS left")
    old_ps = uids(await operator.pods("elastic"))["elastic-ps-0"]
    rc, _, err = await kubectl("delete", "pod", "elastic-ps-0", "--wait=false")
    assert rc == 0, err

    async def ps_back() -> bool:
        pods = running_pods(await operator.pods("elastic"))
        return names(pods) == ["elastic-ps-0"] and pods[0]["metadata"]["uid"] != old_ps

    await eventually(ps_back, what="the PS re-created and running while Worker replicas are 0")
    await set_workers(operator, "elastic", 2)

    async def all_back() -> list[dict]:
        pods = running_pods(await operator.pods("elastic"))
        assert names(pods) == ["elastic-ps-0", "elastic-worker-0", "elastic-worker-1"]
        return pods

    pods = await eventually(all_back, what="two workers back beside the new PS")
    ps = ["elastic-ps-0.default.svc:2222"]
    assert {p["metadata"]["name"]: tf_config(p) for p in pods} == {
        "elastic-ps-0": {"cluster": {"worker": {}, "ps": ps}, "task": {"type": "ps", "index": 0}},
        **{
            f"elastic-worker-{i}": {
                "cluster": {"worker": {str(i): f"elastic-worker-{i}.default.svc:2222"}, "ps": ps},
                "task": {"type": "worker", "index": i},
            }
            for i in (0, 1)
        },
    }
    assert uids(pods)["elastic-ps-0"] != old_ps
    assert condition(await operator.job("elastic"), "Failed") is None
