"""Storage as a user's kind cluster has it: StorageClass, PersistentVolumeClaim and PersistentVolume served with
kubectl's columns, a default class whose local provisioner backs each claim with a directory, binding modes,
claim and volume protection, and reclaim policies."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tfjob_sim.cluster import SimCluster
from tfjob_sim.errors import ApiError
from tfjob_sim.persistentvolumes import PROVISIONER
from tfjob_sim.storagetypes import PV_PROTECTION, PVC_PROTECTION, PVCS, PVS, STORAGE_CLASSES
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.objects import pod
from tfjob_sim.testing.waiting import eventually, never


def claim(name: str, storage_class: str | None = None, size: str = "1Gi", **spec: object) -> dict:
    body: dict = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec}
    if storage_class is not None:
        body["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": body}


def pod_using(name: str, claim_name: str) -> dict:
    body = pod(name)
    body["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return body


def storage_class(name: str, *, binding: str = "Immediate", reclaim: str = "Delete") -> dict:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": PROVISIONER,
        "reclaimPolicy": reclaim,
        "volumeBindingMode": binding,
    }


def is_dir(path: str | Path) -> bool:
    """Whether a directory is on disk (a plain function: the tests read the disk between awaits on purpose)."""
    return Path(path).is_dir()


def bound(cluster: SimCluster, name: str) -> dict | None:
    pvc = cluster.store.get(PVCS, "default", name)
    return pvc if pvc is not None and (pvc.get("status") or {}).get("phase") == "Bound" else None


def reasons(cluster: SimCluster, name: str) -> list[str]:
    return [
        e["reason"]
        for e in cluster.store.list("events", "default")[0]
        if e["involvedObject"].get("kind") == "PersistentVolumeClaim" and e["involvedObject"]["name"] == name
    ]


async def test_the_default_class_is_kinds_and_kubectl_prints_it(sim_cluster: SimCluster, kubectl: Kubectl) -> None:
    await eventually(lambda: sim_cluster.store.get(STORAGE_CLASSES, None, "standard"))
    out = await kubectl.ok("get", "storageclass")
    header, row = out.splitlines()
    assert header.split() == [
        "NAME",
        "PROVISIONER",
        "RECLAIMPOLICY",
        "VOLUMEBINDINGMODE",
        "ALLOWVOLUMEEXPANSION",
        "AGE",
    ]
    assert row.split()[:6] == ["standard", "(default)", PROVISIONER, "Delete", "WaitForFirstConsumer", "false"]


async def test_a_claim_naming_no_class_waits_for_its_first_consumer_then_gets_a_new_volume(
    sim_cluster: SimCluster, kubectl: Kubectl
) -> None:
    store = sim_cluster.store
    await eventually(lambda: store.get(STORAGE_CLASSES, None, "standard"))
    await kubectl.ok("apply", "-f", "-", input=yaml.safe_dump(claim("data")))
    pvc = await eventually(lambda: (store.get(PVCS, "default", "data") or {}).get("spec", {}).get("storageClassName"))
    assert pvc == "standard"
    await eventually(lambda: "WaitForFirstConsumer" in reasons(sim_cluster, "data"))
    await never(lambda: bound(sim_cluster, "data"), 0.3, what="a WaitForFirstConsumer claim bound without a pod")
    assert PVC_PROTECTION in store.get(PVCS, "default", "data")["metadata"]["finalizers"]

    store.create("pods", "default", pod_using("user", "data"))
    pvc = await eventually(lambda: bound(sim_cluster, "data"), what="the claim bound")
    volume = store.get(PVS, None, pvc["spec"]["volumeName"])
    assert volume["metadata"]["name"] == f"pvc-{pvc['metadata']['uid']}"
    assert volume["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Delete"
    node = store.get("pods", "default", "user")["spec"]["nodeName"]
    assert volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [node]
    assert is_dir(volume["spec"]["hostPath"]["path"])
    assert pvc["status"]["capacity"] == {"storage": "1Gi"}
    assert {"Provisioning", "ProvisioningSucceeded"} <= set(reasons(sim_cluster, "data"))

    out = await kubectl.ok("get", "pvc", "data")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS"] + [
        "VOLUMEATTRIBUTESCLASS",
        "AGE",
    ]
    assert row.split()[:7] == ["data", "Bound", volume["metadata"]["name"], "1Gi", "RWO", "standard", "<unset>"]
    out = await kubectl.ok("get", "pv")
    assert out.splitlines()[1].split()[:7] == [volume["metadata"]["name"], "1Gi", "RWO", "Delete", "Bound"] + [
        "default/data",
        "standard",
    ]


async def test_a_claim_in_use_is_protected_and_its_volume_and_directory_go_with_it(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create(STORAGE_CLASSES, None, storage_class("fast"))
    store.create(PVCS, "default", claim("scratch", "fast"))
    pvc = await eventually(lambda: bound(sim_cluster, "scratch"), what="an Immediate claim bound with no pod")
    volume = store.get(PVS, None, pvc["spec"]["volumeName"])
    directory = Path(volume["spec"]["hostPath"]["path"])
    (directory / "checkpoint").write_text("step=7")
    store.create("pods", "default", pod_using("user", "scratch"))
    await eventually(lambda: (store.get("pods", "default", "user") or {}).get("status", {}).get("phase") == "Running")

    store.delete(PVCS, "default", "scratch")
    await never(lambda: store.get(PVCS, "default", "scratch") is None, 0.3, what="a claim in use deleted")
    assert store.get(PVCS, "default", "scratch")["metadata"]["deletionTimestamp"]
    assert (directory / "checkpoint").read_text() == "step=7"

    store.delete("pods", "default", "user", {"gracePeriodSeconds": 0})
    await eventually(lambda: store.get(PVCS, "default", "scratch") is None, what="the claim gone with its pod")
    await eventually(lambda: store.get(PVS, None, volume["metadata"]["name"]) is None, what="the volume deleted")
    assert not is_dir(directory)
    assert PV_PROTECTION in volume["metadata"]["finalizers"]


async def test_retain_keeps_a_released_volume_and_its_files(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create(STORAGE_CLASSES, None, storage_class("keep", reclaim="Retain"))
    store.create(PVCS, "default", claim("results", "keep"))
    pvc = await eventually(lambda: bound(sim_cluster, "results"))
    name = pvc["spec"]["volumeName"]
    store.delete(PVCS, "default", "results")
    released = await eventually(
        lambda: (
            (store.get(PVS, None, name) or {}).get("status", {}).get("phase") == "Released"
            and store.get(PVS, None, name)
        )
    )
    assert is_dir(released["spec"]["hostPath"]["path"])


async def test_a_claim_with_the_empty_class_binds_to_a_fitting_volume_of_its_own(
    sim_cluster: SimCluster, tmp_path: Path
) -> None:
    store = sim_cluster.store

    def volume(name: str, size: str, modes: list[str]) -> dict:
        spec = {"capacity": {"storage": size}, "accessModes": modes, "hostPath": {"path": str(tmp_path / name)}}
        return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}

    store.create(PVS, None, volume("small", "1Gi", ["ReadWriteOnce"]))
    store.create(PVS, None, volume("shared", "10Gi", ["ReadWriteMany"]))
    store.create(PVS, None, volume("large", "10Gi", ["ReadWriteOnce"]))
    await eventually(lambda: (store.get(PVS, None, "large") or {}).get("status", {}).get("phase") == "Available")
    store.create(PVCS, "default", claim("manual", "", size="2Gi"))
    pvc = await eventually(lambda: bound(sim_cluster, "manual"))
    assert pvc["spec"]["volumeName"] == "large"  # small is too small, shared has the wrong access mode
    assert pvc["status"]["capacity"] == {"storage": "10Gi"}
    assert store.get(PVS, None, "large")["spec"]["claimRef"]["name"] == "manual"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"accessModes": []}, "spec.accessModes: Required value: at least 1 access mode is required"),
        ({"accessModes": ["ReadWriteSometimes"]}, 'spec.accessModes: Unsupported value: "ReadWriteSometimes"'),
        ({"resources": {"requests": {}}}, "spec.resources[storage]: Required value"),
        ({"resources": {"requests": {"storage": "0"}}}, "must be greater than zero"),
    ],
)
async def test_an_invalid_claim_is_refused_with_the_field_at_fault(
    sim_cluster: SimCluster, change: dict, message: str
) -> None:
    body = claim("bad")
    body["spec"].update(change)
    with pytest.raises(ApiError) as refused:
        sim_cluster.store.create(PVCS, "default", body)
    assert refused.value.code == 422
    assert message in refused.value.message


async def test_a_bound_claims_spec_is_immutable_but_its_requests(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create(STORAGE_CLASSES, None, storage_class("fast"))
    store.create(PVCS, "default", claim("fixed", "fast"))
    pvc = await eventually(lambda: bound(sim_cluster, "fixed"))
    changed = {**pvc, "spec": {**pvc["spec"], "accessModes": ["ReadWriteMany"]}}
    with pytest.raises(ApiError) as refused:
        store.update(PVCS, "default", "fixed", changed)
    assert refused.value.code == 422 and "spec is immutable after creation" in refused.value.message


async def test_the_provisioners_directories_go_with_the_cluster(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create(STORAGE_CLASSES, None, storage_class("fast"))
    store.create(PVCS, "default", claim("left", "fast"))
    await eventually(lambda: bound(sim_cluster, "left"))
    root = sim_cluster.storage.root
    assert any(root.iterdir())
    await sim_cluster.stop()
    assert not root.exists()
