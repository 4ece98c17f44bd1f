"""How long a TensorFlow worker takes to rejoin: the rejoin-time benchmark (a script, not a test).

Runs the example program (examples/dynamic-workers/train.py with its manifest, as a 1 PS + 3 worker dynamic
job) on the simulator's process runtime, with the simulator (``tfjob-controller sim --runtime process``) and
the controller (``tfjob-controller run``) as separate processes, and fails one worker at a time, in turn:

- ``delete``: ``kubectl delete pod`` (the DELETE it sends: graceful, propagationPolicy Background);
- ``evict``: a ``policy/v1`` Eviction posted to ``pods/NAME/eviction``;
- ``oom``: the pod's memory limit: its process allocates until the memory cgroup kills it (OOMKilled, 137);
- ``scale-up``: Worker replicas raised 3 -> 4 through the scale subresource (``kubectl scale``), measured
  until the new worker's first step, then lowered back to 3.

For each it records, on this machine's clock: the fault, the old pod gone (removed from the API; for an OOM
kill, reported terminated OOMKilled), the replacement created, scheduled, Running, and from its log
(``pods/log?follow=true&timestamps=true``, stamped by the simulated kubelet as each line arrives) its
interpreter start, TensorFlow imported, joined and first training step. Pod times are when this script's
watch saw the change. The job's global step over time comes from every worker's step lines.

Each worker runs under ``probe`` (below): it logs when Python started and when TensorFlow was imported, then
runs sim/tfjob_sim/programs/oom_on_demand.py (how the demo and the end-to-end tests OOM-kill a chosen pod),
which runs train.py. The controller runs with ``--failover-backoff 0.01 0.01``: by default a repeated OOM kill of one
index waits 10 s, 20 s, ... (crash-loop back-off, a policy, not the cost of rejoining); the first OOM kill of
an index and every deletion or eviction never wait, so the figures are what those get with the defaults.

The raw record (every timestamp, the step series, load averages, probes, the controller's metrics) is
written after each failover, so an interrupted run keeps what it measured; ``--summarize RAW`` prints the
tables of a raw record again.

Usage: .venv/bin/python benchmarks/rejoin.py [--per-kind 20] [--scale-ups 10] [--every 20] [--settle 8]
       [--raw docs/benchmarks/raw/rejoin-<date>.json] [--workdir DIR]
       .venv/bin/python benchmarks/rejoin.py --summarize docs/benchmarks/raw/rejoin-<date>.json
Needs root (the process runtime) and TensorFlow in this interpreter.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# Every other module is imported where it is used: each worker runs this file as its probe, whose "Python
# started" line must not wait for them (asyncio alone takes tens of milliseconds to import).

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "dynamic-workers"
OOM_ON_DEMAND = ROOT / "sim" / "tfjob_sim" / "programs" / "oom_on_demand.py"
KINDS = ("delete", "evict", "oom", "scale-up")
FAILOVER_KINDS = KINDS[:3]
# The controller's failover reason each kind must produce (status.dynamicWorkers).
REASONS = {"delete": "Deleted", "evict": "Evicted", "oom": "OOMKilled"}

# --- the pods' log lines ----------------------------------------------------------------------------------
STAMPED = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?Z (.*)$")
STEP = re.compile(r"^step=(\d+) ")
JOINED = re.compile(r"^event=joined step=(\d+) ")
# What the old instance printed on its way out: train.py on SIGTERM, oom_on_demand.py as it starts allocating.
LAST_WORDS = ("event=stopped ", "event=allocating-until-oom-killed")
PROBE_STARTED = "event=probe-started"
PROBE_IMPORTED = "event=probe-tensorflow-imported"


def parse_stamped(line: str) -> tuple[float, str] | None:
    """(seconds since the epoch, text) of a ``pods/log?timestamps=true`` line (RFC3339Nano prefix); None for
    a line without the prefix."""
    found = STAMPED.match(line.rstrip("\r\n"))
    if not found:
        return None
    whole, fraction, text = found.groups()
    seconds = _dt.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=_dt.UTC).timestamp()
    if fraction:
        seconds += int(fraction) / 10 ** len(fraction)
    return seconds, text


def step_of(text: str) -> int | None:
    """The global step of a training step line of train.py, None for any other line."""
    found = STEP.match(text)
    return int(found.group(1)) if found else None


def last_words(lines: Iterable[tuple[float, str]]) -> float | None:
    """When an instance said it was stopping (SIGTERM) or starting to allocate (OOM), None if it did not."""
    return next((ts for ts, text in lines if text.startswith(LAST_WORDS)), None)


def milestones(lines: Iterable[tuple[float, str]]) -> dict[str, Any]:
    """When a worker's process reached each point of its start, from its stamped log lines: ``started``
    (the probe's first line: the interpreter runs), ``imported`` (TensorFlow imported), ``joined`` (train.py
    found the model: its server, graph and session are up) and ``first_step`` with its global step."""
    out: dict[str, Any] = {"started": None, "imported": None, "joined": None, "first_step": None, "step": None}
    for ts, text in lines:
        if out["started"] is None and text.startswith(PROBE_STARTED):
            out["started"] = ts
        elif out["imported"] is None and text.startswith(PROBE_IMPORTED):
            out["imported"] = ts
        elif out["joined"] is None and JOINED.match(text):
            out["joined"] = ts
        elif out["first_step"] is None and (step := step_of(text)) is not None:
            out["first_step"], out["step"] = ts, step
    return out


# --- statistics -------------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile: the smallest value with at least ``q`` % of the values at or below it
    (with 20 values p99 is the maximum; no interpolation invents a value that was not measured)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {q}")
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def describe(values: Sequence[float]) -> dict[str, float | int] | None:
    """n, p50, p99, max, min and mean of ``values`` (None when there are none)."""
    if not values:
        return None
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p99": percentile(values, 99),
        "max": max(values),
        "min": min(values),
        "mean": sum(values) / len(values),
    }


def global_steps(points: Iterable[tuple[float, int]]) -> list[tuple[float, int]]:
    """The job's global step over time from every worker's (time, step) lines: sorted by time, keeping a
    point only when it raises the highest step seen (lines of different workers arrive interleaved)."""
    series: list[tuple[float, int]] = []
    for ts, step in sorted(points):
        if not series or step > series[-1][1]:
            series.append((ts, step))
    return series


def rate(series: Sequence[tuple[float, int]], start: float, end: float) -> float | None:
    """Global steps per second between the first and the last point inside [start, end] (None with fewer
    than two points or no time between them): measured between observed points, never extrapolated."""
    inside = [(ts, step) for ts, step in series if start <= ts <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def step_before(series: Sequence[tuple[float, int]], when: float) -> int | None:
    """The highest global step logged before ``when``."""
    found = [step for ts, step in series if ts < when]
    return found[-1] if found else None


# Segments of one event: (label, from, to), keys of the event record. ``gone`` is the old pod removed from the
# API, or for an OOM kill its container reported terminated (the controller acts on that).
# The replacement's start, the same after a failover and a scale-up.
STARTING = (
    ("created -> Running", "created", "running"),
    ("Running -> python started", "running", "started"),
    ("python started -> TF imported", "started", "imported"),
    ("TF imported -> joined", "imported", "joined"),
    ("joined -> first step", "joined", "first_step"),
    ("Running -> first step", "running", "first_step"),
)
SEGMENTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "failover": (
        ("fault -> old said stopping", "fault", "old_last_words"),
        ("old said stopping -> old exited", "old_last_words", "old_exited"),
        ("old exited -> gone", "old_exited", "gone"),
        ("fault -> gone", "fault", "gone"),
        ("gone -> created", "gone", "created"),
        *STARTING,
        ("gone -> first step", "gone", "first_step"),
        ("fault -> first step", "fault", "first_step"),
    ),
    "scale-up": (("raised -> created", "fault", "created"), *STARTING, ("raised -> first step", "fault", "first_step")),
}


def segments(event: dict[str, Any]) -> dict[str, float]:
    """The durations of one event's segments that both ends of were observed."""
    table = SEGMENTS["scale-up" if event["kind"] == "scale-up" else "failover"]
    out = {}
    for label, start, end in table:
        if event.get(start) is not None and event.get(end) is not None:
            out[label] = event[end] - event[start]
    return out


