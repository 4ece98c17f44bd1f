"""Speed at scale: the controller and the simulator as separate processes, as users run them.

Every scenario starts ``tfjob-controller sim --nodes N`` and ``tfjob-controller run`` (or the kopf peer,
benchmarks/kopf_peer.py) as child processes and drives the simulator over HTTP. Times are taken from the
simulator's own clock: ``/_sim/history`` gives the instant the store committed each change (a pod
created, removed, Running; a job Running) and ``/_sim/requests`` the instant each request arrived, so
the benchmark's own polling lag never enters a figure. Controller figures (API requests by its
User-Agent, its CPU seconds, its peak RSS) are reported apart from the simulator's (its CPU seconds).

Scenarios (jobs of 1 PS + W dynamic workers, restartPolicy ExitCode, terminationGracePeriodSeconds 1,
pod start delay ``--start-seconds``, default 0):

- ``burst``: N TFJobs created at once: time to all pods exist, to all jobs Running; requests per job.
- ``failover``: N converged running jobs; once the controller has caught up with them (its start
  on N jobs, timed), R actions/s for D seconds on workers drawn at random with replacement (a
  worker is hit again, sometimes while its replacement still starts): DELETE and eviction
  (disruptions, replaced at once however often) and OOM exit (the worker's own failure, whose
  repeat waits out the crash-loop back-off by design), a third each. Per action: pod gone ->
  replacement create, action -> create, action -> replacement Running (p50/p99/max), disruptions
  and own failures (first / repeat) apart; repeats, 404s and 429s counted; jobs Failed (must be 0).
- ``scaledown``: N converged jobs of 8 workers scale to 2 at once: time to all excess pods gone;
  requests per job.
- ``coldstart``: N converged jobs of 6 pods loaded straight into the simulator's store, then the
  controller starts: time to ready (caches synced), to all reconciled (every job reconciled once and
  the queue empty), writes (must be 0), peak RSS.
- ``burst-peer``, ``failover-peer``: the same with the same ``decide()`` driven by kopf handlers
  (benchmarks/kopf_peer.py) instead of the controller; the peer's failover at ``--peer-jobs`` (its
  start on converged jobs grows with the square of the objects), next to ``failover-small``: ours at
  that scale. ``peer-check`` first checks the peer at 5 jobs, where every figure is exact, and fails
  the run if it is broken. ``peer`` runs these four.
- ``burst-neighbour``, ``burst-apf``, ``failover-apf``: against a server that pushes back. The simulator runs
  secure (``--secure``): the controller as the ServiceAccount of manifests/ with its RBAC (so API Priority
  and Fairness classifies it as a deployed controller, ``service-accounts`` at ``workload-low``), the
  benchmark as the cluster admin (exempt), and a neighbour (benchmarks/neighbour.py): another ServiceAccount
  GETting one ConfigMap 5/s from 5 s before the measured phase (idle) to its end (during). Every write holds
  its seat ``--apf-write-latency``; ``burst-neighbour`` runs the burst at the default limits, the other two
  burst and failover at limits small enough for 429s (APF_LIMITS). Every scenario of ours reports the
  server's 429s by priority level and reason, the controller's 429s seen and retried, jobs Failed / Running,
  and the neighbour's latency and 429s.
- ``all``: every scenario above in one run (each peer scenario right after ours), then the report.

"Converged" jobs are built by the benchmark with the controller's own ``decide()`` (pods, services,
then the status they converge to, checked to be a fixed point) and loaded through ``/_sim/objects``,
so setting up 10,000 jobs does not depend on the controller's speed.

Equal work: the kopf peer records its events through the controller's own recorder and runs with the
controller's collector thresholds (``--peer-events``, ``--peer-gc`` choose otherwise); both sides run
``--runs`` times, alternating, and every run counts the Events it left in the simulator's store.

``all`` (or any scenario given ``--output``) writes its raw results, with the commit, the command, the
load and the settings, to docs/benchmarks/raw/scale-<time>.json, then docs/benchmarks/scale.md from
them alone (benchmarks/scale_report.py); ``report --raw FILE`` writes the report again from a raw file.

Usage: .venv/bin/python benchmarks/scale.py all [--runs 3] [--profile] [--output docs/benchmarks/scale.md]
       .venv/bin/python benchmarks/scale.py burst [--jobs 1000] [--controller-arg=--kube-api-qps=500 ...]
           [--sim-arg=--no-priority-and-fairness]  (the default client limit, ``auto``, then keeps its bucket)
       .venv/bin/python benchmarks/scale.py report --raw docs/benchmarks/raw/scale-<time>.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as _dt
import inspect
import itertools
import math
import os
import platform
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from scale_report import FORMAT, PAIRS, render  # noqa: E402

from controller.ops.collector import COLLECTOR_THRESHOLDS  # noqa: E402
from controller.runtime.events import EventRecorder  # noqa: E402
from controller.tfjob.actions import CreatePod, CreateService  # noqa: E402
from controller.tfjob.decide import decide  # noqa: E402

CRD_PATH = ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"
PROFILES = ROOT / "docs" / "benchmarks" / "profiles"
REPORT = ROOT / "docs" / "benchmarks" / "scale.md"
TFJOBS = "tfjobs.kubeflow.org"
TFJOBS_PATH = "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs"
PODS_PATH = "/api/v1/namespaces/{ns}/pods"
NAMESPACE = "default"
BENCH_AGENT = "scale-bench"
CONTROLLER_AGENT = "tfjob-controller"
NODE_PODS = 110  # the simulated kubelet's pods per node
POLL = 0.25


# ------------------------------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (from /proc, no psutil needed)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int, key: str) -> int:
    """VmRSS (current) or VmHWM (peak) resident memory of a live process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


class Child:
    """A child process with its output in a log file; stopped with SIGINT, then SIGKILL after a grace."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, env=env or os.environ.copy())
        self.started = time.time()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check(self) -> None:
        if not self.alive():
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}; log tail:\n{tail}")

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "controller", "--log-level", "warning", "--log-format", "json", *args]


async def start_sim(tmp: Path, nodes: int, sim_args: Sequence[str] = ()) -> tuple[Child, str, str]:
    kubeconfig = tmp / "sim.kubeconfig"
    child = Child(
        "simulator",
        cli("sim", "--port", "0", "--kubeconfig", str(kubeconfig), "--nodes", str(nodes), *sim_args),
        tmp / "sim.log",
    )
    assert child.proc.stdout is not None
    line = await asyncio.to_thread(child.proc.stdout.readline)
    match = re.search(r"serving at (\S+)", line.decode())
    if not match:
        child.stop()
        child.check()
        raise RuntimeError(f"simulator printed {line!r}")
    return child, match.group(1), str(kubeconfig)


# ------------------------------------------------------------------------------------------ simulator


class Sim:
    """The simulator over HTTP: the Kubernetes API plus its ``/_sim/`` control API."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.session = session

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ok: Iterable[int] = (200, 201),
        content_type: str = "application/json",
        agent: str = BENCH_AGENT,
    ) -> Any:
        """``agent``: the User-Agent (the request log's key to tell one request of ours from another).
        A 429 is retried after Retry-After unless ``ok`` accepts it (an eviction's answer is the figure)."""
        data = orjson.dumps(body) if body is not None else None
        headers = {"User-Agent": agent, "Content-Type": content_type, "Accept": "application/json"}
        for attempt in range(10):
            async with self.session.request(method, self.url + path, data=data, headers=headers) as resp:
                raw = await resp.read()
                if resp.status == 429 and 429 not in ok and attempt < 9:
                    # API Priority and Fairness pushing back (the benchmark shares a flow with an anonymous
                    # controller): come back after Retry-After, as every Kubernetes client does.
                    await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                    continue
                if resp.status not in ok:
                    raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {raw[:500]!r}")
                return orjson.loads(raw) if raw else None
        raise AssertionError("unreachable")

    async def mark(self) -> int:
        return (await self.call("POST", "/_sim/requests/mark"))["mark"]

    async def requests_by_agent(self, since: int) -> dict[str, dict[str, int]]:
        return (await self.call("GET", f"/_sim/requests/summary?since={since}"))["byUserAgent"]

    async def apf_rejections(self) -> dict[str, int]:
        """The simulator's API Priority and Fairness rejections (429s) so far, by reason (none without APF)."""
        out: dict[str, int] = {}
        for reasons in (await self.apf_rejections_by_level(required=False) or {}).values():
            for reason, n in reasons.items():
                out[reason] = out.get(reason, 0) + n
        return out

    async def apf_rejections_by_level(self, required: bool = True) -> dict[str, dict[str, int]] | None:
        """``apiserver_flowcontrol_rejected_requests_total`` of the simulator's /metrics, summed by priority
        level and reason (every flow schema and client since it started). The family must be served
        (``required``; no sample in it is 0 rejections): None only for a server without APF, which has none."""
        async with self.session.get(self.url + "/metrics", headers={"User-Agent": BENCH_AGENT}) as resp:
            text = await resp.text()
        if "# TYPE apiserver_flowcontrol_rejected_requests_total counter" not in text:
            if required:
                raise RuntimeError("the simulator's /metrics has no apiserver_flowcontrol_rejected_requests_total")
            return None
        out: dict[str, dict[str, int]] = {}
        for sample in metric_samples(text):
            if sample.name == "apiserver_flowcontrol_rejected_requests_total":
                reasons = out.setdefault(sample.labels["priority_level"], {})
                reasons[sample.labels["reason"]] = reasons.get(sample.labels["reason"], 0) + int(sample.value)
        return out

    async def requests(self, since: int) -> list[dict[str, Any]]:
        return (await self.call("GET", f"/_sim/requests?since={since}"))["requests"]

    async def history(self, resource: str, since: int) -> dict[str, Any]:
        return await self.call("GET", f"/_sim/history?resource={resource}&since={since}")

    async def bulk(
        self,
        resource: str,
        items: list[dict],
        subresource: str | None = None,
        namespace: str = NAMESPACE,
        chunk: int = 500,
    ) -> list[dict]:
        written: list[dict] = []
        for start in range(0, len(items), chunk):
            body = {
                "resource": resource,
                "namespace": namespace,
                "items": items[start : start + chunk],
                "fieldManager": CONTROLLER_AGENT,
            }
            if subresource:
                body["subresource"] = subresource
            answer = await self.call("POST", "/_sim/objects", body)
            if answer["errors"]:
                raise RuntimeError(f"bulk {resource} {subresource or 'create'}: {answer['errors'][:3]}")
            written.extend(answer["items"])
        return written

    async def resource_version(self) -> int:
        return int((await self.call("GET", "/api/v1/namespaces?limit=1"))["metadata"]["resourceVersion"])

    async def list(self, path: str) -> list[dict]:
        return (await self.call("GET", path))["items"]

    async def install_crd(self) -> None:
        crd = yaml.safe_load(CRD_PATH.read_text())
        await self.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(RuntimeError):
                await self.call("GET", TFJOBS_PATH.format(ns=NAMESPACE) + "?limit=1")
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the TFJob CRD was not served within 30 s")
            await asyncio.sleep(0.05)


