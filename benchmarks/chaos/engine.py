"""The seeded chaos soak: two leader-elected ``tfjob-controller run`` processes against one
``tfjob-controller sim`` process, every fault the simulator can inject, invariants checked throughout.

Why separate processes: that is how users run the controller, and it is the only way to SIGKILL a
leader for real. The soak talks to the simulator only over HTTP (the Kubernetes API and the
simulator's ``/_sim/`` fault API), with its own User-Agent; API faults (429/500/503, latency, dropped
connections) are aimed at the controllers' User-Agent, so the observer keeps seeing the truth.

Phases: start the simulator, install the CRD, start controllers ``a`` and ``b``, create a population of
jobs (shape after shape, in a seeded order); then, for ``fault_seconds``, a driver performs the steps of
:func:`schedule` (faults, pod disruptions, scaling through the spec and ``/scale``, job deletion, a lost
create) while the population is kept up and the leader is SIGKILLed at fixed fractions of the phase, and
an observer LISTs jobs, pods and services every ``observe_interval`` and feeds
:class:`~benchmarks.chaos.invariants.InvariantChecker`. Then every fault is lifted; the cluster must converge
within ``Bounds.converge_seconds``, stay write-free for ``Bounds.quiet_seconds``, and lose every child
within ``Bounds.orphan_seconds`` once all jobs are deleted. Logs, exits and RSS samples are judged last.

Coverage by construction, whatever the machine's speed. How many steps fit in ``fault_seconds`` depends on
the machine; which kinds occur must not. So:

* The schedule is a pure function of the seed: it opens with every kind of ``ACTION_WEIGHTS`` once, in a
  seeded order, then draws kinds by weight. Each step carries the seed of its own RNG (its parameters, its
  pick among the objects listed when it runs) and the pause after it, so no timing moves another step's
  draws.
* Every opening step is performed. No kind can still be active when its opening step comes (it is the
  kind's first step). A step that needs a target (a live pod, a dynamic job, a new worker pod showing up)
  and finds none, or whose target vanished before the request, tries again on the next snapshot for up
  to ``target_wait_seconds``; past that the soak stops with a :class:`SoakError` naming the step, so a
  kind is never silently missing. The fault phase lasts until the opening is done if that takes longer
  than ``fault_seconds`` (on any machine that runs the soak at all it takes well under a minute), and
  until the leader kills are done, bounded the same way.
* Timed faults (``TIMED_KINDS``) hold at most one episode per kind: a step of a kind whose episode is
  still running lifts that episode and starts its own. No step is dropped for a busy kind, and a kind
  never overlaps itself (one kubelet pause, one GC pause, one delay rule per kind at a time).
* After the opening, a step with nothing to act on is dropped: the opening already covered its kind.

The controllers' timing is real, so two runs with one seed perform the same opening and start the same
steps in the same order, but how many steps fit and what the cluster holds when each runs differ.

Entry points: :func:`run_soak` (``SoakConfig`` -> ``SoakResult``) and :func:`render_markdown`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import itertools
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import yaml

from benchmarks.chaos.invariants import (
    INVARIANTS,
    Bounds,
    InvariantChecker,
    Violation,
    finished,
    is_dynamic,
    live,
    slot,
)
from tfjob_sim.kubelet import EVICT, EXIT_CODE, REASON, RUN_SECONDS

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"
CONTROLLER_AGENT = "tfjob-controller/"
OBSERVER_AGENT = "tfjob-soak/1"
NAMESPACE = "default"
TFJOBS = f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/tfjobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
SERVICES = f"/api/v1/namespaces/{NAMESPACE}/services"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/tfjob-controller"
API_RESOURCES = (
    "*",
    "pods",
    "services",
    "tfjobs.kubeflow.org",
    "tfjobs.kubeflow.org/status",
    "events",
    "leases.coordination.k8s.io",
)
WATCHED = ("pods", "services", "tfjobs.kubeflow.org")
RSS_WARM_UP_SECONDS = 10.0


@dataclass(frozen=True)
class Shape:
    """A kind of job the soak keeps alive: replica types (replicas, restartPolicy), policies."""

    name: str
    dynamic: bool
    types: dict[str, tuple[int, str]]
    success_policy: str | None = None
    run_seconds: int | None = None  # simulated seconds until the containers exit 0 (a finishing job)
    clean_pod_policy: str | None = None
    ttl: int | None = None


SHAPES = (
    Shape("dyn", True, {"Worker": (3, "OnFailure")}),
    Shape("dynps", True, {"Chief": (1, "OnFailure"), "PS": (1, "Always"), "Worker": (2, "Never")}),
    Shape("dynexit", True, {"Worker": (2, "ExitCode"), "Evaluator": (1, "OnFailure")}, success_policy="AllWorkers"),
    Shape("dynfin", True, {"Worker": (2, "OnFailure")}, run_seconds=900, clean_pod_policy="All", ttl=8),
    Shape("static", False, {"PS": (1, "OnFailure"), "Worker": (2, "OnFailure")}),
    Shape(
        "staticnever",
        False,
        {"Worker": (2, "Never")},
        success_policy="AllWorkers",
        run_seconds=700,
        clean_pod_policy="Running",
    ),
    Shape("staticexit", False, {"Chief": (1, "ExitCode"), "Worker": (1, "ExitCode")}),
    Shape("staticalways", False, {"Worker": (2, "Always"), "Evaluator": (1, "Always")}),
)


def manifest(shape: Shape, name: str) -> dict[str, Any]:
    annotations = {RUN_SECONDS: str(shape.run_seconds), EXIT_CODE: "0"} if shape.run_seconds else {}
    specs = {
        replica_type: {
            "replicas": replicas,
            "restartPolicy": policy,
            "template": {
                "metadata": {"annotations": dict(annotations)},
                "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]},
            },
        }
        for replica_type, (replicas, policy) in shape.types.items()
    }
    spec: dict[str, Any] = {"tfReplicaSpecs": specs, "enableDynamicWorker": shape.dynamic}
    run_policy: dict[str, Any] = {}
    if shape.clean_pod_policy:
        run_policy["cleanPodPolicy"] = shape.clean_pod_policy
    if shape.ttl is not None:
        run_policy["ttlSecondsAfterFinished"] = shape.ttl
    if run_policy:
        spec["runPolicy"] = run_policy
    if shape.success_policy is not None:
        spec["successPolicy"] = shape.success_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


@dataclass
class SoakConfig:
    seed: int
    fault_seconds: float
    workdir: Path
    jobs: int = 10
    nodes: int = 6
    time_scale: float = 0.05
    leader_kills: int = 1
    bounds: Bounds = field(default_factory=Bounds)
    observe_interval: float = 0.5
    rss_interval: float = 2.0
    mean_action_interval: float = 0.8
    max_worker_replicas: int = 5
    failover_backoff: tuple[float, float] = (1.0, 8.0)
    controller_workers: int = 4
    # How long an opening step may wait for something to act on, and the phase for its leader kills.
    target_wait_seconds: float = 60.0
    # Replaces the controller command (after the interpreter) for the end-to-end proof that a broken
    # controller fails the soak; None runs ``-m controller``.
    controller_command: list[str] | None = None
    progress: Callable[[str], None] = lambda _line: None


@dataclass
class SoakResult:
    seed: int
    started: str
    duration: float = 0.0
    fault_seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    opening: list[str] = field(default_factory=list)  # the kinds of the opening steps, as performed
    checks: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    rss: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    observations: int = 0
    converged_after: float | None = None
    slowest_scale_down: float = 0.0
    outcomes: Counter[str] = field(default_factory=Counter)
    error: str | None = None
    workdir: str = ""

    @property
    def passed(self) -> bool:
        return not self.violations and self.error is None

    def summary(self) -> str:
        head = (
            f"soak seed={self.seed}: {'PASSED' if self.passed else 'FAILED'} in {self.duration:.0f}s "
            f"({self.fault_seconds:.0f}s of faults, {sum(self.faults.values())} actions, "
            f"{sum(self.checks.values())} checks, {self.observations} observations)"
        )
        lines = [head]
        if self.error:
            lines.append(f"error: {self.error}")
        lines.extend(str(v) for v in self.violations[:30])
        if len(self.violations) > 30:
            lines.append(f"... {len(self.violations)} violations in all")
        lines.append(f"rerun: benchmarks/soak.py --seed {self.seed} (logs in {self.workdir})")
        return "\n".join(lines)


# --- the schedule ------------------------------------------------------------------------------------
# Every kind of action the driver takes, with its weight in the draws after the opening.
ACTION_WEIGHTS = {
    "api-error": 4,
    "latency": 2,
    "dropped-connections": 1,
    "watch-close": 2,
    "watch-stall": 2,
    "watch-delay": 1,
    "compaction": 1,
    "apiserver-restart": 1,
    "kubelet-pause": 1,
    "gc-pause": 1,
    "node-not-ready": 1,
    "worker-delete": 3,
    "eviction": 2,
    "oom": 2,
    "error-exit": 2,
    "scale-spec": 3,
    "scale-subresource": 2,
    "job-delete": 1,
    "lost-create-relist": 1,
}
# The kinds that are episodes (a fault set now, lifted a few seconds later), at most one per kind at a time.
TIMED_KINDS = frozenset(
    {
        "api-error",
        "latency",
        "dropped-connections",
        "watch-stall",
        "watch-delay",
        "kubelet-pause",
        "gc-pause",
        "node-not-ready",
    }
)
MAX_PAUSE_SECONDS = 5.0


@dataclass(frozen=True)
class Step:
    """One scheduled action: its kind, the seed of its own RNG (its parameters and its pick among the
    objects listed when it runs), the pause after it, and whether it belongs to the opening."""

    index: int
    kind: str
    seed: int
    pause: float
    opening: bool


def schedule(seed: int, mean_interval: float) -> Iterator[Step]:
    """The driver's steps for ``seed``, endless: the opening (every kind of ``ACTION_WEIGHTS`` once, in a
    seeded order), then weighted draws. A pure function of its arguments: no clock, no cluster state."""
    rng = random.Random(f"soak-schedule-{seed}")
    opening = sorted(ACTION_WEIGHTS)
    rng.shuffle(opening)
    kinds, weights = list(ACTION_WEIGHTS), list(ACTION_WEIGHTS.values())
    for index in itertools.count():
        is_opening = index < len(opening)
        kind = opening[index] if is_opening else rng.choices(kinds, weights=weights)[0]
        pause = min(rng.expovariate(1 / mean_interval), MAX_PAUSE_SECONDS)
        yield Step(index, kind, rng.getrandbits(64), pause, is_opening)


class SoakError(Exception):
    """The soak itself could not run (the simulator did not start, the API kept failing)."""


# --- HTTP to the simulator ---------------------------------------------------------------------------
class Api:
    """The soak's own client: raw HTTP with its User-Agent, retrying while the apiserver restarts."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        accept: tuple[int, ...] = (200, 201, 202),
        tolerate: tuple[int, ...] = (404, 409),
        attempts: int = 40,
    ) -> tuple[int, Any]:
        data = orjson.dumps(body) if body is not None else None
        last = ""
        for _ in range(attempts):
            try:
                async with self.session.request(
                    method, self.url + path, data=data, headers={"Content-Type": content_type}
                ) as resp:
                    raw = await resp.read()
                    if resp.status in accept or resp.status in tolerate:
                        return resp.status, orjson.loads(raw) if raw[:1] in (b"{", b"[") else raw
                    last = f"HTTP {resp.status}: {raw[:300]!r}"
            except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            await anyio.sleep(0.25)  # the apiserver is restarting: back off, then retry
        raise SoakError(f"{method} {path} kept failing: {last}")

    async def items(self, path: str) -> list[dict[str, Any]]:
        _, body = await self.call("GET", path, tolerate=())
        return body["items"]

    async def sim(self, path: str, body: Any = None, method: str = "POST") -> Any:
        return (await self.call(method, "/_sim" + path, body if body is not None else {}, tolerate=()))[1]


