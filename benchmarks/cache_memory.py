"""Bytes per cached pod, service and TFJob in the controller's informer caches (a script, not a test).

Builds realistic objects on a simulated cluster (jobs of 1 PS + 4 dynamic workers created from the
controller's own decide(), pods run by the simulated kubelet, managedFields kept by its field manager),
lists them over HTTP as the informers do, then decodes N copies of each (fresh names and uids, so
nothing is shared by accident) and measures with tracemalloc the bytes each kind costs in the cache:
as received, with the informer's default transform (managedFields stripped), and with the transform the
controller uses (controller.tfjob.trim for pods and services). Prints a table and, with --output,
writes it as markdown.

Usage: .venv/bin/python benchmarks/cache_memory.py [--copies 2000] [--output docs/benchmarks/profiles/memory.md]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import datetime as _dt
import gc
import platform
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.runtime.cache import default_transform  # noqa: E402
from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS, PODS, SERVICES, ApiClient  # noqa: E402
from controller.tfjob.actions import CreatePod, CreateService  # noqa: E402
from controller.tfjob.decide import DecideConfig, decide  # noqa: E402
from controller.tfjob.executor import TFJOBS  # noqa: E402
from controller.tfjob.trim import trim_pod, trim_service  # noqa: E402
from tfjob_sim.cluster import SimCluster, SimConfig  # noqa: E402

CRD = ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"


def manifest(name: str) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "ExitCode",
            "template": {
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "tensorflow",
                            "image": "tensorflow/tensorflow:2.15.0",
                            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                        }
                    ],
                }
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"enableDynamicWorker": True, "tfReplicaSpecs": {"PS": replica(1), "Worker": replica(4)}},
    }


async def sample_objects(jobs: int) -> dict[str, list[bytes]]:
    """Raw JSON of every pod, service and job of ``jobs`` running jobs, as a LIST returns them."""
    with tempfile.TemporaryDirectory() as tmp:
        config = SimConfig(nodes=max(2, jobs), time_scale=0.01, kubeconfig_path=f"{tmp}/kc")
        async with SimCluster(config) as cluster, await ApiClient.from_kubeconfig(cluster.kubeconfig_path) as client:
            await client.create(CUSTOM_RESOURCE_DEFINITIONS, yaml.safe_load(CRD.read_text()))
            for i in range(jobs):
                job = await client.create(TFJOBS, manifest(f"job-{i:04d}"), namespace="default")
                decision = decide(job, [], [], _dt.datetime.now(_dt.UTC), DecideConfig())
                for action in decision.actions:
                    if isinstance(action, CreatePod):
                        await client.create(PODS, action.pod, namespace="default")
                    elif isinstance(action, CreateService):
                        await client.create(SERVICES, action.service, namespace="default")
                await client.replace(
                    TFJOBS, {**job, "status": decision.status}, namespace="default", subresource="status"
                )
            for _ in range(600):
                pods = (await client.list(PODS, namespace="default"))["items"]
                if len(pods) == 5 * jobs and all(p["status"].get("phase") == "Running" for p in pods):
                    break
                await asyncio.sleep(0.1)
            else:
                raise RuntimeError("pods did not all run")
            out = {}
            for kind, resource in (("pod", PODS), ("service", SERVICES), ("tfjob", TFJOBS)):
                items = (await client.list(resource, namespace="default"))["items"]
                out[kind] = [orjson.dumps(item) for item in items]
            return out


def bytes_per_object(raws: list[bytes], copies: int, transform: Callable[[dict], dict]) -> float:
    """tracemalloc bytes per object for ``copies`` decoded, renamed and transformed objects."""
    sources = [orjson.loads(raw) for raw in raws]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = []
    for i in range(copies):
        obj = orjson.loads(orjson.dumps(sources[i % len(sources)]))
        meta = obj["metadata"]
        meta["name"] = f"{meta['name']}-{i}"
        meta["uid"] = f"{meta['uid'][:-8]}{i:08d}"
        kept.append(transform(obj))
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return (after - before) / copies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs to sample objects from (default 20)")
    parser.add_argument("--copies", type=int, default=2000, help="objects decoded per measurement (default 2000)")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    raws = asyncio.run(sample_objects(args.jobs))
    identity = lambda o: o  # noqa: E731
    rows = []
    kinds = (("pod", trim_pod, 6), ("service", trim_service, 6), ("tfjob", default_transform, 1))
    for kind, trimmed, per_job in kinds:
        wire = sum(map(len, raws[kind])) / len(raws[kind])
        received = bytes_per_object(raws[kind], args.copies, identity)
        default = bytes_per_object(raws[kind], args.copies, lambda o: default_transform(copy.copy(o)))
        ours = bytes_per_object(raws[kind], args.copies, trimmed)
        rows.append((kind, per_job, wire, received, default, ours))
    total_default = sum(per_job * d for _, per_job, _, _, d, _ in rows)
    total_ours = sum(per_job * o for _, per_job, _, _, _, o in rows)
    lines = [
        f"Cache memory per object ({_dt.date.today()}, {platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}; objects from the simulator, jobs of 1 PS + 4 dynamic workers; tracemalloc, "
        f"{args.copies} objects per figure)",
        "",
        "| object | JSON on the wire | decoded as received | default transform (no managedFields) | cached by the controller |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, _, wire, received, default, ours in rows:
        transform = "trim_pod" if kind == "pod" else "trim_service" if kind == "service" else "default"
        lines.append(f"| {kind} | {wire:,.0f} B | {received:,.0f} B | {default:,.0f} B | {ours:,.0f} B ({transform}) |")
    lines += [
        "",
        f"Per job of the cold-start shape (6 pods + 6 services + the TFJob): default "
        f"{total_default / 1024:,.1f} KiB, trimmed {total_ours / 1024:,.1f} KiB; "
        f"10,000 jobs with 6 pods and 6 services each: default {10_000 * total_default / 2**20:,.0f} MiB, "
        f"trimmed {10_000 * total_ours / 2**20:,.0f} MiB of cached objects (plus the process baseline, indices "
        "and the work queue).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
