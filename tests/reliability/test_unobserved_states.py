"""Unobserved states: the controller's watches pass on only the latest version of each object in a window
(benchmarks/chaos/proxy.py, ``Endpoint.coalesce``), so the states in between are never seen, as a controller that
relists instead of watching would see the cluster. The run must end exactly as the unperturbed one.

The full sweep (every scenario, windows of 0.2 s and 1 s) is ``benchmarks/sweep.py``; its result is
docs/reliability.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.chaos.scenarios import SCENARIOS
from benchmarks.chaos.systematic import Perturbation, baseline_run, perturbed


@pytest.mark.timeout(240)
async def test_a_ps_evicted_unseen_is_counted_as_evicted(tmp_path: Path) -> None:
    """B9 (docs/reliability.md): a PS evicted through the Eviction API while the controller's pods watch is
    coalesced reaches it only as the pod's deletion; the failover was recorded as ``Deleted`` (its event and
    metric too). The deletion's final object still carries the eviction's ``DisruptionTarget`` condition, which
    the controller now keeps and reads: the record, the event and the metric say ``Evicted``, as unperturbed."""
    scenario = SCENARIOS["ps-loss-evict"]
    baseline = await baseline_run(scenario, tmp_path / "unperturbed")
    failed = []
    for window in (0.2, 1.0):
        verdict = await perturbed(scenario, baseline, Perturbation("coalesce", window=window), tmp_path / f"{window}")
        print(verdict)
        if not verdict.passed:
            failed.append(str(verdict))
    assert not failed, "\n".join(failed)
