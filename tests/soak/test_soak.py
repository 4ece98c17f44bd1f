"""The chaos soak in CI: a fixed seed, about three minutes, every invariant of benchmarks/chaos/invariants.py.

The long runs (other seeds, 30 minutes, flat memory) are benchmarks/soak.py; their latest result is
docs/benchmarks/soak.md. On failure the message names the seed and the directory holding every
process's log, and ``benchmarks/soak.py --seed S`` replays the same decisions.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from benchmarks.chaos.engine import ACTION_WEIGHTS, SoakConfig, run_soak, schedule
from benchmarks.chaos.invariants import INVARIANTS, Bounds

CI_SEED = 20261203
EVERY_KIND = {
    "api-error",
    "latency",
    "dropped-connections",
    "watch-close",
    "watch-stall",
    "watch-delay",
    "compaction",
    "apiserver-restart",
    "kubelet-pause",
    "gc-pause",
    "node-not-ready",
    "worker-delete",
    "eviction",
    "oom",
    "error-exit",
    "scale-spec",
    "scale-subresource",
    "job-delete",
    "lost-create-relist",
    "job-create",
}


@pytest.mark.timeout(420)
async def test_soak_with_a_fixed_seed(tmp_path: Path) -> None:
    config = SoakConfig(
        seed=CI_SEED, fault_seconds=120, workdir=tmp_path, jobs=8, leader_kills=1, bounds=Bounds(), progress=print
    )
    result = await run_soak(config)
    assert result.passed, result.summary()
    # The run did what it claims. The schedule's guarantee, as performed: its opening, every kind once in
    # the seed's order (tests/soak/test_schedule.py proves the schedule has it), then more; so every kind of
    # trouble happened, however slow the machine. And every invariant was checked.
    opening = [
        step.kind for step in itertools.islice(schedule(CI_SEED, config.mean_action_interval), len(ACTION_WEIGHTS))
    ]
    assert result.opening == opening, result.opening
    assert result.faults["leader-sigkill"] == 1
    assert EVERY_KIND <= set(result.faults), EVERY_KIND - set(result.faults)
    assert all(result.checks[name] > 0 for name in INVARIANTS), result.checks
    assert result.converged_after is not None


@pytest.mark.timeout(240)
async def test_a_controller_that_writes_on_every_reconcile_fails_the_soak(tmp_path: Path) -> None:
    """End to end: the checker is wired to what the controllers really do."""
    config = SoakConfig(
        seed=3,
        fault_seconds=5,
        workdir=tmp_path,
        jobs=2,
        leader_kills=0,
        bounds=Bounds(converge_seconds=60, quiet_seconds=5),
        controller_command=["-m", "tests.soak.broken_controller"],
        progress=print,
    )
    result = await run_soak(config)
    quiet = [v for v in result.violations if v.invariant == "quiet-when-converged"]
    assert quiet, result.summary()
    assert "tfjobs.kubeflow.org/status" in quiet[0].detail
