"""A dynamic job's parameter servers survive a disruption: the pod is re-created at its name and address.

Why: PS pods sit on the same preemptible nodes as workers and meet the same drains, evictions and node losses.
Upstream counts a disrupted PS as a failed replica: under ``restartPolicy: Never`` the job fails, under
``OnFailure`` it is marked Restarting. A dynamic job's program reconnects to a PS that comes back at the same
address and restores its variables from a checkpoint (docs/dynamic-workers.md §4), so here a *disruption*
(deleted, evicted, preempted, lost with its node: ``pods.disruption``) of a PS is never a failure, whatever
its ``restartPolicy``: the pod is removed if it still stands, a ``PSFailover`` event and the
``tfjob_replica_failovers_total`` metric tell the user, and the upstream pass (``restarts.py``) re-creates
the missing index at once, under the same name, with the same headless service. The workers are not touched.
A PS's *own* failure (an error exit, an OOM kill) is not a disruption and follows upstream's rules.

What must survive a controller restart (which pod's disruption was already counted) is one record per PS
index in ``status.dynamicWorkers.parameterServers``, in the worker records' shape, so a failover is
announced once per pod.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .. import api, tfconfig
from .. import pods as podlib
from ..actions import DeletePod, Event, MetricInc
from ..dynamic import DESCRIPTIONS, OWN_FAILURES, WorkerRecord, vanished_reason
from ..outputs import Outputs
from .inputs import PassInput
from .restarts import exited_fact


@dataclass(frozen=True)
class PSFailovers:
    """What the pass did for the PS type: the uids of the pods it took over from upstream's rules (neither
    restarted nor counted by them) and the records to write."""

    handled: frozenset[str]
    records: dict[int, WorkerRecord]


def applies(inp: PassInput, replica_type: str) -> bool:
    """Whether disruptions of ``replica_type``'s pods are failed over here: the PS of a dynamic job."""
    return inp.dynamic and replica_type == api.PS


def is_failed_over(inp: PassInput, replica_type: str, pod: dict[str, Any]) -> bool:
    """Whether ``pod``'s loss is a failover here, not a failure: a PS of a dynamic job that is disrupted or
    terminating (so the back-off limit does not count it either)."""
    return applies(inp, replica_type) and (podlib.disruption(pod) is not None or podlib.is_terminating(pod))


def fail_over_parameter_servers(inp: PassInput, out: Outputs) -> PSFailovers:
    """Fail over every disrupted PS pod of a dynamic job, appending deletions, events and metrics to ``out``;
    needs ``applies(inp, api.PS)``."""
    handled: set[str] = set()
    records: dict[int, WorkerRecord] = {}
    slots = inp.pod_slots[api.PS]
    services = inp.service_slots[api.PS]
    for index in range(inp.replicas(api.PS)):
        record = inp.ps_records.get(index)
        slot = slots.get(index, [])
        if len(slot) > 1:
            if record is not None:
                records[index] = record
            continue  # duplicates: upstream leaves them alone, and so do we
        pod = slot[0] if slot else None
        new = _step(inp, index, record, pod, bool(services.get(index)), out)
        if pod is not None and new is not None and new.state == api.WORKER_STATE_REPLACING:
            restarted = new.last_reason in OWN_FAILURES  # upstream's restart (note_restarts): its rules count it
            if not restarted and new.pod_uid is not None and new.pod_uid == podlib.uid(pod):
                handled.add(new.pod_uid)
        if new is not None:
            records[index] = new
    return PSFailovers(frozenset(handled), records)


