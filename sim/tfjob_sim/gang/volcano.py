"""The simulated Volcano scheduler (vc-scheduler v1.9 with its default queue): one session per job.

A session enqueues the job's PodGroup (the overcommit plugin: minResources against 1.2 x what is
allocatable), allocates its pending tasks all-or-nothing (the gang plugin's JobReady), backfills BestEffort
tasks, and writes the PodGroup's phase and conditions, the pods' PodScheduled conditions and the events
Volcano writes, with its messages.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from tfjob_sim.errors import ApiError
from tfjob_sim.events import object_reference
from tfjob_sim.gang.common import (
    DEFAULT_QUEUE,
    OVERCOMMIT_FACTOR,
    VOLCANO,
    VOLCANO_COMPONENT,
    VOLCANO_PODGROUPS,
    VOLCANO_QUEUES,
    VOLCANO_TASK_ANNOTATION,
    Extra,
    GroupKey,
    GroupPods,
    GroupScheduler,
    add,
    as_int,
    now,
    omitempty,
    resource_vector,
    scheduler_name,
    task_order,
)
from tfjob_sim.resources import set_condition


class VolcanoScheduler(GroupScheduler):
    """vc-scheduler: sessions for the groups the gang scheduler hands it."""

    def create_default_queue(self) -> None:
        """vc-scheduler creates its default queue at startup; the queue controller opens it."""
        if (
            self.store.registry.get(VOLCANO_QUEUES) is None
            or self.store.get(VOLCANO_QUEUES, None, DEFAULT_QUEUE) is not None
        ):
            return
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"reclaimable": True, "weight": 1},
        }
        try:
            self.store.create(VOLCANO_QUEUES, None, queue, field_manager="vc-scheduler")
        except ApiError as exc:
            if exc.code != 409:
                raise
            return
        self.store.patch(
            VOLCANO_QUEUES,
            None,
            DEFAULT_QUEUE,
            "merge",
            {"status": {"state": "Open", "allocated": {"cpu": "0", "memory": "0"}}},
            subresource="status",
            field_manager="vc-controller-manager",
        )

    def _queue_exists(self, name: str) -> bool:
        if self.store.registry.get(VOLCANO_QUEUES) is None:
            return True  # no queue API at all: nothing to check against
        return self.store.get(VOLCANO_QUEUES, None, name) is not None

    def session(self, key: GroupKey) -> None:
        """One vc-scheduler session for one job: enqueue, allocate, gang close, job status."""
        _, namespace, name = key
        pods = [p for p in self.members(key) if self.names.get(scheduler_name(p)) == VOLCANO]
        pg = self.store.get(VOLCANO_PODGROUPS, namespace, name)
        if pg is None:
            # Volcano's pod admission webhook refuses such pods; without webhooks here, they wait
            # with its message.
            for pod in GroupPods.of(pods).pending:
                pod_name = (pod.get("metadata") or {}).get("name", "")
                self._pod_condition(
                    pod,
                    "Unschedulable",
                    f'failed to get PodGroup for pod {namespace}/{pod_name}: {VOLCANO_PODGROUPS} "{name}" not found',
                )
            return
        spec = pg.get("spec") or {}
        status = pg.get("status") or {}
        if not self._queue_exists(spec.get("queue") or DEFAULT_QUEUE):
            return  # "Failed to find Queue": skipped silently, Pending for ever
        min_member = as_int(spec.get("minMember"))
        phase = status.get("phase") or ""
        state = GroupPods.of(pods)
        if phase in ("", "Pending"):
            if self._enqueueable(pg):
                phase = "Inqueue"
            else:
                self.placement.events.record(
                    object_reference(pg),
                    "Normal",
                    "Unschedulable",
                    "resource in cluster is overused",
                    component=VOLCANO_COMPONENT,
                )
        outcome = _Outcome()
        ready = len(state.bound) + state.succeeded
        # JobValid: enough live pods, in total and per task.
        valid = len(state.pending) + ready >= min_member and _task_minimums_met(
            spec, min_member, state.pending + state.bound + state.done
        )
        # BestEffort pods (no requests) are left to the backfill action and count as ready while pending.
        best_effort = [p for p in state.pending if self.placement.requests(p) == (0, 0)]
        if phase not in ("", "Pending") and valid:
            requesting = [p for p in state.pending if self.placement.requests(p) != (0, 0)]
            ready += self._allocate(requesting, state.bound + state.done + best_effort, spec, min_member, outcome)
            if _gang_ready(spec, min_member, state.bound + state.done + best_effort):
                ready += self._backfill(best_effort, outcome)
        if outcome.bound:
            state = GroupPods.of([self.store.get("pods", *_ns_name(p)) or p for p in pods])
        job_ready = _gang_ready(
            spec,
            min_member,
            state.bound + state.done + [p for p in state.pending if self.placement.requests(p) == (0, 0)],
        )
        histogram = self._histogram(state, outcome, min_member)
        if job_ready:
            cond = {
                "type": "Scheduled",
                "status": "True",
                "reason": "tasks in gang are ready to be scheduled",
                "message": "",
            }
            job_fit_errors = ""
        else:
            schedulable = len(outcome.discarded) + ready
            job_fit_errors = f"{min_member - schedulable}/{state.total} tasks in gang unschedulable: {histogram}"
            cond = {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": job_fit_errors,
            }
        if state.running and not job_ready:
            new_phase = "Unknown"
        elif len(state.bound) + state.succeeded >= min_member:
            new_phase = "Completed" if state.succeeded == len(state.bound) + state.succeeded else "Running"
        elif phase != "Inqueue":
            new_phase = "Pending"
        else:
            new_phase = phase
        new_status = omitempty(
            dict(
                status,
                phase=new_phase,
                running=state.running,
                succeeded=state.succeeded,
                failed=state.failed,
                conditions=_conditions(status.get("conditions"), cond),
            )
        )
        updated = _status_key(new_status) != _status_key(status)
        if updated:
            pg = self.store.update(
                VOLCANO_PODGROUPS, namespace, name, dict(pg, status=new_status), field_manager="vc-scheduler"
            )
        if new_phase in ("Unknown", "Pending", "Inqueue"):
            self.placement.events.record(
                object_reference(pg),
                "Warning",
                "Unschedulable",
                f"{len(state.pending)}/{state.total} tasks in gang unschedulable: {histogram}",
                component=VOLCANO_COMPONENT,
            )
        elif updated:
            self.placement.events.record(
                object_reference(pg), "Normal", "Scheduled", "pod group is ready", component=VOLCANO_COMPONENT
            )
        for pod in state.pending:
            uid = (pod.get("metadata") or {}).get("uid", "")
            if uid in outcome.discarded:
                meta = pod.get("metadata") or {}
                self._pod_condition(
                    pod,
                    "Schedulable",
                    f"Pod {meta.get('namespace')}/{meta.get('name')} "
                    f"can possibly be assigned to {outcome.discarded[uid]}",
                )
            else:
                self._pod_condition(
                    pod, "Unschedulable", outcome.fit_errors.get(uid) or job_fit_errors or "all nodes are unavailable"
                )

    def _allocate(self, pending: list[dict], ready: list[dict], spec: dict, min_member: int, outcome: _Outcome) -> int:
        """The allocate action's statement: place pending tasks in order until one fits nowhere; bind
        them all if the job is then ready (with the ``ready`` pods), else discard them. Returns how
        many were bound."""
        extra: Extra = {}
        placed: list[tuple[dict, str]] = []
        for pod in sorted(pending, key=task_order):
            node, reasons = self._fit(pod, extra)
            if node is None:
                outcome.fit_errors[(pod.get("metadata") or {}).get("uid", "")] = reasons
                break
            add(extra, node, self.placement.requests(pod))
            placed.append((pod, node))
        if placed and _gang_ready(spec, min_member, ready + [pod for pod, _node in placed]):
            for pod, node in placed:
                self._bind(pod, node)
            outcome.bound += len(placed)
            return len(placed)
        for pod, node in placed:
            outcome.discarded[(pod.get("metadata") or {}).get("uid", "")] = node
        return 0

    def _backfill(self, pending: list[dict], outcome: _Outcome) -> int:
        """The backfill action: BestEffort tasks bound one by one where they fit, until one fits nowhere."""
        bound = 0
        for pod in sorted(pending, key=task_order):
            node, reasons = self._fit(pod, {})  # node usage already includes what was just bound
            if node is None:
                outcome.fit_errors[(pod.get("metadata") or {}).get("uid", "")] = reasons
                break
            self._bind(pod, node)
            bound += 1
        outcome.bound += bound
        return bound

    def _fit(self, pod: dict, extra: Extra) -> tuple[str | None, str]:
        """Volcano's predicates: resources first (the first short one), then the node plugins; a failure
        reads "0/<ready nodes> nodes are unavailable: <histogram>."."""
        cpu, mem = self.placement.requests(pod)
        nodes = [n for n in self.placement.nodes() if n.ready]
        reasons: dict[str, int] = {}
        candidates = []
        for node in nodes:
            add_cpu, add_mem, add_pods = extra.get(node.name, (0, 0, 0))
            if cpu and node.used_cpu_m + add_cpu + cpu > node.cpu_m:
                failed = "Insufficient cpu"
            elif mem and node.used_memory + add_mem + mem > node.memory:
                failed = "Insufficient memory"
            else:
                found = self.placement.filter(node, pod, extra)
                failed = ("node(s) pod number exceeded" if found == "Too many pods" else found) if found else ""
            if failed:
                reasons[failed] = reasons.get(failed, 0) + 1
            else:
                candidates.append(node)
        if not candidates:
            parts = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
            return (
                None,
                f"0/{len(nodes)} nodes are unavailable: {parts}." if parts else f"0/{len(nodes)} nodes are unavailable",
            )
        return min(candidates, key=lambda n: self.placement.score(n, cpu, mem, extra.get(n.name))).name, ""

    def _enqueueable(self, pg: dict) -> bool:
        """The enqueue action: no minResources admits at once; else the overcommit plugin's check of
        minResources plus what Inqueue groups reserve against 1.2 x allocatable minus what is used."""
        want = (pg.get("spec") or {}).get("minResources")
        if want is None:
            return True
        need = resource_vector(want)
        if need is None:
            return False
        uid = (pg.get("metadata") or {}).get("uid")
        for other in self.store.list(VOLCANO_PODGROUPS)[0]:
            if (other.get("metadata") or {}).get("uid") == uid or (other.get("status") or {}).get("phase") != "Inqueue":
                continue
            reserved = resource_vector((other.get("spec") or {}).get("minResources") or {})
            for name, amount in (reserved or {}).items():
                need[name] = need.get(name, 0) + amount
        nodes = [n for n in self.placement.nodes() if n.ready]
        idle = {
            "cpu": sum(n.cpu_m for n in nodes) * OVERCOMMIT_FACTOR - sum(n.used_cpu_m for n in nodes),
            "memory": sum(n.memory for n in nodes) * OVERCOMMIT_FACTOR - sum(n.used_memory for n in nodes),
            "pods": sum(n.pods for n in nodes) * OVERCOMMIT_FACTOR - sum(n.used_pods for n in nodes),
        }
        return all(amount <= idle.get(name, 0) for name, amount in need.items() if amount > 0)

    @staticmethod
    def _histogram(state: GroupPods, outcome: _Outcome, min_member: int) -> str:
        """JobInfo.FitError: "pod group is not ready, <n> <task status>..., <m> minAvailable[; Pending: ...]"."""
        counts: dict[str, int] = {"minAvailable": min_member}
        statuses = (
            ("Pending", len(state.pending)),
            ("Running", state.running),
            ("Bound", len(state.bound) - state.running),
            ("Succeeded", state.succeeded),
            ("Failed", state.failed),
            ("Releasing", state.releasing),
        )
        for status_name, n in statuses:
            if n:
                counts[status_name] = n
        text = "pod group is not ready, " + ", ".join(sorted(f"{n} {k}" for k, n in counts.items()))
        if state.pending:
            schedulable = sum(1 for p in state.pending if (p.get("metadata") or {}).get("uid") in outcome.discarded)
            pending = {"Schedulable": schedulable, "Unschedulable": len(state.pending) - schedulable}
            text += "; Pending: " + ", ".join(sorted(f"{n} {k}" for k, n in pending.items() if n))
        return text

    def _pod_condition(self, pod: dict, reason: str, message: str) -> None:
        """taskUnschedulable: PodScheduled=False and a FailedScheduling event, only when they change."""
        status = pod.get("status") or {}
        old = (
            next(
                (c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") == "PodScheduled"),
                None,
            )
            or {}
        )
        if (old.get("status"), old.get("reason"), old.get("message")) == ("False", reason, message):
            return
        cond = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
        self.placement.events.record(
            object_reference(pod), "Warning", "FailedScheduling", message, component=VOLCANO_COMPONENT
        )
        self.placement.write_status(pod, {"conditions": set_condition(status.get("conditions") or [], cond, now())})

    def _bind(self, pod: dict, node: str) -> None:
        """vc-scheduler binds through the same subresource as kube-scheduler but reports with a core/v1 recorder."""
        meta = pod["metadata"]
        self.store.bind(meta.get("namespace"), meta["name"], {"target": {"kind": "Node", "name": node}})
        self.placement.events.record(
            object_reference(pod),
            "Normal",
            "Scheduled",
            f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}",
            component=VOLCANO_COMPONENT,
        )


def _task_minimums_met(spec: dict, min_member: int, pods: list[dict]) -> bool:
    """Per-task minimums (``minTaskMember``, tasks named by the volcano.sh/task-spec annotation) met by
    ``pods``; not checked when they add up to more than minMember, as Volcano skips them then."""
    minimums = {k: as_int(v) for k, v in (spec.get("minTaskMember") or {}).items()}
    if not minimums or min_member < sum(minimums.values()):
        return True
    actual: dict[str, int] = {}
    for pod in pods:
        task = ((pod.get("metadata") or {}).get("annotations") or {}).get(VOLCANO_TASK_ANNOTATION, "")
        actual[task] = actual.get(task, 0) + 1
    return all(actual.get(task, 0) >= minimum for task, minimum in minimums.items() if minimum)


def _gang_ready(spec: dict, min_member: int, ready: list[dict]) -> bool:
    """The gang plugin's JobReady: the ready pods (bound, succeeded, placed, pending BestEffort) reach
    minMember and every task's minimum."""
    return len(ready) >= min_member and _task_minimums_met(spec, min_member, ready)


