"""The TFJob CustomResourceDefinition (kubeflow.org/v1), built as a plain dict.

Why this module exists: the CRD is the only validation a TFJob gets before the controller sees it
(there is no admission webhook), and its schema must stay a *superset* of upstream
training-operator's, so that every TFJob upstream accepts is accepted here too, except the invalid
ones upstream's webhook rejects anyway. Writing ~150 KB of PodTemplateSpec schema by hand would
drift; instead the pod template schema is generated from kubernetes_asyncio's model classes
(``openapi_types`` / ``attribute_map``), and the TFJob-specific parts are spelled out below, with
names and enum values taken from :mod:`controller.tfjob.api` (the one place they are spelled).

Contract:

- :func:`build_crd` returns the same dict on every call (no clock, no randomness, sorted
  property maps), so ``python -m controller.tfjob.crd`` regenerates
  ``manifests/crd/kubeflow.org_tfjobs.yaml`` byte for byte and a test can compare them.
- The schema is structural (every node has a ``type``, or is int-or-string / preserve-unknown),
  carries no descriptions (the compact JSON must stay under the 256 KiB last-applied annotation
  limit of a client-side ``kubectl apply``), and declares the status and scale subresources.
- Validation that users see from ``kubectl apply`` lives in ``x-kubernetes-validations`` (CEL),
  enums and minimums; each rule has a one-line ``message``. The rules only use CEL that both
  cel-python and Kubernetes' cel-go accept, and are shaped to keep the apiserver's static cost
  estimate small (see :func:`_tf_replica_specs_schema`).

Decisions beyond upstream's schema (all additive, recorded here because the YAML has no
descriptions):

- ``metadata.name``: short enough that every generated pod and service name fits in 63 characters (see
  :func:`_generated_names_rule`); upstream accepted such jobs and then failed on every Service create.
- ``runPolicy``: ``default: {}``. Upstream allows a TFJob without it, but the Kubeflow Training SDK's
  model (``KubeflowOrgV1TFJobSpec``) requires ``run_policy``, so one such job made the SDK's
  ``list_jobs`` fail for its whole namespace; the apiserver's defaulting now stores ``{}`` (which means
  what an absent runPolicy means). Everything else the SDK's models require (``tfReplicaSpecs``,
  a condition's ``type``/``status``) the schema already requires.
- ``runPolicy.activeDeadlineSeconds``: ``minimum: 0``. Upstream has no minimum; a negative deadline
  has no meaning (the job would fail at once), 0 stays accepted as upstream accepts it.
- ``runPolicy.managedBy``: the two values upstream v1.9's webhook allows, immutable once set
  (upstream v1.9 enforces both in its webhook; the transition rule cannot see absent → set).
- ``tfReplicaSpecs``: at most 5 entries, known replica types only (any letter case, as upstream's
  defaulting normalises them), no type twice in different letter case, at most one of Chief/Master
  counted case-insensitively (upstream compares exact-case keys, so ``CHIEF`` + ``Master`` slipped
  through and then collided after defaulting).
- Pod template: fields required by the Kubernetes API (from kubernetes_asyncio's models) are
  required, as in upstream; upstream's structural defaults (``protocol: TCP`` and friends) and
  list-type markers are not reproduced: the pod API applies those defaults when the pod is created.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import yaml

from controller.tfjob import api

CRD_NAME = api.RESOURCE

# The resource.Quantity grammar, exactly as controller-gen emits it for upstream's CRD.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

# kubernetes_asyncio types Quantity fields as plain 'str' / 'dict(str, str)'; the OpenAPI
# "Quantity" type is lost, so these (model class, python attribute) pairs are listed explicitly.
# Upstream's CRD makes exactly these int-or-string with QUANTITY_PATTERN.
QUANTITY_FIELDS = frozenset(
    {
        ("V1ResourceRequirements", "limits"),
        ("V1ResourceRequirements", "requests"),
        ("V1VolumeResourceRequirements", "limits"),
        ("V1VolumeResourceRequirements", "requests"),
        ("V1PodSpec", "overhead"),
        ("V1EmptyDirVolumeSource", "size_limit"),
        ("V1ResourceFieldSelector", "divisor"),
    }
)

# kubernetes_asyncio types every IntOrString as 'object'. Each 'object' in the pod template tree
# must be classified here: an unclassified one makes generation fail (a new kubernetes_asyncio
# release may add a RawExtension-like field that needs FREE_FORM_OBJECT_FIELDS instead).
INT_OR_STRING_FIELDS = frozenset({("V1HTTPGetAction", "port"), ("V1TCPSocketAction", "port")})
# Arbitrary JSON (RawExtension and the like): kept as-is, not validated. The pod template has none
# today (its only RawExtension-like field, managedFields' fieldsV1, sits in ObjectMeta, which is
# replaced by the embedded-metadata schema).
FREE_FORM_OBJECT_FIELDS: frozenset[tuple[str, str]] = frozenset()

# Integer fields that are int64 in the Kubernetes API (JSON names; every other integer in the
# pod template is int32). Checked against upstream's CRD when this table was written.
INT64_FIELD_NAMES = frozenset(
    {
        "activeDeadlineSeconds",
        "expirationSeconds",
        "fsGroup",
        "runAsGroup",
        "runAsUser",
        "seconds",
        "supplementalGroups",
        "terminationGracePeriodSeconds",
        "tolerationSeconds",
    }
)

_PRIMITIVE_SCHEMAS: dict[str, dict[str, Any]] = {
    "str": {"type": "string"},
    "bool": {"type": "boolean"},
    "float": {"type": "number"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
}

_DNS1035_LABEL = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
_LOWER_REPLICA_TYPES = tuple(replica_type.lower() for replica_type in api.REPLICA_TYPES)
_KNOWN_REPLICA_TYPE = "^(?i)(" + "|".join(_LOWER_REPLICA_TYPES) + ")$"


class SchemaGenerationError(Exception):
    """The model classes contain a type this generator cannot map safely; the message names it."""


def quantity_schema() -> dict[str, Any]:
    """A resource quantity: an integer or a string in Kubernetes' Quantity syntax."""
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-int-or-string": True,
    }


