"""examples/dynamic-workers/train.py with real TensorFlow, outside any cluster: its tasks are processes on
loopback ports and their TF_CONFIG is exactly what the controller writes (controller.tfjob.tfconfig), with each
address swapped for a loopback one.

What it must do: train under sparse TF_CONFIG (where the textbook PS program fails); a worker SIGKILLed and
started again continues at the shared global step; SIGTERM stops a worker with 143 while the others train on;
under dense TF_CONFIG worker 0 trains to the last step and exits 0 although a worker the TF_CONFIG lists never
runs; bad input is a one-line error.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controller.tfjob.tfconfig import dense_tf_config, sparse_tf_config
from tfjob_sim.testing.processes import free_port
from tfjob_sim.testing.waiting import eventually

PROGRAM = Path(__file__).resolve().parents[2] / "examples" / "dynamic-workers" / "train.py"
STEP = re.compile(r"^step=(\d+) ", re.M)
# TensorFlow's import alone costs a few CPU seconds per process; a busy 2-core machine multiplies it.
START = 120.0


def job(workers: int, ps: int = 1) -> dict[str, Any]:
    def spec(replicas: int) -> dict[str, Any]:
        return {"replicas": replicas, "template": {"spec": {"containers": [{"name": "tensorflow"}]}}}

    return {
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"tfReplicaSpecs": {"PS": spec(ps), "Worker": spec(workers)}},
    }


class Tasks:
    """The tasks of one job, each a process whose output goes to a file."""

    def __init__(self, tmp: Path, workers: int, dense: bool, ps: int = 1) -> None:
        self.tmp = tmp
        self.job = job(workers, ps)
        self.dense = dense
        self.ports = {
            **{("ps", i): free_port() for i in range(ps)},
            **{("worker", i): free_port() for i in range(workers)},
        }
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def tf_config(self, task: str, index: int) -> str:
        make = dense_tf_config if self.dense else sparse_tf_config
        config = make(self.job, task.capitalize() if task == "worker" else task.upper(), index)
        for (t, i), port in self.ports.items():
            config = config.replace(f'"j-{t}-{i}.ns.svc:2222"', f'"127.0.0.1:{port}"')
        assert ".svc" not in config, config
        return config

    def start(self, name: str, task: str, index: int, *, wrapper: tuple[str, ...] = (), **env: str) -> None:
        """Start a task; ``wrapper`` is a command that ends by exec'ing its arguments (the program's command)."""
        log = self.tmp / f"{name}-{len(self.logs)}.log"
        environment = {**os.environ, "TF_CONFIG": self.tf_config(task, index), "TRAIN_STEP_DELAY": "0.02", **env}
        with log.open("wb") as out:
            self.procs[name] = subprocess.Popen(
                [*wrapper, sys.executable, str(PROGRAM)], stdout=out, stderr=subprocess.STDOUT, env=environment
            )
        self.logs[name] = log

    def output(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def steps(self, name: str) -> list[int]:
        return [int(s) for s in STEP.findall(self.output(name))]

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@pytest.fixture
def start_job(tmp_path: Path) -> Iterator[Callable[..., Tasks]]:
    """Start a job's PS task (``start_job(workers=, dense=)``); every process of it is killed after the test."""
    made: list[Tasks] = []

    def start(*, workers: int, dense: bool) -> Tasks:
        made.append(Tasks(tmp_path, workers=workers, dense=dense))
        made[-1].start("ps", "ps", 0)
        return made[-1]

    yield start
    for t in made:
        t.stop_all()


async def exited(proc: subprocess.Popen[bytes], timeout: float) -> int:
    await eventually(lambda: proc.poll() is not None, timeout, interval=0.1, what=f"pid {proc.pid} exits")
    assert proc.returncode is not None
    return proc.returncode


