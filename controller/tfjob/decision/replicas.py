"""Which replica indices the job wants, and creating the pod of one within the pass's budget.

Why here: every replica type, the dynamic Workers included, creates its pods the same way (the
TF_CONFIG, the gang's marks, the template warnings), and one budget bounds a pass's creations.
"""

from __future__ import annotations

from collections.abc import Sequence

from .. import api
from .. import gang as ganglib
from .. import members as memberlib
from .. import pods as podlib
from ..actions import CreatePod, Event
from ..outputs import Outputs
from .inputs import PassInput


def creation_budget(inp: PassInput) -> int:
    """How many pods and services this pass may create in all: fewer on a job's first pass, so even the
    largest job gets ``Created`` and its replica statuses soon; never less than one."""
    budget = inp.config.first_pass_creations if inp.first_pass else inp.config.max_creations
    return max(budget, 1)


def wanted_indices(inp: PassInput, membership: memberlib.Membership | None, replica_type: str) -> Sequence[int]:
    """The indices of a replica type the job wants, ascending: the members planned for a dynamic job's
    Workers (``membership``), 0..replicas-1 otherwise."""
    if membership is not None and replica_type == api.WORKER:
        return membership.members
    return range(inp.replicas(replica_type))


def create_pod(inp: PassInput, replica_type: str, index: int, out: Outputs, limit: int) -> bool:
    """Append the creation of the pod of (``replica_type``, ``index``) to ``out``, with the Warnings its
    template calls for; False, creating nothing, once ``out`` holds ``limit`` creations (the budget left
    to this type: the next pass goes on)."""
    if len(out.creations) >= limit:
        return False
    cfg = inp.config
    pod = podlib.build_pod(inp.job, replica_type, index, cfg.cluster_domain, cfg.controller_name, inp.tf_configs)
    if inp.gang is not None:
        ganglib.prepare_pod(inp.gang, pod, inp.name, replica_type)
        if ganglib.custom_scheduler_set(inp.job, inp.gang):
            out.events.append(
                Event(
                    api.EVENT_WARNING,
                    api.EV_SET_POD_TEMPLATE_SCHEDULER_NAME,
                    "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten",
                )
            )
    out.creations.append(CreatePod(pod, replica_type, index))
    if podlib.template_sets_restart_policy(inp.job, replica_type):
        out.events.append(
            Event(
                api.EVENT_WARNING,
                api.EV_SET_POD_TEMPLATE_RESTART_POLICY,
                "Restart policy in pod template will be overwritten by restart policy in replica spec",
            )
        )
    return True
