"""The simulated kube-scheduler and a pod's PersistentVolumeClaims (VolumeBinding's PreFilter): a pod whose claim
is missing, being deleted, or unbound with a class that binds Immediately stays Pending with kube-scheduler's
FailedScheduling message, and is attempted again when its claim (or a StorageClass) changes, not on a timer; a
claim that waits for its first consumer does not hold the pod, and the storage controller provisions it on the
node the pod was bound to.

The Store runs a Kubelet (annotation runtime, time_scale 0.01) and the storage controllers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from tfjob_sim.kubelet import Kubelet, KubeletConfig
from tfjob_sim.persistentvolumes import SELECTED_NODE, StorageConfig, StorageControllers
from tfjob_sim.scheduler import claims_verdict, prefilter_error
from tfjob_sim.storagetypes import PVCS, PVS, STORAGE_CLASSES
from tfjob_sim.store import Store
from tfjob_sim.testing.nodes import NS, SCALE, condition, get_pod, make_pod, running
from tfjob_sim.testing.recorder import Recorder
from tfjob_sim.testing.waiting import never

PREEMPTION = " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."


@asynccontextmanager
async def cluster() -> AsyncIterator[tuple[Store, Kubelet, Recorder]]:
    """Three nodes, the scheduler and kubelet, and the storage controllers with the default class ``standard``."""
    store = Store()
    recorder = Recorder(store)
    kubelet = Kubelet(store, KubeletConfig(nodes=3, time_scale=SCALE))
    storage = StorageControllers(store, StorageConfig(time_scale=SCALE))
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(kubelet.run)
            tg.start_soon(storage.run)
            await recorder.until(lambda: len(store.list("nodes")[0]) == 3 and store.list(STORAGE_CLASSES)[0])
            yield store, kubelet, recorder
            tg.cancel_scope.cancel()
    finally:
        storage.stop_and_clean()
    assert kubelet.listener_failures == []


def claim(name: str, storage_class: str | None = None, finalizers: list[str] | None = None) -> dict:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    meta: dict[str, Any] = {"name": name, **({"finalizers": finalizers} if finalizers else {})}
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def pod_using(name: str, *claims: str) -> dict:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    pod = make_pod(name, volumes=volumes)
    pod["metadata"]["namespace"] = NS
    return pod


def storage_class(name: str, binding: str) -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "example.com/nobody",  # no provisioner serves it: its claims bind statically
        "volumeBindingMode": binding,
    }


def volume(name: str, storage_class: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "hostPath": {"path": "/srv/volume"},
        },
    }


def failed_scheduling(store: Store, name: str) -> list[tuple[str, int]]:
    """(message, attempts) of the pod's FailedScheduling events. kube-scheduler's events are a series per
    reason: the first attempt's message, and the number of attempts as the series' count."""
    items, _ = store.list("events", NS, field_selector=f"involvedObject.name={name}")
    return [(e["message"], (e.get("series") or {}).get("count", 1)) for e in items if e["reason"] == "FailedScheduling"]


def unschedulable(store: Store, name: str) -> str | None:
    """The PodScheduled=False message of pod ``name``, or None while it has none."""
    cond = condition(get_pod(store, name) or {}, "PodScheduled")
    return cond["message"] if cond and cond["status"] == "False" else None


async def test_a_pod_whose_claim_is_missing_waits_and_is_scheduled_when_the_claim_appears() -> None:
    async with cluster() as (store, _kubelet, rec):
        store.create("pods", NS, pod_using("p", "data"))
        expected = '0/3 nodes are available: persistentvolumeclaim "data" not found.' + PREEMPTION
        assert await rec.until(lambda: unschedulable(store, "p")) == expected
        assert failed_scheduling(store, "p") == [(expected, 1)]
        cond = condition(get_pod(store, "p"), "PodScheduled")
        assert (cond["reason"], get_pod(store, "p")["status"].get("phase")) == ("Unschedulable", "Pending")
        # Nothing changes: no new attempt (the scheduler is woken by events, it does not poll).
        await never(lambda: failed_scheduling(store, "p") != [(expected, 1)], 0.3, what="another attempt")
        assert not get_pod(store, "p")["spec"].get("nodeName")

        store.create(PVCS, NS, claim("data"))  # the default class: WaitForFirstConsumer
        await rec.until(lambda: running(store, "p"))
        node = get_pod(store, "p")["spec"]["nodeName"]
        pvc = await rec.until(lambda: (c := store.get(PVCS, NS, "data")) and c["status"]["phase"] == "Bound" and c)
        pv = store.get(PVS, None, pvc["spec"]["volumeName"])
        assert pv["metadata"]["annotations"][SELECTED_NODE] == node  # provisioned where the pod went
        assert condition(get_pod(store, "p"), "PodScheduled")["status"] == "True"


async def test_a_claim_waiting_for_its_first_consumer_does_not_hold_the_pod() -> None:
    async with cluster() as (store, _kubelet, rec):
        store.create(PVCS, NS, claim("ckpt"))
        store.create("pods", NS, pod_using("p", "ckpt"))
        await rec.until(lambda: running(store, "p"))
        assert failed_scheduling(store, "p") == []
        pvc = await rec.until(lambda: (c := store.get(PVCS, NS, "ckpt")) and c["spec"].get("volumeName") and c)
        assert store.get(PVS, None, pvc["spec"]["volumeName"]) is not None


async def test_an_unbound_immediate_claim_holds_the_pod_until_it_binds() -> None:
    async with cluster() as (store, _kubelet, rec):
        store.create(STORAGE_CLASSES, None, storage_class("manual", "Immediate"))
        store.create(PVCS, NS, claim("results", "manual"))
        store.create("pods", NS, pod_using("p", "results"))
        expected = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims." + PREEMPTION
        assert await rec.until(lambda: unschedulable(store, "p")) == expected
        await never(lambda: get_pod(store, "p")["spec"].get("nodeName"), 0.3, what="the pod bound")

        store.create(PVS, None, volume("by-hand", "manual"))  # the binder binds the claim to it
        await rec.until(lambda: running(store, "p"))
        assert store.get(PVCS, NS, "results")["spec"]["volumeName"] == "by-hand"
        assert failed_scheduling(store, "p") == [(expected, 1)]  # bound at the attempt the binding caused


async def test_a_claim_being_deleted_holds_the_pod_and_then_is_not_found() -> None:
    async with cluster() as (store, _kubelet, rec):
        store.create(STORAGE_CLASSES, None, storage_class("manual", "Immediate"))
        store.create(PVCS, NS, claim("old", "manual", finalizers=["example.com/keep"]))
        store.create("pods", NS, pod_using("p", "old"))
        unbound = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims." + PREEMPTION
        assert await rec.until(lambda: unschedulable(store, "p")) == unbound

        # The claim's deletion is an event of the claim: the pod is attempted again at once.
        store.delete(PVCS, NS, "old")
        deleting = '0/3 nodes are available: persistentvolumeclaim "old" is being deleted.' + PREEMPTION
        await rec.until(lambda: unschedulable(store, "p") == deleting)
        # In-use protection does not count a pod that is not scheduled: with the other finalizer gone, so is
        # the claim, and the pod says so.
        await rec.until(lambda: store.get(PVCS, NS, "old")["metadata"]["finalizers"] == ["example.com/keep"])
        store.patch(PVCS, NS, "old", "merge", {"metadata": {"finalizers": None}})
        missing = '0/3 nodes are available: persistentvolumeclaim "old" not found.' + PREEMPTION
        await rec.until(lambda: unschedulable(store, "p") == missing)
        # One series of attempts (its count is written at the second, then on a heartbeat).
        [(first, attempts)] = failed_scheduling(store, "p")
        assert first == unbound and attempts >= 2
        assert not get_pod(store, "p")["spec"].get("nodeName")


async def test_a_storage_class_appearing_releases_a_pod_whose_claim_names_it() -> None:
    async with cluster() as (store, _kubelet, rec):
        # A class that does not exist binds Immediately; once it exists as WaitForFirstConsumer, the pod goes.
        store.create(PVCS, NS, claim("later", "delayed"))
        store.create("pods", NS, pod_using("p", "later"))
        expected = "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims." + PREEMPTION
        assert await rec.until(lambda: unschedulable(store, "p")) == expected
        store.create(STORAGE_CLASSES, None, storage_class("delayed", "WaitForFirstConsumer"))
        await rec.until(lambda: running(store, "p"))


async def test_the_first_claim_that_is_missing_or_deleted_decides_in_the_order_of_the_volumes() -> None:
    store = Store()
    store.create(STORAGE_CLASSES, None, storage_class("manual", "Immediate"))
    store.create(STORAGE_CLASSES, None, storage_class("delayed", "WaitForFirstConsumer"))
    store.create(PVCS, NS, claim("a", "manual"))
    store.create(PVCS, NS, claim("b", "delayed"))
    store.create(PVCS, NS, claim("c", "manual"))
    pod = pod_using("p", "a", "b", "c")
    assert claims_verdict(store, pod) == ("pod has unbound immediate PersistentVolumeClaims", ["a", "c"])
    assert claims_verdict(store, pod_using("q", "b")) == (None, [])
    missing = pod_using("r", "a", "gone", "also-gone")
    assert claims_verdict(store, missing) == ('persistentvolumeclaim "gone" not found', ["gone"])
    assert prefilter_error(1, "x") == (
        "0/1 nodes are available: x. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )
