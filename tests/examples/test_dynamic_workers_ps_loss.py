"""examples/dynamic-workers/train.py when a PS dies and comes back at the same address, with real TensorFlow on
loopback ports (the harness of test_dynamic_workers_program.py).

What it must do: with CHECKPOINT_DIR, every worker survives the loss, worker 0 restores the newest checkpoint
onto the fresh PS and nobody trains before it has (with two PS tasks, losing one restores every variable from
that checkpoint); without it, training starts over at global step 0 and every worker survives as well.

Every PS runs in a private mount namespace with an empty tmpfs over the checkpoint directory, as a PS pod that
does not mount the checkpoint volume: a checkpoint shard written or read by a PS would be missing, or not found.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.examples.test_dynamic_workers_program import Tasks
from tfjob_sim.testing.waiting import eventually

# TensorFlow's import costs a few CPU seconds per process; a busy 2-core machine multiplies it.
START = 90.0
SAVED = re.compile(r"^event=checkpoint-saved step=(\d+) worker=0 seconds=([\d.]+) path=\S+$", re.M)
RESTORED = re.compile(r"^event=restored step=(\d+) worker=0 path=\S+$", re.M)
JOINED = re.compile(r"^event=joined step=(\d+) worker=\d+$", re.M)
STEP = re.compile(r"^step=(\d+) ", re.M)


def hiding(directory: Path) -> tuple[str, ...]:
    """A command prefix: run in a private mount namespace where ``directory`` is an empty tmpfs."""
    script = f'mount -t tmpfs tmpfs {shlex.quote(str(directory))} && exec "$@"'
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh")


def after(text: str, marker: str) -> str:
    """What ``text`` says after the first line containing ``marker`` ('' if there is none)."""
    at = text.find(marker)
    return "" if at < 0 else text[text.index("\n", at) + 1 :]


def until(text: str, marker: str) -> str:
    at = text.find(marker)
    return text if at < 0 else text[:at]


@pytest.fixture
def tasks(tmp_path: Path) -> Iterator[Callable[..., Tasks]]:
    made: list[Tasks] = []

    def make(*, ps: int, workers: int) -> Tasks:
        made.append(Tasks(tmp_path, workers=workers, dense=False, ps=ps))
        return made[-1]

    yield make
    for job in made:
        job.stop_all()


class Job:
    """A sparse job of ``ps`` PS tasks and ``workers`` workers, PS tasks blind to the checkpoint directory."""

    def __init__(self, tasks: Tasks, ps: int, checkpoints: Path, **env: str) -> None:
        self.tasks = tasks
        self.checkpoints = checkpoints
        checkpoints.mkdir()
        self.env = {
            "TRAIN_STEPS": "1000000",
            "TRAIN_LOG_EVERY": "10",
            "CHECKPOINT_DIR": str(checkpoints),
            "CHECKPOINT_EVERY_STEPS": "40",
            **env,
        }
        for i in range(ps):
            self.start_ps(i)

    def start_ps(self, index: int) -> None:
        self.tasks.start(f"ps{index}", "ps", index, wrapper=hiding(self.checkpoints))

    def start_worker(self, index: int) -> None:
        self.tasks.start(f"w{index}", "worker", index, **self.env)

    def out(self, name: str) -> str:
        return self.tasks.output(name)

    async def kill_and_restart_ps(self, index: int) -> None:
        """SIGKILL the PS task and start a new one at the same address, once the old one is gone."""
        proc = self.tasks.procs[f"ps{index}"]
        proc.kill()
        proc.wait(timeout=30)
        self.start_ps(index)

    def workers_alive(self, count: int) -> None:
        for i in range(count):
            assert self.tasks.procs[f"w{i}"].poll() is None, self.out(f"w{i}")


async def resumes_from_the_checkpoint(tasks: Callable[..., Tasks], tmp_path: Path, *, ps: int, kill: int) -> None:
    job = Job(tasks(ps=ps, workers=2), ps, tmp_path / "checkpoints")
    for i in (0, 1):
        job.start_worker(i)
    # Two checkpoints saved and worker 1 training: the loss strikes a job well under way.
    await eventually(lambda: len(SAVED.findall(job.out("w0"))) >= 2, START, interval=0.2, what="two checkpoints")
    await eventually(lambda: STEP.findall(job.out("w1")), START, interval=0.2, what="worker 1 trains")
    await job.kill_and_restart_ps(kill)

    restored = await eventually(lambda: RESTORED.search(job.out("w0")), START, interval=0.2, what="worker 0 restores")
    step = int(restored.group(1))
    w0 = job.out("w0")
    before = until(w0, "event=ps-lost")
    # The newest checkpoint is the last one worker 0 saved before it lost the PS: nothing older, nothing lost
    # beyond one checkpoint interval.
    assert step == int(SAVED.findall(before)[-1][0]), w0
    assert "event=reconnected worker=0" in after(w0, "event=ps-lost"), w0
    # Worker 0 logs `restored` before it sets the readiness flag, and `joined` after: wait for the joined line
    # rather than expect it in the output that held `restored`. It joins at the restored step (worker 1's first
    # step below says no one trained on the model before it was restored).
    joined = await eventually(
        lambda: JOINED.findall(after(job.out("w0"), "event=restored")), START, interval=0.2, what="worker 0 joins"
    )
    assert joined[0] == str(step), job.out("w0")

    # Worker 1 trains again, and only on the restored model: its first step after reconnecting is not below it.
    def worker_1_steps_again() -> list[int]:
        return [int(s) for s in STEP.findall(after(job.out("w1"), "event=reconnected worker=1"))]

    first = (await eventually(worker_1_steps_again, START, interval=0.2, what="worker 1 trains again"))[0]
    assert first > step, job.out("w1")
    assert "event=initialised" not in job.out("w1") and "event=restored" not in job.out("w1")
    # Training goes on past the restored step, with new checkpoints, and no worker exited.
    await eventually(
        lambda: [s for s, _ in SAVED.findall(after(job.out("w0"), "event=restored")) if int(s) > step],
        START,
        interval=0.2,
        what="a checkpoint after the restore",
    )
    job.workers_alive(2)
    # CheckpointManager keeps the newest CHECKPOINT_KEEP (default 3) and deletes the rest, after it has written
    # the new one: a look in between sees one more.
    await eventually(
        lambda: len(list(job.checkpoints.glob("ckpt-*.index"))) <= 3, START, interval=0.05, what="at most 3 kept"
    )


@pytest.mark.timeout(300)
async def test_worker_0_restores_the_newest_checkpoint_onto_a_restarted_ps(
    tasks: Callable[..., Tasks], tmp_path: Path
) -> None:
    await resumes_from_the_checkpoint(tasks, tmp_path, ps=1, kill=0)


@pytest.mark.timeout(300)
async def test_with_two_ps_losing_one_restores_every_variable_from_the_one_checkpoint(
    tasks: Callable[..., Tasks], tmp_path: Path
) -> None:
    # PS 1 holds part of the model but not the global step (replica_device_setter places the variables in
    # turn, the global step first): the global step on PS 0 survives the loss, and is still set back to
    # the checkpoint's together with everything else (asserted inside: the next step is the restored one).
    await resumes_from_the_checkpoint(tasks, tmp_path, ps=2, kill=1)


@pytest.mark.timeout(300)
async def test_without_a_checkpoint_dir_training_starts_over_and_every_worker_survives(
    tasks: Callable[..., Tasks], tmp_path: Path
) -> None:
    job = Job(tasks(ps=1, workers=2), 1, tmp_path / "checkpoints")
    del job.env["CHECKPOINT_DIR"]
    for i in (0, 1):
        job.start_worker(i)
    await eventually(
        lambda: [s for s in STEP.findall(job.out("w1")) if int(s) >= 50], START, interval=0.2, what="training"
    )
    await job.kill_and_restart_ps(0)

    def started_over() -> list[str]:
        return JOINED.findall(after(job.out("w0"), "event=reconnected worker=0"))

    assert (await eventually(started_over, START, interval=0.2, what="worker 0 starts over"))[0] == "0"
    w0 = job.out("w0")
    assert after(w0, "event=ps-lost").count("event=initialised worker=0") == 1, w0
    assert "event=restored" not in w0 and "event=checkpoint-saved" not in w0, w0
    await eventually(
        lambda: STEP.findall(after(job.out("w1"), "event=reconnected worker=1")),
        START,
        interval=0.2,
        what="worker 1 trains again",
    )
    job.workers_alive(2)
    assert list(job.checkpoints.iterdir()) == []
