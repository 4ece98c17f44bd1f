"""Who is in a dynamic job: its worker members, who leaves when Worker replicas go down, and which
index joins when they go up.

Upstream removes the highest indices on a scale-down, whatever they are doing. A dynamic job instead
keeps a set of member indices, so that any worker can leave -- the one on a node about to be drained,
a straggler, the one with a faulty GPU -- and the others keep their pods, names, uids and TF_CONFIG.
After worker 1 of 0..4 leaves, the members are 0, 2, 3, 4: index 1 is a hole.

Holes are recorded, never inferred: the members live in ``status.dynamicWorkers.members`` (ascending),
written with the decision that changes them, so a controller restart, a relist or a standby taking over
sees the same job. A job with no readable record (new, just turned dynamic, or a record someone broke)
has the members 0..replicas-1, which is also what upstream's rule gives.

The rules of a pass are on :func:`plan`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import api
from . import pods as podlib

_INT32 = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.ParseInt(s, 10, 32) accepts
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_MAX_INDEX = 10**9  # indices fit a label and a name; larger recorded values are not ours


@dataclass(frozen=True)
class Leaver:
    """A member that leaves: its index, how it was chosen, the deletion cost read from its pod."""

    index: int
    chosen_by: str
    cost: int


@dataclass(frozen=True)
class Membership:
    """The outcome of one pass: the members after it (ascending), who left and who joined."""

    members: tuple[int, ...]
    leaving: tuple[Leaver, ...] = ()
    joining: tuple[int, ...] = ()
    invalid_costs: tuple[tuple[str, str], ...] = ()  # (pod name, annotation value) read as 0


def recorded(status: Any) -> tuple[int, ...] | None:
    """The members recorded in ``status.dynamicWorkers.members``, or None if there is no usable record
    (absent, or not a strictly ascending list of indices)."""
    dynamic = status.get(api.STATUS_DYNAMIC_WORKERS) if isinstance(status, dict) else None
    members = dynamic.get(api.STATUS_MEMBERS) if isinstance(dynamic, dict) else None
    if not isinstance(members, list):
        return None
    previous = -1
    for index in members:
        if not isinstance(index, int) or isinstance(index, bool) or not previous < index < _MAX_INDEX:
            return None
        previous = index
    return tuple(members)


def members_of(job: Any) -> tuple[int, ...] | None:
    """The worker indices a dynamic job wants now: its record, else 0..replicas-1 (None when the job is
    not dynamic or its Worker replicas are unreadable). For readers outside the decision (metrics)."""
    spec = job.get("spec") if isinstance(job, dict) else None
    if not isinstance(spec, dict) or spec.get(api.SPEC_ENABLE_DYNAMIC_WORKER) is not True:
        return None
    members = recorded(job.get("status"))
    if members is not None:
        return members
    specs = spec.get(api.SPEC_REPLICA_SPECS)
    worker = specs.get(api.WORKER) if isinstance(specs, dict) else None
    replicas = worker.get(api.REPLICA_REPLICAS, api.DEFAULT_REPLICAS) if isinstance(worker, dict) else None
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        return None
    return tuple(range(replicas))


def deletion_cost(pod: dict[str, Any]) -> tuple[int, str | None]:
    """The pod's deletion cost and, when the annotation is there but not an int32, its raw value
    (the cost is then 0, as a ReplicaSet reads it)."""
    annotations = podlib.metadata(pod).get("annotations")
    raw = annotations.get(api.ANNOTATION_POD_DELETION_COST) if isinstance(annotations, dict) else None
    if raw is None:
        return 0, None
    if isinstance(raw, str) and _INT32.fullmatch(raw):
        value = int(raw)
        if _INT32_MIN <= value <= _INT32_MAX:
            return value, None
    return 0, raw if isinstance(raw, str) else repr(raw)


def summary(members: Iterable[int]) -> str:
    """The members as kubectl shows them: runs of consecutive indices as ranges, "0,2-4"; "none"."""
    parts: list[str] = []
    run: list[int] = []
    for index in sorted(members):
        if run and index == run[-1] + 1:
            run.append(index)
            continue
        if run:
            parts.append(_run_text(run))
        run = [index]
    if run:
        parts.append(_run_text(run))
    return ",".join(parts) or "none"


def _run_text(run: list[int]) -> str:
    if len(run) == 1:
        return str(run[0])
    if len(run) == 2:
        return f"{run[0]},{run[1]}"
    return f"{run[0]}-{run[-1]}"


def plan(
    current: Sequence[int] | None,
    replicas: int,
    to_delete: Sequence[int],
    pod_slots: Mapping[int, list[dict[str, Any]]],
    service_slots: Mapping[int, list[dict[str, Any]]],
    records: Collection[int],
) -> Membership:
    """The members after this pass (rules below). ``current``: the recorded members (None:
    no record); ``to_delete``: ``spec.workersToDelete``; the slots: the Worker pods and services by
    index; ``records``: the indices with a failover record.

    With k the difference between the members and ``replicas``:

    * **Scale-down** (k members too many): the k members ranked first leave, ranked by
      1. a member whose pod we already removed (it terminates without its service, and no failover record):
         the executor records the members before it removes anyone, but should the record still be lost
         (another writer puts back an older status), the retry chooses the same worker again, not a second
         one; ranked among themselves as below;
      2. a member listed in ``spec.workersToDelete``, in the list's order (the explicit form, free of any
         race with annotations);
      3. the lowest ``controller.kubernetes.io/pod-deletion-cost`` of its pod (the annotation a ReplicaSet
         honours: an int32 as a decimal string; absent = 0; unparsable = 0, reported), ties broken by the
         highest index -- so a job without annotations loses its highest indices, as upstream.
    * **Scale-up** (k members missing): the k lowest free indices join (holes first, then appended), except
      indices listed in ``spec.workersToDelete``: a listed index is never refilled while it is listed.
    * A failover replaces a member at its own index (dynamic.py); it never changes the members.

    A leaving worker is reported by how it was chosen (``chosen_by``): listed in ``workersToDelete``; its
    deletion cost lower than that of a worker that stays; otherwise the highest index among equals.
    """
    members = tuple(range(replicas)) if current is None else tuple(current)
    excess = len(members) - replicas
    if excess > 0:
        return _scale_down(members, excess, to_delete, pod_slots, service_slots, records)
    if excess < 0:
        listed = set(to_delete)
        taken = set(members)
        joining: list[int] = []
        index = 0
        while len(joining) < -excess:
            if index not in taken and index not in listed:
                joining.append(index)
            index += 1
        return Membership(tuple(sorted((*members, *joining))), joining=tuple(joining))
    return Membership(members)


def _scale_down(
    members: tuple[int, ...],
    excess: int,
    to_delete: Sequence[int],
    pod_slots: Mapping[int, list[dict[str, Any]]],
    service_slots: Mapping[int, list[dict[str, Any]]],
    records: Collection[int],
) -> Membership:
    member_set = set(members)
    costs: dict[int, int] = {}
    invalid: list[tuple[str, str]] = []
    for index in members:
        pods = pod_slots.get(index, [])
        read = [deletion_cost(pod) for pod in pods]
        costs[index] = min((cost for cost, _ in read), default=0)
        invalid.extend((podlib.name(pod) or "", raw) for pod, (_, raw) in zip(pods, read, strict=True) if raw)

    def removed_by_us(index: int) -> bool:
        # A pod that terminates without its service, and no failover of ours: our scale-down (or suspension).
        # A member with no pod at all is not told apart from one whose pod never came (a failed create), which
        # must not jump the queue: the highest index still goes first then, as upstream.
        pods = pod_slots.get(index, [])
        return (
            bool(pods)
            and all(podlib.is_terminating(pod) for pod in pods)
            and not service_slots.get(index)
            and index not in records
        )

    def cheapest_first(indices: Iterable[int]) -> list[int]:
        return sorted(indices, key=lambda i: (costs[i], -i))

    ranked = cheapest_first(i for i in members if removed_by_us(i))
    ranked += [i for i in dict.fromkeys(to_delete) if i in member_set and i not in ranked]
    by_cost = cheapest_first(i for i in members if i not in ranked)
    cost_decides = len(ranked) < excess
    chosen = (ranked + by_cost)[:excess]
    staying = [i for i in members if i not in chosen]
    highest_staying_cost = max((costs[i] for i in staying), default=None)
    listed = set(to_delete)
    leaving = tuple(
        Leaver(
            index,
            api.CHOSEN_BY_LIST
            if index in listed
            else api.CHOSEN_BY_DELETION_COST
            if highest_staying_cost is not None and costs[index] < highest_staying_cost
            else api.CHOSEN_BY_HIGHEST_INDEX,
            costs[index],
        )
        for index in chosen
    )
    return Membership(
        tuple(staying),
        leaving=leaving,
        invalid_costs=tuple(invalid) if cost_decides else (),
    )
