"""An oracle for the spec of a dynamic TFJob: from the history of what the user did to it, what the cluster must
show once the controller has settled. A model of its own of the dynamic-worker rules of
docs/tfjob-compatibility.md (section 3: classification, back-off, the status record, members and holes, the
parameter servers), written from that document alone: it imports nothing of the controller, so a misreading of
the rules by either shows up as a disagreement.

The model (for ``enableDynamicWorker: true`` jobs):

* **Members.** A new job's members are ``0..replicas-1``. When ``Worker.replicas`` goes down by k, k members
  leave: first those listed in ``spec.workersToDelete`` (in the list's order; a listed index that is not a
  member is ignored), then the members whose pod has the lowest ``controller.kubernetes.io/pod-deletion-cost``
  (absent, or not an int32: 0), ties broken by the highest index. When it goes up, the lowest indices that are
  neither members nor listed join. Members are recorded in ``status.dynamicWorkers.members``; each has one
  running pod and one service named ``<job>-worker-<i>``, nothing else exists for workers, and
  ``replicaStatuses.Worker.active`` counts the members.
* **Failover.** A disrupted worker (deleted, evicted) or one that failed by itself in a retryable way (an OOM
  kill under ``restartPolicy: ExitCode``) is replaced at its own index: a new pod (the deletion cost was on the
  old one's annotations), the same name; the members do not change. Its record counts the failovers of the
  streak (``failovers``), the own failures among them (``failures``) and the last reason (``Deleted``,
  ``Evicted``, ``OOMKilled``). A disrupted PS is re-created at its index likewise, with a record of its own
  under ``parameterServers``. The records of workers that leave are dropped.
* **Suspension.** Suspending removes every pod and service and clears every record; the members stay (they are
  the job's, not its pods'), and stay as they are while the job is suspended, whatever its replicas say.
  Resuming applies the replicas to them by the same rules (no pods then: every cost is 0) and creates a pod
  and a service per member and per PS, all new. (The document does not say what scaling a suspended job does
  to its members; this is what the controller does, and what the oracle holds it to.)
* **Conditions.** ``Created`` and then ``Running`` are True while the job runs; suspended: ``Suspended`` True and
  ``Running`` not True; resumed: ``Running`` True and ``Suspended`` False.
* **Other runPolicy fields** (``cleanPodPolicy``, ``backoffLimit``, a far ``activeDeadlineSeconds``,
  ``ttlSecondsAfterFinished``) change nothing while the job runs, and no pod is replaced for them.
* **Deletion.** A deleted job leaves nothing.

Changes applied *at once* (without waiting for the controller in between) may be seen by the controller
together: :func:`outcomes` gives every outcome a controller may legitimately reach, one per subsequence of the
batch that ends with its last change (the intermediate specs it may or may not have observed).

Also given: which pods must have been kept since the previous settled state (:attr:`Expected.generations`):
a slot keeps its pod unless it was failed over, joined, or the job was resumed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class Spec:
    """The parts of a dynamic TFJob's spec the model reads."""

    workers: int
    ps: int = 0
    workers_to_delete: tuple[int, ...] = ()
    suspend: bool = False
    run_policy: tuple[tuple[str, object], ...] = ()  # other runPolicy fields, which change nothing while running


# --- what the user does --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Create:
    spec: Spec


@dataclass(frozen=True)
class SetSpec:
    spec: Spec


@dataclass(frozen=True)
class SetCost:
    """Annotate worker ``index``'s current pod with a deletion cost (None: remove the annotation)."""

    index: int
    cost: str | None


@dataclass(frozen=True)
class Disrupt:
    """``kind``: delete (Deleted), evict (Evicted through the API), oom (exit 137: OOMKilled, an own failure)."""

    replica_type: str  # "Worker" or "PS"
    index: int
    kind: str


@dataclass(frozen=True)
class DeleteJob:
    pass


Step = Create | SetSpec | SetCost | Disrupt | DeleteJob
REASONS = {"delete": "Deleted", "evict": "Evicted", "oom": "OOMKilled"}


# --- what the cluster must show -------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    failovers: int
    last_reason: str
    failures: int = 0


@dataclass
class Expected:
    """The settled state. ``generations``: slot name -> how many pods that slot has had; a slot whose generation
    did not change between two settled states kept its pod (same uid)."""

    exists: bool = True
    spec: Spec = field(default_factory=lambda: Spec(0))
    members: tuple[int, ...] = ()
    costs: dict[int, str | None] = field(default_factory=dict)  # member -> its current pod's annotation
    workers: dict[int, Record] = field(default_factory=dict)
    parameter_servers: dict[int, Record] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)
    created: bool = False

    def copy(self) -> Expected:
        return replace(
            self,
            costs=dict(self.costs),
            workers=dict(self.workers),
            parameter_servers=dict(self.parameter_servers),
            generations=dict(self.generations),
        )

    def pods(self, job: str) -> list[str]:
        """The live pods (and as many services, same names), sorted."""
        if not self.exists or self.spec.suspend:
            return []
        names = [f"{job}-worker-{i}" for i in self.members] + [f"{job}-ps-{i}" for i in range(self.spec.ps)]
        return sorted(names)

    def true_conditions(self) -> set[str]:
        if not self.exists:
            return set()
        return {"Created", "Suspended"} if self.spec.suspend else {"Created", "Running"}

    def active(self) -> dict[str, int]:
        if not self.exists or self.spec.suspend:
            return {"Worker": 0, "PS": 0} if self.spec.ps else {"Worker": 0}
        out = {"Worker": len(self.members)}
        if self.spec.ps:
            out["PS"] = self.spec.ps
        return out


