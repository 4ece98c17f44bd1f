"""``tfjob-controller demo``: the controller keeping a dynamic TFJob alive, on an embedded cluster.

A newcomer's first run. It starts a simulated cluster, installs the TFJob CRD, runs the real
controller against it over HTTP (exactly as in production), and narrates what a user would see:
a dynamic job survives a worker deleted twice and an OOM-killed worker, then scales down and up through
the scale subresource. Every step waits for the cluster to reach the stated outcome (with a
deadline) and the demo exits non-zero if one does not, so it doubles as a smoke test.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import anyio
from prometheus_client import CollectorRegistry

from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS, EVENTS, PODS, ApiClient
from controller.tfjob.controller import TFJobController
from controller.tfjob.crd import build_crd
from controller.tfjob.decide import DecideConfig
from controller.tfjob.executor import TFJOBS
from tfjob_sim.cluster import SimCluster, SimConfig


class DemoFailed(Exception):
    pass


def say(text: str = "") -> None:
    print(text, flush=True)


def _job_manifest() -> dict[str, Any]:
    def replicas(n: int) -> dict[str, Any]:
        return {
            "replicas": n,
            "restartPolicy": "ExitCode",
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "mnist", "namespace": "default"},
        "spec": {"enableDynamicWorker": True, "tfReplicaSpecs": {"PS": replicas(1), "Worker": replicas(4)}},
    }


async def _until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise DemoFailed(f"timed out after {timeout:.0f} s waiting for: {what}")
        await anyio.sleep(0.05)


Narration = Callable[[ApiClient, CollectorRegistry], Awaitable[None]]


async def demo(time_scale: float | None = None) -> int:
    """The story on simulated containers (``tfjob_sim.demo_tensorflow`` tells it with real processes)."""
    return await run_story(0.05 if time_scale is None else time_scale, _narrate, "annotations")


async def run_story(time_scale: float, narrate: Narration, runtime: str) -> int:
    """A simulated cluster of 3 nodes with the kubelet's ``runtime``, the controller on it, and ``narrate``."""
    logging.getLogger().setLevel(logging.WARNING)  # the narration is the output; warnings still show
    with TemporaryDirectory(prefix="tfjob-demo-") as tmp:
        config = SimConfig(
            nodes=3, time_scale=time_scale, kubeconfig_path=str(Path(tmp) / "kubeconfig"), runtime=runtime
        )
        async with SimCluster(config) as cluster:
            say(f"Simulated cluster at {cluster.url} with 3 nodes (kubeconfig {cluster.kubeconfig_path}).")
            try:
                await _story(cluster, narrate)
            except DemoFailed as exc:
                say(f"\nDEMO FAILED: {exc}")
                return 1
    return 0


async def _story(cluster: SimCluster, narrate: Narration) -> None:
    registry = CollectorRegistry()
    assert cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(cluster.kubeconfig_path, registry=registry)
    try:
        await client.create(CUSTOM_RESOURCE_DEFINITIONS, build_crd())
        say("Installed the TFJob CRD (manifests/crd/kubeflow.org_tfjobs.yaml).")
        # A disrupted worker (deleted, evicted, ...) is replaced at once, however often; only a worker's
        # repeated own failures (OOM kills, error exits) back off, 10 s doubling to 5 min (kubelet's
        # crash-loop rule). The demo shortens that back-off to 1 s.
        controller = TFJobController(
            client, registry=registry, workers=2, decide_config=DecideConfig(failover_backoff_base=1.0)
        )
        failure: DemoFailed | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.run)
            try:
                await narrate(client, registry)
            except DemoFailed as exc:  # raised after the task group, not wrapped in an exception group
                failure = exc
            tg.cancel_scope.cancel()
    finally:
        await client.close()
    if failure is not None:
        raise failure


async def _pods(client: ApiClient) -> dict[str, dict[str, Any]]:
    items = (await client.list(PODS, namespace="default", label_selector="training.kubeflow.org/job-name=mnist"))[
        "items"
    ]
    return {p["metadata"]["name"]: p for p in items}


