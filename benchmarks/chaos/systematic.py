"""Systematic perturbation of the controller: every write crashed, views made stale, states left unobserved.

One *run* (:func:`run_scenario`) is one scenario of :mod:`benchmarks.chaos.scenarios` on a fresh in-process
simulated cluster, with ``tfjob-controller run`` processes reaching it through a
:class:`~benchmarks.chaos.proxy.PerturbingProxy`: the job is created and brought to where the story starts
(unperturbed), the proxy log is marked (the *window* starts), the perturbation is armed, the scenario's action
is taken, and the run lasts until the cluster has converged and the controller is idle. An observer lists the
job's objects all along and feeds :class:`~benchmarks.chaos.invariants.InvariantChecker` (one live pod per
index, dynamic jobs never failed by their workers, finished never reverted, ...), and notes whether the job was
ever Failed.

A perturbed run is judged against the scenario's unperturbed run (:func:`judge`):

* no invariant broken, and the job never Failed unless the scenario fails it by design;
* the same final state (:func:`signature`: the pods by name, index and phase, which pods present before the
  action were kept, replaced or removed, the services, the conditions, the replica statuses, members, holes
  and the failover records, the PodGroup);
* the same events of the job: none more often than in the unperturbed run; one missing only if it was lost
  with a killed process (that process committed the write the event reports and never sent the event, as
  the recorder's queue dies with it);
* no object written that the unperturbed run never wrote: a create, delete or eviction of a name the
  unperturbed run did not create or delete (re-creating a worker the user removed, deleting one to keep);
* writes counted: the run's committed state writes over the unperturbed run's (``extra_writes``).

Perturbations (:class:`Perturbation`): ``crash@k`` (SIGKILL after the k-th committed state write of the window,
then a new process), ``stale`` (told by a leader with a standby; once it has converged the leader is SIGKILLed
and the standby takes over, its first list of each resource served N revisions old or as it was at a named
moment, the replay of newer events held back; judged by what the standby gets committed), ``gone@k``
(every watch ends with a 410 after write k, events in between dropped) and ``coalesce`` (watch events passed on
once per window, the latest version of each object only).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.chaos.invariants import (
    InvariantChecker,
    is_dynamic,
    is_true,
    live,
    replica_specs,
    replicas,
    slot,
    suspended,
)
from benchmarks.chaos.proxy import Endpoint, PerturbingProxy, Record, state_writes
from benchmarks.chaos.scenarios import NAMESPACE, PODS, TFJOBS, Scenario
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.processes import ControllerProcess

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"
SERVICES = f"/api/v1/namespaces/{NAMESPACE}/services"
EVENTS = f"/api/v1/namespaces/{NAMESPACE}/events"
PODGROUPS = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NAMESPACE}/podgroups"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
LEASE = "tfjob-controller"
JOB_LABEL = "training.kubeflow.org/job-name"
CONTROLLER = "tfjob-controller"
# The controller's failover back-off shrunk as the end-to-end tests shrink it: simulated time runs 100x faster.
FAILOVER_BACKOFF = ("1", "4")
# Executor events, each about one object write (its message names the object).
EXECUTOR_EVENTS = {
    "SuccessfulCreatePod": ("POST", "pods"),
    "SuccessfulDeletePod": ("DELETE", "pods"),
    "SuccessfulCreateService": ("POST", "services"),
    "SuccessfulDeleteService": ("DELETE", "services"),
}
OBSERVE_INTERVAL = 0.05
SETTLE_STREAK = 3  # consecutive converged-and-idle probes before a run is judged


class RunError(Exception):
    """The run could not be carried out (a setup that never became ready); not a verdict on the controller."""


# --- what the cluster shows ----------------------------------------------------------------------------
@dataclass
class Snapshot:
    """The job and its children (pods and services by the job-name label), its events, its PodGroup."""

    t: float
    job: dict[str, Any] | None
    pods: list[dict[str, Any]]
    services: list[dict[str, Any]]
    events: list[dict[str, Any]] = field(default_factory=list)
    podgroups: list[dict[str, Any]] = field(default_factory=list)

    def live_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if live(p)]

    def settled(self) -> bool:
        """Nothing of the job is terminating."""
        return not any(o["metadata"].get("deletionTimestamp") for o in (*self.pods, *self.services))


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def _records(job: Mapping[str, Any] | None, key: str) -> dict[str, dict[str, Any]]:
    """The failover records of ``status.dynamicWorkers.<key>``, without times and pod uids (which differ per run)."""
    raw = (((job or {}).get("status") or {}).get("dynamicWorkers") or {}).get(key) or {}
    keep = ("state", "failovers", "failures", "lastReason", "exitCode")
    return {index: {k: r.get(k) for k in keep if k in r} for index, r in sorted(raw.items()) if isinstance(r, dict)}


def signature(snap: Snapshot, before: Snapshot) -> dict[str, Any]:
    """The final state a perturbed run must share with the unperturbed one (see the module docstring)."""
    job = snap.job
    status = (job or {}).get("status") or {}
    by_name = {p["metadata"]["name"]: p for p in snap.pods}
    kept = {}
    for pod in before.pods:
        name = pod["metadata"]["name"]
        now = by_name.get(name)
        kept[name] = "gone" if now is None else "kept" if now["metadata"]["uid"] == pod["metadata"]["uid"] else "new"
    statuses = {
        rt: {k: v for k, v in (entry or {}).items() if k in ("active", "succeeded", "failed")}
        for rt, entry in sorted((status.get("replicaStatuses") or {}).items())
    }
    return {
        "job": "absent" if job is None else "present",
        "pods": sorted(
            f"{p['metadata']['name']} {_phase(p)}{' terminating' if p['metadata'].get('deletionTimestamp') else ''}"
            for p in snap.pods
        ),
        "before-action": kept,
        "services": sorted(s["metadata"]["name"] for s in snap.services),
        "conditions": [
            [c.get("type"), c.get("status"), c.get("reason"), c.get("message")] for c in status.get("conditions") or []
        ],
        "replicaStatuses": statuses,
        "members": (status.get("dynamicWorkers") or {}).get("members"),
        "workers": _records(job, "workers"),
        "parameterServers": _records(job, "parameterServers"),
        "startTime": "set" if status.get("startTime") else "unset",
        "completionTime": "set" if status.get("completionTime") else "unset",
        "podgroups": sorted(f"{g['metadata']['name']} minMember={g['spec'].get('minMember')}" for g in snap.podgroups),
    }


def event_counts(events: Sequence[Mapping[str, Any]]) -> Counter[tuple[str, str]]:
    """(reason, message) -> how many times the controller reported it (an Event's ``count``)."""
    counts: Counter[tuple[str, str]] = Counter()
    for e in events:
        if (e.get("source") or {}).get("component") not in (CONTROLLER, None) and e.get(
            "reportingComponent"
        ) != CONTROLLER:
            continue
        counts[(str(e.get("reason")), str(e.get("message")))] += int(e.get("count") or 1)
    return counts


# --- convergence ---------------------------------------------------------------------------------------
def unconverged(snap: Snapshot, scenario: Scenario) -> list[str]:
    """Why the job is not where a controller leaves it when it has nothing more to do (empty: it is).

    Dynamic workers are judged by the recorded members (holes have no pod), every other type by indices below
    its replicas: one live Running pod (or a finished one) per expected index, a service for it, nothing else
    live or terminating, the replica status counting the running pods."""
    job = snap.job
    if scenario.job_goes and job is None:
        return [] if not snap.pods and not snap.services else ["children of the deleted job remain"]
    if job is None:
        return ["no job"]
    if not snap.settled():
        return ["objects terminating"]
    if is_true(job, "Succeeded") or is_true(job, "Failed"):
        return []  # what a finished job keeps is compared with the unperturbed run
    if suspended(job):
        return ["suspended with live pods"] if snap.live_pods() else []
    status = job.get("status") or {}
    reasons = []
    for replica_type in replica_specs(job):
        r = replicas(job, replica_type)
        if r is None:
            continue
        expected = set(range(r))
        members = (status.get("dynamicWorkers") or {}).get("members")
        if replica_type == "Worker" and is_dynamic(job) and isinstance(members, list):
            expected = set(members)
            if len(members) != r:
                reasons.append(f"members {members} for {r} replicas")
        have = {}
        for pod in snap.pods:
            where = slot(pod)
            if where and where[0] == replica_type:
                have.setdefault(where[1], []).append(pod)
        running = 0
        for index in expected:
            pods = have.get(index, [])
            if len(pods) == 1 and _phase(pods[0]) == "Running":
                running += 1
            elif not (len(pods) == 1 and _phase(pods[0]) in ("Succeeded", "Failed")):
                reasons.append(f"{replica_type} {index}: {[(p['metadata']['name'], _phase(p)) for p in pods]}")
        extra = sorted(i for i in have if i not in expected)
        if extra:
            reasons.append(f"{replica_type} pods at indices {extra} beyond the members")
        services = {slot(s)[1] for s in snap.services if slot(s) and slot(s)[0] == replica_type}
        if services != expected:
            reasons.append(f"{replica_type} services {sorted(services)}, expected {sorted(expected)}")
        entry = (status.get("replicaStatuses") or {}).get(replica_type) or {}
        if entry.get("active", 0) != running:
            reasons.append(f"status says {replica_type} active={entry.get('active')}, {running} running")
    return reasons


# --- processes -----------------------------------------------------------------------------------------
class Controller:
    """One ``tfjob-controller run`` process and the proxy endpoint it talks through."""

    def __init__(self, label: str, endpoint: Endpoint, args: Sequence[str], env: dict[str, str]) -> None:
        self.label = label
        self.endpoint = endpoint
        self.args = (
            "--kubeconfig",
            str(endpoint.kubeconfig),
            "--failover-backoff",
            *FAILOVER_BACKOFF,
            "--workers",
            "4",
            "--leader-election-namespace",
            NAMESPACE,
            *args,
        )
        self.env = env
        self.process = ControllerProcess(*self.args, env=env)
        self.killed = False
        self.starting = False  # start() is at work: it reports a process that does not come up itself

    async def start(self, attempts: int = 5, timeout: float = 60.0) -> Controller:
        """Start the process and wait until its health endpoint answers. Its metrics and health ports are picked
        free beforehand, and another process on the machine may take one meanwhile: then it exits with "address
        already in use", and it is started again on other ports."""
        self.starting = True
        try:
            return await self._start(attempts, timeout)
        finally:
            self.starting = False

    async def _start(self, attempts: int, timeout: float) -> Controller:
        async with aiohttp.ClientSession() as session:
            for _ in range(attempts):
                await self.process.start()
                deadline = time.monotonic() + timeout
                while self.alive and time.monotonic() < deadline:
                    try:
                        url = f"http://127.0.0.1:{self.process.health_port}/healthz"
                        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
                            if resp.status == 200:
                                return self
                    except (aiohttp.ClientError, OSError, TimeoutError):
                        pass
                    await asyncio.sleep(OBSERVE_INTERVAL)
                if self.killed:
                    return self  # a crash the proxy was told to cause came before the health endpoint answered
                if self.alive:
                    raise RunError(f"controller {self.label}: no health endpoint within {timeout:.0f}s")
                await self.process.wait()
                if "address already in use" not in self.log_text():
                    raise RunError(f"controller {self.label} exited at start: {self.log_text()[-600:]}")
                self.process = ControllerProcess(*self.args, env=self.env)
        raise RunError(f"controller {self.label}: no free ports in {attempts} attempts")

    @property
    def alive(self) -> bool:
        proc = self.process.proc
        return proc is not None and proc.returncode is None

    async def kill(self) -> None:
        """SIGKILL, as a crash: no lease release, no event flush."""
        proc = self.process.proc
        assert proc is not None
        self.killed = True
        if proc.returncode is None:
            proc.kill()
        await self.process.wait()

    async def stop(self) -> int | None:
        if self.process.proc is None or not self.alive:
            return self.process.proc.returncode if self.process.proc is not None else None
        return await self.process.stop()

    async def idle(self, session: aiohttp.ClientSession) -> bool:
        """Nothing queued, nothing being reconciled (its metrics), no request of its in flight (the proxy)."""
        if not self.alive or self.endpoint.in_flight:
            return False
        try:
            async with session.get(f"http://127.0.0.1:{self.process.metrics_port}/metrics") as resp:
                text = await resp.text()
        except (aiohttp.ClientError, OSError):
            return False
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("name", sample.labels.get("controller")) == CONTROLLER:
                    values[sample.name] = sample.value
        return values.get("workqueue_depth") == 0 and values.get("controller_runtime_active_workers") == 0

    def log_text(self) -> str:
        return self.process.stderr


# --- one run -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Perturbation:
    """``kind``: none, crash, stale, gone or coalesce; ``k``: the write after which (crash, gone); ``revisions``
    and ``stale``: how far back and which resources (stale); ``window``: seconds (coalesce)."""

    kind: str = "none"
    k: int = 0
    write: str = ""  # crash: count only the writes described so (``describe_writes``), e.g. "POST pods j-worker-1"
    revisions: int = 0
    stale: str = "all"  # all (one consistent past state) | pods | tfjobs | services
    point: str = ""  # stale: a named moment instead of a number of revisions (see POINTS)
    hold: float = 1.0
    window: float = 0.0

    def __str__(self) -> str:
        if self.kind == "crash":
            return f"crash@{self.k}" + (f"[{self.write}]" if self.write else "")
        if self.kind == "gone":
            return f"gone@{self.k}"
        if self.kind == "stale":
            return f"stale:{self.stale}:{self.point or self.revisions}"
        if self.kind == "coalesce":
            return f"coalesce:{self.window:g}s"
        return "none"


@dataclass
class RunResult:
    scenario: str
    perturbation: Perturbation
    converged: bool = False
    unconverged: list[str] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    events: Counter[tuple[str, str]] = field(default_factory=Counter)
    writes: list[Record] = field(default_factory=list)  # committed state writes of the window
    records: list[Record] = field(default_factory=list)  # every request of the window
    crash_after: Record | None = None  # the write the first process was killed after
    invariant_violations: list[str] = field(default_factory=list)
    ever_failed: bool = False
    incarnations: int = 1
    seconds: float = 0.0
    logs: dict[str, str] = field(default_factory=dict)
    note: str = ""

    @property
    def crashed(self) -> bool:
        return self.crash_after is not None


class World:
    """One run's cluster: the simulator (in-process), the proxy, the controller processes, the observer."""

    def __init__(self, scenario: Scenario, workdir: Path) -> None:
        self.scenario = scenario
        self.workdir = workdir
        self.sim: SimCluster | None = None
        self.proxy: PerturbingProxy | None = None
        self.session: aiohttp.ClientSession | None = None
        self.controllers: list[Controller] = []
        self.current: Controller | None = None  # the controller process acting now
        self.checker = InvariantChecker()
        self.ever_failed = False
        self.t0 = time.monotonic()
        self._observer: asyncio.Task[None] | None = None
        self.env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'sim'}"}

    @property
    def api(self) -> Any:
        return self._api

    async def __aenter__(self) -> World:
        from benchmarks.chaos.engine import Api  # the soak's HTTP client: raw requests with retries

        self.workdir.mkdir(parents=True, exist_ok=True)
        config = SimConfig(
            nodes=3, time_scale=0.01, kubeconfig_path=str(self.workdir / "kubeconfig"), **self.scenario.sim_options
        )
        self.sim = SimCluster(config)
        await self.sim.start()
        self.session = aiohttp.ClientSession(
            headers={"User-Agent": "tfjob-reliability/1"}, timeout=aiohttp.ClientTimeout(total=30)
        )
        self._api = Api(self.session, self.sim.url)
        await self._api.call(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", yaml.safe_load(CRD_PATH.read_text())
        )
        await self._api.call("GET", TFJOBS, tolerate=())
        self.proxy = await PerturbingProxy(self.sim.url, self.workdir / "proxy").start()
        self._observer = asyncio.get_running_loop().create_task(self._observe_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._observer is not None:
            self._observer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._observer
        for controller in self.controllers:
            with contextlib.suppress(AssertionError):  # one that ignores SIGTERM is killed by stop()
                await controller.stop()
            (self.workdir / f"{controller.label}.log").write_text(controller.log_text())
        if self.proxy is not None:
            await self.proxy.stop()
        if self.session is not None:
            await self.session.close()
        if self.sim is not None:
            await self.sim.stop()

    async def start_controller(self, label: str, *args: str) -> Controller:
        return await (await self.new_controller(label, *args)).start()

    async def new_controller(self, label: str, *args: str) -> Controller:
        """A controller process with its proxy endpoint, not started yet (its endpoint's rules can be armed)."""
        assert self.proxy is not None
        endpoint = await self.proxy.endpoint(label)
        controller = Controller(label, endpoint, args, self.env)
        self.controllers.append(controller)
        return controller

    # --- reading ---------------------------------------------------------------------------------------
    async def snapshot(self, *, events: bool = False, job: str | None = None) -> Snapshot:
        name = job or self.scenario.job
        status, job = await self.api.call("GET", f"{TFJOBS}/{name}", tolerate=(404,))
        selector = f"?labelSelector={JOB_LABEL}%3D{name}"
        pods = await self.api.items(PODS + selector)
        services = await self.api.items(SERVICES + selector)
        snap = Snapshot(time.monotonic() - self.t0, job if status == 200 else None, pods, services)
        if events:
            snap.events = [
                e
                for e in await self.api.items(EVENTS)
                if (e.get("involvedObject") or {}).get("kind") == "TFJob"
                and (e.get("involvedObject") or {}).get("name") == name
            ]
        if self.scenario.sim_options.get("podgroup_crds"):
            snap.podgroups = await self.api.items(PODGROUPS)
        return snap

    async def _observe_forever(self) -> None:
        while True:
            jobs = await self.api.items(TFJOBS)
            pods = await self.api.items(PODS)
            services = await self.api.items(SERVICES)
            self.checker.observe(time.monotonic() - self.t0, jobs, pods, services)
            if any(is_true(j, "Failed") for j in jobs):
                self.ever_failed = True
            await asyncio.sleep(OBSERVE_INTERVAL)

    async def wait_for(self, check: Callable[[Snapshot], list[str]], what: str, timeout: float = 60.0) -> Snapshot:
        """The first snapshot for which ``check`` finds nothing missing; RunError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            snap = await self.snapshot()
            reasons = check(snap)
            if not reasons:
                return snap
            if time.monotonic() > deadline:
                raise RunError(f"{self.scenario.name}: {what} not reached within {timeout:.0f}s: {reasons[:6]}")
            await asyncio.sleep(OBSERVE_INTERVAL)

    async def until(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> None:
        """Poll ``check`` (a controller's log, say) until it is truthy; RunError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not check():
            self.check_processes()
            if time.monotonic() > deadline:
                raise RunError(f"{self.scenario.name}: {what}: not within {timeout:.0f}s")
            await asyncio.sleep(OBSERVE_INTERVAL)

    def check_processes(self) -> None:
        """RunError if a controller process ended that nobody killed (it crashed). One still being started is
        left to its start(), which says why it did not come up: before its process is spawned (a successor
        started while the action runs) it is not alive, and it has not exited either."""
        for controller in self.controllers:
            if not controller.alive and not controller.killed and not controller.starting:
                tail = "\n".join(controller.log_text().splitlines()[-5:])
                raise RunError(f"{self.scenario.name}: controller {controller.label} exited by itself: {tail}")

    async def converge(
        self, controller: Controller | None, before: Snapshot, timeout: float
    ) -> tuple[Snapshot | None, list[str]]:
        """Wait until the action took effect, the cluster is converged and ``controller`` (None: the current one,
        ``World.current``, which a crash replaces) idle, in ``SETTLE_STREAK`` consecutive probes; returns (the
        final snapshot, []) or (None, why not)."""
        assert self.session is not None
        deadline = time.monotonic() + timeout
        streak = 0
        reasons: list[str] = []
        while time.monotonic() < deadline:
            self.check_processes()
            snap = await self.snapshot()
            reasons = self.scenario.effect(snap, before) + unconverged(snap, self.scenario)
            acting = controller or self.current
            if not reasons and (acting is None or not await acting.idle(self.session)):
                reasons = ["controller busy"]
            streak = 0 if reasons else streak + 1
            if streak >= SETTLE_STREAK:
                return await self.snapshot(events=True), []
            await asyncio.sleep(OBSERVE_INTERVAL)
        return None, reasons


async def setup(world: World, controller: Controller | None) -> Snapshot:
    """Create the scenario's job and bring it to where the story starts; returns the snapshot before the action.
    Without a controller (an adoption) the story starts once the cluster looks converged."""
    scenario = world.scenario
    manifest = scenario.manifest()
    if manifest:
        await world.api.call("POST", TFJOBS, manifest, tolerate=())
    snap = await world.wait_for(lambda s: scenario.ready(s) + unconverged(s, scenario) if manifest else [], "ready")
    if scenario.prepare is not None:
        await scenario.prepare(world, snap)
        snap = await world.wait_for(lambda s: unconverged(s, scenario), "converged after prepare")
    # The controller has done all it had to (idle), so the window starts with nothing of the setup in flight.
    assert world.session is not None
    deadline = time.monotonic() + 30
    streak = 0
    while controller is not None and streak < SETTLE_STREAK:
        streak = streak + 1 if await controller.idle(world.session) else 0
        if time.monotonic() > deadline:
            raise RunError(f"{scenario.name}: the controller did not go idle after the setup")
        await asyncio.sleep(OBSERVE_INTERVAL)
    return await world.snapshot(events=True)


async def run_scenario(
    scenario: Scenario, perturbation: Perturbation, workdir: Path, *, converge_seconds: float = 60.0
) -> RunResult:
    """One run of ``scenario`` under ``perturbation`` (see the module docstring)."""
    if perturbation.kind == "stale":
        return await run_takeover(scenario, perturbation, workdir, converge_seconds=converge_seconds)
    result = RunResult(scenario.name, perturbation)
    started = time.monotonic()
    async with World(scenario, workdir) as world:
        assert world.proxy is not None
        first = await world.new_controller("a", "--no-leader-elect", *scenario.controller_args)
        if not scenario.adopt:  # an adoption starts its controller as the action, below
            await first.start()
        world.current = first
        before = await setup(world, None if scenario.adopt else first)
        mark = world.proxy.mark()
        crash = None
        successor: asyncio.Task[None] | None = None
        if perturbation.kind == "crash":
            match = (lambda r: describe(r) == perturbation.write) if perturbation.write else None
            crash = first.endpoint.crash_after(perturbation.k, first.kill, match)

            async def take_over() -> None:
                # At once, as a Deployment restarts a crashed pod: the action itself may wait for the controller.
                assert crash is not None
                await crash.done.wait()
                world.current = None
                world.current = await world.start_controller("b", "--no-leader-elect", *scenario.controller_args)

            successor = asyncio.get_running_loop().create_task(take_over())
        elif perturbation.kind == "gone":
            first.endpoint.expire_after(perturbation.k)
        elif perturbation.kind == "coalesce":
            first.endpoint.coalesce(perturbation.window)
        try:
            if scenario.adopt:
                await first.start()
            await scenario.act(world, before)
            final, reasons = await world.converge(None, before, converge_seconds)
        finally:
            if successor is not None and not successor.done():
                successor.cancel()
        if crash is not None and crash.fired is not None:
            result.crash_after = crash.fired
            result.incarnations = 2
        elif crash is not None:
            result.note = f"no crash: the run committed {crash.counted} state writes, fewer than {perturbation.k}"
        if perturbation.kind == "gone":
            result.note = f"{first.endpoint.expired_watches} watches ended with a 410"
        _finish(result, world, final, reasons, before, mark)
    result.logs = {c.label: c.log_text() for c in world.controllers}
    result.seconds = time.monotonic() - started
    return result


def _finish(
    result: RunResult, world: World, final: Snapshot | None, reasons: list[str], before: Snapshot, mark: int
) -> None:
    assert world.proxy is not None
    result.converged = final is not None
    result.unconverged = reasons
    if final is not None:
        result.final = signature(final, before)
        result.events = event_counts(final.events)
    result.records = world.proxy.since(mark)
    result.writes = state_writes(result.records)
    result.invariant_violations = [str(v) for v in world.checker.violations]
    result.ever_failed = world.ever_failed


async def past_resource_versions(world: World, revisions: int, resources: Sequence[str]) -> dict[str, int]:
    """The RV at which ``resources`` (qualified names) were as they were ``revisions`` changes ago, counting the
    changes of those resources together; the same RV for all: one consistent state of the past."""
    assert world.sim is not None
    rvs: list[int] = []
    for resource in resources:
        since = world.sim.store.oldest_resumable_rv(resource)
        history = await world.api.sim(f"/history?resource={resource}&since={since}", method="GET")
        rvs.extend(int(e["rv"]) for e in history["events"])
    rvs.sort()
    if not rvs:
        raise RunError("no history to go back in")
    at = rvs[-(revisions + 1)] if revisions < len(rvs) else rvs[0]
    return {resource: at for resource in resources}


# Named moments of a job's history, as (resource, first or last) creation they precede: the view in which the
# controller's first pass had created the pods but no service yet, or nothing yet; the view from just before the
# last pod was created (a failover's replacement, say).
POINTS = {
    "before-first-service": ("services", 0),
    "before-first-pod": ("pods", 0),
    "before-last-pod": ("pods", -1),
}


async def point_resource_versions(world: World, point: str, resources: Sequence[str]) -> dict[str, int]:
    """The RV just before the creation ``POINTS[point]`` names, for every one of ``resources``."""
    assert world.sim is not None
    resource, which = POINTS[point]
    since = world.sim.store.oldest_resumable_rv(resource)
    history = await world.api.sim(f"/history?resource={resource}&since={since}", method="GET")
    added = [int(e["rv"]) for e in history["events"] if e["type"] == "ADDED"]
    if not added:
        raise RunError(f"no {resource} were ever created: no moment {point}")
    return {r: added[which] - 1 for r in resources}


STALE_RESOURCES = {
    "all": ("tfjobs.kubeflow.org", "pods", "services"),
    "tfjobs": ("tfjobs.kubeflow.org",),
    "pods": ("pods",),
    "services": ("services",),
}


async def run_takeover(
    scenario: Scenario, perturbation: Perturbation, workdir: Path, *, converge_seconds: float = 60.0
) -> RunResult:
    """The scenario told by leader ``a`` with a standby ``b`` (both leader-elected), unperturbed; once it has
    converged, ``a`` is SIGKILLed, its Lease deleted (its expiry, fast-forwarded: ``a`` is dead) and ``b`` takes
    over, its first list of each resource of ``perturbation.stale`` served ``perturbation.revisions`` changes old
    and the replay of newer events held back for ``perturbation.hold`` seconds. The window is the takeover: a
    standby taking over a converged cluster has nothing to write."""
    result = RunResult(scenario.name, perturbation, incarnations=2)
    started = time.monotonic()
    async with World(scenario, workdir) as world:
        assert world.proxy is not None
        if scenario.adopt:  # the story is the leader's start
            before = await setup(world, None)
        leader = await world.start_controller("a", *scenario.controller_args)
        await world.until(lambda: leader.process.logged("acquired lease"), "a leads")
        standby = await world.start_controller("b", *scenario.controller_args)
        await world.until(lambda: standby.process.logged("waiting to acquire lease"), "b stands by")
        if not scenario.adopt:
            before = await setup(world, leader)
        await scenario.act(world, before)
        final, reasons = await world.converge(leader, before, converge_seconds)
        if final is None:
            raise RunError(f"{scenario.name}: the story did not converge before the takeover: {reasons[:6]}")
        mark = world.proxy.mark()
        resources = STALE_RESOURCES[perturbation.stale]
        if perturbation.point:
            at = await point_resource_versions(world, perturbation.point, resources)
        else:
            at = await past_resource_versions(world, perturbation.revisions, resources)
        stale = bool(perturbation.revisions or perturbation.point)
        if stale:
            standby.endpoint.stale_first_lists(at, perturbation.hold)
        await leader.kill()
        await world.api.call("DELETE", f"{LEASES}/{LEASE}", tolerate=(404,))
        await world.until(lambda: standby.process.logged("acquired lease"), "b leads")
        final, reasons = await world.converge(standby, before, converge_seconds)
        result.note = f"first lists served at {at}" if stale else "fresh first lists"
        _finish(result, world, final, reasons, before, mark)
    result.logs = {c.label: c.log_text() for c in world.controllers}
    result.seconds = time.monotonic() - started
    return result


# --- judging -------------------------------------------------------------------------------------------
def _written_objects(writes: Sequence[Record]) -> set[tuple[str, str, str]]:
    """(method, target, name) of every committed write; a create (POST) names its object in the body, so creates
    are keyed by the name the executor's event or the request path gives (collection POSTs carry no name)."""
    return {(w.method, w.target, w.name or w.created) for w in writes}


def judge(baseline: RunResult, run: RunResult, scenario: Scenario) -> list[str]:
    """Why ``run`` is worse than ``baseline`` (empty: it is as good); see the module docstring."""
    problems: list[str] = []
    if not run.converged:
        problems.append(f"did not converge: {run.unconverged[:6]}")
    problems.extend(f"invariant: {v}" for v in run.invariant_violations)
    if run.ever_failed and not scenario.may_fail:
        problems.append("the job was Failed at some point")
    if run.converged:
        for key, expected in baseline.final.items():
            got = run.final.get(key)
            if got != expected:
                problems.append(f"final {key}: {got!r}, unperturbed {expected!r}")
        problems.extend(_judge_events(baseline, run))
    if run.perturbation.kind == "stale":
        # The standby took over a converged cluster: whatever it got the server to commit, it did on the stale view
        # (a worker re-created or deleted, a status written from old pods); what the server refused (a 409 on the
        # status, a 404 or a uid conflict on a delete, AlreadyExists on a create) did no harm.
        for write in run.writes:
            problems.append(f"the standby wrote on its stale view: {describe(write)} -> {write.code}")
        return problems
    new_objects = _written_objects(run.writes) - _written_objects(baseline.writes)
    for method, target, name in sorted(new_objects):
        problems.append(f"wrote what the unperturbed run never wrote: {method} {target} {name}")
    return problems


def _judge_events(baseline: RunResult, run: RunResult) -> list[str]:
    problems = []
    extra = run.events - baseline.events
    for (reason, message), n in sorted(extra.items()):
        problems.append(f"event {reason} {message!r} {n} more time(s) than unperturbed")
    missing = baseline.events - run.events
    for (reason, message), n in sorted(missing.items()):
        if not _lost_with_crash(run, reason, message):
            problems.append(f"event {reason} {message!r} missing ({n}) and not explained by the crash")
    return problems


def _lost_with_crash(run: RunResult, reason: str, message: str) -> bool:
    """An event missing from ``run`` because it died in the killed process's queue: that process committed the
    write the event reports (a status write, for the decision's events) and never sent the event."""
    if run.crash_after is None:
        return False
    killed = run.crash_after.endpoint
    mine = [r for r in run.records if r.endpoint == killed]
    if any(r.reason == reason and r.message == message and r.committed for r in mine):
        return False  # it was written; losing it later is not the crash's doing
    if reason in EXECUTOR_EVENTS:
        method, resource = EXECUTOR_EVENTS[reason]
        name = message.rsplit(": ", 1)[-1]
        return any(
            r.committed and r.method == method and r.target == resource and (r.name or r.created) == name for r in mine
        )
    return any(r.committed and r.target == "tfjobs.kubeflow.org/status" for r in mine)


def extra_writes(baseline: RunResult, run: RunResult) -> int:
    """Committed writes beyond the unperturbed run's (a standby taking over a converged cluster: all of its writes)."""
    if run.perturbation.kind == "stale":
        return len(run.writes)
    return len(run.writes) - len(baseline.writes)


def describe(write: Record) -> str:
    """``POST pods j-worker-1``: method, resource (and subresource) and object name of a write."""
    return f"{write.method} {write.target} {write.name or write.created}".strip()


def describe_writes(writes: Sequence[Record]) -> list[str]:
    return [describe(w) for w in writes]


# --- sweeps ----------------------------------------------------------------------------------------------
@dataclass
class Verdict:
    """One perturbed run judged against its scenario's unperturbed run."""

    run: RunResult
    problems: list[str]
    extra_writes: int

    @property
    def passed(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        where = f" after {self.run.crash_after}" if self.run.crash_after else ""
        head = f"{self.run.scenario} {self.run.perturbation}{where}: {'ok' if self.passed else 'FAILED'}"
        head += f" ({self.run.seconds:.1f}s, {len(self.run.writes)} writes, {self.extra_writes:+d})"
        return "\n  ".join([head, *([self.run.note] if self.run.note else []), *self.problems])


async def baseline_run(scenario: Scenario, workdir: Path) -> RunResult:
    """The unperturbed run; RunError if it does not converge (there is nothing to compare with then)."""
    baseline = await run_scenario(scenario, Perturbation(), workdir)
    if not baseline.converged:
        raise RunError(f"{scenario.name}: the unperturbed run did not converge: {baseline.unconverged[:6]}")
    return baseline


async def perturbed(
    scenario: Scenario,
    baseline: RunResult,
    perturbation: Perturbation,
    workdir: Path,
    *,
    converge_seconds: float = 60.0,
) -> Verdict:
    run = await run_scenario(scenario, perturbation, workdir, converge_seconds=converge_seconds)
    return Verdict(run, judge(baseline, run, scenario), extra_writes(baseline, run))


async def crash_sweep(
    scenario: Scenario,
    workdir: Path,
    ks: Sequence[int] | None = None,
    progress: Callable[[str], None] = lambda _line: None,
    baseline: RunResult | None = None,
) -> tuple[RunResult, list[Verdict]]:
    """The unperturbed run (unless given), then one run per k in ``ks`` (default: every write of the unperturbed
    run's window) with the controller SIGKILLed after its k-th committed state write and a new process started."""
    baseline = baseline or await baseline_run(scenario, workdir / "unperturbed")
    progress(f"{scenario.name}: unperturbed, {len(baseline.writes)} writes: {describe_writes(baseline.writes)}")
    verdicts = []
    for k in ks if ks is not None else range(1, len(baseline.writes) + 1):
        verdict = await perturbed(scenario, baseline, Perturbation("crash", k=k), workdir / f"crash-{k}")
        progress(str(verdict))
        verdicts.append(verdict)
    return baseline, verdicts


def require(condition: bool, what: str) -> None:
    """RunError unless ``condition``: a run that did not bring about the situation it is meant to judge (the crash
    did not happen, the write to crash after was not the one expected) is no verdict on the controller: it errors
    instead of passing or failing."""
    if not condition:
        raise RunError(f"the run did not set up what it judges: {what}")
