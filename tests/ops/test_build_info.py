"""tfjob_controller_build_info: one series, always 1, labelled with the versions this process really runs, on the
registry ``tfjob-controller run`` serves. (Its dashboard panel against a real Prometheus: tests/ops/test_prometheus.py.)"""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from controller.app import new_registry
from controller.ops.build_info import BUILD_INFO, register_build_info
from controller.version import version


def _series(registry: CollectorRegistry) -> list[tuple[dict[str, str], float]]:
    exposition = generate_latest(registry).decode()
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(exposition)
        if family.name == BUILD_INFO
        for sample in family.samples
    ]


def test_one_series_of_value_1_labelled_with_the_running_versions() -> None:
    registry = CollectorRegistry()
    register_build_info(registry)
    assert _series(registry) == [
        (
            {
                # The installed distribution's version (this checkout is installed, so not the fallback).
                "version": metadata.version("tfjob-controller"),
                "python_version": platform.python_version(),
                "kubernetes_asyncio_version": metadata.version("kubernetes-asyncio"),
            },
            1.0,
        )
    ]
    assert version() == metadata.version("tfjob-controller")


def test_the_controllers_registry_exports_it_as_a_gauge() -> None:
    exposition = generate_latest(new_registry()).decode()
    assert f"# TYPE {BUILD_INFO} gauge" in exposition
    [(labels, value)] = _series(new_registry())
    assert labels["version"] == version() and value == 1.0