class History:
    """Every committed change of a few resources, as the simulator timed it, polled in the background."""

    def __init__(self, sim: Sim, resources: Iterable[str], since: int) -> None:
        self.sim = sim
        self.events: dict[str, list[dict]] = {r: [] for r in resources}
        self._since = {r: since for r in self.events}
        self._task: asyncio.Task | None = None

    async def poll_once(self) -> None:
        for resource in self.events:
            answer = await self.sim.history(resource, self._since[resource])
            if answer["events"]:
                self.events[resource].extend(answer["events"])
                self._since[resource] = answer["events"][-1]["rv"]

    async def _run(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(POLL)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.poll_once()


# ------------------------------------------------------------------------------------------ controller


@dataclass
class Controller:
    child: Child
    metrics_url: str
    health_url: str

    async def ready(self, session: aiohttp.ClientSession) -> bool:
        self.child.check()
        try:
            async with session.get(self.health_url + "/readyz") as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False

    async def metrics(self, session: aiohttp.ClientSession) -> dict[str, float]:
        return await scrape(session, self.metrics_url)


def metric_samples(text: str) -> list[Any]:
    """The samples (name, labels, value) of a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


async def samples(session: aiohttp.ClientSession, url: str) -> list[Any]:
    """The samples (name, labels, value) of the text exposition at ``url``/metrics."""
    async with session.get(url + "/metrics") as resp:
        return metric_samples(await resp.text())


async def scrape(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """Sample name with labels -> value, from the text exposition at ``url``/metrics."""
    out: dict[str, float] = {}
    for sample in await samples(session, url):
        labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
        out[f"{sample.name}{{{labels}}}"] = sample.value
    return out


def start_controller(tmp: Path, kubeconfig: str, extra: list[str], tag: str = "controller") -> Controller:
    metrics, health = free_port(), free_port()
    argv = cli(
        "run",
        "--kubeconfig",
        kubeconfig,
        "--no-leader-elect",
        "--metrics-addr",
        f"127.0.0.1:{metrics}",
        "--health-addr",
        f"127.0.0.1:{health}",
        *extra,
    )
    child = Child(tag, argv, tmp / f"{tag}.log")
    return Controller(child, f"http://127.0.0.1:{metrics}", f"http://127.0.0.1:{health}")


@dataclass
class Peer:
    child: Child
    metrics_url: str

    async def progress(self, session: aiohttp.ClientSession) -> tuple[float, float] | None:
        """(watch events handled, reconciles in progress), or None before its metrics are served."""
        self.child.check()
        try:
            async with session.get(self.metrics_url + "/metrics") as resp:
                text = await resp.text()
        except aiohttp.ClientError:
            return None
        values = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith("kopf_peer_"))
        return float(values["kopf_peer_events_handled_total"]), float(values["kopf_peer_reconciles_in_progress"])

    async def settings(self, session: aiohttp.ClientSession) -> dict[str, str]:
        """The events policy and collector thresholds the peer process reports it runs with."""
        for sample in await samples(session, self.metrics_url):
            if sample.name == "kopf_peer_settings_info":
                return dict(sample.labels)
        raise RuntimeError("the kopf peer serves no kopf_peer_settings_info")


def start_peer(tmp: Path, kubeconfig: str, events: str, collector: str) -> Peer:
    port = free_port()
    env = {
        **os.environ,
        "KUBECONFIG": kubeconfig,
        "KOPF_PEER_METRICS_PORT": str(port),
        "KOPF_PEER_EVENTS": events,
        "KOPF_PEER_GC": collector,
    }
    argv = [
        sys.executable,
        "-m",
        "kopf",
        "run",
        "--standalone",
        "--all-namespaces",
        "--quiet",
        str(ROOT / "benchmarks" / "kopf_peer.py"),
    ]
    return Peer(Child("kopf-peer", argv, tmp / "kopf-peer.log", env), f"http://127.0.0.1:{port}")


def reconcile_totals(metrics: dict[str, float]) -> tuple[float, float, float]:
    """(reconciles done, queue depth, active workers) of the TFJob controller."""
    done = sum(v for k, v in metrics.items() if k.startswith("controller_runtime_reconcile_total{"))
    depth = sum(v for k, v in metrics.items() if k.startswith("workqueue_depth{"))
    active = sum(v for k, v in metrics.items() if k.startswith("controller_runtime_active_workers{"))
    return done, depth, active


async def until(what: str, check: Callable[[], Awaitable[Any]], timeout: float, interval: float = POLL) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout:.0f} s: {what}")
        await asyncio.sleep(interval)


async def wait_idle(ctl: Controller, session: aiohttp.ClientSession, at_least: int, timeout: float) -> float:
    """Wait until the controller has reconciled ``at_least`` times and its queue is empty and idle."""

    async def idle() -> bool:
        ctl.child.check()
        done, depth, active = reconcile_totals(await ctl.metrics(session))
        return done >= at_least and depth == 0 and active == 0

    started = time.time()
    # Once a second: a scrape is not free (the job-state collector walks every job and pod; with
    # 10,000 jobs, 4 scrapes/s took a fifth of the controller's CPU), and Prometheus scrapes far
    # less often. The figure's resolution is that second.
    await until("controller idle", idle, timeout, interval=1.0)
    return time.time() - started


async def wait_peer_idle(peer: Peer, session: aiohttp.ClientSession, at_least: int, timeout: float) -> float:
    """Wait until the kopf peer has handled ``at_least`` watch events and has been idle for a poll.

    kopf hands each object's events to the handlers once per object (it batches what arrives
    within its batch window), so after a start on converged jobs ``at_least`` is the number of
    objects: every job, pod and service handled once."""
    last: list[tuple[float, float] | None] = [None]

    async def idle() -> bool:
        now = await peer.progress(session)
        quiet = now is not None and now == last[0] and now[0] >= at_least and now[1] == 0
        last[0] = now
        return quiet

    started = time.time()
    await until(f"kopf peer handled {at_least} events and idle", idle, timeout, interval=1.0)
    return time.time() - started


class Profiles:
    """py-spy on the controller (or peer) and the simulator during a scenario's measured phase; text
    summaries (benchmarks/fold_summary.py) go to docs/benchmarks/profiles/scale-<label>-<process>.txt."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._running: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self, label: str, processes: dict[str, int], tmp: Path) -> None:
        if not self.enabled:
            return
        spy = Path(sys.executable).with_name("py-spy")
        for name, pid in processes.items():
            raw = tmp / f"{label}-{name}.raw"
            proc = subprocess.Popen(
                [
                    str(spy),
                    "record",
                    "--pid",
                    str(pid),
                    "--format",
                    "raw",
                    "-o",
                    str(raw),
                    "--nonblocking",
                    "--rate",
                    "50",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self._running.append((f"{label}-{name}", proc, raw))

    def stop(self, description: str) -> None:
        from fold_summary import summarize as fold

        for name, proc, raw in self._running:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            if raw.exists():
                out = PROFILES / f"scale-{name}.txt"
                out.parent.mkdir(parents=True, exist_ok=True)
                header = (
                    f"py-spy (50 Hz, nonblocking) of the {name.rsplit('-', 1)[1]} process during {description}; "
                    f"git {git_commit()}, {_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC, load {loadavg()}."
                )
                text = fold(raw.read_text(), 30).replace(str(ROOT) + "/", "")
                out.write_text(header + "\n\n" + re.sub(r"\S*site-packages/", "", text))
        self._running = []


# ------------------------------------------------------------------------------------------ jobs


def tfjob(name: str, workers: int, start_seconds: float, namespace: str = NAMESPACE) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "ExitCode",
            "template": {
                "metadata": {"annotations": {"sim.tfjob.dev/start-seconds": f"{start_seconds:g}"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}],
                },
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"enableDynamicWorker": True, "tfReplicaSpecs": {"PS": replica(1), "Worker": replica(workers)}},
    }