def note_restarts(inp: PassInput, out: Outputs, records: dict[int, WorkerRecord]) -> dict[int, WorkerRecord]:
    """``records`` with a Replacing record (no failover counted) for every PS pod that upstream's rules restart in
    this pass (``out``'s ``Restart`` deletions: its own failure under OnFailure, Always or a retryable exit code).

    Why: the restart deletes the pod and the next pass creates it again; a pass in between finds the pod going, or
    gone with its service standing, which is what a PS deleted by someone looks like, so without a record naming
    the pod the restart would be announced as a ``PSFailover`` (``Deleted``) as well. The record is written before
    the deletion (Decision.status_first), so a process killed in between does not lose it."""
    restarted = {a.uid for a in out.deletions if isinstance(a, DeletePod) and a.reason == api.DELETE_RESTART}
    if not restarted:
        return records
    noted = dict(records)
    for index, slot in inp.pod_slots[api.PS].items():
        if len(slot) != 1 or podlib.uid(slot[0]) not in restarted:
            continue
        pod, old = slot[0], records.get(index)
        noted[index] = WorkerRecord(
            state=api.WORKER_STATE_REPLACING,
            failovers=old.failovers if old is not None else 0,
            last_failover_time=old.last_failover_time if old is not None else None,
            last_reason=podlib.exit_failure_reason(pod),
            pod_uid=podlib.uid(pod),
            exit_code=podlib.exit_code(pod),
        )
    return noted


def _step(
    inp: PassInput, index: int, record: WorkerRecord | None, pod: dict[str, Any] | None, has_service: bool, out: Outputs
) -> WorkerRecord | None:
    """One PS index: its new record (None: nothing to remember). A record stays Replacing until a new pod
    stands in the slot, so a pass whose creation budget ran out announces nothing twice."""
    if pod is None:
        if record is not None and record.state == api.WORKER_STATE_REPLACING:
            return record  # upstream's pass creates the missing index
        if has_service:  # the pod went without our seeing it go: its last known state says why
            return _failover(inp, index, record, vanished_reason(record, inp.departed[api.PS].get(index)), None, out)
        return record
    uid = podlib.uid(pod)
    if record is not None and record.state == api.WORKER_STATE_REPLACING:
        if record.pod_uid == uid:
            if not podlib.is_terminating(pod):
                out.deletions.append(DeletePod(podlib.name(pod) or "", uid, api.DELETE_FAILOVER))
            return record  # this pod's disruption is counted; wait for it to go
        record = replace(record, state=api.WORKER_STATE_REPLACED, pod_uid=None)  # the replacement stands
    if podlib.is_terminating(pod):
        if not has_service:
            return record  # removed by us with its service (suspend): leaving, not disrupted
        return _failover(inp, index, record, podlib.disruption(pod) or api.FAILOVER_DELETED, pod, out)
    disrupted = podlib.disruption(pod)
    if disrupted is None:
        return record  # healthy, or failed by its own exit: upstream's rules
    out.deletions.append(DeletePod(podlib.name(pod) or "", uid, api.DELETE_FAILOVER))
    exited_fact(inp, pod, out)  # an evicted pod's container was killed: its code is reported, as a worker's
    return _failover(inp, index, record, disrupted, pod, out)


def _failover(
    inp: PassInput, index: int, record: WorkerRecord | None, reason: str, pod: dict[str, Any] | None, out: Outputs
) -> WorkerRecord:
    failovers = (record.failovers if record is not None else 0) + 1
    name = tfconfig.general_name(inp.name, api.PS, index)
    out.events.append(
        Event(
            api.EVENT_WARNING,
            api.EV_PS_FAILOVER,
            f"PS {name} (index {index}) {DESCRIPTIONS[reason]} ({reason}): re-creating it at the same address as soon "
            f"as it is gone; the workers keep running (failover {failovers})",
        )
    )
    labels = (("job_namespace", inp.namespace), ("replica_type", api.PS), ("reason", reason))
    out.metrics.append(MetricInc(api.METRIC_REPLICA_FAILOVERS, labels))
    return WorkerRecord(
        state=api.WORKER_STATE_REPLACING,
        failovers=failovers,
        last_failover_time=inp.now_str,
        last_reason=reason,
        pod_uid=podlib.uid(pod) if pod is not None else None,
    )
