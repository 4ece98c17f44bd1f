"""The status a pass writes: its conditions and timestamps, ``replicaStatuses`` and ``dynamicWorkers``.

Why one module: every way a pass ends (finished, suspended, failed on a limit, waiting for the gang,
the normal pass) writes the same status shape, differing only in which counts and records it carries.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import api
from ..dynamic import WorkerRecord, dynamic_status
from ..jsoncopy import json_copy
from ..outputs import Counts
from .inputs import JobInput, JobState, PassInput, int_or_none


def base_status(inp: JobInput, state: JobState) -> dict[str, Any]:
    """The old status with the pass's conditions and timestamps (a timestamp that is None is removed);
    a copy, the old status is not touched."""
    status = json_copy(inp.old_status)
    status[api.STATUS_CONDITIONS] = json_copy(state.conditions)
    for key, value in ((api.STATUS_START_TIME, state.start_time), (api.STATUS_COMPLETION_TIME, state.completion_time)):
        if value is None:
            status.pop(key, None)
        else:
            status[key] = value
    return status


def replica_statuses(inp: PassInput, counts: Mapping[str, Counts] | None = None) -> dict[str, Any]:
    """``replicaStatuses``: fresh ``counts`` for the spec's types if given, else the old entries carried
    over; entries of types no longer in the spec are kept as upstream does; the selector always filled."""
    result = json_copy(inp.old_replica_statuses)
    for replica_type in inp.types:
        if counts is not None:
            result[replica_type] = counts[replica_type].to_status(inp.selector(replica_type))
        else:
            entry = result.get(replica_type)
            entry = dict(entry) if isinstance(entry, dict) else {}
            entry[api.REPLICA_STATUS_SELECTOR] = inp.selector(replica_type)
            result[replica_type] = entry
    return result


def full_status(
    inp: PassInput,
    state: JobState,
    replicas: dict[str, Any],
    records: Mapping[int, WorkerRecord],
    members: Sequence[int] | None,
    ps_records: Mapping[int, WorkerRecord] | None = None,
) -> dict[str, Any]:
    """The complete status: :func:`base_status`, ``replicas`` as ``replicaStatuses``, and for a dynamic
    job ``dynamicWorkers`` from ``records``, ``members`` and ``ps_records`` (the old PS records when None;
    removed from any other job's status)."""
    status = base_status(inp, state)
    status[api.STATUS_REPLICA_STATUSES] = replicas
    if inp.dynamic:
        kept = inp.ps_records if ps_records is None else ps_records
        status[api.STATUS_DYNAMIC_WORKERS] = dynamic_status(dict(records), members, dict(kept))
    else:
        status.pop(api.STATUS_DYNAMIC_WORKERS, None)
    return status


def move_active_to_succeeded(replicas: dict[str, Any]) -> None:
    """After success, upstream books still-active replicas as succeeded (once: active becomes 0).
    Changes ``replicas`` (a status being built) in place."""
    for entry in replicas.values():
        if not isinstance(entry, dict):
            continue
        active = int_or_none(entry.get(api.REPLICA_STATUS_ACTIVE)) or 0
        if active > 0:
            succeeded = int_or_none(entry.get(api.REPLICA_STATUS_SUCCEEDED)) or 0
            entry[api.REPLICA_STATUS_SUCCEEDED] = succeeded + active
            entry.pop(api.REPLICA_STATUS_ACTIVE, None)


def without_active(replicas: dict[str, Any]) -> dict[str, Any]:
    """``replicas`` with no ``active`` count in any entry (a suspended job has no running replica)."""
    for entry in replicas.values():
        if isinstance(entry, dict):
            entry.pop(api.REPLICA_STATUS_ACTIVE, None)
    return replicas