def job_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(count)]


def nodes_for(pods: int) -> int:
    return max(3, math.ceil(pods * 1.1 / NODE_PODS))


def owner_uid(obj: dict) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


async def converge_directly(sim: Sim, names: list[str], workers: int, nodes: int, start_seconds: float) -> None:
    """Load ``names`` as converged running jobs straight into the simulator (no controller involved):
    the jobs, the pods and services decide() creates for them (pods pre-bound to nodes round-robin, so
    the simulated scheduler is not the bottleneck), and, once the kubelet runs the pods, the status
    decide() converges to. Checks that the result is a fixed point of decide()."""
    now = _dt.datetime.now(_dt.UTC)
    await sim.bulk(TFJOBS, [tfjob(n, workers, start_seconds) for n in names])
    wanted = set(names)
    jobs = [j for j in await sim.list(TFJOBS_PATH.format(ns=NAMESPACE)) if j["metadata"]["name"] in wanted]
    pods, services = [], []
    node_cycle = itertools.cycle(range(nodes))
    for job in jobs:
        for action in decide(job, [], [], now).actions:
            if isinstance(action, CreatePod):
                pod = orjson.loads(orjson.dumps(action.pod))
                pod["spec"]["nodeName"] = f"sim-node-{next(node_cycle)}"
                pods.append(pod)
            elif isinstance(action, CreateService):
                services.append(action.service)
    await sim.bulk("services", services)
    await sim.bulk("pods", pods)

    async def all_running() -> bool:
        # One pod that is not Running is enough to wait longer (the store's history of 60,000 pods is
        # longer than the simulator retains, so count nothing: ask for a counterexample).
        waiting = await sim.call(
            "GET", PODS_PATH.format(ns=NAMESPACE) + "?limit=1&fieldSelector=status.phase!%3DRunning"
        )
        return not waiting["items"]

    await until(f"{len(pods)} loaded pods Running", all_running, timeout=600, interval=1.0)
    await write_converged_status(sim, wanted)


async def write_converged_status(sim: Sim, wanted: set[str]) -> None:
    jobs = [j for j in await sim.list(TFJOBS_PATH.format(ns=NAMESPACE)) if j["metadata"]["name"] in wanted]
    all_pods = await sim.list(PODS_PATH.format(ns=NAMESPACE))
    all_services = await sim.list(f"/api/v1/namespaces/{NAMESPACE}/services")
    by_owner: dict[str | None, tuple[list, list]] = {}
    for pod in all_pods:
        by_owner.setdefault(owner_uid(pod), ([], []))[0].append(pod)
    for svc in all_services:
        by_owner.setdefault(owner_uid(svc), ([], []))[1].append(svc)
    now = _dt.datetime.now(_dt.UTC)
    updates = []
    for job in jobs:
        pods, services = by_owner.get(job["metadata"]["uid"], ([], []))
        decision = decide(job, pods, services, now)
        if decision.actions:
            raise RuntimeError(f"{job['metadata']['name']}: loaded job is not converged: {decision.actions[:2]}")
        updates.append({**job, "status": decision.status})
    await sim.bulk(TFJOBS, updates, subresource="status")
    # The fixed point: deciding again on what is stored changes nothing (so a controller makes 0 writes).
    jobs = [j for j in await sim.list(TFJOBS_PATH.format(ns=NAMESPACE)) if j["metadata"]["name"] in wanted]
    later = _dt.datetime.now(_dt.UTC)
    for job in jobs:
        pods, services = by_owner.get(job["metadata"]["uid"], ([], []))
        decision = decide(job, pods, services, later)
        if decision.actions or decision.status != job.get("status"):
            raise RuntimeError(f"{job['metadata']['name']}: the loaded status is not a fixed point of decide()")


# ------------------------------------------------------------------------------------------ statistics


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def dist(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": pct(values, 50), "p99": pct(values, 99), "max": max(values, default=float("nan"))}


def agent_totals(by_agent: dict[str, dict[str, int]], prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for agent, counts in by_agent.items():
        if agent.startswith(prefix):
            for key, n in counts.items():
                out[key] = out.get(key, 0) + n
    return out


WRITES = ("create", "update", "patch", "delete", "deletecollection")


def writes_of(counts: dict[str, int]) -> int:
    return sum(n for key, n in counts.items() if key.split(" ", 1)[0] in WRITES)


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------------------------------ pushback

SECURE = "--secure"
CONTROLLER_MANIFESTS = [
    ROOT / "manifests" / "deployment" / "namespace.yaml",
    *(
        ROOT / "manifests" / "rbac" / f"{name}.yaml"
        for name in ("service_account", "cluster_role", "cluster_role_binding")
    ),
]
# Where the benchmark POSTs each kind of object it creates on a secure simulator.
COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}
NEIGHBOUR = "neighbour"  # the second client's ServiceAccount and the ConfigMap it reads, in NAMESPACE
NEIGHBOUR_RATE = 5.0  # its GETs per second
NEIGHBOUR_IDLE = 5.0  # seconds it runs before the measured phase: its latency on an idle server


def admin_credentials(kubeconfig: str) -> tuple[str, Any, str]:
    """(bearer token, TLS context, CA PEM) of a secure simulator's kubeconfig (its cluster admin)."""
    import base64
    import ssl

    doc = yaml.safe_load(Path(kubeconfig).read_text())
    ca = base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]).decode()
    return doc["users"][0]["user"]["token"], ssl.create_default_context(cadata=ca), ca


async def token_for(sim: Sim, namespace: str, name: str) -> str:
    """A token for a ServiceAccount from the TokenRequest API, as a pod's projected token is issued."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}}
    path = COLLECTIONS["ServiceAccount"].format(ns=namespace) + f"/{name}/token"
    return (await sim.call("POST", path, request, ok=(201,)))["status"]["token"]


def write_credentials(tmp: Path, admin_kubeconfig: str, controller_token: str, neighbour_token: str) -> str:
    """The controller's kubeconfig (the admin's with the controller's token instead), and the neighbour's token
    and the CA in ``tmp``; returns the kubeconfig's path."""
    doc = yaml.safe_load(Path(admin_kubeconfig).read_text())
    doc["users"][0]["user"] = {"token": controller_token}
    path = tmp / "controller.kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    (tmp / "neighbour.token").write_text(neighbour_token)
    (tmp / "ca.crt").write_text(admin_credentials(admin_kubeconfig)[2])
    return str(path)


async def as_service_accounts(env: Env) -> None:
    """On a secure simulator: the controller runs as the ServiceAccount of manifests/ with that RBAC (so the
    server's bootstrap FlowSchemas put it where a deployed controller is, ``service-accounts`` at
    ``workload-low``), and a second ServiceAccount, allowed to read the namespace (``view``), is the neighbour
    (another user: another flow of the same priority level). The benchmark itself is the cluster admin
    (``system:masters``: exempt from API Priority and Fairness, so its own requests take no seat)."""
    neighbour = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NEIGHBOUR, "namespace": NAMESPACE}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NEIGHBOUR, "namespace": NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": NEIGHBOUR, "namespace": NAMESPACE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": NEIGHBOUR, "namespace": NAMESPACE}],
        },
    ]
    manifests = [yaml.safe_load(path.read_text()) for path in CONTROLLER_MANIFESTS]
    for body in [*manifests, *neighbour]:
        path = COLLECTIONS[body["kind"]].format(ns=body["metadata"].get("namespace", ""))
        await env.sim.call("POST", path, body, ok=(201,))
    account = next(body["metadata"] for body in manifests if body["kind"] == "ServiceAccount")
    controller_token = await token_for(env.sim, account["namespace"], account["name"])
    env.controller_kubeconfig = write_credentials(
        env.tmp, env.kubeconfig, controller_token, await token_for(env.sim, NAMESPACE, NEIGHBOUR)
    )
    url = env.sim.url + COLLECTIONS["ConfigMap"].format(ns=NAMESPACE) + f"/{NEIGHBOUR}"
    env.neighbour = Neighbour(env.tmp, url)


class Neighbour:
    """A second client (benchmarks/neighbour.py, its own process): GETs one ConfigMap at NEIGHBOUR_RATE/s as
    its own ServiceAccount, from NEIGHBOUR_IDLE seconds before the measured phase to its end."""

    def __init__(self, tmp: Path, url: str) -> None:
        self.tmp, self.url = tmp, url
        self.output = tmp / "neighbour.jsonl"
        self.child: Child | None = None
        self.began: float | None = None  # the measured phase: from here
        self.ended: float | None = None  # to here (settle() sets it)

    async def idle_then_measure(self) -> None:
        self.start()
        await asyncio.sleep(NEIGHBOUR_IDLE)  # the idle window it measures, not a wait for a condition
        assert self.child is not None
        self.child.check()
        self.began = time.time()

    def start(self) -> None:
        argv = [
            sys.executable,
            str(ROOT / "benchmarks" / "neighbour.py"),
            self.url,
            "--token-file",
            str(self.tmp / "neighbour.token"),
            "--ca-file",
            str(self.tmp / "ca.crt"),
            "--output",
            str(self.output),
            "--rate",
            f"{NEIGHBOUR_RATE:g}",
        ]
        self.child = Child("neighbour", argv, self.tmp / "neighbour.log")

    def answers(self) -> list[dict[str, Any]]:
        """Its answers so far (the lines benchmarks/neighbour.py wrote)."""
        if not self.output.exists():
            return []
        return [orjson.loads(line) for line in self.output.read_bytes().splitlines()]

    def figures(self) -> dict[str, Any]:
        """Stops it; :func:`neighbour_windows` of its answers, with its rate and what it read."""
        assert self.child is not None and self.began is not None and self.ended is not None
        self.child.stop()
        return {
            "rate": NEIGHBOUR_RATE,
            "url_path": self.url.split("://", 1)[1].split("/", 1)[1],
            **neighbour_windows(self.answers(), self.began, self.ended),
        }


