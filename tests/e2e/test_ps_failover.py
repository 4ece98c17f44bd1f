"""A dynamic job's parameter server lost and re-created end to end (docs/tfjob-compatibility.md §3.9): deleted, then
evicted through the Eviction API, under restartPolicy Never; the PS comes back at the same name and service, the
workers keep their pods, the job stays Running, and the PSFailover event and tfjob_replica_failovers_total say why.
A PS that fails by itself still fails the job under Never, as upstream."""

from __future__ import annotations

from typing import Any

from controller.runtime.client import PODS, SERVICES
from tests.e2e.conftest import (
    Operator,
    annotate_pod,
    by_name,
    condition,
    create_and_wait_running,
    event_reasons,
    eventually,
    is_true,
    running_pods,
    tfjob,
)
from tfjob_sim.kubelet import EXIT_CODE


def uids(pods: list[dict[str, Any]], part: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods if part in p["metadata"]["name"]}


async def replaced(operator: Operator, job: str, name: str, old_uid: str, conditions_seen: list[str]) -> None:
    async def back() -> bool:
        current = await operator.job(job)
        conditions_seen.extend(c["type"] for c in current["status"].get("conditions", []) if c["status"] == "True")
        pod = by_name(running_pods(await operator.pods(job))).get(name)
        return bool(pod and pod["metadata"]["uid"] != old_uid)

    await eventually(back, what=f"{name} re-created and running")


async def test_a_deleted_then_evicted_ps_comes_back_at_its_address_and_the_job_runs_on(operator: Operator) -> None:
    job = tfjob("psf", workers=2, ps=1, restart_policy="Never")
    await create_and_wait_running(operator, job, running=3)
    pods = await operator.pods("psf")
    workers = uids(pods, "-worker-")
    service = await operator.client.get(SERVICES, "psf-ps-0", namespace="default")
    seen: list[str] = []

    old = uids(pods, "-ps-")["psf-ps-0"]
    await operator.client.delete(PODS, "psf-ps-0", namespace="default")
    await replaced(operator, "psf", "psf-ps-0", old, seen)

    old = uids(await operator.pods("psf"), "-ps-")["psf-ps-0"]
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "psf-ps-0", "namespace": "default"}}
    await operator.client.create(PODS, eviction, namespace="default", name="psf-ps-0", subresource="eviction")
    await replaced(operator, "psf", "psf-ps-0", old, seen)

    assert "Failed" not in seen and "Restarting" not in seen, seen
    # A Restarting condition is removed again when Running returns, so polling could miss one; its event stays.
    reasons = event_reasons(await operator.events("psf"))
    assert "TFJobRestarting" not in reasons and "TFJobFailed" not in reasons, reasons
    final = await operator.job("psf")
    assert is_true(final, "Running") and condition(final, "Failed") is None
    assert uids(await operator.pods("psf"), "-worker-") == workers, "the workers keep their pods"
    same = await operator.client.get(SERVICES, "psf-ps-0", namespace="default")
    assert same["metadata"]["uid"] == service["metadata"]["uid"], "the same service: the same address"
    record = final["status"]["dynamicWorkers"]["parameterServers"]["0"]
    assert record["failovers"] == 2 and record["lastReason"] == "Evicted"

    async def announced() -> list[dict[str, Any]] | None:
        events = [e for e in await operator.events("psf") if e["reason"] == "PSFailover"]
        return events if len(events) == 2 else None

    events = await eventually(announced, what="two PSFailover events")
    assert {"(Deleted)", "(Evicted)"} == {m for e in events for m in ("(Deleted)", "(Evicted)") if m in e["message"]}
    for reason in ("Deleted", "Evicted"):
        labels = {"job_namespace": "default", "replica_type": "PS", "reason": reason}
        await eventually(lambda labels=labels: operator.metric("tfjob_replica_failovers_total", labels) == 1)


async def test_with_two_ps_only_the_lost_one_is_replaced(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("two", workers=1, ps=2, restart_policy="Never"), running=3)
    before = uids(await operator.pods("two"), "")
    await operator.client.delete(PODS, "two-ps-1", namespace="default")
    await replaced(operator, "two", "two-ps-1", before["two-ps-1"], [])
    after = uids(await operator.pods("two"), "")
    assert {n: u for n, u in after.items() if n != "two-ps-1"} == {n: u for n, u in before.items() if n != "two-ps-1"}


async def test_a_ps_that_fails_by_itself_still_fails_the_job_under_never(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("own", workers=2, ps=1, restart_policy="Never"), running=3)
    await annotate_pod(operator, "own-ps-0", {EXIT_CODE: "1"})

    async def failed() -> dict[str, Any] | None:
        job = await operator.job("own")
        return job if is_true(job, "Failed") else None

    await eventually(failed, what="the job Failed")
    assert "PSFailover" not in event_reasons(await operator.events("own"))