# --- processes -----------------------------------------------------------------------------------------
@dataclass
class Process:
    label: str
    proc: asyncio.subprocess.Process
    log_path: Path
    killed: bool = False
    identity: str | None = None
    started: float = field(default_factory=time.monotonic)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def find_identity(self) -> str | None:
        if self.identity is None:
            for line in self.log_text().splitlines():
                if '"identity"' in line:
                    with contextlib.suppress(orjson.JSONDecodeError):
                        self.identity = orjson.loads(line).get("identity")
                        break
        return self.identity


def rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class Soak:
    def __init__(self, config: SoakConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        # Jobs are created shape after shape in a seeded order, so a population of len(SHAPES) jobs or more
        # starts with every shape (dynamic ones among them, which scaling and lost creates act on).
        self.shapes = itertools.cycle(self.rng.sample(SHAPES, len(SHAPES)))
        self.checker = InvariantChecker(config.bounds)
        self.result = SoakResult(
            config.seed, _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), workdir=str(config.workdir)
        )
        self.t0 = time.monotonic()
        self.api: Api | None = None
        self.sim_proc: asyncio.subprocess.Process | None = None
        self.controllers: dict[str, Process] = {}  # slot ("a"/"b") -> current process
        self.finished_processes: list[Process] = []
        self.generations: Counter[str] = Counter()
        self.snapshot: tuple[list[dict], list[dict], list[dict]] = ([], [], [])
        self.faulting = False
        self.stopping = False
        self.names = 0
        self.finished_seen: dict[str, float] = {}
        self.undo: list[tuple[float, str, Callable[[], Any]]] = []
        self.kubeconfig = config.workdir / "kubeconfig"

    def now(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        self.config.progress(f"[soak {self.now():6.1f}s] {text}")

    # --- lifecycle -----------------------------------------------------------------------------------
    async def start_sim(self) -> str:
        self.config.workdir.mkdir(parents=True, exist_ok=True)
        async with await anyio.open_file(self.config.workdir / "sim.log", "wb") as sim_log:
            self.sim_proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "controller",
                "--log-format",
                "json",
                "sim",
                "--port",
                "0",
                "--kubeconfig",
                str(self.kubeconfig),
                "--nodes",
                str(self.config.nodes),
                "--time-scale",
                str(self.config.time_scale),
                stdout=asyncio.subprocess.PIPE,
                stderr=sim_log.wrapped,
                cwd=ROOT,
            )
        assert self.sim_proc.stdout is not None
        with anyio.fail_after(60):
            line = (await self.sim_proc.stdout.readline()).decode()
        if "serving at " not in line:
            raise SoakError(f"the simulator did not start: {line!r}")
        return line.split("serving at ", 1)[1].split()[0]

    async def start_controller(self, slot_name: str) -> Process:
        self.generations[slot_name] += 1
        label = f"controller-{slot_name}{self.generations[slot_name]}"
        log_path = self.config.workdir / f"{label}.log"
        base, cap = self.config.failover_backoff
        command = self.config.controller_command or ["-m", "controller"]
        async with await anyio.open_file(log_path, "wb") as log_file:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *command,
                "--log-format",
                "json",
                "run",
                "--kubeconfig",
                str(self.kubeconfig),
                "--metrics-addr",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
                "--workers",
                str(self.config.controller_workers),
                "--leader-election-namespace",
                NAMESPACE,
                "--failover-backoff",
                str(base),
                str(cap),
                stdout=log_file.wrapped,
                stderr=log_file.wrapped,
                cwd=ROOT,
                start_new_session=True,
            )
        process = Process(label, proc, log_path)
        self.controllers[slot_name] = process
        self.result.rss[label] = []
        return process

    async def supervise(self, slot_name: str) -> None:
        """Restart a controller that ended, as its Deployment would, until the soak stops."""
        while True:
            process = self.controllers[slot_name]
            code = await process.proc.wait()
            self.finished_processes.append(process)
            self.checker.check_exits(self.now(), process.label, code, process.killed, process.log_text()[-4000:])
            if self.stopping:
                return
            self.say(f"{process.label} exited ({code}); restarting")
            await self.start_controller(slot_name)

    async def leader(self) -> Process | None:
        assert self.api is not None
        status, lease = await self.api.call("GET", LEASE)
        if status != 200:
            return None
        holder = (lease.get("spec") or {}).get("holderIdentity")
        for process in self.controllers.values():
            if holder and process.find_identity() == holder and process.proc.returncode is None:
                return process
        return None

    # --- observation ---------------------------------------------------------------------------------
    async def list_all(self) -> tuple[list[dict], list[dict], list[dict]]:
        assert self.api is not None
        jobs = await self.api.items(TFJOBS)
        pods = await self.api.items(PODS)
        services = await self.api.items(SERVICES)
        return jobs, pods, services

    async def observe_forever(self) -> None:
        while True:
            snapshot = await self.list_all()
            self.snapshot = snapshot
            self.result.observations += 1
            for violation in self.checker.observe(self.now(), *snapshot):
                self.say(f"VIOLATION {violation}")
            await anyio.sleep(self.config.observe_interval)

    async def sample_rss_forever(self) -> None:
        while True:
            for process in list(self.controllers.values()):
                # The first seconds are the interpreter importing the program, not the controller.
                if process.proc.returncode is None and time.monotonic() - process.started >= RSS_WARM_UP_SECONDS:
                    rss = rss_bytes(process.proc.pid)
                    if rss is not None:
                        self.result.rss[process.label].append((self.now(), rss))
            await anyio.sleep(self.config.rss_interval)

    # --- the driver ----------------------------------------------------------------------------------
    def count(self, kind: str) -> None:
        self.result.faults[kind] += 1

    def later(self, seconds: float, what: str, undo: Callable[[], Any]) -> None:
        self.undo.append((self.now() + seconds, what, undo))

    async def run_due_undos(self, everything: bool = False) -> None:
        await self.lift_episodes(lambda due, _what: everything or due <= self.now())

    async def lift_episodes(self, which: Callable[[float, str], bool]) -> None:
        """Run, in time order, the undos ``which(due, what)`` selects, and forget them."""
        chosen = [u for u in self.undo if which(u[0], u[1])]
        self.undo = [u for u in self.undo if u not in chosen]
        for _, _, undo in sorted(chosen, key=lambda u: u[0]):
            result = undo()
            if asyncio.iscoroutine(result):
                await result

    async def create_job(self, dynamic: bool = False) -> None:
        """Create a job of the next shape (the next dynamic shape if ``dynamic``)."""
        assert self.api is not None
        shape = next(s for s in self.shapes if s.dynamic or not dynamic)
        self.names += 1
        name = f"{shape.name}-{self.names}"
        await self.api.call("POST", TFJOBS, manifest(shape, name))
        self.count("job-create")

    def jobs(self) -> list[dict[str, Any]]:
        return sorted(self.snapshot[0], key=lambda j: j["metadata"]["name"])

    def live_pods(self, replica_type: str | None = None) -> list[dict[str, Any]]:
        pods = [p for p in self.snapshot[1] if live(p) and slot(p) is not None]
        if replica_type is not None:
            pods = [p for p in pods if slot(p)[0] == replica_type]  # type: ignore[index]
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    async def manage_population(self) -> None:
        """Delete jobs that finished a while ago (TTL jobs are left to the controller); keep the count, and
        one dynamic job unfinished (one more than the count if need be): scaling and lost creates act on it."""
        assert self.api is not None
        jobs = [j for j in self.jobs() if not j["metadata"].get("deletionTimestamp")]
        for job in jobs:
            uid = job["metadata"]["uid"]
            if finished(job):
                first = self.finished_seen.setdefault(uid, self.now())
                has_ttl = "ttlSecondsAfterFinished" in (job["spec"].get("runPolicy") or {})
                if not has_ttl and self.now() - first > 5:
                    policy = self.rng.choice(["Background", "Foreground"])
                    await self.api.call(
                        "DELETE",
                        f"{TFJOBS}/{job['metadata']['name']}",
                        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy},
                    )
                    self.count("job-delete-finished")
        dynamic_running = any(is_dynamic(j) and not finished(j) for j in jobs)
        if len(jobs) < self.config.jobs or not dynamic_running:
            await self.create_job(dynamic=not dynamic_running)

    async def attempt(self, step: Step, rng: random.Random, since: float) -> bool:
        """One try at ``step`` (its RNG ``rng``, first tried at ``since``). True when the step is done with:
        performed, or a later step that found nothing to act on (dropped). False when an opening step is to
        try again on the next snapshot; an opening step that found nothing to act on (a live pod, a dynamic
        job, a worker pod showing up in time) for ``target_wait_seconds`` is a :class:`SoakError`."""
        if await self.act(step.kind, rng):
            self.count(step.kind)
            if step.opening:
                self.result.opening.append(step.kind)
            return True
        if not step.opening:
            return True
        if self.now() - since >= self.config.target_wait_seconds:
            raise SoakError(
                f"opening step {step.index} ({step.kind}) found nothing to act on "
                f"for {self.config.target_wait_seconds:.0f}s"
            )
        return False

    async def act(self, kind: str, rng: random.Random) -> bool:
        """One action of ``kind``, its parameters and targets drawn from ``rng``; False if nothing was done
        (no target listed, or the target went away between the LIST and the action)."""
        assert self.api is not None
        api = self.api
        code = 200  # cluster-level faults either succeed or raise
        duration = rng.uniform(2.0, 10.0)
        if kind in TIMED_KINDS:
            await self.lift_episodes(lambda _due, what: what == kind)  # one episode per kind: the new one replaces it
        if kind == "api-error":
            rule = await api.sim(
                "/faults",
                {
                    "code": rng.choice([429, 500, 503]),
                    "rate": round(rng.uniform(0.1, 0.5), 2),
                    "verb": rng.choice(["*", "create", "delete", "update", "patch", "list", "get"]),
                    "resource": rng.choice(API_RESOURCES),
                    "userAgent": CONTROLLER_AGENT,
                    "retryAfter": 1,
                },
            )
            self.later(duration, kind, lambda: api.sim(f"/faults/{rule['id']}", method="DELETE"))
        elif kind == "latency":
            rule = await api.sim(
                "/faults",
                {
                    "latency": round(rng.uniform(0.05, 0.8), 2),
                    "resource": rng.choice(API_RESOURCES),
                    "userAgent": CONTROLLER_AGENT,
                },
            )
            self.later(duration, kind, lambda: api.sim(f"/faults/{rule['id']}", method="DELETE"))
        elif kind == "dropped-connections":
            rule = await api.sim(
                "/faults",
                {
                    "drop": True,
                    "rate": round(rng.uniform(0.05, 0.3), 2),
                    "resource": rng.choice(API_RESOURCES),
                    "userAgent": CONTROLLER_AGENT,
                },
            )
            self.later(duration, kind, lambda: api.sim(f"/faults/{rule['id']}", method="DELETE"))
        elif kind == "watch-close":
            await api.sim("/watches/close", {"resource": rng.choice([None, *WATCHED])})
        elif kind == "watch-stall":
            await api.sim("/watches/stall", {"resource": rng.choice(WATCHED), "includeNew": True})
            compact = rng.random() < 0.5

            async def unstall() -> None:
                if compact:
                    await api.sim("/compact")
                await api.sim("/watches/unstall")

            self.later(duration, kind, unstall)
        elif kind == "watch-delay":
            resource = rng.choice(WATCHED)
            await api.sim(
                "/watches/delay",
                {"seconds": round(rng.uniform(0.2, 2.0), 2), "resource": resource, "userAgent": CONTROLLER_AGENT},
            )
            self.later(
                duration,
                kind,
                lambda: api.sim("/watches/delay", {"seconds": 0, "resource": resource, "userAgent": CONTROLLER_AGENT}),
            )
        elif kind == "compaction":
            await api.sim("/compact")
        elif kind == "apiserver-restart":
            await api.sim("/restart")
        elif kind == "kubelet-pause":
            await api.sim("/kubelet/pause")
            self.later(duration, kind, lambda: api.sim("/kubelet/resume"))
        elif kind == "gc-pause":
            await api.sim("/gc/pause")
            self.checker.gc_paused(self.now())

            async def resume_gc() -> None:
                await api.sim("/gc/resume")
                self.checker.gc_resumed(self.now())

            self.later(duration, kind, resume_gc)
        elif kind == "node-not-ready":
            node = rng.choice(sorted(n["metadata"]["name"] for n in await api.items("/api/v1/nodes")))
            await api.sim(f"/nodes/{node}/ready", {"ready": False})
            self.later(rng.uniform(5.0, 25.0), kind, lambda: api.sim(f"/nodes/{node}/ready", {"ready": True}))
        elif kind in ("worker-delete", "eviction", "oom", "error-exit"):
            pods = self.live_pods("Worker" if kind == "worker-delete" else None)
            if not pods:
                return False
            pod = rng.choice(pods)["metadata"]["name"]
            if kind == "worker-delete":
                grace = rng.choice([None, 0])
                options = {"kind": "DeleteOptions", "apiVersion": "v1"}
                if grace is not None:
                    options["gracePeriodSeconds"] = grace
                code, _ = await api.call("DELETE", f"{PODS}/{pod}", options)
            else:
                annotations = {
                    "eviction": {EVICT: "true"},
                    "oom": {EXIT_CODE: "137", REASON: "OOMKilled"},
                    "error-exit": {
                        EXIT_CODE: str(rng.choice([1, 2, 3, 42, 255])),
                        REASON: "Error",
                    },
                }[kind]
                code, _ = await api.call(
                    "PATCH",
                    f"{PODS}/{pod}",
                    {"metadata": {"annotations": annotations}},
                    content_type="application/merge-patch+json",
                )
        elif kind in ("scale-spec", "scale-subresource"):
            jobs = [j for j in self.jobs() if is_dynamic(j) and not finished(j)]
            if not jobs:
                return False
            name = rng.choice(jobs)["metadata"]["name"]
            replicas = rng.randint(0, self.config.max_worker_replicas)
            if kind == "scale-spec":
                body = {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas}}}}
                code, _ = await api.call("PATCH", f"{TFJOBS}/{name}", body, content_type="application/merge-patch+json")
            else:
                code, _ = await api.call(
                    "PATCH",
                    f"{TFJOBS}/{name}/scale",
                    {"spec": {"replicas": replicas}},
                    content_type="application/merge-patch+json",
                )
        elif kind == "lost-create-relist":
            if not await self.lose_a_create(rng):
                return False
        elif kind == "job-delete":
            jobs = [j for j in self.jobs() if not j["metadata"].get("deletionTimestamp")]
            if not jobs:
                return False
            name = rng.choice(jobs)["metadata"]["name"]
            code, _ = await api.call(
                "DELETE",
                f"{TFJOBS}/{name}",
                {
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "propagationPolicy": rng.choice(["Background", "Foreground"]),
                },
            )
        return code < 300  # >= 300: the target went away between the LIST and the action

    async def lose_a_create(self, rng: random.Random) -> bool:
        """The frozen job: while the pods watch is stalled, a job scales up, its new worker is
        force-deleted before any watch event of it was sent, history is compacted, the watch resumes
        with 410 and a relist. A controller whose create expectation outlives that relist freezes."""
        assert self.api is not None
        api = self.api
        jobs = [
            j for j in self.jobs() if is_dynamic(j) and not finished(j) and not j["metadata"].get("deletionTimestamp")
        ]
        if not jobs:
            return False
        job = rng.choice(jobs)
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        replicas = (job["spec"]["tfReplicaSpecs"].get("Worker") or {}).get("replicas", 1)
        if not isinstance(replicas, int) or replicas >= self.config.max_worker_replicas:
            return False
        await api.sim("/watches/stall", {"resource": "pods", "includeNew": True})
        try:
            body = {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas + 1}}}}
            code, _ = await api.call("PATCH", f"{TFJOBS}/{name}", body, content_type="application/merge-patch+json")
            if code >= 300:
                return False
            pod = None
            with anyio.move_on_after(10):  # the controller may be throttled or mid-failover: then skip
                while pod is None:
                    for candidate in await api.items(PODS):
                        if (
                            live(candidate)
                            and slot(candidate) == ("Worker", replicas)
                            and any(r.get("uid") == uid for r in candidate["metadata"].get("ownerReferences") or [])
                        ):
                            pod = candidate
                    await anyio.sleep(0.1)
            if pod is None:
                return False
            await api.call(
                "DELETE",
                f"{PODS}/{pod['metadata']['name']}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            )
            await api.sim("/compact")
            return True
        finally:
            await api.sim("/watches/unstall")

    async def kill_leader(self) -> bool:
        leader = await self.leader()
        if leader is None:
            return False
        self.say(f"SIGKILL the leader {leader.label}")
        leader.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.proc.pid, signal.SIGKILL)
        self.count("leader-sigkill")
        return True

    async def drive(self) -> None:
        """The fault phase: the schedule's steps in order for ``fault_seconds``, and for as long after as the
        opening and the leader kills need (each bounded: see the module docstring)."""
        phase_end = self.now() + self.config.fault_seconds
        # Kills spread over the first half of the faults, so the last leader leads for the second half:
        # its memory over a long stretch of leadership is what the flat-RSS check is about.
        kills = [
            self.now() + self.config.fault_seconds * 0.5 * (i + 1) / self.config.leader_kills
            for i in range(self.config.leader_kills)
        ]
        steps = schedule(self.config.seed, self.config.mean_action_interval)
        step, since = next(steps), 0.0
        rng: random.Random | None = None
        next_population = self.now()
        self.faulting = True
        while True:
            await self.run_due_undos()
            if kills and self.now() >= kills[0] and await self.kill_leader():
                kills.pop(0)
            if self.now() >= next_population:
                await self.manage_population()
                next_population = self.now() + 2.0
            if self.now() < phase_end or step.opening:
                if rng is None:
                    rng, since = random.Random(step.seed), self.now()
                if await self.attempt(step, rng, since):
                    await anyio.sleep(step.pause)
                    step, rng = next(steps), None
                else:
                    await anyio.sleep(self.config.observe_interval)  # an opening step waits for a target
            elif not kills:
                break
            elif self.now() > phase_end + self.config.target_wait_seconds:
                raise SoakError(f"no leader to SIGKILL for {self.config.target_wait_seconds:.0f}s after the faults")
            else:
                await anyio.sleep(self.config.observe_interval)  # poll the Lease for a leader to kill
        self.faulting = False

    async def lift_faults(self) -> None:
        assert self.api is not None
        await self.run_due_undos(everything=True)
        await self.api.sim("/faults", method="DELETE")
        await self.api.sim("/watches/unstall")
        for resource in WATCHED:
            await self.api.sim("/watches/delay", {"seconds": 0, "resource": resource, "userAgent": CONTROLLER_AGENT})
        await self.api.sim("/kubelet/resume")
        await self.api.sim("/gc/resume")
        self.checker.gc_resumed(self.now())
        for node in await self.api.items("/api/v1/nodes"):
            await self.api.sim(f"/nodes/{node['metadata']['name']}/ready", {"ready": True})

    # --- the end ---------------------------------------------------------------------------------------
    async def converge(self, since: float) -> list[str]:
        """Why the cluster is not converged (empty once three consecutive snapshots agree it is), waiting at most
        until ``Bounds.converge_seconds`` after ``since``."""
        reasons: list[str] = ["not observed yet"]
        streak = 0
        next_report = self.now() + 10.0
        while self.now() - since < self.config.bounds.converge_seconds:
            reasons = self.checker.unconverged(*await self.list_all())
            streak = streak + 1 if not reasons else 0
            if reasons and self.now() >= next_report:
                self.say(f"not converged yet: {reasons[:4]}")
                next_report = self.now() + 10.0
            if streak >= 3:  # three consecutive snapshots agree: not a between-LISTs coincidence
                break
            await anyio.sleep(self.config.observe_interval)
        return reasons

    async def settle(self) -> None:
        """Convergence within the bound, then a quiet window, then every child gone after deletion."""
        assert self.api is not None
        bounds = self.config.bounds
        lifted = self.now()
        reasons = await self.converge(lifted)
        self.result.converged_after = self.now() - lifted if not reasons else None
        self.checker.check_converged(self.now(), reasons, self.now() - lifted)
        self.say(f"converged after {self.now() - lifted:.1f}s" if not reasons else f"NOT converged: {reasons[:5]}")
        if not reasons:
            # Converged is not still: a finishing job's containers exit on their own schedule (35-45 s after they
            # start), and the controller must then write its Succeeded status (and an Event). The quiet window is
            # about the controller alone, so pod lifecycles are frozen for it; convergence is confirmed again
            # after the freeze, in case a pod finished just before it.
            await self.api.sim("/kubelet/pause")
            try:
                reasons = await self.converge(lifted)
                if reasons:
                    self.checker.check_converged(self.now(), reasons, self.now() - lifted)
                else:
                    mark = (await self.api.sim("/requests/mark"))["mark"]
                    await anyio.sleep(bounds.quiet_seconds)  # the measurement window itself, not a synchronisation
                    records = (await self.api.call("GET", f"/_sim/requests?since={mark}", tolerate=()))[1]["requests"]
                    self.checker.check_quiet(self.now(), records, CONTROLLER_AGENT)
            finally:
                await self.api.sim("/kubelet/resume")
        # Delete every job; every child must be gone within the orphan bound.
        for job in self.jobs():
            await self.api.call(
                "DELETE",
                f"{TFJOBS}/{job['metadata']['name']}",
                {
                    "kind": "DeleteOptions",
                    "apiVersion": "v1",
                    "propagationPolicy": self.rng.choice(["Background", "Foreground"]),
                },
            )
        deleted = self.now()
        while True:
            jobs, pods, services = await self.list_all()
            self.checker.observe(self.now(), jobs, pods, services)
            owned = [
                o
                for o in (*pods, *services)
                if any(r.get("kind") == "TFJob" for r in o["metadata"].get("ownerReferences") or [])
            ]
            self.checker.checks["no-orphans"] += 1
            if not jobs and not owned:
                break
            if self.now() - deleted > bounds.orphan_seconds:
                self.checker._violate(
                    "no-orphans",
                    self.now(),
                    "end",
                    f"{len(jobs)} jobs and {len(owned)} children remain "
                    f"{bounds.orphan_seconds:.0f}s after every job was deleted: "
                    f"{sorted(o['metadata']['name'] for o in owned)[:10]}",
                )
                break
            await anyio.sleep(self.config.observe_interval)

    async def stop(self) -> None:
        self.stopping = True
        for process in self.controllers.values():
            if process.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.proc.send_signal(signal.SIGTERM)
        for process in self.controllers.values():
            try:
                with anyio.fail_after(30):
                    code = await process.proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.proc.pid, signal.SIGKILL)
                code = await process.proc.wait()
                self.checker._violate(
                    "no-unexpected-exit",
                    self.now(),
                    process.label + "-stop",
                    f"{process.label} did not stop within 30s of SIGTERM",
                )
            if code != 0 and not process.killed:
                self.checker._violate(
                    "no-unexpected-exit",
                    self.now(),
                    process.label + "-stop",
                    f"{process.label} exited {code} on SIGTERM: {process.log_text()[-600:]}",
                )
        if self.sim_proc is not None and self.sim_proc.returncode is None:
            self.sim_proc.send_signal(signal.SIGTERM)
            with anyio.move_on_after(30):
                await self.sim_proc.wait()
            if self.sim_proc.returncode is None:
                self.sim_proc.kill()
                await self.sim_proc.wait()

    def judge_evidence(self) -> None:
        t = self.now()
        seen = {p.label: p for p in [*self.finished_processes, *self.controllers.values()]}
        for label, process in sorted(seen.items()):
            self.checker.check_logs(t, label, process.log_text().splitlines())
        self.checker.check_rss(t, self.result.rss)

    async def run(self) -> SoakResult:
        config = self.config
        try:
            url = await self.start_sim()
            self.say(f"simulator at {url} (seed {config.seed}, {config.fault_seconds:.0f}s of faults)")
            async with aiohttp.ClientSession(
                headers={"User-Agent": OBSERVER_AGENT}, timeout=aiohttp.ClientTimeout(total=30)
            ) as session:
                self.api = Api(session, url)
                await self.api.call(
                    "POST",
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    yaml.safe_load(CRD_PATH.read_text()),
                )
                await self.api.call("GET", TFJOBS, tolerate=())
                for slot_name in ("a", "b"):
                    await self.start_controller(slot_name)
                async with anyio.create_task_group() as tg:
                    for slot_name in ("a", "b"):
                        tg.start_soon(self.supervise, slot_name)
                    tg.start_soon(self.observe_forever)
                    tg.start_soon(self.sample_rss_forever)
                    for _ in range(config.jobs):
                        await self.create_job()
                    await self.drive()
                    await self.lift_faults()
                    self.say(f"faults lifted after {config.fault_seconds:.0f}s: {dict(self.result.faults)}")
                    await self.settle()
                    self.stopping = True
                    tg.cancel_scope.cancel()
        except* SoakError as group:  # from the task group's body too, where it comes wrapped in a group
            self.result.error = "; ".join(str(exc) for exc in group.exceptions)
        finally:
            with anyio.CancelScope(shield=True):
                self.stopping = True
                await self.stop()
            self.judge_evidence()
            self.result.duration = self.now()
            self.result.fault_seconds = config.fault_seconds
            self.result.checks = Counter({k: self.checker.checks[k] for k in INVARIANTS})
            self.result.violations = list(self.checker.violations)
            self.result.slowest_scale_down = self.checker.slowest_scale_down
            self.result.outcomes = self.checker.outcomes()
        return self.result


