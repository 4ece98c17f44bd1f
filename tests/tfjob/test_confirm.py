"""confirm.py: a pass that records a failover or is a job's first write in the process goes on only when the server
has the job at the cached resourceVersion and the same pods, each at its cached resourceVersion (consistent reads);
a job no pass has written yet is confirmed by the job alone."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from controller.runtime.client import PODS
from controller.tfjob.actions import CreatePod, Decision, DeletePod, MetricInc
from controller.tfjob.confirm import ViewCheck
from controller.tfjob.executor import TFJOBS

from .builders import make_job, make_pod

SELECTOR = "training.kubeflow.org/operator-name=tfjob-controller"


class Server:
    """Answers the LIST of the job (by name) and the LIST of its pods, recording the requests."""

    def __init__(self, job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> None:
        self.job, self.pods = job, pods
        self.requests: list[tuple[str, Any]] = []

    async def list(
        self, resource: Any, *, namespace: str, label_selector: str | None = None, field_selector: str | None = None
    ) -> dict[str, Any]:
        if field_selector is not None:
            self.requests.append(("list", (resource, namespace, field_selector)))
            return {"items": [self.job] if self.job is not None else []}
        self.requests.append(("list", (resource, namespace, label_selector)))
        return {"items": self.pods}


def job_at(version: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """The job at ``version``, with a status (a pass has written it) unless ``status`` is given."""
    job = make_job(worker=2, dynamic=True)
    job["metadata"]["resourceVersion"] = version
    job["status"] = {"conditions": [{"type": "Created", "status": "True"}]} if status is None else status
    return job


def check(server: Server, job: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
    view = ViewCheck(server, TFJOBS, SELECTOR)  # type: ignore[arg-type]
    result = anyio.run(view.current, "default/test-tfjob", job, pods)
    assert ("default/test-tfjob" in view.confirmed) == result
    return result


def test_the_same_job_and_pods_confirm_the_view_with_two_consistent_reads() -> None:
    job = job_at("7")
    pods = [make_pod(job, "Worker", i) for i in range(2)]
    server = Server(job_at("7"), pods)
    assert check(server, job, pods)
    assert server.requests == [
        ("list", (TFJOBS, "default", "metadata.name=test-tfjob")),
        ("list", (PODS, "default", f"{SELECTOR},training.kubeflow.org/job-name=test-tfjob")),
    ]


@pytest.mark.parametrize("status", [{}, None], ids=["empty status", "no status"])
def test_a_job_no_pass_has_written_is_confirmed_by_the_job_alone(status: dict[str, Any] | None) -> None:
    """Its pods cannot make a record or a count be taken twice, so they are not read (a burst of new jobs costs one
    cheap read each); a pod the cache misses does not hold it back."""
    job = job_at("7", status={})
    if status is None:
        del job["status"]
    server = Server({**job}, [make_pod(job, "Worker", 0)])
    assert check(server, job, [])
    assert server.requests == [("list", (TFJOBS, "default", "metadata.name=test-tfjob"))]


def test_a_pass_recording_a_failover_reads_the_pods_of_a_job_no_pass_has_written() -> None:
    """A controller that died before the job's first status write had created worker 0; a pods cache that misses
    it would count it as a worker that vanished."""
    job = job_at("7", status={})
    server = Server({**job}, [make_pod(job, "Worker", 0)])
    view = ViewCheck(server, TFJOBS, SELECTOR)  # type: ignore[arg-type]

    async def confirm() -> bool:
        return await view.current("default/test-tfjob", job, [], counts_failover=True)

    assert not anyio.run(confirm)
    assert [r[1][0] for r in server.requests] == [TFJOBS, PODS]


def test_a_cached_job_without_status_the_server_has_written_is_not_confirmed() -> None:
    """A first view from before the job's first pass (it would create every pod, the ones removed since too)."""
    assert not check(Server(job_at("9"), []), job_at("7", status={}), [])


def test_a_job_the_server_has_at_another_version_is_not_confirmed() -> None:
    job = job_at("7")
    assert not check(Server(job_at("9"), []), job, [])


