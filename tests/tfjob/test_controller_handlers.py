"""The controller's informer handlers keep expectations in step with what the caches show.

No API server is involved: the handlers are driven through the informers' own dispatch, as a
watch event or a relist would drive them, and the reconcile is never run (the client is unused).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from controller.runtime.cache import DeletedFinalStateUnknown
from controller.tfjob import api
from controller.tfjob.controller import TFJobController

KEY = "ns/job"


def child(name: str, uid: str, **meta: Any) -> dict[str, Any]:
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "job", "uid": "job-uid", "controller": True}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": uid,
            "ownerReferences": [owner],
            **meta,
        }
    }


def controller() -> TFJobController:
    return TFJobController(object(), registry=CollectorRegistry())  # type: ignore[arg-type]


def test_a_name_seen_under_a_new_uid_settles_both_the_delete_of_the_old_and_the_create_of_the_new() -> None:
    ctl = controller()
    ctl.expectations.expect_delete(KEY, "uid-old", "Pod")
    ctl.expectations.expect_create(KEY, "Pod", "job-worker-0")
    # A relist shows the name re-created: an update (old -> new), no tombstone for the old uid.
    ctl.pods._dispatch_update(child("job-worker-0", "uid-old"), child("job-worker-0", "uid-new"))
    assert ctl.expectations.pending_until(KEY) is None


def test_an_ordinary_update_settles_nothing_but_a_terminating_object() -> None:
    ctl = controller()
    ctl.expectations.expect_create(KEY, "Pod", "job-worker-1")
    ctl.expectations.expect_delete(KEY, "uid-0", "Pod")
    ctl.pods._dispatch_update(child("job-worker-0", "uid-0"), {**child("job-worker-0", "uid-0")})
    assert ctl.expectations.pending_until(KEY) is not None
    ctl.pods._dispatch_update(child("job-worker-0", "uid-0"), child("job-worker-0", "uid-0", deletionTimestamp="t"))
    ctl.pods._dispatch_add(child("job-worker-1", "uid-1"))
    assert ctl.expectations.pending_until(KEY) is None


def test_a_relist_settles_an_acknowledged_create_the_watch_never_showed_and_requeues_the_job() -> None:
    ctl = controller()
    ctl.expectations.expect_create(KEY, "Service", "job-worker-2")
    ctl.expectations.create_acknowledged(KEY, "Service", "job-worker-2")  # generation 0: before any list
    ctl.pods._dispatch_relisted(None, 1)
    assert ctl.expectations.pending_until(KEY) is not None, "a pods list says nothing about services"
    assert len(ctl.controller.queue) == 0
    ctl.services._dispatch_relisted(None, 1)
    assert ctl.expectations.pending_until(KEY) is None
    assert len(ctl.controller.queue) == 1  # the job was waiting for an event that will never come


def test_a_tombstone_settles_the_delete() -> None:
    ctl = controller()
    ctl.expectations.expect_delete(KEY, "uid-0", "Service")
    ctl.services._dispatch_delete(DeletedFinalStateUnknown("ns/job-worker-0", child("job-worker-0", "uid-0")))
    assert ctl.expectations.pending_until(KEY) is None


def labelled(name: str, uid: str, replica_type: str, index: int, **meta: Any) -> dict[str, Any]:
    pod = child(name, uid, **meta)
    pod["metadata"]["labels"] = {api.LABEL_REPLICA_TYPE: replica_type, api.LABEL_REPLICA_INDEX: str(index)}
    return pod


def test_a_deleted_pod_is_kept_as_the_last_departed_of_its_slot_until_the_job_goes() -> None:
    """The final object of a pod's deletion (watch event or tombstone) is what a later pass reads to say why a
    pod it never saw go went; one per (type, index), the latest; services are not kept; a deleted job drops them."""
    ctl = controller()
    ctl.jobs.cache.put(KEY, {**child("job", "job-uid"), "spec": {"enableDynamicWorker": True}})
    ctl.pods._dispatch_delete(labelled("job-ps-0", "uid-a", "ps", 0, deletionTimestamp="t"))
    ctl.pods._dispatch_delete(DeletedFinalStateUnknown("ns/job-ps-0", labelled("job-ps-0", "uid-b", "ps", 0)))
    ctl.pods._dispatch_delete(labelled("job-worker-1", "uid-c", "worker", 1))
    ctl.pods._dispatch_delete(child("job-unlabelled", "uid-d"))
    ctl.services._dispatch_delete(labelled("job-ps-1", "uid-e", "ps", 1))
    kept = {slot: pod["metadata"]["uid"] for slot, pod in ctl._departed[KEY].items()}
    assert kept == {("ps", 0): "uid-b", ("worker", 1): "uid-c"}
    ctl.jobs._dispatch_delete(child("job", "job-uid"))
    assert KEY not in ctl._departed


def test_a_static_jobs_deleted_pods_are_not_kept() -> None:
    """Only a dynamic job's failovers read them; a static job's (or one not in the cache) would only hold memory."""
    ctl = controller()
    ctl.jobs.cache.put(KEY, {**child("job", "job-uid"), "spec": {}})
    ctl.pods._dispatch_delete(labelled("job-worker-0", "uid-a", "worker", 0))
    other = labelled("other-worker-0", "uid-b", "worker", 0)
    other["metadata"]["ownerReferences"][0]["name"] = "other"
    ctl.pods._dispatch_delete(other)
    assert ctl._departed == {}


async def test_a_job_seen_under_a_new_uid_starts_with_nothing_remembered_of_the_old_one() -> None:
    """A relist shows a job deleted and re-created under its name as an update to a new uid, with no tombstone:
    the old job's expectations, read-your-writes copy, departed pods and confirmation go, as on its deletion."""
    ctl = controller()
    old_job = {**child("job", "job-uid"), "spec": {"enableDynamicWorker": True}}
    ctl.jobs.cache.put(KEY, old_job)
    ctl.expectations.expect_create(KEY, "Pod", "job-worker-0")
    ctl._written[KEY] = ("job-uid", old_job)
    ctl.view.confirmed.add(KEY)
    ctl.pods._dispatch_delete(labelled("job-worker-1", "uid-c", "worker", 1))
    assert KEY in ctl._departed

    ctl.jobs._dispatch_update(old_job, {**old_job, "metadata": {**old_job["metadata"], "resourceVersion": "2"}})
    assert ctl.expectations.pending_until(KEY) is not None, "an update of the same job forgets nothing"
    assert KEY in ctl._written and KEY in ctl.view.confirmed and KEY in ctl._departed

    queue = ctl.controller.queue
    while len(queue):  # what the earlier events queued, taken and done: the queue is empty again
        item, _ = await queue.get()
        queue.done(item)
    new_job = {**child("job", "job-uid-2"), "spec": {"enableDynamicWorker": True}}
    ctl.jobs._dispatch_update(old_job, new_job)
    assert ctl.expectations.pending_until(KEY) is None
    assert KEY not in ctl._written and KEY not in ctl.view.confirmed and KEY not in ctl._departed
    assert len(queue) == 1, "the new job is queued"


def test_a_pod_of_an_earlier_job_of_the_same_name_is_not_kept_as_departed() -> None:
    """The garbage collector removes the old job's pods after the new job exists: their causes are not the new
    job's."""
    ctl = controller()
    ctl.jobs.cache.put(KEY, {**child("job", "job-uid-2"), "spec": {"enableDynamicWorker": True}})
    ctl.pods._dispatch_delete(labelled("job-worker-0", "uid-a", "worker", 0))  # owned by job-uid
    assert ctl._departed == {}
