"""The trimmed cache (controller.tfjob.trim): decide() on the pods and services as the informers cache
them gives the same decision as on the objects as the API server sends them -- here on real objects
from the simulated cluster (kubelet-written statuses, managedFields, every condition) in the states
that matter: running, OOM-killed, failed with a permanent code, evicted, terminating, Succeeded."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest
import yaml

from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS, PODS, SERVICES, ApiClient
from controller.tfjob.actions import CreatePod, CreateService
from controller.tfjob.decide import DecideConfig, decide
from controller.tfjob.executor import TFJOBS
from controller.tfjob.trim import trim_pod, trim_service
from tests.e2e.conftest import CRD_PATH, tfjob
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.kubelet import EVICT, EXIT_CODE, REASON, RUN_SECONDS
from tfjob_sim.testing.waiting import eventually

from .builders import NOW, make_job, make_pod


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=2, time_scale=0.01)


def annotate(body: dict[str, Any], **annotations: str) -> None:
    body["metadata"].setdefault("annotations", {}).update(annotations)


async def test_decide_is_the_same_on_trimmed_simulator_objects(sim_cluster: SimCluster) -> None:
    async with await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path) as client:
        await client.create(CUSTOM_RESOURCE_DEFINITIONS, yaml.safe_load(CRD_PATH.read_text()))
        jobs = []
        for name, dynamic, policy in (
            ("dyn", True, "ExitCode"),
            ("plain", False, "ExitCode"),
            ("never", False, "Never"),
        ):
            jobs.append(
                await client.create(
                    TFJOBS, tfjob(name, workers=5, ps=1, dynamic=dynamic, restart_policy=policy), namespace="default"
                )
            )
        states = {  # worker index -> annotations that steer the simulated kubelet
            1: {RUN_SECONDS: "1", EXIT_CODE: "137", REASON: "OOMKilled"},
            2: {RUN_SECONDS: "1", EXIT_CODE: "1"},
            3: {EVICT: "true"},
            4: {RUN_SECONDS: "1", EXIT_CODE: "0"},
        }
        for job in jobs:
            for action in decide(job, [], [], NOW, DecideConfig()).actions:
                if isinstance(action, CreatePod):
                    body = copy.deepcopy(action.pod)
                    if action.replica_type == "Worker" and action.index in states:
                        annotate(body, **states[action.index])
                    await client.create(PODS, body, namespace="default")
                elif isinstance(action, CreateService):
                    await client.create(SERVICES, action.service, namespace="default")

        async def settled() -> bool:
            pods = (await client.list(PODS, namespace="default"))["items"]
            phases = {p["metadata"]["name"]: p["status"].get("phase") for p in pods}
            return len(pods) == 18 and all(
                phases[f"{j}-worker-{i}"] == ("Running" if i == 0 else "Succeeded" if i == 4 else "Failed")
                for j in ("dyn", "plain", "never")
                for i in range(5)
            )

        await eventually(settled, timeout=30, what="the pods in their steered states")
        # one more pod in every state: terminating (graceful delete of a running pod)
        await client.delete(PODS, "dyn-worker-0", namespace="default", grace_period_seconds=3600)
        pods = (await client.list(PODS, namespace="default"))["items"]
        services = (await client.list(SERVICES, namespace="default"))["items"]
        assert any("managedFields" in p["metadata"] for p in pods)  # the objects are as a server sends them
        jobs = (await client.list(TFJOBS, namespace="default"))["items"]

    compared = 0
    for job in jobs:
        for offset in (0, 30, 700):
            now = NOW + timedelta(seconds=offset)
            full = decide(copy.deepcopy(job), copy.deepcopy(pods), copy.deepcopy(services), now)
            trimmed = decide(copy.deepcopy(job), [trim_pod(p) for p in pods], [trim_service(s) for s in services], now)
            assert trimmed == full, job["metadata"]["name"]
            compared += 1
            if offset == 0:
                assert full.actions or full.events  # the states above are not a no-op: something is decided
    assert compared == 9


def test_trimmed_objects_are_small_fresh_and_idempotent() -> None:
    job = make_job(worker=1, dynamic=True)
    pod = make_pod(
        job,
        "Worker",
        0,
        "Failed",
        exit_code=137,
        termination_reason="OOMKilled",
        started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:01:00Z",
        reason="Evicted",
    )
    pod["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    pod["metadata"]["labels"]["team"] = "vision"
    pod["metadata"]["annotations"] = {"a": "b" * 1000}
    pod["spec"] = {"containers": [{"name": "tensorflow", "env": [{"name": "TF_CONFIG", "value": "x" * 1000}]}]}
    original = json.loads(json.dumps(pod))
    trimmed = trim_pod(pod)
    assert pod == original  # the input is not modified
    assert trim_pod(trimmed) == trimmed
    assert set(trimmed) == {"apiVersion", "kind", "metadata", "status"}
    assert set(trimmed["metadata"]) <= {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "deletionTimestamp",
        "labels",
        "ownerReferences",
    }
    assert set(trimmed["metadata"]["labels"]) == {
        "training.kubeflow.org/replica-type",
        "training.kubeflow.org/replica-index",
        "training.kubeflow.org/job-name",
    }
    assert trimmed["status"]["reason"] == "Evicted"
    assert trimmed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137
    assert len(json.dumps(trimmed)) < len(json.dumps(pod)) / 3
