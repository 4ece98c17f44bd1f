"""Confirming the caches with the API server before a pass acts on what they do not show.

Why: a decision reads "the pod of index 3 is missing" as a fact (actions.py), and expectations make that true of
the controller's own writes; they cannot vouch for a cache that is behind the server for any other reason. Two
such caches are legal:

- a new process's first view (a restart, a standby taking over from a leader) can be older than the server's
  state when its lists are served from a watch cache (a ``resourceVersion=0`` list, a caching proxy): a job from
  before a scale-down looks like workers that vanished, a job from before its first pass asks for every pod;
- watches of different resources lag independently: the pods watch can be a second behind the jobs watch, so
  a replacement the job's status already records looks like a pod that vanished again.

Acting on such a view re-creates what the user removed on purpose, or counts a failover again, and the job's
resourceVersion does not stop it: it is a precondition of the status write only, and the pod writes are not
conditional on the job. So a pass that would record a failover, or write anything at all for a job this process
has not confirmed yet, first reads the job and its pods from the server (LISTs without a resourceVersion:
consistent reads, never served from a cache) and goes on only if the caches show the same: the job at the same
resourceVersion, no pod more or less and, for a job's first confirmation in the process, every pod at the same
resourceVersion too (a first status computed from a pod's older phase would be written on a view the server has
moved past). Otherwise the pass does nothing and the job is retried (rate-limited) once the caches catch up; the
event that brings a cache up to date requeues the job anyway. Later confirmations only ask that the cache miss no
pod the server has: a pod being evicted changes, or goes, between the cache and the list, and waiting for the
cache would lose what it shows (the eviction, then recorded as a plain deletion); acting on a pod that is gone is
harmless (a deletion is conditional on its uid).

What is not confirmed, and why that is safe:

- a pass that only creates, for a job already confirmed in this process: its jobs view is a live watch (no older
  than ordinary watch lag, which every controller lives with), so what the user removed on purpose is in the job
  (``workersToDelete``, the recorded members) and is not created again; a pod the pods cache misses for any other
  reason is either recorded as a failover (confirmed) or a fresh slot, whose creation the server answers with
  AlreadyExists, which changes nothing;
- the pods of a job that no pass has written yet (the server's job, at the cached version, has no status), for
  a pass that records no failover: it has no record or count to take twice, and a status computed from a pod
  phase the cache has not caught up with is corrected by the pass its event brings. A pass that would record a
  failover reads them all the same: a pod its cache misses (a controller that died before the job's first status
  write had created it) would otherwise be counted as a worker or PS that vanished.

Cost: one read (the job, by name: a field selector, cheap) for a new job's first write in the process; two (the
job, and its pods by label) for the first write on a job that has a status, and for every pass that records a
failover. A converged job, a creation, a status update and a scale-down on a confirmed job cost
none. docs/benchmarks/confirm.md measures it.
"""

from __future__ import annotations

from typing import Any

from controller.runtime.cache import controller_ref
from controller.runtime.client import PODS, ApiClient, Resource
from controller.tfjob import api
from controller.tfjob import pods as podlib
from controller.tfjob.actions import Decision
from controller.tfjob.decision.effects import records_failover


def writes(job: dict[str, Any], decision: Decision) -> bool:
    """Whether applying ``decision`` writes anything: an action, or a status that differs from the job's."""
    return bool(decision.actions) or decision.status != (job.get("status") or {})


class ViewCheck:
    """Which jobs this process has confirmed, and the confirmation itself (see the module's docstring)."""

    def __init__(self, client: ApiClient, jobs: Resource, pod_selector: str) -> None:
        self.client = client
        self.jobs = jobs
        self.pod_selector = pod_selector  # the label selector of the pods cache: the same pods, read from the server
        self.confirmed: set[str] = set()

    def needed(self, key: str, job: dict[str, Any], decision: Decision) -> bool:
        """Whether ``decision`` on ``job`` must be confirmed before it is applied."""
        return records_failover(decision) or (key not in self.confirmed and writes(job, decision))

    def forget(self, key: str) -> None:
        """The job is gone: a job re-created under its name is confirmed afresh."""
        self.confirmed.discard(key)

    async def current(
        self, key: str, job: dict[str, Any], pods: list[dict[str, Any]], *, counts_failover: bool = False
    ) -> bool:
        """Whether the server has ``job`` at its cached resourceVersion and, among the pods the job controls,
        exactly ``pods`` at their cached resourceVersions (a job not confirmed yet; its pods are not read when the
        server's job has no status and the pass does not record a failover: ``counts_failover``) or no pod missing
        from ``pods`` (a confirmed one). True marks the job confirmed."""
        meta = job.get("metadata") or {}
        namespace, name, uid = str(meta.get("namespace", "")), str(meta.get("name", "")), meta.get("uid")
        # A LIST narrowed to the job's name rather than a GET: the same consistent read, within the verbs the
        # controller's role already has for its informer (list, watch).
        jobs = await self.client.list(self.jobs, namespace=namespace, field_selector=f"metadata.name={name}")
        found = [j for j in _items(jobs) if j.get("metadata", {}).get("uid") == uid]
        if not found or found[0].get("metadata", {}).get("resourceVersion") != meta.get("resourceVersion"):
            return False  # deleted (its delete event is on its way), or changed since the cache saw it
        if key not in self.confirmed and not counts_failover and not found[0].get("status"):
            self.confirmed.add(key)  # no pass has written it: nothing its pods could make us count twice
            return True
        label = podlib.job_name_label_value(name)
        selector = f"{self.pod_selector},{api.LABEL_JOB_NAME}={label}"
        listed = await self.client.list(PODS, namespace=namespace, label_selector=selector)
        server = {podlib.uid(p): _version(p) for p in _items(listed) if (controller_ref(p) or {}).get("uid") == uid}
        cached = {podlib.uid(p): _version(p) for p in pods if _labels(p).get(api.LABEL_JOB_NAME) == label}
        # A job's first confirmation compares versions too; later ones (a creation, a failover) only ask that the
        # cache miss no pod the server has: a pod being evicted moves on, or is gone, between the cache and the list,
        # and waiting for the cache would lose what it shows (the eviction, then recorded as a plain deletion).
        if server != cached if key not in self.confirmed else not server.keys() <= cached.keys():
            return False
        self.confirmed.add(key)
        return True


def _items(listed: dict[str, Any]) -> list[dict[str, Any]]:
    items = listed.get("items")
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _version(obj: dict[str, Any]) -> Any:
    return obj.get("metadata", {}).get("resourceVersion")


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = obj.get("metadata", {}).get("labels")
    return labels if isinstance(labels, dict) else {}
