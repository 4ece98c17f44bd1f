"""The foreign-writer observer's rules, without an API server (controller/tfjob/foreign.py).

The transforms and handlers are driven directly, in the order an informer calls them: the transform sees the
object as the API server sent it (managedFields included), then the handlers see the cached one.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from controller.tfjob import foreign as foreignlib
from controller.tfjob.foreign import ForeignWriters
from controller.tfjob.metrics import TFJobMetrics
from tests.scrape import scraped

Obj = dict[str, Any]
OURS = "tfjob-controller"


class FakeInformer:
    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.synced = True
        self.handlers: list[tuple[Any, Any, Any]] = []

    def add_handler(self, on_add: Any = None, on_update: Any = None, on_delete: Any = None) -> None:
        self.handlers.append((on_add, on_update, on_delete))

    def has_synced(self) -> bool:
        return self.synced

    def get(self, key: str) -> Obj | None:
        return self.objects.get(key)

    def add(self, obj: Obj) -> None:
        """Cache the (transformed) object, then call the add handlers, as an informer does."""
        self.objects[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj
        for on_add, _, _ in self.handlers:
            if on_add is not None:
                on_add(obj)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def record(self, obj: Obj, type_: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], type_, reason, message))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def entry(manager: str, time: str, subresource: str = "", fields: Obj | None = None) -> Obj:
    out = {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": time, "fieldsType": "FieldsV1"}
    if subresource:
        out["subresource"] = subresource
    out["fieldsV1"] = fields or {"f:status": {}}
    return out


def job(*entries: Obj, managed_by: str | None = None) -> Obj:
    spec: Obj = {"tfReplicaSpecs": {}}
    if managed_by:
        spec["runPolicy"] = {"managedBy": managed_by}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid", "managedFields": list(entries)},
        "spec": spec,
    }


def pod(name: str, creator: str) -> Obj:
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "j", "uid": "job-uid", "controller": True}
    refs = {"f:metadata": {"f:ownerReferences": {".": {}, 'k:{"uid":"job-uid"}': {}}}}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "ownerReferences": [owner],
            "managedFields": [entry(creator, "2024-01-01T00:00:00Z", fields=refs)],
        }
    }


def observer() -> tuple[ForeignWriters, FakeInformer, FakeInformer, Recorder, CollectorRegistry, Clock]:
    jobs, pods, recorder, registry, clock = FakeInformer(), FakeInformer(), Recorder(), CollectorRegistry(), Clock()
    metrics = TFJobMetrics(registry)
    foreign = ForeignWriters(OURS, jobs, pods, recorder, metrics, hold=60.0, monotonic=clock)  # type: ignore[arg-type]
    jobs.objects["ns/j"] = job()
    return foreign, jobs, pods, recorder, registry, clock


def writes(registry: CollectorRegistry, write: str) -> float:
    list(registry.collect())  # a scrape releases the namespace's held increments (controller/tfjob/metrics.py)
    return scraped(registry, "tfjob_foreign_writes_total", {"job_namespace": "ns", "write": write}) or 0.0


def test_what_another_manager_wrote_before_the_first_sight_is_history() -> None:
    foreign, *_, recorder, registry, _clock = observer()
    seen = foreign.job_transform(lambda o: o)
    seen(job(entry("manager", "2024-01-01T00:00:00Z", "status")))
    seen(job(entry("manager", "2024-01-01T00:00:00Z", "status"), entry(OURS, "2024-01-01T00:00:09Z", "status")))
    assert recorder.events == [] and foreign.holding("ns/j") is None and writes(registry, "status") == 0


def test_a_new_status_write_by_another_manager_holds_the_job_and_is_told_once() -> None:
    foreign, _jobs, _pods, recorder, registry, clock = observer()
    seen = foreign.job_transform(lambda o: o)
    seen(job(entry(OURS, "2024-01-01T00:00:00Z", "status")))
    seen(job(entry(OURS, "2024-01-01T00:00:00Z", "status"), entry("manager", "2024-01-01T00:00:05Z", "status")))
    seen(job(entry(OURS, "2024-01-01T00:00:00Z", "status"), entry("manager", "2024-01-01T00:00:06Z", "status")))
    assert writes(registry, "status") == 2
    [(name, type_, reason, message)] = recorder.events
    assert (name, type_, reason) == ("j", "Warning", "ForeignWriter") and '"manager"' in message
    assert foreign.holding("ns/j") == 60.0
    clock.now += 59.5
    assert foreign.holding("ns/j") == 0.5
    clock.now += 1
    assert foreign.holding("ns/j") is None


def test_spec_writes_and_our_own_status_writes_are_not_foreign() -> None:
    foreign, *_, recorder, registry, _clock = observer()
    seen = foreign.job_transform(lambda o: o)
    seen(job())
    seen(job(entry("kubectl-edit", "2024-01-01T00:00:05Z"), entry(OURS, "2024-01-01T00:00:05Z", "status")))
    assert recorder.events == [] and writes(registry, "status") == 0


def test_a_job_managed_by_another_controller_by_design_is_never_reported() -> None:
    foreign, *_, recorder, _registry, _clock = observer()
    seen = foreign.job_transform(lambda o: o)
    multikueue = "kueue.x-k8s.io/multikueue"
    seen(job(managed_by=multikueue))
    seen(job(entry("kueue", "2024-01-01T00:00:05Z", "status"), managed_by=multikueue))
    assert recorder.events == [] and foreign.holding("ns/j") is None


def test_a_pod_created_by_another_manager_after_the_first_list_holds_the_job() -> None:
    foreign, _jobs, pods, recorder, registry, _clock = observer()
    transform = foreign.pod_transform(lambda o: o)
    pods.synced = False
    pods.add(transform(pod("j-worker-0", "manager")))  # the first list: adopted, not reported
    pods.add(transform(pod("j-worker-1", OURS)))
    assert recorder.events == []
    pods.synced = True
    pods.add(transform(pod("j-worker-2", OURS)))
    assert recorder.events == []
    pods.add(transform(pod("j-worker-3", "manager")))
    assert writes(registry, "pod") == 1
    [(_, _, _, message)] = recorder.events
    assert "j-worker-3" in message and '"manager"' in message
    assert foreign.holding("ns/j") is not None


def test_who_created_a_pod_is_read_once_when_it_arrives_not_on_each_update(monkeypatch: Any) -> None:
    foreign, _jobs, pods, recorder, _registry, _clock = observer()
    transform = foreign.pod_transform(lambda o: o)
    reads: list[str] = []
    real = foreignlib.owner_reference_setter

    def counted(obj: Obj, owner_uid: str) -> str | None:
        reads.append(obj["metadata"]["name"])
        return real(obj, owner_uid)

    monkeypatch.setattr(foreignlib, "owner_reference_setter", counted)
    pods.add(transform(pod("j-worker-0", OURS)))
    for _ in range(3):  # status updates of the cached pod (same uid): the transform sees each one
        transform(pod("j-worker-0", OURS))
    assert reads == ["j-worker-0"]
    recreated = pod("j-worker-0", "manager")
    recreated["metadata"]["uid"] = "uid-recreated"  # the same name under a new uid is a new pod: read again
    pods.add(transform(recreated))
    assert reads == ["j-worker-0", "j-worker-0"]
    [(_, _, reason, message)] = recorder.events
    assert reason == "ForeignWriter" and '"manager"' in message


def test_a_job_re_created_under_its_name_is_not_held_for_the_old_ones_contest() -> None:
    """A relist shows a job deleted and re-created while the watch was down as an update to a new uid, with no
    tombstone: the old job's hold and status baseline go, as on its deletion; an update of the same job keeps them."""
    foreign, jobs, *_ = observer()
    seen = foreign.job_transform(lambda o: o)
    seen(job(entry(OURS, "2024-01-01T00:00:00Z", "status")))
    held = seen(job(entry(OURS, "2024-01-01T00:00:00Z", "status"), entry("manager", "2024-01-01T00:00:05Z", "status")))
    assert foreign.holding("ns/j") == 60.0
    [(_, on_update, _)] = jobs.handlers
    on_update(held, held)
    assert foreign.holding("ns/j") == 60.0
    new = job()
    new["metadata"]["uid"] = "job-uid-2"
    on_update(held, seen(new))
    assert foreign.holding("ns/j") is None
    assert set(foreign._status_times) == {"job-uid-2"}
