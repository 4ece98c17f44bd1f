"""Builders for TFJob decision tests: jobs, pods and services as the API would return them, and a
tiny in-memory "cluster" that applies a Decision the way the API server would.

Pods are built with the labels and ownerReference the controller puts on its pods, and a status
shaped like the kubelet's (phase, containerStatuses of the ``tensorflow`` container, conditions).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

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
from controller.tfjob.decide import DecideConfig, decide
from controller.tfjob.trim import trim_pod, trim_service

NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
JOB_UID = "job-uid-1"

_uids = itertools.count(1)


def ts(offset_seconds: float = 0, base: datetime = NOW) -> str:
    """RFC 3339 (seconds) of ``base + offset``."""
    return (base + timedelta(seconds=offset_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def at(offset_seconds: float) -> datetime:
    return NOW + timedelta(seconds=offset_seconds)


def container(name: str = "tensorflow", image: str = "tf:2", ports: list[dict[str, Any]] | None = None) -> dict:
    out: dict[str, Any] = {"name": name, "image": image}
    if ports is not None:
        out["ports"] = ports
    return out


def replica(
    replicas: int | None = 1,
    restart_policy: str | None = None,
    containers: list[dict[str, Any]] | None = None,
    port: int | None = 2222,
) -> dict[str, Any]:
    """A replica spec whose template has one ``tensorflow`` container with ``tfjob-port``
    (like upstream's test fixtures) unless ``containers`` is given."""
    if containers is None:
        ports = [{"name": "tfjob-port", "containerPort": port}] if port is not None else None
        containers = [container(ports=ports)]
    spec: dict[str, Any] = {"template": {"spec": {"containers": containers}}}
    if replicas is not None:
        spec["replicas"] = replicas
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def make_job(
    name: str = "test-tfjob",
    namespace: str = "default",
    *,
    worker: int | dict | None = None,
    ps: int | dict | None = None,
    chief: int | dict | None = None,
    master: int | dict | None = None,
    evaluator: int | dict | None = None,
    restart_policy: str | None = None,
    dynamic: bool | None = None,
    run_policy: dict[str, Any] | None = None,
    success_policy: str | None = None,
    status: dict[str, Any] | None = None,
    uid: str = JOB_UID,
) -> dict[str, Any]:
    """A TFJob as stored. Integer replica arguments become :func:`replica` specs with
    ``restart_policy``; dict arguments are used verbatim."""
    specs: dict[str, Any] = {}
    for key, value in (("Chief", chief), ("Master", master), ("PS", ps), ("Worker", worker), ("Evaluator", evaluator)):
        if value is None:
            continue
        specs[key] = value if isinstance(value, dict) else replica(value, restart_policy)
    spec: dict[str, Any] = {"tfReplicaSpecs": specs}
    if run_policy is not None:
        spec["runPolicy"] = run_policy
    if success_policy is not None:
        spec["successPolicy"] = success_policy
    if dynamic is not None:
        spec["enableDynamicWorker"] = dynamic
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "1"},
        "spec": spec,
    }
    if status is not None:
        job["status"] = status
    return job


def owner_ref(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def make_pod(
    job: dict[str, Any],
    replica_type: str,
    index: int,
    phase: str = "Running",
    *,
    exit_code: int | None = None,
    termination_reason: str | None = None,
    terminating: bool = False,
    conditions: list[dict[str, Any]] | None = None,
    reason: str | None = None,
    restart_count: int = 0,
    started_at: str | None = None,
    finished_at: str | None = None,
    container_name: str = "tensorflow",
    uid: str | None = None,
) -> dict[str, Any]:
    """A pod of the job in ``phase``. ``exit_code`` gives the ``tensorflow`` container a
    terminated state; ``started_at`` a running (or terminated) start time."""
    name = f"{job['metadata']['name']}-{replica_type.lower()}-{index}"
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": job["metadata"]["namespace"],
        "uid": uid or f"pod-uid-{next(_uids)}",
        "labels": {
            api.LABEL_OPERATOR_NAME: "tfjob-controller",
            api.LABEL_JOB_NAME: job["metadata"]["name"],
            api.LABEL_REPLICA_TYPE: replica_type.lower(),
            api.LABEL_REPLICA_INDEX: str(index),
        },
        "ownerReferences": [owner_ref(job)],
    }
    if terminating:
        metadata["deletionTimestamp"] = ts(30)
        metadata["deletionGracePeriodSeconds"] = 30
    status: dict[str, Any] = {"phase": phase}
    if reason is not None:
        status["reason"] = reason
    if conditions is not None:
        status["conditions"] = conditions
    if exit_code is not None or started_at is not None or restart_count:
        state: dict[str, Any]
        if exit_code is not None:
            terminated: dict[str, Any] = {
                "exitCode": exit_code,
                "reason": termination_reason or ("Completed" if exit_code == 0 else "Error"),
            }
            if started_at is not None:
                terminated["startedAt"] = started_at
            if finished_at is not None:
                terminated["finishedAt"] = finished_at
            state = {"terminated": terminated}
        else:
            state = {"running": {"startedAt": started_at}} if started_at else {"running": {}}
        status["containerStatuses"] = [
            {"name": container_name, "state": state, "restartCount": restart_count, "ready": phase == "Running"}
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {}, "status": status}


