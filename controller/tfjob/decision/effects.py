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
    records: bool = False,
) -> Decision:
    """The Decision of a pass: its effects, the complete new status, the earliest wake-up. The gang's
    fallback status is kept only when the pass writes the PodGroup; ``membership`` (the pass's plan of a
    dynamic job's members) and ``records`` (the pass's status is a record its pod writes act on: it finishes
    the job, or records a dynamic job's PS restart) decide, with the failovers the effects record, whether the
    status is written first (Decision.status_first)."""
    writes_pod_group = any(isinstance(a, CreatePodGroup | UpdatePodGroup) for a in effects.actions)
    return Decision(
        actions=effects.actions,
        events=effects.events,
        metrics=effects.metrics,
        status=status,
        requeue_after=min(effects.timers) if effects.timers else None,
        gang_failed_status=gang_failed_status if writes_pod_group else None,
        status_first=records or records_failover(effects) or only_workers_leave(effects, membership),
    )


FAILOVER_METRICS = frozenset({api.METRIC_WORKER_FAILOVERS, api.METRIC_REPLICA_FAILOVERS})


def records_failover(effects: Effects | Decision) -> bool:
    """Whether this pass (its effects, or the decision they became) records a failover (of a worker or a PS of a
    dynamic job). confirm.py reads the caches again before such a pass. Its status, which holds the
    failover record (the pod it is about, why, the counts that set the back-off), is then written first.

    Written after the pass's pod writes, a process killed between them would leave its successor only the pods to
    go by, and they no longer say it: a failed pod just deleted looks deleted by someone (the cause, the exit code
    and the failure streak lost), a vanished pod just re-created looks like a pod that never went (the failover
    never counted). Such a pass creates nothing (decide holds its creations for the next pass), so the record
    written first never claims a replacement that was not sent."""
    return any(m.name in FAILOVER_METRICS for m in effects.metrics)


def only_workers_leave(effects: Effects, membership: Membership | None) -> bool:
    """Whether this pass, in which workers leave a dynamic job, does nothing but scale-down removals (and
    the PodGroup's new size): then its status (the members that stay) is written first (Decision.status_first).

    A pass that also creates (a replacement, a fresh worker) writes its status last unless it records a failover
    or finishes the job (:func:`records_failover`; decide then holds its creations): written first, it would
    record (and report) a replacement as done before it is sent, and a failed send would count it twice."""
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
