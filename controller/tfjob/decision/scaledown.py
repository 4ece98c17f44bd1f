"""Scale-down: removing the pods and services of indices the job no longer wants, and for a dynamic
job choosing (members.py) and reporting who leaves.

Why the report is here: the status write that records the new members is the transition, so the
event and metric of a worker's leaving are decided with the plan, once.
"""

from __future__ import annotations

from collections.abc import Collection

from .. import api, tfconfig
from .. import members as memberlib
from .. import pods as podlib
from ..actions import DeletePod, DeleteService, Event, MetricInc
from ..outputs import Outputs
from .effects import Effects
from .inputs import PassInput


def scale_down(inp: PassInput, replica_type: str, wanted: Collection[int], out: Outputs) -> None:
    """Append to ``out.scale_down`` the deletion of the pods and services of indices not ``wanted``,
    highest index first: >= replicas for every type, as upstream; not a member for a dynamic job's
    Workers. Terminating objects are not deleted again."""
    wanted = set(wanted)
    pod_slots = inp.pod_slots[replica_type]
    service_slots = inp.service_slots[replica_type]
    for index in sorted({i for i in (*pod_slots, *service_slots) if i not in wanted}, reverse=True):
        for pod in pod_slots.get(index, []):
            if not podlib.is_terminating(pod):
                out.scale_down.append(DeletePod(podlib.name(pod) or "", podlib.uid(pod), api.DELETE_SCALE_DOWN))
        for service in service_slots.get(index, []):
            if not podlib.is_terminating(service):
                out.scale_down.append(
                    DeleteService(podlib.name(service) or "", podlib.uid(service), api.DELETE_SCALE_DOWN)
                )


def plan_members(inp: PassInput) -> tuple[memberlib.Membership, Effects]:
    """Who is in the dynamic job after this pass (members.py), with its report: a Warning for each
    unreadable deletion cost, and who left and why (one event, one metric increment per leaver).
    Needs a dynamic job with a Worker type."""
    spec_list = inp.job["spec"].get(api.SPEC_WORKERS_TO_DELETE) or []
    membership = memberlib.plan(
        inp.recorded_members,
        inp.replicas(api.WORKER),
        spec_list,
        inp.pod_slots[api.WORKER],
        inp.service_slots[api.WORKER],
        inp.records,
    )
    events = [
        Event(
            api.EVENT_WARNING,
            api.EV_INVALID_POD_DELETION_COST,
            f"Pod {pod_name} has annotation {api.ANNOTATION_POD_DELETION_COST}={raw!r}, which is not an int32:"
            " it counts as 0 when choosing the workers to remove",
        )
        for pod_name, raw in membership.invalid_costs
    ]
    if not membership.leaving:
        return membership, Effects(events=tuple(events))
    removed = ", ".join(
        f"{tfconfig.general_name(inp.name, api.WORKER, leaver.index)} ({why(leaver)})" for leaver in membership.leaving
    )
    events.append(
        Event(
            api.EVENT_NORMAL,
            api.EV_WORKER_SCALED_DOWN,
            f"Scaled down to {len(membership.members)} worker(s): removed {removed}; workers now "
            f"{memberlib.summary(membership.members)}",
        )
    )
    metrics = tuple(
        MetricInc(api.METRIC_WORKER_SCALED_DOWN, (("job_namespace", inp.namespace), ("chosen_by", leaver.chosen_by)))
        for leaver in membership.leaving
    )
    return membership, Effects(events=tuple(events), metrics=metrics)


def why(leaver: memberlib.Leaver) -> str:
    """Why a worker was chosen to leave, for the WorkerScaledDown event."""
    if leaver.chosen_by == api.CHOSEN_BY_LIST:
        return f"listed in spec.{api.SPEC_WORKERS_TO_DELETE}"
    if leaver.chosen_by == api.CHOSEN_BY_DELETION_COST:
        return f"pod-deletion-cost {leaver.cost}"
    return "highest index" if leaver.cost == 0 else f"highest index, pod-deletion-cost {leaver.cost}"
