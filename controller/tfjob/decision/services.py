"""The headless service of every wanted replica index.

Why its own rule: a service without a pod is how a vanished dynamic worker is recognised, so when a
service may be created is part of the failover logic, not a detail of pod creation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from .. import api
from .. import pods as podlib
from ..actions import CreatePod, CreateService
from ..dynamic import WorkerRecord
from ..outputs import Outputs
from .inputs import PassInput


def reconcile_services(
    inp: PassInput,
    replica_type: str,
    indices: Sequence[int],
    new_records: Mapping[int, WorkerRecord],
    out: Outputs,
    limit: int,
) -> None:
    """Append to ``out`` the service of every wanted index in ``indices`` that lacks one (never beyond
    replicas: fix for quirk Q6) and should have one now (:func:`service_wanted`), until ``out`` holds
    ``limit`` creations. ``new_records`` are the dynamic Workers' records this pass writes."""
    slots = inp.service_slots[replica_type]
    created = {a.index for a in out.creations if isinstance(a, CreatePod) and a.replica_type == replica_type}
    for index in indices:
        if not slots.get(index) and service_wanted(inp, replica_type, index, new_records, created):
            if len(out.creations) >= limit:
                return
            service = podlib.build_service(inp.job, replica_type, index, inp.config.controller_name)
            out.creations.append(CreateService(service, replica_type, index))


def service_wanted(
    inp: PassInput,
    replica_type: str,
    index: int,
    new_records: Mapping[int, WorkerRecord],
    created: Collection[int],
) -> bool:
    """Whether an index without a service should get one now. ``created``: the indices of this type
    whose pod this pass creates.

    A dynamic worker's service is only created together with its pod, for a pod that exists, or for a
    worker waiting for its replacement. A slot whose pod was removed by us (it terminates without its
    service) gets its service back together with the new pod. Other types always get theirs."""
    dynamic_worker = inp.dynamic and replica_type == api.WORKER
    slot = inp.pod_slots[replica_type].get(index, [])
    if len(slot) == 1 and podlib.is_terminating(slot[0]):
        return dynamic_worker and index in new_records
    if not dynamic_worker or slot:
        return True
    record = new_records.get(index)
    return index in created or (record is not None and record.state == api.WORKER_STATE_REPLACING)
