"""The TFJob controller: informers for TFJobs, their pods and services → work queue → reconcile.

Wiring only. Pods and services are watched with the operator-name label selector (so the caches
hold only what this controller created), indexed by the UID of their controlling owner, and mapped
to their TFJob's key; the reconcile reads the job and its children from the caches, asks
:func:`~controller.tfjob.decide.decide`, and hands the decision to the executor. A job is decided on
only while no create or delete of ours is still unobserved (expectations), so a lagging cache
can never make the controller act twice.

State derived from watch events, and why none of it can outlive reality (a watch can miss
an object's whole life, created and deleted while it was stalled, so "until the event arrives" may
mean forever):

- **Expectations** are settled by the handlers when the cache shows the object (added, or its name
  re-created under a new uid, which a relist delivers as an update with no tombstone for the old
  uid) or its deletion, and by the children's relist handlers: a list begun after the server
  acknowledged a write reflects it, whatever became of the object (see expectations.py). A settled
  job is requeued, since its reconcile was waiting for an event.
- **Read-your-writes** (``_written``) is used only while the cache still shows exactly the
  resourceVersion our status write replaced; any other version (our write arriving, someone
  else's, a relist, a re-created job) invalidates it on the next reconcile, and a deleted job
  drops it. It can be stale only while the jobs cache is, which is what it exists for.
- **Failover records** (``status.dynamicWorkers``) live in the API, not in memory, and name the
  pod uid they are about. A decision made on a stale job cannot persist them: the status write
  carries the cached resourceVersion and a stale one earns a 409, and the decision's events and
  metrics are emitted only after its write succeeded, so no failover is counted twice. A decision
  made on a pods cache that lags behind our own writes is prevented by the expectations above; one
  that lags for any other reason (a first view served from a watch cache, a pods watch behind the
  jobs watch) is caught before a pass records a failover, and before a job's first write in this
  process, by confirming the caches with consistent reads (confirm.py).
- **Confirmed jobs** (``view.confirmed``) only say that a job's first write in this process was
  checked; a deleted job drops its key.
- **Departed pods** (``_departed``): per job, the last pod of each (type, index) whose deletion the
  pods watch delivered, as it was last seen (only the job's own pods, by their owner's uid). They only
  tell a later pass *why* a pod went that it saw go without any earlier event (a disruption counted as
  such, not as a plain deletion); they are never acted on, so a missing or old one costs only that
  detail. A gone job drops them.

Expectations, ``_written``, ``view.confirmed`` and ``_departed`` are keyed by the job's namespace/name.
A job deleted and re-created under the same name while the jobs watch was down reaches the handlers as
an update to a new uid, not as a deletion; that update drops all four as the deletion would have (and
foreign.py's hold and observe.py's measurements do the same).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog
from prometheus_client import CollectorRegistry

from controller.runtime.cache import (
    CONTROLLER_UID_INDEX,
    DeletedFinalStateUnknown,
    controller_owner_uid_index,
    controller_ref,
    object_key,
)
from controller.runtime.client import PODS, SERVICES, USER_AGENT, ApiClient, Resource
from controller.runtime.errors import ApiError, Conflict, ResponseDecodeError, TransportError
from controller.runtime.events import EventRecorder
from controller.runtime.informer import Informer
from controller.runtime.managedfields import manager_from_user_agent
from controller.runtime.metrics import ReconcileMetrics
from controller.runtime.runner import Controller, Result
from controller.runtime.served import resource_served, wait_until_served
from controller.tfjob import api
from controller.tfjob import gang as ganglib
from controller.tfjob import pods as podlib
from controller.tfjob.confirm import ViewCheck
from controller.tfjob.decide import DecideConfig, decide
from controller.tfjob.decision.effects import records_failover
from controller.tfjob.executor import POD_KIND, SERVICE_KIND, TFJOBS, Executor
from controller.tfjob.expectations import Expectations
from controller.tfjob.foreign import DEFAULT_HOLD, ForeignWriters
from controller.tfjob.metrics import TFJobMetrics
from controller.tfjob.observe import JobObserver
from controller.tfjob.trim import trim_pod, trim_service

Obj = dict[str, Any]

# How to install what `wait_for_crd` waits for (README's "Running it"); the second needs no checkout.
CRD_INSTALL_COMMANDS = (
    "kubectl apply -f manifests/crd/kubeflow.org_tfjobs.yaml",
    "tfjob-controller crd | kubectl apply -f -",
)


class MissingPodGroupCRD(ValueError):
    """Gang scheduling is on but the API server does not serve the scheduler's PodGroups (one line)."""


def pod_group_resource(gang: ganglib.Gang) -> Resource:
    """The API resource of the gang scheduler's PodGroups."""
    return Resource(gang.group, gang.version, ganglib.PLURAL)