def int_or_string_schema() -> dict[str, Any]:
    """The schema of a Kubernetes IntOrString (a quantity, a port by number or name)."""
    return {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


def embedded_object_meta_schema() -> dict[str, Any]:
    """The metadata of an embedded template, as upstream declares it (other keys are pruned)."""
    string_map = {"type": "object", "additionalProperties": {"type": "string"}}
    return {
        "type": "object",
        "properties": {
            "annotations": dict(string_map),
            "finalizers": {"type": "array", "items": {"type": "string"}},
            "labels": dict(string_map),
            "name": {"type": "string"},
            "namespace": {"type": "string"},
        },
    }


def _split_container(type_name: str) -> tuple[str, str] | None:
    """'list[X]' -> ('list', 'X'); 'dict(str, X)' -> ('dict', 'X'); anything else -> None."""
    if type_name.startswith("list[") and type_name.endswith("]"):
        return "list", type_name[5:-1]
    if type_name.startswith("dict(str, ") and type_name.endswith(")"):
        return "dict", type_name[10:-1]
    return None


class _ModelSchemaBuilder:
    """Turns one model class (and everything it references) into a structural schema.

    A structural schema cannot refer to itself, so a model that is reached again while it is
    still being expanded (a cycle) becomes a free-form object instead of recursing forever.
    """

    def __init__(self, models: ModuleType) -> None:
        self._models = models
        self._expanding: list[str] = []

    def model(self, class_name: str) -> dict[str, Any]:
        if class_name == "V1ObjectMeta":
            return embedded_object_meta_schema()
        if class_name in self._expanding:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        cls = getattr(self._models, class_name, None)
        if cls is None:
            raise SchemaGenerationError(f"unknown model class {class_name!r}")
        self._expanding.append(class_name)
        try:
            properties = {
                cls.attribute_map[attr]: self.field(class_name, attr, type_name, cls.attribute_map[attr])
                for attr, type_name in cls.openapi_types.items()
            }
        finally:
            self._expanding.pop()
        schema: dict[str, Any] = {"type": "object", "properties": dict(sorted(properties.items()))}
        required = sorted(cls.attribute_map[attr] for attr in _required_attributes(cls))
        if required:
            schema["required"] = required
        return schema

    def field(self, class_name: str, attr: str, type_name: str, json_name: str) -> dict[str, Any]:
        if (class_name, attr) in QUANTITY_FIELDS:
            container = _split_container(type_name)
            if container == ("dict", "str"):
                return {"type": "object", "additionalProperties": quantity_schema()}
            if type_name == "str":
                return quantity_schema()
            raise SchemaGenerationError(f"{class_name}.{attr}: quantity field has type {type_name!r}")
        return self.type_schema(type_name, class_name, attr, json_name)

    def type_schema(self, type_name: str, class_name: str, attr: str, json_name: str) -> dict[str, Any]:
        container = _split_container(type_name)
        if container is not None:
            kind, inner = container
            inner_schema = self.type_schema(inner, class_name, attr, json_name)
            if kind == "list":
                return {"type": "array", "items": inner_schema}
            return {"type": "object", "additionalProperties": inner_schema}
        if type_name == "int":
            return {"type": "integer", "format": "int64" if json_name in INT64_FIELD_NAMES else "int32"}
        if type_name in _PRIMITIVE_SCHEMAS:
            return dict(_PRIMITIVE_SCHEMAS[type_name])
        if type_name == "object":
            if (class_name, attr) in INT_OR_STRING_FIELDS:
                return int_or_string_schema()
            if (class_name, attr) in FREE_FORM_OBJECT_FIELDS:
                return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            raise SchemaGenerationError(
                f"{class_name}.{attr} is typed 'object': classify it in INT_OR_STRING_FIELDS or FREE_FORM_OBJECT_FIELDS"
            )
        if hasattr(getattr(self._models, type_name, None), "openapi_types"):
            return self.model(type_name)
        raise SchemaGenerationError(f"{class_name}.{attr} has unsupported type {type_name!r}")


def _required_attributes(cls: type[Any]) -> list[str]:
    """Attributes whose generated setter rejects None, i.e. fields the Kubernetes API requires.

    kubernetes_asyncio records "required" only as a None check in each property setter, active
    when client-side validation is on; probing the setters is the one place it is observable.
    """
    from kubernetes_asyncio.client.configuration import Configuration

    config = Configuration()
    config.client_side_validation = True
    probe = object.__new__(cls)  # without __init__: only the setters probed below run
    probe.local_vars_configuration = config
    required = []
    for attr in cls.openapi_types:
        try:
            setattr(probe, attr, None)
        except ValueError:
            required.append(attr)
    return required


def pod_template_schema(models: ModuleType | None = None) -> dict[str, Any]:
    """The structural schema of a PodTemplateSpec, generated from kubernetes_asyncio's models."""
    if models is None:
        models = importlib.import_module("kubernetes_asyncio.client.models")
    return _ModelSchemaBuilder(models).model("V1PodTemplateSpec")


def _rule(rule: str, message: str) -> dict[str, str]:
    return {"rule": rule, "message": message}


def _replica_spec_schema() -> dict[str, Any]:
    template = pod_template_schema()
    containers = template["properties"]["spec"]["properties"]["containers"]
    containers["x-kubernetes-validations"] = [
        _rule(
            "self.all(c, has(c.image) && c.image != '')",
            "every container must have a non-empty image",
        )
    ]
    return {
        "type": "object",
        "properties": {
            "replicas": {"type": "integer", "format": "int32", "minimum": 0},
            "restartPolicy": {"type": "string", "enum": list(api.RESTART_POLICIES)},
            "template": template,
        },
        "x-kubernetes-validations": [
            _rule(
                "has(self.template) && has(self.template.spec) && has(self.template.spec.containers)"
                " && self.template.spec.containers.exists(c, has(c.name) && c.name == 'tensorflow')",
                "template.spec.containers must include a container named tensorflow",
            )
        ],
    }


def _tf_replica_specs_schema() -> dict[str, Any]:
    # maxProperties bounds how often the per-replica rules run in the apiserver's static CEL cost
    # estimate; without it the estimate assumes ~400k entries and rejects the CRD. Five is also
    # the true maximum once keys are known types that do not repeat case-insensitively.
    known = "[" + ", ".join(f"'{name}'" for name in _LOWER_REPLICA_TYPES) + "]"
    return {
        "type": "object",
        "maxProperties": len(api.REPLICA_TYPES),
        "additionalProperties": _replica_spec_schema(),
        "x-kubernetes-validations": [
            _rule(
                f"self.all(k, k.matches('{_KNOWN_REPLICA_TYPE}'))",
                "replica types must be Chief, Master, PS, Worker or Evaluator (any letter case)",
            ),
            _rule(
                f"{known}.all(t, self.filter(k, k.matches('^(?i)' + t + '$')).size() <= 1)",
                "a replica type must not appear twice in different letter case",
            ),
            _rule(
                "self.filter(k, k.matches('^(?i)(chief|master)$')).size() <= 1",
                "must not have more than 1 Chief or Master role",
            ),
        ],
    }


def _run_policy_schema() -> dict[str, Any]:
    int32 = {"type": "integer", "format": "int32"}
    return {
        "type": "object",
        "properties": {
            "activeDeadlineSeconds": {"type": "integer", "format": "int64", "minimum": 0},
            "backoffLimit": {**int32, "minimum": 0},
            "cleanPodPolicy": {"type": "string", "enum": list(api.CLEAN_POD_POLICIES)},
            "managedBy": {
                "type": "string",
                "enum": list(api.MANAGED_BY_ALLOWED),
                "x-kubernetes-validations": [_rule("self == oldSelf", "spec.runPolicy.managedBy is immutable")],
            },
            "schedulingPolicy": {
                "type": "object",
                "properties": {
                    "minAvailable": dict(int32),
                    "minResources": {"type": "object", "additionalProperties": quantity_schema()},
                    "priorityClass": {"type": "string"},
                    "queue": {
                        "type": "string",
                        "x-kubernetes-validations": [
                            _rule("self == oldSelf", "spec.runPolicy.schedulingPolicy.queue is immutable")
                        ],
                    },
                    "scheduleTimeoutSeconds": dict(int32),
                },
            },
            "suspend": {"type": "boolean", "default": False},
            "ttlSecondsAfterFinished": {**int32, "minimum": 0},
        },
    }


def _workers_to_delete_schema() -> dict[str, Any]:
    """``spec.workersToDelete``: worker indices that leave first when Worker replicas go down and are not
    refilled by a scale-up while listed (controller/tfjob/members.py). A set of indices, each at most once;
    bounded like replicas, which also bounds the CEL rule's cost."""
    return {
        "type": "array",
        "items": {"type": "integer", "format": "int32", "minimum": 0, "maximum": api.MAX_REPLICAS - 1},
        "maxItems": api.MAX_REPLICAS,
        "x-kubernetes-list-type": "set",
    }


def _status_schema() -> dict[str, Any]:
    int32 = {"type": "integer", "format": "int32"}
    date_time = {"type": "string", "format": "date-time"}
    label_selector = {
        "type": "object",
        "properties": {
            "matchExpressions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string"},
                        "values": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["key", "operator"],
                },
            },
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "x-kubernetes-map-type": "atomic",
    }
    return {
        "type": "object",
        "properties": {
            "completionTime": dict(date_time),
            "conditions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "lastTransitionTime": dict(date_time),
                        "lastUpdateTime": dict(date_time),
                        "message": {"type": "string"},
                        "reason": {"type": "string"},
                        "status": {"type": "string"},
                        "type": {"type": "string"},
                    },
                    "required": ["status", "type"],
                },
            },
            # Dynamic-worker bookkeeping (per-index backoff, failover history) owned by the
            # reconciler; its shape is the reconciler's contract, not the API's.
            "dynamicWorkers": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "lastReconcileTime": dict(date_time),
            "replicaStatuses": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "active": dict(int32),
                        "failed": dict(int32),
                        "labelSelector": label_selector,
                        "selector": {"type": "string"},
                        "succeeded": dict(int32),
                    },
                },
            },
            "startTime": dict(date_time),
        },
    }


