"""The simulated pod garbage collector: pods bound to a node that no longer exists.

Why a module of its own: no kubelet will ever confirm such a pod's deletion, so kube-controller-manager's
PodGC fails it and force-deletes it; that is neither the scheduler's, the kubelet's nor the node
lifecycle controller's job (a NotReady node's pods wait for their node instead).

Contract: :meth:`PodGC.collect_orphan` handles one pod whose node is gone, for the worker
(tfjob_sim.kubelet.Kubelet): after ``pod_gc_orphan_seconds`` of quarantine (the node may come back) it
writes a DisruptionTarget/DeletionByPodGC condition and phase Failed (unless already terminal), then
deletes the pod with grace 0. Once per pod.
"""

from __future__ import annotations

from typing import Any

import anyio

from tfjob_sim.nodestate import NodeState
from tfjob_sim.podstate import TERMINAL_PHASES, _PodRecord, now_timestamp
from tfjob_sim.resources import set_condition


class PodGC:
    """kube-controller-manager's PodGC for orphaned pods, over :class:`~tfjob_sim.nodestate.NodeState`."""

    def __init__(self, state: NodeState) -> None:
        self._state = state

    def collect_orphan(self, pod: dict, rec: _PodRecord) -> float | None:
        """Fail and force-delete ``pod`` once its quarantine is over; returns when that is, or None
        when done. The quarantine starts when the worker first finds the pod orphaned."""
        state = self._state
        if rec.gc_done:
            return None
        now = anyio.current_time()
        if rec.orphan_since is None:
            rec.orphan_since = now
        due = rec.orphan_since + state.config.pod_gc_orphan_seconds * state.scale
        if now < due:
            return due
        status = pod.get("status") or {}
        cond = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByPodGC",
            "message": "PodGC: node no longer exists",
        }
        update: dict[str, Any] = {"conditions": set_condition(status.get("conditions") or [], cond, now_timestamp())}
        if status.get("phase") not in TERMINAL_PHASES:
            update["phase"] = "Failed"
        state.write_status(pod, update)
        rec.gc_done = True
        state.delete_now(pod)
        return None

    def node_back(self, rec: _PodRecord) -> None:
        """The pod's node exists (again): a later loss starts a new quarantine."""
        rec.orphan_since = None