async def check_pod_group_crd(client: ApiClient, gang: ganglib.Gang) -> None:
    """Raise :class:`MissingPodGroupCRD` unless the gang scheduler's PodGroup CRD is installed.

    Upstream exits at start-up too ("crd might be missing, please install crd"): without the CRD every
    PodGroup write fails and every job waits for ever, which is worse than not starting."""
    try:
        served = await resource_served(client, pod_group_resource(gang))
    except (ApiError, TransportError, ResponseDecodeError) as exc:
        raise MissingPodGroupCRD(f"cannot tell whether the PodGroup CRD {gang.crd_name} is installed: {exc}") from None
    if not served:
        installer = "Volcano" if gang.volcano else "scheduler-plugins (its PodGroup CRD)"
        raise MissingPodGroupCRD(
            f"PodGroup CRD {gang.crd_name} is not installed: install {installer} or run without --gang-scheduler-name"
        )


def owner_job_key(obj: Obj) -> str | None:
    """``namespace/name`` of the TFJob controlling ``obj``, or None if a TFJob does not control it."""
    ref = controller_ref(obj)
    if ref is None or ref.get("kind") != api.KIND or not str(ref.get("apiVersion", "")).startswith(api.GROUP + "/"):
        return None
    namespace = podlib.namespace(obj)
    name = ref.get("name")
    return f"{namespace}/{name}" if namespace and isinstance(name, str) and name else None


