"""The invariants of the chaos soak, checked on what the API server shows, never on controller internals.

Why a separate, pure module: the checker is the soak's judge, so it must itself be tested against
deliberately broken controllers (tests/soak/test_invariants.py) with synthetic observations: fast,
deterministic, and independent of any controller. The engine feeds it consistent snapshots (one LIST
of jobs, pods and services from the simulator) and the other evidence it collects.

Contract of :class:`InvariantChecker`:

* :meth:`observe` ``(t, jobs, pods, services)`` checks one snapshot taken at monotonic time ``t``
  against the continuous invariants and returns the new violations (also kept in ``violations``);
  ``checks`` counts every check made, by invariant. Each object is reported at most once per invariant.
* :meth:`gc_paused` / :meth:`gc_resumed` tell it when orphans cannot be collected.
* :meth:`unconverged` ``(jobs, pods, services)`` lists why the cluster is not converged (empty when
  it is); :meth:`check_converged`, :meth:`check_quiet`, :meth:`check_rss`, :meth:`check_logs` and
  :meth:`check_exits` judge the rest of the evidence and record violations.

The invariants (``INVARIANTS``), with their bounds in :class:`Bounds`:

* ``one-live-pod-per-index``: at most one live pod (not terminating, not Succeeded/Failed) per
  (job uid, replica type, index).
* ``scale-down-bounded``: once a job's replicas for a type have been observed at ``r`` for longer
  than ``scale_down_seconds``, no pod (any phase) or service of that type with index >= r remains
  unless it is terminating (finished, suspended and deleted jobs are exempt: nothing scales them).
* ``dynamic-never-failed-by-workers``: a job with ``enableDynamicWorker`` never gets ``Failed`` because
  of its Worker replicas.
* ``finished-never-reverted``: a job seen ``Succeeded`` or ``Failed`` keeps that condition True.
* ``no-orphans``: a pod or service whose controlling TFJob no longer exists is gone (or terminating)
  within ``orphan_seconds`` of running garbage collection.
* ``converged-after-faults``: within ``converge_seconds`` after the faults stop, every job is finished,
  or has exactly the pods its spec asks for, running, with services, and a status that counts them.
* ``quiet-when-converged``: a converged cluster gets zero writes from the controllers (the leader's
  Lease renewals excepted) during ``quiet_seconds``.
* ``flat-rss``: a controller process's resident memory does not grow: the peak of the last third of
  its samples exceeds the peak of the middle third by at most ``rss_growth_ratio`` or
  ``rss_growth_bytes``, whichever is larger (the first third is warm-up).
* ``no-unexpected-traceback``: no traceback in the controllers' logs.
* ``no-unexpected-exit``: a controller process ends only when the soak kills it, or with exit 1
  after logging that it lost the leader election (a Deployment restarts it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

GROUP_PREFIX = "kubeflow.org/"
TYPE_LABEL = "training.kubeflow.org/replica-type"
INDEX_LABEL = "training.kubeflow.org/replica-index"
REPLICA_TYPES = ("Chief", "Master", "PS", "Worker", "Evaluator")
TERMINAL_PHASES = ("Succeeded", "Failed")
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
LEASES = "leases.coordination.k8s.io"

INVARIANTS = (
    "one-live-pod-per-index",
    "scale-down-bounded",
    "dynamic-never-failed-by-workers",
    "finished-never-reverted",
    "no-orphans",
    "converged-after-faults",
    "quiet-when-converged",
    "flat-rss",
    "no-unexpected-traceback",
    "no-unexpected-exit",
)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Bounds:
    scale_down_seconds: float = 60.0
    orphan_seconds: float = 30.0
    converge_seconds: float = 120.0
    quiet_seconds: float = 10.0
    rss_growth_ratio: float = 0.10
    rss_growth_bytes: int = 8 * 1024 * 1024
    rss_min_samples: int = 30


@dataclass(frozen=True)
class Violation:
    invariant: str
    time: float
    detail: str

    def __str__(self) -> str:
        return f"[{self.invariant}] at t={self.time:.1f}s: {self.detail}"


# --- reading objects (defensively: the checker must not crash on what a broken controller writes) ---
def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(obj: Obj) -> str:
    return str(_meta(obj).get("name", ""))


def _uid(obj: Obj) -> str:
    return str(_meta(obj).get("uid", ""))


def _terminating(obj: Obj) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


def _phase(pod: Obj) -> str:
    status = pod.get("status")
    return str(status.get("phase", "")) if isinstance(status, Mapping) else ""


def controller_uid(obj: Obj) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if (
            isinstance(ref, Mapping)
            and ref.get("controller")
            and ref.get("kind") == "TFJob"
            and str(ref.get("apiVersion", "")).startswith(GROUP_PREFIX)
        ):
            return str(ref.get("uid", ""))
    return None


def slot(obj: Obj) -> tuple[str, int] | None:
    """(replica type as in the spec, index) from the labels, or None if unlabelled."""
    labels = _meta(obj).get("labels") or {}
    raw_type, raw_index = labels.get(TYPE_LABEL), labels.get(INDEX_LABEL)
    if not isinstance(raw_type, str) or not isinstance(raw_index, str) or not raw_index.isdigit():
        return None
    by_lower = {t.lower(): t for t in REPLICA_TYPES}
    replica_type = by_lower.get(raw_type.lower())
    return (replica_type, int(raw_index)) if replica_type else None


def conditions(job: Obj) -> dict[str, Mapping[str, Any]]:
    status = job.get("status")
    raw = status.get("conditions") if isinstance(status, Mapping) else None
    return {c["type"]: c for c in raw or [] if isinstance(c, Mapping) and isinstance(c.get("type"), str)}


def is_true(job: Obj, cond_type: str) -> bool:
    c = conditions(job).get(cond_type)
    return bool(c and c.get("status") == "True")


def finished(job: Obj) -> str | None:
    for cond_type in ("Succeeded", "Failed"):
        if is_true(job, cond_type):
            return cond_type
    return None


def replica_specs(job: Obj) -> dict[str, Mapping[str, Any]]:
    spec = job.get("spec")
    specs = spec.get("tfReplicaSpecs") if isinstance(spec, Mapping) else None
    return {k: v for k, v in (specs or {}).items() if isinstance(v, Mapping)}


def replicas(job: Obj, replica_type: str) -> int | None:
    value = replica_specs(job).get(replica_type, {}).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_dynamic(job: Obj) -> bool:
    spec = job.get("spec")
    return isinstance(spec, Mapping) and spec.get("enableDynamicWorker") is True


def suspended(job: Obj) -> bool:
    spec = job.get("spec")
    run_policy = spec.get("runPolicy") if isinstance(spec, Mapping) else None
    return isinstance(run_policy, Mapping) and run_policy.get("suspend") is True


def live(pod: Obj) -> bool:
    return not _terminating(pod) and _phase(pod) not in TERMINAL_PHASES


def failed_by_workers(job: Obj) -> bool:
    """True if a dynamic job's Failed condition blames its Worker replicas."""
    failed = conditions(job).get("Failed")
    if not failed or failed.get("status") != "True":
        return False
    message = str(failed.get("message", ""))
    if " Worker replica" in message:
        return True
    # A job of Workers only can fail for nothing but its workers, validation or its deadline aside.
    return set(replica_specs(job)) == {"Worker"} and failed.get("reason") == "TFJobFailed"


