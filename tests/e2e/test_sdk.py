"""Every stored TFJob is readable by the Kubeflow Training SDK (``kubeflow-training``).

The SDK's ``TrainingClient.list_jobs`` deserializes each item into ``KubeflowOrgV1TFJob``, whose spec
model requires ``run_policy``; one job stored without it made the call fail for the whole namespace.
The CRD defaults ``runPolicy`` to ``{}``, so the apiserver stores it on every job. The SDK runs here for
real (its synchronous client, in a thread, against the simulated apiserver), on a job created without a
runPolicy and after the controller has written its status.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import pytest
from kubeflow.training import TrainingClient

from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import CRDS, Operator, create_and_wait_running, tfjob


def without_run_policy(name: str) -> dict[str, Any]:
    job = tfjob(name, workers=2)
    assert "runPolicy" not in job["spec"]
    return job


async def sdk_list_jobs(operator: Operator) -> list[Any]:
    kubeconfig = operator.cluster.kubeconfig_path

    def list_jobs() -> list[Any]:
        return TrainingClient(config_file=kubeconfig, namespace="default", job_kind="TFJob").list_jobs()

    return await anyio.to_thread.run_sync(list_jobs)


async def test_a_job_created_without_run_policy_is_listed_by_the_sdk(operator: Operator) -> None:
    await operator.client.create(
        TFJOBS, tfjob("with-policy", workers=1, run_policy={"backoffLimit": 2}), namespace="default"
    )
    stored = await create_and_wait_running(operator, without_run_policy("bare"), running=2)
    # The CRD's default is stored ({}; the schema's own defaults inside it, suspend: false, then apply).
    assert stored["spec"]["runPolicy"] == {"suspend": False}
    jobs = {job.metadata.name: job for job in await sdk_list_jobs(operator)}
    assert set(jobs) == {"bare", "with-policy"}
    bare = jobs["bare"]
    assert bare.spec.run_policy is not None
    assert bare.spec.tf_replica_specs["Worker"].replicas == 2
    assert "Running" in {c.type for c in bare.status.conditions}
    assert jobs["with-policy"].spec.run_policy.backoff_limit == 2


async def test_without_the_default_the_sdk_cannot_list_the_namespace(operator: Operator) -> None:
    # The failure the default prevents, reproduced: the same CRD without it, one job without runPolicy.
    crd = await operator.client.get(CRDS, "tfjobs.kubeflow.org")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert schema["runPolicy"].pop("default") == {}
    await operator.client.replace(CRDS, copy.deepcopy(crd))
    await operator.client.create(TFJOBS, without_run_policy("bare"), namespace="default")
    with pytest.raises(RuntimeError, match="Failed to list TFJobs in namespace: default"):
        await sdk_list_jobs(operator)
