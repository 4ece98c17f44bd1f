"""What one replica type's part of a decision produces: its counts and its outputs.

Shared by the per-type features of the decision (controller/tfjob/decision/) and the dynamic-worker
state machine of dynamic.py, which fills them for the Worker type of a dynamic job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import api
from .actions import Action, Event, MetricInc


@dataclass
class Counts:
    """The pods of one type as ``replicaStatuses`` reports them (a snapshot, as upstream)."""

    active: int = 0
    succeeded: int = 0
    failed: int = 0
    permanent_failed: int = 0  # counted failures that no restart will repair

    def to_status(self, selector: str) -> dict[str, Any]:
        """The ``replicaStatuses`` entry: the non-zero counts and ``selector``."""
        out: dict[str, Any] = {}
        if self.active:
            out[api.REPLICA_STATUS_ACTIVE] = self.active
        if self.succeeded:
            out[api.REPLICA_STATUS_SUCCEEDED] = self.succeeded
        if self.failed:
            out[api.REPLICA_STATUS_FAILED] = self.failed
        out[api.REPLICA_STATUS_SELECTOR] = selector
        return out


@dataclass
class Outputs:
    """What one replica type's reconcile produced. If the job finishes in the same pass only the
    scale-down deletions and the ExitedWithCode facts survive; the rest is discarded."""

    scale_down: list[Action] = field(default_factory=list)
    deletions: list[Action] = field(default_factory=list)
    creations: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    metrics: list[MetricInc] = field(default_factory=list)
    facts: list[Event] = field(default_factory=list)  # ExitedWithCode: kept even if the job finishes
    timers: list[float] = field(default_factory=list)  # seconds until a wake-up (dropped if the job finishes)
