"""Objects the tests and benchmarks create, built in one place.

- :data:`WIDGET_CRD` / :func:`widget_crd` / :func:`widget`: a small CRD (widgets.example.com) that exercises every
  CRD feature the store serves: structural schema with defaults/enum/minimum, a CEL rule, status and scale
  subresources, printer columns and short names.
- :func:`pod`: a bare pod for store-level tests; :func:`pod_manifest` / :func:`pod_yaml`: a pod as a user hands
  it to ``kubectl apply -f -``.
- :func:`tfjob`: a TFJob whose pods the simulated kubelet drives by annotations.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

WIDGET_CRD: dict = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "listKind": "WidgetList",
            "shortNames": ["wd"],
            "categories": ["all"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                "additionalPrinterColumns": [
                    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
                    {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "apiVersion": {"type": "string"},
                            "kind": {"type": "string"},
                            "metadata": {"type": "object"},
                            "spec": {
                                "type": "object",
                                "required": ["replicas"],
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.replicas <= self.maxReplicas",
                                        "message": "replicas must not exceed maxReplicas",
                                    }
                                ],
                                "properties": {
                                    "replicas": {"type": "integer", "minimum": 0},
                                    "maxReplicas": {"type": "integer", "default": 10},
                                    "color": {"type": "string", "enum": ["red", "green", "blue"], "default": "red"},
                                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {
                                    "replicas": {"type": "integer"},
                                    "selector": {"type": "string"},
                                    "phase": {"type": "string"},
                                },
                            },
                        },
                    }
                },
            }
        ],
    },
}


def widget_crd() -> dict:
    return copy.deepcopy(WIDGET_CRD)


def widget(name: str, replicas: int = 1, **spec: object) -> dict:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, **spec},
    }


def pod(name: str, node: str | None = None, labels: dict | None = None, **meta: object) -> dict:
    spec: dict = {"containers": [{"name": "main", "image": "busybox:1.36"}]}
    if node:
        spec["nodeName"] = node
    metadata: dict = {"name": name, **meta}
    if labels:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def pod_manifest(name: str, annotations: dict[str, str] | None = None, **spec: object) -> dict:
    """A one-container pod (``main``, image ``python:3.12``): ``annotations`` drive the simulated kubelet
    (run time, exit code, logs...), keyword arguments are extra fields of its spec."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "image": "python:3.12"}], **spec},
    }


def pod_yaml(name: str, annotations: dict[str, str] | None = None, **spec: object) -> str:
    """:func:`pod_manifest` as YAML, ready for ``kubectl apply -f -``."""
    return yaml.safe_dump(pod_manifest(name, annotations, **spec))


def tfjob(
    name: str,
    *,
    workers: int = 2,
    ps: int = 0,
    chief: int = 0,
    dynamic: bool = True,
    restart_policy: str = "OnFailure",
    annotations: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    success_policy: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A TFJob manifest whose pods are driven by simulator annotations."""

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": {
                "metadata": {"annotations": dict(annotations or {})},
                "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]},
            },
        }

    specs: dict[str, Any] = {"Worker": replica(workers)}
    if ps:
        specs["PS"] = replica(ps)
    if chief:
        specs["Chief"] = replica(chief)
    spec: dict[str, Any] = {"tfReplicaSpecs": specs, "enableDynamicWorker": dynamic}
    if run_policy:
        spec["runPolicy"] = run_policy
    if success_policy is not None:
        spec["successPolicy"] = success_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def condition(job: dict[str, Any], cond_type: str) -> dict[str, Any] | None:
    """The job's status condition of ``cond_type``, or None."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == cond_type:
            return c
    return None


def is_true(job: dict[str, Any], cond_type: str) -> bool:
    """Whether the job's ``cond_type`` condition is there with status True."""
    c = condition(job, cond_type)
    return bool(c and c.get("status") == "True")
