"""The process-wide settings of the decision, in one object the command line fills.

Why frozen and validated here: an unknown gang scheduler name must fail when the controller starts,
never inside a decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import api
from .. import gang as ganglib


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