def neighbour_windows(answers: list[dict[str, Any]], began: float, ended: float) -> dict[str, Any]:
    """The neighbour's latency (answers 200), 429s and other answers (0: no response), by when each
    request was sent: ``idle`` before ``began`` (the measured phase), ``during`` from then to ``ended``
    (later ones are left out); and how long each window is."""
    windows = {"idle": lambda t: t < began, "during": lambda t: began <= t < ended}
    out: dict[str, Any] = {}
    for window, inside in windows.items():
        sent = [a for a in answers if inside(a["t"])]
        out[window] = {
            **dist([a["latency"] for a in sent if a["status"] == 200]),
            "rejected": sum(a["status"] == 429 for a in sent),
            "other": sum(a["status"] not in (200, 429) for a in sent),
            "seconds": (began - min((a["t"] for a in sent), default=began)) if window == "idle" else ended - began,
        }
    return out


async def apf_figures(env: Env) -> dict[str, Any]:
    """What API Priority and Fairness did in a run: the server's rejections (429s) by priority level and
    reason, the controller's 429s as its client counted them and retried them (after Retry-After), the
    jobs' end state, and the neighbour's latency and 429s (on a secure simulator)."""
    rejected = await env.sim.apf_rejections_by_level() if env.apf else None
    client: dict[str, float] = {"seen": 0.0, "retried": 0.0}
    if env.controller:
        names = {"rest_client_requests_total": "seen", "rest_client_request_retries_total": "retried"}
        for sample in await samples(env.session, env.controller.metrics_url):
            if sample.name in names and sample.labels.get("code") == "429":
                client[names[sample.name]] += sample.value
    jobs = await env.sim.list(TFJOBS_PATH.format(ns=NAMESPACE))

    def true(job: dict, kind: str) -> bool:
        return any(
            c.get("type") == kind and c.get("status") == "True"
            for c in (job.get("status") or {}).get("conditions") or []
        )

    return {
        "rejected": rejected,
        "controller_429": client if env.controller else None,
        "jobs_failed": sum(true(job, "Failed") for job in jobs),
        "jobs_running": sum(true(job, "Running") for job in jobs),
        "neighbour": env.neighbour.figures() if env.neighbour and env.neighbour.began else None,
    }


# ------------------------------------------------------------------------------------------ scenarios


@dataclass
class Env:
    """One simulator, optionally one controller, their session, for one scenario run."""

    tmp: Path
    sim_child: Child
    sim: Sim
    kubeconfig: str
    session: aiohttp.ClientSession
    nodes: int
    controller: Controller | None = None
    peer: Peer | None = None
    profiles: Profiles = field(default_factory=lambda: Profiles(False))
    # A secure simulator (--sim-arg=--secure): the controller's own kubeconfig (its ServiceAccount) and the
    # second client that runs beside it during the measured phase.
    controller_kubeconfig: str | None = None
    neighbour: Neighbour | None = None
    apf: bool = True  # the simulator runs API Priority and Fairness

    def profile(self, label: str) -> None:
        self.profiles.start(
            label, {"kopf" if self.peer else "controller": self.actor.pid, "sim": self.sim_child.pid}, self.tmp
        )

    @property
    def actor(self) -> Child:
        child = self.controller.child if self.controller else self.peer.child if self.peer else None
        assert child is not None
        return child

    @property
    def agent(self) -> str:
        return CONTROLLER_AGENT if self.controller else "kopf"


@contextlib.asynccontextmanager
async def environment(nodes: int, profile: bool = False, sim_args: Sequence[str] = (), write_latency: float = 0.0):
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as tmpdir:
        tmp = Path(tmpdir)
        sim_child, url, kubeconfig = await start_sim(tmp, nodes, sim_args)
        secure = admin_credentials(kubeconfig) if SECURE in sim_args else None
        connector = aiohttp.TCPConnector(limit=128, ssl=secure[1] if secure else True)
        session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=600),
            headers={"Authorization": f"Bearer {secure[0]}"} if secure else None,
        )
        env = Env(tmp, sim_child, Sim(url, session), kubeconfig, session, nodes, profiles=Profiles(profile))
        env.apf = "--no-priority-and-fairness" not in sim_args
        try:
            await env.sim.install_crd()
            if secure:
                await as_service_accounts(env)
            if write_latency > 0:
                # Every write holds its API Priority and Fairness seat this long, as an etcd round trip would.
                for verb in WRITES:
                    await env.sim.call("POST", "/_sim/faults", {"verb": verb, "latency": write_latency}, ok=(201,))
            yield env
        finally:
            if env.controller:
                env.controller.child.stop()
            if env.peer:
                env.peer.child.stop()
            if env.neighbour:
                env.neighbour.child.stop()
            await session.close()
            sim_child.stop()


async def start_actor(env: Env, args: argparse.Namespace, peer: bool) -> None:
    if peer:
        env.peer = start_peer(env.tmp, env.kubeconfig, args.peer_events, args.peer_gc)

        # kopf has no readiness endpoint: it is ready once it watches TFJobs.
        async def watching() -> bool:
            env.peer.child.check()
            watches = (await env.sim.call("GET", "/_sim/watches"))["watches"]
            return any(w["resource"] == TFJOBS for w in watches)

        await until("kopf peer watching TFJobs", watching, args.timeout)
    else:
        env.controller = start_controller(env.tmp, env.controller_kubeconfig or env.kubeconfig, args.controller_arg)
        await until("controller ready", lambda: env.controller.ready(env.session), 120, 0.05)


Fold = Callable[[dict], None]


async def settle(
    what: str, env: Env, history: History, fold: dict[str, Fold], done: Callable[[], bool], timeout: float
) -> bool:
    """Feed every change of the history to ``fold`` (by resource, each event once, in commit order)
    until ``done()``; then stop polling and feed it the rest. True = timed out."""
    seen = dict.fromkeys(fold, 0)

    def feed() -> bool:
        for resource, step in fold.items():
            events = history.events[resource]
            for ev in itertools.islice(events, seen[resource], None):
                step(ev)
            seen[resource] = len(events)
        return done()

    async def check() -> bool:
        env.actor.check()
        return feed()

    timed_out = False
    try:
        await until(what, check, timeout)
    except TimeoutError:
        timed_out = True
    if env.neighbour:
        env.neighbour.ended = time.time()
    await history.stop()
    feed()
    return timed_out


async def fan_out(calls: Iterable[Awaitable[Any]], limit: int = 64) -> None:
    """Send the benchmark's own requests (creates, patches) ``limit`` at a time, as a client burst."""
    sem = asyncio.Semaphore(limit)

    async def one(call: Awaitable[Any]) -> None:
        async with sem:
            await call

    await asyncio.gather(*(one(call) for call in calls))


@dataclass
class Phase:
    """Where a scenario's measured phase began: the load, the request mark, both processes' CPU, and
    the history of pods and jobs from there on (polled in the background)."""

    load_before: str
    mark: int
    cpu0: tuple[float, float]
    history: History
    events0: dict[str, tuple[str, int]]


async def begin(env: Env, label: str) -> Phase:
    if env.neighbour:
        await env.neighbour.idle_then_measure()
    load_before = loadavg()
    mark = await env.sim.mark()
    events0 = await tfjob_events(env.sim)
    history = History(env.sim, ["pods", TFJOBS], await env.sim.resource_version())
    history.start()
    phase = Phase(load_before, mark, (env.actor.cpu(), env.sim_child.cpu()), history, events0)
    env.profile(label)
    return phase


async def actor_events_dropped(env: Env) -> float | None:
    """Events the controller's recorder (or the peer's, when it uses one) dropped; None without a recorder."""
    url = env.controller.metrics_url if env.controller else env.peer.metrics_url if env.peer else None
    if url is None:
        return None
    metrics = await scrape(env.session, url)
    dropped = [v for k, v in metrics.items() if k.startswith("events_dropped_total{")]
    return sum(dropped) if dropped else None


async def tfjob_events(sim: Sim) -> dict[str, tuple[str, int]]:
    """Event name -> (the TFJob it is about, its count), for every Event on a TFJob in the store."""
    return {
        ev["metadata"]["name"]: (ev["involvedObject"].get("name", ""), ev.get("count") or 1)
        for ev in await sim.list(f"/api/v1/namespaces/{NAMESPACE}/events")
        if ev.get("involvedObject", {}).get("kind") == "TFJob"
    }