def _open_api_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["tfReplicaSpecs"],
                "properties": {
                    "enableDynamicWorker": {"type": "boolean"},
                    api.SPEC_WORKERS_TO_DELETE: _workers_to_delete_schema(),
                    # Defaulted: the Kubeflow Training SDK's KubeflowOrgV1TFJobSpec requires run_policy.
                    "runPolicy": {**_run_policy_schema(), "default": {}},
                    "successPolicy": {"type": "string", "enum": list(api.SUCCESS_POLICIES)},
                    "tfReplicaSpecs": _tf_replica_specs_schema(),
                },
                "x-kubernetes-validations": [
                    _rule(
                        f"!has(self.{api.SPEC_WORKERS_TO_DELETE}) || size(self.{api.SPEC_WORKERS_TO_DELETE}) == 0"
                        " || (has(self.enableDynamicWorker) && self.enableDynamicWorker)",
                        f"spec.{api.SPEC_WORKERS_TO_DELETE} {api.WORKERS_TO_DELETE_NEEDS_DYNAMIC}",
                    )
                ],
            },
            "status": _status_schema(),
        },
        "x-kubernetes-validations": [
            _rule(
                f"size(self.metadata.name) <= 63 && self.metadata.name.matches('{_DNS1035_LABEL}')",
                "metadata.name must be a DNS-1035 label: at most 63 lower-case letters, digits or '-',"
                " starting with a letter and ending with a letter or digit",
            ),
            _generated_names_rule(),
        ],
    }


