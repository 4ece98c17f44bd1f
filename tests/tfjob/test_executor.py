"""The executor's write pattern: deletions then creations in concurrent slow-start batches that stop at
the first failure, with the expectations contract (recorded before sending, lowered on failure, never
recorded for what was not sent) and events that never hold up a write."""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from controller.runtime.errors import Conflict, ServerError
from controller.tfjob.actions import CreatePod, CreateService, Decision, DeletePod
from controller.tfjob.decide import decide
from controller.tfjob.executor import Executor, slow_start
from controller.tfjob.expectations import Expectations
from controller.tfjob.metrics import TFJobMetrics

from .builders import NOW, at, make_job, running_cluster


class Log:
    """Writes that log their start and end and yield in between: since a batch starts all its writes
    before any of them resumes, the runs of consecutive starts in the log are the batches."""

    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.log: list[tuple[str, str]] = []
        self.fail = set(fail)

    def write(self, name: str):
        async def run() -> None:
            self.log.append(("start", name))
            await anyio.sleep(0)
            await anyio.sleep(0)
            self.log.append(("end", name))
            if name in self.fail:
                raise ServerError(500, "InternalError", f"{name} failed")

        return run

    def batches(self) -> list[int]:
        sizes: list[int] = []
        previous = "end"
        for what, _ in self.log:
            if what == "start":
                if previous == "end":
                    sizes.append(0)
                sizes[-1] += 1
            previous = what
        return sizes

    def started(self) -> list[str]:
        return [name for what, name in self.log if what == "start"]


@pytest.mark.parametrize(
    ("total", "cap", "sizes"),
    [
        (1, 32, [1]),
        (10, 32, [1, 2, 4, 3]),
        (100, 16, [1, 2, 4, 8, 16, 16, 16, 16, 16, 5]),
    ],
)
async def test_slow_start_doubles_up_to_the_cap(total, cap, sizes):
    log = Log()
    assert await slow_start([log.write(f"w{i}") for i in range(total)], cap) == total
    assert log.batches() == sizes
    assert log.started() == [f"w{i}" for i in range(total)]  # in the order given


async def test_slow_start_finishes_the_failing_batch_and_sends_nothing_more():
    log = Log(fail={"w4"})  # in the third batch (w3..w6)
    with pytest.raises(ServerError, match="w4 failed"):
        await slow_start([log.write(f"w{i}") for i in range(20)], 32)
    assert log.batches() == [1, 2, 4]
    assert log.started() == [f"w{i}" for i in range(7)]  # w7.. never sent
    assert [name for what, name in log.log if what == "end"][-4:] == ["w3", "w4", "w5", "w6"]  # the batch completed


