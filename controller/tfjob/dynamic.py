"""Dynamic workers (``spec.enableDynamicWorker: true``): the state machine of the Worker type.

A dynamic job keeps training while its workers come and go, so a worker's pod is never a reason to
fail the job: each worker index is an independent slot whose pod is replaced when it is disrupted
or fails retryably. What must survive a controller restart (which index is being replaced, how
often it failed over, until when it backs off) is kept in ``status.dynamicWorkers.workers`` as one
:class:`WorkerRecord` per index that has something to remember; the rest is read from the pods.

The transitions of one index are a table on :class:`DynamicWorkers`; the back-off between failovers of
one index is a separate policy (:func:`next_streak`, :func:`failover_delay`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from . import api, tfconfig
from . import pods as podlib
from .actions import DeletePod, Event, MetricInc
from .conditions import format_epoch, parse_time
from .members import summary
from .outputs import Counts, Outputs


class FailoverTimings(Protocol):
    """The back-off settings (DecideConfig has them; tests may shrink them)."""

    @property
    def failover_backoff_base(self) -> float:
        """Seconds the second consecutive own failure of an index waits (doubling after)."""

    @property
    def failover_backoff_cap(self) -> float:
        """The longest back-off, in seconds."""

    @property
    def failover_reset_after(self) -> float:
        """Seconds of running after which an index's failover history is forgotten."""


# --- the state persisted in status.dynamicWorkers ------------------------------------------------------
WORKER_STATES = (api.WORKER_STATE_REPLACING, api.WORKER_STATE_REPLACED, api.WORKER_STATE_FAILED)
# The failover reasons that are the worker's own doing (its process exited or was OOM-killed): the only
# ones that back off. Every other reason is a disruption (deleted, evicted, preempted, lost with its
# node), which a ReplicaSet or a StatefulSet would replace at once, however often it happens.
OWN_FAILURES = frozenset({api.FAILOVER_OOM_KILLED, api.FAILOVER_ERROR})


@dataclass(frozen=True)
class WorkerRecord:
    """What we remember about one worker index (only indices with something to remember).

    ``state``: Replacing (the pod is going or gone; the replacement is created once it is gone, and
    not before ``retry_after`` when a repeated own failure backs off),
    Replaced (the replacement exists; the record lives on until it has run ``reset_after``),
    Failed (failed by its own exit, not retried; the failed pod is kept). ``failovers`` counts every
    failover of the current streak, ``failures`` those that were the worker's own failures (they
    alone set the back-off). ``pod_uid`` is the uid of the pod the record is about (the
    failed/disrupted one), so a stale cache never counts the same failure twice.
    """

    state: str
    failovers: int = 0
    failures: int = 0
    last_failover_time: str | None = None
    last_reason: str | None = None
    retry_after: str | None = None
    pod_uid: str | None = None
    exit_code: int | None = None

    def to_status(self) -> dict[str, Any]:
        """The record as ``status.dynamicWorkers.workers[i]`` stores it (unset fields left out)."""
        out: dict[str, Any] = {api.WORKER_STATE: self.state, api.WORKER_FAILOVERS: self.failovers}
        if self.failures:
            out[api.WORKER_FAILURES] = self.failures
        for key, value in (
            (api.WORKER_LAST_FAILOVER_TIME, self.last_failover_time),
            (api.WORKER_LAST_REASON, self.last_reason),
            (api.WORKER_RETRY_AFTER, self.retry_after),
            (api.WORKER_POD_UID, self.pod_uid),
            (api.WORKER_EXIT_CODE, self.exit_code),
        ):
            if value is not None:
                out[key] = value
        return out

    @staticmethod
    def from_status(raw: Any) -> WorkerRecord | None:
        """The record read back from the status, or None when ``raw`` is not a record with a known state."""
        if not isinstance(raw, dict) or raw.get(api.WORKER_STATE) not in WORKER_STATES:
            return None

        def text(key: str) -> str | None:
            value = raw.get(key)
            return value if isinstance(value, str) else None

        def count(key: str) -> int:
            value = raw.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

        code = raw.get(api.WORKER_EXIT_CODE)
        return WorkerRecord(
            state=raw[api.WORKER_STATE],
            failovers=count(api.WORKER_FAILOVERS),
            failures=count(api.WORKER_FAILURES),
            last_failover_time=text(api.WORKER_LAST_FAILOVER_TIME),
            last_reason=text(api.WORKER_LAST_REASON),
            retry_after=text(api.WORKER_RETRY_AFTER),
            pod_uid=text(api.WORKER_POD_UID),
            exit_code=code if isinstance(code, int) and not isinstance(code, bool) else None,
        )


