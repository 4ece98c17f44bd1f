"""The job-level conditions a pass sets: ``Created``, and ``Running`` / ``Restarting`` / ``Succeeded`` /
``Failed`` from the replicas' counts under the success policy.

Why apart from conditions.py: that module is the condition list's algebra (how one condition is set);
this one is upstream's UpdateJobStatus, which decides which condition the replicas call for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import api
from .. import pods as podlib
from ..actions import Event, MetricInc
from ..conditions import TRUE, find, is_finished
from ..outputs import Counts
from .effects import Effects
from .inputs import JobInput, JobState, PassInput


def ensure_created(inp: JobInput, state: JobState) -> tuple[JobState, Effects]:
    """The ``Created`` condition on a job that lacks it, counted once in the jobs-created metric."""
    if find(state.conditions, api.COND_CREATED) is not None:
        return state, Effects()
    message = f"TFJob {inp.name} is created."
    state, changed = state.with_condition(inp, api.COND_CREATED, TRUE, api.REASON_CREATED, message)
    return state, Effects(metrics=(MetricInc(api.METRIC_JOBS_CREATED, inp.job_labels()),) if changed else ())


def failed_effects(inp: JobInput, event_type: str, reason: str, message: str) -> Effects:
    """The event and the jobs-failed metric of a job's transition to ``Failed``."""
    return Effects(
        events=(Event(event_type, reason, message),),
        metrics=(MetricInc(api.METRIC_JOBS_FAILED, inp.job_labels()),),
    )


def worker0_completed(job: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Upstream's IsWorker0Completed on a defaulted job: slot 0 of the Worker type holds exactly
    one pod, Succeeded, whose ``tensorflow`` container exited 0. True if there is no Worker spec."""
    if api.WORKER not in job["spec"][api.SPEC_REPLICA_SPECS]:
        return True
    slot0 = [p for p in pods if podlib.replica_type_label(p) == api.WORKER.lower() and podlib.replica_index(p) == 0]
    if len(slot0) != 1:
        return False
    pod = slot0[0]
    return podlib.phase(pod) == api.POD_SUCCEEDED and podlib.exit_code_or_missing(pod) == 0


def update_conditions(
    inp: PassInput,
    state: JobState,
    counts: Mapping[str, Counts],
    pod_failure: str | None,
    worker_indices: Sequence[int],
) -> tuple[JobState, Effects, bool]:
    """Set Running/Restarting/Succeeded/Failed from this pass's ``counts``; the new state, the terminal
    transition's event and metric, and whether the job is now finished.

    ``pod_failure`` is the message of a non-retryable ExitCode failure, which fails the job outright;
    ``worker_indices`` the Worker indices the job wants. Upstream's rules (UpdateJobStatus) with fixes:
    the first terminal outcome in type order wins and freezes (Q1); a type fails when it has failures no
    restart will repair, instead of "unless a Restarting condition exists" (Q3); dynamic Workers never
    fail the job.
    """
    if pod_failure is not None:
        state, changed = state.with_condition(inp, api.COND_FAILED, TRUE, api.REASON_FAILED, pod_failure)
        effects = failed_effects(inp, api.EVENT_WARNING, api.REASON_FAILED, pod_failure) if changed else Effects()
        return state, effects, is_finished(state.conditions)

    success_policy = inp.job["spec"].get(api.SPEC_SUCCESS_POLICY, api.SUCCESS_DEFAULT)
    running = restarting = False
    terminal: tuple[str, str] | None = None  # (condition, message)
    for replica_type in inp.types:
        c = counts[replica_type]
        replicas = inp.replicas(replica_type)
        if inp.has_chief and replica_type in api.CHIEF_TYPES:
            if c.active > 0:
                running = True
            if replicas - c.succeeded == 0 and terminal is None:
                terminal = (api.COND_SUCCEEDED, "")
        elif not inp.has_chief and replica_type == api.WORKER:
            if workers_succeeded(inp, c, worker_indices, success_policy):
                if terminal is None:
                    terminal = (api.COND_SUCCEEDED, "")
            elif c.active > 0:
                running = True
        if c.failed > 0 and not (inp.dynamic and replica_type == api.WORKER):
            if c.permanent_failed > 0:
                if terminal is None:
                    message = (
                        f"TFJob {inp.namespace}/{inp.name} has failed because "
                        f"{c.failed} {replica_type} replica(s) failed."
                    )
                    terminal = (api.COND_FAILED, message)
            else:
                restarting = True

    running_message = f"TFJob {inp.namespace}/{inp.name} is running."
    if terminal is None:
        if restarting:
            failing = next(t for t in inp.types if counts[t].failed > 0 and not (inp.dynamic and t == api.WORKER))
            message = f"job {inp.name} is restarting because {failing} replica(s) failed."
            state, _ = state.with_condition(inp, api.COND_RESTARTING, TRUE, api.REASON_RESTARTING, message)
        elif running:
            state, _ = state.with_condition(inp, api.COND_RUNNING, TRUE, api.REASON_RUNNING, running_message)
        return state, Effects(), False
    if running:
        # Upstream sets Running before the terminal condition in the same pass, which leaves
        # a Running=False entry behind (pinned by upstream's status tests).
        state, _ = state.with_condition(inp, api.COND_RUNNING, TRUE, api.REASON_RUNNING, running_message)
    cond_type, message = terminal
    effects = Effects()
    if cond_type == api.COND_SUCCEEDED:
        message = f"TFJob {inp.namespace}/{inp.name} successfully completed."
        state, changed = state.with_condition(inp, api.COND_SUCCEEDED, TRUE, api.REASON_SUCCEEDED, message)
        if changed:
            effects = Effects(
                events=(Event(api.EVENT_NORMAL, api.REASON_SUCCEEDED, message),),
                metrics=(MetricInc(api.METRIC_JOBS_SUCCESSFUL, inp.job_labels()),),
            )
    else:
        state, changed = state.with_condition(inp, api.COND_FAILED, TRUE, api.REASON_FAILED, message)
        if changed:
            effects = failed_effects(inp, api.EVENT_NORMAL, api.REASON_FAILED, message)
    return state, effects, is_finished(state.conditions)


def workers_succeeded(inp: PassInput, c: Counts, worker_indices: Sequence[int], success_policy: str) -> bool:
    """Whether the Workers count as succeeded (a job without Chief/Master): all of them, or worker 0
    under the default success policy. A dynamic job does not wait for permanently failed workers, does
    not count scaled-down ones, and needs one success (replicas 0 is "paused", not done)."""
    replicas = inp.replicas(api.WORKER)
    worker0 = (
        success_policy != api.SUCCESS_ALL_WORKERS
        and 0 in worker_indices  # a dynamic job may have removed worker 0
        and worker0_completed(inp.job, inp.pods_of(api.WORKER))
    )
    if not inp.dynamic:
        return replicas - c.succeeded == 0 or worker0
    if c.succeeded == 0:
        return False
    return replicas - c.succeeded - c.permanent_failed <= 0 or worker0