async def run_soak(config: SoakConfig) -> SoakResult:
    return await Soak(config).run()


RUNS_BEGIN = "<!-- runs: one row per run, newest first; kept by benchmarks/soak.py -->"
RUNS_END = "<!-- /runs -->"
RUNS_HEADER = (
    "| date | seed | minutes | outcome | violations | actions | checks | converged after (s) | "
    "longest-lived controller RSS first / last / max (MiB) |",
    "|---|---:|---:|---|---:|---:|---:|---:|---|",
)


def run_row(result: SoakResult) -> str:
    """One line of the table of runs; RSS of the process that lived longest (the last leader)."""
    series = max(result.rss.values(), key=lambda s: s[-1][0] - s[0][0] if s else -1.0, default=[])
    rss = [v / 2**20 for _, v in series]
    memory = f"{rss[0]:.1f} / {rss[-1]:.1f} / {max(rss):.1f}" if rss else "-"
    converged = f"{result.converged_after:.1f}" if result.converged_after is not None else "no"
    return (
        f"| {result.started} | {result.seed} | {(result.duration / 60):.1f} | "
        f"{'PASSED' if result.passed else 'FAILED'} | {len(result.violations)} | {sum(result.faults.values())} | "
        f"{sum(result.checks.values())} | {converged} | {memory} |"
    )