def _generated_names_rule() -> dict[str, Any]:
    """Every pod and service name the controller will generate, ``<job>-<replica type>-<index>`` for the
    largest index of each type, is a DNS-1035 label (a Service's name must be one): at most 63 characters.

    Without it a name of ~55 characters passed and every reconcile then met a 422 from the Service API.
    Re-evaluated on every update (``kubectl scale`` included), so a scale-up that would make the names too
    long is refused too. The message says how long this job's name may be.

    A rule at the root is never ratcheted (the root value changes with every write, a status write too),
    so a job stored before this rule existed could then not get even its ``TFJobFailedValidation``
    status. Hence a transition rule with ``optionalOldSelf``: on update it tolerates a replica type whose
    names already broke the limit as long as they do not grow (a status write, a scale-down pass; a
    scale-up that lengthens them, or a new type with too long names, is refused)."""
    limit = api.MAX_GENERATED_NAME_LENGTH

    def suffix(obj: str) -> str:
        # Characters after the job name: '-', the type in lower case (same length), '-', the largest index
        # (replicas unset means 1, so index 0).
        replicas = f"{obj}.spec.tfReplicaSpecs[k].replicas"
        return f"size(k) + 2 + size(string(has({replicas}) ? {replicas} - 1 : 0))"

    def has_pods(obj: str) -> str:
        replicas = f"{obj}.spec.tfReplicaSpecs[k].replicas"
        return f"!(has({replicas}) && {replicas} <= 0)"

    def longest_name(obj: str) -> str:
        longest_suffix = f"{obj}.spec.tfReplicaSpecs.filter(k, {has_pods(obj)}).map(k, {suffix(obj)}).max()"
        return f"(size({obj}.metadata.name) + {longest_suffix})"

    # Written with conditionals: && and || evaluate both sides (in the simulator; cel-go short-circuits), and
    # this runs on every create. orValue, not value(): value() of an absent optional is an error.
    old = "oldSelf.orValue(self)"
    no_pods = "(has(self.spec.tfReplicaSpecs[k].replicas) && self.spec.tfReplicaSpecs[k].replicas <= 0)"
    fits = f"size(self.metadata.name) + {suffix('self')} <= {limit}"
    # On update, a type whose names were already too long may keep (or shorten) them.
    tolerated = (
        f"oldSelf.hasValue() ? (k in {old}.spec.tfReplicaSpecs ? ({has_pods(old)}"
        f" && {suffix(old)} >= {suffix('self')}) : false) : false"
    )
    return {
        # A name already longer than a label is reported by the DNS-1035 rule alone.
        "rule": f"size(self.metadata.name) > {limit} ? true :"
        f" self.spec.tfReplicaSpecs.all(k, {no_pods} ? true : ({fits} ? true : ({tolerated})))",
        "optionalOldSelf": True,
        "messageExpression": f"'metadata.name must be at most ' + string({limit} + size(self.metadata.name) -"
        f" {longest_name('self')}) + ' characters for this job: the name of each of its pods and services,"
        f" <name>-<replica type>-<index>, must be a DNS-1035 label of at most {limit} characters'",
        "message": f"metadata.name is too long for this job: the name of each of its pods and services,"
        f" <name>-<replica type>-<index>, must be a DNS-1035 label of at most {limit} characters",
    }


