"""The simulated cluster's storage controllers: a default StorageClass with a local provisioner, the binder, the
in-use protection of claims and volumes, and reclaiming.

Why: users keep a training checkpoint on a PersistentVolumeClaim. A cluster like kind's gives every claim that
names no class the default ``standard`` class, whose local provisioner backs a new PersistentVolume with a
directory on the node; the claim cannot be deleted while a pod uses it; deleting it deletes the volume and its
directory (reclaim policy Delete). The process runtime mounts that directory into the pods
(``tfjob_sim.process.volumes``), so a program's files outlive its pods exactly as long as the claim.

Contract (what users and kubectl observe):
- At start a default class ``standard`` (provisioner ``rancher.io/local-path``, reclaimPolicy Delete,
  volumeBindingMode WaitForFirstConsumer, as kind installs it) is created unless one exists.
- A claim with no ``storageClassName`` gets the default class's name (the retroactive default-class assignment
  the PV controller does since Kubernetes 1.28; admission does the same at creation).
- A claim of a class this provisioner serves: with Immediate binding it is provisioned at once; with
  WaitForFirstConsumer once a pod that uses it is bound to a node (event ``WaitForFirstConsumer`` until then).
  Provisioning creates ``pvc-<claim uid>`` backed by a new directory (hostPath), bound to the claim both ways,
  with the events ``Provisioning`` and ``ProvisioningSucceeded``.
- A claim with ``storageClassName: ""`` or of another class binds to an Available volume that fits (class,
  access modes, capacity, a claimRef naming it or none), as the PV controller's static binding does.
- ``kubernetes.io/pvc-protection``: a deleted claim stays Terminating until no pod bound to a node that is not
  Succeeded or Failed names it. ``kubernetes.io/pv-protection``: a deleted volume stays until it is not Bound.
- A volume whose claim is gone is Released; Delete removes it and its directory (only a directory this
  provisioner made), Retain keeps both.
- The provisioner's directories live under one root that :meth:`StorageControllers.stop_and_clean` removes.
Not simulated: volume expansion, snapshots, CSI, access-mode enforcement across nodes, capacity limits.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from tfjob_sim.dirtykeys import DirtyKeys
from tfjob_sim.errors import ApiError
from tfjob_sim.events import EventRecorder
from tfjob_sim.quantity import parse_quantity
from tfjob_sim.storagetypes import (
    DEFAULT_CLASS_ANNOTATION,
    PV_PROTECTION,
    PVC_PROTECTION,
    PVCS,
    PVS,
    STORAGE_CLASSES,
    claim_names,
)
from tfjob_sim.store import Store, WriteOptions, deep_copy

log = structlog.get_logger(__name__)

PODS = "pods"
PROVISIONER = "rancher.io/local-path"
DEFAULT_CLASS = "standard"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
MANAGER = WriteOptions(field_manager="kube-controller-manager")
COMPONENT = "persistentvolume-controller"
PROVISIONER_COMPONENT = f"{PROVISIONER}_local-path-provisioner"


@dataclass
class StorageConfig:
    """Where the provisioner's directories go (a new temporary directory by default) and how time is scaled."""

    root: str | None = None
    time_scale: float = 1.0
    retry_seconds: float = 1.0
    default_class: bool = True


