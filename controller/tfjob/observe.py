"""What the caches say about TFJobs right now, and the timings no single decision can measure.

Why the job gauges are computed from the informer caches at scrape time (a custom collector) instead of
being maintained on every reconcile: a gauge kept by increments drifts for good after one missed
transition, a restart or a leadership change, while the caches are the controller's own picture of the
cluster, rebuilt by every relist. The caches fill only while this replica leads (informers run under the
leader lease), so a standby reports no job gauges at all and ``sum()`` over replicas counts every job once.

Why the two latencies are measured from watch events rather than in :func:`~controller.tfjob.decide.decide`:
both end when a pod *becomes* Running, which is a transition of a pod (seen once, in an update event), not
of the job's status. A pod already Running when the controller starts arrives as an add, never as an
update, so a restart cannot count a latency twice; it can miss the ones in flight, which a histogram
tolerates.

- failover latency: from ``lastFailoverTime`` of the worker's record in ``status.dynamicWorkers`` (when the
  controller observed the failure or disruption; whole seconds, so values are up to 1 s long) until the
  replacement pod of that index runs. The two facts travel on different watches: the replacement can be
  seen Running before the job update that carries its record (a disruption or a first own failure is replaced
  at once, and the status is written after the creates). So the time a worker pod is first seen Running is kept per
  (job, index), and the latency is observed by whichever of the two events arrives second;
- time to running: from the job's ``creationTimestamp`` until every replica of every type runs at once, for
  jobs first seen before they had a Running condition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterator
from typing import Any

import structlog
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.runtime.cache import CONTROLLER_UID_INDEX, DeletedFinalStateUnknown
from controller.runtime.informer import Informer
from controller.tfjob import api
from controller.tfjob import pods as podlib
from controller.tfjob.conditions import find, is_true, parse_time, sanitize
from controller.tfjob.dynamic import WorkerRecord, parse_worker_records
from controller.tfjob.members import members_of
from controller.tfjob.metrics import FAILOVER_REASONS, TFJobMetrics
from controller.tfjob.validation import summarize, validate_status

Obj = dict[str, Any]

STATE_PENDING = "Pending"  # no condition yet: the controller has not written the job's status
JOB_STATES: tuple[str, ...] = (
    STATE_PENDING,
    api.COND_CREATED,
    api.COND_RUNNING,
    api.COND_RESTARTING,
    api.COND_SUSPENDED,
    api.COND_SUCCEEDED,
    api.COND_FAILED,
)

METRIC_JOBS = "tfjob_jobs"
METRIC_DEGRADED = "tfjob_jobs_degraded"
METRIC_DEGRADED_LONGEST = "tfjob_jobs_degraded_longest_seconds"
METRIC_NOT_RUNNING_LONGEST = "tfjob_jobs_not_running_longest_seconds"

_HELP = {
    METRIC_JOBS: "TFJobs in the controller's cache by state (the most advanced true condition; Pending: no status yet)",
    METRIC_DEGRADED: "Running or Restarting TFJobs with fewer running Worker pods than spec Worker replicas",
    METRIC_DEGRADED_LONGEST: "Seconds the longest-degraded TFJob has run below its desired workers "
    "(0 when none; restarts with the controller)",
    METRIC_NOT_RUNNING_LONGEST: "Age in seconds of the oldest TFJob that has not yet reached Running and has not "
    "finished or been suspended (0 when none)",
}


def job_state(job: Obj) -> str:
    """The state a TFJob is in, from its conditions (one of :data:`JOB_STATES`)."""
    conditions = sanitize(podlib.status_of(job).get(api.STATUS_CONDITIONS))
    for state in (api.COND_SUCCEEDED, api.COND_FAILED, api.COND_SUSPENDED, api.COND_RESTARTING, api.COND_RUNNING):
        if is_true(conditions, state):
            return state
    return api.COND_CREATED if find(conditions, api.COND_CREATED) is not None else STATE_PENDING


def _replicas(job: Obj) -> dict[str, int]:
    """Desired replicas by type label (lower case), defaulted as the controller does (missing -> 1)."""
    spec = job.get("spec")
    specs = spec.get(api.SPEC_REPLICA_SPECS) if isinstance(spec, dict) else None
    out: dict[str, int] = {}
    if not isinstance(specs, dict):
        return out
    for replica_type, spec in specs.items():
        count = spec.get(api.REPLICA_REPLICAS, api.DEFAULT_REPLICAS) if isinstance(spec, dict) else None
        if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
            out[replica_type.lower()] = count
    return out


def _wanted(job: Obj, replicas: dict[str, int]) -> dict[str, Container[int]]:
    """The indices the job wants by type label: 0..replicas-1 (``replicas``: :func:`_replicas` of the job), or a
    dynamic job's Worker members (members.py: after a targeted scale-down, worker 4 of the members 0, 2, 3, 4 is
    wanted although 4 >= replicas)."""
    wanted: dict[str, Container[int]] = {t: range(n) for t, n in replicas.items()}
    members = members_of(job)
    if members is not None and api.WORKER.lower() in wanted:
        wanted[api.WORKER.lower()] = frozenset(members)
    return wanted


def _running_by_type(pods: list[Obj], wanted: dict[str, Container[int]]) -> dict[str, int]:
    """Running, non-terminating pods per type label, counting only indices the job wants."""
    running = dict.fromkeys(wanted, 0)
    for pod in pods:
        type_label = podlib.replica_type_label(pod) or ""
        index = podlib.replica_index(pod)
        if (
            type_label in wanted
            and index is not None
            and index in wanted[type_label]
            and podlib.phase(pod) == api.POD_RUNNING
            and not podlib.is_terminating(pod)
        ):
            running[type_label] += 1
    return running


class JobObserver(Collector):
    """Job gauges (a collector) and the failover / time-to-running histograms (informer handlers)."""

    def __init__(
        self,
        jobs: Informer,
        pods: Informer,
        metrics: TFJobMetrics,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs = jobs
        self.pods = pods
        self.metrics = metrics
        self._wall = wall
        self._monotonic = monotonic
        self._awaiting_running: set[str] = set()  # job uids whose time to running is still to measure
        # Per job uid, so a job's update or deletion touches only its own entries (no scan over every job).
        self._failovers_measured: dict[str, dict[int, str]] = {}  # job uid -> index -> lastFailoverTime
        # (job uid, worker index) -> (pod uid, its creationTimestamp, wall time it was first seen Running)
        self._worker_running: dict[str, dict[int, tuple[str, float | None, float]]] = {}
        self._degraded_since: dict[str, float] = {}  # job uid -> monotonic time first seen degraded
        # job uid -> the metadata.generation whose unreadable status was reported (once per job and generation)
        self._reported: dict[str, Any] = {}
        self.log = structlog.get_logger("controller.tfjob.observe")
        jobs.add_handler(self._job_added, self._job_updated, self._job_deleted)
        pods.add_handler(None, self._pod_updated, self._pod_deleted)

    # -- handlers -------------------------------------------------------------------------------------------

    def _report_unreadable(self, job: Obj) -> None:
        """Say once per job and generation what of its status cannot be read (the readers take it as absent).

        A status is the controller's to write, but an older or edited CRD stores whatever anyone writes to
        it; every update of such a job would otherwise go unexplained, or be reported on every update."""
        uid = podlib.uid(job)
        generation = podlib.metadata(job).get("generation")
        if uid in self._reported and self._reported[uid] == generation:
            return  # said already: not validated again on every update of this generation
        errors = validate_status(job.get("status"))
        if not errors:
            return
        self._reported[uid] = generation
        self.log.warning(
            "TFJob status cannot be read: the unreadable fields are taken as absent",
            job=f"{podlib.namespace(job)}/{podlib.name(job)}",
            generation=generation,
            error=summarize(errors),
        )

    def _job_added(self, job: Obj) -> None:
        self._report_unreadable(job)
        self.metrics.namespace_seen(podlib.namespace(job))
        conditions = sanitize(podlib.status_of(job).get(api.STATUS_CONDITIONS))
        if find(conditions, api.COND_RUNNING) is None and job_state(job) in (STATE_PENDING, api.COND_CREATED):
            self._awaiting_running.add(podlib.uid(job))

    def _job_updated(self, old: Obj, job: Obj) -> None:
        uid = podlib.uid(job)
        if podlib.uid(old) != uid:
            # A relist shows a job deleted and re-created under its name as an update to a new uid, with no
            # tombstone: the old job's entries go as on its deletion, and the new job is measured from its start.
            self._job_deleted(old)
            self._job_added(job)
            return
        self._report_unreadable(job)
        if job_state(job) in (api.COND_SUCCEEDED, api.COND_FAILED, api.COND_SUSPENDED):
            self._awaiting_running.discard(uid)
        running = self._worker_running.get(uid)
        if running:
            records = parse_worker_records(job.get("status"))  # once per update, not once per record
            for index in running.keys() & records.keys():
                self._measure_failover(job, index, records[index])

    def _job_deleted(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        job = DeletedFinalStateUnknown.unwrap(obj)
        if job is None:
            return
        uid = podlib.uid(job)
        self._awaiting_running.discard(uid)
        self._reported.pop(uid, None)
        self._degraded_since.pop(uid, None)
        self._failovers_measured.pop(uid, None)
        self._worker_running.pop(uid, None)

    def _owner(self, pod: Obj) -> Obj | None:
        owner_uid = podlib.controller_uid(pod)
        refs = podlib.metadata(pod).get("ownerReferences")
        if not owner_uid or not isinstance(refs, list):
            return None
        for ref in refs:
            if isinstance(ref, dict) and ref.get("uid") == owner_uid and ref.get("kind") == api.KIND:
                name = ref.get("name")
                job = self.jobs.get(f"{podlib.namespace(pod)}/{name}") if isinstance(name, str) else None
                if job is not None and podlib.uid(job) == owner_uid:
                    return job
        return None

    def _forget_running(self, pod: Obj) -> None:
        """A worker that stopped running can no longer be anyone's replacement.

        Without this, a record written after the failed pod's creation second (whole-second timestamps)
        would be matched against the failed pod's own Running time, and the failover measured as ~0 s."""
        owner = podlib.controller_uid(pod)
        index = podlib.replica_index(pod)
        seen = self._worker_running.get(owner or "")
        if seen is not None and index is not None and index in seen and seen[index][0] == podlib.uid(pod):
            del seen[index]

    def _pod_deleted(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        pod = DeletedFinalStateUnknown.unwrap(obj)
        if pod is not None:
            self._forget_running(pod)

    def _pod_updated(self, old: Obj, pod: Obj) -> None:
        if podlib.phase(pod) != api.POD_RUNNING or podlib.is_terminating(pod):
            self._forget_running(pod)
            return
        if podlib.phase(old) == api.POD_RUNNING:
            return
        job = self._owner(pod)
        if job is None:
            return
        now = self._wall()
        namespace, uid = podlib.namespace(job), podlib.uid(job)
        index = podlib.replica_index(pod)
        if podlib.replica_type_label(pod) == api.WORKER.lower() and index is not None:
            created = parse_time(podlib.metadata(pod).get("creationTimestamp"))
            self._worker_running.setdefault(uid, {})[index] = (podlib.uid(pod), created, now)
            record = parse_worker_records(job.get("status")).get(index)
            if record is not None:
                self._measure_failover(job, index, record)
        if uid in self._awaiting_running:
            replicas = _replicas(job)
            if (
                replicas
                and _running_by_type(self.pods.by_index(CONTROLLER_UID_INDEX, uid), _wanted(job, replicas)) == replicas
            ):
                self._awaiting_running.discard(uid)
                created = parse_time(podlib.metadata(job).get("creationTimestamp"))
                if created is not None:
                    self.metrics.observe_time_to_running(namespace, now - created)

    def _measure_failover(self, job: Obj, index: int, record: WorkerRecord) -> None:
        """Observe the failover of worker ``index`` (its ``record``) once its Running replacement is known too."""
        uid = podlib.uid(job)
        running = self._worker_running.get(uid, {}).get(index)
        if running is None or record.last_reason not in FAILOVER_REASONS:
            return  # (a reason written by someone else, outside the vocabulary, has no series)
        pod_uid, created, running_at = running
        since = parse_time(record.last_failover_time)
        if (
            since is None
            or record.pod_uid == pod_uid  # the record is about this very pod: it is not a replacement
            or (created is not None and created < since)  # Running before this failover: not its replacement
            or self._failovers_measured.get(uid, {}).get(index) == record.last_failover_time
        ):
            return
        self._failovers_measured.setdefault(uid, {})[index] = record.last_failover_time or ""
        self.metrics.observe_failover(podlib.namespace(job), record.last_reason, running_at - since)

    # -- the collector ----------------------------------------------------------------------------------------

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The gauge families this collector reports (empty of samples)."""
        yield from self._families()

    def _families(self) -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(METRIC_JOBS, _HELP[METRIC_JOBS], labels=("job_namespace", "state")),
            *(
                GaugeMetricFamily(name, _HELP[name], labels=("job_namespace",))
                for name in (METRIC_DEGRADED, METRIC_DEGRADED_LONGEST, METRIC_NOT_RUNNING_LONGEST)
            ),
        ]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The jobs' gauges from the cache now; nothing before the cache has synced."""
        if not self.jobs.has_synced():
            return  # a standby (or a replica still listing) knows nothing about jobs: report nothing
        now, tick = self._wall(), self._monotonic()
        jobs = self.jobs.list()
        live = {podlib.namespace(job) for job in jobs}
        for namespace in live:
            self.metrics.namespace_seen(namespace)
        self.metrics.prune(live)
        namespaces = self.metrics.namespaces
        by_state = {(ns, state): 0 for ns in namespaces for state in JOB_STATES}
        degraded = dict.fromkeys(namespaces, 0)
        degraded_longest = dict.fromkeys(namespaces, 0.0)
        not_running_longest = dict.fromkeys(namespaces, 0.0)
        still_degraded: set[str] = set()
        for job in jobs:
            namespace, uid = podlib.namespace(job), podlib.uid(job)
            state = job_state(job)
            by_state[(namespace, state)] += 1
            if state in (STATE_PENDING, api.COND_CREATED):
                created = parse_time(podlib.metadata(job).get("creationTimestamp"))
                if created is not None:
                    not_running_longest[namespace] = max(not_running_longest[namespace], now - created)
            elif state in (api.COND_RUNNING, api.COND_RESTARTING):
                replicas = _replicas(job)
                worker = api.WORKER.lower()
                wanted = replicas.get(worker, 0)
                running = 0  # (the pods are looked up only for a job that wants workers)
                if wanted:
                    indices = {worker: _wanted(job, replicas)[worker]}
                    running = _running_by_type(self.pods.by_index(CONTROLLER_UID_INDEX, uid), indices)[worker]
                if running < wanted:
                    still_degraded.add(uid)
                    degraded[namespace] += 1
                    since = self._degraded_since.setdefault(uid, tick)
                    degraded_longest[namespace] = max(degraded_longest[namespace], tick - since)
        for uid in set(self._degraded_since) - still_degraded:
            del self._degraded_since[uid]

        jobs_family, degraded_family, degraded_longest_family, not_running_family = self._families()
        for (namespace, state), count in sorted(by_state.items()):
            jobs_family.add_metric((namespace, state), count)
        for family, values in (
            (degraded_family, degraded),
            (degraded_longest_family, degraded_longest),
            (not_running_family, not_running_longest),
        ):
            for namespace, value in sorted(values.items()):
                family.add_metric((namespace,), value)
        yield from (jobs_family, degraded_family, degraded_longest_family, not_running_family)
