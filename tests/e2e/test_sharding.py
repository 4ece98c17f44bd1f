"""A cluster too big for one replica, split by namespace (docs/scaling.md), at small scale.

Two ``tfjob-controller run`` processes, as two Deployments would run them, against one simulated
cluster: one scoped to ``team-a``, the other to ``team-b``, each holding its own Lease. Every job of
each shard reaches Running; no job is handled twice (each pod and service is created exactly once,
no create is ever refused as already existing, each process lists and watches only its namespace
and reports only its namespace's jobs); a namespace outside both shards is left alone.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import anyio
import yaml

from controller.runtime.client import LEASES, NAMESPACES, PODS, ApiClient
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import CRD_PATH, CRDS, eventually, is_true, tfjob
from tfjob_sim.cluster import SimCluster
from tfjob_sim.testing.processes import free_port

SHARDS = ("team-a", "team-b")
JOBS_PER_SHARD = 3
WORKERS = 2


@asynccontextmanager
async def shard(cluster: SimCluster, namespace: str) -> AsyncIterator[int]:
    """``tfjob-controller run --namespace NS --leader-election-id tfjob-controller-NS``; yields its metrics port."""
    assert cluster.kubeconfig_path
    metrics_port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "controller",
        "--log-level",
        "warning",
        "run",
        "--kubeconfig",
        cluster.kubeconfig_path,
        "--namespace",
        namespace,
        "--workers",
        "2",
        "--leader-election-namespace",
        "default",
        "--leader-election-id",
        f"tfjob-controller-{namespace}",
        "--metrics-addr",
        f"127.0.0.1:{metrics_port}",
        "--health-addr",
        f"127.0.0.1:{free_port()}",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield metrics_port
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            _, stderr = await proc.communicate()
        assert proc.returncode == 0, stderr.decode()[-3000:]


async def test_two_namespace_shards_each_run_their_own_jobs_and_no_job_twice(sim_cluster: SimCluster) -> None:
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    try:
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        for namespace in (*SHARDS, "team-c"):
            await client.create(NAMESPACES, {"metadata": {"name": namespace}})
        mark = sim_cluster.faults.mark()
        async with shard(sim_cluster, "team-a") as metrics_a, shard(sim_cluster, "team-b") as metrics_b:
            for namespace in (*SHARDS, "team-c"):
                for i in range(JOBS_PER_SHARD):
                    await client.create(
                        TFJOBS, tfjob(f"job-{i}", workers=WORKERS, namespace=namespace), namespace=namespace
                    )

            async def all_running() -> bool:
                for namespace in SHARDS:
                    for i in range(JOBS_PER_SHARD):
                        if not is_true(await client.get(TFJOBS, f"job-{i}", namespace=namespace), "Running"):
                            return False
                return True

            await eventually(all_running, timeout=60, what="every job of both shards Running")
            scraped = {}
            async with aiohttp.ClientSession() as http:
                for namespace, port in (("team-a", metrics_a), ("team-b", metrics_b)):
                    created = (
                        f'training_operator_jobs_created_total{{framework="tensorflow",job_namespace="{namespace}"}}'
                    )

                    async def counted(port: int = port, created: str = created) -> str | None:
                        # A namespace's counts show from the scrape after the one that showed its series at 0.
                        async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
                            text = await resp.text()
                        return text if f"{created} {float(JOBS_PER_SHARD)}" in text else None

                    scraped[namespace] = await eventually(counted, timeout=30, what=f"{namespace}'s jobs counted")
            leases = {ns: await client.get(LEASES, f"tfjob-controller-{ns}", namespace="default") for ns in SHARDS}

        # Each shard reports its own namespace's jobs and never the other's.
        for namespace, other in (("team-a", "team-b"), ("team-b", "team-a")):
            assert f'job_namespace="{other}"' not in scraped[namespace]
            assert 'job_namespace="team-c"' not in scraped[namespace]
        holders = {ns: lease["spec"]["holderIdentity"] for ns, lease in leases.items()}
        assert all(holders.values()) and holders["team-a"] != holders["team-b"]

        # From the simulator's request log: every pod and service created exactly once, never refused.
        requests = sim_cluster.faults.requests(mark)
        ours = [r for r in requests if r.user_agent.startswith("tfjob-controller/")]
        for resource in ("pods", "services"):
            creates = [r for r in ours if r.verb == "create" and r.resource == resource]
            assert all(r.code == 201 for r in creates), [(r.namespace, r.code) for r in creates if r.code != 201]
            per_namespace = {ns: sum(1 for r in creates if r.namespace == ns) for ns in (*SHARDS, "team-c")}
            assert per_namespace == {
                "team-a": JOBS_PER_SHARD * WORKERS,
                "team-b": JOBS_PER_SHARD * WORKERS,
                "team-c": 0,
            }
        # Neither process ever read TFJobs, pods or services beyond its namespace.
        reads = [
            r for r in ours if r.verb in ("list", "watch") and r.resource in ("tfjobs.kubeflow.org", "pods", "services")
        ]
        assert reads and all(r.namespace in SHARDS for r in reads)
        assert (await client.list(PODS, namespace="team-c"))["items"] == []
    finally:
        await client.close()