def parse_worker_records(status: Any, key: str = api.STATUS_WORKERS) -> dict[int, WorkerRecord]:
    """The records of ``status.dynamicWorkers.workers`` (``key``: ``parameterServers`` for the PS records),
    malformed entries dropped."""
    dynamic = status.get(api.STATUS_DYNAMIC_WORKERS) if isinstance(status, dict) else None
    workers = dynamic.get(key) if isinstance(dynamic, dict) else None
    records: dict[int, WorkerRecord] = {}
    if not isinstance(workers, dict):
        return records
    for key, raw in workers.items():
        index = podlib.parse_index(key)
        record = WorkerRecord.from_status(raw)
        if index is not None and record is not None:
            records[index] = record
    return records


def dynamic_status(
    records: dict[int, WorkerRecord],
    members: Sequence[int] | None = None,
    ps_records: dict[int, WorkerRecord] | None = None,
) -> dict[str, Any]:
    """``status.dynamicWorkers``: the members (members.py; with their summary for kubectl) when known,
    the workers' records, and the parameter servers' records when there are any."""
    out: dict[str, Any] = {}
    if members is not None:
        out[api.STATUS_MEMBERS] = list(members)
        out[api.STATUS_MEMBERS_SUMMARY] = summary(members)
    out[api.STATUS_WORKERS] = {str(i): records[i].to_status() for i in sorted(records)}
    if ps_records:
        out[api.STATUS_PARAMETER_SERVERS] = {str(i): ps_records[i].to_status() for i in sorted(ps_records)}
    return out


# --- the back-off policy: how long a failed-over index waits for its replacement -----------------------
def next_streak(
    record: WorkerRecord | None, pod: dict[str, Any] | None, reason: str, now_ts: float, timings: FailoverTimings
) -> tuple[int, int]:
    """(failovers, failures) of the index's current streak, this failover included: the recorded counts
    plus this one (a failure only when ``reason`` is the worker's own), counted afresh when the failing
    pod had run ``failover_reset_after`` (a fresh failure, not a crash loop)."""
    failovers, failures = (record.failovers, record.failures) if record is not None else (0, 0)
    if pod is not None:
        ran = podlib.run_seconds(pod, now_ts)
        if ran is not None and ran >= timings.failover_reset_after:
            failovers, failures = 0, 0
    return failovers + 1, failures + (1 if reason in OWN_FAILURES else 0)


def failover_delay(failures: int, timings: FailoverTimings) -> float:
    """Back-off before the replacement of a worker after the ``failures``-th consecutive own failure
    (OOM-killed, error exit) of its index. Asked only for own failures: a disruption never waits.

    The first failure is replaced as soon as its old pod is gone (0 s): an OOM-killed worker is an
    incident, not a crash loop, and every second of delay is a second its job trains short-handed.
    Repeats wait ``base * 2^(n-2)`` capped at ``cap`` (10 s, 20 s, ... 5 min), as kubelet's
    crash-loop back-off does for a container that keeps failing. A disruption between two failures
    neither lengthens nor ends the streak: the worker did nothing wrong."""
    if failures <= 1:
        return 0.0
    exponent = min(failures - 2, 40)
    return float(min(timings.failover_backoff_base * 2.0**exponent, timings.failover_backoff_cap))


