"""Benchmark: the controller process's memory and CPU on a realistic run, to size the Deployment's requests.

Why this exists: ``manifests/deployment/deployment.yaml`` requests CPU and memory for the controller pod;
the numbers must come from a measurement, not a guess, and must be re-measured when the code changes.

What is measured: ``tfjob-controller run`` as a separate process (exactly the CLI the Deployment runs,
leader election on) against a simulated cluster served from this process. The run:

1. *idle*: the controller starts, syncs its (empty) caches and sits idle;
2. *burst*: ``--jobs`` TFJobs (1 PS + ``--workers`` workers each) are created at once; the phase ends when
   every pod is Running and every job is Running;
3. *steady*: nothing changes for ``--steady-seconds`` (informers, lease renewals, periodic resyncs only);
4. *churn*: one worker of every job is deleted (a dynamic-worker failover each) until all are replaced.

For each phase: the process's resident set (VmRSS from ``/proc/PID/status``, sampled every 0.1 s; the peak
is VmHWM) and CPU time (utime + stime from ``/proc/PID/stat``) — as cores (CPU-seconds per wall second).

Usage: ``.venv/bin/python benchmarks/footprint_bench.py [--jobs 100] [--workers 4]``; results are printed and
written to ``docs/benchmarks/footprint.md`` (``--out``). Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS, PODS, ApiClient  # noqa: E402
from controller.tfjob.executor import TFJOBS  # noqa: E402
from tfjob_sim.cluster import SimCluster, SimConfig  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def memory_kib(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def job(name: str, workers: int) -> dict[str, Any]:
    def replicas(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "enableDynamicWorker": True,
            "runPolicy": {},
            "tfReplicaSpecs": {"PS": replicas(1), "Worker": replicas(workers)},
        },
    }


class Sampler:
    """Samples one process's RSS every ``period`` seconds; reports per phase."""

    def __init__(self, pid: int, period: float = 0.1) -> None:
        self.pid = pid
        self.period = period
        self.rss: list[int] = []
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            self.rss.append(memory_kib(self.pid)["VmRSS"])
            await asyncio.sleep(self.period)  # a sampling period, not synchronisation

    def start_phase(self) -> tuple[float, float]:
        self.rss = []
        return time.monotonic(), cpu_seconds(self.pid)

    def end_phase(self, start: tuple[float, float]) -> dict[str, float]:
        wall = time.monotonic() - start[0]
        cpu = cpu_seconds(self.pid) - start[1]
        rss = self.rss or [memory_kib(self.pid)["VmRSS"]]
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "cores": cpu / wall if wall else 0.0,
            "rss_max_mib": max(rss) / 1024,
            "rss_end_mib": rss[-1] / 1024,
        }

    def __enter__(self) -> Sampler:
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def main(args: argparse.Namespace) -> None:
    cluster = SimCluster(
        SimConfig(
            nodes=max(3, args.jobs // 10), time_scale=0.01, kubeconfig_path=f"/tmp/footprint-{os.getpid()}.kubeconfig"
        )
    )
    await cluster.start()
    client = await ApiClient.from_kubeconfig(cluster.kubeconfig_path, qps=0)
    await client.create(
        CUSTOM_RESOURCE_DEFINITIONS, yaml.safe_load((ROOT / "manifests/crd/kubeflow.org_tfjobs.yaml").read_text())
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "controller",
        "--log-level",
        "warning",
        "run",
        "--kubeconfig",
        cluster.kubeconfig_path,
        "--metrics-addr",
        f"127.0.0.1:{free_port()}",
        "--health-addr",
        f"127.0.0.1:{free_port()}",
        "--leader-election-namespace",
        "default",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    pods_per_job = 1 + args.workers
    total_pods = args.jobs * pods_per_job
    phases: dict[str, dict[str, float]] = {}

    async def running_pods() -> int:
        items = (await client.list(PODS, namespace="default"))["items"]
        return sum(
            1
            for p in items
            if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        )

    try:
        with Sampler(proc.pid) as sampler:
            start = sampler.start_phase()
            lease_held = False

            async def leading() -> bool:
                nonlocal lease_held
                from controller.runtime.client import LEASES

                try:
                    lease = await client.get(LEASES, "tfjob-controller", namespace="default")
                except Exception:
                    return False
                lease_held = bool(lease["spec"].get("holderIdentity"))
                return lease_held

            await wait_for(leading, 60, "the controller to take the lease")
            await asyncio.sleep(args.idle_seconds)  # the idle phase has a fixed length by design
            phases["idle (caches empty)"] = sampler.end_phase(start)

            start = sampler.start_phase()
            await asyncio.gather(
                *(client.create(TFJOBS, job(f"job-{i}", args.workers), namespace="default") for i in range(args.jobs))
            )

            async def all_running() -> bool:
                return await running_pods() == total_pods

            await wait_for(all_running, 600, f"{total_pods} pods Running")
            phases[f"burst: {args.jobs} jobs, {total_pods} pods created"] = sampler.end_phase(start)

            start = sampler.start_phase()
            await asyncio.sleep(args.steady_seconds)  # the steady phase has a fixed length by design
            phases[f"steady ({total_pods} pods cached)"] = sampler.end_phase(start)

            start = sampler.start_phase()
            for i in range(args.jobs):
                await client.delete(PODS, f"job-{i}-worker-0", namespace="default", grace_period_seconds=0)
            await wait_for(all_running, 600, "every deleted worker to be replaced")
            phases[f"churn: {args.jobs} workers deleted and replaced"] = sampler.end_phase(start)
            hwm = memory_kib(proc.pid)["VmHWM"] / 1024
    finally:
        proc.terminate()
        await proc.wait()
        await client.close()
        await cluster.stop()

    lines = [
        "# Controller footprint (sizes the Deployment's requests)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs (shared with other work: CPU figures are upper bounds), "
        f"by `benchmarks/footprint_bench.py --jobs {args.jobs} --workers {args.workers}`: `tfjob-controller run` "
        "in its own process against the simulated cluster.",
        "",
        "| phase | wall s | CPU s | cores | RSS max MiB | RSS at end MiB |",
        "|---|---|---|---|---|---|",
    ]
    for name, p in phases.items():
        lines.append(
            f"| {name} | {p['wall_s']:.1f} | {p['cpu_s']:.2f} | {p['cores']:.3f} | "
            f"{p['rss_max_mib']:.1f} | {p['rss_end_mib']:.1f} |"
        )
    lines += ["", f"Peak resident set over the whole run (VmHWM): {hwm:.1f} MiB.", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        await asyncio.to_thread(Path(args.out).write_text, text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--steady-seconds", type=float, default=20.0)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks" / "footprint.md"))
    asyncio.run(main(parser.parse_args()))
