"""The two limits that fail a running job: the back-off limit and the active deadline.

Why together: both are checked at the same point of the pass, both fail the job the same way (every
pod and service deleted whatever cleanPodPolicy says, as upstream), and only their rule differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import api
from .. import pods as podlib
from ..actions import Decision
from ..conditions import TRUE, find, parse_time
from . import psfailover
from .effects import Effects, decision
from .finish import ttl
from .inputs import JobState, PassInput, int_or_none, timer
from .outcome import failed_effects
from .podgroup import delete_pod_group
from .status import full_status, replica_statuses
from .suspend import delete_everything


@dataclass(frozen=True)
class Limit:
    """A limit the job went past: the Failed condition's message and the deletions' reason."""

    message: str
    reason: str


def backoff_exceeded(inp: PassInput) -> bool:
    """Whether the job went past its ``backoffLimit`` (False without one), by upstream's rule (quirk Q5 kept).

    With ``backoffLimit: 0`` a new Failed pod while not all replicas are active fails the job; otherwise the
    sum of container restartCounts of Running pods of OnFailure/Always/ExitCode types must stay below the
    limit. A dynamic job's Worker pods are excluded: workers have their own per-index back-off and never
    fail the job, and neither are a dynamic job's disrupted PS pods (psfailover.py: a failover, not a failure)."""
    limit = int_or_none(inp.run_policy.get(api.RUN_BACKOFF_LIMIT))
    if limit is None:
        return False
    counted = [t for t in inp.types if not (inp.dynamic and t == api.WORKER)]
    counted_pods = [p for t in counted for p in inp.pods_of(t) if not psfailover.is_failed_over(inp, t, p)]
    failed_now = sum(1 for p in counted_pods if podlib.phase(p) == api.POD_FAILED)
    previous_failed = 0
    for t in counted:
        entry = inp.old_replica_statuses.get(t)
        value = int_or_none(entry.get(api.REPLICA_STATUS_FAILED)) if isinstance(entry, dict) else None
        previous_failed += value if value is not None and value > 0 else 0
    active = sum(
        1
        for p in counted_pods
        if podlib.phase(p) not in (api.POD_SUCCEEDED, api.POD_FAILED) and not podlib.is_terminating(p)
    )
    total = sum(inp.replicas(t) for t in counted)
    exceeds = limit == 0 and failed_now > previous_failed and active != total
    restarts = sum(
        podlib.restart_count(p)
        for t in counted
        if inp.restart_policy(t) in (api.RESTART_ON_FAILURE, api.RESTART_ALWAYS, api.RESTART_EXIT_CODE)
        for p in inp.pods_of(t)
        if podlib.phase(p) == api.POD_RUNNING
    )
    past = restarts > 0 if limit == 0 else restarts >= limit
    return exceeds or past


def _backoff_limit(name: str) -> Limit:
    return Limit(f"Job {name} has failed because it has reached the specified backoff limit", api.DELETE_BACKOFF_LIMIT)


def _deadline(name: str) -> Limit:
    return Limit(f"Job {name} has failed because it was active longer than specified deadline", api.DELETE_DEADLINE)


def failed_on(inp: PassInput, state: JobState) -> Limit | None:
    """The limit a finished job failed on, read from its Failed condition (the message this module wrote), or None.

    Why: the pass that fails a job on a limit stores the Failed status before it deletes the pods (a job failed
    must never run again), so a process killed in between leaves a Failed job with pods standing; its successor
    finishes that deletion whatever cleanPodPolicy says, as the failing pass would have."""
    failed = find(state.conditions, api.COND_FAILED)
    if failed is None or failed.get("status") != TRUE or failed.get("reason") != api.REASON_FAILED:
        return None
    for limit in (_backoff_limit(inp.name), _deadline(inp.name)):
        if failed.get("message") == limit.message:
            return limit
    return None


def check_limits(inp: PassInput, state: JobState) -> tuple[Limit | None, Effects]:
    """The limit the job exceeds (back-off first, then the deadline counted from startTime), or None and
    a wake-up at the deadline when there is one."""
    if backoff_exceeded(inp):
        return _backoff_limit(inp.name), Effects()
    deadline = int_or_none(inp.run_policy.get(api.RUN_ACTIVE_DEADLINE_SECONDS))
    start = parse_time(state.start_time)
    if deadline is None or start is None:
        return None, Effects()
    expires = start + deadline
    if inp.now_ts >= expires:
        return _deadline(inp.name), Effects()
    return None, Effects(timers=timer(expires - inp.now_ts))


def fail_on_limit(inp: PassInput, state: JobState, so_far: Effects, limit: Limit) -> Decision:
    """Back-off or deadline failure: every pod and service goes (cleanPodPolicy does not apply, as
    upstream), the PodGroup too, the job is Failed with completionTime set, and TTL starts."""
    effects = so_far.without_timers() + delete_everything(inp, limit.reason) + delete_pod_group(inp)
    state, changed = state.with_condition(inp, api.COND_FAILED, TRUE, api.REASON_FAILED, limit.message)
    if changed:
        effects = effects + failed_effects(inp, api.EVENT_NORMAL, api.REASON_FAILED, limit.message)
    state, expiry = ttl(inp, state, inp.ttl(), False)
    status = full_status(inp, state, replica_statuses(inp), inp.records, inp.recorded_members)
    # The Failed status is stored before the pods go: a process killed in between must not run the job again.
    return decision(effects + expiry, status, records=True)