# --- the state machine ----------------------------------------------------------------------------------
DESCRIPTIONS = {
    api.FAILOVER_DELETED: "was deleted",
    api.FAILOVER_EVICTED: "was evicted",
    api.FAILOVER_PREEMPTED: "was preempted",
    api.FAILOVER_NODE_LOST: "was lost with its node",
    api.FAILOVER_DISRUPTED: "was disrupted",
}


def vanished_reason(record: WorkerRecord | None, departed: dict[str, Any] | None) -> str:
    """Why a pod of an index went without our seeing it go, in the failover vocabulary: the disruption its
    last known state shows, else ``Deleted``.

    ``departed`` is the last pod of the index whose deletion the controller saw (the final object of its
    watch event). When events coalesce, or a relist stands in for missed ones, a pod evicted through the
    Eviction API can reach us only as that deletion: its final object still carries the ``DisruptionTarget``
    condition (or the kubelet's ``Evicted`` reason), so the failover is counted for what happened, not as a
    deletion. A departed pod created no later than the index's last failover is the pod that failover
    already counted (or an older one), never the one missing now, and says nothing."""
    if departed is None:
        return api.FAILOVER_DELETED
    if record is not None and record.last_failover_time is not None:
        created = parse_time(podlib.metadata(departed).get("creationTimestamp"))
        counted = parse_time(record.last_failover_time)
        if created is None or counted is None or created <= counted:
            return api.FAILOVER_DELETED
    return podlib.disruption(departed) or api.FAILOVER_DELETED


def exit_text(pod: dict[str, Any]) -> str:
    """How a failed pod ended, for an event: "exited with code 3", "was OOM-killed (exit code 137)"."""
    code = podlib.exit_code(pod)
    if code is None:
        return "failed without an exit code"
    if podlib.exit_failure_reason(pod) == api.FAILOVER_OOM_KILLED:
        return f"was OOM-killed (exit code {code})"
    return f"exited with code {code}"