def make_service(job: dict[str, Any], replica_type: str, index: int, uid: str | None = None) -> dict[str, Any]:
    name = f"{job['metadata']['name']}-{replica_type.lower()}-{index}"
    labels = {
        api.LABEL_OPERATOR_NAME: "tfjob-controller",
        api.LABEL_JOB_NAME: job["metadata"]["name"],
        api.LABEL_REPLICA_TYPE: replica_type.lower(),
        api.LABEL_REPLICA_INDEX: str(index),
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": job["metadata"]["namespace"],
            "uid": uid or f"svc-uid-{next(_uids)}",
            "labels": labels,
            "ownerReferences": [owner_ref(job)],
        },
        "spec": {"clusterIP": "None", "selector": dict(labels)},
    }


def pods_for(job: dict[str, Any], replica_type: str, phases: list[str], **kwargs: Any) -> list[dict[str, Any]]:
    """One pod per entry of ``phases`` at indices 0, 1, ..."""
    return [make_pod(job, replica_type, i, phase, **kwargs) for i, phase in enumerate(phases)]


def services_for(job: dict[str, Any], replica_type: str, count: int) -> list[dict[str, Any]]:
    return [make_service(job, replica_type, i) for i in range(count)]


def disruption_condition(reason: str = "EvictionByEvictionAPI") -> dict[str, Any]:
    return {"type": "DisruptionTarget", "status": "True", "reason": reason, "lastTransitionTime": ts()}


def condition_types(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in status.get("conditions", [])]


def actions_of(decision: Decision, kind: type) -> list[Any]:
    return [a for a in decision.actions if isinstance(a, kind)]


def created_pod_names(decision: Decision) -> list[str]:
    return [a.pod["metadata"]["name"] for a in actions_of(decision, CreatePod)]


def deleted_pod_names(decision: Decision) -> list[str]:
    return [a.name for a in actions_of(decision, DeletePod)]


def event_reasons(decision: Decision) -> list[str]:
    return [e.reason for e in decision.events]


def metric_names(decision: Decision) -> list[str]:
    return [m.name for m in decision.metrics]


