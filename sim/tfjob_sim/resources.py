"""The simulator's resource table: which types exist, how they are addressed, and their strategies.

Why this module exists: kube-apiserver's behaviour differs per type in many small ways (scope,
short names, which subresources exist, whether PUT without a resourceVersion is allowed, whether
DELETE returns the object or a Status, which field selectors work, defaulting, generation rules).
Keeping all of that as data here lets the store and the HTTP layer stay generic: they ask the
:class:`ResourceType` instead of branching on names.

Contract:
- A resource is addressed by its *qualified plural* as kubectl writes it: ``"pods"``,
  ``"leases.coordination.k8s.io"``, ``"tfjobs.kubeflow.org"`` (core resources have no suffix).
- :class:`Registry` holds the built-in types and the types CRDs serve. ``Registry.version`` is
  bumped on every change so callers (discovery, OpenAPI) can cache derived documents.
- Strategy hooks (:func:`apply_defaults`, :func:`prepare_for_create`, :func:`validate`) take
  and return plain dicts; they never raise for bad user input, they return apimachinery causes
  (``{"reason", "message", "field"}``) for the caller to wrap into a 422.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tfjob_sim import selectors, storagetypes

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

# ObjectMeta fields a client may send; anything else under metadata is an unknown field.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


@dataclass
class ScaleSpec:
    """A CRD's ``subresources.scale``: dotted paths like ``.spec.replicas``."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None
    # Built-ins compute the Scale's status.selector from the object (apps/v1: spec.selector as text).
    selector_of: Callable[[dict], str | None] | None = None


@dataclass
class ResourceType:
    """Everything the generic store and HTTP layer need to know about one served resource."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    # Subresources served in addition to the main resource: "status", "scale", "eviction", "binding".
    subresources: tuple[str, ...] = ()
    # Built-ins whose main-resource writes ignore ``status`` (status has its own endpoint).
    status_subresource: bool = False
    # Custom resources and Leases refuse PUT without metadata.resourceVersion (422).
    unconditional_update: bool = True
    create_on_update: bool = False
    # Stores with ReturnDeletedObject answer DELETE with the object instead of a Status.
    return_deleted_object: bool = False
    # Types whose objects carry metadata.generation (bumped on spec changes).
    tracks_generation: bool = False
    # Top-level fields a built-in accepts (apiVersion/kind/metadata implied); None = no check.
    top_level_fields: frozenset[str] | None = None
    # Field selector paths beyond metadata.name/namespace, with a function extracting them.
    extra_fields: Callable[[dict], dict[str, str]] | None = None
    extra_field_names: frozenset[str] = frozenset()
    custom: bool = False
    scale: ScaleSpec | None = None
    schema: Any = None  # tfjob_sim.schema.StructuralSchema for custom resources
    printer_columns: list[dict] = field(default_factory=list)
    crd_name: str | None = None
    served_versions: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def supported_fields(self) -> set[str]:
        names = {"metadata.name"}
        if self.namespaced:
            names.add("metadata.namespace")
        return names | set(self.extra_field_names)

    def fields_of(self, obj: dict) -> dict[str, str]:
        """Field-selector values of ``obj`` ("" for unset fields), like each type's ToSelectableFields."""
        meta = obj.get("metadata") or {}
        values = {"metadata.name": meta.get("name", "")}
        if self.namespaced:
            values["metadata.namespace"] = meta.get("namespace", "")
        if self.extra_fields is not None:
            values.update(self.extra_fields(obj))
        return values


# --------------------------------------------------------------------------------------------
# Field selector extractors for built-ins (pods: selectors.pod_fields, their ToSelectableFields).


def _namespace_fields(ns: dict) -> dict[str, str]:
    return {"status.phase": (ns.get("status") or {}).get("phase", "") or ""}


def _node_fields(node: dict) -> dict[str, str]:
    return {"spec.unschedulable": "true" if (node.get("spec") or {}).get("unschedulable") else "false"}


def _secret_fields(secret: dict) -> dict[str, str]:
    return {"type": secret.get("type", "") or ""}


EVENT_FIELD_NAMES = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)


def _event_fields(event: dict) -> dict[str, str]:
    involved = event.get("involvedObject") or {}
    values = {
        f"involvedObject.{k}": str(involved.get(k, "") or "")
        for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
    }
    values["reason"] = event.get("reason", "") or ""
    values["reportingComponent"] = event.get("reportingComponent", "") or ""
    # The registry's "source" field: source.component, else reportingController (events.k8s.io writers).
    values["source"] = ((event.get("source") or {}).get("component", "")) or event.get("reportingComponent", "") or ""
    values["type"] = event.get("type", "") or ""
    return values


def _workload_selector(obj: dict) -> str | None:
    """A Deployment's or ReplicaSet's spec.selector as the Scale subresource prints it
    (metav1.FormatLabelSelector: "app=web,tier in (a,b)")."""
    try:
        selector = selectors.label_selector_from_dict((obj.get("spec") or {}).get("selector"))
    except ValueError:
        return None
    return str(selector)


# --------------------------------------------------------------------------------------------
# The built-in table.

