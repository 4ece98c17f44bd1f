"""Benchmark: watch-event ingestion speed and cache memory of four watch clients on the same stream.

Why this exists: the informer's whole reason to read raw chunked streams with orjson (instead of
kubernetes-asyncio's ``Watch``) is throughput and memory. This script measures it so the claim stays true:
targets are >= 20x kubernetes-asyncio's ``watch.Watch().stream()`` and >= 70 % of the raw ceiling.

What is measured, on the *same bytes* for every contender, in one run:

- ``raw ceiling``: aiohttp read + split on ``\\n`` + ``orjson.loads`` per line, nothing else;
- ``informer``: :class:`controller.runtime.informer.Informer` (list, watch, default transform, cache,
  one counting handler — what a controller does), until every event has been handled; also with
  ``intern_transform`` and ``compact_transform`` (string interning: less memory, more CPU);
- ``kubernetes-asyncio Watch``: ``watch.Watch().stream(CoreV1Api.list_namespaced_pod, ...)`` building
  ``V1Pod`` models;
- ``kopf``: kopf's own watch pipeline (``kopf._cogs.clients.watching.continuous_watch``: list, then
  watch with its ``iter_jsonlines`` reader and stdlib ``json``).

The stream: a job lifecycle — TFJob worker pods ADDED, then each MODIFIED ``--updates-per-pod`` times
(status transitions, annotation changes) — run through the simulated cluster (``tfjob_sim``;
default ``--source sim``) and watched once over HTTP; the exact bytes the simulator sent are recorded.
``--source synthetic`` renders the same lifecycle locally (with managedFields, as real pods have). The recorded
stream carries the managedFields the simulator keeps, as a real apiserver's does; the same stream with them
removed is timed too (raw ceiling and informer only), for comparison with apiservers that send none. The recorded
bytes are then served by a replay server in a *separate process* (so serving costs no client CPU):
an empty list at RV 1, then a watch response that writes the whole stream in 64 KiB chunks.

Events/s is the median of ``--runs`` runs per contender (contender order rotates between runs), timed
from the first event received to the last event handled, both per wall-clock second and per CPU-second
of the client process (the replay server has its own process; on a shared machine CPU time is the stable
measure). Memory
per cached pod is measured in a separate pass under ``tracemalloc``, after the whole stream: the traced
bytes freed when the retained pods are dropped, divided by their number — the informer's cache; k-a's
``V1Pod`` models kept in a dict; kopf's and the raw reader's decoded dicts kept in a dict (neither has a
cache of its own). A second table ("growing cache") times a stream of distinct pods only (every event
adds an object), against the raw reader keeping every object.

Usage: ``.venv/bin/python benchmarks/informer_bench.py [--events 40000] [--runs 5] [--source sim]``.
Results are printed and written to ``docs/benchmarks/informer.md`` (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAMESPACE = "bench"
LIST_RV = "1"


# -- the stream --------------------------------------------------------------------------------------------


def synthetic_pod(i: int, rv: int) -> dict[str, Any]:
    """A TFJob worker pod as kube-apiserver returns it once the kubelet has started it."""
    job = f"mnist-{i // 100}"
    job_uid = str(uuid.UUID(int=i // 100 + 1))
    name = f"{job}-worker-{i % 100}"
    ts = "2024-05-01T12:00:00Z"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": str(uuid.UUID(int=10**9 + i)),
            "resourceVersion": str(rv),
            "creationTimestamp": ts,
            "labels": {
                "training.kubeflow.org/job-name": job,
                "training.kubeflow.org/operator-name": "tfjob-controller",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(i % 100),
                "training.kubeflow.org/job-role": "master" if i % 100 == 0 else "",
            },
            "annotations": {"sidecar.istio.io/inject": "false"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TFJob",
                    "name": job,
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "tfjob-controller",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": ts,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {
                            "f:labels": {
                                "f:training.kubeflow.org/job-name": {},
                                "f:training.kubeflow.org/replica-index": {},
                                "f:training.kubeflow.org/replica-type": {},
                            },
                            "f:ownerReferences": {},
                        },
                        "f:spec": {
                            "f:containers": {'k:{"name":"tensorflow"}': {".": {}, "f:image": {}, "f:env": {}}},
                            "f:restartPolicy": {},
                        },
                    },
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": ts,
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {
                        "f:status": {
                            "f:conditions": {},
                            "f:containerStatuses": {},
                            "f:hostIP": {},
                            "f:phase": {},
                            "f:podIP": {},
                            "f:podIPs": {},
                            "f:startTime": {},
                        }
                    },
                },
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "kubeflow/tf-mnist-with-summaries:latest",
                    "command": ["python", "/var/tf_mnist/mnist_with_summaries.py"],
                    "ports": [{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}],
                    "env": [
                        {
                            "name": "TF_CONFIG",
                            "value": json.dumps(
                                {
                                    "cluster": {"worker": [f"{job}-worker-{k}.{NAMESPACE}.svc:2222" for k in range(4)]},
                                    "task": {"type": "worker", "index": i % 100},
                                    "environment": "cloud",
                                }
                            ),
                        }
                    ],
                    "resources": {"limits": {"cpu": "1", "memory": "2Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}},
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "Always",
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": f"node-{i % 8}",
            "schedulerName": "default-scheduler",
            "hostname": name,
            "subdomain": job,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "volumes": [
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}],
                    },
                }
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": f"10.0.0.{i % 8 + 1}",
            "podIP": f"10.244.{i % 8}.{i % 250 + 2}",
            "podIPs": [{"ip": f"10.244.{i % 8}.{i % 250 + 2}"}],
            "startTime": ts,
            "containerStatuses": [
                {
                    "name": "tensorflow",
                    "state": {"running": {"startedAt": ts}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": 0,
                    "image": "kubeflow/tf-mnist-with-summaries:latest",
                    "imageID": "docker-pullable://kubeflow/tf-mnist-with-summaries@sha256:" + "ab" * 32,
                    "containerID": "containerd://" + f"{i:064x}",
                    "started": True,
                }
            ],
            "qosClass": "Guaranteed",
        },
    }


PHASES = (
    "Pending",
    "Pending",
    "Running",
    "Running",
    "Running",
    "Running",
    "Running",
    "Running",
    "Succeeded",
    "Succeeded",
)


def lifecycle_event(pod: dict[str, Any], step: int, rv: int) -> dict[str, Any]:
    """The ``step``-th state of a pod's life (0 = created) as a watch event."""
    if step == 0:
        obj = pod
        event_type = "ADDED"
    else:
        obj = orjson.loads(orjson.dumps(pod))
        obj["status"]["phase"] = PHASES[step % len(PHASES)]
        obj["metadata"]["annotations"]["bench/step"] = str(step)
        event_type = "MODIFIED"
    obj["metadata"]["resourceVersion"] = str(rv)
    return {"type": event_type, "object": obj}


