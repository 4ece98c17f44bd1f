"""Every view made stale: a standby takes over from a SIGKILLed leader with a first view of the cluster that is
N revisions old (benchmarks/chaos/systematic.py, ``run_takeover``).

The leader tells the story unperturbed (a targeted scale-down, a worker failover, a PS loss) and the cluster
converges; then the leader is SIGKILLed and its Lease deleted (its expiry, fast-forwarded), and the standby's
first LIST of jobs, pods and services is answered with the cluster as it was N changes earlier (one consistent
state of the past, rebuilt by the simulator from its change history), the replay of the newer events held back
for a second. A standby taking over a converged cluster has nothing to do: whatever it gets the server to commit,
it did on the stale view. It must re-create nothing, delete nothing, write no status, and leave the final state
and the job's events exactly as the unperturbed run left them.

The full sweep (every N from 1 to 50, other resources stale alone) is ``benchmarks/sweep.py``; its result is
docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos.scenarios import SCENARIOS
from benchmarks.chaos.systematic import Perturbation, baseline_run, perturbed, require

# How stale the standby's first view is, in changes of jobs, pods and services together. Far enough back to
# reach the action's own writes (the status that records who left, the deletions, the re-created pod), short of
# the job's creation (a view from before it: the test after this one).
REVISIONS = (2, 8)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["targeted-scale-down", "worker-failover-oom", "ps-loss-delete"])
async def test_a_standby_with_a_stale_first_view_changes_nothing(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    baseline = await baseline_run(scenario, tmp_path / "unperturbed")
    failed = []
    for revisions in REVISIONS:
        verdict = await perturbed(
            scenario, baseline, Perturbation("stale", revisions=revisions), tmp_path / f"stale-{revisions}"
        )
        print(verdict)
        assert verdict.run.note.startswith("first lists served at"), verdict.run.note
        if not verdict.passed:
            failed.append(str(verdict))
    assert not failed, "\n".join(failed)


@pytest.mark.timeout(180)
async def test_a_standby_whose_view_predates_the_jobs_first_pass_re_creates_no_removed_worker(tmp_path: Path) -> None:
    """B3 (docs/reliability.md): a standby whose first view of a dynamic job predates the job's first pass would
    create every pod, the workers the user removed since included; it confirms its view with consistent reads
    before it writes, and waits until its caches catch up."""
    # The same with a view from before the first service (pods created, no service yet): benchmarks/sweep.py.
    scenario = SCENARIOS["targeted-scale-down"]
    baseline = await baseline_run(scenario, tmp_path / "unperturbed")
    verdict = await perturbed(scenario, baseline, Perturbation("stale", point="before-first-pod"), tmp_path / "stale")
    require(verdict.run.note.startswith("first lists served at"), "the standby's first lists were stale")
    assert verdict.passed, str(verdict)


@pytest.mark.timeout(180)
async def test_a_standby_whose_pods_lag_its_jobs_counts_a_failover_once(tmp_path: Path) -> None:
    """B7 (docs/reliability.md): a standby whose pods lag its job (from before the failed-over worker's
    replacement was created) would take the replacement for a pod that vanished and count the failover again on
    every pass; a pass that records a failover confirms the pods with the server first."""
    scenario = SCENARIOS["worker-failover-oom"]
    baseline = await baseline_run(scenario, tmp_path / "unperturbed")
    lagging = Perturbation("stale", stale="pods", point="before-last-pod")
    verdict = await perturbed(scenario, baseline, lagging, tmp_path / "stale")
    require(verdict.run.note.startswith("first lists served at"), "the standby's first list of pods was stale")
    assert verdict.passed, str(verdict)
