"""Third-party CRDs the simulated cluster can serve: the gang schedulers' PodGroups (and Volcano's Queue).

Why: a TFJob controller started with ``--gang-scheduler-name`` creates PodGroups of Volcano or of the
scheduler-plugins coscheduling plugin, and must fail clearly when their CRD is absent. The simulator
therefore serves them only on request (``SimConfig.podgroup_crds``, ``tfjob-controller sim
--podgroup-crds``), and the same YAML files are what tests ``kubectl apply -f`` to a running cluster.
The files sit next to this module, one directory per scheduler, so ``kubectl apply -f <dir>``
installs everything that scheduler needs.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

VOLCANO = "volcano"
SCHEDULER_PLUGINS = "scheduler-plugins"
GANG_SCHEDULERS = (VOLCANO, SCHEDULER_PLUGINS)

_HERE = Path(__file__).resolve().parent


def crd_dir(scheduler: str) -> Path:
    """The directory holding ``scheduler``'s CRD files (``kubectl apply -f`` takes it as is)."""
    if scheduler not in GANG_SCHEDULERS:
        raise ValueError(f"unknown gang scheduler {scheduler!r}: expected one of {', '.join(GANG_SCHEDULERS)}")
    return _HERE / scheduler


def crd_documents(scheduler: str) -> list[dict[str, Any]]:
    """The CustomResourceDefinition objects of ``scheduler``, in a stable order."""
    return [yaml.safe_load(path.read_text()) for path in sorted(crd_dir(scheduler).glob("*.yaml"))]


def parse_schedulers(value: str | Iterable[str]) -> tuple[str, ...]:
    """``"volcano,scheduler-plugins"`` (or an iterable of names) as a checked tuple, duplicates dropped;
    ValueError naming the unknown entry otherwise."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name not in GANG_SCHEDULERS:
            raise ValueError(
                f"unknown gang scheduler {name!r}: expected a comma-separated list of {', '.join(GANG_SCHEDULERS)}"
            )
        if name not in out:
            out.append(name)
    return tuple(out)
