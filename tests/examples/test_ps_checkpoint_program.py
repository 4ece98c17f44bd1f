"""tests/e2e/tf_programs/ps_checkpoint.py with real TensorFlow as local processes on loopback ports: a PS SIGKILLed
and started again at the same address, and worker 0 restores the newest of its checkpoints onto it; and its
refusal to run on directories that are not mounted volumes.

Each task runs in a private mount namespace with the volumes its pod would have: the checkpoint directory a
bind mount of one directory of the test (a claim that outlives the pods), the scratch directory a tmpfs of its
own (an emptyDir), the program's directory a read-only bind mount (a ConfigMap volume).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tfjob_sim.testing.processes import free_port
from tfjob_sim.testing.waiting import eventually

PROGRAM = Path(__file__).resolve().parents[1] / "e2e" / "tf_programs" / "ps_checkpoint.py"
START = 90.0
SAVED = re.compile(r"^\[worker 0\] checkpoint step (\d+) model-\1\.npz [\d.]+s$", re.M)
RESTORED = re.compile(r"^\[worker 0\] restored step (\d+) model-\1\.npz$", re.M)
STEP = re.compile(r"^\[worker \d\] global_step (\d+) ", re.M)
VOLUMES = ("checkpoints", "scratch", "program")


def after(text: str, marker: str) -> str:
    at = text.find(marker)
    return "" if at < 0 else text[text.index("\n", at) + 1 :]


class Pods:
    """The tasks of a sparse job, each a process in its own mount namespace, output to a file."""

    def __init__(self, tmp: Path, workers: int) -> None:
        self.tmp = tmp
        self.store = tmp / "store"  # what the claim holds
        self.source = tmp / "configmap"
        for directory in (self.store, self.source, *(tmp / "mnt" / v for v in VOLUMES)):
            directory.mkdir(parents=True)
        # The program is in the unmounted directory too: run from there, it must refuse for that reason alone.
        for directory in (self.source, self.mnt("program")):
            (directory / PROGRAM.name).write_bytes(PROGRAM.read_bytes())
        self.ps = f"127.0.0.1:{free_port()}"
        self.workers = {i: f"127.0.0.1:{free_port()}" for i in range(workers)}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def mnt(self, volume: str) -> Path:
        return self.tmp / "mnt" / volume

    def command(self, mounted: tuple[str, ...] = VOLUMES) -> list[str]:
        steps = {
            "checkpoints": f"mount --bind {shlex.quote(str(self.store))} {shlex.quote(str(self.mnt('checkpoints')))}",
            "scratch": f"mount -t tmpfs tmpfs {shlex.quote(str(self.mnt('scratch')))}",
            "program": f"mount --bind {shlex.quote(str(self.source))} {shlex.quote(str(self.mnt('program')))} && "
            f"mount -o remount,bind,ro {shlex.quote(str(self.mnt('program')))}",
        }
        script = " && ".join([*(steps[v] for v in mounted), 'exec "$@"'])
        program = self.mnt("program") / PROGRAM.name
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            sys.executable,
            str(program),
        ]

    def env(self, task: str, index: int) -> dict[str, str]:
        own = {"worker": {str(index): self.workers[index]}} if task == "worker" else {"worker": {}}
        tf_config = {"cluster": {**own, "ps": [self.ps]}, "task": {"type": task, "index": index}}
        return {
            **os.environ,
            "TF_CONFIG": json.dumps(tf_config),
            "PSC_CHECKPOINT_DIR": str(self.mnt("checkpoints")),
            "PSC_SCRATCH_DIR": str(self.mnt("scratch")),
            "PSC_CHECKPOINT_SECONDS": "1",
        }

    def start(self, name: str, task: str, index: int) -> None:
        log = self.tmp / f"{name}-{len(self.logs)}.log"
        with log.open("wb") as out:
            self.procs[name] = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, env=self.env(task, index)
            )
        self.logs[name] = log

    def out(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Pods]:
    made = Pods(tmp_path, workers=2)
    yield made
    made.stop_all()


@pytest.mark.timeout(300)
async def test_worker_0_restores_its_newest_checkpoint_onto_a_restarted_ps(pods: Pods) -> None:
    pods.start("ps", "ps", 0)
    for i in (0, 1):
        pods.start(f"w{i}", "worker", i)
    await eventually(lambda: len(SAVED.findall(pods.out("w0"))) >= 2, START, interval=0.2, what="two checkpoints")
    await eventually(lambda: STEP.findall(pods.out("w1")), START, interval=0.2, what="worker 1 trains")
    pods.procs["ps"].kill()
    assert pods.procs["ps"].wait(timeout=30) == -signal.SIGKILL
    pods.start("ps", "ps", 0)

    restored = await eventually(lambda: RESTORED.search(pods.out("w0")), START, interval=0.2, what="restored")
    step = int(restored.group(1))
    w0 = pods.out("w0")
    assert step == int(SAVED.findall(w0[: w0.index("[worker 0] ps lost ")])[-1]), w0
    assert "[worker 0] reconnected" in w0, w0

    def worker_1_steps_again() -> list[int]:
        return [int(s) for s in STEP.findall(after(pods.out("w1"), "[worker 1] reconnected"))]

    # Worker 1 waited for the restore: its first step after reconnecting is above the restored step.
    assert (await eventually(worker_1_steps_again, START, interval=0.2, what="worker 1 trains again"))[0] > step
    assert "restored" not in pods.out("w1") and "fresh start" not in pods.out("w1")
    await eventually(
        lambda: [s for s in SAVED.findall(after(pods.out("w0"), "restored step")) if int(s) > step],
        START,
        interval=0.2,
        what="a checkpoint after the restore",
    )
    for i in (0, 1):
        assert pods.procs[f"w{i}"].poll() is None, pods.out(f"w{i}")

    # The claim holds whole checkpoints only, the two newest, and nothing half-written under a final name. Worker 0
    # goes on saving: a save publishes the new file before it removes the oldest, so a look in between sees three,
    # or a file removed as it is read; look again then.
    def whole_checkpoints() -> list[str] | None:
        files = sorted(p.name for p in pods.store.iterdir() if not p.name.endswith(".incoming"))
        assert all(re.fullmatch(r"model-\d+\.npz", f) for f in files), files
        if not 1 <= len(files) <= 2:
            return None
        try:
            for name in files:
                with np.load(pods.store / name) as saved:
                    assert {"global_step", "linear/w", "linear/w/Momentum", "linear/b", "linear/b/Momentum"} <= set(
                        saved.files
                    ), (name, saved.files)
                    assert int(saved["global_step"]) == int(name[len("model-") : -len(".npz")])
        except FileNotFoundError:
            return None
        return files

    await eventually(whole_checkpoints, START, interval=0.05, what="the two newest checkpoints, whole")


@pytest.mark.parametrize(
    ("task", "unmounted", "unset", "message"),
    [
        ("worker", "checkpoints", None, "PSC_CHECKPOINT_DIR {checkpoints} is not a mounted volume"),
        ("worker", "scratch", None, "PSC_SCRATCH_DIR {scratch} is not a mounted volume"),
        ("worker", "program", None, "the program's directory {program} is not a mounted volume"),
        ("ps", "program", None, "the program's directory {program} is not a mounted volume"),
        ("worker", None, "PSC_SCRATCH_DIR", "PSC_SCRATCH_DIR is not set"),
    ],
)
def test_it_refuses_to_run_unless_its_volumes_are_mounted(
    pods: Pods, task: str, unmounted: str | None, unset: str | None, message: str
) -> None:
    env = pods.env(task, 0)
    env.pop(unset or "", None)
    command = pods.command(tuple(v for v in VOLUMES if v != unmounted))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result
    expected = "ps_checkpoint.py: " + message.format(**{v: pods.mnt(v) for v in VOLUMES}) + "\n"
    assert (result.stdout, result.stderr) == ("", expected)
