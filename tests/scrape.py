"""Reading a metric the way Prometheus does: from a complete collection of the registry.

A TFJob namespace's increments are held until one complete collection has exposed its series at 0
(controller/tfjob/metrics.py), and ``CollectorRegistry.get_sample_value`` stops collecting at its first match,
so on its own it could keep reading the held 0 forever.

An assertion about a metric reads it with :func:`series`, which fails when the series is not exported at all:
read as 0, a renamed metric or label would pass every "nothing happened" (``== 0``) assertion.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry


def scraped(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The value of sample ``name`` with ``labels`` right after a complete collection (None if absent)."""
    for _ in registry.collect():
        pass
    return registry.get_sample_value(name, labels or {})


def series(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    """Like :func:`scraped`, but a series that is not exported fails the assertion (a missing series is no 0)."""
    value = scraped(registry, name, labels)
    assert value is not None, f"no series {name}{labels or {}} is exported (a metric or label renamed?)"
    return value
