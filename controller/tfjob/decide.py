"""The reconcile decision for one TFJob: (job, its pods and services, now) -> a :class:`Decision`.

Why a pure function: every behaviour of the controller -- upstream's lifecycle and the dynamic
workers this project exists for -- is decided here without I/O, so it is table-tested exhaustively
and the executor that applies the result stays thin (see actions.py for its contract). This module
is the order of the pass; each feature is a module of controller/tfjob/decision/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from . import api
from .actions import CreatePod, CreateService, Decision, DeletePod
from .conditions import is_finished, is_true
from .decision import finish, limits, podgroup, psfailover, suspend
from .decision.config import DecideConfig
from .decision.effects import Effects, decision
from .decision.inputs import JobState, PassInput, job_input, old_state, pass_input, timer
from .decision.outcome import ensure_created, update_conditions, worker0_completed
from .decision.replicas import create_pod, creation_budget, wanted_indices
from .decision.restarts import exited_fact, reconcile_replicas
from .decision.scaledown import plan_members, scale_down
from .decision.services import reconcile_services
from .decision.status import full_status, move_active_to_succeeded, replica_statuses
from .defaults import defaulted
from .dynamic import DynamicWorkers, WorkerRecord
from .jsoncopy import json_copy
from .outputs import Counts, Outputs
from .validation import summarize, validate, validate_pod_count

__all__ = ["DecideConfig", "decide", "worker0_completed"]

_DEFAULT_CONFIG = DecideConfig()


def decide(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    services: list[dict[str, Any]],
    now: datetime,
    config: DecideConfig = _DEFAULT_CONFIG,
    *,
    pod_group: dict[str, Any] | None = None,
    priority_classes: Mapping[str, int] | None = None,
    departed: list[dict[str, Any]] | None = None,
) -> Decision:
    """What to do for ``job`` at ``now`` (timezone-aware UTC), given the pods and services it controls;
    deterministic, idempotent on its own converged result, and never raises on any input dict.

    ``job`` is the TFJob as stored (undefaulted); ``pods`` / ``services`` the objects whose controlling
    ownerReference is the job (re-checked here by uid; objects without our labels or with an unparsable
    index are ignored). Same inputs, same Decision (types in a fixed order, indices sorted, TF_CONFIG
    byte-exact, service ports in declaration order). Deciding again on the converged result of a decision
    (its actions applied, its status written) yields no actions, events or metrics and the same status:
    events and metrics are tied to status transitions, and terminating objects are never deleted again.
    A job that does not validate is failed with ``TFJobFailedValidation`` and nothing is created;
    malformed children and status entries are ignored. A job managed by another controller (v1.9
    ``managedBy``) gets no actions and its status unchanged.

    With gang scheduling on (``config.gang_scheduler``), ``pod_group`` is the job's PodGroup as cached
    (None if there is none; one not controlled by the job is left alone, with a Warning) and
    ``priority_classes`` the PriorityClass values by name (for the order of ``minResources``); both are
    ignored otherwise.

    ``departed`` are pods of the job whose deletion was seen, as last seen (the final object of a watch's
    DELETED event), the latest of each (replica type, index); of two for one slot, the later in the list
    counts. They are never acted on: a pod that goes without any other event (events coalesced, a relist)
    leaves only this trace, and its failover is counted for the disruption that trace shows
    (``dynamic.vanished_reason``) rather than as a plain deletion.
    """
    if not isinstance(job, dict):
        return Decision((), (), (), {}, None)
    raw_status = job.get("status")
    old_status: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    if _managed_externally(job):
        return Decision((), (), (), json_copy(old_status), None)
    errors = validate(job) or validate_pod_count(job, config.max_pods_per_job)
    if errors:
        return finish.invalid(job_input(job, old_status, [], [], now, config, pod_group), summarize(errors))
    inp = pass_input(defaulted(job), old_status, pods, services, now, config, pod_group, priority_classes, departed)
    return _decide_valid(inp)


def _managed_externally(job: dict[str, Any]) -> bool:
    spec = job.get("spec")
    run_policy = spec.get(api.SPEC_RUN_POLICY) if isinstance(spec, dict) else None
    return isinstance(run_policy, dict) and run_policy.get(api.RUN_MANAGED_BY) == api.MANAGED_BY_MULTIKUEUE


def _decide_valid(inp: PassInput) -> Decision:
    """The pass over a valid job, in upstream's order (ReconcileJobs, with the fixes recorded in
    docs/tfjob-compatibility.md): ``Created`` -> finished -> suspended -> resume and startTime ->
    back-off limit and deadline -> the PodGroup -> the replicas (:func:`_reconcile`)."""
    state, so_far = ensure_created(inp, old_state(inp.old_status))
    if is_finished(state.conditions):
        failed_on = limits.failed_on(inp, state)
        return finish.finished(inp, state, so_far, failed_on.reason if failed_on is not None else None)
    if inp.suspended:
        return suspend.suspend(inp, state, so_far)
    state, resumed = suspend.resume(inp, state)
    so_far = so_far + resumed
    started = state.start_time is not None
    if not started:
        state = replace(state, start_time=inp.now_str)
    limit, deadline = limits.check_limits(inp, state)
    if limit is not None:
        return limits.fail_on_limit(inp, state, so_far, limit)
    so_far = so_far + deadline
    gang_failed_status: dict[str, Any] | None = None
    if inp.gang is not None:
        sync = podgroup.sync_pod_group(inp, state, started)
        so_far = so_far + sync.effects
        if sync.blocks_pods:
            # No pods, no replica counts, no condition change; waiting does not start the job's clock,
            # so a job that had not started keeps no deadline timer either.
            waiting = so_far if started else so_far.without_timers()
            status = podgroup.waiting_status(inp, state, started)
            return decision(waiting, status, gang_failed_status=sync.failed_status)
        gang_failed_status = sync.failed_status
    result = _reconcile(inp, state, so_far, gang_failed_status)
    if result.status_first and any(isinstance(a, CreatePod | CreateService) for a in result.actions):
        # A pass that records a failover stores the record before it touches a pod (Decision.status_first),
        # and so creates nothing: a record written first that said "replaced" before the replacement was sent
        # would make a process killed in between count the failover again. The same pass with no creation
        # budget; its status write wakes the job, whose next pass creates.
        result = _reconcile(inp, state, so_far, gang_failed_status, hold_creations=True)
    return result


def _reconcile(
    inp: PassInput,
    state: JobState,
    so_far: Effects,
    gang_failed_status: dict[str, Any] | None,
    *,
    hold_creations: bool = False,
) -> Decision:
    """The normal pass: per replica type scale-down, then pods (upstream's restarts, or the dynamic
    Workers' state machine), then services, within one creation budget (none when ``hold_creations``);
    then the conditions."""
    membership, planned = plan_members(inp) if inp.dynamic_workers() else (None, Effects())
    members = membership.members if membership is not None else inp.recorded_members
    budget = 0 if hold_creations else creation_budget(inp)
    counts: dict[str, Counts] = {}
    outputs: list[Outputs] = []
    new_records: dict[int, WorkerRecord] = {}
    ps_records: dict[int, WorkerRecord] | None = None  # None: no PS failover this pass, the old records stay
    failure: str | None = None
    spent = 0
    for replica_type in inp.types:
        out = Outputs()
        indices = wanted_indices(inp, membership, replica_type)
        scale_down(inp, replica_type, indices, out)
        limit = budget - spent
        if inp.dynamic and replica_type == api.WORKER:
            machine = _dynamic_workers(inp, out, limit, new_records)
            counts[replica_type] = machine.reconcile(
                indices,
                inp.pod_slots[api.WORKER],
                inp.service_slots[api.WORKER],
                inp.restart_policy(api.WORKER),
                out,
            )
        else:
            handled: frozenset[str] = frozenset()
            if psfailover.applies(inp, replica_type):
                ps = psfailover.fail_over_parameter_servers(inp, out)
                handled, ps_records = ps.handled, ps.records
            result = reconcile_replicas(inp, replica_type, out, limit, handled)
            if psfailover.applies(inp, replica_type):
                ps_records = psfailover.note_restarts(
                    inp, out, ps_records if ps_records is not None else inp.ps_records
                )
            counts[replica_type] = result.counts
            failure = failure if failure is not None else result.failure
        reconcile_services(inp, replica_type, indices, new_records, out, limit)
        spent += len(out.creations)
        outputs.append(out)

    worker_indices = wanted_indices(inp, membership, api.WORKER) if api.WORKER in inp.specs else ()
    state, outcome, finished = update_conditions(inp, state, counts, failure, worker_indices)
    replicas = replica_statuses(inp, counts)
    scale_downs = tuple(a for out in outputs for a in out.scale_down)
    if finished:
        # A job that finishes in this pass restarts, fails over and creates nothing; its pods are handled
        # by cleanPodPolicy in this same pass, so the next pass has nothing to do. Scale-down deletions
        # stand: they follow the spec, not the job's state.
        effects = (so_far + planned).without_timers().without_pod_group_writes()
        effects = effects + Effects(actions=scale_downs) + podgroup.delete_pod_group(inp)
        effects = effects + Effects(events=tuple(e for out in outputs for e in out.facts)) + outcome
        deleted = {a.name for a in effects.actions if isinstance(a, DeletePod)}
        effects = effects + finish.cleanup(inp, deleted)
        if is_true(state.conditions, api.COND_SUCCEEDED):
            move_active_to_succeeded(replicas)
        state, expiry = finish.ttl(inp, state, inp.ttl(), False)
        status = full_status(inp, state, replicas, inp.records, members)
        return decision(
            effects + expiry, status, gang_failed_status=gang_failed_status, membership=membership, records=True
        )
    replica_effects = Effects(
        actions=scale_downs
        + tuple(a for out in outputs for a in out.deletions)
        + tuple(a for out in outputs for a in out.creations),
        events=tuple(e for out in outputs for e in (*out.events, *out.facts)) + outcome.events,
        metrics=outcome.metrics + tuple(m for out in outputs for m in out.metrics),
        timers=tuple(t for out in outputs for t in out.timers),
    )
    status = full_status(inp, state, replicas, new_records, members, ps_records)
    # A dynamic job's restarted PS is recorded (psfailover.note_restarts) before it is deleted.
    restarts = inp.dynamic and any(
        isinstance(a, DeletePod) and a.reason == api.DELETE_RESTART for out in outputs for a in out.deletions
    )
    return decision(
        so_far + planned + replica_effects,
        status,
        gang_failed_status=gang_failed_status,
        membership=membership,
        records=restarts,
    )


def _dynamic_workers(inp: PassInput, out: Outputs, limit: int, new_records: dict[int, WorkerRecord]) -> DynamicWorkers:
    """The Worker state machine of this pass (dynamic.py), creating into ``out`` within ``limit`` and
    writing the records it keeps into ``new_records``."""
    return DynamicWorkers(
        job_name=inp.name,
        namespace=inp.namespace,
        records=inp.records,
        now_ts=inp.now_ts,
        now_str=inp.now_str,
        timings=inp.config,
        create=lambda index, into: create_pod(inp, api.WORKER, index, into, limit),
        timer=lambda seconds: out.timers.extend(timer(seconds)),
        exited_fact=lambda pod, into: exited_fact(inp, pod, into),
        new_records=new_records,
        departed=inp.departed[api.WORKER],
    )
