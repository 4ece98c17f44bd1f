"""docs/benchmarks/soak.md keeps every run: the latest in full, earlier ones as rows of a table."""

from __future__ import annotations

from collections import Counter

from benchmarks.chaos.engine import SoakResult, previous_rows, render_markdown
from benchmarks.chaos.invariants import Bounds, Violation

MIB = 2**20


def test_the_report_keeps_earlier_runs_and_states_the_latest_in_full() -> None:
    first = SoakResult(
        5,
        "2026-12-03 12:00 UTC",
        duration=480,
        fault_seconds=420,
        faults=Counter({"oom": 3}),
        checks=Counter({"no-orphans": 10}),
        converged_after=2.5,
        rss={"controller-a1": [(10, 50 * MIB), (400, 60 * MIB)], "controller-b1": [(10, 40 * MIB), (50, 41 * MIB)]},
    )
    second = SoakResult(
        6,
        "2026-12-03 12:10 UTC",
        duration=1800,
        fault_seconds=1740,
        violations=[Violation("flat-rss", 1700, "controller-a2: RSS peak grew")],
    )
    document = render_markdown(
        second,
        "benchmarks/soak.py --seed 6",
        Bounds(),
        previous_rows(render_markdown(first, "benchmarks/soak.py --seed 5", Bounds())),
    )
    assert previous_rows(document) == [
        "| 2026-12-03 12:10 UTC | 6 | 30.0 | FAILED | 1 | 0 | 0 | no | - |",
        "| 2026-12-03 12:00 UTC | 5 | 8.0 | PASSED | 0 | 3 | 10 | 2.5 | 50.0 / 60.0 / 60.0 |",
    ]
    assert "- seed: **6**" in document and "[flat-rss] at t=1700.0s: controller-a2: RSS peak grew" in document
    assert previous_rows("# an older report without the table\n") == []