class InvariantChecker:
    """See the module docstring."""

    def __init__(self, bounds: Bounds | None = None) -> None:
        self.bounds = bounds or Bounds()
        self.violations: list[Violation] = []
        self.checks: Counter[str] = Counter()
        self._reported: set[tuple[str, str]] = set()
        self._finished: dict[str, str] = {}  # job uid -> the terminal condition seen
        self._replicas_since: dict[tuple[str, str], tuple[int, float]] = {}  # (uid, type) -> (r, first seen)
        self._orphan_since: dict[str, float] = {}  # child uid -> first seen orphaned
        self._gc_paused = False
        self._gc_resumed_at = 0.0
        self._beyond: dict[str, tuple[float, str]] = {}  # object uid -> (since when index >= replicas, job uid)
        self.slowest_scale_down = 0.0  # seconds an object outlived its scale-down, at most (observed)

    # --- bookkeeping ------------------------------------------------------------------------------
    def _violate(self, invariant: str, t: float, key: str, detail: str) -> Violation | None:
        if (invariant, key) in self._reported:
            return None
        self._reported.add((invariant, key))
        violation = Violation(invariant, t, detail)
        self.violations.append(violation)
        return violation

    def gc_paused(self, t: float) -> None:
        self._gc_paused = True

    def gc_resumed(self, t: float) -> None:
        self._gc_paused = False
        self._gc_resumed_at = t

    def outcomes(self) -> Counter[str]:
        """How many jobs were seen Succeeded and Failed."""
        return Counter(self._finished.values())

    # --- continuous invariants --------------------------------------------------------------------
    def observe(self, t: float, jobs: Sequence[Obj], pods: Sequence[Obj], services: Sequence[Obj]) -> list[Violation]:
        before = len(self.violations)
        by_uid = {_uid(j): j for j in jobs if _uid(j)}
        self._check_live_pods(t, by_uid, pods)
        for job in jobs:
            self._check_job(t, job)
        self._check_scale_down(t, by_uid, pods, services)
        self._check_orphans(t, by_uid, pods, services)
        return self.violations[before:]

    def _check_live_pods(self, t: float, by_uid: Mapping[str, Obj], pods: Sequence[Obj]) -> None:
        seen: dict[tuple[str, str, int], list[str]] = {}
        for pod in pods:
            owner, where = controller_uid(pod), slot(pod)
            if owner is None or where is None or not live(pod):
                continue
            seen.setdefault((owner, *where), []).append(_name(pod))
        self.checks["one-live-pod-per-index"] += len(seen)
        for (owner, replica_type, index), names in seen.items():
            if len(names) > 1:
                job = _name(by_uid[owner]) if owner in by_uid else owner
                self._violate(
                    "one-live-pod-per-index",
                    t,
                    f"{owner}/{replica_type}/{index}/{sorted(names)}",
                    f"job {job}: {len(names)} live pods for {replica_type} {index}: {sorted(names)}",
                )

    def _check_job(self, t: float, job: Obj) -> None:
        uid, name = _uid(job), _name(job)
        self.checks["finished-never-reverted"] += 1
        previous = self._finished.get(uid)
        if previous is not None and not is_true(job, previous):
            self._violate(
                "finished-never-reverted",
                t,
                uid,
                f"job {name} was {previous}, now its conditions are "
                f"{[(c, v.get('status')) for c, v in conditions(job).items()]}",
            )
        elif previous is None and finished(job):
            self._finished[uid] = finished(job) or ""
        if is_dynamic(job):
            self.checks["dynamic-never-failed-by-workers"] += 1
            if failed_by_workers(job):
                self._violate(
                    "dynamic-never-failed-by-workers",
                    t,
                    uid,
                    f"dynamic job {name} failed: {conditions(job)['Failed'].get('message')}",
                )

    def _check_scale_down(
        self, t: float, by_uid: Mapping[str, Obj], pods: Sequence[Obj], services: Sequence[Obj]
    ) -> None:
        current: set[tuple[str, str]] = set()
        for uid, job in by_uid.items():
            for replica_type in replica_specs(job):
                r = replicas(job, replica_type)
                if r is None:
                    continue
                key = (uid, replica_type)
                current.add(key)
                seen = self._replicas_since.get(key)
                if seen is None or seen[0] != r:
                    self._replicas_since[key] = (r, t)
        for key in set(self._replicas_since) - current:
            del self._replicas_since[key]
        beyond: set[str] = set()
        for kind, objects in (("pod", pods), ("service", services)):
            for obj in objects:
                owner, where = controller_uid(obj), slot(obj)
                if owner is None or where is None or owner not in by_uid or _terminating(obj):
                    continue
                job = by_uid[owner]
                if finished(job) or suspended(job) or _terminating(job):
                    continue
                seen = self._replicas_since.get((owner, where[0]))
                if seen is None:
                    continue
                self.checks["scale-down-bounded"] += 1
                r, since = seen
                if where[1] >= r:
                    beyond.add(_uid(obj))
                    self._beyond.setdefault(_uid(obj), (since, owner))
                if where[1] >= r and t - since > self.bounds.scale_down_seconds:
                    self._violate(
                        "scale-down-bounded",
                        t,
                        _uid(obj),
                        f"job {_name(job)}: {kind} {_name(obj)} ({where[0]} {where[1]}) still exists "
                        f"{t - since:.0f}s after {where[0]} replicas became {r}",
                    )
        remaining = {_uid(o) for o in (*pods, *services) if not _terminating(o)}
        for uid in set(self._beyond) - beyond:
            since, owner = self._beyond.pop(uid)
            job = by_uid.get(owner)
            if uid in remaining or job is None or finished(job) or suspended(job) or _terminating(job):
                continue  # scaled back up, or its job finished or went: no scale-down to time
            self.slowest_scale_down = max(self.slowest_scale_down, t - since)  # gone or terminating: done

    def _check_orphans(self, t: float, by_uid: Mapping[str, Obj], pods: Sequence[Obj], services: Sequence[Obj]) -> None:
        orphans: set[str] = set()
        for kind, objects in (("pod", pods), ("service", services)):
            for obj in objects:
                owner = controller_uid(obj)
                if owner is None or owner in by_uid or _terminating(obj):
                    continue
                uid = _uid(obj)
                orphans.add(uid)
                since = self._orphan_since.setdefault(uid, t)
                self.checks["no-orphans"] += 1
                if self._gc_paused:
                    continue
                age = t - max(since, self._gc_resumed_at)
                if age > self.bounds.orphan_seconds:
                    self._violate(
                        "no-orphans",
                        t,
                        uid,
                        f"{kind} {_name(obj)} outlived its deleted TFJob (uid {owner}) by {age:.0f}s "
                        "of running garbage collection",
                    )
        for uid in set(self._orphan_since) - orphans:
            del self._orphan_since[uid]

    # --- convergence ------------------------------------------------------------------------------
    def unconverged(self, jobs: Sequence[Obj], pods: Sequence[Obj], services: Sequence[Obj]) -> list[str]:
        """Why the cluster is not converged; empty when every job is finished or exactly as asked."""
        reasons: list[str] = []
        by_owner: dict[str, list[Obj]] = {}
        for obj in (*pods, *services):
            owner = controller_uid(obj)
            if owner is not None:
                by_owner.setdefault(owner, []).append(obj)
        pod_uids = {_uid(p) for p in pods}
        for job in jobs:
            if _terminating(job):
                continue
            name, children = _name(job), by_owner.get(_uid(job), [])
            job_pods = [o for o in children if _uid(o) in pod_uids]
            if finished(job):
                reasons.extend(self._unfinished_business(job, name, job_pods))
                continue
            job_services = [o for o in children if _uid(o) not in pod_uids and not _terminating(o)]
            if suspended(job):
                if any(live(p) for p in job_pods):
                    reasons.append(f"{name}: suspended but has live pods")
                continue
            reasons.extend(self._unconverged_job(job, name, job_pods, job_services))
        return reasons

    @staticmethod
    def _unfinished_business(job: Obj, name: str, pods: list[Obj]) -> list[str]:
        """A finished job still has work due: its TTL deletion, or the cleanup of its pods."""
        spec = job.get("spec") if isinstance(job.get("spec"), Mapping) else {}
        run_policy = spec.get("runPolicy") if isinstance(spec.get("runPolicy"), Mapping) else {}
        reasons = []
        if isinstance(run_policy.get("ttlSecondsAfterFinished"), int):
            reasons.append(f"{name}: finished, its TTL deletion is due")
        policy = run_policy.get("cleanPodPolicy")
        doomed = [
            _name(p)
            for p in pods
            if not _terminating(p)
            and (policy == "All" or (policy == "Running" and _phase(p) in ("Running", "Pending")))
        ]
        if doomed:
            reasons.append(f"{name}: finished, cleanPodPolicy {policy} has yet to delete {sorted(doomed)}")
        return reasons

    def _unconverged_job(self, job: Obj, name: str, pods: list[Obj], services: list[Obj]) -> list[str]:
        reasons = []
        status = job.get("status") if isinstance(job.get("status"), Mapping) else {}
        replica_statuses = status.get("replicaStatuses") if isinstance(status.get("replicaStatuses"), Mapping) else {}
        dynamic_records = ((status.get("dynamicWorkers") or {}).get("workers") or {}) if is_dynamic(job) else {}
        for replica_type in replica_specs(job):
            r = replicas(job, replica_type)
            if r is None:
                continue
            typed = [(slot(p), p) for p in pods if slot(p) is not None and slot(p)[0] == replica_type]
            running = 0
            for index in range(r):
                at_index = [p for s, p in typed if s[1] == index]
                alive = [p for p in at_index if live(p)]
                done = [p for p in at_index if not _terminating(p) and _phase(p) == "Succeeded"]
                gave_up = [p for p in at_index if not _terminating(p) and _phase(p) == "Failed"]
                record = dynamic_records.get(str(index)) if isinstance(dynamic_records, Mapping) else None
                permanently_failed = isinstance(record, Mapping) and record.get("state") == "Failed"
                if len(alive) == 1 and _phase(alive[0]) == "Running":
                    running += 1
                elif not alive and (done or (gave_up and permanently_failed)):
                    pass
                else:
                    phases = sorted(
                        f"{_name(p)}:{_phase(p)}{'(terminating)' if _terminating(p) else ''}" for p in at_index
                    )
                    reasons.append(f"{name}: {replica_type} {index} is not settled ({phases or 'no pod'})")
            extra = sorted(_name(o) for s, o in typed if s[1] >= r and not _terminating(o))
            extra += sorted(_name(s) for s in services if slot(s) and slot(s)[0] == replica_type and slot(s)[1] >= r)
            if extra:
                reasons.append(f"{name}: {replica_type} objects beyond replicas {r}: {extra}")
            have = {slot(s)[1] for s in services if slot(s) and slot(s)[0] == replica_type}
            missing = sorted(set(range(r)) - have)
            if missing:
                reasons.append(f"{name}: {replica_type} services missing for indices {missing}")
            entry = replica_statuses.get(replica_type)
            active = entry.get("active", 0) if isinstance(entry, Mapping) else None
            if active != running:
                reasons.append(f"{name}: status says {replica_type} active={active}, {running} running")
        return reasons

    def check_converged(self, t: float, reasons: list[str], waited: float) -> None:
        self.checks["converged-after-faults"] += 1
        if reasons:
            shown = "; ".join(reasons[:12]) + (f"; ... ({len(reasons)} in all)" if len(reasons) > 12 else "")
            self._violate(
                "converged-after-faults",
                t,
                "end",
                f"not converged {waited:.0f}s after the faults stopped "
                f"(bound {self.bounds.converge_seconds:.0f}s): {shown}",
            )

    # --- the rest of the evidence -----------------------------------------------------------------
    def check_quiet(self, t: float, records: Iterable[Mapping[str, Any]], controller_agent: str) -> None:
        """``records``: the simulator's request log (``/_sim/requests``) over a quiet window."""
        self.checks["quiet-when-converged"] += 1
        writes = [
            r
            for r in records
            if controller_agent in str(r.get("userAgent", ""))
            and r.get("verb") in WRITE_VERBS
            and not str(r.get("resource", "")).startswith(LEASES)
        ]
        if writes:
            counts = Counter(f"{r.get('verb')} {r.get('resource')}" for r in writes)
            # Which objects, in order: the one fact that tells a bug from a workload that was not quiet.
            each = "; ".join(f"{r.get('method')} {r.get('path')} -> {r.get('code')}" for r in writes[:12])
            self._violate(
                "quiet-when-converged",
                t,
                "quiet",
                f"{len(writes)} controller writes while converged: {dict(counts)} ({each})",
            )

    def check_rss(self, t: float, samples: Mapping[str, Sequence[tuple[float, int]]]) -> None:
        """``samples``: process label -> [(time, RSS bytes)] in time order."""
        for process, series in samples.items():
            if len(series) < self.bounds.rss_min_samples:
                continue
            self.checks["flat-rss"] += 1
            third = len(series) // 3
            middle = max(rss for _, rss in series[third : 2 * third])
            last = max(rss for _, rss in series[2 * third :])
            allowed = max(middle * self.bounds.rss_growth_ratio, self.bounds.rss_growth_bytes)
            if last - middle > allowed:
                self._violate(
                    "flat-rss",
                    t,
                    process,
                    f"{process}: RSS peak grew from {middle / 2**20:.1f} MiB (middle third) to "
                    f"{last / 2**20:.1f} MiB (last third), more than {allowed / 2**20:.1f} MiB",
                )

    def check_logs(self, t: float, process: str, lines: Iterable[str]) -> None:
        for number, line in enumerate(lines, 1):
            self.checks["no-unexpected-traceback"] += 1
            text = line.strip()
            summary = text[:600] if "Traceback (most recent call last)" in text else None
            if summary is None and text.startswith("{"):
                try:
                    record = orjson.loads(text)
                except orjson.JSONDecodeError:
                    record = None
                if isinstance(record, dict) and record.get("exception"):
                    # The log event and the exception's last line say what happened; the rest is in the log.
                    last = str(record["exception"]).strip().splitlines()[-1]
                    summary = f"{record.get('event', '')!r} (key {record.get('key', '-')}): {last[:400]}"
            if summary is not None:
                self._violate(
                    "no-unexpected-traceback", t, f"{process}:{number}", f"{process} log line {number}: {summary}"
                )

    def check_exits(self, t: float, process: str, code: int | None, killed: bool, log_tail: str) -> None:
        """A controller process ended with ``code`` (None: still running)."""
        self.checks["no-unexpected-exit"] += 1
        if code is None or killed:
            return
        if code == 1 and "leader election lost" in log_tail:
            return
        self._violate("no-unexpected-exit", t, process, f"{process} exited with code {code}: {log_tail[-600:]}")


@dataclass
class Observation:
    """One consistent snapshot for :meth:`InvariantChecker.observe` (what the engine lists)."""

    t: float
    jobs: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    services: list[dict[str, Any]] = field(default_factory=list)
