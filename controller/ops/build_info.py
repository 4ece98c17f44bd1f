"""``tfjob_controller_build_info``: which build each replica runs, as Prometheus' build-info convention has it.

A gauge whose one series is always 1 and whose labels carry the versions: this controller's
(:func:`controller.version.version`), the Python interpreter's and kubernetes-asyncio's (the client library
whose behaviour the controller depends on most). A dashboard lists the versions per instance, so a
half-finished rollout shows; a query can join on it (``* on (instance) group_left (version)``) to split
any other series by version. The same versions are in the controller's start-up log line.
"""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import CollectorRegistry, Gauge

from controller.version import version

BUILD_INFO = "tfjob_controller_build_info"
LABELS = ("version", "python_version", "kubernetes_asyncio_version")


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:  # not installed as a distribution (vendored or run from a tree)
        return "unknown"


def build_info() -> dict[str, str]:
    """The label values of this process's series: the versions it runs."""
    return {
        "version": version(),
        "python_version": platform.python_version(),
        "kubernetes_asyncio_version": _distribution_version("kubernetes-asyncio"),
    }


def register_build_info(registry: CollectorRegistry) -> Gauge:
    """Register the gauge on ``registry`` with its one series set to 1."""
    gauge = Gauge(
        BUILD_INFO,
        "A metric with a constant '1' value labelled by the versions of tfjob-controller, Python and "
        "kubernetes-asyncio this process runs.",
        LABELS,
        registry=registry,
    )
    gauge.labels(**build_info()).set(1)
    return gauge
