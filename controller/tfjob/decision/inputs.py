"""What one pass decides on, computed once when the pass is built and never changed after.

Why immutable: every feature of the decision reads the same indexed children, replica counts, old
times and settings, so none of them can depend on the order the others ran in. What moves forward
during a pass (the conditions and the two timestamps) is a separate value, :class:`JobState`, that
feature functions take and return.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from controller.runtime.jsonfields import field_dict, field_str

from .. import api, tfconfig
from .. import gang as ganglib
from .. import members as memberlib
from .. import pods as podlib
from ..conditions import find, format_time, parse_time, sanitize, set_condition
from ..dynamic import WorkerRecord, parse_worker_records
from .config import DecideConfig

Slots = dict[int, list[dict[str, Any]]]  # replica index -> the objects carrying it (normally one)


def int_or_none(value: Any) -> int | None:
    """``value`` if it is an int (a bool is not), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class JobInput:
    """What every pass knows, a job that fails validation included: identity, time, the old status,
    the children the job controls and the gang settings."""

    job: dict[str, Any]
    config: DecideConfig
    name: str
    namespace: str
    uid: str
    now_ts: float
    now_str: str
    old_status: dict[str, Any]
    run_policy: dict[str, Any]
    pods: list[dict[str, Any]]
    services: list[dict[str, Any]]
    gang: ganglib.Gang | None
    pod_group: dict[str, Any] | None
    foreign_pod_group: dict[str, Any] | None
    priority_classes: Mapping[str, int]

    def job_labels(self) -> tuple[tuple[str, str], ...]:
        """The label set of the job-level counters (created, deleted, successful, failed, restarted)."""
        return (("framework", api.FRAMEWORK), ("job_namespace", self.namespace))

    def ttl(self) -> int | None:
        """``runPolicy.ttlSecondsAfterFinished`` when it is a usable (non-negative) int, else None."""
        ttl = int_or_none(self.run_policy.get(api.RUN_TTL_SECONDS_AFTER_FINISHED))
        return ttl if ttl is not None and ttl >= 0 else None


@dataclass(frozen=True)
class PassInput(JobInput):
    """What a pass over a valid, defaulted job knows: the replica specs, the children indexed by
    (replica type, index), the old replica statuses and the dynamic workers' records."""

    specs: dict[str, dict[str, Any]]
    types: tuple[str, ...]
    dynamic: bool
    suspended: bool
    has_chief: bool
    first_pass: bool
    old_replica_statuses: dict[str, Any]
    records: dict[int, WorkerRecord]
    ps_records: dict[int, WorkerRecord]
    recorded_members: tuple[int, ...] | None
    pod_slots: dict[str, Slots]
    service_slots: dict[str, Slots]
    departed: dict[str, dict[int, dict[str, Any]]]
    tf_configs: tfconfig.TFConfigs

    def replicas(self, replica_type: str) -> int:
        """Desired replicas of a type in the spec (defaulted and validated, so always an int)."""
        replicas: int = self.specs[replica_type][api.REPLICA_REPLICAS]
        return replicas

    def restart_policy(self, replica_type: str) -> str:
        """The (defaulted) restartPolicy of a type in the spec."""
        policy: str = self.specs[replica_type][api.REPLICA_RESTART_POLICY]
        return policy

    def selector(self, replica_type: str) -> str:
        """The label selector of a type's pods, as ``replicaStatuses`` reports it."""
        return podlib.type_selector(self.name, replica_type, self.config.controller_name)

    def pods_of(self, replica_type: str) -> list[dict[str, Any]]:
        """Every slotted pod of a type."""
        return [p for slot in self.pod_slots[replica_type].values() for p in slot]

    def dynamic_workers(self) -> bool:
        """Whether the job has a Worker type run by the dynamic-worker state machine."""
        return self.dynamic and api.WORKER in self.specs


@dataclass(frozen=True)
class JobState:
    """The parts of the status a pass moves forward: conditions, startTime and completionTime."""

    conditions: list[dict[str, Any]]
    start_time: str | None
    completion_time: str | None

    def with_condition(
        self, inp: JobInput, cond_type: str, status: str, reason: str, message: str
    ) -> tuple[JobState, bool]:
        """The state with a condition set at the pass's time, and whether that was a transition."""
        updated = set_condition(self.conditions, cond_type, status, reason, message, inp.now_str)
        return replace(self, conditions=updated), updated is not self.conditions

    def finished_at(self, inp: JobInput) -> tuple[JobState, float]:
        """The state with completionTime set (to now if it had none: TTL counts from it), and its epoch."""
        state = self if self.completion_time is not None else replace(self, completion_time=inp.now_str)
        parsed = parse_time(state.completion_time)
        return state, parsed if parsed is not None else inp.now_ts


def old_state(old_status: dict[str, Any]) -> JobState:
    """The state as stored: usable conditions, and the timestamps that parse (others are dropped)."""

    def old_time(key: str) -> str | None:
        value = old_status.get(key)
        return value if parse_time(value) is not None else None

    return JobState(
        sanitize(old_status.get(api.STATUS_CONDITIONS)),
        old_time(api.STATUS_START_TIME),
        old_time(api.STATUS_COMPLETION_TIME),
    )


def _now_epoch(now: datetime) -> float:
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return now.timestamp()


