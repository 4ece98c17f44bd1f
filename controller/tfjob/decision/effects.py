"""What the features of a pass produce besides the status, and how it all becomes a :class:`Decision`.

Why a value: each feature function returns its own :class:`Effects`; the orchestrator adds them up in
the order the executor contract (actions.py) requires, so no feature appends to another's lists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import api
from ..actions import Action, CreatePodGroup, Decision, DeletePod, DeleteService, Event, MetricInc, UpdatePodGroup
from ..members import Membership


@dataclass(frozen=True)
class Effects:
    """Actions, events, metric increments (each in the order they are applied) and wake-up delays."""

    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    metrics: tuple[MetricInc, ...] = ()
    timers: tuple[float, ...] = ()

    def __add__(self, other: Effects) -> Effects:
        """Both, ``self``'s first in every list."""
        return Effects(
            self.actions + other.actions,
            self.events + other.events,
            self.metrics + other.metrics,
            self.timers + other.timers,
        )

    def without_timers(self) -> Effects:
        """The same without wake-ups (a job that finishes or waits drops the timers of the running job)."""
        return Effects(self.actions, self.events, self.metrics)

    def without_pod_group_writes(self) -> Effects:
        """The same without PodGroup creations and updates (a job that finishes keeps no gang)."""
        kept = tuple(a for a in self.actions if not isinstance(a, CreatePodGroup | UpdatePodGroup))
        return Effects(kept, self.events, self.metrics, self.timers)


def total(parts: Iterable[Effects]) -> Effects:
    """The sum of ``parts`` in order."""
    result = Effects()
    for part in parts:
        result = result + part
    return result


def decision(
    effects: Effects,
    status: dict[str, Any],
    *,
    gang_failed_status: dict[str, Any] | None = None,
    membership: Membership | None = None,
) -> Decision:
    """The Decision of a pass: its effects, the complete new status, the earliest wake-up. The gang's
    fallback status is kept only when the pass writes the PodGroup; ``membership`` is the pass's plan
    of a dynamic job's members, which decides whether the status is written first."""
    writes_pod_group = any(isinstance(a, CreatePodGroup | UpdatePodGroup) for a in effects.actions)
    return Decision(
        actions=effects.actions,
        events=effects.events,
        metrics=effects.metrics,
        status=status,
        requeue_after=min(effects.timers) if effects.timers else None,
        gang_failed_status=gang_failed_status if writes_pod_group else None,
        status_first=only_workers_leave(effects, membership),
    )


def only_workers_leave(effects: Effects, membership: Membership | None) -> bool:
    """Whether this pass, in which workers leave a dynamic job, does nothing but scale-down removals (and
    the PodGroup's new size): then its status (the members that stay) is written first (Decision.status_first).

    A pass that also replaces, restarts, creates or finishes writes its status last, as every other pass:
    written first, it would record (and report) those as done before they are sent, and a failed send would
    count them twice."""
    if membership is None or not membership.leaving:
        return False
    return (
        all(
            isinstance(a, UpdatePodGroup)
            or (isinstance(a, DeletePod | DeleteService) and a.reason == api.DELETE_SCALE_DOWN)
            for a in effects.actions
        )
        and all(e.reason in (api.EV_WORKER_SCALED_DOWN, api.EV_INVALID_POD_DELETION_COST) for e in effects.events)
        and all(m.name == api.METRIC_WORKER_SCALED_DOWN for m in effects.metrics)
    )