class FakeClient:
    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.fail = set(fail)
        self.sent: list[tuple[str, str]] = []
        self.concurrent = 0
        self.max_concurrent = 0

    async def _call(self, verb: str, name: str) -> dict[str, Any]:
        self.sent.append((verb, name))
        self.concurrent += 1
        self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await anyio.sleep(0.005)
        finally:
            self.concurrent -= 1
        if name in self.fail:
            raise ServerError(500, "InternalError", f"cannot {verb} {name}")
        return {}

    async def create(self, resource: Any, body: dict[str, Any], *, namespace: str) -> dict[str, Any]:
        return await self._call("create", f"{resource.plural}/{body['metadata']['name']}")

    async def delete(self, resource: Any, name: str, **kwargs: Any) -> dict[str, Any]:
        return await self._call("delete", f"{resource.plural}/{name}")

    async def replace(self, resource: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.sent.append(("status", body["metadata"]["name"]))
        return body


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def executor(client: FakeClient, expectations: Expectations, recorder: Recorded) -> Executor:
    return Executor(client, expectations, recorder, TFJobMetrics(CollectorRegistry()), max_concurrent=8)  # type: ignore[arg-type]


async def test_a_job_is_built_concurrently_deletions_first_status_last():
    job = make_job(worker=8, ps=1, dynamic=True)  # 18 objects: within the first pass
    job["metadata"]["resourceVersion"] = "1"
    decision = decide(job, [], [], NOW)
    stale = DeletePod("old-pod", "old-uid", "Cleanup")  # not something decide pairs; tests the phase order
    decision = Decision((stale, *decision.actions), decision.events, decision.metrics, decision.status, None)
    client = FakeClient()
    recorder = Recorded()
    expectations = Expectations(lambda: 0.0)
    await executor(client, expectations, recorder).apply("default/test-tfjob", job, decision)
    assert client.sent[0] == ("delete", "pods/old-pod")
    assert client.sent[-1] == ("status", "test-tfjob")
    assert len(client.sent) == 2 + 9 + 9
    assert client.max_concurrent == 8
    created = sorted(name for verb, name in client.sent if verb == "create")
    assert created == sorted(
        [f"pods/test-tfjob-{t}-{i}" for t, n in (("ps", 1), ("worker", 8)) for i in range(n)]
        + [f"services/test-tfjob-{t}-{i}" for t, n in (("ps", 1), ("worker", 8)) for i in range(n)]
    )
    assert sum(reason == "SuccessfulCreatePod" for reason, _ in recorder.events) == 9
    # every create is expected until the informer sees it
    assert expectations.pending_until("default/test-tfjob") is not None


async def test_a_failed_batch_lowers_its_expectation_and_sends_nothing_more():
    job = make_job(worker=8, ps=1, dynamic=True)
    job["metadata"]["resourceVersion"] = "1"
    decision = decide(job, [], [], NOW)
    creates = [a for a in decision.actions if isinstance(a, (CreatePod, CreateService))]
    failing = creates[2]  # in the second batch (1 + 2)
    name = (failing.pod if isinstance(failing, CreatePod) else failing.service)["metadata"]["name"]
    plural = "pods" if isinstance(failing, CreatePod) else "services"
    client = FakeClient(fail={f"{plural}/{name}"})
    recorder = Recorded()
    clock = [0.0]
    expectations = Expectations(lambda: clock[0])
    with pytest.raises(ServerError):
        await executor(client, expectations, recorder).apply("default/test-tfjob", job, decision)
    assert len(client.sent) == 3  # the batches of 1 and 2; no status write, nothing more sent
    assert ("FailedCreatePod" if plural == "pods" else "FailedCreateService") in [r for r, _ in recorder.events]
    # the two that succeeded are still expected; the failed one and the unsent ones never will be
    for observed in client.sent[:2]:
        kind = "Pod" if observed[1].startswith("pods/") else "Service"
        expectations.creation_observed("default/test-tfjob", kind, observed[1].split("/", 1)[1])
    assert expectations.pending_until("default/test-tfjob") is None


# --- PodGroups (gang scheduling) ---------------------------------------------------------------------
class GangClient(FakeClient):
    """Records (verb, resource/name) of every write; ``answers`` maps one to the error it gets."""

    def __init__(self, answers: dict[tuple[str, str], Exception] | None = None) -> None:
        super().__init__()
        self.answers = answers or {}

    async def _call(self, verb: str, name: str) -> dict[str, Any]:
        self.sent.append((verb, name))
        await anyio.sleep(0)
        if (verb, name) in self.answers:
            raise self.answers[(verb, name)]
        return {}

    async def replace(self, resource: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if kwargs.get("subresource") == "status":
            self.sent.append(("status", body["metadata"]["name"]))
            return body
        return await self._call("update", f"{resource.plural}/{body['metadata']['name']}")


def gang_executor(client: GangClient, recorder: Recorded) -> Executor:
    from controller.tfjob.controller import pod_group_resource
    from controller.tfjob.gang import gang_of

    resource = pod_group_resource(gang_of("volcano"))  # type: ignore[arg-type]
    return Executor(
        client,
        Expectations(lambda: 0.0),
        recorder,
        TFJobMetrics(CollectorRegistry()),  # type: ignore[arg-type]
        max_concurrent=8,
        pod_groups=resource,
    )


POD_GROUP = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "test-tfjob", "namespace": "default"},
    "spec": {"minMember": 1},
}