@pytest.mark.timeout(600)
async def test_a_restarted_worker_continues_at_the_shared_step_under_sparse_tf_config(
    start_job: Callable[..., Tasks],
) -> None:
    job = start_job(workers=2, dense=False)
    assert (
        job.tf_config("ps", 0)
        == f'{{"cluster":{{"worker":{{}},"ps":["127.0.0.1:{job.ports[("ps", 0)]}"]}},"task":{{"type":"ps","index":0}}}}'
    )
    for i in (0, 1):
        job.start(f"w{i}", "worker", i, TRAIN_STEPS="1000000")
    await eventually(lambda: [s for s in job.steps("w1") if s >= 30], START, interval=0.2, what="worker 1 trains")

    job.procs["w1"].kill()
    assert await exited(job.procs["w1"], 30) == -signal.SIGKILL
    before = max(job.steps("w0") + job.steps("w1"))
    job.start("w1", "worker", 1, TRAIN_STEPS="1000000")
    first = (await eventually(lambda: job.steps("w1"), START, interval=0.2, what="worker 1 rejoins"))[0]
    assert first >= before, job.output("w1")
    assert "event=initialised" not in job.output("w1"), "only worker 0 initialises the model"

    job.procs["w1"].send_signal(signal.SIGTERM)
    assert await exited(job.procs["w1"], 60) == 143
    stopped = re.search(r"^event=stopped step=(\d+) worker=1 reason=SIGTERM$", job.output("w1"), re.M)
    assert stopped, job.output("w1")
    await eventually(
        lambda: max(job.steps("w0")) > int(stopped.group(1)), 60, interval=0.2, what="worker 0 trains on alone"
    )
    assert job.procs["w0"].poll() is None and job.procs["ps"].poll() is None


@pytest.mark.timeout(600)
async def test_worker_0_finishes_under_dense_tf_config_without_the_other_listed_worker(
    start_job: Callable[..., Tasks],
) -> None:
    job = start_job(workers=2, dense=True)
    # Worker 1 is in every TF_CONFIG but never starts: the sessions must not wait for it.
    job.start("w0", "worker", 0, TRAIN_STEPS="60", TRAIN_LOG_EVERY="20")
    assert await exited(job.procs["w0"], START) == 0, job.output("w0")
    assert job.steps("w0")[-2:] == [40, 60], job.output("w0")
    assert "event=finished step=60 worker=0" in job.output("w0")
    job.procs["ps"].send_signal(signal.SIGTERM)
    assert await exited(job.procs["ps"], 60) == 143


@pytest.mark.parametrize(
    ("tf_config", "env", "message"),
    [
        (None, {}, "train.py: TF_CONFIG is not set; run this program as a task of a distributed TFJob"),
        ("{", {}, "train.py: TF_CONFIG is not a TensorFlow cluster description: "),
        ('{"cluster":{"worker":{"0":"a:1"}},"task":{"type":"worker","index":0}}', {}, "lists no PS task"),
        ('{"cluster":{"ps":["a:1"]},"task":{"type":"worker","index":3}}', {}, "gives it no address"),
        ('{"cluster":{"ps":["a:1"]},"task":{"type":"ps","index":0}}', {"TRAIN_STEPS": "x"}, "is not an integer"),
        (
            '{"cluster":{"ps":["a:1"],"worker":["b:2"]},"task":{"type":"worker","index":0}}',
            {"CHECKPOINT_DIR": "/nonexistent/checkpoints"},
            "train.py: CHECKPOINT_DIR='/nonexistent/checkpoints' is not a directory; mount a volume there",
        ),
    ],
)
def test_bad_input_is_a_one_line_error(tf_config: str | None, env: dict[str, str], message: str) -> None:
    environment = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"} | env
    if tf_config is not None:
        environment["TF_CONFIG"] = tf_config
    result = subprocess.run([sys.executable, str(PROGRAM)], env=environment, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stdout == "" and len(result.stderr.splitlines()) == 1 and message in result.stderr, result.stderr
