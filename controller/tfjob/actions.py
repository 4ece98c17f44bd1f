"""The vocabulary of a reconcile decision: what to create or delete, what to tell, what to count.

Why a separate module: :func:`controller.tfjob.decide.decide` is pure and the executor is thin;
these frozen dataclasses are the whole contract between them.

What applying a :class:`Decision` means is on the class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CreatePod:
    pod: dict[str, Any]
    replica_type: str
    index: int


@dataclass(frozen=True)
class DeletePod:
    name: str
    uid: str
    reason: str  # api.DELETE_*: ScaleDown, Restart, Failover, Cleanup, Suspend, Deadline, BackoffLimit


@dataclass(frozen=True)
class CreateService:
    service: dict[str, Any]
    replica_type: str
    index: int


@dataclass(frozen=True)
class DeleteService:
    name: str
    uid: str
    reason: str


@dataclass(frozen=True)
class DeleteJob:
    reason: str  # api.DELETE_TTL


@dataclass(frozen=True)
class CreatePodGroup:
    """Create the job's PodGroup (gang scheduling); sent before any pod of the pass."""

    pod_group: dict[str, Any]


@dataclass(frozen=True)
class UpdatePodGroup:
    """Replace the job's PodGroup (full object, carrying the resourceVersion it was read at)."""

    pod_group: dict[str, Any]


@dataclass(frozen=True)
class DeletePodGroup:
    """Delete the job's PodGroup (finished or suspended job). The executor reports it with upstream's
    ``JobTerminated`` and ``SuccessfulDeletePodGroup`` / ``FailedDeletePodGroup`` events."""

    name: str
    uid: str


@dataclass(frozen=True)
class Event:
    type: str  # "Normal" | "Warning"
    reason: str
    message: str


@dataclass(frozen=True)
class MetricInc:
    """Increment counter ``name`` by one for the label set ``labels`` (sorted (key, value) pairs)."""

    name: str
    labels: tuple[tuple[str, str], ...]


Action = (
    CreatePod | DeletePod | CreateService | DeleteService | DeleteJob | CreatePodGroup | UpdatePodGroup | DeletePodGroup
)


@dataclass(frozen=True)
class Decision:
    """One pass's outcome for the executor: its actions, events, metric increments and complete status.

    Executor contract (what applying a :class:`Decision` means):

    * ``actions`` come in order: deletions before creations (scale-down deletions highest index
      first). The executor completes every deletion before it sends a creation; within each group it
      may send concurrently (in slow-start batches that begin with the first action alone). Each
      carries the object or name/uid it needs; a DeletePod/DeleteService should use the uid as a
      precondition, and 404 means "already done". Outcome events
      (``SuccessfulCreatePod``, ``FailedDeletePod``, ``SuccessfulDeleteJob``, ...) are the
      executor's, because only it knows the API's answer.
    * ``CreatePodGroup`` / ``UpdatePodGroup`` (gang scheduling) come first and are sent before anything
      else: a gang scheduler must know the group before it sees the group's pods. AlreadyExists on create
      means done; a 409 on update means the cached PodGroup is stale (retry on a fresher one).
    * ``status`` is the complete new ``.status``; write it (a full update of the status subresource,
      never a merge patch: keys can disappear) iff it differs from the stored one.
    * ``events`` and ``metrics`` describe transitions this decision makes (a condition flipping, a
      worker failing over). Emit them once the decision's status write (if any) succeeded: if the
      write fails the job is reconciled again and the same transition is decided again.
    * ``requeue_after``: seconds until the next *timed* transition (deadline, TTL, failover back-off
      end, failover-history reset); None when only a watch event can change anything.
    * The caller must only decide on caches that contain every object the previous decisions created
      or deleted (expectations): the decision reads "the pod of index 3 is missing" as a fact.
    """

    actions: tuple[Action, ...]
    events: tuple[Event, ...]
    metrics: tuple[MetricInc, ...]
    status: dict[str, Any]  # the complete new .status; written iff != the old status
    requeue_after: float | None  # seconds until the next timed transition, never polling
    # Gang scheduling: the status to write instead if the API refuses the PodGroup write (the job then
    # waits as for an unadmitted gang: no pods, lastReconcileTime set); None without PodGroup writes.
    gang_failed_status: dict[str, Any] | None = None
    # Written before any pod or service write (after the PodGroup writes) when the pass's record is what its pod
    # writes act on, so that a process killed in between leaves its successor the record, not only pods that no
    # longer say it: a pass that removes the workers leaving a dynamic job (the record of who leaves: a retry
    # after a lost write could otherwise choose a second worker), a pass that records a failover (the cause of a
    # failed pod it deletes; a vanished pod's loss, before its replacement makes it look as if it never went;
    # such a pass creates nothing) and the pass that finishes the job (a finished job is never run again, so its
    # terminal condition is stored before its cleanup deletes the pods that proved it).
    status_first: bool = False