async def test_the_pod_group_is_written_before_any_pod():
    from controller.tfjob.actions import CreatePodGroup, UpdatePodGroup

    job = make_job(worker=1)
    client, recorder = GangClient(), Recorded()
    pod = {"metadata": {"name": "test-tfjob-worker-0"}}
    for action in (CreatePodGroup(POD_GROUP), UpdatePodGroup(POD_GROUP)):
        client.sent.clear()
        decision = Decision((action, CreatePod(pod, "Worker", 0)), (), (), {}, None)
        await gang_executor(client, recorder).apply("default/test-tfjob", job, decision)
        verb = "create" if isinstance(action, CreatePodGroup) else "update"
        assert client.sent == [(verb, "podgroups/test-tfjob"), ("create", "pods/test-tfjob-worker-0")]


async def test_a_pod_group_that_already_exists_is_done_and_a_conflict_retries():
    from controller.runtime.errors import AlreadyExists
    from controller.tfjob.actions import CreatePodGroup, UpdatePodGroup

    job = make_job(worker=1)
    exists = AlreadyExists(409, "AlreadyExists", 'podgroups "test-tfjob" already exists')
    client, recorder = GangClient({("create", "podgroups/test-tfjob"): exists}), Recorded()
    await gang_executor(client, recorder).apply("k", job, Decision((CreatePodGroup(POD_GROUP),), (), (), {}, None))
    assert recorder.events == []

    stale = Conflict(409, "Conflict", "the object has been modified")
    client = GangClient({("update", "podgroups/test-tfjob"): stale})
    pod = {"metadata": {"name": "test-tfjob-worker-0"}}
    decision = Decision((UpdatePodGroup(POD_GROUP), CreatePod(pod, "Worker", 0)), (), (), {}, None)
    with pytest.raises(Conflict):
        await gang_executor(client, recorder).apply("k", job, decision)
    assert client.sent == [("update", "podgroups/test-tfjob")]  # no pod on a stale view of the group


async def test_deleting_the_pod_group_is_reported_as_upstream_does():
    from controller.runtime.errors import NotFound
    from controller.tfjob.actions import DeletePodGroup

    job = make_job(worker=1)
    decision = Decision((DeletePodGroup("test-tfjob", "pg-uid"),), (), (), {}, None)
    client, recorder = GangClient(), Recorded()
    await gang_executor(client, recorder).apply("k", job, decision)
    assert recorder.events == [
        ("JobTerminated", "Job has been terminated. Deleting PodGroup"),
        ("SuccessfulDeletePodGroup", "Deleted PodGroup: test-tfjob"),
    ]

    gone = NotFound(404, "NotFound", 'podgroups.scheduling.volcano.sh "test-tfjob" not found')
    client, recorder = GangClient({("delete", "podgroups/test-tfjob"): gone}), Recorded()
    await gang_executor(client, recorder).apply("k", job, decision)
    assert recorder.events == []  # already gone: nothing happened, nothing to report

    broken = ServerError(500, "InternalError", "etcdserver: request timed out")
    client, recorder = GangClient({("delete", "podgroups/test-tfjob"): broken}), Recorded()
    with pytest.raises(ServerError):
        await gang_executor(client, recorder).apply("k", job, decision)
    assert [reason for reason, _ in recorder.events] == ["JobTerminated", "FailedDeletePodGroup"]
    assert recorder.events[1][1].startswith("Error deleting: unable to delete PodGroup: ")


WAITING = {"conditions": [{"type": "Created", "status": "True"}], "lastReconcileTime": "2024-01-01T00:00:00Z"}


