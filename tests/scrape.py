"""Reading a metric the way Prometheus does: from a complete collection of the registry.

A TFJob namespace's increments are held until one complete collection has exposed its series at 0
(controller/tfjob/metrics.py), and ``CollectorRegistry.get_sample_value`` stops collecting at its first match,
so on its own it could keep reading the held 0 forever.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry


def scraped(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    """The value of sample ``name`` with ``labels`` right after a complete collection (None if absent)."""
    for _ in registry.collect():
        pass
    return registry.get_sample_value(name, labels or {})
