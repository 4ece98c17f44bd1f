"""What a failing run may be put down to without failing the sweep: only O1, which is not a bug (see
docs/reliability.md). The bugs earlier sweeps found (B1-B7) are fixed and pinned by tests in tests/reliability/;
a run that shows one of them again fails like any other.

The recognition goes by what the judge (:func:`benchmarks.chaos.systematic.judge`) says of the run, so it stays
narrow: a run is put down to O1 only if every one of its problems is what O1 does.
"""

from __future__ import annotations

from benchmarks.chaos.systematic import Verdict

EXPLAINED = {
    "O1": "not a bug: an eviction the controller never saw (its pod gone unseen) is recorded as a deletion",
}


def known_bug(verdict: Verdict) -> str | None:
    """O1 when it explains every problem of a failing run; None for a passing run or any other failure."""
    if verdict.passed:
        return None
    if all(_evicted_seen_deleted(p) for p in verdict.problems):
        return "O1"
    return None


def _evicted_seen_deleted(problem: str) -> bool:
    """A difference that is only an eviction recorded (or reported) as a deletion."""
    if problem.startswith("final workers") or problem.startswith("final parameterServers"):
        got, _, expected = problem.partition(", unperturbed ")
        return got.split(": ", 1)[1].replace("'Deleted'", "'Evicted'") == expected
    return problem.startswith("event ") and ("was evicted (Evicted)" in problem or "was deleted (Deleted)" in problem)
