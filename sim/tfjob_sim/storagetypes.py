"""The storage API's types as kube-apiserver serves them: PersistentVolume, PersistentVolumeClaim, StorageClass.

Why: a training program keeps its checkpoint on a claim, and the claim's life (Pending, Bound, protected while a
pod uses it, released and reclaimed) is what a user watches with ``kubectl get pvc``. This module is the data and
the strategies (defaults, admission, validation) of those types; ``tfjob_sim.persistentvolumes`` is the controllers that
bind, provision, protect and reclaim. Like every strategy in ``tfjob_sim.resources`` the functions return
apimachinery causes for the caller to wrap into a 422, never raise for bad input.
"""

from __future__ import annotations

from typing import Any

from tfjob_sim.quantity import parse_quantity

PVCS = "persistentvolumeclaims"
PVS = "persistentvolumes"
STORAGE_CLASSES = "storageclasses.storage.k8s.io"

# The finalizers kube-apiserver's StorageObjectInUseProtection admission plugin adds on create.
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
RECLAIM_POLICIES = ("Delete", "Recycle", "Retain")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")
# The volume sources a PersistentVolume may name (one exactly); the simulator's provisioner writes hostPath.
PV_SOURCES = frozenset(
    {
        "hostPath",
        "local",
        "nfs",
        "csi",
        "iscsi",
        "fc",
        "awsElasticBlockStore",
        "gcePersistentDisk",
        "azureDisk",
        "azureFile",
        "cephfs",
        "rbd",
        "cinder",
        "flexVolume",
        "glusterfs",
        "portworxVolume",
        "quobyte",
        "scaleIO",
        "storageos",
        "vsphereVolume",
        "photonPersistentDisk",
        "flocker",
    }
)
PVC_TOP = frozenset({"spec", "status"})
PV_TOP = frozenset({"spec", "status"})
STORAGE_CLASS_TOP = frozenset(
    {"provisioner", "parameters", "reclaimPolicy", "mountOptions", "allowVolumeExpansion", "volumeBindingMode"}
    | {"allowedTopologies"}
)
_SPEC_IMMUTABLE = (
    "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"
)


def _cause(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "field": field, "message": f"{field}: {message}"}


def _required(field: str, detail: str = "") -> dict[str, str]:
    return _cause("FieldValueRequired", field, f"Required value{': ' + detail if detail else ''}")


def _not_supported(field: str, value: Any, valid: tuple[str, ...]) -> dict[str, str]:
    shown = ", ".join(f'"{v}"' for v in valid)
    return _cause("FieldValueNotSupported", field, f'Unsupported value: "{value}": supported values: {shown}')


def _storage_request_errors(field: str, value: Any) -> list[dict[str, str]]:
    if value is None:
        return [_required(field)]
    try:
        amount = parse_quantity(value)
    except ValueError as exc:
        return [_cause("FieldValueInvalid", field, f'Invalid value: "{value}": {exc}')]
    if amount <= 0:
        return [_cause("FieldValueInvalid", field, f'Invalid value: "{value}": must be greater than zero')]
    return []


def _access_mode_errors(field: str, modes: Any) -> list[dict[str, str]]:
    if not isinstance(modes, list) or not modes:
        return [_required(field, "at least 1 access mode is required")]
    return [_not_supported(field, mode, ACCESS_MODES) for mode in modes if mode not in ACCESS_MODES]


def default(kind: str, obj: dict) -> None:
    """The scheme's defaults of the storage kinds (SetDefaults_PersistentVolumeClaim and friends)."""
    if kind == "StorageClass":
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("volumeMode", "Filesystem")
    if kind == "PersistentVolume":
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")


def prepare_for_create(kind: str, obj: dict) -> None:
    """On create: status reset to Pending and the in-use protection finalizer added, as admission does."""
    finalizer = {"PersistentVolumeClaim": PVC_PROTECTION, "PersistentVolume": PV_PROTECTION}.get(kind)
    if finalizer is None:
        return
    meta = obj.setdefault("metadata", {})
    finalizers = list(meta.get("finalizers") or [])
    if finalizer not in finalizers:
        meta["finalizers"] = [*finalizers, finalizer]
    obj["status"] = {"phase": "Pending"}


