"""A TFJob under Kueue, driven as Kueue drives it (docs/kueue.md): created suspended with a queue name, admitted by
one update that injects its flavor's node selector and tolerations into every pod template and unsuspends it,
preempted by suspending it and restoring the templates, admitted again elsewhere; and a MultiKueue job
(``runPolicy.managedBy``) left entirely to its manager."""

from __future__ import annotations

from typing import Any

from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    Operator,
    eventually,
    is_true,
    reconciled_once_more,
    running_pods,
    tfjob,
)

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
FLAVOR_LABEL = "cloud.example.com/flavor"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def queued_job(name: str) -> dict[str, Any]:
    job = tfjob(name, workers=2, ps=1, run_policy={"suspend": True})
    job["metadata"]["labels"] = {QUEUE_LABEL: "team-a"}
    return job


def admission(job: dict[str, Any], flavor: str | None) -> dict[str, Any]:
    """The update Kueue's job reconciler makes on admission (every replica type's template gets the flavor's node
    selector and toleration, then ``suspend: false``), or, with ``flavor=None``, on preemption (``suspend: true``
    and the templates restored)."""
    specs = {}
    for replica_type in job["spec"]["tfReplicaSpecs"]:
        template_spec: dict[str, Any] = (
            {
                "nodeSelector": {FLAVOR_LABEL: flavor},
                "tolerations": [{"key": FLAVOR_LABEL, "operator": "Equal", "value": flavor, "effect": "NoSchedule"}],
            }
            if flavor is not None
            else {"nodeSelector": None, "tolerations": None}
        )
        specs[replica_type] = {"template": {"spec": template_spec}}
    return {"spec": {"tfReplicaSpecs": specs, "runPolicy": {"suspend": flavor is None}}}


async def admitted_on(operator: Operator, name: str, node: str) -> list[dict[str, Any]]:
    async def placed() -> list[dict[str, Any]] | None:
        pods = running_pods(await operator.pods(name))
        return pods if len(pods) == 3 and {p["spec"]["nodeName"] for p in pods} == {node} else None

    return await eventually(placed, what=f"every pod of {name} running on {node}")


async def test_kueue_admits_preempts_and_admits_again_through_suspend_and_the_templates(
    operator: Operator, kubectl
) -> None:
    await kubectl.ok("label", "node", "sim-node-1", f"{FLAVOR_LABEL}=on-demand")
    await kubectl.ok("label", "node", "sim-node-2", f"{FLAVOR_LABEL}=spot")
    job = queued_job("queued")
    await operator.client.create(TFJOBS, job, namespace="default")
    await eventually(lambda: _suspended(operator, "queued"), what="Suspended while it waits for admission")
    await reconciled_once_more(operator, "queued")
    assert await operator.pods("queued") == [], "a suspended job waiting for admission creates nothing"

    await operator.client.patch(TFJOBS, "queued", admission(job, "on-demand"), namespace="default")
    pods = await admitted_on(operator, "queued", "sim-node-1")
    for pod in pods:
        assert pod["spec"]["nodeSelector"] == {FLAVOR_LABEL: "on-demand"}
        assert {"key": FLAVOR_LABEL, "operator": "Equal", "value": "on-demand", "effect": "NoSchedule"} in pod["spec"][
            "tolerations"
        ]
    await eventually(lambda: _running(operator, "queued"), what="Running once admitted")

    await operator.client.patch(TFJOBS, "queued", admission(job, None), namespace="default")

    async def evicted() -> bool:
        return not await operator.pods("queued") and await _suspended(operator, "queued") is not None

    await eventually(evicted, what="every pod gone and the job Suspended after preemption")

    await operator.client.patch(TFJOBS, "queued", admission(job, "spot"), namespace="default")
    pods = await admitted_on(operator, "queued", "sim-node-2")
    assert all(p["spec"]["nodeSelector"] == {FLAVOR_LABEL: "spot"} for p in pods)
    await eventually(lambda: _running(operator, "queued"), what="Running again on the second flavor")


async def test_a_multikueue_job_is_left_to_its_manager(operator: Operator) -> None:
    job = tfjob("remote", workers=2, run_policy={"managedBy": MULTIKUEUE})
    await operator.client.create(TFJOBS, job, namespace="default")
    await reconciled_once_more(operator, "remote")
    assert await operator.pods("remote") == [] and await operator.services("remote") == []
    assert "status" not in await operator.job("remote") or not (await operator.job("remote"))["status"]


async def _suspended(operator: Operator, name: str) -> dict[str, Any] | None:
    job = await operator.job(name)
    return job if is_true(job, "Suspended") else None


async def _running(operator: Operator, name: str) -> dict[str, Any] | None:
    job = await operator.job(name)
    return job if is_true(job, "Running") else None