@pytest.mark.parametrize("missing", ["in the cache", "on the server"])
def test_a_pod_only_one_side_has_is_not_confirmed(missing: str) -> None:
    job = job_at("7")
    pods = [make_pod(job, "Worker", i) for i in range(2)]
    cached, live = (pods[:1], pods) if missing == "in the cache" else (pods, pods[:1])
    assert not check(Server(job_at("7"), live), job, cached)


def at_version(pod: dict[str, Any], version: str) -> dict[str, Any]:
    return {**pod, "metadata": {**pod["metadata"], "resourceVersion": version}}


def test_a_pod_the_server_has_at_a_newer_version_is_not_confirmed() -> None:
    # The cache's pod is Pending at version 3; the server's is Running at 5: a status computed now would count it
    # as not running, on a view the server has moved past.
    job = job_at("7")
    cached = at_version(make_pod(job, "Worker", 0, "Pending"), "3")
    live = at_version(make_pod(job, "Worker", 0, "Running", uid=cached["metadata"]["uid"]), "5")
    assert not check(Server(job_at("7"), [live]), job, [cached])
    assert check(Server(job_at("7"), [at_version(live, "3")]), job, [cached])


def test_a_confirmed_job_is_checked_again_only_for_a_pod_the_cache_misses() -> None:
    # A pod being evicted moves on between the cache and the list; a failover pass must not wait for it to vanish.
    job = job_at("7")
    cached = at_version(make_pod(job, "Worker", 0), "3")
    view = ViewCheck(Server(job_at("7"), [at_version(cached, "5")]), TFJOBS, SELECTOR)  # type: ignore[arg-type]
    view.confirmed.add("default/test-tfjob")
    assert anyio.run(view.current, "default/test-tfjob", job, [cached])
    gone = ViewCheck(Server(job_at("7"), []), TFJOBS, SELECTOR)  # type: ignore[arg-type]
    gone.confirmed.add("default/test-tfjob")
    assert anyio.run(gone.current, "default/test-tfjob", job, [cached])  # gone meanwhile: acting on it is harmless
    other = at_version(make_pod(job, "Worker", 1), "4")
    behind = ViewCheck(Server(job_at("7"), [cached, other]), TFJOBS, SELECTOR)  # type: ignore[arg-type]
    behind.confirmed.add("default/test-tfjob")
    assert not anyio.run(behind.current, "default/test-tfjob", job, [cached])  # the cache misses a pod


def test_pods_of_another_owner_do_not_count() -> None:
    job = job_at("7")
    pods = [make_pod(job, "Worker", 0)]
    other = make_pod(job, "Worker", 1)
    other["metadata"]["ownerReferences"][0]["uid"] = "another-job"
    assert check(Server(job_at("7"), [*pods, other]), job, pods)


def test_a_deleted_job_is_not_confirmed() -> None:
    assert not check(Server(None, []), job_at("7"), [])


def test_which_passes_are_confirmed() -> None:
    view = ViewCheck(Server(None, []), TFJOBS, SELECTOR)  # type: ignore[arg-type]
    job = job_at("7")
    job["status"] = {"conditions": []}
    quiet = Decision((), (), (), {"conditions": []}, None)
    status_only = Decision((), (), (), {"conditions": [{"type": "Created"}]}, None)
    delete = Decision((DeletePod("p", "u", "ScaleDown"),), (), (), {"conditions": []}, None)
    create = Decision((CreatePod(make_pod(job, "Worker", 0), "Worker", 0),), (), (), {"conditions": []}, None)
    failover = Decision((), (), (MetricInc("tfjob_worker_failovers_total", ()),), {"conditions": []}, None)
    key = "default/test-tfjob"
    assert [view.needed(key, job, d) for d in (quiet, status_only, delete, create, failover)] == [
        False,
        True,
        True,
        True,
        True,
    ]
    view.confirmed.add(key)  # once confirmed, only a failover is checked again
    assert [view.needed(key, job, d) for d in (quiet, status_only, delete, create, failover)] == [
        False,
        False,
        False,
        False,
        True,
    ]
    view.forget(key)
    assert view.needed(key, job, status_only)
