"""Garbage collection as kubernetes-asyncio (the real client, unmodified) sees it: the three
propagation policies of a DELETE, and blockOwnerDeletion holding a foreground owner."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.waiting import eventually


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, time_scale=0.01)


@pytest.fixture
async def v1(sim_cluster: SimCluster) -> AsyncIterator[client.CoreV1Api]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=sim_cluster.kubeconfig_path, client_configuration=configuration)
    async with client.ApiClient(configuration=configuration) as api:
        yield client.CoreV1Api(api)


async def _owner_and_dependent(v1: client.CoreV1Api, suffix: str) -> tuple[str, str]:
    owner = await v1.create_namespaced_config_map("default", {"metadata": {"name": f"owner-{suffix}"}})
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        "blockOwnerDeletion": True,
    }
    await v1.create_namespaced_config_map(
        "default", {"metadata": {"name": f"dependent-{suffix}", "ownerReferences": [ref]}}
    )
    return owner.metadata.name, f"dependent-{suffix}"


async def _gone(v1: client.CoreV1Api, name: str) -> bool:
    try:
        await v1.read_namespaced_config_map(name, "default")
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


async def _until(check, timeout: float = 10.0) -> None:
    await eventually(check, timeout, interval=0.02)


async def test_background_deletes_the_owner_at_once_and_the_dependent_later(v1: client.CoreV1Api) -> None:
    owner, dependent = await _owner_and_dependent(v1, "bg")
    await v1.delete_namespaced_config_map(
        owner, "default", body=client.V1DeleteOptions(propagation_policy="Background")
    )
    assert await _gone(v1, owner)
    await _until(lambda: _gone(v1, dependent))


async def test_foreground_keeps_the_owner_until_blocking_dependents_are_gone(
    v1: client.CoreV1Api, sim_cluster: SimCluster
) -> None:
    sim_cluster.faults.pause_gc()
    owner, dependent = await _owner_and_dependent(v1, "fg")
    await v1.delete_namespaced_config_map(
        owner, "default", body=client.V1DeleteOptions(propagation_policy="Foreground")
    )
    waiting = await v1.read_namespaced_config_map(owner, "default")
    assert waiting.metadata.deletion_timestamp is not None
    assert waiting.metadata.finalizers == ["foregroundDeletion"]
    assert not await _gone(v1, dependent)
    sim_cluster.faults.resume_gc()
    await _until(lambda: _gone(v1, owner))
    assert await _gone(v1, dependent)


async def test_orphan_removes_the_owner_and_strips_the_reference(v1: client.CoreV1Api) -> None:
    owner, dependent = await _owner_and_dependent(v1, "or")
    await v1.delete_namespaced_config_map(owner, "default", body=client.V1DeleteOptions(propagation_policy="Orphan"))
    await _until(lambda: _gone(v1, owner))
    orphan = await v1.read_namespaced_config_map(dependent, "default")
    assert not orphan.metadata.owner_references
