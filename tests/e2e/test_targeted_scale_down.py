"""Scaling down the worker you choose, end to end with the real ``kubectl``: ``kubectl annotate`` the pod's
``controller.kubernetes.io/pod-deletion-cost`` and ``kubectl scale`` removes that worker; the explicit
``spec.workersToDelete`` removes the listed ones; the hole survives a failover of another member and a
controller restart; a scale-up refills the lowest hole; without either, the highest index goes.
``kubectl get tfjob`` shows the members and ``kubectl describe tfjob`` who left and why."""

from __future__ import annotations

import json

from tests.e2e.conftest import (
    Operator,
    create_and_wait_running,
    eventually,
    is_true,
    live,
    reconciled_once_more,
    running_operator,
    running_pods,
    tfjob,
)
from tfjob_sim.cluster import SimCluster

COST = "controller.kubernetes.io/pod-deletion-cost"


def names(objects: list[dict]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def uids(pods: list[dict]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


def workers(job: str, *indices: int) -> list[str]:
    return sorted(f"{job}-worker-{i}" for i in indices)


async def wait_for_workers(operator: Operator, job: str, *indices: int) -> list[dict]:
    """Until exactly the workers ``indices`` run and have their services, nothing else left terminating."""

    async def settled() -> list[dict] | None:
        pods = await operator.pods(job)
        ok = (
            names(pods) == workers(job, *indices)
            and names(running_pods(pods)) == workers(job, *indices)
            and names(await operator.services(job)) == workers(job, *indices)
        )
        return pods if ok else None

    return await eventually(settled, timeout=60, what=f"{job}'s workers exactly {indices}")


def members_of(job: dict) -> list[int]:
    return job["status"]["dynamicWorkers"]["members"]


async def test_annotate_and_kubectl_scale_remove_the_chosen_worker_and_the_hole_stays(
    sim_cluster: SimCluster, kubectl
) -> None:
    faults = sim_cluster.faults
    async with running_operator(sim_cluster) as operator:
        await create_and_wait_running(operator, tfjob("pick", workers=5), running=5)
        before = uids(await operator.pods("pick"))

        await kubectl.ok("annotate", "pod", "pick-worker-1", f"{COST}=-100")
        assert (await kubectl.ok("scale", "tfjob/pick", "--replicas=4")).strip() == "tfjob.kubeflow.org/pick scaled"
        pods = await wait_for_workers(operator, "pick", 0, 2, 3, 4)
        assert uids(pods) == {n: u for n, u in before.items() if n != "pick-worker-1"}, "the others keep their pods"

        async def recorded() -> dict | None:
            job = await operator.job("pick")
            active = job["status"]["replicaStatuses"]["Worker"].get("active")
            return job if members_of(job) == [0, 2, 3, 4] and active == 4 else None

        job = await eventually(recorded, what="members 0,2,3,4 recorded and counted")
        assert is_true(job, "Running")
        table = await kubectl.ok("get", "tfjob", "pick")
        header, row = table.splitlines()
        assert header.split()[:4] == ["NAME", "STATE", "AGE", "MEMBERS"], table
        assert row.split()[0] == "pick" and row.split()[3] == "0,2-4", table
        scale = json.loads(await kubectl.ok("get", "tfjob", "pick", "--subresource=scale", "-o", "json"))
        assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (4, 4)

        async def described() -> str | None:
            out = await kubectl.ok("describe", "tfjob", "pick")
            return out if "WorkerScaledDown" in out else None

        description = await eventually(described, what="the WorkerScaledDown event in kubectl describe")
        assert "removed pick-worker-1 (pod-deletion-cost -100); workers now 0,2-4" in description
        assert "Members:" in description and "0,2-4" in description
        counted = {"job_namespace": "default", "chosen_by": "deletionCost"}
        await eventually(lambda: operator.metric("tfjob_worker_scaled_down_total", counted) == 1, what="counted")

        # A failover of another member replaces that member, never the hole.
        old_four = uids(pods)["pick-worker-4"]
        await kubectl.ok("delete", "pod", "pick-worker-4", "--wait=false")

        async def four_replaced() -> bool:
            now = uids(running_pods(await operator.pods("pick")))
            return now.get("pick-worker-4", old_four) != old_four and names(
                live(await operator.pods("pick"))
            ) == workers("pick", 0, 2, 3, 4)

        await eventually(four_replaced, timeout=60, what="pick-worker-4 replaced at index 4")
        await wait_for_workers(operator, "pick", 0, 2, 3, 4)
        assert members_of(await operator.job("pick")) == [0, 2, 3, 4]

    # A controller restart: the new one knows only what the API holds, and the hole is recorded there.
    mark = faults.mark()
    async with running_operator(sim_cluster) as operator:
        await reconciled_once_more(operator, "pick")
        assert faults.count("create", "pods", since=mark) == 0, "the restarted controller recreated a worker"
        assert names(await operator.pods("pick")) == workers("pick", 0, 2, 3, 4)
        assert members_of(await operator.job("pick")) == [0, 2, 3, 4]

        # Scale-up refills the lowest hole first.
        kept = uids(await operator.pods("pick"))
        await kubectl.ok("scale", "tfjob/pick", "--replicas=5")
        pods = await wait_for_workers(operator, "pick", 0, 1, 2, 3, 4)
        assert {n: u for n, u in uids(pods).items() if n != "pick-worker-1"} == kept
        one = next(p for p in pods if p["metadata"]["name"] == "pick-worker-1")
        env = {e["name"]: e.get("value") for e in one["spec"]["containers"][0].get("env", [])}
        assert json.loads(env["TF_CONFIG"]) == {
            "cluster": {"worker": {"1": "pick-worker-1.default.svc:2222"}, "ps": []},
            "task": {"type": "worker", "index": 1},
        }

        async def refilled() -> bool:
            return members_of(await operator.job("pick")) == [0, 1, 2, 3, 4]

        await eventually(refilled, what="members 0-4 recorded")


async def test_the_explicit_list_removes_the_listed_workers(operator: Operator, kubectl) -> None:
    await create_and_wait_running(operator, tfjob("listed", workers=5), running=5)
    await kubectl.ok("annotate", "pod", "listed-worker-4", f"{COST}=-100")  # the list wins over costs
    patch = {"spec": {"workersToDelete": [3, 0], "tfReplicaSpecs": {"Worker": {"replicas": 3}}}}
    await kubectl.ok("patch", "tfjob", "listed", "--type=merge", "-p", json.dumps(patch))
    await wait_for_workers(operator, "listed", 1, 2, 4)

    async def reported() -> list[dict] | None:
        events = [e for e in await operator.events("listed") if e["reason"] == "WorkerScaledDown"]
        return events or None

    [event] = await eventually(reported, what="the WorkerScaledDown event")
    assert event["message"] == (
        "Scaled down to 3 worker(s): removed listed-worker-3 (listed in spec.workersToDelete), listed-worker-0 "
        "(listed in spec.workersToDelete); workers now 1,2,4"
    )
    counted = {"job_namespace": "default", "chosen_by": "workersToDelete"}
    await eventually(lambda: operator.metric("tfjob_worker_scaled_down_total", counted) == 2, what="counted")

    # Listed indices are not refilled while listed: a scale-up appends.
    await kubectl.ok("scale", "tfjob/listed", "--replicas=4")
    await wait_for_workers(operator, "listed", 1, 2, 4, 5)


async def test_the_crd_refuses_a_list_on_a_static_job_with_a_clear_message(operator: Operator, kubectl) -> None:
    await create_and_wait_running(operator, tfjob("fixed", workers=2, dynamic=False), running=2)
    patch = {"spec": {"workersToDelete": [1]}}
    rc, _, err = await kubectl("patch", "tfjob", "fixed", "--type=merge", "-p", json.dumps(patch))
    assert rc != 0
    assert "spec.workersToDelete needs spec.enableDynamicWorker: true" in err, err
    rc, _, err = await kubectl(
        "patch",
        "tfjob",
        "fixed",
        "--type=merge",
        "-p",
        json.dumps({"spec": {"enableDynamicWorker": True, "workersToDelete": [1, 1]}}),
    )
    assert rc != 0 and "Duplicate value: 1" in err, err


async def test_without_annotations_kubectl_scale_removes_the_highest_index(operator: Operator, kubectl) -> None:
    await create_and_wait_running(operator, tfjob("plain", workers=3), running=3)
    await kubectl.ok("scale", "tfjob/plain", "--replicas=2")
    await wait_for_workers(operator, "plain", 0, 1)
    counted = {"job_namespace": "default", "chosen_by": "highestIndex"}
    await eventually(lambda: operator.metric("tfjob_worker_scaled_down_total", counted) == 1, what="counted")
    assert members_of(await operator.job("plain")) == [0, 1]
    row = (await kubectl.ok("get", "tfjob", "plain", "--no-headers")).split()
    assert row[3] == "0,1", row