class TFJobController:
    """Everything the TFJob controller runs; :meth:`run` until cancelled."""

    def __init__(
        self,
        client: ApiClient,
        *,
        registry: CollectorRegistry,
        namespaces: Sequence[str] | None = None,
        workers: int = 1,
        decide_config: DecideConfig | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        informer_options: dict[str, Any] | None = None,
        crd_poll: float = 2.0,
        foreign_hold: float = DEFAULT_HOLD,
    ) -> None:
        scope: dict[str, Any] = {"namespaces": list(namespaces)} if namespaces else {}
        options = dict(informer_options or {})
        selector = f"{api.LABEL_OPERATOR_NAME}={api.CONTROLLER_NAME}"
        owned = {CONTROLLER_UID_INDEX: controller_owner_uid_index}
        self.jobs = Informer(client, TFJOBS, registry=registry, **scope, **options)
        # Pods and services are cached trimmed to the fields the controller reads (controller.tfjob.trim):
        # at 10,000 jobs they are most of the process's memory.
        child_options = {"indexers": owned, "registry": registry, **scope, **options}
        self.pods = Informer(client, PODS, label_selector=selector, transform=trim_pod, **child_options)
        self.services = Informer(client, SERVICES, label_selector=selector, transform=trim_service, **child_options)
        self.decide_config = decide_config or DecideConfig()
        # Gang scheduling: the jobs' PodGroups (named like their jobs, so looked up by key). Not watched,
        # and never requested, without --gang-scheduler-name.
        self.gang = ganglib.gang_of(self.decide_config.gang_scheduler)
        self.pod_groups: Informer | None = None
        if self.gang is not None:
            self.pod_groups = Informer(client, pod_group_resource(self.gang), registry=registry, **scope, **options)
        children = {POD_KIND: self.pods, SERVICE_KIND: self.services}
        self.expectations = Expectations(
            monotonic, generation=lambda kind, namespace: children[kind].list_generation(namespace)
        )
        self.metrics = TFJobMetrics(registry, pinned_namespaces=namespaces or ())
        # Registered before the work-queue handlers, so a namespace's series exist before its first reconcile.
        self.observer = JobObserver(self.jobs, self.pods, self.metrics)
        registry.register(self.observer)
        self.recorder = EventRecorder(client, api.CONTROLLER_NAME, registry)
        # Another controller writing our jobs (training-operator left reconciling TFJobs): seen in managedFields,
        # which only the informers' transforms get to read.
        self.foreign = ForeignWriters(
            # The field manager the API server records for our writes (no fieldManager is sent): from the User-Agent.
            manager_from_user_agent(getattr(client, "user_agent", USER_AGENT)),
            self.jobs,
            self.pods,
            self.recorder,
            self.metrics,
            hold=foreign_hold,
        )
        self.jobs.transform = self.foreign.job_transform(self.jobs.transform or (lambda obj: obj))
        self.pods.transform = self.foreign.pod_transform(self.pods.transform or (lambda obj: obj))
        self.view = ViewCheck(client, TFJOBS, selector)
        self.executor = Executor(
            client,
            self.expectations,
            self.recorder,
            self.metrics,
            pod_groups=pod_group_resource(self.gang) if self.gang is not None else None,
        )
        # Read-your-writes for our own status writes: key -> (the resourceVersion our write replaced, the
        # job the server returned). Until the informer delivers that write, the cache still shows the
        # replaced version; deciding on it would PUT with a stale resourceVersion and earn a 409.
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}
        self._departed: dict[str, dict[tuple[str, int], Obj]] = {}
        self._monotonic = monotonic
        self._now = now
        self.controller = Controller(
            api.CONTROLLER_NAME,
            self.reconcile,
            workers=workers,
            sources=self.informers,
            metrics=ReconcileMetrics(api.CONTROLLER_NAME, registry),
        )
        self.log = structlog.get_logger("controller.tfjob")
        self.client = client
        self.crd_poll = crd_poll
        self.waiting_for_crd = False
        self._wire_handlers()

    @property
    def informers(self) -> list[Informer]:
        """The informers this controller runs: jobs, pods, services and, with gang scheduling, PodGroups."""
        return [self.jobs, self.pods, self.services, *([self.pod_groups] if self.pod_groups is not None else [])]

    # -- event handlers: map every change to the key of the job it concerns -------------------------

    def _wire_handlers(self) -> None:
        enqueue = self.controller.queue.add

        def job_added(obj: Obj) -> None:
            enqueue(object_key(obj))

        def job_updated(old: Obj, new: Obj) -> None:
            # A relist can show the name re-created under a new uid (the old job deleted and a new one
            # created while the watch was down): an update, with no tombstone for the old job. The new
            # job starts with nothing remembered, as if the deletion had been seen.
            key = object_key(new)
            if podlib.uid(old) != podlib.uid(new):
                self._forget(key)
            enqueue(key)

        def job_deleted(obj: Obj | DeletedFinalStateUnknown) -> None:
            key = object_key(obj)  # a tombstone's key is its stored key
            self._forget(key)
            enqueue(key)

        self.jobs.add_handler(job_added, job_updated, job_deleted)
        for informer, kind in ((self.pods, POD_KIND), (self.services, SERVICE_KIND)):
            self._wire_child(informer, kind, enqueue)
        if self.pod_groups is not None:
            # The scheduler admitting a group (its status) is what lets a waiting job create its pods.
            def pod_group_changed(obj: Obj | DeletedFinalStateUnknown, *_: Obj) -> None:
                last = DeletedFinalStateUnknown.unwrap(obj)
                key = owner_job_key(last) if last is not None else None
                if key is not None:
                    enqueue(key)

            self.pod_groups.add_handler(pod_group_changed, pod_group_changed, pod_group_changed)

    def _wire_child(self, informer: Informer, kind: str, enqueue: Callable[[str], None]) -> None:
        expectations = self.expectations

        def added(obj: Obj) -> None:
            key = owner_job_key(obj)
            if key is None:
                return
            meta = obj["metadata"]
            expectations.creation_observed(key, kind, meta["name"])
            if meta.get("deletionTimestamp"):
                expectations.deletion_observed(key, podlib.uid(obj))
            enqueue(key)

        def updated(old: Obj, new: Obj) -> None:
            new_meta = new["metadata"]
            # A relist can show a name re-created under a new uid: the old object is gone (no tombstone
            # is delivered for it) and the new one is present.
            old_uid, new_uid = podlib.uid(old), podlib.uid(new)
            replaced = old_uid != new_uid
            old_key = owner_job_key(old)
            if replaced and old_key is not None:
                expectations.deletion_observed(old_key, old_uid)
            new_key = owner_job_key(new)
            if new_key is not None:
                if replaced:
                    expectations.creation_observed(new_key, kind, new_meta["name"])
                if new_meta.get("deletionTimestamp"):
                    expectations.deletion_observed(new_key, new_uid)
            for key in {k for k in (old_key, new_key) if k is not None}:
                enqueue(key)

        def deleted(obj: Obj | DeletedFinalStateUnknown) -> None:
            last = DeletedFinalStateUnknown.unwrap(obj)
            if last is None:
                return
            key = owner_job_key(last)
            if key is None:
                return
            expectations.deletion_observed(key, podlib.uid(last))
            if kind == POD_KIND:
                self._remember_departed(key, last)
            enqueue(key)

        def relisted(namespace: str | None, generation: int) -> None:
            for key in expectations.relisted(kind, namespace, generation):
                enqueue(key)

        informer.add_handler(added, updated, deleted)
        informer.add_relist_handler(relisted)

    def _forget(self, key: str) -> None:
        """Drop what this process remembers of the job under ``key``: that job is gone (deleted, or replaced by
        a new one under its name)."""
        self.expectations.forget(key)
        self._written.pop(key, None)
        self._departed.pop(key, None)
        self.view.forget(key)

    def _remember_departed(self, key: str, pod: Obj) -> None:
        """Keep ``pod`` as the last of its (type, index) to go, for the passes of job ``key``: only a dynamic job's
        failovers read them (a static job's would only hold memory until the job is deleted), and only its own
        pods (not those of an earlier job of the same name, which the garbage collector removes later)."""
        job = self.jobs.get(key)
        if job is None or (job.get("spec") or {}).get(api.SPEC_ENABLE_DYNAMIC_WORKER) is not True:
            return
        if podlib.controller_uid(pod) != podlib.uid(job):
            return
        replica_type, index = podlib.replica_type_label(pod), podlib.replica_index(pod)
        if replica_type is not None and index is not None:
            self._departed.setdefault(key, {})[(replica_type, index)] = pod

    # -- reconcile --------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Decide and apply one pass for the job ``key``; the Result says when to come back (a due timer, a
        conflict on a stale cache), None when only a watch event matters. Other API errors propagate.

        Nothing is done for a job that is gone, being deleted, written by another controller or still
        waiting for its own writes to reach the caches.
        """
        job = self.jobs.get(key)
        if job is None:
            self._forget(key)
            return None
        written = self._written.get(key)
        if written is not None:
            if job["metadata"].get("resourceVersion") == written[0]:
                job = written[1]
            else:
                del self._written[key]  # the cache has caught up (or moved past): trust it
        if job["metadata"].get("deletionTimestamp"):
            return None  # being deleted: the garbage collector removes its pods and services
        held = self.foreign.holding(key)
        if held is not None:
            return Result(requeue_after=held)  # another controller writes this job: no write war (foreign.py)
        pending = self.expectations.pending_until(key)
        if pending is not None:
            # Our own writes are still in flight to the caches; their events will requeue the job. The
            # timed requeue only matters if an event was lost (the expectation then expires).
            return Result(requeue_after=max(0.0, pending - self._monotonic()))
        uid = podlib.uid(job)
        pods = self.pods.by_index(CONTROLLER_UID_INDEX, uid)
        services = self.services.by_index(CONTROLLER_UID_INDEX, uid)
        pod_group = self.pod_groups.get(key) if self.pod_groups is not None else None
        departed = list(self._departed.get(key, {}).values())
        decision = decide(job, pods, services, self._now(), self.decide_config, pod_group=pod_group, departed=departed)
        if self.view.needed(key, job, decision) and not await self.view.current(
            key, job, pods, counts_failover=records_failover(decision)
        ):
            # The caches are behind the server (confirm.py): acting now could re-create what was removed or count
            # a failover again. Their events bring the job back; the rate-limited retry covers a lost one.
            self.log.info("caches behind the API server; waiting for them", job=key)
            return Result(requeue=True)
        try:
            stored = await self.executor.apply(key, job, decision)
            if stored is not None:
                self._written[key] = (job["metadata"].get("resourceVersion", ""), stored)
        except Conflict as exc:
            # Our cached job (or its PodGroup) is older than the server's: routine under concurrent writers
            # (kubectl scale, the user, a gang scheduler's status update). The watch event for the newer
            # version is on its way; retry then, quietly.
            self.log.info("stale object in cache; retrying", job=key, error=exc.message)
            return Result(requeue=True)
        if decision.requeue_after is not None:
            return Result(requeue_after=decision.requeue_after)
        return None

    async def wait_for_crd(self) -> None:
        """Return once the API server serves TFJobs; say once, with the fix, while it does not."""

        def missing() -> None:
            self.waiting_for_crd = True
            self.log.error(
                f"the TFJob CRD ({api.PLURAL}.{api.GROUP}) is not installed; install it with "
                f"`{CRD_INSTALL_COMMANDS[0]}` or `{CRD_INSTALL_COMMANDS[1]}`; waiting for it",
                crd=f"{api.PLURAL}.{api.GROUP}",
            )

        def found() -> None:
            self.log.info("the TFJob CRD is installed; starting", crd=f"{api.PLURAL}.{api.GROUP}")

        try:
            await wait_until_served(self.client, TFJOBS, poll=self.crd_poll, on_missing=missing, on_found=found)
        finally:
            self.waiting_for_crd = False

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Wait for the TFJob CRD, run the informers, the event recorder and the workers until cancelled;
        ``task_status`` is told once everything is started.
        """
        await self.wait_for_crd()
        async with anyio.create_task_group() as tg:
            for informer in self.informers:
                tg.start_soon(informer.run, name=f"informer {informer.name}")
            tg.start_soon(self.recorder.run, name="event recorder")
            task_status.started()
            await self.controller.run()
            tg.cancel_scope.cancel()