@dataclass
class Cluster:
    """The job and its children as the API server holds them; :meth:`apply` applies a Decision
    (new pods start Pending; deleting a Pending/terminal pod without finalizers removes it at once,
    deleting any other pod leaves it terminating, as graceful deletion does)."""

    job: dict[str, Any]
    pods: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
    config: DecideConfig = field(default_factory=DecideConfig)
    job_deleted: bool = False
    pod_group: dict[str, Any] | None = None  # gang scheduling: the job's PodGroup as the API holds it
    priority_classes: dict[str, int] = field(default_factory=dict)
    # The pods whose deletion the controller saw, as last seen, in the order they went (its pods watch's
    # DELETED events): every pod removed here, by a decision or by the test.
    departed: list[dict[str, Any]] = field(default_factory=list)

    def decide(self, now: datetime = NOW) -> Decision:
        """decide() on the stored objects -- and, every time, on the objects as the controller's
        informers cache them (controller.tfjob.trim), which must give the very same decision."""
        gang = {
            "pod_group": copy.deepcopy(self.pod_group),
            "priority_classes": dict(self.priority_classes),
            "departed": copy.deepcopy(self.departed),
        }
        decision = decide(
            copy.deepcopy(self.job), copy.deepcopy(self.pods), copy.deepcopy(self.services), now, self.config, **gang
        )
        trimmed = decide(
            copy.deepcopy(self.job),
            [trim_pod(p) for p in self.pods],
            [trim_service(s) for s in self.services],
            now,
            self.config,
            **{**gang, "departed": [trim_pod(p) for p in self.departed]},
        )
        assert trimmed == decision, "decide() differs on the trimmed (cached) pods and services"
        return decision

    def apply(self, decision: Decision, now: datetime | None = None) -> None:
        """Apply ``decision``'s actions and status; pods created get ``now`` as their creationTimestamp."""
        for action in decision.actions:
            if isinstance(action, CreatePod):
                pod = copy.deepcopy(action.pod)
                assert self.pod(pod["metadata"]["name"]) is None, f"duplicate create of {pod['metadata']['name']}"
                pod["metadata"]["uid"] = f"pod-uid-{next(_uids)}"
                if now is not None:
                    pod["metadata"]["creationTimestamp"] = ts(0, now)
                pod["status"] = {"phase": "Pending"}
                self.pods.append(pod)
            elif isinstance(action, DeletePod):
                pod = self.pod(action.name)
                assert pod is not None and pod["metadata"]["uid"] == action.uid, f"delete of unknown {action.name}"
                if pod["status"].get("phase") in ("Pending", "Succeeded", "Failed") and not pod["metadata"].get(
                    "finalizers"
                ):
                    self.remove_pod(action.name)
                else:
                    pod["metadata"]["deletionTimestamp"] = ts(30)
            elif isinstance(action, CreateService):
                service = copy.deepcopy(action.service)
                assert self.service(service["metadata"]["name"]) is None
                service["metadata"]["uid"] = f"svc-uid-{next(_uids)}"
                self.services.append(service)
            elif isinstance(action, DeleteService):
                service = self.service(action.name)
                assert service is not None and service["metadata"]["uid"] == action.uid
                self.services.remove(service)
            elif isinstance(action, DeleteJob):
                self.job_deleted = True
            elif isinstance(action, CreatePodGroup):
                assert self.pod_group is None, "duplicate create of the PodGroup"
                self.pod_group = copy.deepcopy(action.pod_group)
                self.pod_group["metadata"].update(uid=f"pg-uid-{next(_uids)}", resourceVersion="1")
            elif isinstance(action, UpdatePodGroup):
                assert self.pod_group is not None
                assert action.pod_group["metadata"]["uid"] == self.pod_group["metadata"]["uid"]
                self.pod_group = copy.deepcopy(action.pod_group)
            elif isinstance(action, DeletePodGroup):
                assert self.pod_group is not None and self.pod_group["metadata"]["uid"] == action.uid
                self.pod_group = None
        self.job["status"] = copy.deepcopy(decision.status)

    def step(self, now: datetime = NOW) -> Decision:
        decision = self.decide(now)
        self.apply(decision, now)
        return decision

    def pod(self, name: str) -> dict[str, Any] | None:
        return next((p for p in self.pods if p["metadata"]["name"] == name), None)

    def service(self, name: str) -> dict[str, Any] | None:
        return next((s for s in self.services if s["metadata"]["name"] == name), None)

    def set_phase(self, name: str, phase: str, **kwargs: Any) -> dict[str, Any]:
        """Replace pod ``name`` by one in ``phase`` (same uid, labels), see :func:`make_pod`."""
        old = self.pod(name)
        assert old is not None, name
        labels = old["metadata"]["labels"]
        replacement = make_pod(
            self.job,
            labels[api.LABEL_REPLICA_TYPE],
            int(labels[api.LABEL_REPLICA_INDEX]),
            phase,
            uid=old["metadata"]["uid"],
            **kwargs,
        )
        replacement["spec"] = old["spec"]
        replacement["metadata"]["labels"] = labels
        if "annotations" in old["metadata"]:
            replacement["metadata"]["annotations"] = old["metadata"]["annotations"]
        if "deletionTimestamp" in old["metadata"]:
            replacement["metadata"]["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
        self.pods[self.pods.index(old)] = replacement
        return replacement

    def annotate(self, name: str, annotations: dict[str, str]) -> None:
        """Merge ``annotations`` into pod ``name``'s (as ``kubectl annotate``)."""
        pod = self.pod(name)
        assert pod is not None, name
        pod["metadata"].setdefault("annotations", {}).update(annotations)

    def remove_pod(self, name: str) -> None:
        """Pod ``name`` is gone, and the controller saw it go (as it was last)."""
        pod = self.pod(name)
        assert pod is not None, name
        self.pods.remove(pod)
        self.departed.append(copy.deepcopy(pod))

    def terminate_pod(self, name: str, **status: Any) -> None:
        pod = self.pod(name)
        assert pod is not None, name
        pod["metadata"]["deletionTimestamp"] = ts(30)
        pod["status"].update(status)

    def run_all(self, started_at: str | None = None) -> None:
        """Every non-terminating pod becomes Running."""
        for pod in list(self.pods):
            if "deletionTimestamp" not in pod["metadata"]:
                self.set_phase(pod["metadata"]["name"], "Running", started_at=started_at or ts())


def assert_converged(cluster: Cluster, now: datetime = NOW) -> Decision:
    """Deciding again on the cluster must change nothing: no actions, events, metrics; same status."""
    decision = cluster.decide(now)
    assert decision.actions == (), decision.actions
    assert decision.events == (), decision.events
    assert decision.metrics == (), decision.metrics
    assert decision.status == cluster.job["status"]
    return decision


# --- dynamic-worker jobs -------------------------------------------------------------------------------
def running_cluster(workers: int = 3, restart_policy: str | None = None, **kwargs: Any) -> Cluster:
    """A dynamic job whose pods all run (workers + 1 PS unless ps=None given), converged at t=1."""
    kwargs.setdefault("ps", 1)
    cluster = Cluster(make_job(worker=workers, dynamic=True, restart_policy=restart_policy, **kwargs))
    cluster.step(NOW)
    cluster.run_all(started_at=ts())
    decision = cluster.step(at(1))
    assert ("Running", "True") in condition_types(decision.status)
    assert_converged(cluster, at(1))
    return cluster


def workers_status(cluster: Cluster) -> dict[str, Any]:
    return cluster.job["status"]["dynamicWorkers"]["workers"]


def assert_still_running(status: dict[str, Any]) -> None:
    types = condition_types(status)
    assert types[-1] == ("Running", "True"), types  # no flap to Restarting, never Failed
    assert not any(t in ("Failed", "Restarting") for t, _ in types)


def failover_events(decision: Decision) -> list[Any]:
    return [e for e in decision.events if e.reason == "WorkerFailover"]
