"""Suspending and resuming a job (``runPolicy.suspend``).

Why its own module: a suspended job keeps its spec and status but no pods, services or PodGroup, and
on resume its clock starts again; both are transitions of conditions with events, as upstream has them.
"""

from __future__ import annotations

from .. import api
from .. import pods as podlib
from ..actions import Action, Decision, DeletePod, DeleteService, Event
from ..conditions import FALSE, TRUE, is_true
from .effects import Effects, decision
from .inputs import JobInput, JobState, PassInput
from .podgroup import delete_pod_group
from .status import full_status, replica_statuses, without_active


def delete_everything(inp: JobInput, reason: str) -> Effects:
    """Delete every pod, then every service of the job (by name), for ``reason``; terminating ones are
    not deleted again."""
    actions: list[Action] = []
    for pod in sorted(inp.pods, key=lambda p: podlib.name(p) or ""):
        if not podlib.is_terminating(pod):
            actions.append(DeletePod(podlib.name(pod) or "", podlib.uid(pod), reason))
    for service in sorted(inp.services, key=lambda s: podlib.name(s) or ""):
        if not podlib.is_terminating(service):
            actions.append(DeleteService(podlib.name(service) or "", podlib.uid(service), reason))
    return Effects(actions=tuple(actions))


def suspend(inp: PassInput, state: JobState, so_far: Effects) -> Decision:
    """A suspended job: every pod, service and the PodGroup go, no replica is active, ``Running`` turns
    False and ``Suspended`` True (with one event). The dynamic workers' and parameter servers' failover
    records are dropped: every pod is removed on purpose, and on resume each replica starts afresh."""
    effects = so_far + delete_everything(inp, api.DELETE_SUSPEND) + delete_pod_group(inp)
    replicas = without_active(replica_statuses(inp))
    message = f"TFJob {inp.name} is suspended."
    if is_true(state.conditions, api.COND_RUNNING):
        state, _ = state.with_condition(inp, api.COND_RUNNING, FALSE, api.REASON_SUSPENDED, message)
    if not is_true(state.conditions, api.COND_SUSPENDED):
        state, _ = state.with_condition(inp, api.COND_SUSPENDED, TRUE, api.REASON_SUSPENDED, message)
        effects = effects + Effects(events=(Event(api.EVENT_NORMAL, api.REASON_SUSPENDED, message),))
    return decision(effects, full_status(inp, state, replicas, {}, inp.recorded_members, {}))


def resume(inp: PassInput, state: JobState) -> tuple[JobState, Effects]:
    """A job that was suspended and no longer is: ``Suspended`` False with an event, and startTime reset
    to now (as upstream, so the active deadline counts from the resume). Unchanged otherwise."""
    if not is_true(state.conditions, api.COND_SUSPENDED):
        return state, Effects()
    message = f"TFJob {inp.name} is resumed."
    state, _ = state.with_condition(inp, api.COND_SUSPENDED, FALSE, api.REASON_RESUMED, message)
    state = JobState(state.conditions, inp.now_str, state.completion_time)
    return state, Effects(events=(Event(api.EVENT_NORMAL, api.REASON_RESUMED, message),))