def throughput(event: dict[str, Any], series: Sequence[tuple[float, int]], window: float) -> dict[str, float | None]:
    """Global steps/s in the ``window`` s before the fault, from the fault to the replacement's first step
    (during), and in the ``window`` s after that first step."""
    fault, first = event["fault"], event.get("first_step")
    return {
        "before": rate(series, fault - window, fault),
        "during": rate(series, fault, first) if first is not None else None,
        "after": rate(series, first, first + window) if first is not None else None,
    }


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    """Per kind: each segment described, the throughput before/during/after, and the rejoin check (the
    replacement's first global step not below the highest step logged before the fault)."""
    series = [(ts, step) for ts, step in raw["steps"]]
    window = raw["settings"]["settle"]
    out: dict[str, Any] = {}
    for kind in KINDS:
        events = [e for e in raw["events"] if e["kind"] == kind]
        if not events:
            continue
        durations: dict[str, list[float]] = {}
        rates: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        below, gaps = [], []
        for event in events:
            if event.get("step") is not None and event.get("shared_at_first_step") is not None:
                gaps.append(float(event["step"] - event["shared_at_first_step"]))
            for label, seconds in segments(event).items():
                durations.setdefault(label, []).append(seconds)
            for phase, value in throughput(event, series, window).items():
                if value is not None:
                    rates[phase].append(value)
            if event.get("step") is None or event["step"] < event["shared_before"]:
                below.append(event)
        table = SEGMENTS["scale-up" if kind == "scale-up" else "failover"]
        if kind == "oom":
            # The first OOM kill of an index is replaced at once; a repeated one waits for its back-off (10 ms
            # here) until retryAfter, which the controller records in whole seconds, rounded up.
            seen: set[int] = set()
            first, repeated = [], []
            for event in events:
                if event.get("gone") is not None and event.get("created") is not None:
                    (repeated if event["index"] in seen else first).append(event["created"] - event["gone"])
                seen.add(event["index"])
            streaks = {"an index's first": describe(first), "a repeated": describe(repeated)}
        out[kind] = {
            "count": len(events),
            "segments": {label: describe(durations.get(label, [])) for label, _, _ in table},
            "throughput": {phase: describe(values) for phase, values in rates.items()},
            "rejoined_at_shared_step": len(events) - len(below),
            # The replacement's first global step minus the job's highest step logged before it (workers log
            # every TRAIN_LOG_EVERY steps, so a gap up to about that is "at the shared step").
            "first_step_minus_job_step": describe(gaps),
            "not_at_shared_step": [{"index": e["index"], "fault": e["fault"]} for e in below],
        }
        if kind == "oom":
            out[kind]["gone -> created by OOM kill of the index"] = streaks
    return out