def synthetic_stream(events: int, updates_per_pod: int) -> bytes:
    """``events`` events: pods = events // (updates_per_pod + 1) are ADDED, then each is MODIFIED
    ``updates_per_pod`` times, round by round (a job's pods progressing together)."""
    per_pod = updates_per_pod + 1
    pods = [synthetic_pod(i, 0) for i in range(max(1, events // per_pod))]
    out = []
    rv = 100
    for step in range(per_pod):
        for pod in pods:
            if len(out) == events:
                break
            rv += 1
            out.append(orjson.dumps(lifecycle_event(pod, step, rv)) + b"\n")
    while len(out) < events:  # events not divisible: top up with further updates
        rv += 1
        out.append(orjson.dumps(lifecycle_event(pods[len(out) % len(pods)], per_pod + len(out), rv)) + b"\n")
    return b"".join(out)


def without_managed_fields(stream: bytes) -> bytes:
    out = []
    for line in stream.splitlines():
        event = orjson.loads(line)
        event["object"]["metadata"].pop("managedFields", None)
        out.append(orjson.dumps(event))
    return b"\n".join(out) + b"\n"


async def sim_stream(events: int, updates_per_pod: int) -> bytes:
    """Run the lifecycle of :func:`synthetic_stream` through the simulated apiserver and record the exact
    bytes of one HTTP watch that delivers it (the simulator assigns uids, RVs, timestamps, managedFields)."""
    import aiohttp

    from tfjob_sim.cluster import SimCluster, SimConfig

    per_pod = updates_per_pod + 1
    count = max(1, events // per_pod)
    cluster = SimCluster(SimConfig(nodes=8, kubelet=False, gc=False))
    await cluster.start()
    try:
        store = cluster.store
        store.create("namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        start_rv = str(store.resource_version)
        templates = []
        for i in range(count):
            pod = synthetic_pod(i, 0)
            for server_owned in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
                pod["metadata"].pop(server_owned)
            templates.append(pod)
        written = 0
        for step in range(per_pod + events):  # the tail rounds top up when events % per_pod != 0
            for pod in templates:
                if written == events:
                    break
                name = pod["metadata"]["name"]
                if step == 0:
                    store.create(
                        "pods",
                        NAMESPACE,
                        {k: v for k, v in pod.items() if k != "status"},
                        field_manager="tfjob-controller",
                    )
                elif step % 2:
                    status = dict(pod["status"], phase=PHASES[step % len(PHASES)], message=f"step {step}")
                    store.patch(
                        "pods",
                        NAMESPACE,
                        name,
                        "merge",
                        {"status": status},
                        subresource="status",
                        field_manager="kubelet",
                    )
                else:
                    store.patch(
                        "pods",
                        NAMESPACE,
                        name,
                        "merge",
                        {"metadata": {"annotations": {"bench/step": str(step)}}},
                        field_manager="tfjob-controller",
                    )
                written += 1
            if written == events:
                break
        url = (
            f"{cluster.url}/api/v1/namespaces/{NAMESPACE}/pods?watch=true&resourceVersion={start_rv}&timeoutSeconds=120"
        )
        buf = bytearray()
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            resp.raise_for_status()
            async for chunk in resp.content.iter_any():
                buf += chunk
                if buf.count(b"\n") >= events:
                    break
    finally:
        await cluster.stop()
    lines = bytes(buf).split(b"\n")[:events]
    if len(lines) < events or any(b'"type":"ERROR"' in line[:20] for line in lines):
        raise SystemExit(f"the simulator delivered {len(lines)} usable events instead of {events}")
    return b"\n".join(lines) + b"\n"


# -- replay server (separate process) ----------------------------------------------------------------------


def _serve(streams: dict[str, str], port_queue: multiprocessing.Queue[int]) -> None:
    """Serve each recorded stream as the watch of namespace ``name`` (and an empty list at RV 1)."""
    from aiohttp import web

    data = {ns: Path(path).read_bytes() for ns, path in streams.items()}
    chunk = 64 * 1024
    empty_list = orjson.dumps(
        {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": LIST_RV}, "items": []}
    )

    async def pods(request: web.Request) -> web.StreamResponse:
        stream = data.get(request.match_info["ns"])
        if stream is None:
            return web.Response(status=404, text="404 page not found")
        if request.query.get("watch") not in ("true", "1", "True"):
            return web.Response(body=empty_list, content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        try:
            for i in range(0, len(stream), chunk):
                await response.write(stream[i : i + chunk])
            # Keep the watch open like a quiet server until the client hangs up.
            await asyncio.sleep(3600)
        except ConnectionError:
            pass  # the client has read what it needed and hung up
        return response

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{ns}/pods", pods)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_queue.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


# -- contenders --------------------------------------------------------------------------------------------
# Each reads ``events`` events from the watch of namespace ``ns`` and returns how many objects it retains
# (only when ``keep`` is given: then it keeps what it decoded alive in ``keep`` for the memory pass).

Contender = Callable[[str, str, int, "dict | None"], Awaitable[int]]


async def run_raw(url: str, ns: str, events: int, keep: dict | None) -> int:
    import aiohttp

    loads = orjson.loads
    count = 0
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}/api/v1/namespaces/{ns}/pods?watch=true&resourceVersion={LIST_RV}") as resp:
            pending = b""
            async for chunk in resp.content.iter_any():
                lines = (pending + chunk).split(b"\n")
                pending = lines.pop()
                for line in lines:
                    event = loads(line)
                    if keep is not None:
                        obj = event["object"]
                        keep[obj["metadata"]["name"]] = obj
                    count += 1
                    if count == 1:
                        first_event()
                if count >= events:
                    break
    return len(keep) if keep is not None else 0


async def run_informer(url: str, ns: str, events: int, keep: dict | None, transform: Any = None) -> int:
    import anyio
    from kubernetes_asyncio.client import Configuration
    from prometheus_client import CollectorRegistry

    from controller.runtime.client import PODS, ApiClient
    from controller.runtime.informer import Informer

    configuration = Configuration()
    configuration.host = url
    done = anyio.Event()
    seen = 0

    # One handler call per event that changed the cache (every event of these streams does).
    def on_event(*_: object) -> None:
        nonlocal seen
        seen += 1
        if seen == 1:
            first_event()
        if seen >= events:
            done.set()

    async with ApiClient(configuration, qps=0) as client:
        informer = Informer(client, PODS, namespace=ns, registry=CollectorRegistry(), transform=transform)
        informer.add_handler(on_add=on_event, on_update=on_event, on_delete=on_event)
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            await done.wait()
            tg.cancel_scope.cancel()
    if keep is None:
        return 0
    keep["informer"] = informer  # its cache stays alive for the memory measurement
    return len(informer.cache)


async def run_k8s_asyncio(url: str, ns: str, events: int, keep: dict | None) -> int:
    from kubernetes_asyncio import client as k8s
    from kubernetes_asyncio import watch

    configuration = k8s.Configuration()
    configuration.host = url
    count = 0
    async with k8s.ApiClient(configuration) as api:
        core = k8s.CoreV1Api(api)
        async with watch.Watch() as w:
            async for event in w.stream(
                core.list_namespaced_pod, ns, resource_version=LIST_RV, allow_watch_bookmarks=True
            ):
                if keep is not None:
                    keep[event["object"].metadata.name] = event["object"]
                count += 1
                if count == 1:
                    first_event()
                if count >= events:
                    break
    return len(keep) if keep is not None else 0


async def run_kopf(url: str, ns: str, events: int, keep: dict | None) -> int:
    import logging

    from kopf._cogs.clients import auth, watching
    from kopf._cogs.configs import configuration
    from kopf._cogs.structs import credentials, references

    logging.getLogger("kopf").setLevel(logging.WARNING)
    vault = credentials.Vault()
    await vault.populate({"bench": credentials.ConnectionInfo(server=url)})
    auth.vault_var.set(vault)
    settings = configuration.OperatorSettings()
    resource = references.Resource(group="", version="v1", plural="pods", namespaced=True)
    pause: asyncio.Future = asyncio.get_running_loop().create_future()
    count = 0
    stream = watching.continuous_watch(settings=settings, resource=resource, namespace=ns, operator_pause_waiter=pause)
    try:
        async for raw in stream:
            if not isinstance(raw, dict) or raw.get("type") is None:
                continue  # the LISTED marker / listed objects (none here)
            if keep is not None:
                keep[raw["object"]["metadata"]["name"]] = raw["object"]
            count += 1
            if count == 1:
                first_event()
            if count >= events:
                break
    finally:
        pause.set_result(None)
        await stream.aclose()
        await vault.close()
    return len(keep) if keep is not None else 0


async def run_informer_intern(url: str, ns: str, events: int, keep: dict | None) -> int:
    from controller.runtime.cache import intern_transform

    return await run_informer(url, ns, events, keep, transform=intern_transform)


async def run_informer_compact(url: str, ns: str, events: int, keep: dict | None) -> int:
    from controller.runtime.cache import compact_transform

    return await run_informer(url, ns, events, keep, transform=compact_transform)


CONTENDERS: dict[str, Contender] = {
    "raw ceiling (aiohttp + split + orjson)": run_raw,
    "this informer": run_informer,
    "this informer, intern_transform": run_informer_intern,
    "this informer, compact_transform": run_informer_compact,
    "kubernetes-asyncio Watch (models)": run_k8s_asyncio,
    "kopf watch pipeline": run_kopf,
}


_first: list[tuple[float, float]] = []


def first_event() -> None:
    """Called by every contender when its first event arrives: the clock starts there, so one-time setup
    (TLS context, session, the informer's initial list) is not counted as ingestion time."""
    _first.append((time.perf_counter(), time.process_time()))


async def timed(fn: Contender, url: str, ns: str, events: int, keep_all: bool = False) -> tuple[float, float]:
    """(events per wall-clock second, events per CPU-second of this process), first event to last."""
    keep: dict | None = {} if keep_all else None
    gc.collect()
    _first.clear()
    await asyncio.wait_for(fn(url, ns, events, keep), timeout=900)
    wall_end, cpu_end = time.perf_counter(), time.process_time()
    if len(_first) != 1:
        raise RuntimeError(f"contender {fn.__name__} reported its first event {len(_first)} times")
    wall_start, cpu_start = _first[0]
    del keep
    return (events - 1) / (wall_end - wall_start), (events - 1) / max(cpu_end - cpu_start, 1e-9)


async def memory_per_object(fn: Contender, url: str, ns: str, events: int) -> float:
    """Bytes per retained object: traced memory freed when the contender's retained objects are dropped
    (so connection buffers and other transient memory do not count)."""
    keep: dict = {}
    gc.collect()
    tracemalloc.start()
    try:
        retained_objects = await asyncio.wait_for(fn(url, ns, events, keep), timeout=900)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        keep.clear()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (before - after) / max(1, retained_objects)


# -- report ------------------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    """The checkout's commit (with ``+changes`` when the tree differs from it), for the report header."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" +changes" if dirty else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=40000, help="events in the stream (default 40000)")
    parser.add_argument(
        "--updates-per-pod",
        type=int,
        default=9,
        help="MODIFIED events per pod after its ADDED (default 9: 4,000 pods for 40,000 events)",
    )
    parser.add_argument("--runs", type=int, default=5, help="timed runs per contender (median reported)")
    parser.add_argument("--source", choices=("sim", "synthetic"), default="sim")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "informer.md"))
    parser.add_argument(
        "--raw", help="every run's figures as JSON (default docs/benchmarks/raw/informer-<date>-<time>.json)"
    )
    args = parser.parse_args()
    if args.events < 1 or args.runs < 1 or args.updates_per_pod < 0:
        parser.error("need events >= 1, runs >= 1, updates-per-pod >= 0")

    # Preload every contender's modules so no import lands inside a timed or traced section.
    import aiohttp  # noqa: F401
    import kopf._cogs.clients.watching  # noqa: F401
    import kubernetes_asyncio.client  # noqa: F401
    import kubernetes_asyncio.watch  # noqa: F401

    import controller.runtime.informer  # noqa: F401

    if args.source == "sim":
        lifecycle = asyncio.run(sim_stream(args.events, args.updates_per_pod))
    else:
        lifecycle = synthetic_stream(args.events, args.updates_per_pod)
    growing = synthetic_stream(args.events, 0)
    bare = without_managed_fields(lifecycle)
    paths = {
        "bench": ROOT / ".bench-informer-lifecycle.bin",
        "grow": ROOT / ".bench-informer-growing.bin",
        "bare": ROOT / ".bench-informer-bare.bin",
    }
    paths["bench"].write_bytes(lifecycle)
    paths["grow"].write_bytes(growing)
    paths["bare"].write_bytes(bare)
    ctx = multiprocessing.get_context("spawn")
    port_queue: multiprocessing.Queue = ctx.Queue()
    server = ctx.Process(target=_serve, args=({k: str(v) for k, v in paths.items()}, port_queue), daemon=True)
    server.start()
    names = list(CONTENDERS)
    raw_name = names[0]
    commit = git_commit()
    load_before = "/".join(f"{x:.1f}" for x in os.getloadavg())
    try:
        url = f"http://127.0.0.1:{port_queue.get(timeout=60)}"
        rates: dict[str, list[tuple[float, float]]] = {name: [] for name in CONTENDERS}
        grow_rates: dict[str, list[tuple[float, float]]] = {
            "raw ceiling, keeping every object": [],
            "this informer": [],
        }
        bare_rates: dict[str, list[tuple[float, float]]] = {raw_name: [], "this informer": []}
        for run in range(args.runs):
            order = names[run % len(names) :] + names[: run % len(names)]
            for name in order:
                wall, cpu = asyncio.run(timed(CONTENDERS[name], url, "bench", args.events))
                rates[name].append((wall, cpu))
                print(
                    f"run {run + 1}/{args.runs} {name:42s} {wall:>10,.0f} events/s wall {cpu:>10,.0f} per CPU-s",
                    flush=True,
                )
            grow_rates["raw ceiling, keeping every object"].append(
                asyncio.run(timed(run_raw, url, "grow", args.events, keep_all=True))
            )
            grow_rates["this informer"].append(asyncio.run(timed(run_informer, url, "grow", args.events)))
            print(
                f"run {run + 1}/{args.runs} growing cache: "
                + ", ".join(f"{k} {v[-1][1]:,.0f}/CPU-s" for k, v in grow_rates.items()),
                flush=True,
            )
            for name in (raw_name, "this informer") if run % 2 else ("this informer", raw_name):
                bare_rates[name].append(asyncio.run(timed(CONTENDERS[name], url, "bare", args.events)))
            print(
                f"run {run + 1}/{args.runs} without managedFields: "
                + ", ".join(f"{k} {v[-1][1]:,.0f}/CPU-s" for k, v in bare_rates.items()),
                flush=True,
            )
        load_after = "/".join(f"{x:.1f}" for x in os.getloadavg())
        memory = {
            name: asyncio.run(memory_per_object(fn, url, "bench", args.events)) for name, fn in CONTENDERS.items()
        }
    finally:
        server.terminate()
        server.join(10)
        for path in paths.values():
            path.unlink(missing_ok=True)

    def med(values: list[tuple[float, float]], i: int) -> float:
        return statistics.median(v[i] for v in values)

    cpu_median = {name: med(values, 1) for name, values in rates.items()}
    wall_median = {name: med(values, 0) for name, values in rates.items()}
    raw = cpu_median[raw_name]
    informer = cpu_median["this informer"]
    ka = cpu_median["kubernetes-asyncio Watch (models)"]
    raw_wall = wall_median[raw_name]
    distinct = max(1, args.events // (args.updates_per_pod + 1))
    rows = [
        f"| {name} | {cpu_median[name]:,.0f} | {min(v[1] for v in rates[name]):,.0f} – "
        f"{max(v[1] for v in rates[name]):,.0f} | {cpu_median[name] / raw:.0%} | {wall_median[name]:,.0f} | "
        f"{wall_median[name] / raw_wall:.0%} | {memory[name]:,.0f} |"
        for name in names
    ]
    bare_raw = med(bare_rates[raw_name], 1)
    bare_rows = [
        f"| {name} | {med(v, 1):,.0f} | {med(v, 1) / bare_raw:.0%} | {med(v, 0):,.0f} |"
        for name, v in bare_rates.items()
    ]
    grow_rows = [f"| {name} | {med(v, 1):,.0f} | {med(v, 0):,.0f} |" for name, v in grow_rates.items()]
    verdict_ka = informer / ka
    verdict_raw = informer / raw
    verdict_raw_wall = wall_median["this informer"] / raw_wall
    source = "recorded from the simulated apiserver (tfjob_sim)" if args.source == "sim" else "synthetic"
    stamp = datetime.now(UTC)
    raw_path = Path(args.raw or ROOT / "docs" / "benchmarks" / "raw" / f"informer-{stamp:%Y-%m-%d-%H%M}.json")
    report = "\n".join(
        [
            "# Informer benchmark: watch ingestion and cache memory",
            "",
            f"- Date: {stamp:%Y-%m-%d %H:%M} UTC; commit {commit}; load average "
            f"(1/5/15 min) {load_before} before, {load_after} after the timed runs",
            f"- Machine: {os.cpu_count()} CPUs (nproc), {cpu_model()}; Python {platform.python_version()}; "
            f"{platform.system()} {platform.release()} (shared with other jobs while measuring)",
            f"- Stream ({source}): {args.events:,} pod watch events — {distinct:,} TFJob worker pods ADDED, then "
            f"{args.updates_per_pod} MODIFIED each — {len(lifecycle) / 1e6:.1f} MB, {len(lifecycle) / args.events:,.0f} "
            "bytes/event; replayed from a separate process in 64 KiB chunks to every contender",
            f"- Method: median of {args.runs} runs per contender (order rotated), each timed from the first event "
            "received to the last event handled (one-time setup — TLS context, session, the informer's list — excluded). Primary figure: events per CPU-second of the client process (this 2-core machine is "
            "shared with other jobs, which makes wall-clock rates swing by 2x between runs; the replay server runs in "
            "its own process, so client CPU time is exactly the client's work); wall-clock events/s shown too. "
            "Memory = bytes per cached pod (tracemalloc: bytes freed when the retained pods are dropped after the "
            "whole stream)",
            f"- Command: `.venv/bin/python benchmarks/informer_bench.py --events {args.events} --runs {args.runs} "
            f"--updates-per-pod {args.updates_per_pod} --source {args.source}`; every run's figures: "
            f"[{raw_path.name}](raw/{raw_path.name})",
            "",
            "| contender | events per CPU-s (median) | range | of raw ceiling | events/s wall (median) | of raw (wall) "
            "| bytes per cached pod |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Informer vs kubernetes-asyncio Watch: **{verdict_ka:.1f}x** per CPU-second (target >= 20x: "
            f"{'met' if verdict_ka >= 20 else 'NOT met'}). Informer vs raw ceiling: **{verdict_raw:.0%}** per "
            f"CPU-second (target >= 70 %: {'met' if verdict_raw >= 0.7 else 'NOT met'}); {verdict_raw_wall:.0%} "
            "by wall clock.",
            "",
            "## What bounds the ratio to the raw ceiling",
            "",
            "Profiled in [profiles/README.md](profiles/README.md#informer-watch-ingestion-what-bounds-its-ratio-to-the-raw-ceiling-informer-watchtxt)",
            "(figures in profiles/informer-watch.txt; `benchmarks/informer_breakdown.py` reproduces the in-process",
            "steps): the raw ceiling drops each event as soon as it is decoded; keeping the latest state of every pod",
            "(freeing each replaced object, no longer in the CPU cache, and the cyclic GC traversing the kept ones) is",
            "more than the whole remaining gap.",
            "",
            "## The same stream without managedFields",
            "",
            f"Every event of the stream above with `metadata.managedFields` removed ({len(bare) / args.events:,.0f} "
            "bytes/event), timed in the same runs: what a client sees from an apiserver that does not track field "
            "ownership (the simulator before 2026-12-03). Not what a real cluster sends; shown so the ratio above can "
            "be read against the earlier figure.",
            "",
            "| contender | events per CPU-s (median) | of raw ceiling | events/s wall (median) |",
            "|---|---:|---:|---:|",
            *bare_rows,
            "",
            f"## Growing cache: {args.events:,} distinct pods, all ADDED (synthetic)",
            "",
            "| contender | events per CPU-s (median) | events/s wall (median) |",
            "|---|---:|---:|",
            *grow_rows,
            "",
            "## Notes",
            "",
            "- The informer's figure includes what the raw ceiling skips: event interpretation, the default transform",
            "  (managedFields and the last-applied annotation dropped), keeping the latest state of every pod (each",
            "  update frees the previous one, whose memory is no longer in the CPU cache), the indexed cache, and one",
            "  handler call per event. `intern_transform` also interns shared metadata strings (namespace, label and",
            "  annotation values, owner references); `compact_transform` also the shared spec/container strings.",
            "- Like every real apiserver, the simulator keeps `metadata.managedFields` on every object (entries for",
            "  the creator, the kubelet's status writes and the annotation writer here): every contender decodes them;",
            "  the informer's transforms drop them, so it does not even build them: its decoder replaces their text by",
            "  `null` before orjson decodes the line (controller/runtime/watchdecode.py). The",
            "  table without them shows how much of the ratio comes from decoding work both sides share.",
            "- kopf and the raw reader keep no cache; their memory figure is their decoded dicts held in a dict by name",
            "  (kubernetes-asyncio: its V1Pod models). In the timed runs none of them retains anything.",
            "- Growing cache: when every event adds an object, CPython's cyclic GC keeps traversing the growing heap of",
            "  cached dicts (see the raw reader that keeps every object). The informer pauses the collector during",
            "  each synchronous batch, so it runs once per batch instead of every 700 allocations. A process can go",
            "  further after its caches have synced with `gc.freeze()` (cached pods hold no reference cycles) — a",
            "  process-level choice, so not made by the informer.",
            "",
        ]
    )
    print()
    print(report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    raw_path.write_text(
        json.dumps(
            {
                "command": sys.argv,
                "date": stamp.isoformat(timespec="seconds"),
                "commit": commit,
                "load_average_before": load_before,
                "load_average_after": load_after,
                "stream_bytes": len(lifecycle),
                "events": args.events,
                "runs_events_per_s_wall_and_cpu": {
                    "lifecycle": rates,
                    "without managedFields": bare_rates,
                    "growing cache": grow_rates,
                },
                "bytes_per_cached_pod": memory,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"raw figures written to {raw_path}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