_CORE_TOP = frozenset({"spec", "status"})
_STORAGE_KINDS = frozenset({"PersistentVolumeClaim", "PersistentVolume", "StorageClass"})


def builtin_types() -> list[ResourceType]:
    """The built-in resources, as a fresh list (the registry owns what it is given)."""
    return [
        ResourceType(
            "",
            "v1",
            "namespaces",
            "namespace",
            "Namespace",
            False,
            ("ns",),
            verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
            subresources=("status",),
            status_subresource=True,
            return_deleted_object=True,
            top_level_fields=_CORE_TOP,
            extra_fields=_namespace_fields,
            extra_field_names=frozenset({"status.phase"}),
        ),
        ResourceType(
            "",
            "v1",
            "nodes",
            "node",
            "Node",
            False,
            ("no",),
            subresources=("status",),
            status_subresource=True,
            top_level_fields=_CORE_TOP,
            extra_fields=_node_fields,
            extra_field_names=frozenset({"spec.unschedulable"}),
        ),
        ResourceType(
            "",
            "v1",
            "pods",
            "pod",
            "Pod",
            True,
            ("po",),
            ("all",),
            subresources=("status", "eviction", "binding", "log"),
            status_subresource=True,
            return_deleted_object=True,
            tracks_generation=True,
            top_level_fields=_CORE_TOP,
            extra_fields=selectors.pod_fields,
            extra_field_names=selectors.POD_FIELDS,
        ),
        ResourceType(
            "",
            "v1",
            "services",
            "service",
            "Service",
            True,
            ("svc",),
            ("all",),
            subresources=("status",),
            status_subresource=True,
            return_deleted_object=True,
            top_level_fields=_CORE_TOP,
        ),
        ResourceType(
            "",
            "v1",
            "configmaps",
            "configmap",
            "ConfigMap",
            True,
            ("cm",),
            top_level_fields=frozenset({"data", "binaryData", "immutable"}),
        ),
        ResourceType(
            "",
            "v1",
            "secrets",
            "secret",
            "Secret",
            True,
            top_level_fields=frozenset({"data", "stringData", "type", "immutable"}),
            extra_fields=_secret_fields,
            extra_field_names=frozenset({"type"}),
        ),
        ResourceType(
            "",
            "v1",
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            True,
            ("sa",),
            top_level_fields=frozenset({"secrets", "imagePullSecrets", "automountServiceAccountToken"}),
        ),
        ResourceType(
            "",
            "v1",
            "events",
            "event",
            "Event",
            True,
            ("ev",),
            top_level_fields=frozenset(
                {
                    "involvedObject",
                    "reason",
                    "message",
                    "source",
                    "firstTimestamp",
                    "lastTimestamp",
                    "count",
                    "type",
                    "eventTime",
                    "series",
                    "action",
                    "related",
                    "reportingComponent",
                    "reportingInstance",
                }
            ),
            extra_fields=_event_fields,
            extra_field_names=EVENT_FIELD_NAMES,
        ),
        ResourceType(
            "events.k8s.io",
            "v1",
            "events",
            "event",
            "Event",
            True,
            ("ev",),
            top_level_fields=frozenset(
                {
                    "eventTime",
                    "series",
                    "reportingController",
                    "reportingInstance",
                    "action",
                    "reason",
                    "regarding",
                    "related",
                    "note",
                    "type",
                    "deprecatedSource",
                    "deprecatedFirstTimestamp",
                    "deprecatedLastTimestamp",
                    "deprecatedCount",
                }
            ),
        ),
        ResourceType(
            "coordination.k8s.io",
            "v1",
            "leases",
            "lease",
            "Lease",
            True,
            unconditional_update=False,
            create_on_update=True,
            top_level_fields=frozenset({"spec"}),
        ),
        ResourceType(
            "rbac.authorization.k8s.io", "v1", "roles", "role", "Role", True, top_level_fields=frozenset({"rules"})
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "rolebindings",
            "rolebinding",
            "RoleBinding",
            True,
            top_level_fields=frozenset({"subjects", "roleRef"}),
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterroles",
            "clusterrole",
            "ClusterRole",
            False,
            top_level_fields=frozenset({"rules", "aggregationRule"}),
        ),
        ResourceType(
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            "clusterrolebinding",
            "ClusterRoleBinding",
            False,
            top_level_fields=frozenset({"subjects", "roleRef"}),
        ),
        ResourceType(
            "apps",
            "v1",
            "deployments",
            "deployment",
            "Deployment",
            True,
            ("deploy",),
            ("all",),
            subresources=("status", "scale"),
            status_subresource=True,
            tracks_generation=True,
            top_level_fields=_CORE_TOP,
            scale=ScaleSpec(".spec.replicas", ".status.replicas", selector_of=_workload_selector),
        ),
        ResourceType(
            "apps",
            "v1",
            "replicasets",
            "replicaset",
            "ReplicaSet",
            True,
            ("rs",),
            ("all",),
            subresources=("status", "scale"),
            status_subresource=True,
            tracks_generation=True,
            top_level_fields=_CORE_TOP,
            scale=ScaleSpec(".spec.replicas", ".status.replicas", selector_of=_workload_selector),
        ),
        ResourceType(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            "PodDisruptionBudget",
            True,
            ("pdb",),
            subresources=("status",),
            status_subresource=True,
            tracks_generation=True,
            top_level_fields=_CORE_TOP,
        ),
        *(
            ResourceType(
                "flowcontrol.apiserver.k8s.io",
                "v1",
                plural,
                plural[:-1],
                kind,
                False,
                subresources=("status",),
                status_subresource=True,
                tracks_generation=True,
                top_level_fields=_CORE_TOP,
            )
            for plural, kind in (
                ("flowschemas", "FlowSchema"),
                ("prioritylevelconfigurations", "PriorityLevelConfiguration"),
            )
        ),
        # Stored and served, never called: the simulator runs no admission webhooks. Enough for the configurations a
        # cluster keeps (a migration edits training-operator's) to be read and patched as on a real cluster.
        ResourceType(
            "admissionregistration.k8s.io",
            "v1",
            "validatingwebhookconfigurations",
            "validatingwebhookconfiguration",
            "ValidatingWebhookConfiguration",
            False,
            categories=("api-extensions",),
            top_level_fields=frozenset({"webhooks"}),
        ),
        ResourceType(
            "",
            "v1",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            True,
            ("pvc",),
            subresources=("status",),
            status_subresource=True,
            top_level_fields=storagetypes.PVC_TOP,
        ),
        ResourceType(
            "",
            "v1",
            "persistentvolumes",
            "persistentvolume",
            "PersistentVolume",
            False,
            ("pv",),
            subresources=("status",),
            status_subresource=True,
            top_level_fields=storagetypes.PV_TOP,
        ),
        ResourceType(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "storageclass",
            "StorageClass",
            False,
            ("sc",),
            top_level_fields=storagetypes.STORAGE_CLASS_TOP,
        ),
        ResourceType(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "customresourcedefinition",
            "CustomResourceDefinition",
            False,
            ("crd", "crds"),
            ("api-extensions",),
            subresources=("status",),
            status_subresource=True,
            tracks_generation=True,
            return_deleted_object=True,
            top_level_fields=_CORE_TOP,
        ),
    ]