async def test_a_refused_pod_group_is_a_warning_and_the_waiting_status_without_any_pod():
    from controller.runtime.errors import Forbidden
    from controller.tfjob.actions import CreatePodGroup, UpdatePodGroup

    pod = {"metadata": {"name": "test-tfjob-worker-0"}}
    refused = Forbidden(403, "Forbidden", 'podgroups.scheduling.volcano.sh is forbidden: User "x" cannot create')
    for action, verb, reason in (
        (CreatePodGroup(POD_GROUP), "create", "FailedCreatePodGroup"),
        (UpdatePodGroup(POD_GROUP), "update", "FailedUpdatePodGroup"),
    ):
        job = make_job(worker=1)
        client, recorder = GangClient({(verb, "podgroups/test-tfjob"): refused}), Recorded()
        decision = Decision((action, CreatePod(pod, "Worker", 0)), (), (), {"startTime": "x"}, None, WAITING)
        with pytest.raises(Forbidden):
            await gang_executor(client, recorder).apply("k", job, decision)
        assert client.sent == [(verb, "podgroups/test-tfjob"), ("status", "test-tfjob")]  # no pod
        assert recorder.events == [(reason, f"Error {verb[:-1]}ing PodGroup default/test-tfjob: {refused}")]

        # The retry (runner backoff) rewrites nothing when only lastReconcileTime would move: each
        # status write wakes the job at once and would defeat the backoff.
        job["status"] = {**WAITING, "lastReconcileTime": "2023-12-31T23:59:00Z"}
        client.sent.clear()
        with pytest.raises(Forbidden):
            await gang_executor(client, recorder).apply("k", job, decision)
        assert client.sent == [(verb, "podgroups/test-tfjob")]


async def test_a_pod_group_crd_gone_at_run_time_is_named_and_no_pod_is_created():
    from controller.runtime.errors import NotFound
    from controller.tfjob.actions import CreatePodGroup, UpdatePodGroup

    pod = {"metadata": {"name": "test-tfjob-worker-0"}}
    unserved = NotFound(404, "NotFound", "the server could not find the requested resource")
    for action, verb in ((CreatePodGroup(POD_GROUP), "create"), (UpdatePodGroup(POD_GROUP), "update")):
        client, recorder = GangClient({(verb, "podgroups/test-tfjob"): unserved}), Recorded()
        decision = Decision((action, CreatePod(pod, "Worker", 0)), (), (), {}, None, WAITING)
        with pytest.raises(NotFound):
            await gang_executor(client, recorder).apply("k", make_job(worker=1), decision)
        assert client.sent == [(verb, "podgroups/test-tfjob"), ("status", "test-tfjob")]
        [(_, message)] = recorder.events
        assert message == (
            f"Error {verb[:-1]}ing PodGroup default/test-tfjob: the PodGroup CRD "
            f"podgroups.scheduling.volcano.sh is not installed: {unserved}"
        )


async def test_a_pod_group_deleted_meanwhile_stops_the_pass_quietly():
    from controller.runtime.errors import NotFound
    from controller.tfjob.actions import UpdatePodGroup

    gone = NotFound(
        404,
        "NotFound",
        'podgroups.scheduling.volcano.sh "test-tfjob" not found',
        {"name": "test-tfjob", "group": "scheduling.volcano.sh", "kind": "podgroups"},
    )
    client, recorder = GangClient({("update", "podgroups/test-tfjob"): gone}), Recorded()
    pod = {"metadata": {"name": "test-tfjob-worker-0"}}
    decision = Decision((UpdatePodGroup(POD_GROUP), CreatePod(pod, "Worker", 0)), (), (), {"x": 1}, None, WAITING)
    assert await gang_executor(client, recorder).apply("k", make_job(worker=1), decision) is None
    # No pod without its gang; its delete event brings the job back and the next pass recreates it.
    assert client.sent == [("update", "podgroups/test-tfjob")] and recorder.events == []


