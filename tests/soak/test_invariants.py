"""Every invariant of the soak catches the controller bug it exists for.

Each test feeds :class:`InvariantChecker` the observations a deliberately broken controller would
produce (and the healthy counterpart, which must pass): synthetic, so they are fast and exact.
The end-to-end proof that the checker is wired into the soak is in test_soak.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.chaos.invariants import INVARIANTS, Bounds, InvariantChecker

BOUNDS = Bounds(
    scale_down_seconds=10,
    orphan_seconds=5,
    converge_seconds=30,
    quiet_seconds=5,
    rss_growth_ratio=0.1,
    rss_growth_bytes=4 * 2**20,
    rss_min_samples=9,
)


def job(
    name: str = "j",
    *,
    uid: str | None = None,
    workers: int = 2,
    ps: int = 0,
    dynamic: bool = True,
    conditions: list[tuple[str, str, str, str]] = (),
    active: dict[str, int] | None = None,
    records: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    specs = {"Worker": {"replicas": workers}}
    if ps:
        specs["PS"] = {"replicas": ps}
    status: dict[str, Any] = {
        "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions],
        "replicaStatuses": {t: {"active": n} for t, n in (active or {}).items()},
    }
    if records is not None:
        status["dynamicWorkers"] = {"workers": records}
    meta: dict[str, Any] = {"name": name, "uid": uid or f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"tfReplicaSpecs": specs, "enableDynamicWorker": dynamic}, "status": status}


def child(
    owner: dict[str, Any],
    replica_type: str,
    index: int,
    *,
    phase: str = "Running",
    suffix: str = "",
    terminating: bool = False,
    kind: str = "pod",
) -> dict[str, Any]:
    name = f"{owner['metadata']['name']}-{replica_type.lower()}-{index}{suffix}"
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"{kind}-{name}",
        "labels": {
            "training.kubeflow.org/replica-type": replica_type.lower(),
            "training.kubeflow.org/replica-index": str(index),
        },
        "ownerReferences": [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ],
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj: dict[str, Any] = {"metadata": meta}
    if kind == "pod":
        obj["status"] = {"phase": phase}
    return obj


def healthy(j: dict[str, Any], replicas: dict[str, int]) -> tuple[list[dict], list[dict]]:
    pods = [child(j, t, i) for t, n in replicas.items() for i in range(n)]
    services = [child(j, t, i, kind="service") for t, n in replicas.items() for i in range(n)]
    return pods, services


def invariants_violated(checker: InvariantChecker) -> set[str]:
    return {v.invariant for v in checker.violations}


def test_every_invariant_is_tested_here() -> None:
    tested = {name for name in globals() if name.startswith("test_")}
    for invariant in INVARIANTS:
        assert any(invariant.replace("-", "_") in name for name in tested), invariant


# --- one-live-pod-per-index: a controller that creates a duplicate pod ----------------------------
def test_one_live_pod_per_index_catches_a_duplicate_pod() -> None:
    checker = InvariantChecker(BOUNDS)
    j = job()
    pods, services = healthy(j, {"Worker": 2})
    # A replacement while the old pod is terminating, and a finished pod beside a live one, are fine.
    ok = [
        *pods,
        child(j, "Worker", 0, suffix="-old", terminating=True),
        child(j, "Worker", 1, suffix="-x", phase="Failed"),
    ]
    assert checker.observe(0, [j], ok, services) == []
    broken = [*pods, child(j, "Worker", 1, suffix="-dup", phase="Pending")]
    found = checker.observe(1, [j], broken, services)
    assert [v.invariant for v in found] == ["one-live-pod-per-index"]
    assert "j-worker-1" in found[0].detail and "j-worker-1-dup" in found[0].detail
    assert checker.observe(2, [j], broken, services) == [], "reported once"


# --- scale-down-bounded: a controller that deletes the wrong index (or never scales down) ----------
def test_scale_down_bounded_catches_deleting_the_wrong_index() -> None:
    checker = InvariantChecker(BOUNDS)
    j = job(workers=3)
    pods, services = healthy(j, {"Worker": 3})
    checker.observe(0, [j], pods, services)
    j = job(workers=2)  # scaled down to 2: worker-2 must go; the broken controller deleted worker-0
    wrong = [p for p in pods if not p["metadata"]["name"].endswith("-0")]
    assert checker.observe(1, [j], wrong, services) == []
    assert checker.observe(1 + BOUNDS.scale_down_seconds - 0.5, [j], wrong, services) == [], "within the bound"
    found = checker.observe(2 + BOUNDS.scale_down_seconds, [j], wrong, services)
    assert {v.invariant for v in found} == {"scale-down-bounded"}
    assert any("pod j-worker-2" in v.detail for v in found) and any("service j-worker-2" in v.detail for v in found)


def test_scale_down_bounded_accepts_a_controller_that_scales_down_in_time() -> None:
    checker = InvariantChecker(BOUNDS)
    j = job(workers=3)
    pods, services = healthy(j, {"Worker": 3})
    checker.observe(0, [j], pods, services)
    j2 = job(workers=2)
    going = [*pods[:2], child(j, "Worker", 2, terminating=True)]
    checker.observe(1, [j2], going, services)
    checker.observe(5, [j2], going, services[:2])
    checker.observe(60, [j2], pods[:2], services[:2])
    assert checker.slowest_scale_down == 5 - 1, "worker-2's service went at t=5, 4 s after the scale-down"
    # Objects whose job went away, or that a scale-up made wanted again, are not timed as scale-downs.
    timing = InvariantChecker(BOUNDS)
    timing.observe(0, [job(workers=3)], pods, services)
    timing.observe(1, [j2], pods, services)
    timing.observe(9, [], pods[:2], services[:2])
    timing.observe(10, [job(workers=3)], pods, services)
    timing.observe(11, [job(workers=2)], pods, services)
    timing.observe(12, [job(workers=3)], pods, services)
    assert timing.slowest_scale_down == 0 and timing.violations == []
    # A job scaled back up restarts the clock; a finished job is not scaled by anyone.
    checker.observe(61, [job(workers=3)], pods, services)
    done = job(workers=1, conditions=[("Succeeded", "True", "TFJobSucceeded", "")])
    checker.observe(62, [done], pods, services)
    checker.observe(200, [done], pods, services)
    assert checker.violations == []


# --- dynamic-never-failed-by-workers ----------------------------------------------------------------
def test_dynamic_never_failed_by_workers_catches_a_job_failed_by_its_workers() -> None:
    checker = InvariantChecker(BOUNDS)
    by_ps = job(
        "a",
        ps=1,
        conditions=[("Failed", "True", "TFJobFailed", "TFJob default/a has failed because 1 PS replica(s) failed.")],
    )
    static = job(
        "b",
        dynamic=False,
        conditions=[
            ("Failed", "True", "TFJobFailed", "TFJob default/b has failed because 1 Worker replica(s) failed.")
        ],
    )
    invalid = job("c", conditions=[("Failed", "True", "TFJobFailedValidation", "failed validation because ...")])
    checker.observe(0, [by_ps, static, invalid], [], [])
    assert checker.violations == []
    broken = job(
        "d",
        conditions=[
            ("Failed", "True", "TFJobFailed", "TFJob default/d has failed because 1 Worker replica(s) failed.")
        ],
    )
    only_workers = job("e", conditions=[("Failed", "True", "TFJobFailed", "something else")])
    checker.observe(1, [broken, only_workers], [], [])
    assert [v.invariant for v in checker.violations] == ["dynamic-never-failed-by-workers"] * 2


# --- finished-never-reverted: a controller that flips a finished job back -------------------------
@pytest.mark.parametrize("terminal", ["Succeeded", "Failed"])
def test_finished_never_reverted_catches_a_job_flipped_back(terminal: str) -> None:
    checker = InvariantChecker(BOUNDS)
    checker.observe(0, [job(dynamic=False, conditions=[("Running", "True", "", "")])], [], [])
    done = job(dynamic=False, conditions=[("Running", "False", "", ""), (terminal, "True", "", "")])
    checker.observe(1, [done], [], [])
    checker.observe(2, [done], [], [])
    assert checker.violations == []
    flipped = job(dynamic=False, conditions=[("Running", "True", "", ""), (terminal, "False", "", "")])
    found = checker.observe(3, [flipped], [], [])
    assert [v.invariant for v in found] == ["finished-never-reverted"]
    assert f"was {terminal}" in found[0].detail
    # A new job with the same name (a new uid) starts afresh.
    assert checker.observe(4, [job(uid="other", conditions=[("Running", "True", "", "")])], [], []) == []


# --- no-orphans: a controller that creates children after its job is gone ---------------------------
def test_no_orphans_catches_children_outliving_their_job() -> None:
    checker = InvariantChecker(BOUNDS)
    j = job()
    pods, services = healthy(j, {"Worker": 2})
    checker.observe(0, [j], pods, services)
    checker.observe(1, [], pods, services)  # the job is gone; its children are orphans now
    checker.gc_paused(2)
    checker.observe(30, [], pods, services)
    assert checker.violations == [], "the collector was paused: nobody could delete them"
    checker.gc_resumed(31)
    checker.observe(31 + BOUNDS.orphan_seconds - 1, [], pods, services)
    assert checker.violations == []
    found = checker.observe(32 + BOUNDS.orphan_seconds, [], pods, services)
    assert {v.invariant for v in found} == {"no-orphans"} and len(found) == 4
    # A job being deleted in the foreground still owns its children.
    fresh = InvariantChecker(BOUNDS)
    fresh.observe(0, [job(deleting=True)], pods, services)
    fresh.observe(100, [job(deleting=True)], pods, services)
    assert fresh.violations == []


# --- converged-after-faults: a controller that never settles (e.g. expectations never satisfied) ----
def test_converged_after_faults_catches_a_job_that_never_settles() -> None:
    checker = InvariantChecker(BOUNDS)
    j = job(workers=3, ps=1, active={"Worker": 3, "PS": 1})
    pods, services = healthy(j, {"Worker": 3, "PS": 1})
    assert checker.unconverged([j], pods, services) == []
    # A missing replacement (frozen after a relist), a stale status, a pod beyond replicas, no service.
    frozen = [p for p in pods if p["metadata"]["name"] != "j-worker-1"]
    assert checker.unconverged([j], frozen, services) == [
        "j: Worker 1 is not settled (no pod)",
        "j: status says Worker active=3, 2 running",
    ]
    extra = [*pods, child(j, "Worker", 3)]
    assert checker.unconverged([j], extra, services) == ["j: Worker objects beyond replicas 3: ['j-worker-3']"]
    assert checker.unconverged([j], pods, services[1:]) == ["j: Worker services missing for indices [0]"]
    pending = [*pods[:3], child(j, "PS", 0, phase="Pending")]
    assert "j: PS 0 is not settled (['j-ps-0:Pending'])" in checker.unconverged([j], pending, services)
    # Settled states that are not "running": a finished job, a completed worker, a worker that failed
    # for good in a dynamic job (recorded Failed), a suspended job without pods.
    done = job(conditions=[("Succeeded", "True", "", "")])
    completed = job("k", workers=2, active={"Worker": 1}, records={"1": {"state": "Failed"}})
    k_pods = [child(completed, "Worker", 0), child(completed, "Worker", 1, phase="Failed")]
    k_services = [child(completed, "Worker", i, kind="service") for i in range(2)]
    assert checker.unconverged([done, completed], [*pods, *k_pods], [*services, *k_services]) == []
    # A finished job whose TTL deletion or pod cleanup is still due is not converged either.
    ttl = job("t", conditions=[("Succeeded", "True", "", "")])
    ttl["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 30, "cleanPodPolicy": "Running"}
    assert checker.unconverged([ttl], [child(ttl, "Worker", 0), child(ttl, "Worker", 1, phase="Succeeded")], []) == [
        "t: finished, its TTL deletion is due",
        "t: finished, cleanPodPolicy Running has yet to delete ['t-worker-0']",
    ]
    checker.check_converged(50, checker.unconverged([j], frozen, services), waited=30)
    assert [v.invariant for v in checker.violations] == ["converged-after-faults"]
    assert "Worker 1 is not settled" in checker.violations[0].detail


# --- quiet-when-converged: a controller that writes on every reconcile -----------------------------
def test_quiet_when_converged_catches_writes_on_every_reconcile() -> None:
    checker = InvariantChecker(BOUNDS)
    agent = "tfjob-controller/0.1.0"
    quiet = [
        {"verb": "update", "resource": "leases.coordination.k8s.io", "userAgent": agent},  # lease renewal
        {"verb": "list", "resource": "pods", "userAgent": agent},
        {"verb": "create", "resource": "pods", "userAgent": "kubectl/v1.31"},  # someone else
    ]
    checker.check_quiet(10, quiet, "tfjob-controller/")
    assert checker.violations == []
    noisy = [*quiet, *[{"verb": "update", "resource": "tfjobs.kubeflow.org/status", "userAgent": agent}] * 7]
    checker.check_quiet(20, noisy, "tfjob-controller/")
    assert [v.invariant for v in checker.violations] == ["quiet-when-converged"]
    assert "7 controller writes" in checker.violations[0].detail


# --- flat-rss: a controller that leaks ------------------------------------------------------------
def test_flat_rss_catches_a_leak_and_accepts_warm_up_and_noise() -> None:
    checker = InvariantChecker(BOUNDS)
    mib = 2**20
    warm_then_flat = [(t, (20 + min(t, 3) * 20 + (t % 2)) * mib) for t in range(30)]
    leak = [(t, (80 + 2 * t) * mib) for t in range(30)]
    too_short = [(t, (80 + 20 * t) * mib) for t in range(5)]
    checker.check_rss(100, {"healthy": warm_then_flat, "leaky": leak, "young": too_short})
    assert [(v.invariant, v.detail.split(":")[0]) for v in checker.violations] == [("flat-rss", "leaky")]
    assert checker.checks["flat-rss"] == 2


# --- no-unexpected-traceback / no-unexpected-exit: a controller that crashes -----------------------
def test_no_unexpected_traceback_catches_tracebacks_in_json_and_text_logs() -> None:
    checker = InvariantChecker(BOUNDS)
    clean = ['{"event": "created pod", "level": "info"}', '{"event": "retrying request", "level": "warning"}']
    checker.check_logs(1, "a", clean)
    assert checker.violations == []
    checker.check_logs(
        2,
        "b",
        [*clean, '{"event": "reconcile failed", "key": "default/j", "exception": "Traceback ...\\nValueError: boom"}'],
    )
    checker.check_logs(3, "c", ["Traceback (most recent call last):", '  File "x.py", line 1'])
    assert [(v.invariant, v.detail.split(" ")[0]) for v in checker.violations] == [
        ("no-unexpected-traceback", "b"),
        ("no-unexpected-traceback", "c"),
    ]
    assert checker.violations[0].detail == "b log line 3: 'reconcile failed' (key default/j): ValueError: boom"


def test_no_unexpected_exit_catches_a_crash_but_not_a_kill_or_a_lost_lease() -> None:
    checker = InvariantChecker(BOUNDS)
    checker.check_exits(1, "a1", None, killed=False, log_tail="")
    checker.check_exits(2, "a2", -9, killed=True, log_tail="")
    checker.check_exits(3, "b1", 1, killed=False, log_tail='{"event": "leader election lost; exiting ..."}')
    assert checker.violations == []
    checker.check_exits(4, "b2", 1, killed=False, log_tail="RuntimeError: boom")
    assert [v.invariant for v in checker.violations] == ["no-unexpected-exit"]
