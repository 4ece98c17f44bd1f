"""A small CRD used by the simulator tests (widgets.example.com), exercising every CRD feature the
store serves: structural schema with defaults/enum/minimum, a CEL rule, status and scale
subresources, printer columns and short names."""

from __future__ import annotations

import copy

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