def validate(kind: str, obj: dict) -> list[dict[str, str]]:
    """Causes for an invalid claim, volume or class (the subset of kube-apiserver's validation users meet)."""
    if kind == "StorageClass":
        causes: list[dict[str, str]] = []
        if not obj.get("provisioner"):
            causes.append(_required("provisioner"))
        if obj.get("reclaimPolicy") not in RECLAIM_POLICIES:
            causes.append(_not_supported("reclaimPolicy", obj.get("reclaimPolicy"), RECLAIM_POLICIES))
        if obj.get("volumeBindingMode") not in BINDING_MODES:
            causes.append(_not_supported("volumeBindingMode", obj.get("volumeBindingMode"), BINDING_MODES))
        return causes
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    if kind == "PersistentVolumeClaim":
        requests = (spec.get("resources") or {}).get("requests") or {}
        return [
            *_access_mode_errors("spec.accessModes", spec.get("accessModes")),
            *_storage_request_errors("spec.resources[storage]", requests.get("storage")),
        ]
    causes = [
        *_access_mode_errors("spec.accessModes", spec.get("accessModes")),
        *_storage_request_errors("spec.capacity", (spec.get("capacity") or {}).get("storage")),
    ]
    sources = [key for key in spec if key in PV_SOURCES]
    if not sources:
        causes.append(_required("spec", "must specify a volume type"))
    elif len(sources) > 1:
        causes.append(
            _cause("FieldValueForbidden", f"spec.{sources[1]}", "Forbidden: may not specify more than 1 volume type")
        )
    policy = spec.get("persistentVolumeReclaimPolicy")
    if policy not in RECLAIM_POLICIES:
        causes.append(_not_supported("spec.persistentVolumeReclaimPolicy", policy, RECLAIM_POLICIES))
    return causes


def validate_update(kind: str, new: dict, old: dict) -> list[dict[str, str]]:
    """What may change after creation: a claim's requests (and, once, its class and volume), a volume's
    spec but its source, nothing of a class's provisioning fields."""
    if kind == "StorageClass":
        return [
            _cause("FieldValueForbidden", key, f"Forbidden: updates to {key} are forbidden.")
            for key in ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode")
            if new.get(key) != old.get(key)
        ]
    if kind != "PersistentVolumeClaim":
        return []
    new_spec, old_spec = dict(new.get("spec") or {}), dict(old.get("spec") or {})
    for once in ("storageClassName", "volumeName"):
        if old_spec.get(once) is None and new_spec.get(once) is not None:  # set once, by the binder
            old_spec[once] = new_spec[once]
    for spec in (new_spec, old_spec):
        spec.pop("resources", None)
        spec.pop("volumeAttributesClassName", None)
    if new_spec != old_spec:
        return [_cause("FieldValueForbidden", "spec", f"Forbidden: {_SPEC_IMMUTABLE}")]
    return []


def claim_names(pod: dict) -> list[str]:
    """The claims a pod's volumes name, in order."""
    names = []
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        claim = volume.get("persistentVolumeClaim") if isinstance(volume, dict) else None
        if isinstance(claim, dict) and isinstance(claim.get("claimName"), str):
            names.append(claim["claimName"])
    return names


def pv_row_values(pv: dict) -> dict[str, str]:
    """What ``kubectl get pv`` prints of a volume, by column."""
    spec, status = pv.get("spec") or {}, pv.get("status") or {}
    ref = spec.get("claimRef") or {}
    return {
        "capacity": str((spec.get("capacity") or {}).get("storage", "")),
        "access": access_modes_text(spec.get("accessModes")),
        "reclaim": spec.get("persistentVolumeReclaimPolicy", ""),
        "status": status.get("phase", ""),
        "claim": f"{ref.get('namespace')}/{ref.get('name')}" if ref.get("name") else "",
        "class": spec.get("storageClassName", ""),
        "reason": status.get("reason", ""),
    }


def access_modes_text(modes: Any) -> str:
    """Access modes as kubectl abbreviates them: RWO, ROX, RWX, RWOP, comma-separated."""
    short = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    return ",".join(short.get(m, m) for m in modes or () if isinstance(m, str))
