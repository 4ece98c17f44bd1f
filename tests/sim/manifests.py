"""Manifests as a user hands them to ``kubectl apply -f -`` in the simulator's kubectl tests."""

from __future__ import annotations

import yaml


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
