"""Another controller acting on the TFJobs this one manages: noticed, said out loud, never fought over.

Why: while switching a cluster over from Kubeflow's training-operator, its TFJob reconciler may be left running
(its ``--enable-scheme`` flag forgotten, an old replica still terminating, a second install). Two controllers on
one job write its status in turn (training-operator's status has no ``dynamicWorkers``, so each write undoes the
other's) and re-create each other's pods: a write war at the speed of their watches, with nothing to tell anyone.

What is seen (``metadata.managedFields``, read by the informers' transforms before the caches drop them):

- **status**: a job's managedFields entry for the ``status`` subresource, of a manager other than ours, appears or
  gets a newer ``time`` after the job was first seen (its first sight is the baseline: what training-operator
  wrote before the switch-over is history, not a fight);
- **pod**: a pod arrives, after the first list, controlled by a managed job, whose ownerReference to that job was
  set by another manager: another controller created it. (A deletion names no deleter in the API; a controller
  that deletes a job's pods re-creates them, and that is what gives it away.)

What is done: each such write counts ``tfjob_foreign_writes_total{job_namespace, write}`` (managedFields times have
whole seconds, so a writer's status writes within one second count once); the first one of a
contest is a Warning event ``ForeignWriter`` on the job naming the other manager; and the controller leaves the job
alone (no pod, service or status write: :meth:`ForeignWriters.holding`) until no foreign write has been seen for
``hold`` seconds. So the other controller's writes cost ours nothing, our writes are bounded by one pass per
``hold``, and the job resumes under this controller by itself once the other stops.

Not seen: a foreign write that only removes fields (the API server updates no managedFields time for it), and
one by a manager with our name. Jobs with ``runPolicy.managedBy`` set to another controller are that controller's
by design and are never reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from controller.runtime.cache import DeletedFinalStateUnknown, controller_ref
from controller.runtime.informer import Informer, Transform
from controller.runtime.jsonfields import field_str
from controller.runtime.managedfields import owner_reference_setter, writers
from controller.tfjob import api
from controller.tfjob import pods as podlib
from controller.tfjob.actions import MetricInc
from controller.tfjob.executor import Recorder
from controller.tfjob.metrics import TFJobMetrics

Obj = dict[str, Any]

# Seconds the controller leaves a job alone after the last write another controller made to it.
DEFAULT_HOLD = 300.0


def _key(obj: Obj) -> str:
    """The informer key of a namespaced object."""
    return f"{podlib.namespace(obj)}/{podlib.name(obj) or ''}"


def _managed_elsewhere(job: Obj) -> bool:
    spec = job.get("spec")
    run_policy = spec.get(api.SPEC_RUN_POLICY) if isinstance(spec, dict) else None
    return isinstance(run_policy, dict) and run_policy.get(api.RUN_MANAGED_BY) == api.MANAGED_BY_MULTIKUEUE


def _job_ref(job: Obj) -> Obj:
    """What an Event needs of the job (the transform's object is about to be trimmed)."""
    meta = podlib.metadata(job)
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "metadata": {k: field_str(meta, k) for k in ("name", "namespace", "uid", "resourceVersion")},
    }


