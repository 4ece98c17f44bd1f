"""TFJobs, pods, services and PodGroups exactly as Kubeflow's training-operator (v1.7-v1.9) leaves them.

The adoption and migration tests build a cluster the way training-operator had it when this controller is
switched on: these builders follow upstream's documented behaviour, never this controller's own rendering
(controller.tfjob.pods, controller.tfjob.conditions), so a test of adoption cannot pass by agreeing with itself.
That a builder here looks like the controller's (a condition's six fields) is the point, not a copy to share.

What training-operator writes (v1.8.1, unchanged in v1.9.0 for TFJob):

- pods and headless services ``<job>-<rt>-<i>``, labelled ``training.kubeflow.org/operator-name=tfjob-controller``,
  ``job-name``, ``replica-type`` (lower case), ``replica-index``, and on pods ``job-role=master`` for the Chief/Master
  pods, else Worker 0; controlled by the job (``controller: true``, ``blockOwnerDeletion: true``);
- the pod spec is the template's, defaulted in memory (port ``tfjob-port: 2222`` added to the ``tensorflow``
  container), ``restartPolicy`` mapped from the replica's (ExitCode -> Never), and, for a distributed job, a
  ``TF_CONFIG`` appended to the ``tensorflow`` container: dense, or sparse with ``enableDynamicWorker`` (a worker gets
  only its own address and the PS list, ``null`` without PS; a PS only its own; Chief/Master/Evaluator an empty
  cluster);
- with ``--gang-scheduler-name=volcano``: a PodGroup named like the job, controlled by it, ``minMember`` = every
  replica, queue ``default``; pods get ``schedulerName: volcano`` and the group's annotations;
- the status, written with an Update of the ``status`` subresource: conditions with upstream's reasons and messages,
  ``replicaStatuses`` counted from the pods, ``startTime``, ``completionTime``; never ``dynamicWorkers``;
- all of it with its client's default User-Agent, so the API server records the field manager ``manager`` (the
  binary is ``/manager``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from controller.runtime.client import PODS, SERVICES, ApiClient, Resource
from tests.e2e.conftest import eventually, phase
from tfjob_sim.cluster import SimCluster

USER_AGENT = "manager/v0.0.0 (linux/amd64) kubernetes/$Format"
MANAGER = "manager"  # the field manager the API server records for that User-Agent
TFJOBS = Resource("kubeflow.org", "v1", "tfjobs")
VOLCANO_PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups")

_LOWER = {"Chief": "chief", "Master": "master", "PS": "ps", "Worker": "worker", "Evaluator": "evaluator"}
_RESTART = {"Always": "Always", "OnFailure": "OnFailure", "Never": "Never", "ExitCode": "Never"}


async def client(cluster: SimCluster) -> ApiClient:
    """A client that writes as training-operator does (its User-Agent, hence its field manager)."""
    assert cluster.kubeconfig_path
    return await ApiClient.from_kubeconfig(cluster.kubeconfig_path, user_agent=USER_AGENT)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- pods and services ----------------------------------------------------------------------------------------


def _specs(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return job["spec"]["tfReplicaSpecs"]


def _replicas(spec: dict[str, Any]) -> int:
    return spec.get("replicas", 1) if spec.get("replicas") is not None else 1


def _address(job: dict[str, Any], rtype: str, index: int) -> str:
    meta = job["metadata"]
    return f"{meta['name']}-{_LOWER[rtype]}-{index}.{meta['namespace']}.svc:2222"


def tf_config(job: dict[str, Any], rtype: str, index: int) -> str | None:
    specs = _specs(job)
    if sum(_replicas(s) for t, s in specs.items() if t in _LOWER) == 1:
        return None  # not distributed
    task = {"type": _LOWER[rtype], "index": index}
    if not job["spec"].get("enableDynamicWorker"):
        cluster = {
            _LOWER[t]: [_address(job, t, i) for i in range(_replicas(specs[t]))] for t in sorted(specs, key=_LOWER.get)
        }
        return json.dumps({"cluster": cluster, "task": task, "environment": "cloud"}, separators=(",", ":"))
    ps = [_address(job, "PS", i) for i in range(_replicas(specs["PS"]))] if "PS" in specs else None
    if rtype == "Worker":
        sparse: dict[str, Any] = {"worker": {str(index): _address(job, rtype, index)}, "ps": ps}
    elif rtype == "PS":
        sparse = {"worker": {}, "ps": [_address(job, rtype, index)]}
    else:
        sparse = {"worker": {}, "ps": []}
    return json.dumps({"cluster": sparse, "task": task}, separators=(",", ":"))


def _labels(job: dict[str, Any], rtype: str, index: int) -> dict[str, str]:
    return {
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/job-name": job["metadata"]["name"],
        "training.kubeflow.org/replica-type": _LOWER[rtype],
        "training.kubeflow.org/replica-index": str(index),
    }


def _owner(job: dict[str, Any]) -> list[dict[str, Any]]:
    meta = job["metadata"]
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def is_master(job: dict[str, Any], rtype: str, index: int) -> bool:
    if any(t in _specs(job) for t in ("Chief", "Master")):
        return rtype in ("Chief", "Master")
    return rtype == "Worker" and index == 0


def pod(job: dict[str, Any], rtype: str, index: int, *, job_role: bool = True, gang: bool = False) -> dict[str, Any]:
    spec = _specs(job)[rtype]
    template = json.loads(json.dumps(spec["template"]))
    meta = template.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), **_labels(job, rtype, index)}
    if job_role and is_master(job, rtype, index):
        labels["training.kubeflow.org/job-role"] = "master"
    annotations = dict(meta.get("annotations") or {})
    pod_spec = template["spec"]
    pod_spec["restartPolicy"] = _RESTART[spec.get("restartPolicy") or "Never"]
    for container in pod_spec["containers"]:
        if container["name"] != "tensorflow":
            continue
        if not any(p.get("name") == "tfjob-port" for p in container.get("ports") or []):
            container.setdefault("ports", []).append({"name": "tfjob-port", "containerPort": 2222})
        config = tf_config(job, rtype, index)
        if config is not None:
            container.setdefault("env", []).append({"name": "TF_CONFIG", "value": config})
        break
    if gang:
        pod_spec.setdefault("schedulerName", "volcano")
        annotations["scheduling.k8s.io/group-name"] = job["metadata"]["name"]
        annotations["volcano.sh/task-spec"] = _LOWER[rtype]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job['metadata']['name']}-{_LOWER[rtype]}-{index}",
            "namespace": job["metadata"]["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": _owner(job),
        },
        "spec": pod_spec,
    }


def service(job: dict[str, Any], rtype: str, index: int) -> dict[str, Any]:
    labels = _labels(job, rtype, index)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{job['metadata']['name']}-{_LOWER[rtype]}-{index}",
            "namespace": job["metadata"]["namespace"],
            "labels": labels,
            "ownerReferences": _owner(job),
        },
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "tfjob-port", "port": 2222}]},
    }


def pod_group(job: dict[str, Any]) -> dict[str, Any]:
    """The Volcano PodGroup of a job without ``schedulingPolicy`` and without resource requests."""
    meta = job["metadata"]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": _owner(job),
        },
        "spec": {
            "minMember": sum(_replicas(s) for s in _specs(job).values()),
            "queue": "default",
            "priorityClassName": "",
            "minResources": {},
        },
    }


def slots(job: dict[str, Any]) -> list[tuple[str, int]]:
    """Every (replica type, index) training-operator keeps a pod and a service for."""
    return [(t, i) for t, s in _specs(job).items() for i in range(_replicas(s))]


async def create_children(
    to: ApiClient,
    job: dict[str, Any],
    *,
    job_role: bool = True,
    gang: bool = False,
    skip: tuple[tuple[str, int], ...] = (),
) -> None:
    """Create the job's pods and services (PodGroup first, with ``gang``) as training-operator does; no pod for
    the slots in ``skip`` (a restart deletes the pod and keeps its service)."""
    namespace = job["metadata"]["namespace"]
    if gang:
        await to.create(VOLCANO_PODGROUPS, pod_group(job), namespace=namespace)
    for rtype, index in slots(job):
        await to.create(SERVICES, service(job, rtype, index), namespace=namespace)
        if (rtype, index) not in skip:
            await to.create(PODS, pod(job, rtype, index, job_role=job_role, gang=gang), namespace=namespace)


async def children(client: ApiClient, job: str, namespace: str = "default") -> dict[str, dict[str, Any]]:
    """The job's pods and services by ``kind/name``."""
    selector = f"training.kubeflow.org/job-name={job}"
    out = {}
    for resource, kind in ((PODS, "pod"), (SERVICES, "service")):
        for obj in (await client.list(resource, namespace=namespace, label_selector=selector))["items"]:
            out[f"{kind}/{obj['metadata']['name']}"] = obj
    return out


