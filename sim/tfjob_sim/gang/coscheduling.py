"""The simulated scheduler-plugins coscheduling: kube-scheduler with the Coscheduling plugin, and the
scheduler-plugins controller that keeps a PodGroup's phase (v0.28.9, the version training-operator pins).

A round is one scheduling cycle per pending pod of the group: PreFilter (enough sibling pods, the group's
minResources fit), the default filters and score (the kubelet's :class:`~tfjob_sim.gang.common.Placement`),
Permit (bind when the quorum is there, else wait; the waiters time out together) and PostFilter (the whole
group is rejected unless the quorum is within 10 %), with kube-scheduler's events and messages.
"""

from __future__ import annotations

import structlog

from tfjob_sim.gang.common import (
    PERMIT_WAITING_SECONDS,
    SCHEDULER_PLUGINS,
    SP_CONTROLLER,
    SP_PODGROUPS,
    TERMINAL,
    Extra,
    GroupKey,
    GroupPods,
    GroupScheduler,
    add,
    as_int,
    omitempty,
    resource_vector,
    scheduler_name,
    task_order,
)

log = structlog.get_logger(__name__)


class CoschedulingScheduler(GroupScheduler):
    """The Coscheduling plugin's rounds and the PodGroup controller, for the groups handed to it."""

    def round(self, key: GroupKey) -> None:
        """kube-scheduler with the Coscheduling plugin, one scheduling cycle per pending pod of the group."""
        _, namespace, name = key
        members = self.members(key)
        pending = sorted(
            (p for p in GroupPods.of(members).pending if self.names.get(scheduler_name(p)) == SCHEDULER_PLUGINS),
            key=task_order,
        )
        if not pending:
            return
        pg = self.store.get(SP_PODGROUPS, namespace, name)
        if pg is None:
            # PreFilter passes without a group; Permit rejects on the chosen node.
            for pod in pending:
                node, message = self.placement.place(pod, {})
                self.placement.unschedulable(
                    pod, "0/1 nodes are available: 1 PodGroup not found." if node else message, scheduler_name(pod)
                )
            return
        spec = pg.get("spec") or {}
        min_member = as_int(spec.get("minMember"))
        full_name = f"{namespace}/{name}"
        total_nodes = len(self.placement.nodes())
        assigned = sum(
            1
            for p in members
            if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") not in TERMINAL
        )
        gap = self._prefilter(pg, members, min_member)
        if gap is not None:
            for pod in pending:
                pod_name = (pod.get("metadata") or {}).get("name", "")
                preemption = (
                    f"preemption: 0/{total_nodes} nodes are available: {total_nodes} Preemption is not "
                    "helpful for scheduling."
                )
                verdict, _rejected = _post_filter(preemption, assigned, min_member, full_name, pod_name)
                self.placement.unschedulable(
                    pod,
                    f"0/{total_nodes} nodes are available: {gap.format(pod=pod_name)}. {verdict}",
                    scheduler_name(pod),
                )
            return
        extra: Extra = {}
        waiting: list[tuple[dict, str]] = []
        for pod in pending:
            pod_name = (pod.get("metadata") or {}).get("name", "")
            node, message = self.placement.place(pod, extra)
            if node is None:
                head, sep, preemption = message.partition(" preemption: ")
                verdict, rejected = _post_filter(
                    "preemption: " + preemption if sep else "", assigned + len(waiting), min_member, full_name, pod_name
                )
                if rejected:  # the whole group is: its waiting pods too
                    for other, _node in waiting:
                        self.placement.unschedulable(other, "optimistic rejection in PostFilter", scheduler_name(other))
                    waiting, extra = [], {}
                self.placement.unschedulable(pod, f"{head} {verdict}".rstrip(), scheduler_name(pod))
                continue
            add(extra, node, self.placement.requests(pod))
            waiting.append((pod, node))
            if assigned + len(waiting) >= min_member:  # Permit: the quorum is there, allow every waiter
                for other, other_node in waiting:
                    self.placement.bind(other, other_node, scheduler_name(other))
                assigned += len(waiting)
                waiting, extra = [], {}
        timeout = as_int(spec.get("scheduleTimeoutSeconds")) or PERMIT_WAITING_SECONDS
        for pod, _node in waiting:  # nothing else will arrive: the waiters time out together
            self.placement.unschedulable(
                pod, f"rejected due to timeout after waiting {timeout}s at plugin Coscheduling", scheduler_name(pod)
            )

    def _prefilter(self, pg: dict, members: list[dict], min_member: int) -> str | None:
        """Coscheduling PreFilter: a message template ({pod} = the pod's name), or None when it passes."""
        meta = pg.get("metadata") or {}
        full_name = f"{meta.get('namespace')}/{meta.get('name')}"
        if len(members) < min_member:
            return (
                f"pre-filter pod {{pod}} cannot find enough sibling pods, current pods number: {len(members)}, "
                f"minMember of group: {min_member}"
            )
        want = (pg.get("spec") or {}).get("minResources")
        if not want:
            return None
        need = resource_vector(want) or {}
        need["pods"] = min_member
        own: dict[str, list[int]] = {}
        for pod in members:  # the group's own pods do not count against it
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in TERMINAL:
                cpu, mem = self.placement.requests(pod)
                usage = own.setdefault(node, [0, 0, 0])
                usage[0] += cpu
                usage[1] += mem
                usage[2] += 1
        remaining = {k: v for k, v in need.items() if v > 0}
        for node in self.placement.nodes():
            back = own.get(node.name, [0, 0, 0])
            free = {
                "cpu": node.cpu_m - node.used_cpu_m + back[0],
                "memory": node.memory - node.used_memory + back[1],
                "pods": node.pods - node.used_pods + back[2],
            }
            remaining = {k: v - free.get(k, 0) for k, v in remaining.items() if v - free.get(k, 0) > 0}
            if not remaining:
                return None
        gap = " ".join(f"{k}:{_format_amount(k, v)}" for k, v in sorted(remaining.items()))
        log.debug("coscheduling PreFilter: resource gap", podgroup=full_name, gap=gap)
        return f"resource gap: map[{gap}]"

    def controller(self, key: GroupKey) -> None:
        """scheduler-plugins-controller's PodGroup reconcile, repeated while it changes the phase (each
        step is its own status patch, as each is a reconcile of the real controller)."""
        _, namespace, name = key
        for _ in range(4):
            pg = self.store.get(SP_PODGROUPS, namespace, name)
            if pg is None:
                return
            status = pg.get("status") or {}
            phase = status.get("phase") or ""
            if phase in ("Finished", "Failed"):
                return
            pods = self.members(key)
            min_member = as_int((pg.get("spec") or {}).get("minMember"))
            new = dict(status)
            if phase == "":
                new["phase"] = "Pending"
            elif phase == "Pending":
                if len(pods) >= min_member:
                    new["phase"] = "Scheduling"
                    occupied = _occupied_by(sorted(pods, key=task_order)[0]) if pods else None
                    if occupied:
                        new["occupiedBy"] = occupied
            else:
                state = GroupPods.of(pods)
                running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
                new.update(running=running, succeeded=state.succeeded, failed=state.failed)
                if len(pods) < min_member:
                    new["phase"] = "Pending"
                else:
                    done = running + state.succeeded
                    new["phase"] = "Running" if done >= min_member else "Scheduling"
                    if state.failed and state.failed + done >= min_member:
                        new["phase"] = "Failed"
                    if state.succeeded >= min_member:
                        new["phase"] = "Finished"
            new = omitempty(new)
            if new == status:
                return
            patch = {k: v for k, v in new.items() if status.get(k) != v}
            patch.update({k: None for k in status if k not in new})
            self.store.patch(
                SP_PODGROUPS,
                namespace,
                name,
                "merge",
                {"status": patch},
                subresource="status",
                field_manager=SP_CONTROLLER,
            )


def _post_filter(preemption: str, assigned: int, min_member: int, group: str, pod: str) -> tuple[str, bool]:
    """The PostFilter part of a FitError (the default preemption's verdict, then Coscheduling's) and
    whether Coscheduling rejects the whole group: it does unless the quorum is there or short by at
    most 10 %."""
    if assigned >= min_member or (min_member - assigned) <= 0.1 * min_member:
        return preemption, False
    rejection = f"PodGroup {group} gets rejected due to Pod {pod} is unschedulable even after PostFilter."
    return (f"{preemption}, {rejection}" if preemption else rejection), True


def _occupied_by(pod: dict) -> str | None:
    meta = pod.get("metadata") or {}
    refs = sorted(
        f"{meta.get('namespace')}/{ref.get('name')}"
        for ref in meta.get("ownerReferences") or []
        if isinstance(ref, dict)
    )
    return ",".join(refs) or None


def _format_amount(name: str, amount: float) -> str:
    if name == "cpu":
        return f"{int(amount)}m" if amount % 1000 else str(int(amount // 1000))
    return str(int(amount)) if float(amount).is_integer() else str(amount)
