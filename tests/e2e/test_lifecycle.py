"""The upstream TFJob lifecycle end to end: failure of a non-dynamic job, success rules,
cleanPodPolicy, TTL, activeDeadlineSeconds, backoffLimit and suspend/resume.

The controller keeps upstream's behaviour for these (its status rules, cleanup after finish, the active
deadline, suspend/resume and upstream's envtest of them) with the fixes recorded in
docs/tfjob-compatibility.md: Succeeded and Failed are terminal and never both True; activeDeadlineSeconds is enforced on
time by a timed requeue (quirk Q4), not by the next unrelated event; completionTime is always set
so TTL cleanup always works.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from controller.runtime.errors import NotFound
from controller.tfjob.decide import DecideConfig
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    Operator,
    annotate_pod,
    by_name,
    condition,
    conditions,
    create_and_wait_running,
    eventually,
    is_true,
    phase,
    reconciled_once_more,
    running_pods,
    tfjob,
)
from tfjob_sim.kubelet import EVICT, EXIT_CODE

LABELS = {"job_namespace": "default", "framework": "tensorflow"}


def parse(ts: str) -> float:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def now_second() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def finished(operator: Operator, name: str, cond: str) -> dict:
    async def done() -> dict | None:
        job = await operator.job(name)
        return job if is_true(job, cond) else None

    return await eventually(done, what=f"{name} {cond}")


def assert_terminal(job: dict, cond: str) -> None:
    other = "Failed" if cond == "Succeeded" else "Succeeded"
    assert is_true(job, cond) and not is_true(job, other), job["status"]["conditions"]
    assert job["status"].get("completionTime"), "completionTime must be set when a job finishes"


# --- a non-dynamic job fails exactly as upstream ----------------------------------------------------
async def test_non_dynamic_job_fails_when_a_worker_pod_is_deleted(operator: Operator, kubectl) -> None:
    manifest = tfjob(
        "static", workers=2, ps=1, dynamic=False, restart_policy="Never", run_policy={"cleanPodPolicy": "Running"}
    )
    await create_and_wait_running(operator, manifest, running=3)

    rc, _, err = await kubectl("delete", "pod", "static-worker-1", "--wait=false")
    assert rc == 0, err

    job = await finished(operator, "static", "Failed")
    assert_terminal(job, "Failed")
    assert conditions(job)[-1] == (
        "Failed",
        "True",
        "TFJobFailed",
        "TFJob default/static has failed because 1 Worker replica(s) failed.",
    )
    assert conditions(job)[-2][:3] == ("Running", "False", "TFJobRunning")
    # cleanPodPolicy Running: the running pods go; the deleted one is not recreated.
    await eventually(lambda: _no_pods(operator, "static"), what="the remaining pods cleaned up")
    await reconciled_once_more(operator, "static")  # the failing pass's events and metrics are out
    events = await operator.events("static")
    failed = [e for e in events if e["reason"] == "TFJobFailed"]
    assert len(failed) == 1 and failed[0]["type"] == "Normal"
    assert operator.metric("training_operator_jobs_failed_total", LABELS) == 1
    assert not [e for e in events if e["reason"] == "WorkerFailover"]


async def _no_pods(operator: Operator, name: str) -> bool:
    return not await operator.pods(name)


async def test_non_dynamic_job_fails_on_a_non_retryable_exit_code(operator: Operator) -> None:
    manifest = tfjob("exit1", workers=2, dynamic=False, restart_policy="ExitCode")
    await create_and_wait_running(operator, manifest, running=2)

    await annotate_pod(operator, "exit1-worker-0", {EXIT_CODE: "1"})

    job = await finished(operator, "exit1", "Failed")
    assert_terminal(job, "Failed")
    assert conditions(job)[-1] == (
        "Failed",
        "True",
        "TFJobFailed",
        'job "exit1" is failing because "Worker" replica(s) failed.',
    )
    await reconciled_once_more(operator, "exit1")
    events = await operator.events("exit1")
    failed = [e for e in events if e["reason"] == "TFJobFailed"]
    assert len(failed) == 1 and failed[0]["type"] == "Warning"
    assert any(
        e["reason"] == "ExitedWithCode" and e["message"] == "Pod: default.exit1-worker-0 exited with code 1"
        for e in events
    )
    pods = by_name(await operator.pods("exit1"))
    assert phase(pods["exit1-worker-0"]) == "Failed", "cleanPodPolicy None keeps the failed pod"
    assert operator.metric("training_operator_jobs_failed_total", LABELS) == 1


# --- success rules and cleanPodPolicy ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "left"),
    [
        ("None", ["w0-worker-0", "w0-worker-1", "w0-worker-2"]),
        ("Running", ["w0-worker-0"]),
        ("All", []),
    ],
)
async def test_success_via_worker_0_then_clean_pod_policy(operator: Operator, policy: str, left: list[str]) -> None:
    manifest = tfjob("w0", workers=3, dynamic=False, run_policy={"cleanPodPolicy": policy})
    await create_and_wait_running(operator, manifest, running=3)

    await annotate_pod(operator, "w0-worker-0", {EXIT_CODE: "0"})

    job = await finished(operator, "w0", "Succeeded")
    assert_terminal(job, "Succeeded")
    assert conditions(job)[-1] == ("Succeeded", "True", "TFJobSucceeded", "TFJob default/w0 successfully completed.")

    async def cleaned() -> bool:
        return [p["metadata"]["name"] for p in await operator.pods("w0")] == left

    await eventually(cleaned, what=f"cleanPodPolicy {policy} leaving {left}")
    await reconciled_once_more(operator, "w0")
    assert [p["metadata"]["name"] for p in await operator.pods("w0")] == left
    if policy == "None":
        assert len(running_pods(await operator.pods("w0"))) == 2
    job = await operator.job("w0")
    assert_terminal(job, "Succeeded")
    assert job["status"]["replicaStatuses"]["Worker"].get("succeeded") == 3  # active booked as succeeded
    assert operator.metric("training_operator_jobs_successful_total", LABELS) == 1


async def test_success_policy_all_workers_waits_for_every_worker(operator: Operator) -> None:
    manifest = tfjob("all", workers=2, dynamic=False, success_policy="AllWorkers")
    await create_and_wait_running(operator, manifest, running=2)

    await annotate_pod(operator, "all-worker-0", {EXIT_CODE: "0"})

    async def worker0_done() -> bool:
        job = await operator.job("all")
        return job["status"]["replicaStatuses"]["Worker"].get("succeeded") == 1

    await eventually(worker0_done, what="worker 0 counted as succeeded")
    await reconciled_once_more(operator, "all")
    job = await operator.job("all")
    assert condition(job, "Succeeded") is None and is_true(job, "Running"), job["status"]["conditions"]

    await annotate_pod(operator, "all-worker-1", {EXIT_CODE: "0"})
    job = await finished(operator, "all", "Succeeded")
    assert_terminal(job, "Succeeded")
    assert job["status"]["replicaStatuses"]["Worker"].get("succeeded") == 2


# --- TTL, deadline, backoff -------------------------------------------------------------------------
async def test_ttl_deletes_the_finished_job(operator: Operator) -> None:
    # completionTime has whole-second resolution: TTL 2 keeps the finished job visible >= 1 s.
    manifest = tfjob("ttl", workers=1, dynamic=False, run_policy={"ttlSecondsAfterFinished": 2})
    await create_and_wait_running(operator, manifest, running=1)
    await annotate_pod(operator, "ttl-worker-0", {EXIT_CODE: "0"})
    job = await finished(operator, "ttl", "Succeeded")
    completion = parse(job["status"]["completionTime"])

    async def gone() -> bool:
        try:
            await operator.job("ttl")
        except NotFound:
            return True
        return False

    await eventually(gone, what="the TTL deleting the job")
    deleted_at = time.time()  # when this test saw it gone: never before the deletion, maybe well after under load
    assert completion + 2 <= deleted_at < completion + 2 + 10.0, "deleted before its TTL, or late"
    # The event and the metric follow the delete call's answer, which may come after we saw it.
    await eventually(
        lambda: operator.metric("training_operator_jobs_deleted_total", LABELS) == 1, what="the jobs-deleted metric"
    )

    async def deleted_event() -> bool:
        events = await operator.events("ttl")
        return any(e["reason"] == "SuccessfulDeleteJob" and e["message"] == "Deleted job: ttl" for e in events)

    await eventually(deleted_event, what="the SuccessfulDeleteJob event")
    # Owned pods and services follow the job through the garbage collector.
    await eventually(lambda: _no_pods(operator, "ttl"), what="the job's pods garbage-collected")


async def test_active_deadline_fails_the_job_on_time_without_any_other_event(operator: Operator) -> None:
    """Nothing changes after the pods run: only a timed requeue at startTime + 2 s can fail it."""
    manifest = tfjob("deadline", workers=2, dynamic=False, run_policy={"activeDeadlineSeconds": 2})
    job = await create_and_wait_running(operator, manifest, running=2)
    start = parse(job["status"]["startTime"])

    job = await eventually(lambda: _failed(operator, "deadline"), what="the deadline failing the job")
    # Without the timed requeue nothing would ever fail it (the wait above); with a wrong delay it fails late. Judged
    # on the controller's timestamp with room for a loaded machine, not on when this test looked.
    failed_at = parse(next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["lastTransitionTime"])
    assert start + 2 <= failed_at < start + 2 + 10.0, (start, failed_at)
    assert_terminal(job, "Failed")
    assert conditions(job)[-1] == (
        "Failed",
        "True",
        "TFJobFailed",
        "Job deadline has failed because it was active longer than specified deadline",
    )
    await eventually(lambda: _no_pods(operator, "deadline"), what="every pod deleted on deadline failure")
    await eventually(lambda: _no_services(operator, "deadline"), what="every service deleted on deadline failure")
    await reconciled_once_more(operator, "deadline")
    assert operator.metric("training_operator_jobs_failed_total", LABELS) == 1


async def _failed(operator: Operator, name: str) -> dict | None:
    job = await operator.job(name)
    return job if is_true(job, "Failed") else None


async def _no_services(operator: Operator, name: str) -> bool:
    return not await operator.services(name)


async def test_backoff_limit_fails_the_job_after_container_restarts(operator: Operator) -> None:
    manifest = tfjob("backoff", workers=2, dynamic=False, restart_policy="OnFailure", run_policy={"backoffLimit": 1})
    await create_and_wait_running(operator, manifest, running=2)

    await annotate_pod(operator, "backoff-worker-1", {EXIT_CODE: "1"})  # the kubelet restarts it in place

    job = await eventually(lambda: _failed(operator, "backoff"), what="the backoff limit failing the job")
    assert_terminal(job, "Failed")
    assert conditions(job)[-1] == (
        "Failed",
        "True",
        "TFJobFailed",
        "Job backoff has failed because it has reached the specified backoff limit",
    )
    await eventually(lambda: _no_pods(operator, "backoff"), what="every pod deleted on backoff failure")


async def test_backoff_limit_ignores_dynamic_worker_restarts(operator: Operator) -> None:
    manifest = tfjob("dynbackoff", workers=2, restart_policy="OnFailure", run_policy={"backoffLimit": 1})
    await create_and_wait_running(operator, manifest, running=2)

    await annotate_pod(operator, "dynbackoff-worker-1", {EXIT_CODE: "1"})

    async def restarted() -> bool:
        pod = by_name(await operator.pods("dynbackoff"))["dynbackoff-worker-1"]
        statuses = pod["status"].get("containerStatuses") or []
        return bool(statuses) and statuses[0].get("restartCount") == 1 and "running" in statuses[0]["state"]

    await eventually(restarted, what="the kubelet restarting worker 1 in place")
    await reconciled_once_more(operator, "dynbackoff")
    job = await operator.job("dynbackoff")
    assert is_true(job, "Running") and condition(job, "Failed") is None, job["status"]["conditions"]
    assert len(running_pods(await operator.pods("dynbackoff"))) == 2


# --- suspend / resume (upstream's envtest "TFJob with suspend semantics") --------------------------------
CREATED = ("Created", "True", "TFJobCreated", "TFJob test-job is created.")
SUSPENDED = ("Suspended", "True", "TFJobSuspended", "TFJob test-job is suspended.")


async def test_created_suspended_job_creates_nothing(operator: Operator) -> None:
    manifest = tfjob("test-job", workers=1, chief=1, dynamic=False, run_policy={"suspend": True})
    await operator.client.create(TFJOBS, manifest, namespace="default")

    async def suspended() -> dict | None:
        job = await operator.job("test-job")
        return job if conditions(job) == [CREATED, SUSPENDED] else None

    await eventually(suspended, what="exactly [Created, Suspended]")
    await reconciled_once_more(operator, "test-job")
    job = await operator.job("test-job")
    assert conditions(job) == [CREATED, SUSPENDED]
    assert "startTime" not in job["status"]
    assert await operator.pods("test-job") == [] and await operator.services("test-job") == []


async def test_suspend_deletes_everything_and_resume_recreates_it(operator: Operator) -> None:
    manifest = tfjob("test-job", workers=1, chief=1, dynamic=False)
    job = await create_and_wait_running(operator, manifest, running=2)
    running = ("Running", "True", "TFJobRunning", "TFJob default/test-job is running.")
    assert conditions(job) == [CREATED, running]
    start = job["status"]["startTime"]

    await operator.client.patch(TFJOBS, "test-job", {"spec": {"runPolicy": {"suspend": True}}}, namespace="default")

    async def suspended() -> dict | None:
        job = await operator.job("test-job")
        empty = not await operator.pods("test-job") and not await operator.services("test-job")
        return job if empty and is_true(job, "Suspended") else None

    job = await eventually(suspended, what="pods and services deleted, Suspended")
    assert conditions(job) == [
        CREATED,
        ("Running", "False", "TFJobSuspended", "TFJob test-job is suspended."),
        SUSPENDED,
    ]
    assert job["status"]["startTime"] == start, "suspending does not reset startTime"
    replicas = job["status"]["replicaStatuses"]
    assert not replicas["Chief"].get("active") and not replicas["Worker"].get("active"), replicas
    await reconciled_once_more(operator, "test-job")
    assert not await operator.pods("test-job"), "pods stay deleted while suspended"

    await eventually(lambda: now_second() != start, what="a new second, so the resumed startTime differs")
    await operator.client.patch(TFJOBS, "test-job", {"spec": {"runPolicy": {"suspend": False}}}, namespace="default")

    async def resumed() -> dict | None:
        job = await operator.job("test-job")
        pods = running_pods(await operator.pods("test-job"))
        return job if len(pods) == 2 and is_true(job, "Running") else None

    job = await eventually(resumed, what="pods re-created and Running after resume")
    assert conditions(job) == [
        CREATED,
        ("Suspended", "False", "TFJobResumed", "TFJob test-job is resumed."),
        running,
    ]
    assert job["status"]["startTime"] != start
    assert [s["metadata"]["name"] for s in await operator.services("test-job")] == [
        "test-job-chief-0",
        "test-job-worker-0",
    ]
    reasons = [e["reason"] for e in await operator.events("test-job")]
    assert "TFJobSuspended" in reasons and "TFJobResumed" in reasons


# --- dynamic jobs keep upstream's rules for the other replica types ---------------------------------
async def test_a_failed_ps_still_fails_a_dynamic_job(operator: Operator) -> None:
    manifest = tfjob("psfail", workers=2, ps=1, restart_policy="Never")
    await create_and_wait_running(operator, manifest, running=3)

    await annotate_pod(operator, "psfail-ps-0", {EXIT_CODE: "1"})

    job = await finished(operator, "psfail", "Failed")
    assert_terminal(job, "Failed")
    assert conditions(job)[-1] == (
        "Failed",
        "True",
        "TFJobFailed",
        "TFJob default/psfail has failed because 1 PS replica(s) failed.",
    )


async def test_dynamic_job_succeeds_via_worker_0_with_another_worker_permanently_failed(operator: Operator) -> None:
    manifest = tfjob("mixed", workers=3, restart_policy="Never", run_policy={"cleanPodPolicy": "Running"})
    await create_and_wait_running(operator, manifest, running=3)
    await annotate_pod(operator, "mixed-worker-2", {EXIT_CODE: "1"})

    async def two_failed() -> bool:
        job = await operator.job("mixed")
        return job["status"]["replicaStatuses"]["Worker"].get("failed") == 1

    await eventually(two_failed, what="worker 2 failed for good")
    assert is_true(await operator.job("mixed"), "Running")
    await annotate_pod(operator, "mixed-worker-0", {EXIT_CODE: "0"})
    job = await finished(operator, "mixed", "Succeeded")
    assert_terminal(job, "Succeeded")
    await eventually(
        lambda: _only(operator, "mixed", ["mixed-worker-0", "mixed-worker-2"]),
        what="the running worker 1 cleaned up, the finished ones kept",
    )


async def _only(operator: Operator, job: str, expected: list[str]) -> bool:
    return [p["metadata"]["name"] for p in await operator.pods(job)] == expected


async def test_suspending_a_dynamic_job_during_a_failover_backoff_and_resuming(sim_cluster) -> None:
    from controller.tfjob.decide import DecideConfig
    from tests.e2e.conftest import fail_over_once, start_operator, worker_record

    operator = await start_operator(
        sim_cluster, config=DecideConfig(failover_backoff_base=3.0, failover_backoff_cap=3.0)
    )
    try:
        await create_and_wait_running(operator, tfjob("pause", workers=2, restart_policy="ExitCode"), running=2)
        await fail_over_once(operator, "pause", 1)  # replaced at once; the next failover backs off
        await annotate_pod(operator, "pause-worker-1", {EXIT_CODE: "137"})

        async def waiting() -> bool:
            record = worker_record(await operator.job("pause"), 1)
            return bool(record and record["state"] == "Replacing")

        await eventually(waiting, what="worker 1 waiting for its back-off")
        await operator.client.patch(TFJOBS, "pause", {"spec": {"runPolicy": {"suspend": True}}}, namespace="default")

        async def suspended() -> dict | None:
            job = await operator.job("pause")
            empty = not await operator.pods("pause") and not await operator.services("pause")
            return job if empty and is_true(job, "Suspended") else None

        job = await eventually(suspended, what="everything deleted while suspended")
        assert worker_record(job, 1) is None, "suspension ends the failover: every worker starts afresh"
        await operator.client.patch(TFJOBS, "pause", {"spec": {"runPolicy": {"suspend": False}}}, namespace="default")

        async def resumed() -> bool:
            return len(running_pods(await operator.pods("pause"))) == 2 and is_true(
                await operator.job("pause"), "Running"
            )

        await eventually(resumed, what="both workers back after resume")
        job = await operator.job("pause")
        assert condition(job, "Failed") is None and condition(job, "Restarting") is None
        assert operator.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": "OOMKilled"}) == 2
    finally:
        crashed = operator.task is not None and operator.task.done() and not operator.task.cancelled()
        await operator.stop()
        assert not crashed


async def test_deadline_fails_a_dynamic_job_while_a_worker_waits_for_its_backoff(sim_cluster) -> None:
    """Two timers at once (the failover back-off and the deadline): the earlier one, the deadline,
    fails the job on time, and the later back-off creates nothing on the finished job."""
    from controller.tfjob.decide import DecideConfig
    from tests.e2e.conftest import fail_over_once, start_operator, worker_record

    # The deadline leaves a busy machine 10 s to start the job and fail worker 1 over twice; the back-off of the
    # second failover (12 s) then ends after it.
    operator = await start_operator(
        sim_cluster, config=DecideConfig(failover_backoff_base=12.0, failover_backoff_cap=12.0)
    )
    faults = sim_cluster.faults
    try:
        manifest = tfjob("both", workers=2, restart_policy="ExitCode", run_policy={"activeDeadlineSeconds": 10})
        job = await create_and_wait_running(operator, manifest, running=2)
        start = parse(job["status"]["startTime"])
        await fail_over_once(operator, "both", 1)  # replaced at once; the next failover backs off
        await annotate_pod(operator, "both-worker-1", {EXIT_CODE: "137"})

        async def waiting() -> bool:
            record = worker_record(await operator.job("both"), 1)
            return bool(record and record["state"] == "Replacing")

        await eventually(waiting, what="worker 1 waiting for its 12 s back-off")
        job = await eventually(lambda: _failed(operator, "both"), what="the deadline failing the job")
        # Judged on the controller's own timestamps, not on when this test looked (a loaded machine delays that).
        failed_at = parse(next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["lastTransitionTime"])
        retry_after = parse(worker_record(job, 1)["retryAfter"])
        assert start + 10 <= failed_at < retry_after, "the deadline fires on time and does not wait for the back-off"
        assert conditions(job)[-1][3] == "Job both has failed because it was active longer than specified deadline"
        await eventually(lambda: _no_pods(operator, "both"), what="every pod deleted")
        mark = faults.mark()
        queue = operator.controller.controller.queue

        def backoff_passed() -> bool:
            return (
                time.time() > retry_after and queue.num_waiting == 0 and len(queue) == 0 and queue.num_processing == 0
            )

        await eventually(backoff_passed, what="the back-off's requeue to pass")
        assert faults.count("create", "pods", since=mark) == 0, "a finished job creates nothing"
        assert not await operator.pods("both")
    finally:
        crashed = operator.task is not None and operator.task.done() and not operator.task.cancelled()
        await operator.stop()
        assert not crashed


async def test_deleting_the_tfjob_removes_its_pods_and_services(operator: Operator, kubectl) -> None:
    await create_and_wait_running(operator, tfjob("bye", workers=2, ps=1), running=3)
    faults = operator.cluster.faults
    mark = faults.mark()
    rc, out, err = await kubectl("delete", "tfjob", "bye", "--wait=true", "--timeout=20s")
    assert rc == 0, err
    assert out.strip() == 'tfjob.kubeflow.org "bye" deleted'

    async def all_gone() -> bool:
        return not await operator.pods("bye") and not await operator.services("bye")

    await eventually(all_gone, what="the garbage collector removing the job's pods and services")
    assert faults.count("create", "pods", since=mark) == 0
    assert faults.count("create", "services", since=mark) == 0


async def test_a_deleted_service_of_a_running_worker_comes_back_without_a_failover(operator: Operator, kubectl) -> None:
    await create_and_wait_running(operator, tfjob("svc", workers=2), running=2)
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await operator.pods("svc")}
    old = {s["metadata"]["name"]: s["metadata"]["uid"] for s in await operator.services("svc")}
    rc, _, err = await kubectl("delete", "service", "svc-worker-1")
    assert rc == 0, err

    async def back() -> bool:
        services = {s["metadata"]["name"]: s["metadata"]["uid"] for s in await operator.services("svc")}
        return "svc-worker-1" in services and services["svc-worker-1"] != old["svc-worker-1"]

    await eventually(back, what="the service recreated")
    await reconciled_once_more(operator, "svc")
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in await operator.pods("svc")} == pods
    assert operator.metric("tfjob_worker_failovers_total", {"job_namespace": "default", "reason": "Deleted"}) == 0
    job = await operator.job("svc")
    assert is_true(job, "Running") and condition(job, "Restarting") is None


async def test_kubectl_get_shows_the_state_and_worker_columns(operator: Operator, kubectl) -> None:
    await create_and_wait_running(operator, tfjob("cols", workers=2), running=2)

    async def both_active() -> bool:
        # ACTIVE counts the pods the controller has seen Running, which may be after the test saw them.
        status = (await operator.job("cols")).get("status") or {}
        return (status.get("replicaStatuses") or {}).get("Worker", {}).get("active") == 2

    await eventually(both_active, what="both workers counted active")
    rc, out, err = await kubectl("get", "tfjob", "cols", "-o", "wide")
    assert rc == 0, err
    header, row = out.splitlines()
    # The members of a dynamic job (its worker indices) come before the wide-only replica columns.
    assert header.split() == ["NAME", "STATE", "AGE", "MEMBERS", "WORKERS", "ACTIVE"]
    fields = row.split()
    assert (await operator.job("cols"))["status"]["dynamicWorkers"]["summary"] == "0,1"
    assert fields[0] == "cols" and fields[1] == "Running" and fields[3:] == ["0,1", "2", "2"], row


async def test_non_dynamic_restart_is_counted_once_and_the_job_recovers(operator: Operator) -> None:
    """An evicted pod of a non-dynamic OnFailure job: upstream's Restarting path (delete, recreate
    under the same name), the restarted-jobs metric incremented once (quirk Q9 fixed), then
    Running again."""
    await create_and_wait_running(operator, tfjob("again", workers=2, dynamic=False), running=2)
    old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await operator.pods("again")}
    await annotate_pod(operator, "again-worker-1", {EVICT: "true"})

    async def recovered() -> bool:
        pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in running_pods(await operator.pods("again"))}
        job = await operator.job("again")
        return (
            pods.get("again-worker-1") not in (None, old["again-worker-1"])
            and len(pods) == 2
            and is_true(job, "Running")
        )

    await eventually(recovered, what="the evicted worker recreated and the job Running again")
    await reconciled_once_more(operator, "again")
    assert operator.metric("training_operator_jobs_restarted_total", LABELS) == 1
    events = await operator.events("again")
    restarting = [e for e in events if e["reason"] == "TFJobRestarting"]
    assert (
        len(restarting) == 1 and restarting[0]["message"] == "job again is restarting because Worker replica(s) failed."
    )
    assert restarting[0].get("count", 1) == 1, "one restart, one event"
    job = await operator.job("again")
    assert condition(job, "Restarting") is None and condition(job, "Failed") is None


async def test_non_dynamic_on_failure_job_restarts_a_deleted_worker_instead_of_failing(
    operator: Operator, kubectl
) -> None:
    """docs/tfjob-compatibility.md Q7: under a restart policy that restarts, a deleted pod is restarted.

    Upstream fails the job or restarts the pod depending on whether it reconciles while the pod is still
    terminating (a race); we always restart, and the job is never Failed."""
    await create_and_wait_running(
        operator, tfjob("st", workers=2, dynamic=False, restart_policy="OnFailure"), running=2
    )
    old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await operator.pods("st")}
    rc, _, err = await kubectl("delete", "pod", "st-worker-1", "--wait=false")
    assert rc == 0, err

    async def back() -> bool:
        job = await operator.job("st")
        assert not is_true(job, "Failed"), conditions(job)
        pods = {p["metadata"]["name"]: p for p in running_pods(await operator.pods("st"))}
        new = pods.get("st-worker-1")
        return bool(new and new["metadata"]["uid"] != old["st-worker-1"] and is_true(job, "Running"))

    await eventually(back, what="st-worker-1 recreated and the job Running again")
    job = await operator.job("st")
    assert [c[0] for c in conditions(job) if c[1] == "True"] == ["Created", "Running"]


async def test_a_large_job_gets_its_status_first_and_keeps_it_up_while_it_is_built(operator: Operator) -> None:
    """A 300-worker job has Created and its replica statuses after a handful of pod
    creations, and its status is written again while the rest is created (one bounded pass at a time),
    read from the simulator's commit history so the order is the server's, not the test's polling."""
    store = operator.cluster.store
    start = store.resource_version
    await create_and_wait_running(operator, tfjob("big", workers=300, ps=1, restart_policy="ExitCode"), running=301)
    job_events = store.history_since("tfjobs.kubeflow.org", start)
    pod_events = store.history_since("pods", start)
    assert job_events is not None and pod_events is not None, "the history must still hold the whole build"
    pod_created = sorted(e.rv for e in pod_events if e.type == "ADDED")
    assert len(pod_created) == 301
    status_writes = [e.rv for e in job_events if e.type == "MODIFIED" and (e.new or {}).get("status")]
    first_status = min(status_writes)
    first = next(e for e in job_events if e.rv == first_status)
    assert condition(first.new, "Created") is not None
    assert set(first.new["status"]["replicaStatuses"]) == {"PS", "Worker"}
    assert sum(rv < first_status for rv in pod_created) <= DecideConfig().first_pass_creations
    # The status is written between passes while the pods are still being created, not only at the end.
    during = [rv for rv in status_writes if pod_created[0] < rv < pod_created[-1]]
    assert len(during) >= 2, (len(during), "status writes while the job was being built")