def _gap(result: dict[str, Any]) -> str:
    gap = result.get("first_step_minus_job_step")
    if not gap:
        return ""
    return f"; its first step minus the job's last logged step before it: p50 {gap['p50']:g}, max {gap['max']:g}"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def render_markdown(summary: dict[str, Any]) -> str:
    """The tables of docs/benchmarks/rejoin.md: seconds per segment and steps/s per phase, per kind."""
    lines = []
    for kind, result in summary.items():
        lines += [
            f"**{kind}** ({result['count']} events; first step at the shared global step: "
            f"{result['rejoined_at_shared_step']} of {result['count']}{_gap(result)})",
            "",
            "| segment (s) | n | p50 | p99 | max |",
            "|---|---|---|---|---|",
        ]
        for label, stats in result["segments"].items():
            if stats is None:
                lines.append(f"| {label} | 0 | – | – | – |")
            else:
                lines.append(
                    f"| {label} | {stats['n']} | {_fmt(stats['p50'])} | {_fmt(stats['p99'])} | {_fmt(stats['max'])} |"
                )
        for streak, stats in (result.get("gone -> created by OOM kill of the index") or {}).items():
            if stats:
                lines.append(
                    f"| gone -> created, {streak} OOM kill | {stats['n']} | {_fmt(stats['p50'])} | "
                    f"{_fmt(stats['p99'])} | {_fmt(stats['max'])} |"
                )
        lines += ["", "| global steps/s | n | p50 | mean | min |", "|---|---|---|---|---|"]
        for phase, stats in result["throughput"].items():
            if stats is None:
                lines.append(f"| {phase} | 0 | – | – | – |")
            else:
                lines.append(
                    f"| {phase} | {stats['n']} | {_fmt(stats['p50'], 1)} | {_fmt(stats['mean'], 1)} | "
                    f"{_fmt(stats['min'], 1)} |"
                )
        lines.append("")
    return "\n".join(lines)


