"""JobObserver's rules, on hand-made cache contents: what is measured, once, and what is never measured.

(tests/e2e/test_job_metrics.py and tests/ops/test_prometheus.py prove the wiring end to end.)"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from controller.runtime.cache import CONTROLLER_UID_INDEX
from controller.tfjob import observe
from controller.tfjob.metrics import TFJobMetrics
from controller.tfjob.observe import JobObserver, job_state
from tests.scrape import scraped

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def stamp(seconds: float) -> str:
    from controller.tfjob.conditions import format_epoch

    return format_epoch(seconds)


class FakeInformer:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.handlers: list[tuple[Any, Any, Any]] = []
        self.synced = True

    def add_handler(self, on_add: Any = None, on_update: Any = None, on_delete: Any = None) -> None:
        self.handlers.append((on_add, on_update, on_delete))

    def has_synced(self) -> bool:
        return self.synced

    def get(self, key: str) -> dict[str, Any] | None:
        return self.objects.get(key)

    def list(self) -> list[dict[str, Any]]:
        return list(self.objects.values())

    def by_index(self, name: str, value: str) -> list[dict[str, Any]]:
        assert name == CONTROLLER_UID_INDEX
        return [o for o in self.objects.values() if o["metadata"]["ownerReferences"][0]["uid"] == value]

    def add(self, obj: dict[str, Any]) -> None:
        self.objects[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
        for on_add, _, _ in self.handlers:
            if on_add:
                on_add(obj)

    def update(self, new: dict[str, Any]) -> None:
        key = f"{new['metadata']['namespace']}/{new['metadata']['name']}"
        old = self.objects[key]
        self.objects[key] = new
        for _, on_update, _ in self.handlers:
            if on_update:
                on_update(old, new)


def job(conditions: list[str] = (), workers: int = 2, records: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": c, "status": "True"} for c in conditions]}
    if records:
        status["dynamicWorkers"] = {"workers": records}
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid", "creationTimestamp": stamp(T0)},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers}}, "enableDynamicWorker": True},
        "status": status,
    }


def pod(index: int, phase: str, created: float, uid: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"j-worker-{index}",
            "namespace": "ns",
            "uid": uid,
            "creationTimestamp": stamp(created),
            "labels": {
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(index),
            },
            "ownerReferences": [{"kind": "TFJob", "name": "j", "uid": "job-uid", "controller": True}],
        },
        "status": {"phase": phase},
    }


def clocked_observer(now: float) -> tuple[JobObserver, list[float], FakeInformer, FakeInformer, CollectorRegistry]:
    """An observer on fake informers whose clock (wall and monotonic) is ``clock[0]``, for tests to move."""
    registry = CollectorRegistry()
    jobs, pods = FakeInformer(), FakeInformer()
    clock = [now]
    watcher = JobObserver(jobs, pods, TFJobMetrics(registry), wall=lambda: clock[0], monotonic=lambda: clock[0])  # type: ignore[arg-type]
    return watcher, clock, jobs, pods, registry


def observer(now: float) -> tuple[JobObserver, FakeInformer, FakeInformer, CollectorRegistry]:
    watcher, _, jobs, pods, registry = clocked_observer(now)
    return watcher, jobs, pods, registry


def calls_of(monkeypatch: Any, function: str) -> list[Any]:
    """The arguments of every call the observer makes to one of the functions it imports, from now on."""
    calls: list[Any] = []
    real = getattr(observe, function)

    def counted(argument: Any) -> Any:
        calls.append(argument)
        return real(argument)

    monkeypatch.setattr(observe, function, counted)
    return calls


def test_failover_latency_is_measured_once_per_failover_and_only_for_the_replacement() -> None:
    _, jobs, pods, registry = observer(now=T0 + 100)
    record = {"state": "Replaced", "failovers": 1, "lastFailoverTime": stamp(T0 + 90), "lastReason": "Evicted"}
    jobs.add(job(["Created", "Running"], records={"1": record}))
    pods.add(pod(0, "Running", T0, "p0"))
    pods.add(pod(1, "Pending", T0 + 95, "p1-new"))
    pods.update(pod(1, "Running", T0 + 95, "p1-new"))
    count = {"job_namespace": "ns", "reason": "Evicted"}
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 1
    assert scraped(registry, "tfjob_worker_failover_seconds_sum", count) == 10.0
    # The same record again (a relist delivering another Pending -> Running view): not a second failover.
    pods.update(pod(1, "Pending", T0 + 95, "p1-new"))
    pods.update(pod(1, "Running", T0 + 95, "p1-new"))
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 1


def test_failover_latency_is_measured_when_the_record_arrives_after_the_replacement_runs() -> None:
    # A first failover is replaced at once and the status is written after the creates, so the replacement's
    # Running (pods watch) can reach the controller before the job update carrying the record (jobs watch).
    _, watcher_clock, jobs, pods, registry = clocked_observer(T0 + 97)
    jobs.add(job(["Created", "Running"]))
    pods.add(pod(0, "Running", T0, "p0"))
    pods.add(pod(1, "Pending", T0 + 95, "p1-new"))
    pods.update(pod(1, "Running", T0 + 95, "p1-new"))  # seen Running at T0 + 97, before any record
    count = {"job_namespace": "ns", "reason": "Deleted"}
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 0
    watcher_clock[0] = T0 + 200  # the job update comes late; the latency still ends when the pod ran
    record = {
        "state": "Replaced",
        "failovers": 1,
        "lastFailoverTime": stamp(T0 + 94),
        "lastReason": "Deleted",
        "podUID": "p1-old",
    }
    jobs.update(job(["Created", "Running"], records={"1": record}))
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 1
    assert scraped(registry, "tfjob_worker_failover_seconds_sum", count) == 3.0
    jobs.update(job(["Created", "Running"], records={"1": record}))  # the same record again: measured once
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 1


def test_a_job_update_reads_its_worker_records_once_however_many_there_are(monkeypatch: Any) -> None:
    """Three workers fail over together (a node lost): each job update parses status.dynamicWorkers once, and
    every replacement's latency is still measured."""
    _, jobs, pods, registry = observer(now=T0 + 100)
    jobs.add(job(["Created", "Running"], workers=3))
    for i in range(3):
        pods.add(pod(i, "Pending", T0 + 95, f"p{i}-new"))
        pods.update(pod(i, "Running", T0 + 95, f"p{i}-new"))
    parses = calls_of(monkeypatch, "parse_worker_records")
    record = {"state": "Replaced", "failovers": 1, "lastFailoverTime": stamp(T0 + 90), "lastReason": "NodeLost"}
    jobs.update(job(["Created", "Running"], workers=3, records={str(i): dict(record) for i in range(3)}))
    assert len(parses) == 1
    count = {"job_namespace": "ns", "reason": "NodeLost"}
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 3
    assert scraped(registry, "tfjob_worker_failover_seconds_sum", count) == 30.0


