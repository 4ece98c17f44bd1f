"""kubernetes-asyncio (the real client, unmodified) against the simulator: list/watch resume from an RV,
410 after compaction, bookmarks, conflicts, pruning, status and scale subresources, Leases."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.objects import widget, widget_crd
from tfjob_sim.watch import WatchConfig


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, time_scale=0.01, watch=WatchConfig(bookmark_period=0.2))


@pytest.fixture
async def api_client(sim_cluster: SimCluster) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=sim_cluster.kubeconfig_path, client_configuration=configuration)
    async with client.ApiClient(configuration=configuration) as api:
        yield api


async def test_list_then_watch_resumes_exactly(api_client: client.ApiClient, sim_cluster: SimCluster) -> None:
    v1 = client.CoreV1Api(api_client)
    await v1.create_namespaced_config_map("default", {"metadata": {"name": "before"}})
    listed = await v1.list_namespaced_config_map("default")
    assert [i.metadata.name for i in listed.items] == ["before"]
    list_rv = listed.metadata.resource_version
    created = await v1.create_namespaced_config_map("default", {"metadata": {"name": "after"}, "data": {"a": "1"}})
    await v1.patch_namespaced_config_map("after", "default", {"data": {"a": "2"}})
    seen = []
    w = watch.Watch()
    with anyio.fail_after(30):
        async with w.stream(
            v1.list_namespaced_config_map, "default", resource_version=list_rv, timeout_seconds=5
        ) as stream:
            async for event in stream:
                seen.append((event["type"], event["object"].metadata.name, event["object"].data))
                if len(seen) == 2:
                    w.stop()
    assert seen == [("ADDED", "after", {"a": "1"}), ("MODIFIED", "after", {"a": "2"})]
    # Resuming from the ADDED's RV gives exactly the later change, nothing synthetic.
    resumed = []
    w = watch.Watch()
    with anyio.fail_after(30):
        async with w.stream(
            v1.list_namespaced_config_map,
            "default",
            resource_version=created.metadata.resource_version,
            timeout_seconds=1,
        ) as stream:
            async for event in stream:
                resumed.append(event["type"])
    assert resumed == ["MODIFIED"]


async def test_watch_after_compaction_raises_410(api_client: client.ApiClient, sim_cluster: SimCluster) -> None:
    v1 = client.CoreV1Api(api_client)
    listed = await v1.list_namespaced_config_map("default")
    await v1.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    sim_cluster.faults.compact()
    w = watch.Watch()
    with pytest.raises(ApiException) as info, anyio.fail_after(30):
        async with w.stream(
            v1.list_namespaced_config_map,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=5,
        ) as stream:
            async for _event in stream:
                pass
    assert info.value.status == 410 and "Expired" in info.value.reason


async def test_bookmarks_carry_the_current_rv(api_client: client.ApiClient, sim_cluster: SimCluster) -> None:
    v1 = client.CoreV1Api(api_client)
    listed = await v1.list_namespaced_pod("default")
    await v1.create_namespaced_secret("default", {"metadata": {"name": "progress"}})
    w = watch.Watch()
    with anyio.fail_after(30):
        async with w.stream(
            v1.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=5,
        ) as stream:
            async for event in stream:
                assert event["type"] == "BOOKMARK"
                bookmark_rv = event["raw_object"]["metadata"]["resourceVersion"]
                w.stop()
    assert int(bookmark_rv) == sim_cluster.store.resource_version > int(listed.metadata.resource_version)


async def test_conflicts_and_lease_rules(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    cm = await v1.create_namespaced_config_map("default", {"metadata": {"name": "c"}, "data": {"v": "1"}})
    await v1.patch_namespaced_config_map("c", "default", {"data": {"v": "2"}})
    cm.data = {"v": "3"}
    with pytest.raises(ApiException) as info:
        await v1.replace_namespaced_config_map("c", "default", cm)
    assert info.value.status == 409 and '"reason":"Conflict"' in info.value.body
    coord = client.CoordinationV1Api(api_client)
    lease = await coord.create_namespaced_lease(
        "default", {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    )
    with pytest.raises(ApiException) as info:
        await coord.replace_namespaced_lease(
            "leader", "default", {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "b"}}
        )
    assert info.value.status == 422
    lease.spec.holder_identity = "b"
    renewed = await coord.replace_namespaced_lease("leader", "default", lease)
    assert renewed.spec.holder_identity == "b"
    with pytest.raises(ApiException) as info:
        await coord.create_namespaced_lease("default", {"metadata": {"name": "leader"}, "spec": {}})
    assert info.value.status == 409 and '"reason":"AlreadyExists"' in info.value.body


async def test_custom_resources_prune_status_and_scale(api_client: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    await ext.create_custom_resource_definition(widget_crd())
    custom = client.CustomObjectsApi(api_client)
    created = await custom.create_namespaced_custom_object(
        "example.com", "v1", "default", "widgets", widget("w", 2, unknown="pruned")
    )
    assert "unknown" not in created["spec"] and created["spec"]["color"] == "red"
    status = await custom.patch_namespaced_custom_object_status(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {"status": {"replicas": 2, "selector": "app=w"}},
        _content_type="application/merge-patch+json",
    )
    assert status["status"] == {"replicas": 2, "selector": "app=w"}
    assert status["metadata"]["generation"] == 1
    scale = await custom.get_namespaced_custom_object_scale("example.com", "v1", "default", "widgets", "w")
    assert scale["spec"]["replicas"] == 2 and scale["status"]["selector"] == "app=w"
    scaled = await custom.patch_namespaced_custom_object_scale(
        "example.com",
        "v1",
        "default",
        "widgets",
        "w",
        {"spec": {"replicas": 7}},
        _content_type="application/merge-patch+json",
    )
    assert scaled["spec"]["replicas"] == 7
    current = await custom.get_namespaced_custom_object("example.com", "v1", "default", "widgets", "w")
    assert current["spec"]["replicas"] == 7 and current["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as info:
        await custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("bad", -3))
    assert info.value.status == 422 and "spec.replicas" in info.value.body