def controller_failovers(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    """Count and mean of the controller's own ``tfjob_worker_failover_seconds`` per reason, from the samples the
    run scraped (``name{labels}`` -> value)."""
    found: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        name, _, labels = key.partition("{")
        if name not in ("tfjob_worker_failover_seconds_sum", "tfjob_worker_failover_seconds_count"):
            continue
        reason = dict(pair.split("=", 1) for pair in labels.rstrip("}").split(",") if "=" in pair).get("reason", "")
        found.setdefault(reason, {})[name.rsplit("_", 1)[1]] = value
    return {
        reason: {"count": v["count"], "mean": v["sum"] / v["count"]}
        for reason, v in sorted(found.items())
        if v.get("count") and "sum" in v
    }


def render_context(raw: dict[str, Any]) -> str:
    """The bare start-up probes, the controller's own failover metric and the load, as Markdown."""
    lines = [
        "| bare process on this machine: start -> first line | n | wall p50 (s) | wall max (s) | CPU p50 (s) |",
        "|---|---|---|---|---|",
    ]
    for label, key in (
        ("python -c 'print(...)'", "python"),
        ("python -c 'import tensorflow'", "tensorflow_import"),
    ):
        probes = raw["probes"].get(key, [])
        stats = describe([probe[1] for probe in probes])
        cpu = describe([probe[2] for probe in probes if len(probe) > 2])
        if stats:
            lines.append(
                f"| {label} | {stats['n']} | {_fmt(stats['p50'])} | {_fmt(stats['max'])} | "
                f"{_fmt(cpu['p50'] if cpu else None)} |"
            )
    failovers = controller_failovers(raw.get("controller_metrics") or {})
    if failovers:
        lines += ["", "| controller's tfjob_worker_failover_seconds | count | mean (s) |", "|---|---|---|"]
        lines += [f"| reason={reason} | {v['count']:g} | {_fmt(v['mean'])} |" for reason, v in failovers.items()]
    reconciles = raw.get("controller_metrics") or {}
    count = next(
        (v for k, v in reconciles.items() if k.startswith("controller_runtime_reconcile_time_seconds_count")), 0
    )
    total = next((v for k, v in reconciles.items() if k.startswith("controller_runtime_reconcile_time_seconds_sum")), 0)
    if count:
        lines += [
            "",
            f"The controller's reconciles during the run: {count:g}, {1000 * total / count:.1f} ms each on average.",
        ]
    loads = raw.get("load") or []
    if loads:
        one = [sample[1] for sample in loads]
        lines += [
            "",
            f"Load average (1 min) during the run: min {min(one):.2f}, p50 {percentile(one, 50):.2f}, "
            f"max {max(one):.2f} ({len(one)} samples, every 10 s).",
        ]
    not_running = raw.get("job_not_running_polls")
    if not_running is not None:
        lines.append(f"Polls (1/s) that found the job not Running once it ran: {len(not_running)}.")
    return "\n".join(lines)


# --- the probe: the command every worker runs ---------------------------------------------------------------
def probe(argv: list[str]) -> None:
    """``rejoin.py probe PROGRAM [ARG...]``: log that Python runs, import TensorFlow and log it, then run
    PROGRAM as ``__main__`` (TensorFlow stays imported: the program's own import is then free)."""
    import runpy

    # This script's directory comes first on sys.path; it must not shadow any module TensorFlow imports.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    print(f"{PROBE_STARTED}", flush=True)
    # Like train.py, before the import: TensorFlow's C++ info lines off.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow  # noqa: F401

    print(f"{PROBE_IMPORTED}", flush=True)
    program, *arguments = argv
    sys.argv = [program, *arguments]
    runpy.run_path(program, run_name="__main__")


# --- the run ------------------------------------------------------------------------------------------------
JOB = "rejoin"
NS = "default"
WORKERS = 3
REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
# A replacement that has not trained after this long is a failure of the run, not a slow rejoin.
EVENT_TIMEOUT = 600.0
# Bare start-up probes: each prints the CPU seconds it used (user + system) as its first line.
CPU_USED = "import resource; r = resource.getrusage(resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime, flush=True)"
PYTHON_START = CPU_USED
TF_IMPORT = "import os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1'); import tensorflow; " + CPU_USED


def example_job(
    name: str, *, workers: int, dynamic: bool, steps: int, worker_command: list[str], namespace: str = "default"
) -> dict[str, Any]:
    """examples/dynamic-workers/tfjob.yaml with this checkout's program, run by this interpreter."""
    import copy

    import yaml

    job = copy.deepcopy(yaml.safe_load((EXAMPLE / "tfjob.yaml").read_text()))
    job["metadata"] = {"name": name, "namespace": namespace}
    job["spec"]["enableDynamicWorker"] = dynamic
    specs = job["spec"]["tfReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    for replica_type, spec in specs.items():
        pod_spec = spec["template"]["spec"]
        pod_spec.pop("volumes")
        container = pod_spec["containers"][0]
        container.pop("volumeMounts")
        container["command"] = [sys.executable, *(worker_command if replica_type == "Worker" else [])]
        container["command"].append(str(EXAMPLE / "train.py"))
        # Without the checkpoint volume (popped above) the job trains without checkpoints, as it did before
        # they existed: worker 0 refuses a CHECKPOINT_DIR that is not a directory.
        env = {e["name"]: e for e in container.get("env", []) if not e["name"].startswith("CHECKPOINT_")}
        env["TRAIN_STEPS"] = {"name": "TRAIN_STEPS", "value": str(steps)}
        env["POD_UID"] = {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
        container["env"] = list(env.values())
    return job


class BenchError(Exception):
    """The run cannot go on (a process did not start, a replacement never trained)."""


def plan(per_kind: int, scale_ups: int) -> list[str]:
    """The events in the order they run: the kinds interleaved, so that a run cut short has as many of each."""
    wanted = {kind: per_kind for kind in FAILOVER_KINDS} | {"scale-up": scale_ups}
    order = []
    for round_ in range(max(wanted.values(), default=0)):
        order += [kind for kind in KINDS if round_ < wanted[kind]]
    return order


def failover_index(n: int) -> int:
    """The worker the ``n``-th failover (from 0) hits: the kinds take turns, and each round of them starts one
    index further, so that every kind hits every worker."""
    return (1 + n + n // len(FAILOVER_KINDS)) % WORKERS


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        import asyncio

        self.args = args
        self.workdir = workdir
        self.trigger_dir = workdir / "oom"
        self.trigger_dir.mkdir(parents=True, exist_ok=True)
        self.pods: dict[str, dict[str, Any]] = {}  # uid -> what was seen of the pod, and when
        self.lines: dict[str, list[tuple[float, str]]] = {}  # uid -> its stamped log lines
        self.points: list[tuple[float, int]] = []  # (time, global step) of every worker's step lines
        self.not_running: list[float] = []  # job polls that found the job not Running, once it ran
        self.measuring = False
        self.changed = asyncio.Event()
        self.tasks: set[Any] = set()
        self.processes: list[Any] = []
        self.raw: dict[str, Any] = {}

    # -- bookkeeping --------------------------------------------------------------------------------------
    def notify(self) -> None:
        changed, self.changed = self.changed, __import__("asyncio").Event()
        changed.set()

    async def until(self, check: Any, timeout: float, what: str) -> Any:
        import asyncio

        deadline = time.monotonic() + timeout
        while True:
            changed = self.changed
            result = check()
            if result:
                return result
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")
            try:
                await asyncio.wait_for(changed.wait(), min(left, 1.0))
            except TimeoutError:
                pass

    def spawn(self, coro: Any) -> None:
        import asyncio

        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: Any) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            print(f"background task failed: {task.exception()!r}", file=sys.stderr, flush=True)

    def live(self, name: str) -> dict[str, Any] | None:
        found = [p for p in self.pods.values() if p["name"] == name and p["deleted"] is None]
        return max(found, key=lambda p: p["created"]) if found else None

    def training(self, index: int) -> bool:
        pod = self.live(f"{JOB}-worker-{index}")
        return (
            pod is not None
            and pod["deleting"] is None
            and milestones(self.lines.get(pod["uid"], []))["step"] is not None
        )

    def shared_step(self) -> int:
        return max((step for _, step in self.points), default=0)

    # -- processes ---------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        path = os.pathsep.join([str(ROOT), str(ROOT / "sim"), *filter(None, [os.environ.get("PYTHONPATH")])])
        return {k: v for k, v in os.environ.items() if not k.startswith("TFJOB_CONTROLLER_")} | {"PYTHONPATH": path}

    async def start_processes(self) -> None:
        import asyncio

        from tfjob_sim.testing.processes import free_port

        kubeconfig = self.workdir / "kubeconfig"
        with (self.workdir / "sim.log").open("wb") as sim_log:
            sim = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "controller", "--log-format", "json", "sim", "--runtime", "process",
                "--port", "0", "--kubeconfig", str(kubeconfig), "--nodes", "3",
                stdout=asyncio.subprocess.PIPE, stderr=sim_log, env=self.env(), cwd=ROOT,
            )  # fmt: skip
        self.processes.append(sim)
        assert sim.stdout is not None
        line = (await asyncio.wait_for(sim.stdout.readline(), 120)).decode()
        if "serving at " not in line:
            raise BenchError(f"the simulator did not start (see {self.workdir / 'sim.log'}): {line!r}")
        self.base_url = line.split("serving at ", 1)[1].split()[0]
        self.kubeconfig = kubeconfig
        self.metrics_port = free_port()
        with (self.workdir / "controller.log").open("wb") as controller_log:
            controller = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "controller", "--log-format", "json", "run",
                "--kubeconfig", str(kubeconfig), "--no-leader-elect",
                "--metrics-addr", f"127.0.0.1:{self.metrics_port}", "--health-addr", f"127.0.0.1:{free_port()}",
                "--failover-backoff", "0.01", "0.01",
                stdout=controller_log, stderr=controller_log, env=self.env(), cwd=ROOT,
            )  # fmt: skip
        self.processes.append(controller)

    async def stop_processes(self) -> None:
        import asyncio

        for proc in reversed(self.processes):  # the controller first, then the simulator (and its pods)
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 60)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()

    # -- observing -----------------------------------------------------------------------------------------
    def on_pod(self, kind: str, pod: dict[str, Any], now: float) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        seen = self.pods.get(meta["uid"])
        if seen is None:
            seen = self.pods[meta["uid"]] = {
                "name": meta["name"],
                "uid": meta["uid"],
                "type": labels.get(REPLICA_TYPE),
                "index": int(labels.get(REPLICA_INDEX, "-1")),
                "created": now,
                "scheduled": None,
                "running": None,
                "terminated": None,
                "reason": None,
                "deleting": None,
                "deleted": None,
                "log_ended": None,
            }
        status = pod.get("status") or {}
        if seen["scheduled"] is None and (pod.get("spec") or {}).get("nodeName"):
            seen["scheduled"] = now
        if seen["running"] is None and status.get("phase") == "Running":
            seen["running"] = now
            if seen["type"] == "worker":
                self.spawn(self.follow(seen))
        for container in status.get("containerStatuses") or []:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated and seen["terminated"] is None:
                seen["terminated"], seen["reason"] = now, terminated.get("reason")
        if meta.get("deletionTimestamp") and seen["deleting"] is None:
            seen["deleting"] = now
        if kind == "DELETED" and seen["deleted"] is None:
            seen["deleted"] = now
        self.notify()

    async def watch_pods(self) -> None:

        from controller.runtime.client import PODS

        selector = f"training.kubeflow.org/job-name={JOB}"
        version = None
        while True:
            if version is None:
                listed = await self.client.list(PODS, namespace=NS, label_selector=selector)
                now = time.time()
                for pod in listed["items"]:
                    self.on_pod("ADDED", pod, now)
                version = listed["metadata"]["resourceVersion"]
            try:
                async for event in self.client.watch(
                    PODS, namespace=NS, label_selector=selector, resource_version=version, timeout_seconds=300
                ):
                    now = time.time()
                    if event["type"] == "ERROR":
                        version = None
                        break
                    version = event["object"]["metadata"].get("resourceVersion", version)
                    if event["type"] != "BOOKMARK":
                        self.on_pod(event["type"], event["object"], now)
            except Exception as exc:  # a broken watch: relist and watch again, as an informer does
                print(f"pod watch ended ({exc!r}); relisting", file=sys.stderr, flush=True)
                version = None

    async def follow(self, pod: dict[str, Any]) -> None:
        """Every line of one worker instance, as ``kubectl logs -f --timestamps`` reads them."""

        import aiohttp

        lines = self.lines.setdefault(pod["uid"], [])
        url = f"{self.base_url}/api/v1/namespaces/{NS}/pods/{pod['name']}/log"
        params = {"container": "tensorflow", "follow": "true", "timestamps": "true"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with self.http.get(url, params=params, timeout=timeout) as response:
            if response.status != 200:
                pod["log_error"] = f"{response.status}: {(await response.text())[:200]}"
                return
            async for raw in response.content:
                parsed = parse_stamped(raw.decode(errors="replace"))
                if parsed is None:
                    continue
                lines.append(parsed)
                step = step_of(parsed[1])
                if step is not None:
                    self.points.append((parsed[0], step))
                self.notify()
        # A followed log ends when the instance's process has exited and its output is drained.
        pod["log_ended"] = time.time()
        self.notify()

    async def watch_job(self) -> None:
        """Poll the job once a second: every poll that finds it not Running is recorded."""
        import asyncio

        from controller.tfjob.executor import TFJOBS

        while True:
            job = await self.client.get(TFJOBS, JOB, namespace=NS)
            self.job = job
            conditions = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or []}
            if self.measuring and conditions.get("Running") != "True":
                self.not_running.append(time.time())
            await asyncio.sleep(1.0)

    async def sample_load(self) -> None:
        import asyncio

        while True:
            self.raw["load"].append([round(time.time(), 1), *loadavg()])
            await asyncio.sleep(10.0)

    # -- bare start-up probes -------------------------------------------------------------------------------
    async def first_line_after(self, code: str) -> tuple[float, float]:
        """Seconds from spawning ``python -c code`` to its first line of output, and the number on that line
        (the CPU seconds the probe used)."""
        import asyncio

        started = time.time()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        elapsed = time.time() - started
        await proc.wait()
        if not line:
            raise BenchError(f"python -c {code!r} printed nothing (exit {proc.returncode})")
        return elapsed, float(line)

    async def probes(self, when: str) -> None:
        for _ in range(self.args.probes):
            self.raw["probes"]["python"].append([when, *await self.first_line_after(PYTHON_START)])
            self.raw["probes"]["tensorflow_import"].append([when, *await self.first_line_after(TF_IMPORT)])

    # -- the job and its events -------------------------------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        job = example_job(
            JOB,
            workers=WORKERS,
            dynamic=True,
            steps=10**9,
            worker_command=[str(Path(__file__).resolve()), "probe", str(OOM_ON_DEMAND), str(self.trigger_dir)],
        )
        container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        for env in container["env"]:
            if env["name"] == "TRAIN_LOG_EVERY":
                env["value"] = str(self.args.log_every)
        return job

    def replacement(self, name: str, old_uid: str | None, after: float) -> dict[str, Any] | None:
        """The new pod ``name`` once it has logged a training step."""
        for pod in self.pods.values():
            if pod["name"] == name and pod["uid"] != old_uid and pod["created"] >= after:
                if milestones(self.lines.get(pod["uid"], []))["first_step"] is not None:
                    return pod
        return None

    async def inject(self, kind: str, name: str, uid: str) -> None:
        from controller.runtime.client import PODS
        from controller.tfjob.executor import TFJOBS

        if kind == "delete":
            await self.client.delete(PODS, name, namespace=NS, propagation_policy="Background")
        elif kind == "evict":
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}}
            await self.client.request("POST", f"/api/v1/namespaces/{NS}/pods/{name}/eviction", body=body)
        elif kind == "oom":
            (self.trigger_dir / uid).touch()
        else:
            await self.client.patch(TFJOBS, JOB, {"spec": {"replicas": WORKERS + 1}}, namespace=NS, subresource="scale")

    async def event(self, kind: str, index: int) -> dict[str, Any]:
        import asyncio

        from controller.tfjob.executor import TFJOBS

        name = f"{JOB}-worker-{index}"
        old = self.live(name)
        event: dict[str, Any] = {"kind": kind, "index": index, "old_uid": old["uid"] if old else None}
        event["shared_before"] = self.shared_step()
        event["load_before"] = loadavg()
        event["fault"] = time.time()
        await self.inject(kind, name, old["uid"] if old else "")
        new = await self.until(
            lambda: self.replacement(name, event["old_uid"], event["fault"]), EVENT_TIMEOUT, f"a new {name} trains"
        )
        if old is not None:
            event["old_terminated"], event["old_deleted"], event["old_reason"] = (
                old["terminated"], old["deleted"], old["reason"],
            )  # fmt: skip
            event["gone"] = old["terminated"] if kind == "oom" else old["deleted"]
            event["old_last_words"] = last_words(self.lines.get(old["uid"], []))
            event["old_exited"] = old["log_ended"]
        event |= {"new_uid": new["uid"], "created": new["created"], "scheduled": new["scheduled"]}
        event["running"] = new["running"]
        event |= milestones(self.lines[new["uid"]])
        event["shared_at_first_step"] = step_before(global_steps(self.points), event["first_step"])
        if kind in REASONS:
            job = await self.client.get(TFJOBS, JOB, namespace=NS)
            record = (((job.get("status") or {}).get("dynamicWorkers") or {}).get("workers") or {}).get(str(index))
            event["controller_reason"] = (record or {}).get("lastReason")
        if kind == "scale-up":
            # Four workers train for the "after" window before the job is scaled back to three.
            await asyncio.sleep(max(0.0, event["first_step"] + self.args.settle - time.time()))
            lowered = time.time()
            await self.client.patch(TFJOBS, JOB, {"spec": {"replicas": WORKERS}}, namespace=NS, subresource="scale")
            await self.until(lambda: self.live(name) is None, EVENT_TIMEOUT, f"{name} removed by the scale-down")
            event["scale_down_seconds"] = time.time() - lowered
        return event

    async def scrape(self) -> dict[str, Any]:
        """The controller's failover histogram (and reconcile time), from its /metrics."""
        from prometheus_client.parser import text_string_to_metric_families

        async with self.http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response:
            text = await response.text()
        (self.workdir / "metrics.txt").write_text(text)
        kept: dict[str, Any] = {}
        for family in text_string_to_metric_families(text):
            if family.name not in ("tfjob_worker_failover_seconds", "controller_runtime_reconcile_time_seconds"):
                continue
            for sample in family.samples:
                wanted = ("_sum", "_count", "_bucket") if family.name.startswith("tfjob") else ("_sum", "_count")
                if sample.name.endswith(wanted) and sample.value:
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                    kept[f"{sample.name}{{{labels}}}"] = sample.value
        return kept

    def save(self) -> None:
        self.raw["steps"] = [[round(ts, 3), step] for ts, step in global_steps(self.points)]
        self.raw["job_not_running_polls"] = [round(ts, 1) for ts in self.not_running]
        self.raw["summary"] = summarize(self.raw)
        path = Path(self.args.raw)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.raw, indent=1) + "\n")
        temporary.replace(path)

    async def run(self) -> dict[str, Any]:
        import asyncio
        import platform

        import aiohttp
        import yaml

        from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS, ApiClient
        from controller.tfjob.executor import TFJOBS

        self.raw = {
            "command": self.args.command,
            "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "settings": {
                "per_kind": self.args.per_kind,
                "scale_ups": self.args.scale_ups,
                "every": self.args.every,
                "settle": self.args.settle,
                "log_every": self.args.log_every,
                "workers": WORKERS,
                "failover_backoff": [0.01, 0.01],
            },
            "load": [],
            "probes": {"python": [], "tensorflow_import": []},
            "events": [],
            "steps": [],
        }
        self.raw["machine"]["tensorflow"] = __import__("importlib.metadata").metadata.version("tensorflow-cpu")
        self.spawn(self.sample_load())
        await self.probes("start")
        await self.start_processes()
        self.http = aiohttp.ClientSession()
        self.client = await ApiClient.from_kubeconfig(str(self.kubeconfig))
        try:
            crd = yaml.safe_load((ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml").read_text())
            await self.client.create(CUSTOM_RESOURCE_DEFINITIONS, crd)
            self.spawn(self.watch_pods())
            await self.client.create(TFJOBS, self.manifest(), namespace=NS)
            self.job = {}
            self.spawn(self.watch_job())
            started = time.time()
            await self.until(lambda: all(self.training(i) for i in range(WORKERS)), EVENT_TIMEOUT, "3 workers train")
            self.raw["job_training_after"] = time.time() - started
            say(f"job training ({self.raw['job_training_after']:.1f} s after creation); load {loadavg()}")
            await self.scrape()  # the controller exposes a namespace's series at 0 on a first scrape
            await asyncio.sleep(self.args.settle)
            self.measuring = True
            failovers = 0
            last: dict[str, Any] | None = None
            for kind in plan(self.args.per_kind, self.args.scale_ups):
                if last is not None:
                    await asyncio.sleep(max(0.0, last["fault"] + self.args.every - time.time()))
                    since = last["first_step"] + self.args.settle
                    if last["kind"] == "scale-up":  # the 3 workers left train a full window before the next fault
                        since += last["scale_down_seconds"] + self.args.settle
                    await asyncio.sleep(max(0.0, since - time.time()))
                if self.args.stop_at is not None and time.time() >= self.args.stop_at:
                    self.raw["cut_short"] = f"--stop-at reached after {len(self.raw['events'])} events"
                    say(self.raw["cut_short"])
                    break
                await self.until(
                    lambda: all(self.training(i) for i in range(WORKERS)), EVENT_TIMEOUT, "3 workers train"
                )
                # Each kind hits every index in turn (1, 2, 0; then 2, 0, 1; ...), not always the same one.
                index = failover_index(failovers) if kind != "scale-up" else WORKERS
                failovers += kind != "scale-up"
                last = await self.event(kind, index)
                self.raw["events"].append(last)
                say(
                    f"{kind} worker-{index}: first step {last['step']} (shared before {last['shared_before']}) "
                    f"{last['first_step'] - last['fault']:.1f} s after the fault; load {loadavg()}"
                )
                self.save()
            await asyncio.sleep(self.args.settle)
            self.raw["controller_metrics"] = await self.scrape()
        finally:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            await self.client.close()
            await self.http.close()
            await self.stop_processes()
        await self.probes("end")
        self.raw["finished"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
        self.raw["load_end"] = loadavg()
        self.save()
        return self.raw


def say(text: str) -> None:
    print(f"[rejoin {_dt.datetime.now(_dt.UTC):%H:%M:%S}] {text}", flush=True)


def _utc_time(text: str) -> float:
    """``HH:MM`` UTC -> the next such moment (seconds since the epoch)."""
    try:
        moment = _dt.datetime.strptime(text, "%H:%M").time()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HH:MM (UTC), got {text!r}") from None
    now = _dt.datetime.now(_dt.UTC)
    when = _dt.datetime.combine(now.date(), moment, tzinfo=_dt.UTC)
    if when <= now:
        when += _dt.timedelta(days=1)
    return when.timestamp()


def main(argv: list[str] | None = None) -> int:
    import asyncio
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--per-kind", type=int, default=20, help="failovers of each kind (default 20)")
    parser.add_argument("--scale-ups", type=int, default=10, help="scale-ups 3 -> 4 (default 10)")
    parser.add_argument("--every", type=float, default=20.0, help="seconds from one fault to the next, at least")
    parser.add_argument(
        "--settle", type=float, default=8.0, help="seconds of full training after a first step before the next fault"
    )
    parser.add_argument("--log-every", type=int, default=10, help="TRAIN_LOG_EVERY of the workers (default 10)")
    parser.add_argument("--probes", type=int, default=3, help="bare start-up probes at the start and at the end")
    parser.add_argument("--raw", help="raw JSON output (default docs/benchmarks/raw/rejoin-<date>.json)")
    parser.add_argument("--workdir", type=Path, help="logs, kubeconfig (default: a new temporary directory)")
    parser.add_argument(
        "--stop-at",
        type=_utc_time,
        metavar="HH:MM",
        help="start no event after this UTC time (within 24 h); the run then ends as usual with what it measured",
    )
    parser.add_argument("--summarize", metavar="RAW", help="print the tables of a raw record and exit")
    args = parser.parse_args(argv)
    if args.summarize:
        raw = json.loads(Path(args.summarize).read_text())
        print(render_markdown(summarize(raw)))
        print(render_context(raw))
        return 0
    if args.per_kind < 0 or args.scale_ups < 0 or args.log_every < 1 or args.every < 0 or args.settle <= 0:
        parser.error("--per-kind and --scale-ups must not be negative, --log-every and --settle positive")
    if os.geteuid() != 0:
        parser.error("the process runtime needs root (network namespaces, memory cgroups)")
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d-%H%M")
    args.raw = args.raw or str(ROOT / "docs" / "benchmarks" / "raw" / f"rejoin-{date}.json")
    args.command = "benchmarks/rejoin.py " + " ".join(
        f"--{k.replace('_', '-')} {getattr(args, k)}" for k in ("per_kind", "scale_ups", "every", "settle", "log_every")
    )
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="rejoin-"))
    say(f"workdir {workdir}; raw output {args.raw}")
    raw = asyncio.run(Bench(args, workdir).run())
    print(render_markdown(raw["summary"]))
    print(render_context(raw))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["probe"]:
        probe(sys.argv[2:])
        sys.exit(0)
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "sim"))
    sys.exit(main())