EVENTS_QUIET = 2.0  # seconds without an Event write after which a run's events are counted


async def events_written(env: Env, phase: Phase, timeout: float) -> dict[str, Any]:
    """The Events on TFJobs the controller (or peer) wrote in ``phase``, counted in the simulator's store
    once it has written none for EVENTS_QUIET seconds (a recorder may still hold queued events when
    the last job becomes Running): Event objects created, occurrences they record (count increments),
    jobs that show at least one, and how long after the scenario's end the last one came."""
    started = time.monotonic()
    last: list[Any] = [None, started]

    async def quiet() -> bool:
        env.actor.check()
        counts = agent_totals(await env.sim.requests_by_agent(phase.mark), env.agent)
        written = sum(n for key, n in counts.items() if key.endswith(" events"))
        now = time.monotonic()
        if written != last[0]:
            last[0], last[1] = written, now
        return now - last[1] >= EVENTS_QUIET

    await until(f"no event written for {EVENTS_QUIET:g} s", quiet, timeout, interval=0.5)
    after = await tfjob_events(env.sim)
    before = phase.events0
    new = {name for name in after if name not in before}
    grown = {name for name in after if name in before and after[name][1] > before[name][1]}
    return {
        "written": len(new),
        "occurrences": sum(after[n][1] - (before[n][1] if n in before else 0) for n in new | grown),
        "jobs_with_events": len({after[n][0] for n in new | grown}),
        "last_write_after_s": max(0.0, last[1] - started),
    }


async def actor_figures(env: Env, phase: Phase, timeout: float) -> dict[str, Any]:
    """The controller's (or peer's) events, requests and CPU in ``phase``, apart from the simulator's."""
    mark, cpu0, load_before = phase.mark, phase.cpu0, phase.load_before
    events = await events_written(env, phase, timeout)
    counts = agent_totals(await env.sim.requests_by_agent(mark), env.agent)
    peer = {"peer_settings": await env.peer.settings(env.session)} if env.peer else {}
    return {
        **peer,
        "events": events,
        "requests": sum(counts.values()),
        "writes": writes_of(counts),
        "request_breakdown": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        # 429s of the server's APF since it started (every client's; the actor is the only busy one)
        "apf_rejected": await env.sim.apf_rejections(),
        "apf": await apf_figures(env),
        # Events the controller could not write (recorder queue full, spam filter, API errors)
        "events_dropped": await actor_events_dropped(env),
        "controller_cpu_s": env.actor.cpu() - cpu0[0],
        "sim_cpu_s": env.sim_child.cpu() - cpu0[1],
        "controller_peak_rss_mib": memory_kib(env.actor.pid, "VmHWM") / 1024,
        "load": f"{load_before} -> {loadavg()}",
    }


async def scenario_burst(args: argparse.Namespace, peer: bool = False) -> dict[str, Any]:
    n, workers = args.jobs, args.workers
    per_job = 1 + workers
    async with environment(nodes_for(n * per_job), args.profile, args.sim_arg, args.write_latency) as env:
        await start_actor(env, args, peer)
        phase = await begin(env, f"burst{'-peer' if peer else ''}{getattr(args, 'tag', '')}")
        history = phase.history
        names = job_names("burst", n)
        sent = time.time()
        await fan_out(
            env.sim.call("POST", TFJOBS_PATH.format(ns=NAMESPACE), tfjob(name, workers, args.start_seconds))
            for name in names
        )
        created = time.time()
        pods_seen: dict[str, float] = {}
        running_at: dict[str, float] = {}
        job_created: dict[str, float] = {}

        def pod(ev: dict) -> None:
            if ev["type"] == "ADDED":
                pods_seen.setdefault(ev["name"], ev["time"])

        def job(ev: dict) -> None:
            if ev["type"] == "ADDED":
                job_created.setdefault(ev["name"], ev["time"])
            elif "Running" in (ev.get("true") or ()):
                running_at.setdefault(ev["name"], ev["time"])

        timed_out = await settle(
            "all jobs Running",
            env,
            history,
            {"pods": pod, TFJOBS: job},
            lambda: len(running_at) >= n and len(pods_seen) >= n * per_job,
            args.timeout,
        )
        env.profiles.stop(f"a burst of {n} TFJobs ({per_job} pods each) created at once, until all are Running")
        figures = await actor_figures(env, phase, args.timeout)
        t0 = min(job_created.values())
        result = {
            "scenario": "burst" + (" (kopf peer)" if peer else ""),
            "jobs": n,
            "pods_per_job": per_job,
            "timed_out": timed_out,
            "jobs_created_s": max(job_created.values()) - t0,
            "sim_tfjob_creates_per_s": n / max(1e-9, created - sent),
            "all_pods_s": (max(pods_seen.values()) - t0) if len(pods_seen) >= n * per_job else None,
            "pods_seen": len(pods_seen),
            "all_running_s": (max(running_at.values()) - t0) if len(running_at) >= n else None,
            "running": len(running_at),
            "requests_per_job": figures["requests"] / n,
            **figures,
        }
        return result


DISRUPTIONS = ("delete", "evict")  # the API removes the pod: replaced at once, however often it happens
OWN_FAILURE = "oom"  # the worker's own failure: a repeat waits out the per-index crash-loop back-off
PLAN_SEED = 11


def failover_plan(names: list[str], workers: int, count: int, seed: int = PLAN_SEED) -> list[tuple[str, str]]:
    """``count`` (worker pod, action) pairs: the workers drawn at random WITH replacement over every
    worker of ``names``, so a worker is hit again, sometimes while its last replacement still starts;
    every three actions hold one DELETE, one eviction and one OOM exit, in random order. Seeded: ours
    and the kopf peer get the same plan for the same jobs."""
    rng = random.Random(seed)
    pool = [f"{job}-worker-{i}" for job in names for i in range(workers)]
    plan: list[tuple[str, str]] = []
    while len(plan) < count:
        kinds = [*DISRUPTIONS, OWN_FAILURE]
        rng.shuffle(kinds)
        plan.extend((rng.choice(pool), kind) for kind in kinds)
    return plan[:count]


def action_agent(k: int) -> str:
    """The User-Agent of the plan's ``k``-th action, so the request log tells which action each request was."""
    return f"{BENCH_AGENT}/action-{k}"


async def disrupt(sim: Sim, kind: str, name: str, agent: str) -> None:
    """One action of the plan; a pod already gone (404) or an eviction refused (429) is an answer, not an error."""
    path = PODS_PATH.format(ns=NAMESPACE) + f"/{name}"
    if kind == "delete":
        await sim.call("DELETE", path, ok=(200, 202, 404), agent=agent)
    elif kind == "evict":
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NAMESPACE}}
        await sim.call("POST", path + "/eviction", body, ok=(200, 201, 404, 429), agent=agent)
    else:
        patch = {"metadata": {"annotations": {"sim.tfjob.dev/exit-code": "137", "sim.tfjob.dev/reason": "OOMKilled"}}}
        await sim.call("PATCH", path, patch, ok=(200, 404), content_type="application/merge-patch+json", agent=agent)


@dataclass
class Outcome:
    """What one action of the plan did, from the simulator's clock: the pod (uid) it hit, when that pod
    was gone, when the replacement (a new uid of the same name) was created and when it ran."""

    pod: str
    kind: str
    repeat: bool  # an earlier action of this run was on this worker
    own_repeat: bool  # an OOM exit, and an earlier one of this run was applied to this worker
    arrived: float
    code: int
    uid: str | None = None
    starting: bool = False  # it hit a replacement that was not Running yet
    gone: float | None = None
    created: float | None = None
    running: float | None = None
    superseded: bool = False  # its replacement was removed (by a later action) before it ran

    @property
    def applied(self) -> bool:
        return self.code in (200, 201, 202)

    @property
    def settled(self) -> bool:
        return not self.applied or self.running is not None or self.superseded


def arrivals(plan: list[tuple[str, str]], requests: list[dict[str, Any]]) -> list[tuple[float, int]]:
    """(arrival, answer) of each action: its last request (the one answered after any APF retry)."""
    index = {action_agent(k): k for k in range(len(plan))}
    found: dict[int, tuple[float, int]] = {}
    for record in sorted(requests, key=lambda r: r["seq"]):
        k = index.get(record["userAgent"])
        if k is not None:
            found[k] = (record["time"], record["code"])
    missing = [k for k in range(len(plan)) if k not in found]
    if missing:
        raise RuntimeError(f"the simulator's request log lacks {len(missing)} of the {len(plan)} actions")
    return [found[k] for k in range(len(plan))]


