"""The scenarios of the systematic perturbation sweep: each is one TFJob, a way to bring it to the state where the
story starts, one user action (the *window* the perturbations aim at), and what shows the action took effect.

A scenario drives the cluster only as a user and the simulated nodes do: the Kubernetes API (create, patch, delete,
evict) and the simulator's pod annotations (``sim.tfjob.dev/exit-code`` and friends). What the controller must do
about it is not written here: the unperturbed run's outcome is the reference every perturbed run is compared with
(:mod:`benchmarks.chaos.systematic`). ``effect`` only says when the action's consequence is visible at all (the
pod the action hit has been replaced, the job has finished), so that a run is not judged on a cluster the action
has not reached yet; convergence is judged separately.

Every scenario starts from a freshly created job in a fresh simulated cluster: ``ready`` says when its setup is
done (it runs unperturbed), ``prepare`` makes the user's changes that precede the action (an annotation that
chooses a leaver), ``act`` is the action.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks.chaos.invariants import conditions, is_true, live
from tfjob_sim.kubelet import EVICT, EXIT_CODE
from tfjob_sim.testing.objects import tfjob

if TYPE_CHECKING:
    from benchmarks.chaos.systematic import Snapshot, World

NAMESPACE = "default"
COST = "controller.kubernetes.io/pod-deletion-cost"
TFJOBS = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/tfjobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PODGROUPS_VOLCANO = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NAMESPACE}/podgroups"

Obj = Mapping[str, Any]


def job_manifest(name: str, **options: Any) -> dict[str, Any]:
    """A TFJob of the scenarios' namespace whose pods the simulated kubelet drives by annotations
    (:func:`tfjob_sim.testing.objects.tfjob`, the same manifest the end-to-end tests create)."""
    return tfjob(name, namespace=NAMESPACE, **options)


# --- reading a snapshot --------------------------------------------------------------------------------
def pod_named(snap: Snapshot, name: str) -> Obj | None:
    return next((p for p in snap.pods if p["metadata"]["name"] == name), None)


def uid_of(snap: Snapshot, name: str) -> str | None:
    pod = pod_named(snap, name)
    return pod["metadata"]["uid"] if pod is not None else None


def running(snap: Snapshot, *names: str) -> list[str]:
    """Why the pods ``names`` are not all live and Running (empty when they are)."""
    out = []
    for name in names:
        pod = pod_named(snap, name)
        if pod is None or not live(pod) or (pod.get("status") or {}).get("phase") != "Running":
            out.append(f"{name} is not running")
    return out


def replaced(snap: Snapshot, before: Snapshot, name: str) -> list[str]:
    """Why ``name`` has not been replaced by a new, running pod (empty when it has)."""
    old, new = uid_of(before, name), uid_of(snap, name)
    if new is None or new == old:
        return [f"{name} not replaced yet"]
    return running(snap, name)


def all_running(snap: Snapshot, count: int) -> bool:
    return sum(1 for p in snap.pods if live(p) and (p.get("status") or {}).get("phase") == "Running") == count


def dynamic_status(job: Obj | None) -> Mapping[str, Any]:
    status = (job or {}).get("status") or {}
    return status.get("dynamicWorkers") or {}


@dataclass(frozen=True)
class Scenario:
    """One story. ``ready``/``effect`` return why not yet (empty: yes); ``act``/``prepare`` act through ``World``."""

    name: str
    job: str
    manifest: Callable[[], dict[str, Any]]
    ready: Callable[[Snapshot], list[str]]
    act: Callable[[World, Snapshot], Awaitable[None]]
    effect: Callable[[Snapshot, Snapshot], list[str]]
    prepare: Callable[[World, Snapshot], Awaitable[None]] | None = None
    # The job is deleted by the action or by its TTL: convergence is its children being gone.
    job_goes: bool = False
    # The job ends Failed by design (backoff limit, deadline): "never Failed" does not apply.
    may_fail: bool = False
    sim_options: dict[str, Any] = field(default_factory=dict)
    controller_args: tuple[str, ...] = ()
    description: str = ""
    # No controller during the setup: the action is starting one (it adopts what another controller left).
    adopt: bool = False


def running_job(count: int, *, members: list[int] | None = None) -> Callable[[Snapshot], list[str]]:
    """Ready: Running, ``count`` running pods, and (dynamic jobs) the members recorded."""

    def ready(snap: Snapshot) -> list[str]:
        out = []
        if snap.job is None or not is_true(snap.job, "Running"):
            out.append("job not Running")
        if not all_running(snap, count):
            out.append(f"not {count} running pods")
        if members is not None and list(dynamic_status(snap.job).get("members") or []) != members:
            out.append(f"members not {members}")
        return out

    return ready


async def annotate(world: World, pod: str, annotations: dict[str, str]) -> None:
    await world.api.call(
        "PATCH",
        f"{PODS}/{pod}",
        {"metadata": {"annotations": annotations}},
        content_type="application/merge-patch+json",
    )


async def patch_job(world: World, job: str, patch: dict[str, Any]) -> None:
    await world.api.call("PATCH", f"{TFJOBS}/{job}", patch, content_type="application/merge-patch+json")


async def delete_pod(world: World, pod: str, *, force: bool = False) -> None:
    """``kubectl delete pod``; with ``force``, ``--force --grace-period=0``: the pod is removed at once."""
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0} if force else None
    await world.api.call("DELETE", f"{PODS}/{pod}", options, tolerate=())


async def evict_pod(world: World, pod: str) -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": NAMESPACE}}
    await world.api.call("POST", f"{PODS}/{pod}/eviction", eviction, tolerate=())


# --- the scenarios ---------------------------------------------------------------------------------------
def _targeted_scale_down() -> Scenario:
    job = "sd"

    async def prepare(world: World, snap: Snapshot) -> None:
        await annotate(world, f"{job}-worker-1", {COST: "-100"})

    async def act(world: World, snap: Snapshot) -> None:
        await patch_job(world, job, {"spec": {"workersToDelete": [3], "tfReplicaSpecs": {"Worker": {"replicas": 3}}}})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        gone = [n for n in (f"{job}-worker-1", f"{job}-worker-3") if pod_named(snap, n) is not None]
        return [f"{n} still there" for n in gone]

    return Scenario(
        "targeted-scale-down",
        job,
        lambda: job_manifest(job, workers=5),
        running_job(5, members=[0, 1, 2, 3, 4]),
        act,
        effect,
        prepare=prepare,
        description="5 workers to 3: worker 3 listed in spec.workersToDelete, worker 1 by pod-deletion-cost -100",
    )


def _worker_failover(kind: str) -> Scenario:
    job = f"fail-{kind}"
    victim = f"{job}-worker-1"

    async def act(world: World, snap: Snapshot) -> None:
        if kind == "oom":
            await annotate(world, victim, {EXIT_CODE: "137"})
        elif kind == "delete":
            await delete_pod(world, victim)
        elif kind == "vanish":
            await delete_pod(world, victim, force=True)
        else:
            await evict_pod(world, victim)

    return Scenario(
        f"worker-failover-{kind}",
        job,
        # ExitCode: an OOM kill (137) is a retryable own failure, failed over (OnFailure restarts it in place).
        lambda: job_manifest(job, workers=3, restart_policy="ExitCode"),
        running_job(3, members=[0, 1, 2]),
        act,
        lambda snap, before: replaced(snap, before, victim),
        description={
            "oom": "worker 1 of 3 OOM-killed (exit code 137, restartPolicy ExitCode)",
            "delete": "worker 1 of 3 deleted (kubectl delete pod)",
            "vanish": "worker 1 of 3 force-deleted (--grace-period=0): gone before the controller looks",
            "evict": "worker 1 of 3 evicted through the Eviction API",
        }[kind],
    )


def _ps_loss(kind: str, policy: str) -> Scenario:
    job = f"ps-{kind}"
    victim = f"{job}-ps-0"

    async def act(world: World, snap: Snapshot) -> None:
        if kind == "delete":
            await delete_pod(world, victim)
        elif kind == "vanish":
            await delete_pod(world, victim, force=True)
        elif kind == "evict":
            await evict_pod(world, victim)
        else:
            await annotate(world, victim, {EVICT: "true"})

    return Scenario(
        f"ps-loss-{kind}",
        job,
        lambda: job_manifest(job, workers=2, ps=1, restart_policy=policy),
        running_job(3, members=[0, 1]),
        act,
        lambda snap, before: replaced(snap, before, victim),
        description={
            "delete": f"the PS of a dynamic job (restartPolicy {policy}) deleted",
            "vanish": f"the PS of a dynamic job (restartPolicy {policy}) force-deleted: gone before the controller looks",
            "evict": f"the PS of a dynamic job (restartPolicy {policy}) evicted through the Eviction API",
            "pressure": f"the PS of a dynamic job (restartPolicy {policy}) evicted by the kubelet (node pressure)",
        }[kind],
    )


def _create() -> Scenario:
    job = "cr"

    def ready(snap: Snapshot) -> list[str]:
        return []

    async def act(world: World, snap: Snapshot) -> None:
        await world.api.call("POST", TFJOBS, job_manifest(job, workers=3, ps=1), tolerate=())

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        return running_job(4, members=[0, 1, 2])(snap)

    return Scenario(
        "create-to-running",
        job,
        lambda: {},
        ready,
        act,
        effect,
        description="a dynamic job of 1 PS and 3 workers created and brought to Running",
    )


def _scale_up_refill() -> Scenario:
    job = "su"

    async def prepare(world: World, snap: Snapshot) -> None:
        # Worker 1 leaves (listed), then the list is emptied, so the scale-up may refill the hole.
        await patch_job(world, job, {"spec": {"workersToDelete": [1], "tfReplicaSpecs": {"Worker": {"replicas": 3}}}})
        await world.wait_for(
            lambda s: [] if list(dynamic_status(s.job).get("members") or []) == [0, 2, 3] and s.settled() else ["hole"],
            "worker 1 removed",
        )
        await patch_job(world, job, {"spec": {"workersToDelete": None}})

    async def act(world: World, snap: Snapshot) -> None:
        await patch_job(world, job, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 5}}}})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        return running(snap, *(f"{job}-worker-{i}" for i in range(5)))

    return Scenario(
        "scale-up-refill",
        job,
        lambda: job_manifest(job, workers=4),
        running_job(4, members=[0, 1, 2, 3]),
        act,
        effect,
        prepare=prepare,
        description="members 0,2,3 (worker 1 removed) scaled to 5: the hole 1 is refilled, then 4 appended",
    )


def _suspend_resume() -> Scenario:
    job = "ss"

    async def act(world: World, snap: Snapshot) -> None:
        await patch_job(world, job, {"spec": {"runPolicy": {"suspend": True}}})
        await world.wait_for(
            lambda s: [] if s.job and is_true(s.job, "Suspended") and not s.pods else ["not suspended"],
            "suspended with no pods",
        )
        await patch_job(world, job, {"spec": {"runPolicy": {"suspend": False}}})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        out = running_job(3)(snap)
        if snap.job is not None and conditions(snap.job).get("Suspended", {}).get("status") != "False":
            out.append("not resumed")
        return out

    return Scenario(
        "suspend-resume",
        job,
        lambda: job_manifest(job, workers=2, ps=1),
        running_job(3, members=[0, 1]),
        act,
        effect,
        description="a running dynamic job suspended (every pod removed), then resumed",
    )


def _success(policy: str, ttl: bool) -> Scenario:
    job = f"ok{policy[:3].lower()}{'-ttl' if ttl else ''}"

    async def act(world: World, snap: Snapshot) -> None:
        # Worker 0 exits 0 now, which succeeds the job; the PS and worker 1 are still running then (so what each
        # cleanPodPolicy removes does not depend on timing).
        await annotate(world, f"{job}-worker-0", {EXIT_CODE: "0"})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        if ttl:
            return [] if snap.job is None else ["the job is not deleted by its TTL yet"]
        return [] if snap.job is not None and is_true(snap.job, "Succeeded") else ["not Succeeded"]

    run_policy: dict[str, Any] = {"cleanPodPolicy": policy}
    if ttl:
        run_policy["ttlSecondsAfterFinished"] = 1
    return Scenario(
        f"success-clean-{policy.lower()}" + ("-ttl" if ttl else ""),
        job,
        lambda: job_manifest(job, workers=2, ps=1, run_policy=run_policy),
        running_job(3, members=[0, 1]),
        act,
        effect,
        job_goes=ttl,
        description=f"worker 0 exits 0: the job Succeeds and cleanPodPolicy {policy} applies"
        + (", then its TTL of 1 s deletes it" if ttl else ""),
    )


def _backoff_limit() -> Scenario:
    job = "bo"

    async def act(world: World, snap: Snapshot) -> None:
        await annotate(world, f"{job}-ps-0", {EXIT_CODE: "1"})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        return [] if snap.job is not None and is_true(snap.job, "Failed") and not snap.live_pods() else ["not failed"]

    return Scenario(
        "backoff-limit",
        job,
        lambda: job_manifest(job, workers=2, ps=1, restart_policy="OnFailure", run_policy={"backoffLimit": 0}),
        running_job(3, members=[0, 1]),
        act,
        effect,
        may_fail=True,
        description="backoffLimit 0: the PS fails (exit 1, OnFailure) and the job Fails, its pods and services removed",
    )


def _deadline() -> Scenario:
    job = "dl"

    async def act(world: World, snap: Snapshot) -> None:
        await patch_job(world, job, {"spec": {"runPolicy": {"activeDeadlineSeconds": 1}}})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        return [] if snap.job is not None and is_true(snap.job, "Failed") and not snap.live_pods() else ["not failed"]

    return Scenario(
        "active-deadline",
        job,
        lambda: job_manifest(job, workers=2, ps=1),
        running_job(3, members=[0, 1]),
        act,
        effect,
        may_fail=True,
        description="activeDeadlineSeconds lowered to 1 on a running job: it Fails, its pods and services removed",
    )


def _gang() -> Scenario:
    job = "gg"

    async def act(world: World, snap: Snapshot) -> None:
        await patch_job(world, job, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        return (
            []
            if pod_named(snap, f"{job}-worker-2") is None and pod_named(snap, f"{job}-worker-1") is None
            else ["workers not removed"]
        )

    return Scenario(
        "gang-podgroup-scale-down",
        job,
        lambda: job_manifest(job, workers=3, ps=1),
        running_job(4, members=[0, 1, 2]),
        act,
        effect,
        sim_options={"podgroup_crds": ("volcano",)},
        controller_args=("--gang-scheduler-name", "volcano"),
        description="a dynamic job under Volcano gang scheduling scaled from 3 workers to 1: the PodGroup follows",
    )


def _deletion() -> Scenario:
    job = "del"

    async def act(world: World, snap: Snapshot) -> None:
        await world.api.call("DELETE", f"{TFJOBS}/{job}", {"propagationPolicy": "Foreground"}, tolerate=())

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        return [] if snap.job is None and not snap.pods and not snap.services else ["job or children remain"]

    return Scenario(
        "job-deletion",
        job,
        lambda: job_manifest(job, workers=2, ps=1),
        running_job(3, members=[0, 1]),
        act,
        effect,
        job_goes=True,
        description="a running job deleted (foreground): it and every child are gone",
    )


def _finishing_failover() -> Scenario:
    """Worker 1 fails for good (restartPolicy Never, exit 1) while the others run: recorded as Failed, job Running."""
    job = "wf"

    async def act(world: World, snap: Snapshot) -> None:
        await annotate(world, f"{job}-worker-1", {EXIT_CODE: "1"})

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        record = (dynamic_status(snap.job).get("workers") or {}).get("1") or {}
        return [] if record.get("state") == "Failed" else ["worker 1 not recorded Failed"]

    return Scenario(
        "worker-fails-for-good",
        job,
        lambda: job_manifest(job, workers=3, restart_policy="Never"),
        running_job(3, members=[0, 1, 2]),
        act,
        effect,
        description="worker 1 of 3 exits 1 under restartPolicy Never: kept, recorded Failed, the job runs on",
    )


# --- adoption: what Kubeflow's training-operator leaves behind, as the controller's documentation describes it
def upstream_children(job: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Pods and headless services of a dynamic job (PS and Worker) as training-operator creates them: named
    ``<job>-<type>-<i>``, its labels, controlled by the job, the template's pod spec with the ``tfjob-port`` and a
    sparse TF_CONFIG (a worker: its own address and the PS list; a PS: its own address)."""
    meta = job["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    owner = [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "name": name,
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    specs = job["spec"]["tfReplicaSpecs"]

    def address(kind: str, i: int) -> str:
        return f"{name}-{kind}-{i}.{namespace}.svc:2222"

    ps = [address("ps", i) for i in range(specs.get("PS", {}).get("replicas", 0))]
    out: list[tuple[str, dict[str, Any]]] = []
    for replica_type, spec in specs.items():
        kind = replica_type.lower()
        for i in range(spec["replicas"]):
            labels = {
                "training.kubeflow.org/operator-name": "tfjob-controller",
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/replica-type": kind,
                "training.kubeflow.org/replica-index": str(i),
            }
            cluster = (
                {"worker": {str(i): address(kind, i)}, "ps": ps}
                if kind == "worker"
                else {"worker": {}, "ps": [address(kind, i)]}
            )
            tf_config = orjson.dumps({"cluster": cluster, "task": {"type": kind, "index": i}}).decode()
            pod_spec = copy.deepcopy(spec["template"]["spec"])
            pod_spec["restartPolicy"] = spec["restartPolicy"]
            container = pod_spec["containers"][0]
            container["ports"] = [{"name": "tfjob-port", "containerPort": 2222}]
            container["env"] = [{"name": "TF_CONFIG", "value": tf_config}]
            pod_labels = {
                **labels,
                **({"training.kubeflow.org/job-role": "master"} if kind == "worker" and i == 0 else {}),
            }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-{kind}-{i}", "labels": pod_labels, "ownerReferences": owner},
                "spec": pod_spec,
            }
            service = {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": f"{name}-{kind}-{i}", "labels": labels, "ownerReferences": owner},
                "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "tfjob-port", "port": 2222}]},
            }
            out += [("pods", pod), ("services", service)]
    return out