def test_a_record_about_the_running_pod_itself_is_not_a_replacement() -> None:
    _, jobs, pods, registry = observer(now=T0 + 100)
    jobs.add(job(["Created", "Running"]))
    pods.add(pod(1, "Pending", T0 + 95, "p1"))
    pods.update(pod(1, "Running", T0 + 95, "p1"))
    record = {
        "state": "Replacing",
        "failovers": 1,
        "lastFailoverTime": stamp(T0 + 99),
        "lastReason": "Evicted",
        "podUID": "p1",
    }
    jobs.update(job(["Created", "Running"], records={"1": record}))
    assert scraped(registry, "tfjob_worker_failover_seconds_count", {"job_namespace": "ns", "reason": "Evicted"}) == 0


def test_a_pod_older_than_the_failover_is_not_its_replacement() -> None:
    _, jobs, pods, registry = observer(now=T0 + 100)
    record = {"state": "Replacing", "failovers": 1, "lastFailoverTime": stamp(T0 + 90), "lastReason": "Deleted"}
    jobs.add(job(["Created", "Running"], records={"0": record}))
    pods.add(pod(0, "Pending", T0 + 1, "stale"))
    pods.update(pod(0, "Running", T0 + 1, "stale"))
    assert scraped(registry, "tfjob_worker_failover_seconds_count", {"job_namespace": "ns", "reason": "Deleted"}) == 0