class ForeignWriters:
    """Sees other controllers' writes to managed TFJobs (see the module docstring)."""

    def __init__(
        self,
        own_manager: str,
        jobs: Informer,
        pods: Informer,
        recorder: Recorder,
        metrics: TFJobMetrics,
        *,
        hold: float = DEFAULT_HOLD,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.own_manager = own_manager
        self.jobs = jobs
        self.pods = pods
        self.recorder = recorder
        self.metrics = metrics
        self.hold = hold
        self._monotonic = monotonic
        self.log = structlog.get_logger("controller.tfjob.foreign")
        self._status_times: dict[str, dict[str, str]] = {}  # job uid -> foreign manager -> its status entry's time
        self._foreign_pods: dict[str, str] = {}  # pod uid -> the foreign manager that created it
        self._until: dict[str, float] = {}  # job key -> monotonic time the hold ends
        jobs.add_handler(None, self._job_replaced, self._job_deleted)
        pods.add_handler(self._pod_added, None, self._pod_deleted)

    # -- the transforms: the one place managedFields are seen -------------------------------------------------

    def job_transform(self, inner: Transform) -> Transform:
        """``inner`` preceded by a look at the job's managedFields for another status writer."""

        def transform(obj: Obj) -> Obj:
            self._job_seen(obj)
            return inner(obj)

        return transform

    def pod_transform(self, inner: Transform) -> Transform:
        """``inner`` preceded by a look at the pod's managedFields for another creator."""

        def transform(obj: Obj) -> Obj:
            self._pod_seen(obj)
            return inner(obj)

        return transform

    def _job_seen(self, job: Obj) -> None:
        uid = podlib.uid(job)
        if not uid:
            return
        now = {
            w.manager: w.time for w in writers(job, subresource="status") if w.manager != self.own_manager and w.time
        }
        before = self._status_times.get(uid)
        self._status_times[uid] = now
        if before is None or _managed_elsewhere(job):
            return  # first sight: the baseline
        for manager, stamp in sorted(now.items()):
            if before.get(manager) != stamp:
                self._foreign_write(_job_ref(job), manager, api.FOREIGN_WRITE_STATUS, "wrote the status of this job")

    def _pod_seen(self, pod: Obj) -> None:
        uid = podlib.uid(pod)
        if not uid:
            return
        cached = self.pods.get(_key(pod))
        if cached is not None and podlib.uid(cached) == uid:
            return  # an update of a pod seen when it arrived: who created it does not change
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != api.KIND:
            return
        creator = owner_reference_setter(pod, field_str(ref, "uid"))
        if creator is not None and creator != self.own_manager:
            self._foreign_pods[uid] = creator

    # -- handlers ------------------------------------------------------------------------------------------

    def _pod_added(self, pod: Obj) -> None:
        creator = self._foreign_pods.get(podlib.uid(pod))
        if creator is None or not self.pods.has_synced():
            return  # ours, or there before this controller looked (adopted)
        ref = controller_ref(pod) or {}
        job = self.jobs.get(f"{podlib.namespace(pod)}/{field_str(ref, 'name')}")
        if job is None or podlib.uid(job) != ref.get("uid") or _managed_elsewhere(job):
            return
        self._foreign_write(
            _job_ref(job), creator, api.FOREIGN_WRITE_POD, f"created pod {podlib.name(pod) or ''} of this job"
        )

    def _pod_deleted(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        pod = DeletedFinalStateUnknown.unwrap(obj)
        if pod is not None:
            self._foreign_pods.pop(podlib.uid(pod), None)

    def _job_replaced(self, old: Obj, new: Obj) -> None:
        # A relist shows a job deleted and re-created under its name as an update to a new uid, with no tombstone:
        # the old job's hold and status baseline go as on its deletion (the new job's baseline is already taken).
        if podlib.uid(old) != podlib.uid(new):
            self._job_deleted(old)

    def _job_deleted(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        job = DeletedFinalStateUnknown.unwrap(obj)
        if job is None:
            return
        self._status_times.pop(podlib.uid(job), None)
        self._until.pop(_key(job), None)

    # -- the outcome ---------------------------------------------------------------------------------------

    def _foreign_write(self, job: Obj, manager: str, write: str, what: str) -> None:
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        key = f"{namespace}/{name}"
        self.metrics.inc(MetricInc(api.METRIC_FOREIGN_WRITES, (("job_namespace", namespace), ("write", write))))
        now = self._monotonic()
        contested = self._until.get(key, 0.0) > now
        self._until[key] = now + self.hold
        if contested:
            return  # one Warning per contest; the counter has every write
        message = (
            f'Another controller (field manager "{manager}") {what}: {api.CONTROLLER_NAME} leaves the job alone '
            f"until no such write has been seen for {self.hold:g}s. One controller per TFJob: stop the other one "
            "reconciling TFJobs (training-operator: --enable-scheme without tfjob)."
        )
        self.log.warning("another controller writes this job; leaving it alone", job=key, manager=manager, write=write)
        self.recorder.record(job, api.EVENT_WARNING, api.EV_FOREIGN_WRITER, message)

    def holding(self, key: str) -> float | None:
        """Seconds this controller still leaves job ``key`` alone, or None when it may act."""
        until = self._until.get(key)
        if until is None:
            return None
        left = until - self._monotonic()
        if left <= 0:
            del self._until[key]
            self.log.info("no write by another controller for the hold period; acting on the job again", job=key)
            return None
        return left