def cost_value(annotation: str | None) -> int:
    """The cost a ReplicaSet would read: an int32 in decimal (``+``/``-`` allowed), anything else 0."""
    if annotation is None:
        return 0
    text = annotation.strip() if annotation == annotation.strip() else None
    if not text:
        return 0
    digits = text[1:] if text[0] in "+-" else text
    if not digits.isdigit() or not digits.isascii():
        return 0
    value = int(text)
    return value if INT32[0] <= value <= INT32[1] else 0


def leavers(members: Sequence[int], listed: Sequence[int], costs: dict[int, str | None], k: int) -> list[int]:
    """The k members that leave, in the order chosen."""
    chosen = [i for i in dict.fromkeys(listed) if i in members][:k]
    rest = [i for i in members if i not in chosen]
    rest.sort(key=lambda i: (cost_value(costs.get(i)), -i))
    return chosen + rest[: k - len(chosen)]


def joiners(members: Sequence[int], listed: Sequence[int], k: int) -> list[int]:
    """The k indices that join: the lowest that are neither members nor listed."""
    taken = set(members) | set(listed)
    return list(itertools.islice((i for i in itertools.count() if i not in taken), max(k, 0)))


def _bump(state: Expected, slot: str) -> None:
    state.generations[slot] = state.generations.get(slot, 0) + 1


def apply(state: Expected, step: Step, job: str) -> Expected:
    """The settled state after ``step``."""
    state = state.copy()
    if isinstance(step, Create):
        state = Expected(spec=step.spec, created=True)
        state.members = tuple(range(step.spec.workers))
        for i in state.members:
            _bump(state, f"{job}-worker-{i}")
        for i in range(step.spec.ps):
            _bump(state, f"{job}-ps-{i}")
        return state
    if not state.exists:
        return state
    if isinstance(step, DeleteJob):
        return Expected(exists=False, spec=state.spec)
    if isinstance(step, SetCost):
        if step.index in state.members and not state.spec.suspend:
            state.costs[step.index] = step.cost
        return state
    if isinstance(step, Disrupt):
        if state.spec.suspend:
            return state
        if step.replica_type == "Worker" and step.index in state.members:
            old = state.workers.get(step.index)
            own = step.kind == "oom"
            state.workers[step.index] = Record(
                (old.failovers if old else 0) + 1,
                REASONS[step.kind],
                (old.failures if old else 0) + (1 if own else 0),
            )
            state.costs.pop(step.index, None)
            _bump(state, f"{job}-worker-{step.index}")
        elif step.replica_type == "PS" and step.index < state.spec.ps:
            old = state.parameter_servers.get(step.index)
            state.parameter_servers[step.index] = Record((old.failovers if old else 0) + 1, REASONS[step.kind])
            _bump(state, f"{job}-ps-{step.index}")
        return state
    assert isinstance(step, SetSpec)
    new, old = step.spec, state.spec
    if new.suspend and not old.suspend:
        state.workers.clear()
        state.parameter_servers.clear()
        state.costs.clear()
    if not new.suspend:  # a suspended job's members wait for its resumption
        members = list(state.members)
        if new.workers < len(members):
            for i in leavers(members, new.workers_to_delete, state.costs, len(members) - new.workers):
                members.remove(i)
                state.workers.pop(i, None)
                state.costs.pop(i, None)
        elif new.workers > len(members):
            for i in joiners(members, new.workers_to_delete, new.workers - len(members)):
                members.append(i)
                if not old.suspend:
                    _bump(state, f"{job}-worker-{i}")
        state.members = tuple(sorted(members))
    if old.suspend and not new.suspend:
        for i in state.members:
            _bump(state, f"{job}-worker-{i}")
        for i in range(new.ps):
            _bump(state, f"{job}-ps-{i}")
    state.spec = new
    return state


def expect(history: Iterable[Step], job: str) -> Expected:
    """The settled state after ``history``, each step settled before the next."""
    state = Expected(exists=False)
    for step in history:
        state = apply(state, step, job)
    return state


def outcomes(state: Expected, batch: Sequence[SetSpec], job: str) -> list[Expected]:
    """Every settled state a controller may reach from ``state`` after the spec changes of ``batch`` were made at
    once: it observes its last change and any subset of the ones before, in order."""
    if not batch:
        return [state]
    *early, last = batch
    found: list[Expected] = []
    for size in range(len(early) + 1):
        for seen in itertools.combinations(early, size):
            result = state
            for step in (*seen, last):
                result = apply(result, step, job)
            key = (result.members, result.workers, result.generations)
            if all(key != (other.members, other.workers, other.generations) for other in found):
                found.append(result)
    return found