def follow(
    plan: list[tuple[str, str]],
    answered: list[tuple[float, int]],
    initial: dict[str, str],
    events: dict[str, list[dict]],
) -> list[Outcome]:
    """Each action matched to the pod uid it hit (the one of that name the store held when the action
    arrived, ``initial`` being the uids when the plan began), that uid's DELETED, the next ADDED of the
    name (a new uid) after it and that uid's first Running, from ``events`` (the pod history by name, in
    commit order). Pure: the same history always gives the same outcomes."""
    outcomes = []
    seen: set[str] = set()
    failed: set[str] = set()
    for (pod, kind), (arrived, code) in zip(plan, answered, strict=True):
        out = Outcome(pod, kind, pod in seen, kind == OWN_FAILURE and pod in failed, arrived, code)
        seen.add(pod)
        outcomes.append(out)
        if not out.applied:
            continue
        if kind == OWN_FAILURE:
            failed.add(pod)
        history = events.get(pod, [])
        live, ran, i = initial.get(pod), {initial.get(pod)}, 0
        while i < len(history) and history[i]["time"] <= arrived:
            ev = history[i]
            if ev["type"] == "ADDED":
                live = ev["uid"]
            elif ev["type"] == "DELETED" and ev["uid"] == live:
                live = None
            elif ev.get("phase") == "Running":
                ran.add(ev["uid"])
            i += 1
        if live is None:  # answered after the replacement came: the action hit that one
            live = next((ev["uid"] for ev in history[i:] if ev["type"] == "ADDED"), None)
        out.uid, out.starting = live, live not in ran
        replacement = None
        for ev in history[i:]:
            if out.gone is None:
                if ev["type"] == "DELETED" and ev["uid"] == live:
                    out.gone = ev["time"]
            elif out.created is None:
                if ev["type"] == "ADDED" and ev["uid"] != live:
                    out.created, replacement = ev["time"], ev["uid"]
            elif ev["uid"] == replacement:
                if ev["type"] == "DELETED":
                    out.superseded = True
                    break
                if ev.get("phase") == "Running":
                    out.running = ev["time"]
                    break
    return outcomes


# The report's groups of actions: disruptions (any repeat is replaced at once) and, apart, own failures,
# whose repeats wait out the crash-loop back-off by design.
GROUPS_OF_ACTIONS: dict[str, Callable[[Outcome], bool]] = {
    "disruptions": lambda o: o.kind in DISRUPTIONS,
    "disruption_repeats": lambda o: o.kind in DISRUPTIONS and o.repeat,
    "own_first": lambda o: o.kind == OWN_FAILURE and not o.own_repeat,
    "own_repeat": lambda o: o.kind == OWN_FAILURE and o.own_repeat,
    **{kind: (lambda o, kind=kind: o.kind == kind) for kind in (*DISRUPTIONS, OWN_FAILURE)},
}


def failover_figures(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Per group of actions: how many, and what became of them (a 404 skipped, a 429 refused, neither
    in the latencies), then the latencies of the applied ones."""
    figures = {}
    for group, member in GROUPS_OF_ACTIONS.items():
        acts = [o for o in outcomes if member(o)]
        done = [o for o in acts if o.applied]
        figures[group] = {
            "actions": len(acts),
            "applied": len(done),
            "skipped": sum(o.code == 404 for o in acts),
            "refused": sum(o.code == 429 for o in acts),
            "repeats": sum(o.repeat for o in done),
            "on_starting": sum(o.starting for o in done),
            "superseded": sum(o.superseded for o in done),
            "unreplaced": sum(o.created is None for o in done),
            "gone_to_create": dist([o.created - o.gone for o in done if o.created is not None and o.gone is not None]),
            "disruption_to_create": dist([o.created - o.arrived for o in done if o.created is not None]),
            "disruption_to_running": dist([o.running - o.arrived for o in done if o.running is not None]),
        }
    return figures


async def scenario_failover(args: argparse.Namespace, peer: bool = False) -> dict[str, Any]:
    n, workers = args.jobs, args.workers
    per_job = 1 + workers
    nodes = nodes_for(n * per_job)
    async with environment(nodes, args.profile, args.sim_arg, args.write_latency) as env:
        names = job_names("fo", n)
        setup0 = time.time()
        await converge_directly(env.sim, names, workers, nodes, args.start_seconds)
        setup = time.time() - setup0
        started, start_mark = time.time(), await env.sim.mark()
        await start_actor(env, args, peer)
        # Disruptions start once the controller (or the peer) has caught up with the converged jobs:
        # how long that takes is its cold start on this many jobs, reported apart.
        try:
            if env.controller:
                await wait_idle(env.controller, env.session, n, args.catchup_timeout)
            else:
                assert env.peer is not None
                await wait_peer_idle(env.peer, env.session, n * (1 + 2 * per_job), args.catchup_timeout)
        except TimeoutError:
            return {
                "scenario": "failover" + (" (kopf peer)" if peer else ""),
                "jobs": n,
                "setup_s": setup,
                "caught_up_s": None,
                "timed_out": True,
                "controller_cpu_s": env.actor.cpu(),
                "skipped": f"it had not caught up with {n} converged jobs ({n * (1 + 2 * per_job)} objects) "
                f"{args.catchup_timeout:.0f} s after it started",
            }
        caught_up = time.time() - started
        catchup_writes = writes_of(agent_totals(await env.sim.requests_by_agent(start_mark), env.agent))
        phase = await begin(env, f"failover{'-peer' if peer else ''}{getattr(args, 'tag', '')}")
        history = phase.history
        plan = failover_plan(names, workers, int(args.rate * args.duration))
        targets = {pod for pod, _ in plan}
        initial = {
            p["metadata"]["name"]: p["metadata"]["uid"]
            for p in await env.sim.list(PODS_PATH.format(ns=NAMESPACE))
            if p["metadata"]["name"] in targets
        }
        tasks = []
        start = time.monotonic()
        for k, (pod, kind) in enumerate(plan):
            delay = start + k / args.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(disrupt(env.sim, kind, pod, action_agent(k))))
        await asyncio.gather(*tasks)
        answered = arrivals(plan, await env.sim.requests(phase.mark))
        events: dict[str, list[dict]] = {}
        failed: set[str] = set()
        outcomes: list[Outcome] = []

        def pod(ev: dict) -> None:
            if ev["name"] in targets:
                events.setdefault(ev["name"], []).append(ev)

        def job(ev: dict) -> None:
            if "Failed" in (ev.get("true") or ()):
                failed.add(ev["name"])

        def settled() -> bool:
            outcomes[:] = follow(plan, answered, initial, events)
            return all(o.settled for o in outcomes)

        timed_out = await settle(
            "every replacement of a disrupted worker Running",
            env,
            history,
            {"pods": pod, TFJOBS: job},
            settled,
            args.timeout,
        )
        env.profiles.stop(
            f"{len(plan)} actions on random workers (repeats included) at {args.rate:g}/s across {n} running "
            "jobs, until every replacement runs"
        )
        figures = await actor_figures(env, phase, args.timeout)
        return {
            "scenario": "failover" + (" (kopf peer)" if peer else ""),
            "jobs": n,
            "actions": len(plan),
            "workers_hit": len(targets),
            "rate": args.rate,
            "duration": args.duration,
            "plan_seed": PLAN_SEED,
            "setup_s": setup,
            "caught_up_s": caught_up,
            "catchup_writes": catchup_writes,
            "timed_out": timed_out,
            "unsettled": sum(not o.settled for o in outcomes),
            "jobs_failed": len(failed),
            "latency": failover_figures(outcomes),
            **figures,
        }


async def scenario_scaledown(args: argparse.Namespace) -> dict[str, Any]:
    n, before, after = args.jobs, 8, 2
    nodes = nodes_for(n * (1 + before))
    async with environment(nodes, args.profile, args.sim_arg, args.write_latency) as env:
        names = job_names("sd", n)
        await converge_directly(env.sim, names, before, nodes, args.start_seconds)
        await start_actor(env, args, False)
        assert env.controller is not None
        await wait_idle(env.controller, env.session, n, args.timeout)
        phase = await begin(env, "scaledown")
        history = phase.history
        excess = {f"{job}-worker-{i}" for job in names for i in range(after, before)}
        patch = {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": after}}}}
        await fan_out(
            env.sim.call(
                "PATCH",
                TFJOBS_PATH.format(ns=NAMESPACE) + f"/{name}",
                patch,
                content_type="application/merge-patch+json",
            )
            for name in names
        )
        gone: dict[str, float] = {}
        scaled: dict[str, float] = {}

        def pod(ev: dict) -> None:
            if ev["type"] == "DELETED" and ev["name"] in excess:
                gone.setdefault(ev["name"], ev["time"])

        def job(ev: dict) -> None:
            if ev["type"] == "MODIFIED":
                scaled.setdefault(ev["name"], ev["time"])

        timed_out = await settle(
            "all excess workers gone",
            env,
            history,
            {"pods": pod, TFJOBS: job},
            lambda: len(gone) >= len(excess),
            args.timeout,
        )
        env.profiles.stop(f"{n} jobs scaling Worker {before} -> {after} at once, until every excess pod is gone")
        idle = await wait_idle(env.controller, env.session, 0, args.timeout)
        figures = await actor_figures(env, phase, args.timeout)
        t0 = min(scaled.values())
        return {
            "scenario": "scaledown",
            "jobs": n,
            "from_to": f"{before} -> {after}",
            "timed_out": timed_out,
            "excess_pods": len(excess),
            "gone": len(gone),
            "all_gone_s": (max(gone.values()) - t0) if len(gone) >= len(excess) else None,
            "idle_after_s": idle,
            "requests_per_job": figures["requests"] / n,
            **figures,
        }


async def scenario_coldstart(args: argparse.Namespace) -> dict[str, Any]:
    n, workers = args.cold_jobs, 5
    nodes = nodes_for(n * (1 + workers))
    async with environment(nodes, args.profile, args.sim_arg, args.write_latency) as env:
        names = job_names("cold", n)
        setup0 = time.time()
        await converge_directly(env.sim, names, workers, nodes, args.start_seconds)
        setup = time.time() - setup0
        # The simulator holding N running pods with no client: what its kubelet loop and watch hub cost
        # on their own (it must not be what slows the controller's figures).
        idle0, idle_t0 = env.sim_child.cpu(), time.monotonic()
        await asyncio.sleep(5)
        sim_idle_cpu = (env.sim_child.cpu() - idle0) / (time.monotonic() - idle_t0)
        load_before = loadavg()
        mark = await env.sim.mark()
        sim_cpu0 = env.sim_child.cpu()
        env.controller = ctl = start_controller(env.tmp, env.kubeconfig, args.controller_arg)
        env.profile("coldstart")
        await until("controller ready", lambda: ctl.ready(env.session), args.timeout, 0.05)
        ready_s = time.time() - ctl.child.started
        timed_out = False
        try:
            await wait_idle(ctl, env.session, n, args.timeout)
        except TimeoutError:
            timed_out = True
        reconciled_s = time.time() - ctl.child.started
        env.profiles.stop(f"a cold start on {n} converged jobs ({n * (1 + workers)} pods), until all are reconciled")
        counts = agent_totals(await env.sim.requests_by_agent(mark), env.agent)
        return {
            "scenario": "coldstart",
            "jobs": n,
            "pods": n * (1 + workers),
            "setup_s": setup,
            "timed_out": timed_out,
            "ready_s": ready_s,
            "all_reconciled_s": reconciled_s,
            "writes": writes_of(counts),
            "request_breakdown": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
            "controller_cpu_s": ctl.child.cpu(),
            "sim_cpu_s": env.sim_child.cpu() - sim_cpu0,
            "sim_idle_cpu_pct": 100 * sim_idle_cpu,
            "sim_rss_mib": memory_kib(env.sim_child.pid, "VmRSS") / 1024,
            "controller_peak_rss_mib": memory_kib(ctl.child.pid, "VmHWM") / 1024,
            "load": f"{load_before} -> {loadavg()}",
        }


# ------------------------------------------------------------------------------------------ report


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return f"{os.cpu_count()} CPUs ({model}), {mem} RAM, Python {platform.python_version()}, {platform.platform()}"


# Explicitly no client-side limit, whether or not the server runs API Priority and Fairness.
UNLIMITED = ["--kube-api-qps=0"]


def controller_supports(flag: str) -> bool:
    out = subprocess.run(cli("run", "--help"), capture_output=True, text=True, check=False).stdout
    return flag in out


async def scenario_burst_unlimited(args: argparse.Namespace) -> dict[str, Any]:
    """The burst with the controller's client-side rate limit out of the way: the next bound."""
    if not controller_supports("--kube-api-qps"):
        return {"scenario": "burst, client rate limit off", "skipped": "this build has no --kube-api-qps flag"}
    unlimited = argparse.Namespace(
        **{**vars(args), "controller_arg": [*args.controller_arg, *UNLIMITED], "tag": "-unlimited"}
    )
    result = await scenario_burst(unlimited)
    result["scenario"] = "burst, client rate limit off"
    return result


async def scenario_peer_check(args: argparse.Namespace) -> dict[str, Any]:
    """The kopf peer at a scale where every figure is exact, so that a broken peer fails the run loudly
    instead of measuring as slow: a burst must create each pod and service exactly once and reach
    Running; a start on converged jobs must write nothing; one failover of each kind must be replaced
    and run again with no job Failed."""
    small = argparse.Namespace(
        **{
            **vars(args),
            "jobs": 5,
            "rate": 3.0,
            "duration": 1.0,
            "profile": False,
            "timeout": 120.0,
            "catchup_timeout": 120.0,
        }
    )
    burst = await scenario_burst(small, peer=True)
    failover = await scenario_failover(small, peer=True)
    objects = small.jobs * (1 + small.workers)
    problems = []
    if burst["timed_out"] or burst["running"] != small.jobs:
        problems.append(f"burst: {burst['running']} of {small.jobs} jobs Running")
    for kind in ("pods", "services"):
        if burst["request_breakdown"].get(f"create {kind}") != objects:
            problems.append(
                f"burst: {burst['request_breakdown'].get(f'create {kind}')} {kind} creates for {objects} {kind}"
            )
    if failover.get("skipped"):
        problems.append(f"failover: {failover['skipped']}")
    else:
        if failover["catchup_writes"]:
            problems.append(f"start on converged jobs: {failover['catchup_writes']} writes")
        every = failover["latency"]["disruptions"], failover["latency"]["oom"]
        if failover["timed_out"] or failover["unsettled"] or any(g["unreplaced"] for g in every):
            problems.append(
                f"failover: {failover['unsettled']} of {failover['actions']} actions without a replacement Running"
            )
        if failover["jobs_failed"]:
            problems.append(f"failover: {failover['jobs_failed']} jobs Failed")
    if problems:
        raise RuntimeError("the kopf peer is broken: " + "; ".join(problems))
    return {
        "scenario": "kopf peer self-check",
        "jobs": small.jobs,
        "passed": True,
        "burst_requests_per_job": burst["requests_per_job"],
        "disruptions": failover["actions"],
        "failover_requests": failover["requests"],
    }


# Limits small enough that the server pushes back at the default sizes (1,000 jobs; 20 disruptions/s), with
# every write holding its seat APF_WRITE_LATENCY (10 ms). The controller's priority level is workload-low
# (100 of the 245 shares of the server's seats, rounded up).
# - burst: 4 + 2 = 6 server seats, 3 for the level (~300 writes/s); the burst's ~12,000 writes come as fast
#   as the controller sends them and queue; a request waits at most a quarter of --request-timeout (0.1 s)
#   in its queue before its 429.
# - failover: 2 + 1 = 3 server seats, 2 for the level (~200 writes/s): the ~120 writes/s of the failovers
#   fit, but the writes that follow each disruption come together and queue beyond 25 ms (still longer than
#   one write, so a flow that waits its turn gets a seat within it). A queue limit shorter than a write (5 ms)
#   refuses the neighbour too, and the burst against it collapses: its 429s raise the server's Retry-After to
#   32 s and the controller waits most of the time.
APF_LIMITS = {
    "burst": ["--max-requests-inflight=4", "--max-mutating-requests-inflight=2", "--request-timeout=0.4"],
    "failover": ["--max-requests-inflight=2", "--max-mutating-requests-inflight=1", "--request-timeout=0.1"],
}
APF_WRITE_LATENCY = 0.01


def pushing_back(args: argparse.Namespace, limits: str | None, tag: str) -> argparse.Namespace:
    """``args`` for a scenario against a secure simulator (the controller as its ServiceAccount, beside the
    neighbour) with writes that hold their seat --apf-write-latency, and the server limits of ``limits``
    (a key of APF_LIMITS, as --apf-burst-sim-arg / --apf-failover-sim-arg set them; None: the defaults)."""
    tight = getattr(args, f"apf_{limits}_sim_arg") if limits else []
    sim_args = [*args.sim_arg, SECURE, *tight]
    return argparse.Namespace(
        **{**vars(args), "sim_arg": sim_args, "write_latency": args.apf_write_latency, "tag": tag}
    )


@dataclass(frozen=True)
class Scenario:
    label: str
    run: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]]
    repeated: bool = False  # run --runs times (the median is reported)


