"""The pods of one replica type with upstream's semantics: create missing indices, restart failed pods
as the restart policy allows (ExitCode: by exit code), and count them for ``replicaStatuses``.

Why here: every type of a static job, and the non-Worker types of a dynamic one, follow upstream's
rules exactly; the dynamic Workers have their own state machine (dynamic.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .. import api
from .. import pods as podlib
from ..actions import DeletePod, Event, MetricInc
from ..outputs import Counts, Outputs
from .inputs import PassInput
from .replicas import create_pod


@dataclass(frozen=True)
class ReplicaResult:
    """The counts of one type's pods, and the message of a failure that fails the job (a non-retryable
    exit code under restartPolicy ExitCode), if any."""

    counts: Counts
    failure: str | None


def exited_fact(inp: PassInput, pod: dict[str, Any], out: Outputs) -> None:
    """Append the ``ExitedWithCode`` event of a pod whose ``tensorflow`` container has an exit code to
    ``out.facts`` (kept even when the job finishes in this pass)."""
    code = podlib.exit_code(pod)
    if code is not None:
        message = f"Pod: {inp.namespace}.{podlib.name(pod)} exited with code {code}"
        out.facts.append(Event(api.EVENT_NORMAL, api.EV_EXITED_WITH_CODE, message))


def restartable(inp: PassInput, replica_type: str, pod: dict[str, Any]) -> bool:
    """Whether a failed (or terminating) pod of this type will come back by itself or by us."""
    policy = inp.restart_policy(replica_type)
    if policy in (api.RESTART_ALWAYS, api.RESTART_ON_FAILURE):
        return True
    if policy == api.RESTART_EXIT_CODE:
        if podlib.phase(pod) != api.POD_FAILED:
            return True  # a terminating pod is recreated; its code is not a verdict
        return podlib.is_retryable_exit_code(podlib.exit_code_or_missing(pod))
    return False


def reconcile_replicas(
    inp: PassInput, replica_type: str, out: Outputs, limit: int, handled: frozenset[str] = frozenset()
) -> ReplicaResult:
    """One type's pods, upstream's way, appending to ``out`` (creations up to ``limit`` in ``out``):
    create missing indices, restart failed pods as the restart policy allows, fail the job on a
    non-retryable exit code, count the rest. Pods whose uid is in ``handled`` were failed over elsewhere
    (psfailover.py): neither restarted nor counted here."""
    replicas = inp.replicas(replica_type)
    policy = inp.restart_policy(replica_type)
    slots = inp.pod_slots[replica_type]
    services = inp.service_slots[replica_type]
    failure: str | None = None
    counts = Counts()
    for index in range(replicas):
        if not slots.get(index) and not create_pod(inp, replica_type, index, out, limit):
            break
    for index in sorted(slots):
        if len(slots[index]) != 1:
            continue  # upstream: "too many pods" for one index -> neither counted nor touched
        pod = slots[index][0]
        if podlib.uid(pod) in handled:
            continue
        in_range = index < replicas
        current_phase = podlib.phase(pod)
        terminating = podlib.is_terminating(pod)
        if in_range and terminating and not services.get(index):
            # Removed by us together with its service (suspend): it is leaving, not failing.
            continue
        if current_phase == api.POD_FAILED and not terminating and in_range:
            code = podlib.exit_code_or_missing(pod)
            if policy == api.RESTART_EXIT_CODE and not podlib.is_retryable_exit_code(code):
                if failure is None:
                    failure = f'job "{inp.name}" is failing because "{replica_type}" replica(s) failed.'
            elif restartable(inp, replica_type, pod):
                message = f"job {inp.name} is restarting because {replica_type} replica(s) failed."
                out.deletions.append(DeletePod(podlib.name(pod) or "", podlib.uid(pod), api.DELETE_RESTART))
                out.events.append(Event(api.EVENT_WARNING, api.REASON_RESTARTING, message))
                out.metrics.append(MetricInc(api.METRIC_JOBS_RESTARTED, inp.job_labels()))
            # Under restartPolicy Never this failure finishes the job in this very pass, so the fact is
            # reported exactly once; a restarted or job-failing pod reports it as well.
            exited_fact(inp, pod, out)
        # Counting, as upstream: a snapshot of the pods that exist now. A terminating Running pod
        # counts as failed (upstream's shared job library does so; kept for non-dynamic types); an
        # out-of-range pod is being deleted by this very pass, so it counts as terminating now rather
        # than one pass later (which keeps the decision idempotent).
        leaving = terminating or not in_range
        if current_phase == api.POD_RUNNING and not leaving:
            counts.active += 1
        elif current_phase == api.POD_SUCCEEDED:
            counts.succeeded += 1
        elif current_phase == api.POD_FAILED or current_phase == api.POD_RUNNING:
            counts.failed += 1
            if not in_range or not restartable(inp, replica_type, pod):
                counts.permanent_failed += 1
    return ReplicaResult(counts, failure)
