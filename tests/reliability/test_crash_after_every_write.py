"""Every write crashed: the controller is SIGKILLed right after each single write it makes (committed by the API
server, its answer never seen), a new process takes over, and the run must end exactly as the unperturbed run
ended (benchmarks/chaos/systematic.py: same pods by name and index, the same pods kept, members and holes,
conditions, failover records and events), with no invariant broken on the way (one live pod per index, the job
never Failed) and nothing written that the unperturbed run never wrote.

The three stories of the acceptance: a targeted scale-down that removes two chosen workers (one listed in
``spec.workersToDelete``, one by pod-deletion cost), a worker failover (an OOM kill) and the loss of a parameter
server. The tests after it pin the bugs earlier sweeps found (docs/reliability.md), each at the write that
brought it about. The full sweep over every scenario and perturbation is
``benchmarks/sweep.py``; its result is docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos.scenarios import SCENARIOS
from benchmarks.chaos.systematic import (
    Perturbation,
    RunResult,
    baseline_run,
    crash_sweep,
    describe_writes,
    perturbed,
    require,
)

_baselines: dict[str, RunResult] = {}


async def unperturbed(name: str, tmp_path: Path) -> RunResult:
    """The scenario's unperturbed run, once per module: several tests judge runs against the same one."""
    if name not in _baselines:
        _baselines[name] = await baseline_run(SCENARIOS[name], tmp_path / "unperturbed")
    return _baselines[name]


# What each story's unperturbed run changes once its action is taken (its writes other than the status, which a
# pass may split or merge with the timing of the pods' phases), and the write it must begin with where the order
# is the point: the sweep below crashes after each write the run makes, so a change here changes what is covered.
CHANGES = {
    "targeted-scale-down": [
        "DELETE pods sd-worker-1",
        "DELETE pods sd-worker-3",
        "DELETE services sd-worker-1",
        "DELETE services sd-worker-3",
    ],
    "worker-failover-oom": ["DELETE pods fail-oom-worker-1", "POST pods fail-oom-worker-1"],
    "ps-loss-delete": ["POST pods ps-delete-ps-0"],
}
FIRST = {
    # Status first: the record of who leaves is stored before any worker is removed.
    "targeted-scale-down": "PUT tfjobs.kubeflow.org/status sd",
    # The failover record first (its cause, exit code and failure streak), then the failed pod goes.
    "worker-failover-oom": "PUT tfjobs.kubeflow.org/status fail-oom",
}
STATUS = "PUT tfjobs.kubeflow.org/status"