def build_crd() -> dict[str, Any]:
    """The TFJob CRD as a dict, identical on every call."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": api.GROUP,
            "names": {"kind": api.KIND, "listKind": api.LIST_KIND, "plural": api.PLURAL, "singular": api.SINGULAR},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.VERSION,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": [
                        {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                        # The worker indices of a dynamic job, holes shown ("0,2-4"); none for a static job.
                        {
                            "name": "Members",
                            "type": "string",
                            "jsonPath": f".status.{api.STATUS_DYNAMIC_WORKERS}.{api.STATUS_MEMBERS_SUMMARY}",
                        },
                        {
                            "name": "Workers",
                            "type": "integer",
                            "priority": 1,
                            "jsonPath": ".spec.tfReplicaSpecs.Worker.replicas",
                        },
                        {
                            "name": "Active",
                            "type": "integer",
                            "priority": 1,
                            "jsonPath": ".status.replicaStatuses.Worker.active",
                        },
                    ],
                    "schema": {"openAPIV3Schema": _open_api_schema()},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.tfReplicaSpecs.Worker.replicas",
                            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
                            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
                        },
                    },
                }
            ],
        },
    }


def to_yaml(crd: Mapping[str, Any]) -> str:
    """Deterministic YAML: sorted keys, block style, no line folding."""
    return "---\n" + yaml.safe_dump(dict(crd), sort_keys=True, default_flow_style=False, width=10_000)


def main(argv: list[str] | None = None) -> int:
    """``python -m controller.tfjob.crd`` prints the CRD YAML on stdout."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        print("usage: python -m controller.tfjob.crd > manifests/crd/kubeflow.org_tfjobs.yaml", file=sys.stderr)
        return 2
    sys.stdout.write(to_yaml(build_crd()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