def previous_rows(document: str) -> list[str]:
    """The rows of the table of runs in an earlier docs/benchmarks/soak.md."""
    if RUNS_BEGIN not in document or RUNS_END not in document:
        return []
    table = document.split(RUNS_BEGIN, 1)[1].split(RUNS_END, 1)[0]
    return [line for line in table.strip().splitlines() if line.startswith("| ") and line not in RUNS_HEADER]


def render_markdown(result: SoakResult, command: str, bounds: Bounds, earlier_rows: list[str] = ()) -> str:
    """The latest result in full, then every recorded run, for docs/benchmarks/soak.md."""
    lines = [
        "# Chaos soak: latest result",
        "",
        f"Written by `{command}` on {result.started} ({os.cpu_count()} CPUs). The soak runs two",
        "leader-elected `tfjob-controller run` processes against one `tfjob-controller sim` process, injects",
        "faults drawn from the seed, checks the invariants of `benchmarks/chaos/invariants.py` throughout, then",
        "lifts the faults and checks convergence, silence, deletion and the controllers' logs and memory.",
        "",
        f"- seed: **{result.seed}**",
        f"- outcome: **{'PASSED' if result.passed else 'FAILED'}** ({len(result.violations)} invariant violations)",
        f"- duration: {result.duration:.0f} s, of which {result.fault_seconds:.0f} s of faults",
        f"- converged {result.converged_after:.1f} s after the faults were lifted"
        if result.converged_after is not None
        else "- did not converge within the bound",
        f"- slowest scale-down observed (pod or service gone or terminating after its replicas were lowered): "
        f"{result.slowest_scale_down:.1f} s",
        f"- observations (LISTs of jobs, pods and services): {result.observations}",
        f"- jobs created: {result.faults.get('job-create', 0)}; seen finished: "
        f"{result.outcomes.get('Succeeded', 0)} Succeeded, {result.outcomes.get('Failed', 0)} Failed "
        "(non-dynamic jobs fail by design when a replica fails for good)",
        f"- bounds: scale-down within {bounds.scale_down_seconds:.0f} s of being observed; orphans gone within "
        f"{bounds.orphan_seconds:.0f} s of running garbage collection; convergence within "
        f"{bounds.converge_seconds:.0f} s of the faults being lifted; then {bounds.quiet_seconds:.0f} s without a "
        f"controller write; RSS peak of the last third of a process's samples at most "
        f"max({bounds.rss_growth_ratio:.0%}, {bounds.rss_growth_bytes / 2**20:.0f} MiB) above the middle third's",
        "",
        "## Faults and actions, by kind",
        "",
        "| kind | count |",
        "|---|---:|",
        *[f"| {kind} | {count} |" for kind, count in sorted(result.faults.items())],
        "",
        "## Checks made, by invariant",
        "",
        "| invariant | checks | violations |",
        "|---|---:|---:|",
        *[
            f"| {name} | {result.checks.get(name, 0)} | {sum(1 for v in result.violations if v.invariant == name)} |"
            for name in INVARIANTS
        ],
        "",
        "## Controller memory (RSS, MiB)",
        "",
        "One row per controller process (a SIGKILLed leader is restarted as a new process), sampled every",
        f"few seconds from /proc once it is {RSS_WARM_UP_SECONDS:.0f} s old.",
        "",
        "| process | samples | lifetime (s) | first | last | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, series in sorted(result.rss.items()):
        if not series:
            continue
        values = [rss / 2**20 for _, rss in series]
        lines.append(
            f"| {label} | {len(series)} | {series[-1][0] - series[0][0]:.0f} | {values[0]:.1f} | "
            f"{values[-1]:.1f} | {max(values):.1f} |"
        )
    if result.violations or result.error:
        lines += ["", "## Violations", "", "```", *(str(v) for v in result.violations[:50])]
        if result.error:
            lines.append(f"error: {result.error}")
        lines.append("```")
    lines += [
        "",
        "## Runs",
        "",
        "Every run recorded here, newest first (RSS: the longest-lived controller process).",
        "",
        RUNS_BEGIN,
        *RUNS_HEADER,
        run_row(result),
        *earlier_rows,
        RUNS_END,
    ]
    return "\n".join(lines) + "\n"
