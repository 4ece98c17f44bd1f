"""The peer of benchmarks/scale.py: the same ``decide()`` driven by kopf handlers, as a Python user would
write a TFJob operator with kopf instead of this project's runtime.

Run as ``KUBECONFIG=... kopf run --standalone --all-namespaces benchmarks/kopf_peer.py``.

What a careful kopf user writes, following decide()'s contract (controller/tfjob/actions.py): kopf
indexes hold the TFJobs by uid and their pods and services by owner uid; every event of a job, or of
a pod or service it owns, reconciles that job (one at a time per job, under a lock):
``decide(job, pods, services, now)``, then the actions through kubernetes-asyncio (the usual client
next to kopf), events through ``kopf.event`` (kopf posts them in the background; or see
``KOPF_PEER_EVENTS`` below), the same events the controller records. decide() must
only see caches that hold every object its earlier decisions created or deleted, so the peer keeps
a small "created but not indexed yet" and "deleted but still indexed" memory per job (keyed by kind
and name: a worker's pod and its service share a name), and reads its own status writes: until the
index shows a job none of its writes replaced, it decides on the job the last write
stored (deciding on the stale one would redo the last transition: a failed worker deleted again).
kopf's settings are left at their defaults.

Index pre-population: kopf holds every handler back until each object of an indexed resource has
been indexed, and with N objects at startup that wait costs O(N^2) (every object's worker waits on
one shared condition that is notified once per object: see docs/benchmarks/scale-history.md). It is kopf's
own behaviour and part of what a kopf user gets, so the peer keeps its indexes; benchmarks/scale.py
waits for the peer to catch up before it disrupts anything, as it does for the controller.

``KOPF_PEER_METRICS_PORT`` (optional) serves two Prometheus figures on 127.0.0.1, as a kopf user
would export them: events handled and reconciles in progress. benchmarks/scale.py reads them to
know when the peer has caught up, as it reads the controller's reconcile metrics; a third,
``kopf_peer_settings_info``, says which of the two settings below the process runs with.

Two settings make the peer do the same work as the controller, so that a comparison compares the
controllers and not their side work (benchmarks/scale.py sets both and states them in its report):

- ``KOPF_PEER_EVENTS``: ``kopf`` (the default) posts every Kubernetes Event through ``kopf.event``,
  as a kopf user's operator does (kopf queues them and posts each one, never dropping); ``recorder``
  records them through the controller's own recorder (``controller/runtime/events.py``, with the
  settings the controller gives it), so both sides correlate, queue and drop events by one policy.
- ``KOPF_PEER_GC``: ``default`` (the default) keeps CPython's collector thresholds; ``tuned`` sets the
  thresholds the controller's command sets at start (``controller/ops/collector.py``).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import gc
import os
import sys
from pathlib import Path
from typing import Any

import kopf
import prometheus_client
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client.rest import ApiException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controller.ops.collector import tune_collector  # noqa: E402
from controller.runtime.client import ApiClient  # noqa: E402
from controller.runtime.events import EventRecorder  # noqa: E402
from controller.tfjob.actions import CreatePod, CreateService, DeleteJob, DeletePod, DeleteService  # noqa: E402
from controller.tfjob.decide import decide  # noqa: E402

LABELS = {"training.kubeflow.org/operator-name": "tfjob-controller"}
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
AGENT = "kopf-peer"

HANDLED = prometheus_client.Counter("kopf_peer_events_handled", "Watch events the peer's handlers finished")
IN_PROGRESS = prometheus_client.Gauge("kopf_peer_reconciles_in_progress", "Reconciles running now")
SETTINGS = prometheus_client.Info("kopf_peer_settings", "The peer's events policy and collector thresholds")

EVENT_POLICIES = ("kopf", "recorder")
COLLECTOR_SETTINGS = ("default", "tuned")


def _setting(name: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, choices[0])
    if value not in choices:
        raise SystemExit(f"{name}={value!r}: expected one of {', '.join(choices)}")
    return value


EVENTS_POLICY = _setting("KOPF_PEER_EVENTS", EVENT_POLICIES)
if _setting("KOPF_PEER_GC", COLLECTOR_SETTINGS) == "tuned":
    tune_collector()  # at import, as the controller's command does before it starts

_api: k8s.ApiClient | None = None
_locks: dict[str, asyncio.Lock] = {}
_unseen: dict[str, set[tuple[str, str]]] = {}  # job uid -> (kind, name) created, not indexed yet
_undead: dict[str, set[str]] = {}  # job uid -> uids of objects deleted, still indexed
# job uid -> (every resourceVersion our status writes replaced, the job the last one stored)
_written: dict[str, tuple[set[str], dict[str, Any]]] = {}
_timers: dict[str, asyncio.TimerHandle] = {}  # job uid -> its timed requeue
_background: set[asyncio.Task] = set()
_recorder: EventRecorder | None = None  # KOPF_PEER_EVENTS=recorder
_recorder_client: ApiClient | None = None
_recorder_task: asyncio.Task | None = None


@kopf.on.login()
def login(**_: Any) -> kopf.ConnectionInfo:
    # The simulator needs no credentials; kopf's own login handlers want a credentials library.
    doc = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    context = next(c for c in doc["contexts"] if c["name"] == doc["current-context"])["context"]
    cluster = next(c for c in doc["clusters"] if c["name"] == context["cluster"])["cluster"]
    return kopf.ConnectionInfo(server=cluster["server"], default_namespace=context.get("namespace"))


@kopf.on.startup()
async def startup(**_: Any) -> None:
    global _api, _recorder, _recorder_client, _recorder_task
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=os.environ["KUBECONFIG"], client_configuration=configuration)
    _api = k8s.ApiClient(configuration)
    _api.user_agent = AGENT
    if EVENTS_POLICY == "recorder":
        # No client-side limit on the events' own client: the recorder's policy is the one applied, as
        # the peer's other writes (kubernetes-asyncio) have none either.
        _recorder_client = await ApiClient.from_kubeconfig(os.environ["KUBECONFIG"], qps=0, user_agent=AGENT)
        # Its drops are counted in events_dropped_total on the peer's /metrics, as the controller's are.
        _recorder = EventRecorder(_recorder_client, AGENT, prometheus_client.REGISTRY)
        _recorder_task = asyncio.create_task(_recorder.run())
    SETTINGS.info({"events": EVENTS_POLICY, "gc": ",".join(str(n) for n in gc.get_threshold())})
    if os.environ.get("KOPF_PEER_METRICS_PORT"):
        prometheus_client.start_http_server(int(os.environ["KOPF_PEER_METRICS_PORT"]), addr="127.0.0.1")


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    if _recorder_task is not None:
        _recorder_task.cancel()  # the recorder flushes what is queued, within its flush timeout
        await asyncio.gather(_recorder_task, return_exceptions=True)
    if _recorder_client is not None:
        await _recorder_client.close()
    if _api is not None:
        await _api.close()


def event(job: dict[str, Any], type: str, reason: str, message: str) -> None:
    """Record an Event on ``job`` by the policy KOPF_PEER_EVENTS chose."""
    if _recorder is not None:
        _recorder.record(job, type, reason, message)
    else:
        kopf.event(job, type=type, reason=reason, message=message)


# Async index functions: kopf runs a sync handler in a thread pool, a hop per event (in the burst's
# profile, concurrent.futures workers went from 19% to 8% of samples; the rest is kubernetes-asyncio
# reading ~/.netrc per request, which a kopf user inherits as our controller once did).
@kopf.index(GROUP, VERSION, PLURAL)
async def jobs_by_uid(body: kopf.Body, **_: Any) -> dict[str, Any]:
    return {body["metadata"]["uid"]: body}


def _owner(body: kopf.Body) -> str | None:
    for ref in body["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "TFJob":
            return ref.get("uid")
    return None


@kopf.index("", "v1", "pods", labels=LABELS)
async def pods_by_owner(body: kopf.Body, **_: Any) -> dict[str | None, Any]:
    return {_owner(body): body}


@kopf.index("", "v1", "services", labels=LABELS)
async def services_by_owner(body: kopf.Body, **_: Any) -> dict[str | None, Any]:
    return {_owner(body): body}


def _plain(body: Any) -> dict[str, Any]:
    """kopf bodies are read-only mappings over the raw object; decide() wants a dict (their values
    already are plain dicts and lists)."""
    return dict(body)


async def reconcile(uid: str, jobs: kopf.Index, pods: kopf.Index, services: kopf.Index) -> None:
    lock = _locks.setdefault(uid, asyncio.Lock())
    async with lock:
        found = list(jobs.get(uid, []))
        if not found:
            return
        job = _plain(found[0])
        written = _written.get(uid)
        if written is not None and job["metadata"].get("resourceVersion") in written[0]:
            # Read-your-writes: the index still holds a job one of our status writes replaced (it may
            # lag by more than one write).
            job = written[1]
        elif written is not None:
            del _written[uid]  # the index has caught up (or someone else wrote): it is the truth again
        if job["metadata"].get("deletionTimestamp"):
            return
        pod_list = [_plain(p) for p in pods.get(uid, [])]
        service_list = [_plain(s) for s in services.get(uid, [])]
        indexed = {("pod", o["metadata"]["name"]) for o in pod_list} | {
            ("service", o["metadata"]["name"]) for o in service_list
        }
        unseen = _unseen[uid] = _unseen.get(uid, set()) - indexed
        # A deletion is visible once the object is terminating or gone.
        undead = _undead[uid] = _undead.get(uid, set()) & {
            o["metadata"]["uid"] for o in pod_list + service_list if not o["metadata"].get("deletionTimestamp")
        }
        if unseen or undead:
            return  # our writes are still on their way to the indexes; their events reconcile again
        decision = decide(job, pod_list, service_list, _dt.datetime.now(_dt.UTC))
        await apply(job, decision, unseen, undead)
        if decision.requeue_after is not None:
            # kopf's event handlers have no timed requeue: wake the job ourselves (a failover back-off ends).
            previous = _timers.pop(uid, None)
            if previous is not None:
                previous.cancel()
            _timers[uid] = asyncio.get_running_loop().call_later(
                decision.requeue_after, _wake, uid, jobs, pods, services
            )


def _wake(uid: str, jobs: kopf.Index, pods: kopf.Index, services: kopf.Index) -> None:
    task = asyncio.get_running_loop().create_task(reconcile(uid, jobs, pods, services))
    _background.add(task)
    task.add_done_callback(_background.discard)


async def apply(job: dict[str, Any], decision: Any, unseen: set[tuple[str, str]], undead: set[str]) -> None:
    assert _api is not None
    core = k8s.CoreV1Api(_api)
    custom = k8s.CustomObjectsApi(_api)
    namespace = job["metadata"]["namespace"]
    uid = job["metadata"]["uid"]
    for action in decision.actions:
        try:
            if isinstance(action, CreatePod):
                unseen.add(("pod", action.pod["metadata"]["name"]))
                await core.create_namespaced_pod(namespace, action.pod)
                event(job, "Normal", "SuccessfulCreatePod", f"Created pod: {action.pod['metadata']['name']}")
            elif isinstance(action, CreateService):
                unseen.add(("service", action.service["metadata"]["name"]))
                await core.create_namespaced_service(namespace, action.service)
                event(
                    job, "Normal", "SuccessfulCreateService", f"Created service: {action.service['metadata']['name']}"
                )
            elif isinstance(action, DeletePod):
                undead.add(action.uid)
                await core.delete_namespaced_pod(
                    action.name,
                    namespace,
                    body=k8s.V1DeleteOptions(
                        preconditions=k8s.V1Preconditions(uid=action.uid), propagation_policy="Background"
                    ),
                )
                event(job, "Normal", "SuccessfulDeletePod", f"Deleted pod: {action.name}")
            elif isinstance(action, DeleteService):
                undead.add(action.uid)
                await core.delete_namespaced_service(
                    action.name,
                    namespace,
                    body=k8s.V1DeleteOptions(
                        preconditions=k8s.V1Preconditions(uid=action.uid), propagation_policy="Background"
                    ),
                )
                event(job, "Normal", "SuccessfulDeleteService", f"Deleted service: {action.name}")
            elif isinstance(action, DeleteJob):
                await custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"])
                return
        except ApiException as exc:
            if exc.status not in (404, 409):  # already created / already gone
                # Nothing will be observed: do not wait for it (kopf logs the error; the next event retries).
                unseen.clear()
                undead.clear()
                raise
    if decision.status == (job.get("status") or {}):
        return
    try:
        stored = await custom.replace_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, job["metadata"]["name"], {**job, "status": decision.status}
        )
    except ApiException as exc:
        if exc.status != 409:
            raise
        return  # a newer job is on its way: its event reconciles again
    replaced = _written[uid][0] if uid in _written else set()
    _written[uid] = (replaced | {job["metadata"]["resourceVersion"]}, stored)
    for record in decision.events:
        event(job, record.type, record.reason, record.message)


def _forget(uid: str) -> None:
    for memory in (_locks, _unseen, _undead, _written):
        memory.pop(uid, None)
    timer = _timers.pop(uid, None)
    if timer is not None:
        timer.cancel()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def job_event(
    type: str,
    body: kopf.Body,
    jobs_by_uid: kopf.Index,
    pods_by_owner: kopf.Index,
    services_by_owner: kopf.Index,
    **_: Any,
) -> None:
    if type == "DELETED":
        _forget(body["metadata"]["uid"])
    else:
        with IN_PROGRESS.track_inprogress():
            await reconcile(body["metadata"]["uid"], jobs_by_uid, pods_by_owner, services_by_owner)
    HANDLED.inc()


@kopf.on.event("", "v1", "pods", labels=LABELS)
@kopf.on.event("", "v1", "services", labels=LABELS)
async def child_event(
    body: kopf.Body, jobs_by_uid: kopf.Index, pods_by_owner: kopf.Index, services_by_owner: kopf.Index, **_: Any
) -> None:
    owner = _owner(body)
    if owner:
        with IN_PROGRESS.track_inprogress():
            await reconcile(owner, jobs_by_uid, pods_by_owner, services_by_owner)
    HANDLED.inc()