def _running(pods: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(
        n
        for n, p in pods.items()
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


async def _job(client: ApiClient) -> dict[str, Any]:
    return await client.get(TFJOBS, "mnist", namespace="default")


def _state(job: dict[str, Any]) -> str:
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [c["type"] for c in conditions if c.get("status") == "True"]
    return ", ".join(true) or "(no condition yet)"


async def _show(client: ApiClient) -> None:
    job = await _job(client)
    pods = await _pods(client)
    workers = (job.get("status") or {}).get("replicaStatuses", {}).get("Worker", {})
    say(f"   job: {_state(job)}; Worker active={workers.get('active', 0)}; pods: {', '.join(_running(pods)) or '-'}")


async def _narrate(client: ApiClient, registry: CollectorRegistry) -> None:
    say("\n1. Create TFJob mnist: 1 PS + 4 workers, enableDynamicWorker: true, restartPolicy ExitCode.")
    await client.create(TFJOBS, _job_manifest(), namespace="default")

    async def all_running() -> bool:
        job = await _job(client)
        running = (job.get("status") or {}).get("replicaStatuses", {}).get("Worker", {}).get("active", 0)
        return running == 4 and "Running" in _state(job)

    await _until("4 workers running and the job Running", all_running)
    await _show(client)

    say("\n2. Someone deletes worker 1 (upstream: the whole job turned Failed).")

    async def replaced(name: str, old_uid: str) -> bool:
        pod = (await _pods(client)).get(name)
        return bool(pod and pod["metadata"]["uid"] != old_uid and name in _running({name: pod}))

    for attempt in (1, 2):
        if attempt == 2:
            say("   ... and deletes it again: a disruption never waits, it is replaced at once again.")
        old = (await _pods(client))["mnist-worker-1"]["metadata"]["uid"]
        await client.delete(PODS, "mnist-worker-1", namespace="default")
        await _until("mnist-worker-1 replaced", partial(replaced, "mnist-worker-1", old))
    await _show(client)

    say("\n3. Worker 2 is OOM-killed (exit 137): it is replaced at once, the job keeps running.")
    for attempt in (1, 2):
        if attempt == 2:
            say("   ... and OOM-killed again: a repeated own failure of one index backs off, as a crash loop does.")
        old = (await _pods(client))["mnist-worker-2"]["metadata"]["uid"]
        await client.patch(
            PODS,
            "mnist-worker-2",
            {"metadata": {"annotations": {"sim.tfjob.dev/exit-code": "137"}}},
            namespace="default",
        )
        await _until("mnist-worker-2 replaced", partial(replaced, "mnist-worker-2", old))
    await _show(client)

    say(
        "\n4. Off-peak, and worker 1's node is to be drained: mark it cheapest to lose (kubectl annotate pod"
        " mnist-worker-1 controller.kubernetes.io/pod-deletion-cost=-100), then scale workers to 2"
        " (kubectl scale tfjob/mnist --replicas=2): worker 1 leaves, then the highest index."
    )
    await client.patch(
        PODS,
        "mnist-worker-1",
        {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-100"}}},
        namespace="default",
    )
    await client.patch(TFJOBS, "mnist", {"spec": {"replicas": 2}}, namespace="default", subresource="scale")

    async def scaled(indices: tuple[int, ...]) -> bool:
        names = sorted(n for n in (await _pods(client)) if "-worker-" in n)
        return names == [f"mnist-worker-{i}" for i in indices]

    await _until("workers 1 and 3 removed", lambda: scaled((0, 2)))
    await _show(client)
    members = ((await _job(client)).get("status") or {}).get("dynamicWorkers", {}).get("summary")
    say(f"   members (kubectl get tfjob mnist: MEMBERS): {members}; worker 2 kept its pod and TF_CONFIG")

    say("\n5. Peak again: scale workers to 3: the hole at index 1 is refilled first.")
    await client.patch(TFJOBS, "mnist", {"spec": {"replicas": 3}}, namespace="default", subresource="scale")

    async def three_running() -> bool:
        return len([n for n in _running(await _pods(client)) if "-worker-" in n]) == 3

    await _until("3 workers running", three_running)
    await _show(client)
    await report(client, registry)
    say("\nThe job survived four worker failures and two rescalings without ever leaving Running.")


async def report(client: ApiClient, registry: CollectorRegistry) -> None:
    """The dynamic-worker metrics and the TFJob's Warning and scale-down events, as a user would look them up."""
    say("\nWhat the dashboard shows (tfjob_worker_failovers_total, tfjob_worker_scaled_down_total):")
    # Nothing scraped the demo's registry yet, and a namespace's counts wait for one scrape to have shown its
    # series at 0 (controller/tfjob/metrics.py): this first collection is that scrape, the second reads.
    for _ in registry.collect():
        pass
    for metric in registry.collect():
        if metric.name in ("tfjob_worker_failovers", "tfjob_worker_scaled_down"):
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.value:
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                    say(f"   {sample.name}{{{labels}}} {sample.value:g}")
    events = (await client.list(EVENTS, namespace="default"))["items"]
    say("\nEvents on tfjob/mnist (kubectl describe tfjob mnist):")
    for event in sorted(events, key=lambda e: e.get("firstTimestamp") or ""):
        if event.get("involvedObject", {}).get("kind") == "TFJob" and (
            event["type"] == "Warning" or event["reason"] == "WorkerScaledDown"
        ):
            say(f"   {event['type']:<8} {event['reason']:<18} {event['message']}")