def _adoption() -> Scenario:
    job = "adopt"

    async def prepare(world: World, snap: Snapshot) -> None:
        await world.api.call("POST", TFJOBS, job_manifest(job, workers=3, ps=1), tolerate=())
        _, created = await world.api.call("GET", f"{TFJOBS}/{job}", tolerate=())
        for resource, body in upstream_children(created):
            await world.api.call("POST", f"/api/v1/namespaces/{NAMESPACE}/{resource}", body, tolerate=())
        await world.wait_for(lambda s: [] if all_running(s, 4) else ["pods not running"], "upstream's pods running")
        _, current = await world.api.call("GET", f"{TFJOBS}/{job}", tolerate=())
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        def condition(kind: str, reason: str, message: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastUpdateTime": at,
                "lastTransitionTime": at,
            }

        current["status"] = {
            "conditions": [
                condition("Created", "TFJobCreated", f"TFJob {job} is created."),
                condition("Running", "TFJobRunning", f"TFJob {NAMESPACE}/{job} is running."),
            ],
            "replicaStatuses": {"PS": {"active": 1}, "Worker": {"active": 3}},
            "startTime": at,
        }
        await world.api.call("PUT", f"{TFJOBS}/{job}/status", current, tolerate=())

    async def act(world: World, snap: Snapshot) -> None:
        return None  # the action is the controller's start (Scenario.adopt)

    def effect(snap: Snapshot, before: Snapshot) -> list[str]:
        return [] if list(dynamic_status(snap.job).get("members") or []) == [0, 1, 2] else ["members not recorded"]

    return Scenario(
        "adoption",
        job,
        lambda: {},
        lambda snap: [],
        act,
        effect,
        prepare=prepare,
        adopt=True,
        description="a running dynamic job (1 PS, 3 workers) as training-operator left it, adopted by the controller "
        "starting: nothing replaced, its dynamic-worker state recorded",
    )


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        _targeted_scale_down(),
        _worker_failover("oom"),
        _worker_failover("delete"),
        _worker_failover("evict"),
        _worker_failover("vanish"),
        _ps_loss("delete", "Never"),
        _ps_loss("evict", "OnFailure"),
        _ps_loss("vanish", "Never"),
        _ps_loss("pressure", "Always"),
        _create(),
        _scale_up_refill(),
        _suspend_resume(),
        _success("All", ttl=False),
        _success("Running", ttl=False),
        _success("None", ttl=False),
        _success("All", ttl=True),
        _backoff_limit(),
        _deadline(),
        _gang(),
        _deletion(),
        _finishing_failover(),
        _adoption(),
    )
}
"""Every scenario by name; the acceptance's three first."""