def secure_types() -> list[ResourceType]:
    """What secure mode serves in addition (sim/tfjob_sim/auth.py answers them; nothing is stored):
    ServiceAccounts with the TokenRequest subresource, and the create-only review APIs."""
    sa = next(rt for rt in builtin_types() if rt.plural == "serviceaccounts")
    sa.subresources = ("token",)

    def review(group: str, plural: str, kind: str) -> ResourceType:
        return ResourceType(group, "v1", plural, plural[:-1], kind, False, verbs=("create",))

    return [
        sa,
        review("authorization.k8s.io", "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
        review("authorization.k8s.io", "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
        review("authorization.k8s.io", "subjectaccessreviews", "SubjectAccessReview"),
        review("authentication.k8s.io", "selfsubjectreviews", "SelfSubjectReview"),
        review("authentication.k8s.io", "tokenreviews", "TokenReview"),
    ]


# Kinds of request bodies accepted by subresources, and their group/version.
SUBRESOURCE_KINDS = {
    "eviction": ("policy", "v1", "Eviction"),
    "binding": ("", "v1", "Binding"),
    "scale": ("autoscaling", "v1", "Scale"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
}


class Registry:
    """The served resource types, looked up by qualified plural or by (group, version, name).

    Custom resources are added and removed as CRDs come and go. ``version`` increases on every
    change so derived documents (discovery, OpenAPI) can be cached safely.
    """

    def __init__(self) -> None:
        self._by_qualified: dict[str, ResourceType] = {}
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self.version = 0
        for rt in builtin_types():
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._by_qualified[rt.qualified] = rt
        for version in rt.served_versions or (rt.version,):
            self._by_gvr[(rt.group, version, rt.plural)] = rt
        self.version += 1

    def remove(self, qualified: str) -> None:
        rt = self._by_qualified.pop(qualified, None)
        if rt is None:
            return
        for key in [k for k, v in self._by_gvr.items() if v is rt]:
            del self._by_gvr[key]
        self.version += 1

    def get(self, qualified: str) -> ResourceType | None:
        return self._by_qualified.get(qualified)

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def all(self) -> list[ResourceType]:
        return list(self._by_qualified.values())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> served versions (core group is "")."""
        out: dict[str, list[str]] = {}
        for group, version, _plural in self._by_gvr:
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return out

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _p), rt in self._by_gvr.items() if g == group and v == version]

    def find_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        for (g, v, _p), rt in self._by_gvr.items():
            if g == group and v == version and rt.kind == kind:
                return rt
        return None


# --------------------------------------------------------------------------------------------
# Name and metadata validation (apimachinery's messages, verbatim).

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def _cause(reason: str, field_path: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field_path}


def _quote(value: Any) -> str:
    if isinstance(value, str):
        import json

        return json.dumps(value)
    return repr(value)


def invalid_value(field_path: str, value: Any, detail: str) -> dict[str, str]:
    return _cause("FieldValueInvalid", field_path, f"Invalid value: {_quote(value)}: {detail}")


def required_value(field_path: str, detail: str = "") -> dict[str, str]:
    return _cause("FieldValueRequired", field_path, "Required value" + (f": {detail}" if detail else ""))


def forbidden(field_path: str, detail: str) -> dict[str, str]:
    return _cause("FieldValueForbidden", field_path, f"Forbidden: {detail}")


def validate_name(rt: ResourceType, name: str) -> list[dict[str, str]]:
    """Name rules per type: namespaces are DNS-1123 labels, services DNS-1035 labels, the rest subdomains."""
    if rt.plural == "namespaces" and not rt.group:
        if len(name) > 63 or not _DNS1123_LABEL.match(name):
            detail = "must be no more than 63 characters" if len(name) > 63 else _LABEL_MSG
            return [invalid_value("metadata.name", name, detail)]
        return []
    if rt.plural == "services" and not rt.group:
        if len(name) > 63 or not _DNS1035_LABEL.match(name):
            detail = "must be no more than 63 characters" if len(name) > 63 else _DNS1035_MSG
            return [invalid_value("metadata.name", name, detail)]
        return []
    if rt.kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
        # RBAC names are path segments: anything but "." / ".." / containing "/" or "%".
        if name in (".", "..") or "/" in name or "%" in name:
            return [
                invalid_value(
                    "metadata.name",
                    name,
                    f"may not be '{name}'"
                    if name in (".", "..")
                    else "may not contain '/'"
                    if "/" in name
                    else "may not contain '%'",
                )
            ]
        return []
    if len(name) > 253:
        return [invalid_value("metadata.name", name, "must be no more than 253 characters")]
    if not _DNS1123_SUBDOMAIN.match(name):
        return [invalid_value("metadata.name", name, _SUBDOMAIN_MSG)]
    return []


# Keys that passed _validate_qualified_key: the same few label and annotation keys come with every
# object a controller writes, so most checks are a set lookup. Bounded; only passes are kept.
_VALID_KEYS: set[str] = set()
_VALID_KEYS_MAX = 4096


def _validate_qualified_key(field_path: str, key: str) -> list[dict[str, str]]:
    if key in _VALID_KEYS:
        return []
    causes = _qualified_key_causes(field_path, key)
    if not causes:
        if len(_VALID_KEYS) >= _VALID_KEYS_MAX:
            _VALID_KEYS.clear()
        _VALID_KEYS.add(key)
    return causes


def _qualified_key_causes(field_path: str, key: str) -> list[dict[str, str]]:
    prefix, slash, name = key.rpartition("/")
    causes = []
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        causes.append(invalid_value(field_path, key, "prefix part " + _SUBDOMAIN_MSG))
    if not name:
        causes.append(invalid_value(field_path, key, "name part must be non-empty"))
    elif len(name) > 63:
        causes.append(invalid_value(field_path, key, "name part must be no more than 63 characters"))
    elif not _QUALIFIED_NAME.match(name):
        causes.append(
            invalid_value(
                field_path,
                key,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            )
        )
    return causes


def validate_object_meta(rt: ResourceType, meta: dict) -> list[dict[str, str]]:
    """Labels, annotations, finalizers and ownerReferences shape checks (ValidateObjectMeta)."""
    causes: list[dict[str, str]] = []
    labels = meta.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            causes.append(invalid_value("metadata.labels", labels, "must be a map of strings"))
        else:
            for key, value in labels.items():
                causes += _validate_qualified_key("metadata.labels", key)
                if not isinstance(value, str):
                    causes.append(invalid_value("metadata.labels", value, "must be a string"))
                elif len(value) > 63:
                    causes.append(invalid_value("metadata.labels", value, "must be no more than 63 characters"))
                elif not _LABEL_VALUE.match(value):
                    causes.append(
                        invalid_value(
                            "metadata.labels",
                            value,
                            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
                            "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
                            "'my_value',  or '12345', regex used for validation is "
                            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
                        )
                    )
    annotations = meta.get("annotations")
    if annotations is not None:
        if not isinstance(annotations, dict):
            causes.append(invalid_value("metadata.annotations", annotations, "must be a map of strings"))
        else:
            for key, value in annotations.items():
                causes += _validate_qualified_key("metadata.annotations", key.lower())
                if not isinstance(value, str):
                    causes.append(invalid_value("metadata.annotations", value, "must be a string"))
    finalizers = meta.get("finalizers")
    if finalizers is not None:
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            causes.append(invalid_value("metadata.finalizers", finalizers, "must be a list of strings"))
        else:
            for i, fin in enumerate(finalizers):
                if "/" not in fin and fin not in ("orphan", "foregroundDeletion", "kubernetes"):
                    causes.append(
                        invalid_value(
                            f"metadata.finalizers[{i}]",
                            fin,
                            "name is neither a standard finalizer name nor is it fully qualified",
                        )
                    )
                else:
                    causes += _validate_qualified_key(f"metadata.finalizers[{i}]", fin)
            if "orphan" in finalizers and "foregroundDeletion" in finalizers:
                causes.append(
                    invalid_value(
                        "metadata.finalizers", finalizers, "finalizer orphan and foregroundDeletion cannot be both set"
                    )
                )
    owners = meta.get("ownerReferences")
    if owners is not None:
        if not isinstance(owners, list):
            causes.append(invalid_value("metadata.ownerReferences", owners, "must be a list"))
        else:
            controllers = 0
            for i, ref in enumerate(owners):
                path = f"metadata.ownerReferences[{i}]"
                if not isinstance(ref, dict):
                    causes.append(invalid_value(path, ref, "must be an object"))
                    continue
                for key in ("apiVersion", "kind", "name", "uid"):
                    if not ref.get(key):
                        causes.append(invalid_value(f"{path}.{key}", ref.get(key, ""), f"{key} must not be empty"))
                if ref.get("controller"):
                    controllers += 1
            if controllers > 1:
                causes.append(
                    invalid_value(
                        "metadata.ownerReferences", owners, "Only one reference can have Controller set to true"
                    )
                )
    return causes


# --------------------------------------------------------------------------------------------
# Per-kind strategies: defaults on create, what updates may change, validation.

_SERVICE_IP_BASE = (10, 96)


def apply_defaults(rt: ResourceType, obj: dict) -> None:
    """The scheme's SetDefaults for built-ins: run on every main-resource write (the apiserver defaults
    whatever it decodes), so a port added by an update gets its protocol like one sent on create."""
    if rt.custom:
        return
    if rt.kind in _STORAGE_KINDS:
        storagetypes.default(rt.kind, obj)
        return
    if not isinstance(obj.get("spec"), dict):
        return
    spec = obj["spec"]
    if rt.kind == "Pod":
        _default_pod_spec(spec, pod=True)
    elif rt.kind in ("Deployment", "ReplicaSet") and rt.group == "apps":
        _default_workload(rt.kind, spec)
    elif rt.kind == "Service":
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if "port" in port:
                    port.setdefault("targetPort", port["port"])


def _default_workload(kind: str, spec: dict) -> None:
    """apps/v1 SetDefaults_Deployment / SetDefaults_ReplicaSet, plus the pod template's defaults."""
    spec.setdefault("replicas", 1)
    if kind == "Deployment":
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                rolling = strategy.setdefault("rollingUpdate", {})
                if isinstance(rolling, dict):
                    rolling.setdefault("maxUnavailable", "25%")
                    rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    template = spec.get("template")
    if isinstance(template, dict):
        if not isinstance(template.get("metadata"), dict):
            template["metadata"] = {}
        # A template's ObjectMeta is a Go struct whose zero creationTimestamp encodes as null.
        template["metadata"].setdefault("creationTimestamp", None)
        if isinstance(template.get("spec"), dict):
            _default_pod_spec(template["spec"])


def _default_pod_spec(spec: dict, *, pod: bool = False) -> None:
    """core/v1 SetDefaults_PodSpec and the container/probe defaults; ``pod``: also SetDefaults_Pod's
    (enableServiceLinks), which pod templates do not get."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    if pod:
        spec.setdefault("enableServiceLinks", True)
    for key in ("containers", "initContainers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                container.setdefault("terminationMessagePath", "/dev/termination-log")
                container.setdefault("terminationMessagePolicy", "File")
                image = container.get("image", "")
                tag_latest = isinstance(image, str) and (
                    ":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest")
                )
                container.setdefault("imagePullPolicy", "Always" if tag_latest else "IfNotPresent")
                container.setdefault("resources", {})
                for port in container.get("ports") or []:
                    if isinstance(port, dict):
                        port.setdefault("protocol", "TCP")
                for probe_key in ("livenessProbe", "readinessProbe", "startupProbe"):
                    probe = container.get(probe_key)
                    if isinstance(probe, dict):
                        _default_probe(probe)


def _default_probe(probe: dict) -> None:
    # SetDefaults_Probe and SetDefaults_HTTPGetAction.
    probe.setdefault("timeoutSeconds", 1)
    probe.setdefault("periodSeconds", 10)
    probe.setdefault("successThreshold", 1)
    probe.setdefault("failureThreshold", 3)
    http_get = probe.get("httpGet")
    if isinstance(http_get, dict):
        http_get.setdefault("path", "/")
        http_get.setdefault("scheme", "HTTP")


def prepare_for_create(rt: ResourceType, obj: dict, allocate_ip: Callable[[], str]) -> None:
    """Built-in defaulting, admission defaults, allocation and status reset on create (the type
    strategies' PrepareForCreate and what runs around it)."""
    if rt.custom:
        return
    kind = rt.kind
    if kind in _STORAGE_KINDS:
        apply_defaults(rt, obj)
        storagetypes.prepare_for_create(kind, obj)
        return
    if kind in ("Pod", "Service", "Deployment", "ReplicaSet"):
        if obj.get("spec") is None:
            obj["spec"] = {}
        apply_defaults(rt, obj)
    if kind in ("Deployment", "ReplicaSet"):
        obj["status"] = {}  # the strategies' PrepareForCreate reset status
    if kind == "Pod":
        spec = obj["spec"]
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        if "serviceAccountName" not in spec:
            spec["serviceAccountName"] = spec.get("serviceAccount", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    elif kind == "Service":
        spec = obj["spec"]
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("ipFamilies", ["IPv4"])
        if "clusterIP" not in spec:
            spec["clusterIP"] = allocate_ip()
        if spec.get("clusterIP") and "clusterIPs" not in spec:
            spec["clusterIPs"] = [spec["clusterIP"]]
        obj["status"] = {"loadBalancer": {}}
    elif kind == "Namespace":
        name = (obj.get("metadata") or {}).get("name", "")
        labels = obj["metadata"].setdefault("labels", {})
        if isinstance(labels, dict):
            labels["kubernetes.io/metadata.name"] = name
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None)
        if isinstance(string_data, dict):
            import base64

            data = obj.setdefault("data", {})
            for key, value in string_data.items():
                data[key] = base64.b64encode(str(value).encode()).decode()
    elif kind == "CustomResourceDefinition":
        obj.pop("status", None)


# Pod conditions (podutil.UpdatePodCondition), shared by the binding (store) and the kubelet.


def with_transition(cond: dict, old_conditions: list[dict], ts: str) -> dict:
    """``cond`` with lastTransitionTime kept from the old condition of its type if status is unchanged."""
    old = next((c for c in old_conditions if c.get("type") == cond["type"]), None)
    out = dict(cond)
    if old is not None and old.get("status") == cond["status"] and old.get("lastTransitionTime"):
        out["lastTransitionTime"] = old["lastTransitionTime"]
    else:
        out["lastTransitionTime"] = ts
    return out


def set_condition(conditions: list[dict], cond: dict, ts: str) -> list[dict]:
    """Conditions with ``cond`` replacing the one of its type (kept in place) or appended."""
    new = with_transition(cond, conditions, ts)
    out = []
    replaced = False
    for c in conditions:
        if isinstance(c, dict) and c.get("type") == cond["type"]:
            out.append(new)
            replaced = True
        else:
            out.append(c)
    if not replaced:
        out.append(new)
    return out


def qos_class(spec: dict) -> str:
    """status.qosClass of a pod spec (Guaranteed / Burstable / BestEffort), as the API server and kubelet set it."""
    containers = [c for c in (spec.get("containers") or []) if isinstance(c, dict)]
    if not containers:
        return "BestEffort"
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or (name in requests and requests[name] != limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


_POD_MUTABLE_MSG = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def _pod_spec_comparable(spec: dict) -> dict:
    """A pod spec with the fields updates may change blanked out."""
    out = dict(spec)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"):
        out.pop(key, None)
    for key in ("containers", "initContainers"):
        if isinstance(out.get(key), list):
            out[key] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c for c in out[key]]
    return out


def validate_update(rt: ResourceType, new: dict, old: dict) -> list[dict[str, str]]:
    """Type-specific update rules: pod spec immutability (nodeName may be set once, like a binding)."""
    causes: list[dict[str, str]] = []
    if rt.kind in _STORAGE_KINDS:
        return storagetypes.validate_update(rt.kind, new, old)
    if rt.kind == "Pod" and not rt.group:
        new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
        if not old_spec.get("nodeName") and new_spec.get("nodeName"):
            old_spec = dict(old_spec, nodeName=new_spec["nodeName"])
        if _pod_spec_comparable(new_spec) != _pod_spec_comparable(old_spec):
            causes.append(forbidden("spec", _POD_MUTABLE_MSG))
    elif rt.kind in ("RoleBinding", "ClusterRoleBinding") and rt.group == "rbac.authorization.k8s.io":
        ref = new.get("roleRef")
        if ref != old.get("roleRef"):
            ref = ref if isinstance(ref, dict) else {}
            shown = (
                f"rbac.RoleRef{{APIGroup:{_quote(str(ref.get('apiGroup', '')))}, "
                f"Kind:{_quote(str(ref.get('kind', '')))}, Name:{_quote(str(ref.get('name', '')))}}}"
            )
            causes.append(_cause("FieldValueInvalid", "roleRef", f"Invalid value: {shown}: cannot change roleRef"))
    elif rt.kind in ("Deployment", "ReplicaSet") and rt.group == "apps":
        new_selector = (new.get("spec") or {}).get("selector")
        if new_selector != (old.get("spec") or {}).get("selector"):
            causes.append(
                _cause(
                    "FieldValueInvalid",
                    "spec.selector",
                    f"Invalid value: {_go_label_selector(new_selector)}: field is immutable",
                )
            )
    elif rt.kind in ("ConfigMap", "Secret") and not rt.group and old.get("immutable"):
        for key in ("data", "binaryData"):
            if new.get(key) != old.get(key):
                causes.append(forbidden(key, "field is immutable when `immutable` is set"))
    return causes


def validate(rt: ResourceType, obj: dict) -> list[dict[str, str]]:
    """Minimal built-in validation: the required fields every real client relies on being checked."""
    causes: list[dict[str, str]] = []
    kind = rt.kind
    if rt.custom:
        return causes
    if kind in _STORAGE_KINDS:
        return storagetypes.validate(kind, obj)
    if kind == "Pod":
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [required_value("spec")]
        causes += _validate_pod_spec(spec, "spec")
    elif kind in ("Deployment", "ReplicaSet") and rt.group == "apps":
        causes += _validate_workload(kind, obj.get("spec"))
    elif rt.group == "rbac.authorization.k8s.io":
        causes += _validate_rbac(kind, obj)
    elif kind == "Service":
        spec = obj.get("spec") or {}
        ports = spec.get("ports") or []
        if spec.get("type", "ClusterIP") != "ExternalName" and not ports and spec.get("clusterIP") != "None":
            causes.append(required_value("spec.ports"))
        for i, port in enumerate(ports if isinstance(ports, list) else []):
            p = port.get("port") if isinstance(port, dict) else None
            if not isinstance(p, int) or not 1 <= p <= 65535:
                causes.append(invalid_value(f"spec.ports[{i}].port", p, "must be between 1 and 65535, inclusive"))
    elif kind == "Lease":
        spec = obj.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            causes.append(invalid_value("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    elif kind in ("ConfigMap", "Secret"):
        for key in ("data", "binaryData"):
            data = obj.get(key)
            if data is not None and not isinstance(data, dict):
                causes.append(invalid_value(key, data, "must be a map"))
    return causes


def _validate_pod_spec(spec: dict, path: str) -> list[dict[str, str]]:
    """The PodSpec checks every client relies on (containers, names, images, restartPolicy)."""
    causes: list[dict[str, str]] = []
    containers = spec.get("containers")
    if not containers:
        causes.append(required_value(f"{path}.containers"))
    elif not isinstance(containers, list):
        causes.append(invalid_value(f"{path}.containers", containers, "must be a list"))
    else:
        seen: set[str] = set()
        for i, c in enumerate(containers):
            item = f"{path}.containers[{i}]"
            if not isinstance(c, dict):
                causes.append(invalid_value(item, c, "must be an object"))
                continue
            name = c.get("name")
            if not name:
                causes.append(required_value(f"{item}.name"))
            elif not isinstance(name, str) or len(name) > 63 or not _DNS1123_LABEL.match(name):
                causes.append(invalid_value(f"{item}.name", name, _LABEL_MSG))
            elif name in seen:
                causes.append(_cause("FieldValueDuplicate", f"{item}.name", f'Duplicate value: "{name}"'))
            else:
                seen.add(name)
            if not c.get("image"):
                causes.append(required_value(f"{item}.image"))
    policy = spec.get("restartPolicy")
    if policy not in (None, "Always", "OnFailure", "Never"):
        causes.append(
            _cause(
                "FieldValueNotSupported",
                f"{path}.restartPolicy",
                f'Unsupported value: {_quote(policy)}: supported values: "Always", "OnFailure", "Never"',
            )
        )
    return causes


def _go_string_map(labels: Any) -> str:
    """Go's ``%#v`` of a map[string]string, as apps validation prints template labels."""
    if not isinstance(labels, dict) or not labels:
        return "map[string]string(nil)"
    return "map[string]string{" + ", ".join(f"{_quote(k)}:{_quote(v)}" for k, v in sorted(labels.items())) + "}"


def _go_label_selector(selector: Any) -> str:
    """Go's ``%#v`` of a *metav1.LabelSelector (what the selector errors print), abridged to the fields."""
    sel = selector if isinstance(selector, dict) else {}
    return (
        f"v1.LabelSelector{{MatchLabels:{_go_string_map(sel.get('matchLabels'))}, "
        f"MatchExpressions:[]v1.LabelSelectorRequirement{{...}}}}"
        if sel.get("matchExpressions")
        else f"v1.LabelSelector{{MatchLabels:{_go_string_map(sel.get('matchLabels'))}, "
        "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
    )


def _validate_workload(kind: str, spec: Any) -> list[dict[str, str]]:
    """apps/v1 ValidateDeploymentSpec / ValidateReplicaSetSpec: replicas, selector, template."""
    if not isinstance(spec, dict):
        return [required_value("spec")]
    causes: list[dict[str, str]] = []
    replicas = spec.get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        causes.append(invalid_value("spec.replicas", replicas, "must be greater than or equal to 0"))
    selector = spec.get("selector")
    parsed = None
    if selector is None:
        causes.append(required_value("spec.selector"))
    else:
        try:
            parsed = selectors.label_selector_from_dict(selector)
        except ValueError as exc:
            causes.append(invalid_value("spec.selector", selector, str(exc)))
        else:
            if parsed.is_empty():
                causes.append(
                    _cause(
                        "FieldValueInvalid",
                        "spec.selector",
                        f"Invalid value: {_go_label_selector(selector)}: empty selector is invalid for {kind.lower()}",
                    )
                )
                parsed = None
    template = spec.get("template")
    if not isinstance(template, dict):
        causes.append(required_value("spec.template"))
        return causes
    labels = (template.get("metadata") or {}).get("labels") if isinstance(template.get("metadata"), dict) else None
    if parsed is not None and not parsed.matches(labels if isinstance(labels, dict) else {}):
        causes.append(
            _cause(
                "FieldValueInvalid",
                "spec.template.metadata.labels",
                f"Invalid value: {_go_string_map(labels)}: `selector` does not match template `labels`",
            )
        )
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        causes.append(required_value("spec.template.spec.containers"))
        return causes
    causes += _validate_pod_spec(pod_spec, "spec.template.spec")
    policy = pod_spec.get("restartPolicy")
    if policy in ("OnFailure", "Never"):
        causes.append(
            _cause(
                "FieldValueNotSupported",
                "spec.template.spec.restartPolicy",
                f'Unsupported value: {_quote(policy)}: supported values: "Always"',
            )
        )
    if kind == "Deployment":
        strategy = spec.get("strategy") or {}
        if isinstance(strategy, dict) and strategy.get("type") not in ("RollingUpdate", "Recreate"):
            causes.append(
                _cause(
                    "FieldValueNotSupported",
                    "spec.strategy.type",
                    f'Unsupported value: {_quote(strategy.get("type"))}: supported values: "Recreate", "RollingUpdate"',
                )
            )
    return causes


def _validate_rbac(kind: str, obj: dict) -> list[dict[str, str]]:
    """rbac.authorization.k8s.io/v1 validation (ValidatePolicyRule, ValidateRoleBinding...)."""
    causes: list[dict[str, str]] = []
    if kind in ("Role", "ClusterRole"):
        rules = obj.get("rules")
        if rules is not None and not isinstance(rules, list):
            return [invalid_value("rules", rules, "must be a list")]
        for i, rule in enumerate(rules or []):
            path = f"rules[{i}]"
            if not isinstance(rule, dict):
                causes.append(invalid_value(path, rule, "must be an object"))
                continue
            if not rule.get("verbs"):
                causes.append(required_value(f"{path}.verbs", "verbs must contain at least one value"))
            urls = rule.get("nonResourceURLs")
            if urls:
                shown = (
                    "[]string{" + ", ".join(_quote(str(u)) for u in urls) + "}"
                    if isinstance(urls, list)
                    else _quote(urls)
                )
                if kind == "Role":
                    causes.append(
                        _cause(
                            "FieldValueInvalid",
                            f"{path}.nonResourceURLs",
                            f"Invalid value: {shown}: namespaced rules cannot apply to non-resource URLs",
                        )
                    )
                if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                    causes.append(
                        _cause(
                            "FieldValueInvalid",
                            f"{path}.nonResourceURLs",
                            f"Invalid value: {shown}: "
                            "rules cannot apply to both regular resources and non-resource URLs",
                        )
                    )
                continue
            if not rule.get("apiGroups"):
                causes.append(required_value(f"{path}.apiGroups", "resource rules must supply at least one api group"))
            if not rule.get("resources"):
                causes.append(required_value(f"{path}.resources", "resource rules must supply at least one resource"))
        return causes
    ref = obj.get("roleRef")
    if not isinstance(ref, dict):
        return [required_value("roleRef")]
    if ref.get("apiGroup") != "rbac.authorization.k8s.io":
        causes.append(
            _cause(
                "FieldValueNotSupported",
                "roleRef.apiGroup",
                f'Unsupported value: {_quote(ref.get("apiGroup", ""))}: supported values: "rbac.authorization.k8s.io"',
            )
        )
    kinds = ("Role", "ClusterRole") if kind == "RoleBinding" else ("ClusterRole",)
    if ref.get("kind") not in kinds:
        causes.append(
            _cause(
                "FieldValueNotSupported",
                "roleRef.kind",
                f"Unsupported value: {_quote(ref.get('kind', ''))}: supported values: "
                + ", ".join(f'"{k}"' for k in kinds),
            )
        )
    if not ref.get("name"):
        causes.append(required_value("roleRef.name"))
    subjects = obj.get("subjects")
    for i, subject in enumerate(subjects if isinstance(subjects, list) else []):
        path = f"subjects[{i}]"
        if not isinstance(subject, dict):
            causes.append(invalid_value(path, subject, "must be an object"))
            continue
        if not subject.get("name"):
            causes.append(required_value(f"{path}.name"))
        subject_kind = subject.get("kind")
        if subject_kind == "ServiceAccount":
            if kind == "ClusterRoleBinding" and not subject.get("namespace"):
                causes.append(required_value(f"{path}.namespace"))
        elif subject_kind in ("User", "Group"):
            if subject.get("apiGroup") != "rbac.authorization.k8s.io":
                causes.append(
                    _cause(
                        "FieldValueNotSupported",
                        f"{path}.apiGroup",
                        f"Unsupported value: {_quote(subject.get('apiGroup', ''))}: supported values: "
                        '"rbac.authorization.k8s.io"',
                    )
                )
        else:
            causes.append(
                _cause(
                    "FieldValueNotSupported",
                    f"{path}.kind",
                    f"Unsupported value: {_quote(subject_kind or '')}: supported values: "
                    '"ServiceAccount", "User", "Group"',
                )
            )
    return causes