def test_a_failed_pod_created_in_the_failover_second_is_not_its_own_replacement() -> None:
    # Timestamps have whole seconds: a worker created, run and failed over within one second is as old as the
    # record. Once it has stopped running it must not be taken for the replacement (that measured ~0 s).
    _, clock, jobs, pods, registry = clocked_observer(T0 + 0.5)
    jobs.add(job(["Created", "Running"]))
    pods.add(pod(1, "Pending", T0, "p1-old"))
    pods.update(pod(1, "Running", T0, "p1-old"))  # seen Running at T0 + 0.5
    clock[0] = T0 + 0.8
    pods.update(pod(1, "Failed", T0, "p1-old"))
    record = {"state": "Replaced", "failovers": 1, "lastFailoverTime": stamp(T0), "lastReason": "OOMKilled"}
    jobs.update(job(["Created", "Running"], records={"1": record}))
    count = {"job_namespace": "ns", "reason": "OOMKilled"}
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 0
    del pods.objects["ns/j-worker-1"]
    pods.add(pod(1, "Pending", T0 + 1, "p1-new"))
    clock[0] = T0 + 2.0
    pods.update(pod(1, "Running", T0 + 1, "p1-new"))
    assert scraped(registry, "tfjob_worker_failover_seconds_count", count) == 1
    assert scraped(registry, "tfjob_worker_failover_seconds_sum", count) == 2.0


def test_time_to_running_counts_jobs_first_seen_before_running_once_all_replicas_run() -> None:
    _, jobs, pods, registry = observer(now=T0 + 30)
    jobs.add(job(["Created"]))
    pods.add(pod(0, "Pending", T0 + 1, "p0"))
    pods.add(pod(1, "Pending", T0 + 1, "p1"))
    pods.update(pod(0, "Running", T0 + 1, "p0"))
    count = {"job_namespace": "ns"}
    assert scraped(registry, "tfjob_job_time_to_running_seconds_count", count) == 0  # one of two runs
    pods.update(pod(1, "Running", T0 + 1, "p1"))
    assert scraped(registry, "tfjob_job_time_to_running_seconds_count", count) == 1
    assert scraped(registry, "tfjob_job_time_to_running_seconds_sum", count) == 30.0


def test_a_job_already_running_when_the_controller_starts_is_not_measured() -> None:
    _, jobs, pods, registry = observer(now=T0 + 3600)
    jobs.add(job(["Created", "Running"]))  # a restart: the job ran long before this process
    pods.add(pod(0, "Running", T0, "p0"))
    pods.add(pod(1, "Pending", T0 + 3500, "p1"))
    pods.update(pod(1, "Running", T0 + 3500, "p1"))
    assert scraped(registry, "tfjob_job_time_to_running_seconds_count", {"job_namespace": "ns"}) == 0


def test_a_job_re_created_under_its_name_is_measured_afresh_and_the_old_ones_entries_go() -> None:
    """A relist shows a job deleted and re-created while the watch was down as an update to a new uid, with no
    add: the new job's time to running is still measured, and what was kept of the old job is dropped."""
    watcher, jobs, pods, registry = observer(now=T0 + 30)
    jobs.add(job(["Created", "Running"]))
    pods.add(pod(0, "Pending", T0, "p0"))
    pods.update(pod(0, "Running", T0, "p0"))
    assert "job-uid" in watcher._worker_running
    new = job(["Created"], workers=1)
    new["metadata"]["uid"] = "job-uid-2"
    jobs.update(new)
    assert "job-uid" not in watcher._worker_running
    del pods.objects["ns/j-worker-0"]
    replacement = pod(0, "Pending", T0 + 20, "q0")
    replacement["metadata"]["ownerReferences"][0]["uid"] = "job-uid-2"
    pods.add(replacement)
    pods.update({**replacement, "status": {"phase": "Running"}})
    count = {"job_namespace": "ns"}
    assert scraped(registry, "tfjob_job_time_to_running_seconds_count", count) == 1
    assert scraped(registry, "tfjob_job_time_to_running_seconds_sum", count) == 30.0


