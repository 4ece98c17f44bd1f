"""Benchmark of the simulated apiserver (a script, not a test).

Measures, against a SimCluster running in a separate process (so client and server each get a core):
  1. creates/s: N pods POSTed over HTTP by concurrent clients;
  2. the time to LIST 100,000 pods over HTTP (full body received; JSON decode timed separately);
  3. watch-event delivery rate to 1 and to 10 watchers (events generated in the server process as
     fast as the store commits them; the client counts complete lines, the raw ceiling of a reader).
Prints medians over --runs and writes them, with the machine and date, to docs/benchmarks/sim.md.

Also TFJob creates/s through CRD validation (structural schema + CEL rules), for jobs from one
template and for jobs whose replica specs all differ.

Targets on a 2-core machine: >= 1,000 creates/s (pods and TFJobs), a 100,000-pod list in <= 3 s, >= 20,000 events/s to
one watcher. The kubelet and GC are disabled: this measures the API server, not the simulated nodes.
``--secure`` measures the same against the secure mode (HTTPS, the admin's bearer token, every
request authenticated and authorized); the targets are the default (plain HTTP) mode's.

Usage: .venv/bin/python benchmarks/sim_bench.py [--runs 3] [--pods 10000] [--list-pods 100000]
       [--events 100000] [--secure] [--output docs/benchmarks/sim.md]
       .venv/bin/python benchmarks/sim_bench.py --only tfjobs [--runs 5] [--tfjobs 5000]
``--only tfjobs`` measures just the two TFJob rows, one template and all distinct side by side in each
run (their ratio is what a loaded machine changes least), prints them and leaves the report alone.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import multiprocessing as mp
import os
import platform
import ssl
import statistics
import sys
import time
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

POD_TEMPLATE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "", "labels": {"app": "bench", "tier": "web"}},
    "spec": {
        "containers": [
            {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
        ]
    },
}


# ------------------------------------------------------------------------------------ server side


def _server_main(conn, buffer_limit: int, secure: bool) -> None:
    asyncio.run(_serve(conn, buffer_limit, secure))


async def _serve(conn, buffer_limit: int, secure: bool) -> None:
    from tfjob_sim.cluster import SimCluster, SimConfig
    from tfjob_sim.store import StoreConfig
    from tfjob_sim.watch import WatchConfig

    config = SimConfig(
        kubelet=False,
        gc=False,
        store=StoreConfig(history_max_events=200_000),
        watch=WatchConfig(buffer_limit=buffer_limit),
        secure=secure,
    )
    cluster = SimCluster(config)
    await cluster.start()
    loop = asyncio.get_running_loop()
    commands: asyncio.Queue = asyncio.Queue()
    loop.add_reader(conn.fileno(), lambda: commands.put_nowait(conn.recv()))
    conn.send(cluster.url)
    if secure:
        material = cluster.secure
        conn.send((material.ca_cert, material.admin_token))
    store = cluster.store
    try:
        while True:
            cmd = await commands.get()
            if cmd[0] == "stop":
                break
            if cmd[0] == "populate":
                count = cmd[1]
                for i in range(count):
                    body = orjson.loads(orjson.dumps(POD_TEMPLATE))
                    body["metadata"]["name"] = f"bulk-{i:06d}"
                    store.create_ex("pods", "default", body, owned=True)
                    if i % 5000 == 0:
                        await asyncio.sleep(0)
                conn.send(("populated", store.resource_version))
            elif cmd[0] == "events":
                count = cmd[1]
                store.create("configmaps", "default", {"metadata": {"name": "ticker"}, "data": {"n": "0"}})
                started = time.perf_counter()
                for i in range(count):
                    store.update_ex(
                        "configmaps",
                        "default",
                        "ticker",
                        {"metadata": {"name": "ticker"}, "data": {"n": str(i + 1)}},
                        owned=True,
                    )
                    if i % 200 == 0:
                        await asyncio.sleep(0)  # let the watch streams write
                conn.send(("generated", time.perf_counter() - started))
            elif cmd[0] == "watchers":
                conn.send(("watchers", len(cluster.hub.watchers(cmd[1]))))
    finally:
        loop.remove_reader(conn.fileno())
        await cluster.stop()


class Server:
    """A SimCluster in a child process, driven through a pipe. :meth:`connector` / ``headers``: what
    a client needs, plain HTTP, or (secure mode) TLS trusting the cluster's CA and the admin's token."""

    secure = False  # set from --secure

    def __init__(self, buffer_limit: int = 1_000_000) -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_server_main, args=(child, buffer_limit, self.secure), daemon=True)
        self.proc.start()
        self.url: str = self._recv(timeout=60)
        self.ssl: ssl.SSLContext | None = None
        self.headers: dict[str, str] = {}
        if self.secure:
            ca, token = self._recv(timeout=30)
            self.ssl = ssl.create_default_context(cadata=ca.decode())
            self.headers = {"Authorization": f"Bearer {token}"}

    def connector(self, limit: int = 100) -> aiohttp.TCPConnector:
        return aiohttp.TCPConnector(limit=limit, ssl=self.ssl if self.ssl is not None else True)

    def session(self, limit: int = 100) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(connector=self.connector(limit), headers=self.headers)

    def _recv(self, timeout: float):
        if not self.conn.poll(timeout):
            raise TimeoutError("the simulator process did not answer")
        return self.conn.recv()

    async def call(self, *cmd, timeout: float = 300):
        self.conn.send(cmd)
        return await asyncio.to_thread(self._recv, timeout)

    def close(self) -> None:
        self.conn.send(("stop",))
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()


# ------------------------------------------------------------------------------------ phases


def pod_bodies(count: int) -> list[bytes]:
    bodies = []
    for i in range(count):
        body = orjson.loads(orjson.dumps(POD_TEMPLATE))
        body["metadata"]["name"] = f"pod-{i:06d}"
        bodies.append(orjson.dumps(body))
    return bodies


def tfjob_bodies(count: int, distinct: bool) -> list[bytes]:
    """TFJobs of 1 PS + 4 workers. ``distinct``: every job has its own image, so no two jobs share a
    replica spec (the CEL result memo never helps); otherwise they differ by name only (one template)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale import tfjob

    bodies = []
    for i in range(count):
        job = tfjob(f"job-{i:06d}", 4)
        if distinct:
            for spec in job["spec"]["tfReplicaSpecs"].values():
                spec["template"]["spec"]["containers"][0]["image"] = f"tensorflow/tensorflow:2.{i}"
        bodies.append(orjson.dumps(job))
    return bodies


