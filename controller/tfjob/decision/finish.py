"""A finished job: its pods' cleanup (cleanPodPolicy), its TTL, and the job that fails validation.

Why together: whatever finished the job (its replicas, a limit, an invalid spec), what remains to
decide is the same -- which pods go, when the job itself goes, and that completionTime is set.
"""

from __future__ import annotations

from collections.abc import Collection

from .. import api
from .. import pods as podlib
from ..actions import Action, Decision, DeleteJob, DeletePod, DeleteService, MetricInc
from ..conditions import TRUE, is_finished, is_true
from .effects import Effects, decision
from .inputs import JobInput, JobState, PassInput, old_state, timer
from .outcome import ensure_created, failed_effects
from .podgroup import delete_pod_group
from .status import base_status, full_status, move_active_to_succeeded, replica_statuses
from .suspend import delete_everything


def cleanup(inp: JobInput, already_deleted: Collection[str] = ()) -> Effects:
    """cleanPodPolicy after the job finished: None keeps all, Running deletes Running and Pending pods,
    All deletes every pod; each deleted pod's same-named service goes with it, and so does a service whose
    pod is gone (one whose deletion an earlier pass began: killed between a pod and its service, that pass
    left the service with nothing else to say it must go). Terminating objects and the pods
    ``already_deleted`` by this decision are not deleted again."""
    policy = inp.run_policy.get(api.RUN_CLEAN_POD_POLICY, api.CLEAN_POD_NONE)
    if policy == api.CLEAN_POD_NONE:
        return Effects()
    pod_names = {podlib.name(p) for p in inp.pods}
    goes: set[str] = set()
    actions: list[Action] = []
    for pod in sorted(inp.pods, key=lambda p: podlib.name(p) or ""):
        if policy == api.CLEAN_POD_RUNNING and podlib.phase(pod) not in (api.POD_RUNNING, api.POD_PENDING):
            continue
        pod_name = podlib.name(pod) or ""
        if pod_name in already_deleted:
            continue  # deleted by this pass with its service
        goes.add(pod_name)
        if not podlib.is_terminating(pod):
            actions.append(DeletePod(pod_name, podlib.uid(pod), api.DELETE_CLEANUP))
    for service in sorted(inp.services, key=lambda s: podlib.name(s) or ""):
        name = podlib.name(service) or ""
        if (name in goes or name not in pod_names) and not podlib.is_terminating(service):
            actions.append(DeleteService(name, podlib.uid(service), api.DELETE_CLEANUP))
    return Effects(actions=tuple(actions))


def ttl(inp: JobInput, state: JobState, seconds: int | None, suspended: bool) -> tuple[JobState, Effects]:
    """completionTime set (to now if missing), and the job's deletion once ``seconds`` after it have passed
    (a wake-up until then). Nothing without a TTL, nor while the job is suspended (as upstream)."""
    state, finished_ts = state.finished_at(inp)
    if seconds is None or suspended:
        return state, Effects()
    expire = finished_ts + seconds
    if inp.now_ts >= expire:
        deleted = MetricInc(api.METRIC_JOBS_DELETED, inp.job_labels())
        return state, Effects(actions=(DeleteJob(api.DELETE_TTL),), metrics=(deleted,))
    return state, Effects(timers=timer(expire - inp.now_ts))


def finished(inp: PassInput, state: JobState, so_far: Effects, limit_reason: str | None = None) -> Decision:
    """A job finished before this pass: cleanup, its PodGroup goes, the replica counts carried over
    (still-active ones booked as succeeded after success), completionTime and TTL. ``limit_reason``: the job
    failed on a limit (limits.failed_on), so every pod and service goes, whatever cleanPodPolicy says."""
    gone = delete_everything(inp, limit_reason) if limit_reason is not None else cleanup(inp)
    effects = so_far + gone + delete_pod_group(inp)
    replicas = replica_statuses(inp)
    if is_true(state.conditions, api.COND_SUCCEEDED):
        move_active_to_succeeded(replicas)
    state, expiry = ttl(inp, state, inp.ttl(), inp.suspended)
    status = full_status(inp, state, replicas, inp.records, inp.recorded_members)
    return decision(effects + expiry, status, records=True)  # the terminal status before the cleanup's deletions


def invalid(inp: JobInput, reasons: str) -> Decision:
    """A job that fails validation: ``Created`` and ``Failed`` (TFJobFailedValidation, one Warning event),
    no children created; once finished its PodGroup goes and TTL applies when that field is usable, so an
    invalid job does not linger forever."""
    message = f"TFJob {inp.namespace}/{inp.name} failed validation because {reasons}"
    state, effects = ensure_created(inp, old_state(inp.old_status))
    state, changed = state.with_condition(inp, api.COND_FAILED, TRUE, api.REASON_FAILED_VALIDATION, message)
    if changed:
        effects = effects + failed_effects(inp, api.EVENT_WARNING, api.REASON_FAILED_VALIDATION, message)
    if is_finished(state.conditions):
        effects = effects + delete_pod_group(inp)
        state, expiry = ttl(inp, state, inp.ttl(), inp.run_policy.get(api.RUN_SUSPEND) is True)
        effects = effects + expiry
    return decision(effects, base_status(inp, state), records=True)