def test_job_state_is_the_most_advanced_true_condition() -> None:
    assert job_state(job([])) == "Pending"
    assert job_state(job(["Created"])) == "Created"
    assert job_state(job(["Created", "Running"])) == "Running"
    assert job_state(job(["Created", "Running", "Succeeded"])) == "Succeeded"
    assert job_state(job(["Created", "Restarting"])) == "Restarting"
    assert job_state(job(["Created", "Suspended"])) == "Suspended"


def test_a_standby_reports_no_job_gauges() -> None:
    watcher, jobs, _, _ = observer(now=T0)
    jobs.synced = False
    jobs.add(job(["Created"]))
    assert list(watcher.collect()) == []
    jobs.synced = True
    [by_state, *_] = list(watcher.collect())
    assert {s.labels["state"]: s.value for s in by_state.samples}["Created"] == 1


def states(watcher: JobObserver) -> dict[str, float]:
    """The ``tfjob_jobs`` gauge by state."""
    by_state = next(iter(watcher.collect()))
    return {s.labels["state"]: s.value for s in by_state.samples}


def test_a_job_with_an_unreadable_status_is_counted_and_reported_once_per_generation(monkeypatch: Any) -> None:
    from structlog.testing import capture_logs

    validated = calls_of(monkeypatch, "validate_status")

    def hostile(status: Any, generation: int, version: str) -> dict[str, Any]:
        garbled = job(["Created", "Running"])
        garbled["metadata"].update(generation=generation, resourceVersion=version)
        garbled["status"] = status
        return garbled

    with capture_logs() as logs:
        watcher, jobs, _, _ = observer(now=T0)
        jobs.add(hostile("Running", 1, "1"))
        jobs.update(hostile("Running", 1, "2"))  # every update of the same generation: said already
        jobs.update(hostile(["Running"], 1, "3"))
        assert states(watcher)["Pending"] == 1  # no readable condition
        jobs.update(hostile({"conditions": "Running", "startTime": 5}, 2, "4"))  # the spec changed
        jobs.update(hostile({"conditions": "Running", "startTime": 5}, 2, "5"))
        jobs.update(hostile({"dynamicWorkers": {"members": [2, 0], "workers": {}}}, 3, "6"))
        jobs.update(job(["Created", "Running"]))  # rewritten by the controller: nothing to say
    reports = [(e["log_level"], e["job"], e["generation"], e["error"]) for e in logs]
    assert reports == [
        ("warning", "ns/j", 1, 'status: Invalid value: "Running": must be an object'),
        (
            "warning",
            "ns/j",
            2,
            '[status.conditions: Invalid value: "Running": must be a list of objects, '
            "status.startTime: Invalid value: 5: must be an RFC 3339 time]",
        ),
        (
            "warning",
            "ns/j",
            3,
            "status.dynamicWorkers.members: Invalid value: <list>: must be an ascending list of distinct worker "
            "indices (read as 0..replicas-1)",
        ),
    ]
    # A generation already reported is not validated again: once for each of generations 1-3, once for the
    # rewritten status (which carries no generation).
    assert len(validated) == 4
    assert states(watcher)["Running"] == 1
    for _, _, on_delete in jobs.handlers:
        if on_delete:
            on_delete(jobs.objects.pop("ns/j"))
    assert watcher._reported == {}


def test_a_job_with_a_hole_is_degraded_only_when_a_member_does_not_run() -> None:
    """After worker 1 of 0..2 left, the members are 0 and 2: worker 2 counts although 2 >= replicas."""
    watcher, jobs, pods, _ = observer(now=T0 + 10)

    def degraded() -> float:
        family = next(f for f in watcher.collect() if f.name == "tfjob_jobs_degraded")
        return sum(s.value for s in family.samples)

    holed = job(["Created", "Running"], workers=2)
    holed["status"]["dynamicWorkers"] = {"members": [0, 2], "summary": "0,2", "workers": {}}
    jobs.add(holed)
    pods.add(pod(0, "Running", T0, "p0"))
    pods.add(pod(2, "Running", T0, "p2"))
    assert degraded() == 0
    pods.add(pod(1, "Running", T0, "p1"))  # a leftover of the hole running changes nothing
    pods.update(pod(2, "Pending", T0 + 5, "p2-new"))
    assert degraded() == 1
