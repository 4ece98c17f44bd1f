"""The bugs the systematic sweep has found, each pinned by a strict xfail in tests/reliability/ and described in
docs/reliability.md, and how a failing run shows each one: the sweep (benchmarks/sweep.py) reports a run that
fails for one of them under its name, and the test suite's sweeps leave those runs to the test that pins the bug,
so that only a failure nobody has explained fails them. O1 is not a bug (see docs/reliability.md).

The recognition goes by what the judge (:func:`benchmarks.chaos.systematic.judge`) says of the run, so it stays
narrow: a run is put down to a bug only if every one of its problems is what that bug does.
"""

from __future__ import annotations

from benchmarks.chaos.systematic import Verdict

# The known bugs, each pinned by a strict xfail, recognised in a failing run by what it shows.
KNOWN_BUGS = {
    "B1": "crash after deleting an OOM-killed worker's or an evicted PS's pod: the failover is recorded as a deletion",
    "B2": "crash after re-creating a vanished worker or PS: the failover is never recorded",
    "B3": "standby acting on a view of the job older than a removal re-creates what was removed",
    "B4": "suspension keeps the PS failover records",
    "B5": "crash during the cleanup of a finished (succeeded, or failed by its backoff limit) job: it runs again",
    "B6": "crash between a cleaned-up pod and its service: the service stays",
    "B7": "standby whose pods view lags its jobs view counts a failover again (a worker's on every pass)",
    "O1": "not a bug: an eviction the controller never saw (its pod gone unseen) is recorded as a deletion",
}


def known_bug(verdict: Verdict) -> str | None:
    """Which known bug (or O1) explains every problem of a failing run, if one does; None for a passing run."""
    if verdict.passed:
        return None
    run, text = verdict.run, "\n".join(verdict.problems)
    crash = run.crash_after
    if all(_evicted_seen_deleted(p) for p in verdict.problems):
        return "O1"
    if (
        crash is not None
        and crash.method == "DELETE"
        and "'lastReason': 'Deleted'" in text
        and ("OOMKilled" in text or "Evicted" in text)
    ):
        return "B1"
    if crash is not None and crash.method == "POST" and crash.target == "pods":
        lost = [
            p
            for p in verdict.problems
            if not ("Failover" in p or p.startswith(("final workers", "final parameterServers")))
        ]
        if not lost and ("final workers: {}" in text or "final parameterServers: {}" in text):
            return "B2"
    if (
        crash is not None
        and "did not converge" in text
        and any(why in text for why in ("not Succeeded", "not failed", "not deleted by its TTL"))
    ):
        return "B5"
    if (
        crash is not None
        and crash.method == "DELETE"
        and "final services: [" in text
        and "-ps-0'], unperturbed []" in text
    ):
        return "B6"
    if run.perturbation.kind == "stale":
        writes = [p for p in verdict.problems if p.startswith("the standby wrote")]
        statuses = [p for p in writes if "/status " in p]
        if statuses and len(statuses) == len(writes) and ("'failovers': " in text or "did not converge" in text):
            return "B7"
        if any(" POST " in p and "-> 201" in p for p in writes):
            return "B3"
    return None


def _evicted_seen_deleted(problem: str) -> bool:
    """A difference that is only an eviction recorded (or reported) as a deletion."""
    if problem.startswith("final workers") or problem.startswith("final parameterServers"):
        got, _, expected = problem.partition(", unperturbed ")
        return got.split(": ", 1)[1].replace("'Deleted'", "'Evicted'") == expected
    return problem.startswith("event ") and ("was evicted (Evicted)" in problem or "was deleted (Deleted)" in problem)