@pytest.mark.timeout(420)
@pytest.mark.parametrize("name", sorted(CHANGES))
async def test_a_crash_after_any_single_write_ends_as_the_unperturbed_run(name: str, tmp_path: Path) -> None:
    baseline, verdicts = await crash_sweep(
        SCENARIOS[name], tmp_path, progress=print, baseline=await unperturbed(name, tmp_path)
    )
    writes = describe_writes(baseline.writes)
    # The deletions of a scale-down go out in concurrent batches: their order among themselves may vary.
    assert sorted(w for w in writes if not w.startswith(STATUS)) == CHANGES[name], writes
    assert any(w.startswith(STATUS) for w in writes), writes
    if name in FIRST:
        assert writes[0] == FIRST[name], writes
    crashed = [v for v in verdicts if v.run.crashed]
    assert len(crashed) >= len(verdicts) - 1, [str(v) for v in verdicts]  # a run may make one write fewer
    failed = [str(v) for v in verdicts if not v.passed]
    assert not failed, "\n".join(failed)
    # What the crashes cost: at most one write more than the unperturbed run (a status write its successor splits
    # in two, seeing a pod's phase change between them); the sweep reports the numbers.
    assert all(v.extra_writes <= 1 for v in crashed), [(str(v.run.perturbation), v.extra_writes) for v in crashed]


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("name", "write"),
    [
        pytest.param(
            "worker-failover-oom",
            "DELETE pods fail-oom-worker-1",
            id="oom-killed-worker",
        ),
        pytest.param(
            "ps-loss-pressure",
            "DELETE pods ps-pressure-ps-0",
            id="ps-evicted-for-node-pressure",
        ),
    ],
)
async def test_a_crash_right_after_deleting_a_failed_pod_keeps_the_cause(name: str, write: str, tmp_path: Path) -> None:
    """B1 (docs/reliability.md): killed right after deleting a pod that failed by itself (OOM-killed) or that its
    kubelet evicted, the next process still records the cause (OOMKilled, Evicted; the exit code, an own failure
    counted), not a deletion: the failover pass stores its record before it deletes the pod."""
    scenario = SCENARIOS[name]
    baseline = await unperturbed(name, tmp_path)
    require(write in describe_writes(baseline.writes), f"{write} is a write of the window")
    verdict = await perturbed(scenario, baseline, Perturbation("crash", k=1, write=write), tmp_path / "crash")
    require(verdict.run.crashed, "the process was killed")
    assert verdict.passed, str(verdict)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("name", "write"),
    [
        pytest.param(
            "worker-failover-vanish",
            "POST pods fail-vanish-worker-1",
            id="worker",
        ),
        pytest.param(
            "ps-loss-vanish",
            "POST pods ps-vanish-ps-0",
            id="ps",
        ),
    ],
)
async def test_a_crash_right_after_re_creating_a_vanished_pod_keeps_the_failover(
    name: str, write: str, tmp_path: Path
) -> None:
    """B2 (docs/reliability.md): killed right after re-creating a worker or PS that vanished, the failover is still
    recorded, counted and reported once: it is stored in a pass of its own before the replacement is created."""
    scenario = SCENARIOS[name]
    baseline = await unperturbed(name, tmp_path)
    require(write in describe_writes(baseline.writes), f"{write} is a write of the window")
    verdict = await perturbed(scenario, baseline, Perturbation("crash", k=1, write=write), tmp_path / "crash")
    require(verdict.run.crashed, "the process was killed")
    assert verdict.passed, str(verdict)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("name", "write"),
    [
        pytest.param(
            "success-clean-all",
            "DELETE pods okall-worker-0",
            id="succeeded",
        ),
        pytest.param(
            "backoff-limit",
            "DELETE pods bo-ps-0",
            id="failed-by-backoff-limit",
        ),
    ],
)
async def test_a_crash_during_the_cleanup_of_a_finished_job_keeps_it_finished(
    name: str, write: str, tmp_path: Path
) -> None:
    """B5 (docs/reliability.md): killed during the cleanup of a job that succeeded (cleanPodPolicy All) or failed
    (backoff limit), after the pod that proved the outcome was deleted, the job stays finished and is never run
    again: the finishing pass stores its terminal status before its cleanup."""
    scenario = SCENARIOS[name]
    baseline = await unperturbed(name, tmp_path)
    crash = Perturbation("crash", k=1, write=write)
    verdict = await perturbed(scenario, baseline, crash, tmp_path / "crash", converge_seconds=8)
    require(verdict.run.crashed, "the process was killed")
    assert verdict.passed, str(verdict)


@pytest.mark.timeout(180)
async def test_a_crash_between_a_cleaned_up_pod_and_its_service_removes_the_service(tmp_path: Path) -> None:
    """B6 (docs/reliability.md): killed between deleting a finished job's PS pod and its service, the next process
    still deletes the service (a finished job's cleanup deletes every service whose pod is gone) and the PS's
    success stays counted."""
    scenario = SCENARIOS["success-clean-all"]
    baseline = await unperturbed(scenario.name, tmp_path)
    crash = Perturbation("crash", k=1, write="DELETE pods okall-ps-0")
    verdict = await perturbed(scenario, baseline, crash, tmp_path / "crash", converge_seconds=30)
    require(verdict.run.crashed, "the process was killed")
    assert verdict.passed, str(verdict)