class ConflictOnStatus(FakeClient):
    """A client whose status write loses a race with another writer (409)."""

    async def replace(self, resource: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.sent.append(("status", body["metadata"]["name"]))
        raise Conflict(409, "Conflict", "the object has been modified")


def scale_down_to_one() -> tuple[dict[str, Any], Decision]:
    """A running dynamic job of 3 workers scaled to 1, worker 0 the cheapest to remove: workers 0 and 2 leave."""
    cluster = running_cluster(workers=3)
    cluster.annotate("test-tfjob-worker-0", {"controller.kubernetes.io/pod-deletion-cost": "-5"})
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    cluster.job["metadata"]["resourceVersion"] = "7"
    decision = cluster.decide(at(10))
    assert decision.status_first and decision.status["dynamicWorkers"]["members"] == [1]
    # Deciding again on the same objects (the retry after a lost write) chooses the same workers.
    assert cluster.decide(at(10)) == decision
    return cluster.job, decision


async def test_a_scale_down_whose_status_write_conflicts_removes_nobody():
    # Were the workers removed first, the cheapest one's pod could be gone before the retry, which would then
    # not know it had chosen it and remove a second running worker instead (worker 1, kept on purpose).
    job, decision = scale_down_to_one()
    client, recorder = ConflictOnStatus(), Recorded()
    with pytest.raises(Conflict):
        await executor(client, Expectations(lambda: 0.0), recorder).apply("default/test-tfjob", job, decision)
    assert client.sent == [("status", "test-tfjob")]
    assert recorder.events == []  # the leaving is reported with the write that records it, by the retry


async def test_a_scale_down_records_the_members_before_removing_the_leavers():
    job, decision = scale_down_to_one()
    client, recorder, expectations = FakeClient(), Recorded(), Expectations(lambda: 0.0)
    await executor(client, expectations, recorder).apply("default/test-tfjob", job, decision)
    assert client.sent[0] == ("status", "test-tfjob")
    assert sorted(client.sent[1:]) == [
        ("delete", f"{plural}/test-tfjob-worker-{i}") for plural in ("pods", "services") for i in (0, 2)
    ]
    assert [reason for reason, _ in recorder.events if reason == "WorkerScaledDown"] == ["WorkerScaledDown"]


async def test_a_pass_that_records_a_failover_writes_its_status_first():
    cluster = running_cluster(workers=3)
    cluster.remove_pod("test-tfjob-worker-1")  # vanished: the failover is recorded, the replacement waits
    decision = cluster.decide(at(10))
    assert decision.status_first
    client = FakeClient()
    await executor(client, Expectations(lambda: 0.0), Recorded()).apply("default/test-tfjob", cluster.job, decision)
    assert client.sent == [("status", "test-tfjob")]


async def test_a_pass_that_removes_no_member_writes_its_status_last():
    cluster = running_cluster(workers=3)
    cluster.remove_pod("test-tfjob-worker-1")
    cluster.step(at(10))  # the failover recorded; this pass creates the replacement
    decision = cluster.decide(at(10))
    assert not decision.status_first
    client = FakeClient()
    await executor(client, Expectations(lambda: 0.0), Recorded()).apply("default/test-tfjob", cluster.job, decision)
    assert client.sent[0] == ("create", "pods/test-tfjob-worker-1") and client.sent[-1] == ("status", "test-tfjob")


async def test_a_gang_scale_down_writes_the_pod_group_then_the_members_then_removes():
    from controller.tfjob.actions import UpdatePodGroup

    job, decision = scale_down_to_one()
    decision = dataclasses.replace(decision, actions=(UpdatePodGroup(POD_GROUP), *decision.actions))
    client = GangClient()
    await gang_executor(client, Recorded()).apply("default/test-tfjob", job, decision)
    assert client.sent[:2] == [("update", "podgroups/test-tfjob"), ("status", "test-tfjob")]
    assert {verb for verb, _ in client.sent[2:]} == {"delete"}