def _owned(objects: Any, uid: str) -> list[dict[str, Any]]:
    if not isinstance(objects, list) or not uid:
        return []
    return [
        o for o in objects if isinstance(o, dict) and podlib.name(o) is not None and podlib.controller_uid(o) == uid
    ]


def _earlier_incarnation(obj: dict[str, Any], job_name: str) -> bool:
    refs = podlib.metadata(obj).get("ownerReferences")
    return isinstance(refs, list) and any(
        isinstance(r, dict) and r.get("controller") is True and r.get("kind") == api.KIND and r.get("name") == job_name
        for r in refs
    )


def job_input(
    job: dict[str, Any],
    old_status: dict[str, Any],
    pods: Any,
    services: Any,
    now: datetime,
    config: DecideConfig,
    pod_group: dict[str, Any] | None = None,
    priority_classes: Mapping[str, int] | None = None,
) -> JobInput:
    """The input of a pass over ``job`` (any dict, valid or not): children it does not control by uid
    are dropped, and a PodGroup is kept only with gang scheduling on."""
    return JobInput(**_common_fields(job, old_status, pods, services, now, config, pod_group, priority_classes))


def pass_input(
    job: dict[str, Any],
    old_status: dict[str, Any],
    pods: Any,
    services: Any,
    now: datetime,
    config: DecideConfig,
    pod_group: dict[str, Any] | None = None,
    priority_classes: Mapping[str, int] | None = None,
    departed: Any = None,
) -> PassInput:
    """The input of a pass over a *defaulted, validated* ``job``: :func:`job_input` plus the replica
    specs and the children grouped by (replica type, index), those without our labels left out, and
    the last departed pod of each slot (``departed`` in order of deletion: the later one wins)."""
    common = _common_fields(job, old_status, pods, services, now, config, pod_group, priority_classes)
    spec = job["spec"]
    specs: dict[str, dict[str, Any]] = spec[api.SPEC_REPLICA_SPECS]
    types = tuple(t for t in api.REPLICA_TYPES if t in specs)
    dynamic = spec.get(api.SPEC_ENABLE_DYNAMIC_WORKER) is True
    return PassInput(
        **common,
        specs=specs,
        types=types,
        dynamic=dynamic,
        suspended=common["run_policy"].get(api.RUN_SUSPEND) is True,
        has_chief=any(t in specs for t in api.CHIEF_TYPES),
        first_pass=find(sanitize(old_status.get(api.STATUS_CONDITIONS)), api.COND_CREATED) is None,
        old_replica_statuses=field_dict(old_status, api.STATUS_REPLICA_STATUSES),
        records=parse_worker_records(old_status) if dynamic else {},
        ps_records=parse_worker_records(old_status, api.STATUS_PARAMETER_SERVERS) if dynamic else {},
        recorded_members=memberlib.recorded(old_status) if dynamic else None,
        pod_slots=_slots(common["pods"], types),
        service_slots=_slots(common["services"], types),
        departed={
            t: {i: slot[-1] for i, slot in by_index.items()}
            for t, by_index in _slots(_owned(departed, common["uid"]), types).items()
        },
        tf_configs=tfconfig.TFConfigs(job, config.cluster_domain),
    )


def _slots(objects: Sequence[dict[str, Any]], types: Sequence[str]) -> dict[str, Slots]:
    """Objects grouped by (replica type, index); those without a known type label or index are left out."""
    by_label = {t.lower(): t for t in types}
    slots: dict[str, Slots] = {t: {} for t in types}
    for obj in objects:
        replica_type = by_label.get(podlib.replica_type_label(obj) or "")
        index = podlib.replica_index(obj)
        if replica_type is not None and index is not None:
            slots[replica_type].setdefault(index, []).append(obj)
    return slots


def _common_fields(
    job: dict[str, Any],
    old_status: dict[str, Any],
    pods: Any,
    services: Any,
    now: datetime,
    config: DecideConfig,
    pod_group: dict[str, Any] | None,
    priority_classes: Mapping[str, int] | None,
) -> dict[str, Any]:
    metadata = field_dict(job, "metadata")
    name = field_str(metadata, "name")
    uid = field_str(metadata, "uid")
    gang = ganglib.gang_of(config.gang_scheduler)
    owned_groups = _owned([pod_group], uid) if gang is not None else []
    # A group under the job's name controlled by someone else; not one of an earlier job of this name
    # that the garbage collector has yet to remove (the new job's own group follows it).
    foreign = (
        pod_group
        if gang is not None
        and isinstance(pod_group, dict)
        and not owned_groups
        and not _earlier_incarnation(pod_group, name)
        else None
    )
    return {
        "job": job,
        "config": config,
        "name": name,
        "namespace": field_str(metadata, "namespace"),
        "uid": uid,
        "now_ts": _now_epoch(now),
        "now_str": format_time(now),
        "old_status": old_status,
        "run_policy": field_dict(field_dict(job, "spec"), api.SPEC_RUN_POLICY),
        "pods": _owned(pods, uid),
        "services": _owned(services, uid),
        "gang": gang,
        "pod_group": owned_groups[0] if owned_groups else None,
        "foreign_pod_group": foreign,
        "priority_classes": priority_classes or {},
    }


def timer(seconds: float) -> tuple[float, ...]:
    """A wake-up in ``seconds``, or none when it is not a positive finite delay."""
    return (seconds,) if seconds > 0 and math.isfinite(seconds) else ()
