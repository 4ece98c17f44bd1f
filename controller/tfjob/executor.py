"""The executor: applies a :class:`~controller.tfjob.actions.Decision` through the API, thinly.

All judgement lives in :func:`controller.tfjob.decide.decide`; this module only knows how each
action maps to an API call and what the API's answers mean:

- deletions, then creations, are sent concurrently in slow-start batches of 1, 2, 4, ... up to
  ``max_concurrent`` writes (the Job and ReplicaSet controllers' pattern): a job's pods do not
  wait for each other one round trip at a time, yet a systematic failure (quota, admission, a
  bad template) costs one request, not a hundred. The first batch with a failure is the last:
  what it sent completes, what was not yet sent is left for the next pass;
- every create and delete is recorded in :class:`~controller.tfjob.expectations.Expectations`
  *before* it is sent, so a reconcile that runs before the informers have seen the write does
  not act on a stale cache (the caller checks ``pending_until`` before deciding), and marked
  acknowledged when the server accepted it, so that a later relist can settle it even if no
  watch event ever names the object; an action never sent is never recorded;
- ``AlreadyExists`` on create and ``NotFound``/uid-``Conflict`` on delete mean "already done";
  any other failure lowers the expectation (nothing will be observed), emits the upstream
  ``Failed*`` event, and aborts the pass by raising (the first failure of the batch), so the
  runner retries with backoff;
- PodGroup writes (gang scheduling) go first, one at a time, before any pod: a gang scheduler must
  know the group before it sees its pods, so no pod is created when one fails. A refused write (422, 403,
  the CRD gone) is a ``FailedCreatePodGroup``/``FailedUpdatePodGroup`` Warning naming the group (and the
  CRD when it is no longer served) and the job's waiting status (``lastReconcileTime``, as upstream
  writes on a failed sync) before the pass aborts, so the runner retries with backoff (upstream only
  logs these). The status is then written only when more than ``lastReconcileTime`` changed: each write
  wakes the job at once, which would turn the backoff into a loop. An update answered NotFound for the
  group itself means it was deleted meanwhile: the pass stops quietly, its delete event brings the job
  back. A PodGroup deletion is reported with upstream's ``JobTerminated`` and
  ``SuccessfulDeletePodGroup`` / ``FailedDeletePodGroup`` events;
- the status is written (PUT to the status subresource, carrying the cached resourceVersion:
  a stale view gets a 409 and a retry, never a lost update) only when it changed — a converged
  job costs zero writes. It is written last, after the pass's writes, except when the decision says
  ``status_first`` (a pass that removes leaving workers, records a failover or finishes the job; see
  actions.py): then it is written after the PodGroup writes and before any pod or service write, so that
  nothing is deleted or re-created unless the record it acts on is stored (a 409 then changes nothing,
  and the retry decides on the same pods);
- the decision's events and metrics describe transitions, so they are emitted only after its
  status write succeeded; if the write fails the transition is decided (and emitted) again.
  Events are handed to a non-blocking recorder (controller.runtime.events): no API call of
  this pass waits for one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Protocol

import anyio
import structlog

from controller.runtime.client import PODS, SERVICES, ApiClient, Resource
from controller.runtime.errors import AlreadyExists, ApiError, Conflict, NotFound, TransportError
from controller.tfjob import api
from controller.tfjob.actions import (
    CreatePod,
    CreatePodGroup,
    CreateService,
    Decision,
    DeleteJob,
    DeletePod,
    DeletePodGroup,
    DeleteService,
    UpdatePodGroup,
)
from controller.tfjob.expectations import Expectations
from controller.tfjob.metrics import TFJobMetrics

TFJOBS = Resource(api.GROUP, api.VERSION, api.PLURAL)
POD_KIND = "Pod"
SERVICE_KIND = "Service"


class Recorder(Protocol):
    """Records an Event about ``obj`` without blocking (see controller.runtime.events)."""

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        """Record one Event of ``type_`` about ``obj``; never blocks, never raises."""


DEFAULT_MAX_CONCURRENT_WRITES = 32

Write = Callable[[], Awaitable[None]]


async def _run_collecting(write: Write, failures: list[Exception]) -> None:
    """Run ``write``, appending what it raises (an ``Exception``) to ``failures``."""
    try:
        await write()
    except Exception as exc:
        failures.append(exc)


async def slow_start(writes: Sequence[Write], max_concurrent: int) -> int:
    """Run ``writes`` in concurrent batches of 1, 2, 4, ... capped at ``max_concurrent``.

    A batch runs to completion even if one of its writes fails (cancelling a sent write would
    leave its outcome unknown); then the first failure is raised and no further batch starts.
    Returns the number of writes run. Exceptions other than ``Exception`` (cancellation)
    propagate at once, as always."""
    done = 0
    size = 1
    while done < len(writes):
        batch = writes[done : done + size]
        failures: list[Exception] = []
        if len(batch) == 1:
            await _run_collecting(batch[0], failures)
        else:
            async with anyio.create_task_group() as tg:
                for write in batch:
                    tg.start_soon(_run_collecting, write, failures)
        done += len(batch)
        if failures:
            raise failures[0]
        size = min(size * 2, max_concurrent)
    return done


class Executor:
    def __init__(
        self,
        client: ApiClient,
        expectations: Expectations,
        recorder: Recorder,
        metrics: TFJobMetrics,
        *,
        max_concurrent: int = DEFAULT_MAX_CONCURRENT_WRITES,
        pod_groups: Resource | None = None,
    ) -> None:
        if max_concurrent < 1:
            raise ValueError(f"max_concurrent must be >= 1, got {max_concurrent}")
        self.client = client
        self.expectations = expectations
        self.recorder = recorder
        self.metrics = metrics
        self.max_concurrent = max_concurrent
        self.pod_groups = pod_groups  # the PodGroup resource of the gang scheduler, None without one
        self.log = structlog.get_logger("controller.tfjob.executor")

    async def apply(self, job_key: str, job: dict[str, Any], decision: Decision) -> dict[str, Any] | None:
        """Apply ``decision``; returns the job as the server stored it when the status was written."""
        namespace = job["metadata"]["namespace"]
        deletions: list[Write] = []
        creations: list[Write] = []
        for action in decision.actions:
            if isinstance(action, CreatePodGroup | UpdatePodGroup):
                try:
                    if not await self._write_pod_group(job_key, job, namespace, action):
                        return None
                except (ApiError, TransportError) as exc:
                    if not isinstance(exc, Conflict):
                        await self._write_gang_failed_status(job, namespace, decision)
                    raise
            elif isinstance(action, DeletePodGroup):
                deletions.append(partial(self._delete_pod_group, job, namespace, action))
            elif isinstance(action, CreatePod):
                creations.append(partial(self._create, job_key, job, PODS, POD_KIND, namespace, action.pod))
            elif isinstance(action, CreateService):
                creations.append(partial(self._create, job_key, job, SERVICES, SERVICE_KIND, namespace, action.service))
            elif isinstance(action, DeletePod):
                deletions.append(
                    partial(
                        self._delete, job_key, job, PODS, POD_KIND, namespace, action.name, action.uid, action.reason
                    )
                )
            elif isinstance(action, DeleteService):
                deletions.append(
                    partial(
                        self._delete,
                        job_key,
                        job,
                        SERVICES,
                        SERVICE_KIND,
                        namespace,
                        action.name,
                        action.uid,
                        action.reason,
                    )
                )
            elif isinstance(action, DeleteJob):
                await slow_start(deletions, self.max_concurrent)  # decide never pairs them; stay exact anyway
                if await self._delete_job(job, namespace, action.reason):
                    self._emit(job, decision)
                return None  # the job is gone: writing its status would only 404
            else:  # pragma: no cover - the Action union is closed
                raise TypeError(f"unknown action {action!r}")
        written = None
        if decision.status_first:  # after the PodGroup writes (a refused one writes the waiting status instead)
            written = await self._record(job, namespace, decision)
        await slow_start(deletions, self.max_concurrent)
        await slow_start(creations, self.max_concurrent)
        if not decision.status_first:
            written = await self._record(job, namespace, decision)
        return written

    async def _record(self, job: dict[str, Any], namespace: str, decision: Decision) -> dict[str, Any] | None:
        """Write the decision's status if it changed, then emit its events and metrics; returns the job as the
        server stored it, None if nothing was written. A Conflict propagates before anything is emitted: the
        caller retries on a fresher job, which decides (and reports) again."""
        written = None
        if decision.status != (job.get("status") or {}):
            written = await self.client.replace(
                TFJOBS, {**job, "status": decision.status}, namespace=namespace, subresource="status"
            )
        self._emit(job, decision)
        return written

    def _emit(self, job: dict[str, Any], decision: Decision) -> None:
        for event in decision.events:
            self.recorder.record(job, event.type, event.reason, event.message)
        for metric in decision.metrics:
            self.metrics.inc(metric)

    async def _create(
        self, job_key: str, job: dict[str, Any], resource: Resource, kind: str, namespace: str, body: dict[str, Any]
    ) -> None:
        name = body["metadata"]["name"]
        lower = kind.lower()
        self.expectations.expect_create(job_key, kind, name)
        try:
            await self.client.create(resource, body, namespace=namespace)
        except AlreadyExists:
            # Ours from an earlier attempt whose answer was lost, or still in the informer's pipe: done.
            self.expectations.creation_observed(job_key, kind, name)
            return
        except (ApiError, TransportError) as exc:
            self.expectations.creation_observed(job_key, kind, name)
            self.recorder.record(job, api.EVENT_WARNING, f"FailedCreate{kind}", f"Error creating: {exc}")
            raise
        self.expectations.create_acknowledged(job_key, kind, name)
        self.log.info(f"created {lower}", job=job_key, name=name)
        self.recorder.record(job, api.EVENT_NORMAL, f"SuccessfulCreate{kind}", f"Created {lower}: {name}")

    async def _delete(
        self,
        job_key: str,
        job: dict[str, Any],
        resource: Resource,
        kind: str,
        namespace: str,
        name: str,
        uid: str,
        reason: str,
    ) -> None:
        lower = kind.lower()
        self.expectations.expect_delete(job_key, uid, kind)
        try:
            await self.client.delete(
                resource, name, namespace=namespace, preconditions={"uid": uid}, propagation_policy="Background"
            )
        except (NotFound, Conflict):
            # Gone already, or the name now belongs to a newer object that this decision did not see.
            self.expectations.deletion_observed(job_key, uid)
            return
        except (ApiError, TransportError) as exc:
            self.expectations.deletion_observed(job_key, uid)
            self.recorder.record(job, api.EVENT_WARNING, f"FailedDelete{kind}", f"Error deleting: {exc}")
            raise
        self.expectations.delete_acknowledged(job_key, uid)
        self.log.info(f"deleted {lower}", job=job_key, name=name, reason=reason)
        self.recorder.record(job, api.EVENT_NORMAL, f"SuccessfulDelete{kind}", f"Deleted {lower}: {name}")

    def _pod_group_resource(self) -> Resource:
        if self.pod_groups is None:
            raise RuntimeError("a PodGroup action without a gang scheduler: decide() and the executor disagree")
        return self.pod_groups

    async def _write_pod_group(
        self, job_key: str, job: dict[str, Any], namespace: str, action: CreatePodGroup | UpdatePodGroup
    ) -> bool:
        """Create or update the job's PodGroup; False when the pass must stop quietly (deleted meanwhile)."""
        resource = self._pod_group_resource()
        name = action.pod_group["metadata"]["name"]
        create = isinstance(action, CreatePodGroup)
        try:
            if create:
                await self.client.create(resource, action.pod_group, namespace=namespace)
            else:
                await self.client.replace(resource, action.pod_group, namespace=namespace)
        except AlreadyExists:
            return True  # created by an earlier pass whose write the cache has not shown yet
        except NotFound as exc:
            if not create and exc.details.get("name") == name:
                return False  # deleted meanwhile: its delete event brings the job back to recreate it
            # No such resource: the CRD went away after start-up (a real API server answers 404).
            crd = f"{resource.plural}.{resource.group}"
            self._pod_group_failed(job, create, name, namespace, f"the PodGroup CRD {crd} is not installed: {exc}")
            raise
        except (ApiError, TransportError) as exc:
            if not isinstance(exc, Conflict):  # a stale cache: retried quietly, as for the job's status
                self._pod_group_failed(job, create, name, namespace, str(exc))
            raise
        self.log.info(
            "created podgroup" if create else "updated podgroup",
            job=job_key,
            name=name,
            spec=action.pod_group.get("spec"),
        )
        return True

    def _pod_group_failed(self, job: dict[str, Any], create: bool, name: str, namespace: str, why: str) -> None:
        reason = api.EV_FAILED_CREATE_POD_GROUP if create else api.EV_FAILED_UPDATE_POD_GROUP
        verb = "creating" if create else "updating"
        self.recorder.record(job, api.EVENT_WARNING, reason, f"Error {verb} PodGroup {namespace}/{name}: {why}")

    async def _write_gang_failed_status(self, job: dict[str, Any], namespace: str, decision: Decision) -> None:
        """Write the waiting status of a pass whose PodGroup write failed, unless only lastReconcileTime moved."""
        status = decision.gang_failed_status
        old = job.get("status") or {}
        key = api.STATUS_LAST_RECONCILE_TIME
        if status is None or ({**status, key: None} == {**old, key: None} and key in old):
            return
        await self.client.replace(TFJOBS, {**job, "status": status}, namespace=namespace, subresource="status")

    async def _delete_pod_group(self, job: dict[str, Any], namespace: str, action: DeletePodGroup) -> None:
        resource = self._pod_group_resource()
        try:
            await self.client.delete(resource, action.name, namespace=namespace, preconditions={"uid": action.uid})
        except (NotFound, Conflict):
            return  # gone already, or a newer group under that name that this decision did not see
        except (ApiError, TransportError) as exc:
            self.recorder.record(
                job, api.EVENT_NORMAL, api.EV_JOB_TERMINATED, "Job has been terminated. Deleting PodGroup"
            )
            self.recorder.record(
                job,
                api.EVENT_WARNING,
                api.EV_FAILED_DELETE_POD_GROUP,
                f"Error deleting: unable to delete PodGroup: {exc}",
            )
            raise
        self.log.info("deleted podgroup", job=f"{namespace}/{action.name}")
        self.recorder.record(job, api.EVENT_NORMAL, api.EV_JOB_TERMINATED, "Job has been terminated. Deleting PodGroup")
        self.recorder.record(
            job, api.EVENT_NORMAL, api.EV_SUCCESSFUL_DELETE_POD_GROUP, f"Deleted PodGroup: {action.name}"
        )

    async def _delete_job(self, job: dict[str, Any], namespace: str, reason: str) -> bool:
        """Delete the job itself (TTL). True when this call deleted it."""
        meta = job["metadata"]
        try:
            await self.client.delete(
                TFJOBS,
                meta["name"],
                namespace=namespace,
                preconditions={"uid": meta["uid"]},
                propagation_policy="Background",
            )
        except (NotFound, Conflict):
            return False
        except (ApiError, TransportError) as exc:
            self.recorder.record(job, api.EVENT_WARNING, api.EV_FAILED_DELETE_JOB, f"Error deleting: {exc}")
            raise
        self.log.info("deleted job", job=f"{namespace}/{meta['name']}", reason=reason)
        self.recorder.record(job, api.EVENT_NORMAL, api.EV_SUCCESSFUL_DELETE_JOB, f"Deleted job: {meta['name']}")
        return True