# In the order `all` runs them: each peer scenario beside ours, their runs alternating (ours, the peer's,
# ours, ...), so that a ratio compares runs minutes apart and a change in the machine's load falls on
# both; the peer's self-check first, so a broken peer stops the run before an hour is spent.
SCENARIOS: dict[str, Scenario] = {
    "peer-check": Scenario("kopf peer self-check", scenario_peer_check),
    "burst": Scenario("burst", scenario_burst, repeated=True),
    "burst-peer": Scenario("burst (kopf peer)", lambda a: scenario_burst(a, peer=True), repeated=True),
    "failover": Scenario("failover", scenario_failover),
    # The peer's failover at --peer-jobs, and ours at the same scale right before it: at 1,000 jobs
    # kopf's index pre-population alone takes longer than the rest of the run (see kopf_peer.py).
    "failover-small": Scenario(
        "failover, at the peer's scale", lambda a: scenario_failover(at_peer_scale(a)), repeated=True
    ),
    "failover-peer": Scenario(
        "failover (kopf peer)", lambda a: scenario_failover(at_peer_scale(a), peer=True), repeated=True
    ),
    "burst-unlimited": Scenario("burst, client rate limit off", scenario_burst_unlimited),
    "scaledown": Scenario("scaledown", scenario_scaledown),
    "coldstart": Scenario("coldstart", scenario_coldstart),
    # Against a server that pushes back, with a second client beside the controller: the same neighbour at
    # the default limits first, then at limits small enough for 429s (APF_LIMITS).
    "burst-neighbour": Scenario(
        "burst, beside a neighbour", lambda a: scenario_burst(pushing_back(a, None, "-neighbour"))
    ),
    "burst-apf": Scenario("burst, API server pushing back", lambda a: scenario_burst(pushing_back(a, "burst", "-apf"))),
    "failover-apf": Scenario(
        "failover, API server pushing back", lambda a: scenario_failover(pushing_back(a, "failover", "-apf"))
    ),
}
GROUPS = {"all": list(SCENARIOS), "peer": ["peer-check", "burst-peer", "failover-small", "failover-peer"], "report": []}


