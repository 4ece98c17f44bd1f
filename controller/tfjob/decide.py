"""The reconcile decision for one TFJob: (job, its pods and services, now) -> a :class:`Decision`.

Why a pure function: every behaviour of the controller -- upstream's lifecycle and the dynamic
workers this project exists for -- is decided here without I/O, so it is table-tested exhaustively
and the executor that applies the result stays thin (see actions.py for its contract).

Contract of :func:`decide`:

* ``job`` is the TFJob as stored (undefaulted); ``pods`` / ``services`` the objects whose
  controlling ownerReference is the job (re-checked here by uid; objects without our labels or
  with an unparsable index are ignored). ``now`` is timezone-aware UTC.
* Deterministic: same inputs, same Decision (types in a fixed order, indices sorted, TF_CONFIG
  byte-exact, service ports in declaration order).
* Idempotent: deciding again on the converged result of a decision (its actions applied, its
  status written) yields no actions, no events, no metrics and an identical status, because
  events and metrics are tied to status transitions and repeated deletes are avoided
  (terminating pods are never deleted again).
* Never raises on any input dict: a job that does not validate is failed with
  ``TFJobFailedValidation`` and nothing is created; malformed children and status entries are
  ignored.

The pass, in order (upstream's ReconcileJobs with the fixes recorded in docs/tfjob-compatibility.md):
validation -> defaulting (in memory) -> ``Created`` condition -> finished jobs: cleanup / TTL ->
suspended jobs: delete everything -> resume -> startTime -> backoff limit / active deadline ->
gang scheduling (when on): create/update the PodGroup, no pods until Volcano admitted it ->
per replica type: scale-down, restarts or worker failovers (the Worker state machine of a
dynamic job is dynamic.py), creations, services -> conditions
(success / failure / running / restarting) -> if the job just finished: cleanup and TTL in the
same pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controller.runtime.jsonfields import field_dict, field_str

from . import api, tfconfig
from . import gang as ganglib
from . import members as memberlib
from . import pods as podlib
from .actions import (
    Action,
    CreatePod,
    CreatePodGroup,
    CreateService,
    Decision,
    DeleteJob,
    DeletePod,
    DeletePodGroup,
    DeleteService,
    Event,
    MetricInc,
    UpdatePodGroup,
)
from .conditions import FALSE, TRUE, find, format_time, is_finished, is_true, parse_time, set_condition
from .conditions import sanitize as sanitize_conditions
from .defaults import defaulted
from .dynamic import DynamicWorkers, WorkerRecord, dynamic_status, parse_worker_records
from .jsoncopy import json_copy
from .outputs import Counts, Outputs
from .validation import summarize, validate, validate_pod_count


@dataclass(frozen=True)
class DecideConfig:
    """Process-wide settings of the decision.

    ``cluster_domain`` is upstream's ``CUSTOM_CLUSTER_DOMAIN`` (appended to service addresses in
    TF_CONFIG); ``controller_name`` the value of the operator-name label. The failover timings:
    a disrupted worker (deleted, evicted, preempted, lost with its node) and a worker's first own
    failure (OOM-killed, error exit) are replaced as soon as the old pod is gone; repeated own
    failures of the same index back off 10 s doubling to a 5 min cap; the history resets after
    10 min of running (see :func:`controller.tfjob.dynamic.failover_delay`); tests may shrink them.
    ``max_creations`` bounds one decision's creations, pods and services together (the rest follow
    on the next pass, triggered by the creations' watch events), so a huge job cannot produce a
    huge decision: its status is written after every pass and keeps up while the job is built, and
    a pass is short enough not to hold a worker that another job's failover needs.
    ``first_pass_creations`` is the smaller bound of a job's first pass (no ``Created`` condition
    yet), so even the largest job gets ``Created`` and its replica statuses after a handful of
    creations; a job of up to that many pods and services is still created in one pass.
    ``max_pods_per_job`` caps the pods one job may ask for (replicas summed over types): a job over
    it fails validation with a condition and an event saying so, and gets no pods at all.
    ``gang_scheduler`` is ``--gang-scheduler-name`` ("" = no gang scheduling; see gang.py).
    """

    cluster_domain: str = ""
    controller_name: str = api.CONTROLLER_NAME
    failover_backoff_base: float = 10.0
    failover_backoff_cap: float = 300.0
    failover_reset_after: float = 600.0
    max_creations: int = 200
    first_pass_creations: int = 20
    max_pods_per_job: int = 10_000
    gang_scheduler: str = ""

    def __post_init__(self) -> None:
        ganglib.gang_of(self.gang_scheduler)  # an unknown name fails here, never inside decide()


def worker0_completed(job: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    """Upstream's IsWorker0Completed on a defaulted job: slot 0 of the Worker type holds exactly
    one pod, Succeeded, whose ``tensorflow`` container exited 0. True if there is no Worker spec."""
    if api.WORKER not in job["spec"]["tfReplicaSpecs"]:
        return True
    slot0 = [p for p in pods if podlib.replica_type_label(p) == api.WORKER.lower() and podlib.replica_index(p) == 0]
    if len(slot0) != 1:
        return False
    pod = slot0[0]
    return podlib.phase(pod) == api.POD_SUCCEEDED and podlib.exit_code_or_missing(pod) == 0


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _now_epoch(now: datetime) -> float:
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return now.timestamp()


def decide(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    services: list[dict[str, Any]],
    now: datetime,
    config: DecideConfig = DecideConfig(),
    *,
    pod_group: dict[str, Any] | None = None,
    priority_classes: Mapping[str, int] | None = None,
) -> Decision:
    """Decide what to do for ``job`` at ``now``. See the module docstring for the contract.

    With gang scheduling on (``config.gang_scheduler``), ``pod_group`` is the job's PodGroup as cached
    (None if there is none; one not controlled by the job is left alone, with a Warning) and ``priority_classes`` the
    PriorityClass values by name (for the order of ``minResources``); both are ignored otherwise."""
    if not isinstance(job, dict):
        return Decision((), (), (), {}, None)
    raw_status = job.get("status")
    old_status: dict[str, Any] = raw_status if isinstance(raw_status, dict) else {}
    if _managed_externally(job):
        # v1.9 managedBy (e.g. MultiKueue): another controller owns the job; write nothing.
        return Decision((), (), (), json_copy(old_status), None)
    errors = validate(job) or validate_pod_count(job, config.max_pods_per_job)
    if errors:
        return _Pass(job, old_status, [], [], now, config, pod_group).invalid(summarize(errors))
    return _Pass(defaulted(job), old_status, pods, services, now, config, pod_group, priority_classes).run()


def _earlier_incarnation(obj: dict[str, Any], job_name: str) -> bool:
    refs = podlib.metadata(obj).get("ownerReferences")
    return isinstance(refs, list) and any(
        isinstance(r, dict) and r.get("controller") is True and r.get("kind") == api.KIND and r.get("name") == job_name
        for r in refs
    )


def _managed_externally(job: dict[str, Any]) -> bool:
    spec = job.get("spec")
    run_policy = spec.get("runPolicy") if isinstance(spec, dict) else None
    return isinstance(run_policy, dict) and run_policy.get("managedBy") == api.MANAGED_BY_MULTIKUEUE


class _Pass:
    """One decision in the making. Holds the defaulted job, the indexed children and the
    accumulating status, actions, events, metrics and timers."""

    def __init__(
        self,
        job: dict[str, Any],
        old_status: dict[str, Any],
        pods: list[dict[str, Any]],
        services: list[dict[str, Any]],
        now: datetime,
        config: DecideConfig,
        pod_group: dict[str, Any] | None = None,
        priority_classes: Mapping[str, int] | None = None,
    ) -> None:
        self.job = job
        self.old_status = old_status
        self.config = config
        self.now_ts = _now_epoch(now)
        self.now_str = format_time(now)
        metadata = field_dict(job, "metadata")
        self.name = field_str(metadata, "name")
        self.namespace = field_str(metadata, "namespace")
        self.uid = field_str(metadata, "uid")

        self.conditions = sanitize_conditions(old_status.get("conditions"))
        self.start_time = self._old_time("startTime")
        self.completion_time = self._old_time("completionTime")
        self.actions: list[Action] = []
        self.events: list[Event] = []
        self.metrics: list[MetricInc] = []
        self.timers: list[float] = []

        self.pods = self._owned(pods)
        self.services = self._owned(services)
        self.gang = ganglib.gang_of(config.gang_scheduler)
        owned_groups = self._owned([pod_group]) if self.gang is not None else []
        self.pod_group: dict[str, Any] | None = owned_groups[0] if owned_groups else None
        # A group under the job's name controlled by someone else; not one of an earlier job of this name
        # that the garbage collector has yet to remove (the new job's own group follows it).
        self.foreign_pod_group = (
            pod_group
            if self.gang is not None
            and isinstance(pod_group, dict)
            and not owned_groups
            and not _earlier_incarnation(pod_group, self.name)
            else None
        )
        self.priority_classes: Mapping[str, int] = priority_classes or {}
        self.gang_failed_status: dict[str, Any] | None = None
        # Who is in a dynamic job after this pass (members.py); planned by the normal pass, None until then
        # (and for a job that fails validation, whose passes never get that far).
        self.membership: memberlib.Membership | None = None

    # --- helpers -------------------------------------------------------------------------------
    def _old_time(self, key: str) -> str | None:
        value = self.old_status.get(key)
        return value if parse_time(value) is not None else None

    def _owned(self, objects: Any) -> list[dict[str, Any]]:
        if not isinstance(objects, list) or not self.uid:
            return []
        return [
            o
            for o in objects
            if isinstance(o, dict) and podlib.name(o) is not None and podlib.controller_uid(o) == self.uid
        ]

    def _job_labels(self) -> tuple[tuple[str, str], ...]:
        return (("framework", api.FRAMEWORK), ("job_namespace", self.namespace))

    def _event(self, event_type: str, reason: str, message: str) -> None:
        self.events.append(Event(event_type, reason, message))

    def _timer(self, seconds: float) -> None:
        if seconds > 0 and math.isfinite(seconds):
            self.timers.append(seconds)

    def _set(self, cond_type: str, status: str, reason: str, message: str) -> bool:
        """Set a condition; True if the list changed (a transition)."""
        updated = set_condition(self.conditions, cond_type, status, reason, message, self.now_str)
        changed = updated is not self.conditions
        self.conditions = updated
        return changed

    def _ensure_created(self) -> None:
        if find(self.conditions, api.COND_CREATED) is None and self._set(
            api.COND_CREATED, TRUE, api.REASON_CREATED, f"TFJob {self.name} is created."
        ):
            self.metrics.append(MetricInc(api.METRIC_JOBS_CREATED, self._job_labels()))

    def _finish_time(self) -> float:
        """completionTime as epoch seconds, setting it to now if the job has none (TTL must work)."""
        if self.completion_time is None:
            self.completion_time = self.now_str
        parsed = parse_time(self.completion_time)
        return parsed if parsed is not None else self.now_ts

    def _ttl(self, ttl: int | None, suspended: bool) -> None:
        if ttl is None or suspended:
            return  # upstream skips TTL while the job is suspended
        expire = self._finish_time() + ttl
        if self.now_ts >= expire:
            self.actions.append(DeleteJob(api.DELETE_TTL))
            self.metrics.append(MetricInc(api.METRIC_JOBS_DELETED, self._job_labels()))
        else:
            self._timer(expire - self.now_ts)

    def _decision(self, status: dict[str, Any]) -> Decision:
        return Decision(
            actions=tuple(self.actions),
            events=tuple(self.events),
            metrics=tuple(self.metrics),
            status=status,
            requeue_after=min(self.timers) if self.timers else None,
            gang_failed_status=self.gang_failed_status if self._writes_pod_group() else None,
            status_first=self._only_workers_leave(),
        )

    def _only_workers_leave(self) -> bool:
        """Whether this pass, in which workers leave a dynamic job, does nothing but scale-down removals (and the
        PodGroup's new size): then its status (the members that stay) is written before the removals
        (Decision.status_first). A pass that also replaces,
        restarts, creates or finishes writes its status last, as every other pass: written first, it would
        record (and report) those as done before they are sent, and a failed send would count them twice."""
        if self.membership is None or not self.membership.leaving:
            return False
        return (
            all(
                isinstance(a, UpdatePodGroup)
                or (isinstance(a, DeletePod | DeleteService) and a.reason == api.DELETE_SCALE_DOWN)
                for a in self.actions
            )
            and all(e.reason in (api.EV_WORKER_SCALED_DOWN, api.EV_INVALID_POD_DELETION_COST) for e in self.events)
            and all(m.name == api.METRIC_WORKER_SCALED_DOWN for m in self.metrics)
        )

    def _writes_pod_group(self) -> bool:
        return any(isinstance(a, CreatePodGroup | UpdatePodGroup) for a in self.actions)

    def _base_status(self) -> dict[str, Any]:
        status = json_copy(self.old_status)
        status["conditions"] = json_copy(self.conditions)
        for key, value in (("startTime", self.start_time), ("completionTime", self.completion_time)):
            if value is None:
                status.pop(key, None)
            else:
                status[key] = value
        return status

    # --- invalid jobs --------------------------------------------------------------------------
    def invalid(self, reasons: str) -> Decision:
        message = f"TFJob {self.namespace}/{self.name} failed validation because {reasons}"
        self._ensure_created()
        if self._set(api.COND_FAILED, TRUE, api.REASON_FAILED_VALIDATION, message):
            self._event(api.EVENT_WARNING, api.REASON_FAILED_VALIDATION, message)
            self.metrics.append(MetricInc(api.METRIC_JOBS_FAILED, self._job_labels()))
        if is_finished(self.conditions):
            self._delete_pod_group()  # a job edited into an invalid one is finished: its gang goes
            # TTL still applies when its own field is usable: an invalid job must not linger forever.
            spec = field_dict(self.job, "spec")
            run_policy = field_dict(spec, "runPolicy")
            ttl = _int_or_none(run_policy.get("ttlSecondsAfterFinished"))
            self._finish_time()
            self._ttl(ttl if ttl is not None and ttl >= 0 else None, run_policy.get("suspend") is True)
        return self._decision(self._base_status())

    # --- valid jobs ----------------------------------------------------------------------------
    def run(self) -> Decision:
        spec = self.job["spec"]
        self.specs: dict[str, dict[str, Any]] = spec["tfReplicaSpecs"]
        self.types = [t for t in api.REPLICA_TYPES if t in self.specs]
        self.run_policy: dict[str, Any] = spec["runPolicy"]
        self.dynamic = spec.get("enableDynamicWorker") is True
        self.suspended = self.run_policy.get("suspend") is True
        self.has_chief = any(t in self.specs for t in api.CHIEF_TYPES)
        self.old_replica_statuses: dict[str, Any] = field_dict(self.old_status, "replicaStatuses")
        self.records = parse_worker_records(self.old_status) if self.dynamic else {}
        # The Worker members of a dynamic job (members.py): as recorded until this pass plans them.
        self.members = memberlib.recorded(self.old_status) if self.dynamic else None
        self._index_children()

        self.first_pass = find(self.conditions, api.COND_CREATED) is None
        self._ensure_created()
        if is_finished(self.conditions):
            return self._finished()
        if self.suspended:
            return self._suspend()
        if is_true(self.conditions, api.COND_SUSPENDED):
            self._set(api.COND_SUSPENDED, FALSE, api.REASON_RESUMED, f"TFJob {self.name} is resumed.")
            self._event(api.EVENT_NORMAL, api.REASON_RESUMED, f"TFJob {self.name} is resumed.")
            self.start_time = self.now_str  # upstream resets startTime on resume
        started = self.start_time is not None
        if self.start_time is None:
            self.start_time = self.now_str
        limit_message = self._backoff_or_deadline()
        if limit_message is not None:
            return self._fail_on_limit(*limit_message)
        if self.gang is not None and self._sync_pod_group(started):
            return self._wait_for_gang(started)
        return self._reconcile()

    def _index_children(self) -> None:
        """Group pods and services by (replica type, index); ignore what is not ours to slot."""
        by_label = {t.lower(): t for t in self.types}
        self.pod_slots: dict[str, dict[int, list[dict[str, Any]]]] = {t: {} for t in self.types}
        self.service_slots: dict[str, dict[int, list[dict[str, Any]]]] = {t: {} for t in self.types}
        for objects, slots in ((self.pods, self.pod_slots), (self.services, self.service_slots)):
            for obj in objects:
                replica_type = by_label.get(podlib.replica_type_label(obj) or "")
                index = podlib.replica_index(obj)
                if replica_type is not None and index is not None:
                    slots[replica_type].setdefault(index, []).append(obj)

    def _replicas(self, replica_type: str) -> int:
        replicas: int = self.specs[replica_type]["replicas"]  # defaulted and validated
        return replicas

    def _selector(self, replica_type: str) -> str:
        return podlib.type_selector(self.name, replica_type, self.config.controller_name)

    def _replica_statuses(self, counts: dict[str, Counts] | None = None) -> dict[str, Any]:
        """replicaStatuses: fresh counts for spec types if given, else the old entries carried over;
        entries of types no longer in the spec are kept as upstream does; selector always filled."""
        result = json_copy(self.old_replica_statuses)
        for replica_type in self.types:
            if counts is not None:
                result[replica_type] = counts[replica_type].to_status(self._selector(replica_type))
            else:
                entry = result.get(replica_type)
                entry = dict(entry) if isinstance(entry, dict) else {}
                entry["selector"] = self._selector(replica_type)
                result[replica_type] = entry
        return result

    def _status(self, replica_statuses: dict[str, Any], records: dict[int, WorkerRecord] | None) -> dict[str, Any]:
        status = self._base_status()
        status["replicaStatuses"] = replica_statuses
        if self.dynamic:
            status[api.STATUS_DYNAMIC_WORKERS] = dynamic_status(
                records if records is not None else self.records, self.members
            )
        else:
            status.pop(api.STATUS_DYNAMIC_WORKERS, None)
        return status

    # --- finished jobs: cleanup and TTL -------------------------------------------------------
    def _cleanup(self, already_deleted: frozenset[str] | set[str] = frozenset()) -> None:
        """cleanPodPolicy after the job finished: None keeps all, Running deletes Running and
        Pending pods, All deletes every pod; each deleted pod's same-named service goes with it.
        Terminating objects and those ``already_deleted`` by this decision are not deleted again."""
        policy = self.run_policy.get("cleanPodPolicy", api.CLEAN_POD_NONE)
        if policy == api.CLEAN_POD_NONE:
            return
        services_by_name = {podlib.name(s): s for s in self.services}
        for pod in sorted(self.pods, key=lambda p: podlib.name(p) or ""):
            if policy == api.CLEAN_POD_RUNNING and podlib.phase(pod) not in (api.POD_RUNNING, api.POD_PENDING):
                continue
            pod_name = podlib.name(pod) or ""
            if pod_name in already_deleted:
                continue
            if not podlib.is_terminating(pod):
                self.actions.append(DeletePod(pod_name, podlib.uid(pod), api.DELETE_CLEANUP))
            service = services_by_name.get(pod_name)
            if service is not None and not podlib.is_terminating(service):
                self.actions.append(DeleteService(pod_name, podlib.uid(service), api.DELETE_CLEANUP))

    def _finished(self) -> Decision:
        self._cleanup()
        self._delete_pod_group()
        replica_statuses = self._replica_statuses()
        if is_true(self.conditions, api.COND_SUCCEEDED):
            _move_active_to_succeeded(replica_statuses)
        self._finish_time()
        self._ttl(_int_or_none(self.run_policy.get("ttlSecondsAfterFinished")), self.suspended)
        return self._decision(self._status(replica_statuses, None))

    # --- suspension ----------------------------------------------------------------------------
    def _delete_everything(self, reason: str) -> None:
        for pod in sorted(self.pods, key=lambda p: podlib.name(p) or ""):
            if not podlib.is_terminating(pod):
                self.actions.append(DeletePod(podlib.name(pod) or "", podlib.uid(pod), reason))
        for service in sorted(self.services, key=lambda s: podlib.name(s) or ""):
            if not podlib.is_terminating(service):
                self.actions.append(DeleteService(podlib.name(service) or "", podlib.uid(service), reason))

    def _suspend(self) -> Decision:
        self._delete_everything(api.DELETE_SUSPEND)
        self._delete_pod_group()
        replica_statuses = self._replica_statuses()
        for entry in replica_statuses.values():
            if isinstance(entry, dict):
                entry.pop("active", None)
        message = f"TFJob {self.name} is suspended."
        if is_true(self.conditions, api.COND_RUNNING):
            self._set(api.COND_RUNNING, FALSE, api.REASON_SUSPENDED, message)
        if not is_true(self.conditions, api.COND_SUSPENDED):
            self._set(api.COND_SUSPENDED, TRUE, api.REASON_SUSPENDED, message)
            self._event(api.EVENT_NORMAL, api.REASON_SUSPENDED, message)
        # Every pod is deliberately removed; on resume each worker starts afresh.
        return self._decision(self._status(replica_statuses, {}))

    # --- backoff limit and active deadline ----------------------------------------------------
    def _backoff_or_deadline(self) -> tuple[str, str] | None:
        """(message, deletion reason) if the job exceeds its backoff limit or deadline.

        Backoff is upstream's rule (quirk Q5 kept): with ``backoffLimit: 0`` a new Failed pod while
        not all replicas are active fails the job; otherwise the sum of container restartCounts of
        Running pods of OnFailure/Always/ExitCode types must stay below the limit. In a dynamic job
        Worker pods are excluded: workers have their own per-index back-off and never fail the job.
        """
        limit = _int_or_none(self.run_policy.get("backoffLimit"))
        if limit is not None:
            counted = [t for t in self.types if not (self.dynamic and t == api.WORKER)]
            counted_pods = [p for t in counted for slot in self.pod_slots[t].values() for p in slot]
            failed_now = sum(1 for p in counted_pods if podlib.phase(p) == api.POD_FAILED)
            previous_failed = 0
            for t in counted:
                entry = self.old_replica_statuses.get(t)
                value = _int_or_none(entry.get("failed")) if isinstance(entry, dict) else None
                previous_failed += value if value is not None and value > 0 else 0
            active = sum(
                1
                for p in counted_pods
                if podlib.phase(p) not in (api.POD_SUCCEEDED, api.POD_FAILED) and not podlib.is_terminating(p)
            )
            total = sum(self._replicas(t) for t in counted)
            exceeds = limit == 0 and failed_now > previous_failed and active != total
            restarts = sum(
                podlib.restart_count(p)
                for t in counted
                if self.specs[t]["restartPolicy"] in (api.RESTART_ON_FAILURE, api.RESTART_ALWAYS, api.RESTART_EXIT_CODE)
                for slot in self.pod_slots[t].values()
                for p in slot
                if podlib.phase(p) == api.POD_RUNNING
            )
            past = restarts > 0 if limit == 0 else restarts >= limit
            if exceeds or past:
                return (
                    f"Job {self.name} has failed because it has reached the specified backoff limit",
                    api.DELETE_BACKOFF_LIMIT,
                )
        deadline = _int_or_none(self.run_policy.get("activeDeadlineSeconds"))
        start = parse_time(self.start_time)
        if deadline is not None and start is not None:
            expires = start + deadline
            if self.now_ts >= expires:
                return (
                    f"Job {self.name} has failed because it was active longer than specified deadline",
                    api.DELETE_DEADLINE,
                )
            self._timer(expires - self.now_ts)
        return None

    def _fail_on_limit(self, message: str, reason: str) -> Decision:
        """Backoff/deadline failure: every pod and service goes (cleanPodPolicy does not apply,
        as upstream), the job is Failed with completionTime set, and TTL starts."""
        self.timers.clear()
        self._delete_everything(reason)
        self._delete_pod_group()
        if self._set(api.COND_FAILED, TRUE, api.REASON_FAILED, message):
            self._event(api.EVENT_NORMAL, api.REASON_FAILED, message)
            self.metrics.append(MetricInc(api.METRIC_JOBS_FAILED, self._job_labels()))
        self._finish_time()
        self._ttl(_int_or_none(self.run_policy.get("ttlSecondsAfterFinished")), False)
        return self._decision(self._status(self._replica_statuses(), None))

    # --- gang scheduling (gang.py) -------------------------------------------------------------
    def _sync_pod_group(self, started: bool) -> bool:
        """Create or update the job's PodGroup; True while its pods must wait (Volcano has not admitted it).

        A dynamic job that runs never waits: the group was admitted when it started, and a failed-over
        worker's replacement or a scaled-up worker is scheduled on its own (gang.py)."""
        assert self.gang is not None
        existing = self.pod_group
        if existing is None and self.foreign_pod_group is not None:
            # Upstream's Create fails AlreadyExists and it logs; say it where the user looks instead.
            self._event(
                api.EVENT_WARNING,
                api.EV_FAILED_CREATE_POD_GROUP,
                f"PodGroup {self.namespace}/{self.name} exists and is not controlled by TFJob {self.name}; "
                "the job's pods wait for it to be deleted"
                if self.gang.volcano
                else f"PodGroup {self.namespace}/{self.name} exists and is not controlled by TFJob {self.name}; "
                "the job's pods join it as it is",
            )
            return ganglib.blocks_pods(self.gang, None)
        # "Has run" must survive a Restarting episode (a PS/Chief restart replaces the Running condition)
        # and a controller restart, so it is read from the stored conditions and the live pods: Restarting
        # with pods still there is a running gang; after a suspension only terminating ones are left.
        running = is_true(self.conditions, api.COND_RUNNING) or (
            is_true(self.conditions, api.COND_RESTARTING) and any(not podlib.is_terminating(p) for p in self.pods)
        )
        spec = ganglib.desired_spec(
            self.gang,
            self.job,
            existing,
            dynamic=self.dynamic,
            running=running,
            priority_classes=self.priority_classes,
        )
        if existing is None:
            body = ganglib.new_pod_group(self.gang, self.job, podlib.owner_reference(self.job), spec)
            self.actions.append(CreatePodGroup(body))
        elif not podlib.is_terminating(existing):
            updated = ganglib.updated_pod_group(existing, spec)
            if updated is not None:
                self.actions.append(UpdatePodGroup(updated))
        self.gang_failed_status = self._waiting_status(started)
        if self.dynamic and running:
            return False
        return ganglib.blocks_pods(self.gang, existing)

    def _waiting_status(self, started: bool) -> dict[str, Any]:
        """The status of a pass whose pods wait for the gang: frozen but for ``lastReconcileTime``
        (upstream's only writer of it); waiting does not start the job's clock (no ``startTime``, so no active
        deadline either)."""
        start_time = self.start_time
        if not started:
            self.start_time = None
        status = self._status(self._replica_statuses(), self.records)
        self.start_time = start_time
        status[api.STATUS_LAST_RECONCILE_TIME] = self.now_str
        return status

    def _wait_for_gang(self, started: bool) -> Decision:
        """Volcano has not admitted the group yet: no pods, no replica counts, no condition change."""
        if not started:
            self.start_time = None
            self.timers.clear()  # the active deadline counts from startTime, which waiting does not set
        return self._decision(self._waiting_status(started))

    def _delete_pod_group(self) -> None:
        """A finished or suspended job's PodGroup goes; once, not on every pass as upstream."""
        group = self.pod_group
        if group is not None and not podlib.is_terminating(group):
            self.actions.append(DeletePodGroup(podlib.name(group) or "", podlib.uid(group)))

    # --- the normal pass -----------------------------------------------------------------------
    def _reconcile(self) -> Decision:
        budget = self.config.first_pass_creations if self.first_pass else self.config.max_creations
        self.creations_left = max(budget, 1)
        self.tf_configs: tfconfig.TFConfigs | None = None
        self.new_records: dict[int, WorkerRecord] = {}
        self.pods_created: set[tuple[str, int]] = set()
        self.pod_failure: tuple[str, str] | None = None  # (replica type, message): ExitCode 1-127
        counts: dict[str, Counts] = {}
        outputs: list[Outputs] = []
        if self.dynamic and api.WORKER in self.specs:
            self._plan_members()
        for replica_type in self.types:
            out = Outputs()
            self._scale_down(replica_type, out)
            if self.dynamic and replica_type == api.WORKER:
                counts[replica_type] = self._dynamic_workers().reconcile(
                    self._indices(api.WORKER),
                    self.pod_slots[api.WORKER],
                    self.service_slots[api.WORKER],
                    self.specs[api.WORKER]["restartPolicy"],
                    out,
                )
            else:
                counts[replica_type] = self._reconcile_replicas(replica_type, out)
            self._reconcile_services(replica_type, out)
            outputs.append(out)

        events_before = len(self.events)
        finished = self._update_conditions(counts)
        condition_events = self.events[events_before:]
        del self.events[events_before:]
        replica_statuses = self._replica_statuses(counts)
        for out in outputs:
            self.actions.extend(out.scale_down)
        if finished:
            # A job that finishes in this pass restarts, fails over and creates nothing; its pods
            # are handled by cleanPodPolicy in this same pass, so the next pass has nothing to do.
            # Scale-down deletions stand: they follow the spec, not the job's state.
            self.timers.clear()
            self.actions = [a for a in self.actions if not isinstance(a, CreatePodGroup | UpdatePodGroup)]
            self._delete_pod_group()
            for out in outputs:
                self.events.extend(out.facts)
            self.events.extend(condition_events)
            self._cleanup(already_deleted={a.name for a in self.actions if isinstance(a, DeletePod)})
            if is_true(self.conditions, api.COND_SUCCEEDED):
                _move_active_to_succeeded(replica_statuses)
            self._finish_time()
            self._ttl(_int_or_none(self.run_policy.get("ttlSecondsAfterFinished")), False)
            return self._decision(self._status(replica_statuses, self.records))
        for out in outputs:
            self.actions.extend(out.deletions)
        for out in outputs:
            self.actions.extend(out.creations)
        for out in outputs:
            self.events.extend(out.events)
            self.events.extend(out.facts)
            self.metrics.extend(out.metrics)
        self.events.extend(condition_events)
        return self._decision(self._status(replica_statuses, self.new_records))

    def _dynamic_workers(self) -> DynamicWorkers:
        """The Worker state machine of this pass (dynamic.py), writing into ``new_records``."""
        return DynamicWorkers(
            job_name=self.name,
            namespace=self.namespace,
            records=self.records,
            now_ts=self.now_ts,
            now_str=self.now_str,
            timings=self.config,
            create=lambda index, out: self._create(api.WORKER, index, out),
            timer=self._timer,
            exited_fact=self._exited_fact,
            new_records=self.new_records,
        )

    def _plan_members(self) -> None:
        """Who is in the dynamic job after this pass (members.py); a change is reported here, as the
        status write that records it is the transition: who left and why, and unreadable deletion costs."""
        spec_list = self.job["spec"].get(api.SPEC_WORKERS_TO_DELETE) or []
        membership = memberlib.plan(
            self.members,
            self._replicas(api.WORKER),
            spec_list,
            self.pod_slots[api.WORKER],
            self.service_slots[api.WORKER],
            self.records,
        )
        self.membership = membership
        self.members = membership.members
        for pod_name, raw in membership.invalid_costs:
            self._event(
                api.EVENT_WARNING,
                api.EV_INVALID_POD_DELETION_COST,
                f"Pod {pod_name} has annotation {api.ANNOTATION_POD_DELETION_COST}={raw!r}, which is not an int32:"
                " it counts as 0 when choosing the workers to remove",
            )
        if not membership.leaving:
            return
        removed = ", ".join(
            f"{tfconfig.general_name(self.name, api.WORKER, leaver.index)} ({_why(leaver)})"
            for leaver in membership.leaving
        )
        self._event(
            api.EVENT_NORMAL,
            api.EV_WORKER_SCALED_DOWN,
            f"Scaled down to {len(membership.members)} worker(s): removed {removed}; workers now "
            f"{memberlib.summary(membership.members)}",
        )
        self.metrics.extend(
            MetricInc(
                api.METRIC_WORKER_SCALED_DOWN, (("job_namespace", self.namespace), ("chosen_by", leaver.chosen_by))
            )
            for leaver in membership.leaving
        )

    def _indices(self, replica_type: str) -> Sequence[int]:
        """The indices of a replica type the job wants, ascending: the members for a dynamic job's
        Workers, 0..replicas-1 otherwise."""
        if self.membership is not None and replica_type == api.WORKER:
            return self.membership.members
        return range(self._replicas(replica_type))

    def _scale_down(self, replica_type: str, out: Outputs) -> None:
        """Delete the pods and services of indices the job no longer wants, highest index first:
        >= replicas for every type, as upstream; not a member for a dynamic job's Workers (their
        leaving is reported by :meth:`_plan_members`). Terminating objects are not deleted again;
        for other types the leaving pods still count (see the counting)."""
        wanted = set(self._indices(replica_type))
        pod_slots = self.pod_slots[replica_type]
        service_slots = self.service_slots[replica_type]
        for index in sorted({i for i in (*pod_slots, *service_slots) if i not in wanted}, reverse=True):
            for pod in pod_slots.get(index, []):
                if not podlib.is_terminating(pod):
                    out.scale_down.append(DeletePod(podlib.name(pod) or "", podlib.uid(pod), api.DELETE_SCALE_DOWN))
            for service in service_slots.get(index, []):
                if not podlib.is_terminating(service):
                    out.scale_down.append(
                        DeleteService(podlib.name(service) or "", podlib.uid(service), api.DELETE_SCALE_DOWN)
                    )

    # --- pods of one replica type (upstream semantics) ---------------------------------------
    def _take_creation(self) -> bool:
        """Spend one creation of this pass's budget; False when it is spent (the next pass goes on)."""
        if self.creations_left <= 0:
            return False
        self.creations_left -= 1
        return True

    def _create(self, replica_type: str, index: int, out: Outputs) -> bool:
        if not self._take_creation():
            return False
        if self.tf_configs is None:
            self.tf_configs = tfconfig.TFConfigs(self.job, self.config.cluster_domain)
        pod = podlib.build_pod(
            self.job, replica_type, index, self.config.cluster_domain, self.config.controller_name, self.tf_configs
        )
        if self.gang is not None:
            ganglib.prepare_pod(self.gang, pod, self.name, replica_type)
            if ganglib.custom_scheduler_set(self.job, self.gang):
                out.events.append(
                    Event(
                        api.EVENT_WARNING,
                        api.EV_SET_POD_TEMPLATE_SCHEDULER_NAME,
                        "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten",
                    )
                )
        out.creations.append(CreatePod(pod, replica_type, index))
        self.pods_created.add((replica_type, index))
        if podlib.template_sets_restart_policy(self.job, replica_type):
            out.events.append(
                Event(
                    api.EVENT_WARNING,
                    api.EV_SET_POD_TEMPLATE_RESTART_POLICY,
                    "Restart policy in pod template will be overwritten by restart policy in replica spec",
                )
            )
        return True

    def _exited_fact(self, pod: dict[str, Any], out: Outputs) -> None:
        code = podlib.exit_code(pod)
        if code is not None:
            out.facts.append(
                Event(
                    api.EVENT_NORMAL,
                    api.EV_EXITED_WITH_CODE,
                    f"Pod: {self.namespace}.{podlib.name(pod)} exited with code {code}",
                )
            )

    def _restartable(self, replica_type: str, pod: dict[str, Any]) -> bool:
        """Whether a failed (or terminating) pod of this type will come back by itself or by us."""
        policy = self.specs[replica_type]["restartPolicy"]
        if policy in (api.RESTART_ALWAYS, api.RESTART_ON_FAILURE):
            return True
        if policy == api.RESTART_EXIT_CODE:
            if podlib.phase(pod) != api.POD_FAILED:
                return True  # a terminating pod is recreated; its code is not a verdict
            return podlib.is_retryable_exit_code(podlib.exit_code_or_missing(pod))
        return False

    def _reconcile_replicas(self, replica_type: str, out: Outputs) -> Counts:
        """Pods of one type with upstream's semantics (every type of a non-dynamic job, and the
        non-Worker types of a dynamic one): create missing indices, restart failed pods as the
        restart policy allows, fail the job on a non-retryable exit code, count the rest."""
        replicas = self._replicas(replica_type)
        policy = self.specs[replica_type]["restartPolicy"]
        slots = self.pod_slots[replica_type]
        services = self.service_slots[replica_type]
        counts = Counts()
        for index in range(replicas):
            if not slots.get(index) and not self._create(replica_type, index, out):
                break
        for index in sorted(slots):
            if len(slots[index]) != 1:
                continue  # upstream: "too many pods" for one index -> neither counted nor touched
            pod = slots[index][0]
            in_range = index < replicas
            current_phase = podlib.phase(pod)
            terminating = podlib.is_terminating(pod)
            if in_range and terminating and not services.get(index):
                # Removed by us together with its service (suspend): it is leaving, not failing.
                continue
            if current_phase == api.POD_FAILED and not terminating and in_range:
                code = podlib.exit_code_or_missing(pod)
                if policy == api.RESTART_EXIT_CODE and not podlib.is_retryable_exit_code(code):
                    if self.pod_failure is None:
                        self.pod_failure = (
                            replica_type,
                            f'job "{self.name}" is failing because "{replica_type}" replica(s) failed.',
                        )
                    self._exited_fact(pod, out)
                elif self._restartable(replica_type, pod):
                    message = f"job {self.name} is restarting because {replica_type} replica(s) failed."
                    out.deletions.append(DeletePod(podlib.name(pod) or "", podlib.uid(pod), api.DELETE_RESTART))
                    out.events.append(Event(api.EVENT_WARNING, api.REASON_RESTARTING, message))
                    out.metrics.append(MetricInc(api.METRIC_JOBS_RESTARTED, self._job_labels()))
                    self._exited_fact(pod, out)
                else:
                    # restartPolicy Never: this failure finishes the job in this very pass, so the
                    # fact is reported exactly once.
                    self._exited_fact(pod, out)
            # Counting, as upstream: a snapshot of the pods that exist now. A terminating
            # Running pod counts as failed (upstream's shared job library does so; kept for non-dynamic types); an
            # out-of-range pod is being deleted by this very pass, so it counts as terminating now
            # rather than one pass later (which keeps the decision idempotent).
            leaving = terminating or not in_range
            if current_phase == api.POD_RUNNING and not leaving:
                counts.active += 1
            elif current_phase == api.POD_SUCCEEDED:
                counts.succeeded += 1
            elif current_phase == api.POD_FAILED or current_phase == api.POD_RUNNING:
                counts.failed += 1
                if not in_range or not self._restartable(replica_type, pod):
                    counts.permanent_failed += 1
        return counts

    def _reconcile_services(self, replica_type: str, out: Outputs) -> None:
        """Create the headless service of every wanted index that lacks one (never beyond replicas:
        fix for quirk Q6), unless the slot is waiting for its old pod to go."""
        slots = self.service_slots[replica_type]
        for index in self._indices(replica_type):
            if not slots.get(index) and self._service_wanted(replica_type, index):
                if not self._take_creation():
                    return
                service = podlib.build_service(self.job, replica_type, index, self.config.controller_name)
                out.creations.append(CreateService(service, replica_type, index))

    def _service_wanted(self, replica_type: str, index: int) -> bool:
        """Whether an index without a service should get one now.

        A service without a pod is how a vanished dynamic worker is recognised, so a service is
        only created together with its pod, for a pod that exists, or for a worker waiting for its
        replacement. A slot whose pod was removed by us (it terminates without its service) gets
        its service back together with the new pod."""
        slot = self.pod_slots[replica_type].get(index, [])
        if len(slot) == 1 and podlib.is_terminating(slot[0]):
            return self.dynamic and replica_type == api.WORKER and index in self.new_records
        if not (self.dynamic and replica_type == api.WORKER) or slot:
            return True
        record = self.new_records.get(index)
        return (replica_type, index) in self.pods_created or (
            record is not None and record.state == api.WORKER_STATE_REPLACING
        )

    # --- conditions (UpdateJobStatus) ----------------------------------------------------------
    def _update_conditions(self, counts: dict[str, Counts]) -> bool:
        """Set Running/Restarting/Succeeded/Failed from this pass's counts; True if now finished.

        Upstream's rules (UpdateJobStatus) with fixes: the first terminal outcome in type order
        wins and freezes (Q1); a type fails when it has failures no restart will repair, instead
        of "unless a Restarting condition exists" (Q3); dynamic Workers never fail the job.
        """
        if self.pod_failure is not None:
            replica_type, message = self.pod_failure
            if self._set(api.COND_FAILED, TRUE, api.REASON_FAILED, message):
                self._event(api.EVENT_WARNING, api.REASON_FAILED, message)
                self.metrics.append(MetricInc(api.METRIC_JOBS_FAILED, self._job_labels()))
            return is_finished(self.conditions)

        success_policy = self.job["spec"].get("successPolicy", api.SUCCESS_DEFAULT)
        running = restarting = False
        terminal: tuple[str, str, str] | None = None  # (condition, message, event type)
        for replica_type in self.types:
            c = counts[replica_type]
            replicas = self._replicas(replica_type)
            if self.has_chief and replica_type in api.CHIEF_TYPES:
                if c.active > 0:
                    running = True
                if replicas - c.succeeded == 0 and terminal is None:
                    terminal = (api.COND_SUCCEEDED, "", api.EVENT_NORMAL)
            elif not self.has_chief and replica_type == api.WORKER:
                if self._workers_succeeded(c, replicas, success_policy):
                    if terminal is None:
                        terminal = (api.COND_SUCCEEDED, "", api.EVENT_NORMAL)
                elif c.active > 0:
                    running = True
            if c.failed > 0 and not (self.dynamic and replica_type == api.WORKER):
                if c.permanent_failed > 0:
                    if terminal is None:
                        message = (
                            f"TFJob {self.namespace}/{self.name} has failed because "
                            f"{c.failed} {replica_type} replica(s) failed."
                        )
                        terminal = (api.COND_FAILED, message, api.EVENT_NORMAL)
                else:
                    restarting = True

        running_message = f"TFJob {self.namespace}/{self.name} is running."
        if terminal is None:
            if restarting:
                failing = next(t for t in self.types if counts[t].failed > 0 and not (self.dynamic and t == api.WORKER))
                self._set(
                    api.COND_RESTARTING,
                    TRUE,
                    api.REASON_RESTARTING,
                    f"job {self.name} is restarting because {failing} replica(s) failed.",
                )
            elif running:
                self._set(api.COND_RUNNING, TRUE, api.REASON_RUNNING, running_message)
            return False
        if running:
            # Upstream sets Running before the terminal condition in the same pass, which leaves
            # a Running=False entry behind (pinned by upstream's status tests).
            self._set(api.COND_RUNNING, TRUE, api.REASON_RUNNING, running_message)
        cond_type, message, event_type = terminal
        if cond_type == api.COND_SUCCEEDED:
            message = f"TFJob {self.namespace}/{self.name} successfully completed."
            if self._set(api.COND_SUCCEEDED, TRUE, api.REASON_SUCCEEDED, message):
                self._event(event_type, api.REASON_SUCCEEDED, message)
                self.metrics.append(MetricInc(api.METRIC_JOBS_SUCCESSFUL, self._job_labels()))
        elif self._set(api.COND_FAILED, TRUE, api.REASON_FAILED, message):
            self._event(event_type, api.REASON_FAILED, message)
            self.metrics.append(MetricInc(api.METRIC_JOBS_FAILED, self._job_labels()))
        return is_finished(self.conditions)

    def _workers_succeeded(self, c: Counts, replicas: int, success_policy: str) -> bool:
        worker0 = (
            success_policy != api.SUCCESS_ALL_WORKERS
            and 0 in self._indices(api.WORKER)  # a dynamic job may have removed worker 0
            and worker0_completed(self.job, [p for slot in self.pod_slots[api.WORKER].values() for p in slot])
        )
        if not self.dynamic:
            return replicas - c.succeeded == 0 or worker0
        # Dynamic: permanently failed workers are not waited for, scaled-down ones are not
        # counted, and at least one worker must have succeeded (replicas 0 is "paused", not done).
        if c.succeeded == 0:
            return False
        return replicas - c.succeeded - c.permanent_failed <= 0 or worker0


def _why(leaver: memberlib.Leaver) -> str:
    """Why a worker was chosen to leave, for the WorkerScaledDown event."""
    if leaver.chosen_by == api.CHOSEN_BY_LIST:
        return f"listed in spec.{api.SPEC_WORKERS_TO_DELETE}"
    if leaver.chosen_by == api.CHOSEN_BY_DELETION_COST:
        return f"pod-deletion-cost {leaver.cost}"
    return "highest index" if leaver.cost == 0 else f"highest index, pod-deletion-cost {leaver.cost}"


def _move_active_to_succeeded(replica_statuses: dict[str, Any]) -> None:
    """After success, upstream books still-active replicas as succeeded (once: active becomes 0)."""
    for entry in replica_statuses.values():
        if not isinstance(entry, dict):
            continue
        active = _int_or_none(entry.get("active")) or 0
        if active > 0:
            succeeded = _int_or_none(entry.get("succeeded")) or 0
            entry["succeeded"] = succeeded + active
            entry.pop("active", None)
