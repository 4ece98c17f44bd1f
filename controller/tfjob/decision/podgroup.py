"""Keeping the job's PodGroup in step with the job (gang scheduling; the PodGroup rules are gang.py's).

Why here and not in gang.py: gang.py computes what the group should say; this module decides when the
pass writes it, when the job's pods wait for Volcano, and when the group goes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import api
from .. import gang as ganglib
from .. import pods as podlib
from ..actions import CreatePodGroup, DeletePodGroup, Event, UpdatePodGroup
from ..conditions import is_true
from .effects import Effects
from .inputs import JobInput, JobState, PassInput
from .status import full_status, replica_statuses


@dataclass(frozen=True)
class GangSync:
    """What syncing the PodGroup decided: its writes (and the foreign group's warning), whether the job's
    pods must wait, and the status to write instead should the API refuse the PodGroup write."""

    effects: Effects
    blocks_pods: bool
    failed_status: dict[str, Any] | None


def delete_pod_group(inp: JobInput) -> Effects:
    """A finished or suspended job's PodGroup goes; once (not when already terminating), not on every
    pass as upstream."""
    group = inp.pod_group
    if group is None or podlib.is_terminating(group):
        return Effects()
    return Effects(actions=(DeletePodGroup(podlib.name(group) or "", podlib.uid(group)),))


def sync_pod_group(inp: PassInput, state: JobState, started: bool) -> GangSync:
    """Create or update the job's PodGroup; ``blocks_pods`` while its pods must wait (Volcano has not
    admitted it). Needs gang scheduling on. A dynamic job that runs never waits: the group was admitted
    when it started, and a replacement or a scaled-up worker is scheduled on its own (gang.py)."""
    gang = inp.gang
    assert gang is not None, "sync_pod_group needs gang scheduling"
    existing = inp.pod_group
    if existing is None and inp.foreign_pod_group is not None:
        # Upstream's Create fails AlreadyExists and it logs; say it where the user looks instead.
        foreign = f"PodGroup {inp.namespace}/{inp.name} exists and is not controlled by TFJob {inp.name}; "
        message = foreign + (
            "the job's pods wait for it to be deleted" if gang.volcano else "the job's pods join it as it is"
        )
        warning = Event(api.EVENT_WARNING, api.EV_FAILED_CREATE_POD_GROUP, message)
        return GangSync(Effects(events=(warning,)), ganglib.blocks_pods(gang, None), None)
    # "Has run" must survive a Restarting episode (a PS/Chief restart replaces the Running condition)
    # and a controller restart, so it is read from the stored conditions and the live pods: Restarting
    # with pods still there is a running gang; after a suspension only terminating ones are left.
    running = is_true(state.conditions, api.COND_RUNNING) or (
        is_true(state.conditions, api.COND_RESTARTING) and any(not podlib.is_terminating(p) for p in inp.pods)
    )
    spec = ganglib.desired_spec(
        gang, inp.job, existing, dynamic=inp.dynamic, running=running, priority_classes=inp.priority_classes
    )
    effects = Effects()
    if existing is None:
        body = ganglib.new_pod_group(gang, inp.job, podlib.owner_reference(inp.job), spec)
        effects = Effects(actions=(CreatePodGroup(body),))
    elif not podlib.is_terminating(existing):
        updated = ganglib.updated_pod_group(existing, spec)
        if updated is not None:
            effects = Effects(actions=(UpdatePodGroup(updated),))
    blocks = False if inp.dynamic and running else ganglib.blocks_pods(gang, existing)
    return GangSync(effects, blocks, waiting_status(inp, state, started))


def waiting_status(inp: PassInput, state: JobState, started: bool) -> dict[str, Any]:
    """The status of a pass whose pods wait for the gang: frozen but for ``lastReconcileTime``
    (upstream's only writer of it); waiting does not start the job's clock (no ``startTime`` unless
    the job had ``started`` before, so no active deadline either)."""
    clock = state if started else JobState(state.conditions, None, state.completion_time)
    status = full_status(inp, clock, replica_statuses(inp), inp.records, inp.recorded_members)
    status[api.STATUS_LAST_RECONCILE_TIME] = inp.now_str
    return status