def at_peer_scale(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` for the failover at the peer's scale (its profiles are named after that scale)."""
    return argparse.Namespace(**{**vars(args), "jobs": args.peer_jobs, "tag": f"-{args.peer_jobs}"})


def schedule(names: list[str], runs: int) -> list[tuple[str, int, int]]:
    """(scenario, run number, of how many) in the order to run them: a pair's runs alternate."""
    by_label = {SCENARIOS[name].label: name for name in names}
    partner = {by_label[a]: by_label[b] for a, b in PAIRS.items() if a in by_label and b in by_label}
    order: list[tuple[str, int, int]] = []
    for name in names:
        if name in partner.values():
            continue  # runs beside its partner
        n = runs if SCENARIOS[name].repeated else 1
        for i in range(n):
            order.append((name, i + 1, n))
            if name in partner:
                order.append((partner[name], i + 1, n))
    return order


async def run_all(args: argparse.Namespace) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {}
    for name, i, n in schedule(GROUPS.get(args.scenario, [args.scenario]), args.runs):
        scenario = SCENARIOS[name]
        print(f"== {scenario.label} run {i}/{n} (load {loadavg()})", flush=True)
        started = time.time()
        result = {**await scenario.run(args), "scenario": scenario.label}
        result["pod_start_seconds"] = args.start_seconds
        result["at"] = f"{_dt.datetime.now(_dt.UTC):%Y-%m-%d %H:%M} UTC"
        result["git"] = git_commit()
        result["wall_s"] = time.time() - started
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode(), flush=True)
        results.setdefault(scenario.label, []).append(result)
    return results


def recorder_settings() -> dict[str, Any]:
    """The event recorder's settings as the controller constructs it (its defaults: the controller
    passes none), read from the class so that the report states what the code does."""
    parameters = inspect.signature(EventRecorder).parameters.values()
    return {
        p.name: p.default
        for p in parameters
        if p.kind is p.KEYWORD_ONLY and isinstance(p.default, int | float) and not isinstance(p.default, bool)
    }


def command_line(argv: list[str]) -> str:
    """The command as run, with this checkout's path left out (the report is read on other machines)."""
    root = str(ROOT) + "/"
    return " ".join(arg.replace(root, "") for arg in argv)


def write_raw(
    directory: Path, args: argparse.Namespace, results: dict[str, list[dict]], started: _dt.datetime, load_start: str
) -> Path:
    """The raw results of this command, with what the report says of it: commit, command, load, settings."""
    ended = _dt.datetime.now(_dt.UTC)
    raw = {
        "format": FORMAT,
        "command": command_line(["benchmarks/scale.py", *sys.argv[1:]]),
        "git": git_commit(),
        "started": f"{started:%Y-%m-%d %H:%M} UTC",
        "ended": f"{ended:%Y-%m-%d %H:%M} UTC",
        "load_start": load_start,
        "load_end": loadavg(),
        "machine": machine(),
        "settings": {
            "runs": args.runs,
            "jobs": args.jobs,
            "workers": args.workers,
            "peer_jobs": args.peer_jobs,
            "cold_jobs": args.cold_jobs,
            "rate": args.rate,
            "duration": args.duration,
            "start_seconds": args.start_seconds,
            "write_latency": args.write_latency,
            "controller_args": args.controller_arg,
            "sim_args": args.sim_arg,
            "apf": {
                "burst_sim_args": args.apf_burst_sim_arg,
                "failover_sim_args": args.apf_failover_sim_arg,
                "write_latency": args.apf_write_latency,
                "neighbour_rate": NEIGHBOUR_RATE,
                "neighbour_idle_s": NEIGHBOUR_IDLE,
            },
            "events": {"ours": recorder_settings(), "peer": args.peer_events},
            "collector": {"ours": list(COLLECTOR_THRESHOLDS), "peer": args.peer_gc},
        },
        "results": results,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"scale-{started:%Y-%m-%d-%H%M}.json"
    path.write_bytes(orjson.dumps(raw, option=orjson.OPT_INDENT_2) + b"\n")
    return path


def write_report(raw_path: Path, output: Path) -> None:
    raw = orjson.loads(raw_path.read_bytes())
    link = os.path.relpath(raw_path.resolve(), output.resolve().parent)
    output.write_text(render(raw, link))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "scenario",
        choices=(*SCENARIOS, *GROUPS),
        help="'report' runs nothing: it rewrites the report from the raw results --raw names",
    )
    parser.add_argument("--jobs", type=int, default=1000, help="jobs in burst/failover/scaledown (default 1000)")
    parser.add_argument("--workers", type=int, default=4, help="dynamic workers per job (default 4)")
    parser.add_argument("--cold-jobs", type=int, default=10_000, help="jobs in coldstart (default 10000)")
    parser.add_argument("--rate", type=float, default=20.0, help="failover: disruptions per second")
    parser.add_argument("--duration", type=float, default=60.0, help="failover: seconds of disruptions")
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="runs per side of the scenarios run beside the kopf peer (burst, failover at --peer-jobs), "
        "alternating; the median is reported (default 3)",
    )
    parser.add_argument(
        "--start-seconds",
        type=float,
        default=0.0,
        help="seconds the simulated kubelet takes to start a pod's container (the pod template's "
        "sim.tfjob.dev/start-seconds; default 0: the controller's work, not the pods', is measured)",
    )
    parser.add_argument(
        "--peer-events",
        choices=("recorder", "kopf"),
        default="recorder",
        help="how the kopf peer writes events: 'recorder' (default) through the controller's own recorder, "
        "the same policy as ours; 'kopf': every event through kopf.event, as a kopf operator does",
    )
    parser.add_argument(
        "--peer-gc",
        choices=("tuned", "default"),
        default="tuned",
        help="the kopf peer's garbage-collector thresholds: 'tuned' (default) as the controller's, "
        "'default': CPython's",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a scenario may take to converge")
    parser.add_argument(
        "--peer-jobs",
        type=int,
        default=300,
        help="jobs in the kopf peer's failover and ours beside it (default 300: the peer catches up "
        "with them in about a minute)",
    )
    parser.add_argument(
        "--catchup-timeout",
        type=float,
        default=1800.0,
        help="failover: seconds the kopf peer may take to catch up with the converged jobs before "
        "the disruptions start (its index pre-population grows with the square of the objects)",
    )
    parser.add_argument(
        "--controller-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `tfjob-controller run` (repeatable), e.g. --controller-arg=--workers=8",
    )
    parser.add_argument(
        "--sim-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra argument for `tfjob-controller sim` (repeatable), e.g. "
        "--sim-arg=--no-priority-and-fairness: a server without APF, where the controller's "
        "default keeps its fallback bucket",
    )
    parser.add_argument(
        "--write-latency",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="every write to the simulator takes this long inside the server (holding its API Priority and "
        "Fairness seat, as an etcd round trip does); with small --sim-arg=--max-requests-inflight=N limits "
        "the server pushes back with 429s (reported as apf_rejected)",
    )
    for kind in APF_LIMITS:
        parser.add_argument(
            f"--apf-{kind}-sim-arg",
            action="append",
            default=None,
            metavar="ARG",
            help=f"{kind}-apf: the simulator's limits (repeatable; default {' '.join(APF_LIMITS[kind])}); "
            "burst-neighbour runs at the defaults",
        )
    parser.add_argument(
        "--apf-write-latency",
        type=float,
        default=APF_WRITE_LATENCY,
        metavar="SECONDS",
        help=f"burst-neighbour, burst-apf, failover-apf: --write-latency (default {APF_WRITE_LATENCY:g})",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the controller and the simulator; summaries to docs/benchmarks/profiles/",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="the markdown report (default docs/benchmarks/scale.md for 'all' and 'report'); the raw results "
        "go to raw/scale-<time>.json beside it",
    )
    parser.add_argument("--raw", default=None, metavar="FILE", help="report: the raw results to write it from")
    args = parser.parse_args()
    for name in ("runs", "jobs", "workers", "cold_jobs", "peer_jobs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.start_seconds < 0:
        parser.error("--start-seconds must not be negative")
    if args.apf_write_latency < 0:
        parser.error("--apf-write-latency must not be negative")
    for kind, limits in APF_LIMITS.items():
        if getattr(args, f"apf_{kind}_sim_arg") is None:
            setattr(args, f"apf_{kind}_sim_arg", limits)
    if args.profile and not Path(sys.executable).with_name("py-spy").exists():
        parser.error(f"--profile needs py-spy beside {sys.executable} (pip install py-spy)")
    output = Path(args.output) if args.output else REPORT if args.scenario in ("all", "report") else None
    if args.scenario == "report":
        if not args.raw:
            parser.error("report needs --raw FILE (the raw results a run wrote)")
        assert output is not None
        try:
            write_report(Path(args.raw), output)
        except (OSError, ValueError) as exc:  # unreadable, not JSON, or a figure missing (MissingFigure)
            print(f"scale.py report: {args.raw}: {exc}", file=sys.stderr)
            return 1
        print(f"wrote {output}")
        return 0
    started, load_start = _dt.datetime.now(_dt.UTC), loadavg()
    results = asyncio.run(run_all(args))
    if output:
        raw_path = write_raw(output.parent / "raw", args, results, started, load_start)
        write_report(raw_path, output)
        print(f"wrote {raw_path} and {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