@dataclass
class DynamicWorkers:
    """The Worker type of a dynamic job in one decision.

    ``records`` are the records read from the stored status; ``new_records`` receives the records
    this pass writes (an index without one has nothing to remember). The decision it is part of
    provides ``create`` (create the pod, and its service if missing, of an index; False when this
    pass's creation budget is spent), ``timer`` (wake the job again in that many seconds) and
    ``exited_fact`` (the ``ExitedWithCode`` event of a pod that ended); ``departed`` holds, by index, the
    last pod whose deletion the controller saw (:func:`vanished_reason`).

    One index, one pass (:meth:`step`), by what the cache shows for its slot:

    =============================================  ==================  ==========================================
    pod of the index                               record              decision
    =============================================  ==================  ==========================================
    none, no service, no record                    --                  create its first pod
    none, service left or a record                 not Replacing       failover (``vanished_reason``) -> Replacing
    none                                           Replacing           create once the back-off is over -> Replaced
    terminating, no service, no record             --                  nothing: removed by us (scale-down, suspend)
    terminating                                    Replacing this pod  wait for it to go (our own deletion)
    terminating, otherwise                         any                 failover (its disruption, else ``Deleted``)
    Succeeded                                      any                 counted succeeded; record dropped
    live                                           Replacing this pod  delete it again (deletion not seen yet)
    Failed, not disrupted                          Failed this pod     counted failed for good, left alone
    disrupted (``DisruptionTarget``)               any                 delete + failover (its disruption)
    Failed, the restart policy retries             any                 delete + failover (``Error``/``OOMKilled``)
    Failed, the restart policy does not retry      any                 Failed record, ``WorkerFailed`` event
    Pending / Running                              any                 Replaced; forgotten after running long
    =============================================  ==================  ==========================================

    Two indices with a pod each are never in one slot; a slot with duplicates is neither counted nor
    touched (as upstream), its record kept. The back-off between failovers of one index is a separate
    policy (:func:`next_streak`, :func:`failover_delay`): the state machine asks it how long a failover
    waits and records the answer in ``retryAfter``. Only the worker's own failures (OOM-killed, an error
    exit) back off; a disruption (deleted, evicted, preempted, lost with its node: :data:`OWN_FAILURES`
    says which is which) is replaced as soon as its old pod is gone, however often it happens.
    """

    job_name: str
    namespace: str
    records: dict[int, WorkerRecord]
    now_ts: float
    now_str: str
    timings: FailoverTimings
    create: Callable[[int, Outputs], bool]
    timer: Callable[[float], None]
    exited_fact: Callable[[dict[str, Any], Outputs], None]
    new_records: dict[int, WorkerRecord] = field(default_factory=dict)
    departed: dict[int, dict[str, Any]] = field(default_factory=dict)

    def reconcile(
        self,
        indices: Iterable[int],
        slots: dict[int, list[dict[str, Any]]],
        service_slots: dict[int, list[dict[str, Any]]],
        policy: str,
        out: Outputs,
    ) -> Counts:
        """Step every worker index in ``indices`` (in order); the counts of their pods."""
        counts = Counts()
        for index in indices:
            slot = slots.get(index, [])
            if len(slot) > 1:
                if index in self.records:
                    self.new_records[index] = self.records[index]
                continue  # duplicates: neither counted nor touched, as upstream
            record = self.step(index, slot[0] if slot else None, bool(service_slots.get(index)), policy, counts, out)
            if record is not None:
                self.new_records[index] = record
        return counts

    def step(
        self,
        index: int,
        pod: dict[str, Any] | None,
        has_service: bool,
        policy: str,
        counts: Counts,
        out: Outputs,
    ) -> WorkerRecord | None:
        """One index: its pod (None if it has none), whether its service exists, the Worker
        restartPolicy. Returns the index's new record (None: nothing to remember)."""
        record = self.records.get(index)
        if pod is None:
            return self._missing(index, record, has_service, out)
        if podlib.is_terminating(pod):
            return self._terminating(index, record, pod, has_service, out)
        return self._present(index, record, pod, policy, counts, out)

    def _failover(
        self,
        index: int,
        record: WorkerRecord | None,
        reason: str,
        description: str,
        pod: dict[str, Any] | None,
        out: Outputs,
    ) -> WorkerRecord:
        """Record a new failover of worker ``index`` (event, metric, back-off)."""
        failovers, failures = next_streak(record, pod, reason, self.now_ts, self.timings)
        delay = failover_delay(failures, self.timings) if reason in OWN_FAILURES else 0.0
        retry_after: str | None = None
        when = "as soon as it is gone"
        if delay > 0:
            retry_at = math.ceil(self.now_ts + delay)
            self.timer(retry_at - self.now_ts)
            retry_after = format_epoch(retry_at)
            when = f"after a {delay:g}s back-off"
        pod_name = tfconfig.general_name(self.job_name, api.WORKER, index)
        out.events.append(
            Event(
                api.EVENT_WARNING,
                api.EV_WORKER_FAILOVER,
                f"Worker {pod_name} (index {index}) {description} ({reason}): replacing it {when} (failover {failovers})",
            )
        )
        out.metrics.append(
            MetricInc(api.METRIC_WORKER_FAILOVERS, (("job_namespace", self.namespace), ("reason", reason)))
        )
        return WorkerRecord(
            state=api.WORKER_STATE_REPLACING,
            failovers=failovers,
            failures=failures,
            last_failover_time=self.now_str,
            last_reason=reason,
            retry_after=retry_after,
            pod_uid=podlib.uid(pod) if pod is not None else None,
            exit_code=podlib.exit_code(pod) if pod is not None else None,
        )

    def _missing(self, index: int, record: WorkerRecord | None, has_service: bool, out: Outputs) -> WorkerRecord | None:
        if record is None or record.state != api.WORKER_STATE_REPLACING:
            vanished = has_service or record is not None
            if not vanished:
                self.create(index, out)  # a fresh slot: first pod of this index
                return None
            reason = vanished_reason(record, self.departed.get(index))
            record = self._failover(index, record, reason, DESCRIPTIONS[reason], None, out)
        due = parse_time(record.retry_after)
        if due is not None and self.now_ts < due:
            self.timer(due - self.now_ts)
            return record
        if self.create(index, out):
            return replace(record, state=api.WORKER_STATE_REPLACED, retry_after=None, pod_uid=None)
        return record

    def _terminating(
        self, index: int, record: WorkerRecord | None, pod: dict[str, Any], has_service: bool, out: Outputs
    ) -> WorkerRecord | None:
        # Terminating workers are "leaving": never counted as failed (fix for quirk Q7).
        if record is not None and record.state == api.WORKER_STATE_REPLACING and record.pod_uid == podlib.uid(pod):
            return record  # our own failover deletion in progress
        if record is None and not has_service:
            return None  # removed by us (scale-down, suspend): a fresh pod follows once it is gone
        reason = podlib.disruption(pod) or api.FAILOVER_DELETED
        return self._failover(index, record, reason, DESCRIPTIONS[reason], pod, out)

    def _present(
        self,
        index: int,
        record: WorkerRecord | None,
        pod: dict[str, Any],
        policy: str,
        counts: Counts,
        out: Outputs,
    ) -> WorkerRecord | None:
        current_phase = podlib.phase(pod)
        pod_uid = podlib.uid(pod)
        if current_phase == api.POD_SUCCEEDED:
            counts.succeeded += 1
            return None  # done; its failover history no longer matters
        ours = record if record is not None and record.pod_uid == pod_uid else None  # the record is about this pod
        if ours is not None and ours.state == api.WORKER_STATE_REPLACING:
            # We decided to replace this pod but the deletion is not visible yet: delete again
            # (the executor's expectations make a repeated delete harmless).
            out.deletions.append(DeletePod(podlib.name(pod) or "", pod_uid, api.DELETE_FAILOVER))
            return record
        disruption = podlib.disruption(pod)
        if ours is not None and ours.state == api.WORKER_STATE_FAILED and disruption is None:
            counts.failed += 1
            counts.permanent_failed += 1
            return record
        if disruption is not None:
            out.deletions.append(DeletePod(podlib.name(pod) or "", pod_uid, api.DELETE_FAILOVER))
            self.exited_fact(pod, out)
            return self._failover(index, record, disruption, DESCRIPTIONS[disruption], pod, out)
        if current_phase == api.POD_FAILED:
            code = podlib.exit_code_or_missing(pod)
            retry = policy in (api.RESTART_ALWAYS, api.RESTART_ON_FAILURE) or (
                policy == api.RESTART_EXIT_CODE and podlib.is_retryable_exit_code(code)
            )
            self.exited_fact(pod, out)
            reason = podlib.exit_failure_reason(pod)
            if retry:
                out.deletions.append(DeletePod(podlib.name(pod) or "", pod_uid, api.DELETE_FAILOVER))
                return self._failover(index, record, reason, exit_text(pod), pod, out)
            counts.failed += 1
            counts.permanent_failed += 1
            out.events.append(
                Event(
                    api.EVENT_WARNING,
                    api.EV_WORKER_FAILED,
                    f"Worker {podlib.name(pod)} (index {index}) {exit_text(pod)} and restartPolicy {policy} "
                    "does not retry it: the job continues without it",
                )
            )
            return WorkerRecord(
                state=api.WORKER_STATE_FAILED,
                failovers=record.failovers if record is not None else 0,
                failures=record.failures if record is not None else 0,
                last_failover_time=record.last_failover_time if record is not None else None,
                last_reason=reason,
                pod_uid=pod_uid,
                exit_code=podlib.exit_code(pod),
            )
        # Pending or Running, healthy.
        if current_phase == api.POD_RUNNING:
            counts.active += 1
        if record is None:
            return None
        if record.state != api.WORKER_STATE_REPLACED:
            record = replace(record, state=api.WORKER_STATE_REPLACED, retry_after=None, pod_uid=None)
        if current_phase == api.POD_RUNNING:
            ran = podlib.run_seconds(pod, self.now_ts)
            if ran is not None:
                if ran >= self.timings.failover_reset_after:
                    return None  # ran long enough: forget the crash-loop history
                self.timer(self.timings.failover_reset_after - ran)
        return record
