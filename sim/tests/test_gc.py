"""Garbage collector semantics against the real Store: background, foreground and orphan
propagation, blockOwnerDeletion, uid-based owner resolution, invalid references, custom and
cluster-scoped resources, pause/resume, and that work is proportional to what changed.

Tests synchronise on store changes with deadlines; "the GC did nothing more" is shown with
``anyio.wait_all_tasks_blocked()`` once no GC timer is pending (delay 0): a blocked GC with an
empty due queue cannot act until the next store change.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from tfjob_sim.gc import GarbageCollector, GCConfig
from tfjob_sim.kubelet import IGNORE_SIGTERM, Kubelet, KubeletConfig
from tfjob_sim.store import Store
from tfjob_sim.testing.recorder import Recorder

SCALE = 0.01
NS = "default"
HOLD = "example.com/hold"  # a foreign finalizer that keeps an object terminating until removed
CRDS = "customresourcedefinitions.apiextensions.k8s.io"


@asynccontextmanager
async def collector(
    store: Store | None = None, delay: float = 0.0, kubelet: bool = False
) -> AsyncIterator[tuple[Store, GarbageCollector, Recorder]]:
    store = store or Store()
    rec = Recorder(store)
    gc = GarbageCollector(store, GCConfig(delay_seconds=delay, time_scale=SCALE))
    async with anyio.create_task_group() as tg:
        tg.start_soon(gc.run)
        if kubelet:
            tg.start_soon(Kubelet(store, KubeletConfig(nodes=1, time_scale=SCALE)).run)
        await anyio.wait_all_tasks_blocked()
        yield store, gc, rec
        tg.cancel_scope.cancel()


def ref(owner: dict, block: bool = False, **override: Any) -> dict:
    out = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        **override,
    }
    if block:
        out["blockOwnerDeletion"] = True
    return out


def configmap(store: Store, name: str, *owner_refs: dict, namespace: str = NS, hold: bool = False) -> dict:
    meta: dict[str, Any] = {"name": name}
    if owner_refs:
        meta["ownerReferences"] = list(owner_refs)
    if hold:
        meta["finalizers"] = [HOLD]
    return store.create("configmaps", namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})


def cm(store: Store, name: str, namespace: str = NS) -> dict | None:
    return store.get("configmaps", namespace, name)


def release(store: Store, name: str, resource: str = "configmaps", namespace: str | None = NS) -> None:
    store.patch(resource, namespace, name, "merge", {"metadata": {"finalizers": None}})


def define_crd(store: Store, plural: str, kind: str, scope: str) -> str:
    store.create(
        CRDS,
        None,
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.example.com"},
            "spec": {
                "group": "example.com",
                "scope": scope,
                "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                ],
            },
        },
    )
    return f"{plural}.example.com"


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="delay_seconds"):
        GCConfig(delay_seconds=-1)
    with pytest.raises(ValueError, match="time_scale"):
        GCConfig(time_scale=0)


# ------------------------------------------------------------------------------------------- background


async def test_background_deletes_dependents_after_the_delay_and_cascades() -> None:
    async with collector(delay=10) as (store, _gc, rec):
        # The delay runs from the first change the collector saw of the child: its creation (it is
        # checked then, and the check made at that due time already finds the owner gone).
        start = anyio.current_time()
        owner = configmap(store, "owner")
        child = configmap(store, "child", ref(owner))
        configmap(store, "grandchild", ref(child))
        configmap(store, "bystander")
        store.delete("configmaps", NS, "owner")  # no policy: Background
        assert cm(store, "owner") is None
        assert cm(store, "child") is not None  # orphaned for a while: GC is asynchronous
        await rec.until(lambda: cm(store, "child") is None and cm(store, "grandchild") is None)
        assert rec.deleted_at("child", "configmaps") - start >= 10 * SCALE
        assert rec.deleted_at("grandchild", "configmaps") > rec.deleted_at("child", "configmaps")
        assert cm(store, "bystander") is not None


async def test_dependent_is_kept_while_any_owner_exists_and_loses_dangling_refs() -> None:
    async with collector() as (store, _gc, rec):
        first = configmap(store, "first")
        second = configmap(store, "second")
        configmap(store, "shared", ref(first), ref(second, block=True))
        store.delete("configmaps", NS, "first")
        await rec.until(lambda: len(cm(store, "shared")["metadata"]["ownerReferences"]) == 1)
        assert cm(store, "shared")["metadata"]["ownerReferences"] == [ref(second, block=True)]
        store.delete("configmaps", NS, "second")
        await rec.until(lambda: cm(store, "shared") is None)


async def test_owner_reference_changes_are_followed_and_other_writes_keep_them() -> None:
    """The index keeps a dependent's parsed owners across writes that leave ownerReferences alone
    (labels, data) and follows the writes that change them (a new owner, blockOwnerDeletion)."""
    async with collector() as (store, _gc, rec):
        first = configmap(store, "first")
        second = configmap(store, "second")
        configmap(store, "dep", ref(first))
        store.patch("configmaps", NS, "dep", "merge", {"metadata": {"labels": {"a": "b"}}, "data": {"k": "v"}})
        store.patch("configmaps", NS, "dep", "merge", {"metadata": {"ownerReferences": [ref(second)]}})
        store.delete("configmaps", NS, "first")
        await rec.until(lambda: cm(store, "first") is None)
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "dep") is not None  # its owner is "second" now
        store.patch("configmaps", NS, "dep", "merge", {"metadata": {"ownerReferences": [ref(second, block=True)]}})
        store.delete("configmaps", NS, "second", {"propagationPolicy": "Foreground"})
        await anyio.wait_all_tasks_blocked()
        await rec.until(lambda: cm(store, "dep") is None and cm(store, "second") is None)
        assert rec.deleted_at("dep", "configmaps") <= rec.deleted_at("second", "configmaps")


async def test_owner_resolved_by_uid_not_name() -> None:
    async with collector() as (store, _gc, rec):
        owner = configmap(store, "owner")
        # Same name, another uid (the owner was deleted and re-created): absent.
        configmap(store, "stale", ref(owner, uid="00000000-0000-4000-8000-000000000000"))
        # Right uid, wrong name or wrong kind: the reference does not resolve either.
        configmap(store, "misnamed", ref(owner, name="someone-else"))
        configmap(store, "miskinded", ref(owner, kind="Secret"))
        configmap(store, "good", ref(owner))
        await rec.until(
            lambda: cm(store, "stale") is None and cm(store, "misnamed") is None and cm(store, "miskinded") is None
        )
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "good") is not None and cm(store, "owner") is not None


async def test_invalid_namespace_references_count_as_absent() -> None:
    async with collector() as (store, _gc, rec):
        store.create("namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
        foreign = configmap(store, "foreign", namespace="other")
        configmap(store, "cross", ref(foreign))  # in "default", owner in "other"
        cluster_role = store.create(
            "clusterroles.rbac.authorization.k8s.io",
            None,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "owned-by-configmap", "ownerReferences": [ref(foreign)]},
                "rules": [],
            },
        )
        assert cluster_role["metadata"]["ownerReferences"]
        await rec.until(
            lambda: (
                cm(store, "cross") is None
                and store.get("clusterroles.rbac.authorization.k8s.io", None, "owned-by-configmap") is None
            )
        )
        assert cm(store, "foreign", "other") is not None


async def test_cluster_scoped_owner_of_namespaced_dependents() -> None:
    async with collector() as (store, _gc, rec):
        owner = store.create(
            "clusterroles.rbac.authorization.k8s.io",
            None,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "boss"},
                "rules": [],
            },
        )
        configmap(store, "worker", ref(owner))
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "worker") is not None  # a valid owner: kept
        store.delete("clusterroles.rbac.authorization.k8s.io", None, "boss")
        await rec.until(lambda: cm(store, "worker") is None)


# ------------------------------------------------------------------------------------------- foreground


async def test_foreground_waits_only_for_blocking_dependents() -> None:
    async with collector() as (store, _gc, rec):
        owner = configmap(store, "owner")
        configmap(store, "blocker", ref(owner, block=True), hold=True)
        configmap(store, "free", ref(owner), hold=True)
        store.delete("configmaps", NS, "owner", {"propagationPolicy": "Foreground"})
        meta = cm(store, "owner")["metadata"]
        assert meta["deletionTimestamp"] and meta["finalizers"] == ["foregroundDeletion"]
        # Both dependents are deleted; they stay terminating because of the hold finalizer.
        await rec.until(
            lambda: (
                cm(store, "blocker")["metadata"].get("deletionTimestamp")
                and cm(store, "free")["metadata"].get("deletionTimestamp")
            )
        )
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "owner") is not None
        release(store, "free")  # a non-blocking dependent going away does not release the owner
        assert cm(store, "free") is None
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "owner")["metadata"]["finalizers"] == ["foregroundDeletion"]
        release(store, "blocker")
        await rec.until(lambda: cm(store, "owner") is None)


async def test_foreground_owner_does_not_wait_for_non_blocking_dependents() -> None:
    async with collector() as (store, _gc, rec):
        owner = configmap(store, "owner")
        configmap(store, "free", ref(owner), hold=True)
        store.delete("configmaps", NS, "owner", {"propagationPolicy": "Foreground"})
        await rec.until(lambda: cm(store, "owner") is None)
        assert cm(store, "free")["metadata"]["deletionTimestamp"]  # deleted, still held


async def test_foreground_is_recursive_through_blocking_chains() -> None:
    async with collector() as (store, _gc, rec):
        owner = configmap(store, "owner")
        child = configmap(store, "child", ref(owner, block=True))
        configmap(store, "grandchild", ref(child, block=True), hold=True)
        store.delete("configmaps", NS, "owner", {"propagationPolicy": "Foreground"})
        # The child has dependents and a waiting owner: it is deleted in foreground too.
        await rec.until(
            lambda: (
                "foregroundDeletion" in (cm(store, "child")["metadata"].get("finalizers") or [])
                and cm(store, "grandchild")["metadata"].get("deletionTimestamp")
            )
        )
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "owner") is not None and cm(store, "child") is not None
        release(store, "grandchild")
        await rec.until(lambda: cm(store, "owner") is None)
        order = [rec.deleted_at(n, "configmaps") for n in ("grandchild", "child", "owner")]
        assert order == sorted(order)


async def test_dependent_added_while_owner_waits_is_deleted_too() -> None:
    async with collector() as (store, _gc, rec):
        owner = configmap(store, "owner")
        configmap(store, "first", ref(owner, block=True), hold=True)
        store.delete("configmaps", NS, "owner", {"propagationPolicy": "Foreground"})
        await rec.until(lambda: cm(store, "first")["metadata"].get("deletionTimestamp"))
        configmap(store, "late", ref(cm(store, "owner"), block=True), hold=True)
        await rec.until(lambda: cm(store, "late")["metadata"].get("deletionTimestamp"))
        release(store, "first")
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "owner") is not None  # still blocked by "late"
        release(store, "late")
        await rec.until(lambda: cm(store, "owner") is None)


async def test_foreground_waits_for_graceful_pod_termination() -> None:
    async with collector(kubelet=True) as (store, _gc, rec):
        owner = configmap(store, "job")
        store.create(
            "pods",
            NS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "job-worker-0",
                    "ownerReferences": [ref(owner, block=True, controller=True)],
                    "annotations": {IGNORE_SIGTERM: "true"},
                },  # stays terminating for its whole grace
                "spec": {"terminationGracePeriodSeconds": 20, "containers": [{"name": "main", "image": "busybox"}]},
            },
        )
        await rec.until(
            lambda: (store.get("pods", NS, "job-worker-0") or {}).get("status", {}).get("phase") == "Running"
        )
        start = anyio.current_time()
        store.delete("configmaps", NS, "job", {"propagationPolicy": "Foreground"})
        await rec.until(lambda: cm(store, "job") is None)
        pod_gone = rec.deleted_at("job-worker-0", "pods")
        assert pod_gone is not None and pod_gone - start >= 20 * SCALE  # the pod's grace period
        assert rec.deleted_at("job", "configmaps") > pod_gone


# ------------------------------------------------------------------------------------------- orphan


async def test_orphan_strips_the_owner_and_keeps_dependents() -> None:
    async with collector() as (store, _gc, rec):
        owner = configmap(store, "owner")
        other = configmap(store, "other")
        configmap(store, "only", ref(owner, block=True))
        configmap(store, "both", ref(owner), ref(other))
        store.delete("configmaps", NS, "owner", {"propagationPolicy": "Orphan"})
        assert cm(store, "owner")["metadata"]["finalizers"] == ["orphan"]
        await rec.until(lambda: cm(store, "owner") is None)
        # The references were removed before the finalizer.
        assert "ownerReferences" not in cm(store, "only")["metadata"]
        assert cm(store, "both")["metadata"]["ownerReferences"] == [ref(other)]
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "only") is not None and cm(store, "both") is not None


async def test_orphan_finalizer_on_owner_without_dependents_is_removed() -> None:
    async with collector() as (store, _gc, rec):
        configmap(store, "lonely")
        store.delete("configmaps", NS, "lonely", {"propagationPolicy": "Orphan"})
        await rec.until(lambda: cm(store, "lonely") is None)


# ------------------------------------------------------------------------------------------- any resource


async def test_custom_resources_and_cluster_scoped_custom_owner() -> None:
    async with collector() as (store, _gc, rec):
        widgets = define_crd(store, "widgets", "Widget", "Namespaced")
        fleets = define_crd(store, "fleets", "Fleet", "Cluster")
        fleet = store.create(
            fleets, None, {"apiVersion": "example.com/v1", "kind": "Fleet", "metadata": {"name": "fleet"}}
        )
        widget = store.create(
            widgets,
            NS,
            {
                "apiVersion": "example.com/v1",
                "kind": "Widget",
                "metadata": {"name": "w", "ownerReferences": [ref(fleet)]},
            },
        )
        configmap(store, "w-config", ref(widget, block=True), hold=True)
        store.create(
            "services",
            NS,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "w-svc", "ownerReferences": [ref(widget, block=True)]},
                "spec": {"ports": [{"port": 80}]},
            },
        )
        store.delete(fleets, None, "fleet", {"propagationPolicy": "Foreground"})
        # w's reference does not block the fleet, so the fleet goes without waiting for w; w and
        # its own dependents are collected (w in foreground if the fleet was still waiting when w
        # was examined, else in background: either way everything below it goes).
        await rec.until(lambda: store.get(fleets, None, "fleet") is None)
        await rec.until(
            lambda: (
                store.get("services", NS, "w-svc") is None
                and cm(store, "w-config")["metadata"].get("deletionTimestamp")
            )
        )
        release(store, "w-config")
        await rec.until(lambda: store.get(widgets, NS, "w") is None and cm(store, "w-config") is None)


async def test_custom_resource_foreground_with_blocking_pods() -> None:
    async with collector() as (store, _gc, rec):
        widgets = define_crd(store, "widgets", "Widget", "Namespaced")
        widget = store.create(
            widgets, NS, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
        )
        store.create(
            "pods",
            NS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "w-0",
                    "finalizers": [HOLD],
                    "ownerReferences": [ref(widget, block=True, controller=True)],
                },
                "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            },
        )
        store.delete(widgets, NS, "w", {"propagationPolicy": "Foreground"})
        await rec.until(lambda: store.get("pods", NS, "w-0")["metadata"].get("deletionTimestamp"))
        await anyio.wait_all_tasks_blocked()
        assert store.get(widgets, NS, "w")["metadata"]["finalizers"] == ["foregroundDeletion"]
        release(store, "w-0", resource="pods")
        await rec.until(lambda: store.get(widgets, NS, "w") is None)


# ------------------------------------------------------------------------------------------- lifecycle


async def test_pause_and_resume() -> None:
    async with collector() as (store, gc, rec):
        owner = configmap(store, "owner")
        configmap(store, "child", ref(owner))
        gc.pause()
        store.delete("configmaps", NS, "owner")
        await anyio.wait_all_tasks_blocked()
        assert cm(store, "child") is not None
        gc.resume()
        await rec.until(lambda: cm(store, "child") is None)


async def test_objects_existing_before_start_are_collected() -> None:
    store = Store()
    owner = configmap(store, "owner")
    configmap(store, "child", ref(owner))
    configmap(store, "dangling", ref(owner, uid="11111111-1111-4111-8111-111111111111"))
    store.delete("configmaps", NS, "owner")
    async with collector(store) as (_store, gc, rec):
        await rec.until(lambda: cm(store, "child") is None and cm(store, "dangling") is None)
        assert gc.dependents_of(owner["metadata"]["uid"]) == set()


class CountingStore(Store):
    """A Store that counts the reads made through its public API."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.lists = 0

    def get(self, *args: Any, **kwargs: Any) -> dict | None:
        self.gets += 1
        return super().get(*args, **kwargs)

    def list(self, *args: Any, **kwargs: Any) -> tuple[list[dict], str]:
        self.lists += 1
        return super().list(*args, **kwargs)


async def test_work_is_proportional_to_the_change_not_the_store_size() -> None:
    store = CountingStore()
    async with collector(store) as (_store, gc, rec):
        owners = [configmap(store, f"owner-{i}") for i in range(100)]
        for i in range(5000):
            configmap(store, f"cm-{i}", ref(owners[i % 100]))
        await anyio.wait_all_tasks_blocked()
        assert len(gc.dependents_of(owners[7]["metadata"]["uid"])) == 50
        gets, lists = store.gets, store.lists
        store.delete("configmaps", NS, "owner-7")
        await rec.until(lambda: not gc.dependents_of(owners[7]["metadata"]["uid"]))
        await anyio.wait_all_tasks_blocked()
        # 50 dependents: one read each to decide, plus what their deletion triggers; no relist.
        assert store.lists == lists
        assert store.gets - gets <= 3 * 50 + 10
        assert sum(1 for i in range(5000) if cm(store, f"cm-{i}") is None) == 50