def uids(objects: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: obj["metadata"]["uid"] for name, obj in objects.items()}


async def pods_in(client: ApiClient, job: str, wanted: dict[str, str]) -> None:
    """Wait until the job's pods (in ``default``) are exactly ``wanted`` (name -> phase)."""

    async def there() -> bool:
        pods = {n.split("/", 1)[1]: o for n, o in (await children(client, job)).items() if n.startswith("pod/")}
        return {n: phase(p) for n, p in pods.items()} == wanted

    await eventually(there, timeout=60, what=f"{job}'s pods to be {wanted}")


async def leave_running(
    admin: ApiClient, to: ApiClient, manifest: dict[str, Any], *, job_role: bool = True, gang: bool = False
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The job (in ``default``) Running under training-operator: created by ``admin``, every pod Running, its
    children and status written by ``to``; the job as stored, and its pods and services by ``kind/name``."""
    job = await admin.create(TFJOBS, manifest, namespace="default")
    await create_children(to, job, job_role=job_role, gang=gang)
    name = job["metadata"]["name"]
    await pods_in(admin, name, {f"{name}-{_LOWER[t]}-{i}": "Running" for t, i in slots(job)})
    started = now()
    status = {
        "conditions": [created(job, started), running(job, started)],
        "replicaStatuses": {t: {"active": _replicas(s)} for t, s in _specs(job).items()},
        "startTime": started,
    }
    return await write_status(to, name, "default", status), await children(admin, name)


# --- status -----------------------------------------------------------------------------------------------------


def condition(cond_type: str, status: str, reason: str, message: str, at: str) -> dict[str, str]:
    return {
        "type": cond_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": at,
        "lastTransitionTime": at,
    }


def created(job: dict[str, Any], at: str) -> dict[str, str]:
    return condition("Created", "True", "TFJobCreated", f"TFJob {job['metadata']['name']} is created.", at)


def running(job: dict[str, Any], at: str, status: str = "True") -> dict[str, str]:
    meta = job["metadata"]
    return condition("Running", status, "TFJobRunning", f"TFJob {meta['namespace']}/{meta['name']} is running.", at)


def restarting(job: dict[str, Any], rtype: str, at: str) -> dict[str, str]:
    message = f"job {job['metadata']['name']} is restarting because {rtype} replica(s) failed."
    return condition("Restarting", "True", "TFJobRestarting", message, at)


def succeeded(job: dict[str, Any], at: str) -> dict[str, str]:
    meta = job["metadata"]
    message = f"TFJob {meta['namespace']}/{meta['name']} successfully completed."
    return condition("Succeeded", "True", "TFJobSucceeded", message, at)


async def write_status(to: ApiClient, name: str, namespace: str, status: dict[str, Any]) -> dict[str, Any]:
    """Replace the job's status as training-operator does (an Update of the status subresource)."""
    job = await to.get(TFJOBS, name, namespace=namespace)
    return await to.replace(TFJOBS, {**job, "status": status}, namespace=namespace, subresource="status")


# --- its CRD ----------------------------------------------------------------------------------------------------


def _without_rules(node: Any, keep: str) -> None:
    """Drop every CEL rule except those whose message contains ``keep``, and every ``maxProperties``."""
    if isinstance(node, dict):
        rules = [r for r in node.pop("x-kubernetes-validations", []) if keep in r.get("message", "")]
        if rules:
            node["x-kubernetes-validations"] = rules
        node.pop("maxProperties", None)
        for value in node.values():
            _without_rules(value, keep)
    elif isinstance(node, list):
        for value in node:
            _without_rules(value, keep)


def crd(ours: dict[str, Any]) -> dict[str, Any]:
    """training-operator v1.8.1's TFJob CRD in every respect a migration meets: this project's CRD without what it
    adds (the ``scale`` subresource, ``status.dynamicWorkers``, the CEL rules that replace the admission webhook, the
    ``Workers``/``Active`` columns, v1.9's ``managedBy``); the queue immutability rule is upstream's own."""
    out = json.loads(json.dumps(ours))
    out["metadata"] = {"name": ours["metadata"]["name"]}
    [version] = out["spec"]["versions"]
    version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = [
        c for c in version["additionalPrinterColumns"] if c["name"] in ("State", "Age")
    ]
    schema = version["schema"]["openAPIV3Schema"]
    del schema["properties"]["status"]["properties"]["dynamicWorkers"]
    del schema["properties"]["spec"]["properties"]["runPolicy"]["properties"]["managedBy"]
    _without_rules(schema, keep="queue is immutable")
    return out


# --- its Deployment and admission webhooks (Kubeflow's manifests, overlay `kubeflow`) ----------------------------

NAMESPACE = "kubeflow"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
# v1.8's kinds, in the order of its ValidatingWebhookConfiguration (v1.9 has jaxjob where v1.8 has mxjob).
WEBHOOK_KINDS = ("mxjob", "paddlejob", "pytorchjob", "tfjob", "xgboostjob")


def deployment() -> dict[str, Any]:
    labels = {"control-plane": "kubeflow-training-operator"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "training-operator", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": "training-operator",
                    "containers": [
                        {
                            "name": "training-operator",
                            "image": "kubeflow/training-operator:v1-04f9f13",
                            "command": ["/manager"],
                            "ports": [{"containerPort": 8080}, {"containerPort": 9443, "name": "webhook-server"}],
                        }
                    ],
                },
            },
        },
    }


def webhook_configuration() -> dict[str, Any]:
    def webhook(kind: str) -> dict[str, Any]:
        return {
            "name": f"validator.{kind}.training-operator.kubeflow.org",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "service": {
                    "name": "training-operator",
                    "namespace": NAMESPACE,
                    "path": f"/validate-kubeflow-org-v1-{kind}",
                }
            },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [
                {
                    "apiGroups": ["kubeflow.org"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [f"{kind}s"],
                }
            ],
        }

    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": {"control-plane": "kubeflow-training-operator"}},
        "webhooks": [webhook(kind) for kind in WEBHOOK_KINDS],
    }