async def install_tfjob_crd(session: aiohttp.ClientSession, url: str) -> None:
    import yaml

    crd = yaml.safe_load((ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml").read_text())
    async with session.post(url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json=crd) as resp:
        if resp.status != 201:
            raise RuntimeError(f"CRD create failed: {resp.status} {await resp.text()}")
    for _ in range(1000):
        async with session.get(url + "/apis/kubeflow.org/v1/tfjobs") as resp:
            if resp.status == 200:
                return
        await asyncio.sleep(0.01)
    raise RuntimeError("the TFJob CRD is not served")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process: unlike wall time, barely moved by other load on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def bench_creates(bodies: list[bytes], path: str, concurrency: int, tfjobs: bool = False) -> tuple[float, float]:
    """(creates/s, server CPU microseconds per create)."""
    server = Server()
    try:
        async with server.session(concurrency) as session:
            if tfjobs:
                await install_tfjob_crd(session, server.url)
            url = server.url + path
            headers = {"Content-Type": "application/json", "Accept": "application/json"}
            next_index = 0

            async def worker() -> None:
                nonlocal next_index
                while next_index < len(bodies):
                    data = bodies[next_index]
                    next_index += 1
                    async with session.post(url, data=data, headers=headers) as resp:
                        await resp.read()
                        if resp.status != 201:
                            raise RuntimeError(f"create failed: {resp.status}")

            cpu_before = process_cpu(server.proc.pid)
            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
            cpu = process_cpu(server.proc.pid) - cpu_before
        return len(bodies) / elapsed, cpu / len(bodies) * 1e6
    finally:
        server.close()


async def bench_list(pods: int) -> tuple[float, float, int]:
    server = Server()
    try:
        await server.call("populate", pods)
        async with server.session() as session:
            started = time.perf_counter()
            async with session.get(server.url + "/api/v1/pods", headers={"Accept": "application/json"}) as resp:
                body = await resp.read()
            received = time.perf_counter() - started
            decode_start = time.perf_counter()
            parsed = orjson.loads(body)
            decoded = time.perf_counter() - decode_start
            assert len(parsed["items"]) == pods, len(parsed["items"])
        return received, decoded, len(body)
    finally:
        server.close()


async def bench_watch(watchers: int, events: int) -> tuple[float, float]:
    """Returns (events/s per watcher, aggregate events/s across watchers)."""
    server = Server(buffer_limit=events + 10_000)
    try:
        async with server.session(watchers + 2) as session:
            async with session.get(server.url + "/api/v1/namespaces/default/configmaps") as resp:
                rv = (await resp.json())["metadata"]["resourceVersion"]
            responses = [
                await session.get(
                    server.url + "/api/v1/namespaces/default/configmaps",
                    params={"watch": "true", "resourceVersion": rv},
                    timeout=aiohttp.ClientTimeout(total=None),
                )
                for _ in range(watchers)
            ]
            # The server opens a watch before it sends the headers session.get() waited for: all are open.
            opened = (await server.call("watchers", "configmaps"))[1]
            if opened != watchers:
                raise RuntimeError(f"{opened} watches open on the server, {watchers} expected")
            expected = events + 1  # the ticker's ADDED plus every update

            async def consume(resp: aiohttp.ClientResponse) -> float:
                seen = 0
                async for chunk in resp.content.iter_any():
                    seen += chunk.count(b"\n")
                    if seen >= expected:
                        return time.perf_counter()
                raise RuntimeError(f"watch ended after {seen} of {expected} events")

            started = time.perf_counter()
            consumers = [asyncio.create_task(consume(r)) for r in responses]
            generator = asyncio.create_task(server.call("events", events))
            finished = await asyncio.gather(*consumers)
            await generator
            for r in responses:
                r.close()
        elapsed = max(finished) - started
        return expected / elapsed, expected * watchers / elapsed
    finally:
        server.close()


# ------------------------------------------------------------------------------------ report


def machine() -> dict[str, str]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


TFJOBS_PATH = "/apis/kubeflow.org/v1/namespaces/default/tfjobs"


async def tfjobs_only(args: argparse.Namespace, load_before: str) -> int:
    same, distinct = [], []
    for run in range(args.runs):
        same.append(await bench_creates(tfjob_bodies(args.tfjobs, False), TFJOBS_PATH, args.concurrency, True))
        distinct.append(await bench_creates(tfjob_bodies(args.tfjobs, True), TFJOBS_PATH, args.concurrency, True))
        print(
            f"run {run + 1}: TFJobs {same[-1][0]:,.0f}/s ({same[-1][1]:,.0f} us server CPU each) one template, "
            f"{distinct[-1][0]:,.0f}/s ({distinct[-1][1]:,.0f} us) all distinct",
            flush=True,
        )
    med = statistics.median
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rate_same, rate_distinct = med(r for r, _ in same), med(r for r, _ in distinct)
    print(
        f"{args.tfjobs:,} TFJob creates, {args.concurrency} concurrent clients, medians of {args.runs} runs, "
        f"load average {load_before} before, {load_after} after:\n"
        f"  one template: {rate_same:,.0f} creates/s, {med(c for _, c in same):,.0f} us server CPU each\n"
        f"  all distinct: {rate_distinct:,.0f} creates/s, {med(c for _, c in distinct):,.0f} us server CPU each "
        f"({rate_distinct / rate_same:.2f}x one template)"
    )
    return 0 if rate_same >= 1000 and rate_distinct >= 1000 else 1


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tfjobs", type=int, default=5_000, help="TFJob creates (CRD schema + CEL validation)")
    parser.add_argument("--list-pods", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument(
        "--secure", action="store_true", help="against the secure mode (HTTPS, bearer token, authentication and RBAC)"
    )
    parser.add_argument("--output", default=str(ROOT / "docs" / "benchmarks" / "sim.md"))
    parser.add_argument(
        "--only",
        choices=["tfjobs"],
        help="only the TFJob creates (one template and all distinct); prints, writes no report",
    )
    args = parser.parse_args()
    Server.secure = args.secure
    if args.runs < 1 or args.pods < 1 or args.list_pods < 1 or args.events < 1:
        parser.error("counts must be >= 1")

    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    if args.only == "tfjobs":
        return await tfjobs_only(args, load_before)
    creates, lists, decodes, sizes, one, ten, ten_total = [], [], [], [], [], [], []
    jobs_same, jobs_distinct, cpu_pod, cpu_same, cpu_distinct = [], [], [], [], []
    for run in range(args.runs):
        rate, cpu = await bench_creates(pod_bodies(args.pods), "/api/v1/namespaces/default/pods", args.concurrency)
        creates.append(rate)
        cpu_pod.append(cpu)
        rate, cpu = await bench_creates(tfjob_bodies(args.tfjobs, False), TFJOBS_PATH, args.concurrency, True)
        jobs_same.append(rate)
        cpu_same.append(cpu)
        rate, cpu = await bench_creates(tfjob_bodies(args.tfjobs, True), TFJOBS_PATH, args.concurrency, True)
        jobs_distinct.append(rate)
        cpu_distinct.append(cpu)
        received, decoded, size = await bench_list(args.list_pods)
        lists.append(received)
        decodes.append(decoded)
        sizes.append(size)
        one.append((await bench_watch(1, args.events))[0])
        per, total = await bench_watch(10, args.events)
        ten.append(per)
        ten_total.append(total)
        print(
            f"run {run + 1}: {creates[-1]:,.0f} creates/s; TFJobs {jobs_same[-1]:,.0f}/s (one template), "
            f"{jobs_distinct[-1]:,.0f}/s (all distinct); list {args.list_pods:,} pods {lists[-1]:.2f} s "
            f"(+{decodes[-1]:.2f} s decode, {sizes[-1] / 1e6:.0f} MB); watch 1: {one[-1]:,.0f} ev/s; "
            f"watch 10: {ten[-1]:,.0f} ev/s each, {ten_total[-1]:,.0f} total",
            flush=True,
        )

    med = statistics.median
    rows = [
        (
            "Create pods over HTTP",
            f"{args.pods:,} pods, {args.concurrency} concurrent clients",
            f"{med(creates):,.0f} creates/s ({med(cpu_pod):,.0f} us server CPU each)",
            ">= 1,000/s",
            med(creates) >= 1000,
        ),
        (
            "Create TFJobs over HTTP (CRD schema + CEL)",
            f"{args.tfjobs:,} jobs from one template, {args.concurrency} concurrent clients",
            f"{med(jobs_same):,.0f} creates/s ({med(cpu_same):,.0f} us server CPU each)",
            ">= 1,000/s",
            med(jobs_same) >= 1000,
        ),
        (
            "Create TFJobs over HTTP (CRD schema + CEL)",
            f"{args.tfjobs:,} jobs, no two replica specs alike",
            f"{med(jobs_distinct):,.0f} creates/s ({med(cpu_distinct):,.0f} us server CPU each)",
            ">= 1,000/s",
            med(jobs_distinct) >= 1000,
        ),
        (
            "List pods over HTTP",
            f"{args.list_pods:,} pods, one unpaginated LIST ({med(sizes) / 1e6:.0f} MB)",
            f"{med(lists):.2f} s (+{med(decodes):.2f} s client decode)",
            "<= 3 s",
            med(lists) <= 3.0,
        ),
        (
            "Watch delivery, 1 watcher",
            f"{args.events:,} events",
            f"{med(one):,.0f} events/s",
            ">= 20,000/s",
            med(one) >= 20_000,
        ),
        (
            "Watch delivery, 10 watchers",
            f"{args.events:,} events each",
            f"{med(ten):,.0f} events/s per watcher ({med(ten_total):,.0f} total)",
            "-",
            True,
        ),
    ]
    info = machine()
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Simulated apiserver benchmark",
        "",
        f"Measured {date} on {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, {info['platform']}.",
        f"Load average (1/5/15 min) {load_before} before, {' '.join(f'{x:.2f}' for x in os.getloadavg())} after: "
        "other work on the machine lowers every rate. Server CPU per create moves much less with the load.",
        f"Medians of {args.runs} runs of `benchmarks/sim_bench.py{' --secure' if args.secure else ''}`. The "
        "simulator runs in its own process (kubelet and GC off); the client runs in the benchmark process. Watch "
        "rates count complete event lines received (no per-event decoding: the ceiling of any reader). Where a TFJob "
        "create's CPU goes, with and without distinct replica specs: [profiles/README.md](profiles/README.md#"
        "simulator-tfjob-creates-whose-replica-specs-all-differ).",
        *(
            [
                "Secure mode: HTTPS (the cluster's CA verified), the admin's bearer token, every request authenticated "
                "and authorized; the targets are the default plain-HTTP mode's."
            ]
            if args.secure
            else []
        ),
        "",
        "| Measurement | Workload | Result | Target | Met |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {load} | {result} | {target} | {'yes' if met else 'NO'} |"
        for name, load, result, target, met in rows
    ]
    lines += ["", "Raw runs:", ""]
    for i in range(args.runs):
        lines.append(
            f"- run {i + 1}: {creates[i]:,.0f} creates/s; TFJobs {jobs_same[i]:,.0f}/s (one template), "
            f"{jobs_distinct[i]:,.0f}/s (distinct); list {lists[i]:.2f} s (+{decodes[i]:.2f} s "
            f"decode); 1 watcher {one[i]:,.0f} ev/s; 10 watchers {ten[i]:,.0f} ev/s each"
        )
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    await asyncio.to_thread(output.write_text, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(row[4] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