def is_default_class(sc: dict) -> bool:
    """Whether a StorageClass is marked the cluster's default."""
    return ((sc.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"


def _ref(obj: dict, kind: str) -> dict[str, Any]:
    meta = obj["metadata"]
    ref = {"apiVersion": "v1", "kind": kind, "name": meta["name"], "uid": meta.get("uid", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


def _in_use(pod: dict) -> bool:
    """Whether a pod naming a claim keeps it from being deleted: a pod bound to a node that has not finished
    (the pvc-protection controller ignores pods not scheduled yet: no kubelet starts a pod whose claim is
    being deleted, and the scheduler holds them)."""
    return bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def _requested(pvc: dict) -> Any:
    return (((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")


class StorageControllers:
    """The binder, provisioner and protection controllers over one Store. ``await run()``; cancel to stop;
    :meth:`stop_and_clean` removes the provisioner's directories."""

    def __init__(self, store: Store, config: StorageConfig | None = None) -> None:
        self._store = store
        self.config = config or StorageConfig()
        self._root: Path | None = Path(self.config.root) if self.config.root else None
        self._made_root = False
        self.events = EventRecorder(store, self.config.time_scale)
        self._keys: DirtyKeys[tuple[str, str, str]] | None = None  # made by run() on its event loop
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    @property
    def root(self) -> Path:
        """The directory the provisioner's volumes live in (made on first use)."""
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="tfsim-storage-"))
            self._made_root = True
        self._root.mkdir(parents=True, exist_ok=True)
        return self._root

    def stop_and_clean(self) -> None:
        """Remove the provisioner's root directory if this controller made it (every volume in it goes)."""
        if self._made_root and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._made_root = False

    async def run(self) -> None:
        """Serve until cancelled. Raises RuntimeError when called twice."""
        if self._started:
            raise RuntimeError("StorageControllers.run() may only be called once")
        self._started = True
        self._keys = DirtyKeys[tuple[str, str, str]]()
        unsubscribe = self._store.add_listener(self._on_event)
        try:
            if self.config.default_class:
                self._ensure_default_class()
            for resource in (PVCS, PVS):
                for obj in self._store.list(resource)[0]:
                    self._mark(resource, obj)
            await self._keys.serve(self._sync, batch=1)
        finally:
            unsubscribe()

    def _ensure_default_class(self) -> None:
        if any(is_default_class(sc) for sc in self._store.list(STORAGE_CLASSES)[0]):
            return
        sc = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": DEFAULT_CLASS, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer",
        }
        try:
            self._store.create_ex(STORAGE_CLASSES, None, sc, MANAGER)
        except ApiError as err:
            if err.code != 409:
                raise

    # ------------------------------------------------------------------ events -> dirty keys

    def _mark(self, resource: str, obj: dict) -> None:
        meta = obj["metadata"]
        self._mark_key((resource, meta.get("namespace", ""), meta["name"]))

    def _mark_key(self, key: tuple[str, str, str]) -> None:
        if self._keys is not None:
            self._keys.mark(key)

    def _on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        try:
            if resource in (PVCS, PVS):
                self._mark(resource, obj)
                if resource == PVS:
                    ref = (obj.get("spec") or {}).get("claimRef") or {}
                    if ref.get("name"):
                        self._mark_key((PVCS, ref.get("namespace", ""), ref["name"]))
                    elif new is not None:  # a volume free to bind: the pending claims look again (the PV
                        self._mark_pending_claims()  # controller's periodic resync of claims finds it)
                elif (obj.get("spec") or {}).get("volumeName"):  # a claim's change can release its volume
                    self._mark_key((PVS, "", obj["spec"]["volumeName"]))
            elif resource == PODS:
                namespace = obj["metadata"].get("namespace", "")
                for candidate in (old, new):
                    for claim in claim_names(candidate or {}):
                        self._mark_key((PVCS, namespace, claim))
            elif resource == STORAGE_CLASSES:
                self._mark_pending_claims()
        except Exception:  # a listener must never break the store's write path
            log.exception("storage controllers listener failed", event_type=event_type, resource=resource)

    def _mark_pending_claims(self) -> None:
        for pvc in self._store.list(PVCS)[0]:
            if (pvc.get("status") or {}).get("phase") == "Pending":
                self._mark(PVCS, pvc)

    def _sync(self, key: tuple[str, str, str]) -> None:
        resource, namespace, name = key
        try:
            if resource == PVCS:
                self._sync_claim(namespace, name)
            else:
                self._sync_volume(name)
        except (ApiError, OSError) as err:
            log.info("storage sync failed; retrying", resource=resource, namespace=namespace, name=name, error=str(err))
            assert self._keys is not None
            self._keys.retry_later(key, self.config.retry_seconds * self.config.time_scale)

    # ------------------------------------------------------------------ claims

    def _pods_using(self, namespace: str, claim: str) -> list[dict]:
        return [p for p in self._store.list(PODS, namespace)[0] if claim in claim_names(p)]

    def _sync_claim(self, namespace: str, name: str) -> None:
        pvc = self._store.get(PVCS, namespace, name)
        if pvc is None:
            return
        meta, spec = pvc["metadata"], pvc.get("spec") or {}
        if meta.get("deletionTimestamp"):
            if PVC_PROTECTION in (meta.get("finalizers") or ()) and not any(
                _in_use(p) for p in self._pods_using(namespace, name)
            ):
                self._update(PVCS, pvc, lambda obj: _drop_finalizer(obj, PVC_PROTECTION))
            return
        if spec.get("volumeName"):
            self._complete_binding(pvc)
            return
        if "storageClassName" not in spec or spec.get("storageClassName") is None:
            default = next((sc for sc in self._store.list(STORAGE_CLASSES)[0] if is_default_class(sc)), None)
            if default is not None:
                pvc = self._update(PVCS, pvc, lambda obj: obj["spec"].__setitem__("storageClassName", _name(default)))
                spec = pvc.get("spec") or {}
        volume = self._matching_volume(pvc)
        if volume is not None:
            self._bind(pvc, volume)
            return
        class_name = spec.get("storageClassName")
        sc = self._store.get(STORAGE_CLASSES, None, class_name) if class_name else None
        if sc is None or sc.get("provisioner") != PROVISIONER:
            if class_name and sc is None:
                self.events.record(
                    _ref(pvc, "PersistentVolumeClaim"),
                    "Warning",
                    "ProvisioningFailed",
                    f'storageclass.storage.k8s.io "{class_name}" not found',
                    component=COMPONENT,
                )
            return
        node = (meta.get("annotations") or {}).get(SELECTED_NODE)
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not node:
            node = next(
                (
                    p["spec"]["nodeName"]
                    for p in self._pods_using(namespace, name)
                    if (p.get("spec") or {}).get("nodeName")
                ),
                None,
            )
            if node is None:
                self.events.record(
                    _ref(pvc, "PersistentVolumeClaim"),
                    "Normal",
                    "WaitForFirstConsumer",
                    "waiting for first consumer to be created before binding",
                    component=COMPONENT,
                )
                return
        self._provision(pvc, sc, node)

    def _matching_volume(self, pvc: dict) -> dict | None:
        spec = pvc.get("spec") or {}
        try:
            want = parse_quantity(_requested(pvc))
        except ValueError:
            return None
        modes = set(spec.get("accessModes") or ())
        best: tuple[Any, dict] | None = None
        for pv in self._store.list(PVS)[0]:
            pv_spec = pv.get("spec") or {}
            ref = pv_spec.get("claimRef") or {}
            if pv["metadata"].get("deletionTimestamp") or (pv.get("status") or {}).get("phase") not in (
                "Available",
                "Pending",
            ):
                continue
            if ref and (ref.get("namespace"), ref.get("name")) != (pvc["metadata"]["namespace"], _name(pvc)):
                continue
            if (pv_spec.get("storageClassName") or "") != (spec.get("storageClassName") or ""):
                continue
            if not modes <= set(pv_spec.get("accessModes") or ()):
                continue
            try:
                size = parse_quantity((pv_spec.get("capacity") or {}).get("storage"))
            except ValueError:
                continue
            if size >= want and (best is None or size < best[0]):
                best = (size, pv)
        return best[1] if best else None

    def _provision(self, pvc: dict, sc: dict, node: str | None) -> None:
        meta = pvc["metadata"]
        ref = _ref(pvc, "PersistentVolumeClaim")
        self.events.record(
            ref,
            "Normal",
            "Provisioning",
            f'External provisioner is provisioning volume for claim "{meta["namespace"]}/{meta["name"]}"',
            component=PROVISIONER_COMPONENT,
        )
        pv_name = f"pvc-{meta['uid']}"
        directory = self.root / f"{pv_name}_{meta['namespace']}_{meta['name']}"
        directory.mkdir(mode=0o777, exist_ok=True)
        os.chmod(directory, 0o777)  # local-path's directories are world-writable: pods run as any user
        spec = pvc.get("spec") or {}
        pv_spec: dict[str, Any] = {
            "capacity": {"storage": _requested(pvc)},
            "accessModes": list(spec.get("accessModes") or ()),
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
            "storageClassName": _name(sc),
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "claimRef": {**ref, "resourceVersion": meta.get("resourceVersion", "")},
            "hostPath": {"path": str(directory), "type": "DirectoryOrCreate"},
        }
        if node:
            pv_spec["nodeAffinity"] = {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
                    ]
                }
            }
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": pv_name,
                "annotations": {
                    "pv.kubernetes.io/provisioned-by": PROVISIONER,
                    **({SELECTED_NODE: node} if node else {}),
                },
            },
            "spec": pv_spec,
        }
        try:
            pv = self._store.create_ex(PVS, None, pv, MANAGER).obj
        except ApiError as err:
            if err.code != 409:
                raise
            pv = self._store.get(PVS, None, pv_name) or pv
        self._bind(pvc, pv)
        self.events.record(
            ref,
            "Normal",
            "ProvisioningSucceeded",
            f"Successfully provisioned volume {pv_name}",
            component=PROVISIONER_COMPONENT,
        )

    def _bind(self, pvc: dict, pv: dict) -> None:
        """Bind both ways: the volume's claimRef, then the claim's volumeName and annotations, then statuses."""
        ref = _ref(pvc, "PersistentVolumeClaim")
        if ((pv.get("spec") or {}).get("claimRef") or {}).get("uid") != ref["uid"]:
            pv = self._update(PVS, pv, lambda obj: obj["spec"].__setitem__("claimRef", ref))

        def claim(obj: dict) -> None:
            obj["spec"]["volumeName"] = _name(pv)
            annotations = obj["metadata"].setdefault("annotations", {})
            annotations["pv.kubernetes.io/bind-completed"] = "yes"
            annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
            if (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER:
                annotations["volume.kubernetes.io/storage-provisioner"] = PROVISIONER
                annotations["volume.beta.kubernetes.io/storage-provisioner"] = PROVISIONER

        pvc = self._update(PVCS, pvc, claim)
        self._complete_binding(pvc)

    def _complete_binding(self, pvc: dict) -> None:
        pv = self._store.get(PVS, None, pvc["spec"]["volumeName"])
        if pv is None:
            self._set_status(PVCS, pvc, {"phase": "Lost"})
            return
        if (pv.get("status") or {}).get("phase") != "Bound":
            self._set_status(PVS, pv, {"phase": "Bound"})
        pv_spec = pv.get("spec") or {}
        self._set_status(
            PVCS,
            pvc,
            {
                "phase": "Bound",
                "accessModes": list(pv_spec.get("accessModes") or ()),
                "capacity": dict(pv_spec.get("capacity") or {}),
            },
        )

    # ------------------------------------------------------------------ volumes

    def _sync_volume(self, name: str) -> None:
        pv = self._store.get(PVS, None, name)
        if pv is None:
            return
        spec, phase = pv.get("spec") or {}, (pv.get("status") or {}).get("phase")
        ref = spec.get("claimRef") or {}
        claim = self._store.get(PVCS, ref.get("namespace"), ref["name"]) if ref.get("name") else None
        claim_gone = bool(ref.get("name")) and (
            claim is None or (ref.get("uid") and claim["metadata"].get("uid") != ref.get("uid"))
        )
        if pv["metadata"].get("deletionTimestamp"):
            if PV_PROTECTION in (pv["metadata"].get("finalizers") or ()) and (phase != "Bound" or claim_gone):
                self._update(PVS, pv, lambda obj: _drop_finalizer(obj, PV_PROTECTION))
            return
        if claim_gone:
            if spec.get("persistentVolumeReclaimPolicy") == "Delete":
                self._delete_volume(pv)
            elif phase != "Released":
                self._set_status(PVS, pv, {"phase": "Released"})
        elif not ref and phase in (None, "Pending"):
            self._set_status(PVS, pv, {"phase": "Available"})

    def _delete_volume(self, pv: dict) -> None:
        path = ((pv.get("spec") or {}).get("hostPath") or {}).get("path")
        provisioned = (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
        if provisioned and path and self._root is not None:
            target = Path(path)
            if target.parent == self._root and target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
        try:
            self._store.delete(PVS, None, _name(pv), {"preconditions": {"uid": pv["metadata"]["uid"]}})
        except ApiError as err:
            if err.code != 404:
                raise

    # ------------------------------------------------------------------ writes

    def _update(self, resource: str, obj: dict, change: Any) -> dict:
        new = deep_copy(obj)
        change(new)
        if new == obj:
            return obj
        meta = obj["metadata"]
        return self._store.update_ex(resource, meta.get("namespace"), meta["name"], new, None, MANAGER).obj

    def _set_status(self, resource: str, obj: dict, status: dict) -> None:
        if obj.get("status") == status:
            return
        meta = obj["metadata"]
        self._store.update_ex(
            resource, meta.get("namespace"), meta["name"], dict(obj, status=status), "status", MANAGER
        )


def _name(obj: dict) -> str:
    return obj["metadata"]["name"]


def _drop_finalizer(obj: dict, finalizer: str) -> None:
    obj["metadata"]["finalizers"] = [f for f in obj["metadata"].get("finalizers") or () if f != finalizer]