@dataclass
class _Outcome:
    fit_errors: dict[str, str] = field(default_factory=dict)  # uid -> FitErrors message
    discarded: dict[str, str] = field(default_factory=dict)  # uid -> node it could have had
    bound: int = 0


def _ns_name(pod: dict) -> tuple[str, str]:
    meta = pod.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name", "")


def _conditions(conditions: Any, cond: dict) -> list[dict]:
    """UpdatePodGroupCondition: replace the condition of the same type, else append."""
    out = [dict(c) for c in conditions or [] if isinstance(c, dict)]
    stamped = omitempty(dict(cond, lastTransitionTime=now(), transitionID=_session_id()))
    for i, existing in enumerate(out):
        if existing.get("type") == cond["type"]:
            out[i] = stamped
            return out
    out.append(stamped)
    return out


def _status_key(status: dict) -> tuple:
    """isPodGroupStatusUpdated: everything but the conditions' lastTransitionTime and transitionID."""
    conditions = tuple(
        tuple(sorted((k, v) for k, v in c.items() if k not in ("lastTransitionTime", "transitionID")))
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    )
    return (status.get("phase"), status.get("running"), status.get("succeeded"), status.get("failed"), conditions)


def _session_id() -> str:
    """A session uid (vc-scheduler stamps each condition with the session that wrote it)."""
    return str(uuid.uuid4())
