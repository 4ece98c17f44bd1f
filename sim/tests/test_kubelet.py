"""Behaviour of the simulated kubelet (tfjob_sim.kubelet.NodeAgent with the annotation runtime,
tfjob_sim.annotationpods) and of the worker that drives the node components (tfjob_sim.kubelet.Kubelet).

Every test runs the real Store with a Kubelet at time_scale 0.01 (tfjob_sim.testing.nodes); timing
assertions use lower bounds (a timer never fires early) and generous upper bounds. "Nothing happens" is
shown with a sentinel: a later timer of the same kubelet that fired proves every earlier one was processed.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import anyio
import pytest

from tfjob_sim.annotationpods import default_reason, parse_exit_code, parse_seconds
from tfjob_sim.kubelet import (
    EVICT,
    EXIT_CODE,
    IGNORE_SIGTERM,
    REASON,
    RUN_SECONDS,
    SIGTERM_EXIT_CODE,
    SIGTERM_SECONDS,
    START_SECONDS,
    Kubelet,
    KubeletConfig,
    _IPAllocator,
)
from tfjob_sim.podstate import EXITED, _Node, _PodRecord, _Termination, image_size
from tfjob_sim.podstatus import container_id, eviction_message, render_status, terminated
from tfjob_sim.store import Store
from tfjob_sim.testing.nodes import (
    LONG_GRACE,
    NS,
    SCALE,
    annotate,
    cluster,
    condition,
    container,
    get_pod,
    make_pod,
    phase,
    pod_events,
    restart_count,
    running,
    sentinel,
)
from tfjob_sim.testing.recorder import Recorder

# ------------------------------------------------------------------------------------------- start


async def test_pod_is_scheduled_then_created_then_running() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("web", {START_SECONDS: "5"}, containers=("b", "a")))
        await rec.until(lambda: running(store, "web"))
        pod = get_pod(store, "web")
        status = pod["status"]
        assert pod["spec"]["nodeName"].startswith("sim-node-")
        assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network("10.244.0.0/14")
        assert status["podIPs"] == [{"ip": status["podIP"]}]
        node = store.get("nodes", None, pod["spec"]["nodeName"])
        node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        assert status["hostIP"] == node_ip and status["hostIPs"] == [{"ip": node_ip}]
        assert status["startTime"].endswith("Z")
        for ctype in ("PodScheduled", "Initialized", "ContainersReady", "Ready", "PodReadyToStartContainers"):
            cond = condition(pod, ctype)
            assert cond is not None and cond["status"] == "True", ctype
            assert cond["lastTransitionTime"].endswith("Z")
        assert [s["name"] for s in status["containerStatuses"]] == ["a", "b"]  # sorted, like the kubelet
        for cs in status["containerStatuses"]:
            assert cs["ready"] is True and cs["started"] is True and cs["restartCount"] == 0
            assert cs["image"] == "busybox:1.36"
            assert cs["imageID"].startswith("docker.io/library/busybox@sha256:")
            assert cs["containerID"].startswith("containerd://")
            assert cs["state"]["running"]["startedAt"].endswith("Z")
        assert status["containerStatuses"][0]["containerID"] != status["containerStatuses"][1]["containerID"]

        # The intermediate states a watcher sees, in order: unbound Pending, bound + PodScheduled,
        # ContainerCreating (with hostIP, no podIP), Running.
        states = [o for _t, _e, o in rec.pod_states("web")]
        assert not states[0]["spec"].get("nodeName")
        bound = next(i for i, o in enumerate(states) if o["spec"].get("nodeName"))
        scheduled = next(
            i for i, o in enumerate(states) if (condition(o, "PodScheduled") or {}).get("status") == "True"
        )
        creating = next(i for i, o in enumerate(states) if o["status"].get("containerStatuses"))
        first_running = next(i for i, o in enumerate(states) if o["status"].get("phase") == "Running")
        assert bound <= scheduled < creating < first_running
        waiting = states[creating]
        assert waiting["status"]["phase"] == "Pending" and waiting["status"]["hostIP"] == node_ip
        assert "podIP" not in waiting["status"]
        assert container(waiting, "a")["state"] == {"waiting": {"reason": "ContainerCreating"}}
        assert condition(waiting, "Ready")["reason"] == "ContainersNotReady"
        assert condition(waiting, "Ready")["message"] == "containers with unready status: [a b]"
        # start-seconds=5 at scale 0.01: at least 50 ms between binding and Running.
        times = [t for t, _e, _o in rec.pod_states("web")]
        assert times[first_running] - times[bound] >= 5 * SCALE


# ------------------------------------------------------------------------------------------- exits


async def test_run_to_completion_with_never() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("job", {RUN_SECONDS: "3"}, restart="Never"))
        await rec.until(lambda: phase(store, "job") == "Succeeded")
        pod = get_pod(store, "job")
        cs = container(pod)
        term = cs["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (0, "Completed")
        assert term["startedAt"] <= term["finishedAt"] and term["containerID"].startswith("containerd://")
        assert cs["ready"] is False and cs["started"] is False and cs["restartCount"] == 0
        assert (condition(pod, "Ready")["status"], condition(pod, "Ready")["reason"]) == ("False", "PodCompleted")
        assert condition(pod, "ContainersReady")["reason"] == "PodCompleted"
        assert condition(pod, "PodReadyToStartContainers")["status"] == "False"
        states = rec.pod_states("job")
        first_running = next(i for i, (_t, _e, o) in enumerate(states) if o["status"].get("phase") == "Running")
        succeeded_at = next(t for t, _e, o in states if o["status"].get("phase") == "Succeeded")
        # The run is timed from the kubelet's decision to start, which comes after the last write before
        # Running and before the Running write commits.
        assert succeeded_at - states[first_running - 1][0] >= 3 * SCALE


@pytest.mark.parametrize(
    ("annotations", "expected_code", "expected_reason"),
    [
        ({EXIT_CODE: "2"}, 2, "Error"),
        ({EXIT_CODE: "137"}, 137, "OOMKilled"),
        ({EXIT_CODE: "1", REASON: "DeadlineExceeded"}, 1, "DeadlineExceeded"),
    ],
)
async def test_failed_exit_codes_and_reasons(annotations: dict, expected_code: int, expected_reason: str) -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("fail", {RUN_SECONDS: "1", **annotations}, restart="Never"))
        await rec.until(lambda: phase(store, "fail") == "Failed")
        pod = get_pod(store, "fail")
        term = container(pod)["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (expected_code, expected_reason)
        assert condition(pod, "Ready")["reason"] == "PodFailed"
        assert "reason" not in pod["status"]  # only evictions set a pod-level reason


async def test_on_failure_does_not_restart_success() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("ok", {RUN_SECONDS: "1"}, restart="OnFailure"))
        await rec.until(lambda: phase(store, "ok") == "Succeeded")
        assert restart_count(store, "ok") == 0


async def test_exit_code_annotation_on_running_pod_acts_once_per_value() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("svc", restart="OnFailure"))
        await rec.until(lambda: running(store, "svc"))
        annotate(store, "svc", **{EXIT_CODE: "3"})
        # First crash: restarted at once (no back-off entry yet), with lastState filled.
        await rec.until(lambda: restart_count(store, "svc") == 1 and running(store, "svc"))
        last = container(get_pod(store, "svc"))["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (3, "Error")
        # Unrelated changes and the same value again do not make it exit again.
        store.patch("pods", NS, "svc", "merge", {"metadata": {"labels": {"touched": "1"}}})
        annotate(store, "svc", **{EXIT_CODE: "3"})
        await sentinel(store, rec, 2)
        assert restart_count(store, "svc") == 1 and running(store, "svc")
        # A new value acts again; being the second crash within 10 minutes it backs off.
        annotate(store, "svc", **{EXIT_CODE: "4"})
        cs = await rec.until(
            lambda: (lambda c: c if c["state"].get("waiting") else None)(container(get_pod(store, "svc")))
        )
        assert cs["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert cs["lastState"]["terminated"]["exitCode"] == 4
        assert cs["restartCount"] == 1
        await rec.until(lambda: restart_count(store, "svc") == 2 and running(store, "svc"))


async def test_exit_code_zero_with_on_failure_completes_running_pod() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("worker", restart="OnFailure"))
        await rec.until(lambda: running(store, "worker"))
        annotate(store, "worker", **{EXIT_CODE: "0"})
        await rec.until(lambda: phase(store, "worker") == "Succeeded")


async def test_always_restarts_with_back_off_doubling() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("loop", {RUN_SECONDS: "2", EXIT_CODE: "1"}, restart="Always"))
        await rec.until(lambda: restart_count(store, "loop") == 3 and running(store, "loop"))
        # Reduce the history to (time, restartCount, state kind, back-off message) transitions.
        seen = []
        for when, _e, obj in rec.pod_states("loop"):
            statuses = obj["status"].get("containerStatuses")
            if not statuses:
                continue
            cs = statuses[0]
            kind = next(iter(cs["state"]))
            key = (cs["restartCount"], kind, cs["state"].get("waiting", {}).get("reason"))
            if not seen or seen[-1][1:4] != key:
                seen.append((when, *key, cs["state"].get("waiting", {}).get("message", "")))
        kinds = [(rc, kind, reason) for _t, rc, kind, reason, _m in seen]
        assert kinds == [
            (0, "waiting", "ContainerCreating"),
            (0, "running", None),
            (1, "running", None),  # first exit: immediate restart
            (1, "waiting", "CrashLoopBackOff"),
            (2, "running", None),
            (2, "waiting", "CrashLoopBackOff"),
            (3, "running", None),
        ]
        assert "back-off 10s restarting failed container=main pod=loop_default(" in seen[3][4]
        assert "back-off 20s restarting failed" in seen[5][4]
        # Each back-off lasts its simulated duration (scaled); restarts are never early.
        assert seen[4][0] - seen[3][0] >= 10 * SCALE * 0.9
        assert seen[6][0] - seen[5][0] >= 20 * SCALE * 0.9
        assert seen[6][0] - seen[5][0] > seen[4][0] - seen[3][0]
        pod = get_pod(store, "loop")
        assert pod["status"]["phase"] == "Running"
        assert container(pod)["lastState"]["terminated"]["exitCode"] == 1
        # During back-off the pod is Running but not Ready.
        backoff_obj = next(o for t, _e, o in rec.pod_states("loop") if t == seen[3][0])
        assert backoff_obj["status"]["phase"] == "Running"
        assert condition(backoff_obj, "Ready")["status"] == "False"


async def test_back_off_resets_after_ten_minutes_of_running() -> None:
    # run-seconds 700 > 2 x 5 min: every exit comes more than 10 simulated minutes after the last
    # back-off update, so each restart is immediate and no CrashLoopBackOff ever appears.
    async with cluster(time_scale=0.001) as (store, _k, rec):
        store.create("pods", NS, make_pod("long", {RUN_SECONDS: "700", EXIT_CODE: "1"}))
        await rec.until(lambda: restart_count(store, "long") == 3)
        waiting = [
            o
            for _t, _e, o in rec.pod_states("long")
            if o["status"].get("containerStatuses")
            and o["status"]["containerStatuses"][0]["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
        ]
        assert waiting == []


async def test_invalid_annotation_values_are_ignored() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("odd", {RUN_SECONDS: "soon", START_SECONDS: "-1"}))
        await rec.until(lambda: running(store, "odd"))
        annotate(store, "odd", **{EXIT_CODE: "banana"})
        await sentinel(store, rec, 2)
        assert running(store, "odd") and restart_count(store, "odd") == 0


# ------------------------------------------------------------------------------------------- eviction


async def test_evict_annotation_fails_pod_without_deleting_it() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("victim", restart="Always"))
        await rec.until(lambda: running(store, "victim"))
        annotate(store, "victim", **{EVICT: "true"})
        await rec.until(lambda: phase(store, "victim") == "Failed")
        pod = get_pod(store, "victim")
        status = pod["status"]
        assert status["reason"] == "Evicted"
        assert status["message"].startswith("The node was low on resource: memory. ")
        target = condition(pod, "DisruptionTarget")
        assert (target["status"], target["reason"]) == ("True", "TerminationByKubelet")
        term = container(pod)["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (137, "ContainerStatusUnknown")
        assert condition(pod, "Ready")["status"] == "False"
        await sentinel(store, rec, 2)
        pod = get_pod(store, "victim")
        assert pod is not None and pod["status"]["phase"] == "Failed" and "deletionTimestamp" not in pod["metadata"]
        assert restart_count(store, "victim") == 0  # restartPolicy Always does not resurrect an evicted pod


# ------------------------------------------------------------------------------------------- deletion


def last_modified(rec: Recorder, name: str) -> dict:
    """The last state of pod ``name`` before it was deleted: what the kubelet posted last."""
    return [o for _t, e, o in rec.pod_states(name) if e == "MODIFIED"][-1]


async def test_deleted_pods_exit_on_sigterm_like_processes() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("default", terminationGracePeriodSeconds=LONG_GRACE))
        store.create("pods", NS, make_pod("slow", {SIGTERM_SECONDS: "5"}, terminationGracePeriodSeconds=LONG_GRACE))
        store.create("pods", NS, make_pod("trap", {SIGTERM_EXIT_CODE: "0"}, terminationGracePeriodSeconds=LONG_GRACE))
        await rec.until(lambda: all(running(store, n) for n in ("default", "slow", "trap")))
        start = anyio.current_time()
        for name in ("default", "slow", "trap"):
            store.delete("pods", NS, name)
        assert get_pod(store, "default")["metadata"]["deletionGracePeriodSeconds"] == LONG_GRACE
        await rec.until(lambda: all(rec.deleted_at(n) for n in ("default", "slow", "trap")))
        # Default: the process dies of SIGTERM 0.2 s after it was sent, long before the grace period ends.
        assert 0.2 * SCALE <= rec.deleted_at("default") - start < LONG_GRACE * SCALE
        assert 5 * SCALE <= rec.deleted_at("slow") - start < LONG_GRACE * SCALE
        assert rec.deleted_at("default") < rec.deleted_at("slow")
        for name in ("default", "slow"):
            last = last_modified(rec, name)
            term = container(last)["state"]["terminated"]
            assert (last["status"]["phase"], term["exitCode"], term["reason"]) == ("Failed", 143, "Error")
            assert container(last)["restartCount"] == 0  # a deleted pod is not restarted (restartPolicy Always)
        # A process that traps SIGTERM and exits 0: the deleted pod Succeeded.
        last = last_modified(rec, "trap")
        term = container(last)["state"]["terminated"]
        assert (last["status"]["phase"], term["exitCode"], term["reason"]) == ("Succeeded", 0, "Completed")


async def test_sigterm_ignored_means_sigkill_at_the_end_of_the_grace_period() -> None:
    async with cluster() as (store, _k, rec):
        ignore = {IGNORE_SIGTERM: "true"}
        store.create("pods", NS, make_pod("slow", ignore, terminationGracePeriodSeconds=30))
        store.create("pods", NS, make_pod("quick", ignore, terminationGracePeriodSeconds=30))
        await rec.until(lambda: running(store, "slow") and running(store, "quick"))
        start = anyio.current_time()
        store.delete("pods", NS, "slow")
        store.delete("pods", NS, "quick", {"gracePeriodSeconds": 5})
        pod = get_pod(store, "slow")
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 30 and pod["metadata"]["deletionTimestamp"]
        await rec.until(lambda: rec.deleted_at("quick") and rec.deleted_at("slow"))
        assert rec.deleted_at("quick") - start >= 5 * SCALE
        assert rec.deleted_at("slow") - start >= 30 * SCALE
        assert rec.deleted_at("quick") < rec.deleted_at("slow")
        # The kubelet posts the killed state before confirming the deletion.
        last = last_modified(rec, "slow")
        assert last["status"]["phase"] == "Failed"
        term = container(last)["state"]["terminated"]
        assert (term["exitCode"], term["reason"]) == (137, "Error")


async def test_sigkill_waits_at_least_two_seconds_and_after_pre_stop_sleep() -> None:
    async with cluster() as (store, _k, rec):
        ignore = {IGNORE_SIGTERM: "true"}
        store.create("pods", NS, make_pod("short", ignore, terminationGracePeriodSeconds=LONG_GRACE))
        hook = {"preStop": {"sleep": {"seconds": LONG_GRACE}}}
        body = make_pod("hooked", ignore, terminationGracePeriodSeconds=10)
        body["spec"]["containers"][0]["lifecycle"] = hook
        store.create("pods", NS, body)
        body = make_pod("drains", terminationGracePeriodSeconds=LONG_GRACE)
        body["spec"]["containers"][0]["lifecycle"] = {"preStop": {"sleep": {"seconds": 3}}}
        store.create("pods", NS, body)
        await rec.until(lambda: all(running(store, n) for n in ("short", "hooked", "drains")))
        start = anyio.current_time()
        store.delete("pods", NS, "short", {"gracePeriodSeconds": 1})
        store.delete("pods", NS, "hooked")
        store.delete("pods", NS, "drains")
        await rec.until(lambda: all(rec.deleted_at(n) for n in ("short", "hooked", "drains")))
        # killContainer gives every container at least 2 s after SIGTERM.
        assert 2 * SCALE <= rec.deleted_at("short") - start < LONG_GRACE * SCALE
        # The preStop hook is cut at the grace period (10 s), then the 2 s minimum.
        assert 12 * SCALE <= rec.deleted_at("hooked") - start < LONG_GRACE * SCALE
        # SIGTERM only after the 3 s preStop sleep, then the default 0.2 s exit.
        assert 3.2 * SCALE <= rec.deleted_at("drains") - start < LONG_GRACE * SCALE
        assert container(last_modified(rec, "drains"))["state"]["terminated"]["exitCode"] == 143
        assert container(last_modified(rec, "hooked"))["state"]["terminated"]["exitCode"] == 137


async def test_shorter_grace_on_second_delete_and_early_exit() -> None:
    async with cluster() as (store, _k, rec):
        ignore = {IGNORE_SIGTERM: "true"}
        store.create("pods", NS, make_pod("a", ignore, terminationGracePeriodSeconds=LONG_GRACE))
        store.create(
            "pods",
            NS,
            make_pod("b", {RUN_SECONDS: "10", **ignore}, restart="Never", terminationGracePeriodSeconds=LONG_GRACE),
        )
        await rec.until(lambda: running(store, "a") and running(store, "b"))
        start = anyio.current_time()
        store.delete("pods", NS, "a")
        store.delete("pods", NS, "a", {"gracePeriodSeconds": 2})  # shortens it
        store.delete("pods", NS, "b")  # exits by itself (run-seconds) long before its grace ends
        await rec.until(lambda: rec.deleted_at("a") and rec.deleted_at("b"))
        assert 2 * SCALE <= rec.deleted_at("a") - start < LONG_GRACE * SCALE
        assert rec.deleted_at("b") - start < LONG_GRACE * SCALE
        last_b = last_modified(rec, "b")
        assert last_b["status"]["phase"] == "Succeeded"
        assert container(last_b)["state"]["terminated"]["reason"] == "Completed"


async def test_deleting_crash_looping_or_finished_pods_is_prompt() -> None:
    async with cluster() as (store, _k, rec):
        store.create(
            "pods", NS, make_pod("crash", {RUN_SECONDS: "0", EXIT_CODE: "1"}, terminationGracePeriodSeconds=LONG_GRACE)
        )
        await rec.until(
            lambda: (
                get_pod(store, "crash")["status"].get("containerStatuses")
                and container(get_pod(store, "crash"))["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff"
            )
        )
        start = anyio.current_time()
        store.delete("pods", NS, "crash")
        await rec.until(lambda: rec.deleted_at("crash"))
        assert rec.deleted_at("crash") - start < LONG_GRACE * SCALE  # nothing was running: no grace to wait


async def test_deletion_confirmation_respects_finalizers() -> None:
    async with cluster() as (store, _k, rec):
        body = make_pod("held", terminationGracePeriodSeconds=1)
        body["metadata"]["finalizers"] = ["example.com/hold"]
        store.create("pods", NS, body)
        await rec.until(lambda: running(store, "held"))
        store.delete("pods", NS, "held")
        # Confirmed by the kubelet (grace 0) but held by the finalizer.
        await rec.until(lambda: get_pod(store, "held")["metadata"].get("deletionGracePeriodSeconds") == 0)
        assert phase(store, "held") == "Failed"
        store.patch("pods", NS, "held", "merge", {"metadata": {"finalizers": None}})
        assert get_pod(store, "held") is None


# ------------------------------------------------------------------------------------------- the worker


async def test_pause_and_resume() -> None:
    async with cluster() as (store, kubelet, rec):
        store.create("pods", NS, make_pod("old", terminationGracePeriodSeconds=1))
        await rec.until(lambda: running(store, "old"))
        kubelet.pause()
        store.delete("pods", NS, "old")
        store.create("pods", NS, make_pod("new"))
        events_before = len(rec.events)
        # Every task is now blocked; a paused kubelet waits without a timeout, so nothing can
        # happen until resume(): 'new' stays unscheduled and 'old' terminating past its grace.
        await anyio.wait_all_tasks_blocked()
        assert len(rec.events) == events_before
        assert get_pod(store, "old")["metadata"]["deletionTimestamp"]
        assert not get_pod(store, "new")["spec"].get("nodeName")
        kubelet.resume()
        await rec.until(lambda: get_pod(store, "old") is None and running(store, "new"))


async def test_own_status_writes_do_not_trigger_another_sync() -> None:
    """A pod start is three reconciles: scheduling, admission (ContainerCreating) and the start when its
    delay is over. The kubelet's own status writes come back as watch events but are not new input; a
    change by anyone else still is (the exit-code annotation below)."""
    async with cluster(nodes=1) as (store, kubelet, rec):
        syncs: dict[str, int] = {}
        original = kubelet._sync

        def counting(pod_record: Any) -> Any:
            syncs[pod_record.name] = syncs.get(pod_record.name, 0) + 1
            return original(pod_record)

        kubelet._sync = counting  # type: ignore[method-assign]
        store.create("pods", NS, make_pod("web", {START_SECONDS: "1"}, restart="Never"))
        await rec.until(lambda: running(store, "web"))
        await anyio.wait_all_tasks_blocked()
        assert syncs == {"web": 3}
        annotate(store, "web", **{EXIT_CODE: "3"})
        await rec.until(lambda: phase(store, "web") == "Failed")
        await anyio.wait_all_tasks_blocked()
        assert syncs == {"web": 4}


def test_qos_class_is_one_rule_for_the_api_server_and_the_kubelet() -> None:
    from tfjob_sim.resources import qos_class

    def spec(*resources: dict) -> dict:
        return {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)]}

    both = {"cpu": "1", "memory": "1Gi"}
    assert qos_class(spec({})) == "BestEffort"
    assert qos_class({"containers": []}) == "BestEffort"
    assert qos_class(spec({"limits": both})) == "Guaranteed"
    assert qos_class(spec({"requests": both, "limits": both}, {"limits": both})) == "Guaranteed"
    assert qos_class(spec({"requests": {"cpu": "1"}})) == "Burstable"
    assert qos_class(spec({"requests": {"cpu": "500m"}, "limits": both})) == "Burstable"
    assert qos_class(spec({"limits": both}, {})) == "Burstable"


# ------------------------------------------------------------------------------------------- events


async def test_events_of_init_and_regular_containers_in_order() -> None:
    async with cluster(nodes=1) as (store, _k, rec):
        body = make_pod("multi", {START_SECONDS: "2"}, containers=("main", "side"))
        body["spec"]["containers"][1]["image"] = "envoy:latest"  # imagePullPolicy Always
        body["spec"]["initContainers"] = [{"name": "setup", "image": "busybox:1.36"}]
        store.create("pods", NS, body)
        await rec.until(lambda: running(store, "multi"))
        init, main, side = "spec.initContainers{setup}", "spec.containers{main}", "spec.containers{side}"
        pulled = 'Successfully pulled image "{}" in {} ({} including waiting). Image size: {} bytes.'
        present = 'Container image "busybox:1.36" already present on machine'
        assert pod_events(store, "multi") == [
            ("Normal", "Scheduled", "default-scheduler", "", "Successfully assigned default/multi to sim-node-0", 1),
            ("Normal", "Pulling", "kubelet", init, 'Pulling image "busybox:1.36"', 1),
            # One container after the other: the first pull took the start delay, the same image is
            # then present, another one is pulled at once.
            (
                "Normal",
                "Pulled",
                "kubelet",
                init,
                pulled.format("busybox:1.36", "2s", "2s", image_size("busybox:1.36")),
                1,
            ),
            ("Normal", "Created", "kubelet", init, "Created container: setup", 1),
            ("Normal", "Started", "kubelet", init, "Started container setup", 1),
            ("Normal", "Pulled", "kubelet", main, present, 1),
            ("Normal", "Created", "kubelet", main, "Created container: main", 1),
            ("Normal", "Started", "kubelet", main, "Started container main", 1),
            ("Normal", "Pulling", "kubelet", side, 'Pulling image "envoy:latest"', 1),
            (
                "Normal",
                "Pulled",
                "kubelet",
                side,
                pulled.format("envoy:latest", "0s", "0s", image_size("envoy:latest")),
                1,
            ),
            ("Normal", "Created", "kubelet", side, "Created container: side", 1),
            ("Normal", "Started", "kubelet", side, "Started container side", 1),
        ]
        # The node has the images now: IfNotPresent does not pull again, Always does.
        store.create("pods", NS, make_pod("again", containers=("main",)))
        await rec.until(lambda: running(store, "again"))
        assert ("Normal", "Pulled", "kubelet", main, present, 1) in pod_events(store, "again")


async def test_eviction_events() -> None:
    async with cluster(nodes=1) as (store, _k, rec):
        store.create("pods", NS, make_pod("victim"))
        await rec.until(lambda: running(store, "victim"))
        annotate(store, "victim", **{EVICT: "true"})
        await rec.until(lambda: phase(store, "victim") == "Failed")
        message = get_pod(store, "victim")["status"]["message"]
        assert pod_events(store, "victim")[-2:] == [
            ("Warning", "Evicted", "kubelet", "", message, 1),
            ("Normal", "Killing", "kubelet", "spec.containers{main}", "Stopping container main", 1),
        ]


# ------------------------------------------------------------------------------------------- units


def test_ip_allocator_hands_out_unique_addresses_and_reuses_released_ones() -> None:
    ips = _IPAllocator()
    first = [ips.allocate() for _ in range(300)]
    assert first[0] == "10.244.0.2" and len(set(first)) == 300
    assert all(not ip.endswith((".0", ".255")) for ip in first)  # network and broadcast of each /24 skipped
    ips.release(first[5])
    assert ips.allocate() == first[5]
    assert ips.allocate() not in first


def test_node_agent_owns_pod_ips_it_allocated_and_releases_them_when_the_pod_goes() -> None:
    kubelet = Kubelet(Store(), KubeletConfig(nodes=0))
    agent = kubelet.agent
    rec = _PodRecord(uid="u1", namespace=NS, name="p")
    agent.allocate_ip(rec)
    assert rec.pod_ip == "10.244.0.2" and rec.ip_owned
    agent.allocate_ip(rec)  # keeps the one it has
    assert rec.pod_ip == "10.244.0.2"
    adopted = _PodRecord(uid="u2", namespace=NS, name="q", pod_ip="10.244.9.9")
    agent.allocate_ip(adopted)
    assert (adopted.pod_ip, adopted.ip_owned) == ("10.244.9.9", False)

    async def forget() -> None:
        agent.forget(rec)
        agent.forget(adopted)  # not owned: not given to another pod

    anyio.run(forget)
    other = _PodRecord(uid="u3", namespace=NS, name="r")
    agent.allocate_ip(other)
    assert other.pod_ip == "10.244.0.2"
    assert agent.log_source("u1", "containerd://x") is None  # no record: nothing kept


def test_annotation_values_are_parsed_strictly() -> None:
    assert parse_seconds(None, RUN_SECONDS) is None
    assert parse_seconds("2.5", RUN_SECONDS) == 2.5
    for bad in ("soon", "-1", "inf", "nan"):
        with pytest.raises(ValueError, match=RUN_SECONDS):
            parse_seconds(bad, RUN_SECONDS)
    assert parse_exit_code(" 3 ") == 3 and parse_exit_code(None) is None
    for bad in ("banana", "256", "-1"):
        with pytest.raises(ValueError, match=EXIT_CODE):
            parse_exit_code(bad)
    assert [default_reason(c) for c in (0, 1, 137, 143)] == ["Completed", "Error", "OOMKilled", "Error"]


def test_pod_status_is_rendered_from_the_record_and_the_runtime_view() -> None:
    """podstatus.render_status: the pod-level keys come from the record and the node, the phase, readiness
    and container statuses from the runtime's view, whatever runtime gave it."""

    class View:
        phase = "Succeeded"
        ready = False
        initialized = True
        statuses = [{"name": "main"}]
        init_statuses: list[dict] = []

    rec = _PodRecord(uid="u", namespace=NS, name="p", life=EXITED, admitted_at="2024-01-01T00:00:00Z")
    rec.pod_ip = "10.244.0.7"
    node = _Node("n", True, False, [], {}, 1000, 2**30, 10, "172.18.0.2")
    pod = make_pod("p")
    pod["status"] = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
    status = render_status(pod, rec, node, View())
    assert (status["phase"], status["podIP"], status["hostIP"]) == ("Succeeded", "10.244.0.7", "172.18.0.2")
    assert status["startTime"] == "2024-01-01T00:00:00Z" and status["qosClass"] == "BestEffort"
    assert status["containerStatuses"] == [{"name": "main"}] and status["initContainerStatuses"] is None
    assert [(c["type"], c["status"], c.get("reason")) for c in status["conditions"]] == [
        ("PodReadyToStartContainers", "False", None),
        ("Initialized", "True", None),
        ("Ready", "False", "PodCompleted"),
        ("ContainersReady", "False", "PodCompleted"),
        ("PodScheduled", "True", None),  # not the kubelet's: kept
    ]
    assert status["reason"] is None and status["message"] is None

    term = _Termination(1, "Error", "2024-01-01T00:00:00Z", "2024-01-01T00:00:01Z", instance=2)
    assert terminated(rec, "main", term) == {
        "exitCode": 1,
        "reason": "Error",
        "containerID": container_id(rec, "main", 2),
        "startedAt": "2024-01-01T00:00:00Z",
        "finishedAt": "2024-01-01T00:00:01Z",
    }
    assert container_id(rec, "main", 2) != container_id(rec, "main", 1)
    message = eviction_message([{"name": "main", "resources": {"requests": {"memory": "1Gi"}}}])
    assert "Container main was using 1572864Ki, request is 1Gi" in message


async def test_pods_of_a_node_deleted_before_the_pod_event_are_not_kubelet_synced() -> None:
    """The worker hands a bound pod to its node's kubelet only while that node exists and is Ready."""
    async with cluster(nodes=1) as (store, kubelet, rec):
        synced: list[str] = []
        original = kubelet.agent.sync

        def counting(pod: dict, pod_record: Any, node: Any) -> Any:
            synced.append(pod_record.name)
            return original(pod, pod_record, node)

        kubelet.agent.sync = counting  # type: ignore[method-assign]
        kubelet.set_node_ready("sim-node-0", False)
        body = make_pod("late")
        body["spec"]["nodeName"] = "sim-node-0"
        store.create("pods", NS, body)
        await anyio.wait_all_tasks_blocked()
        assert synced == [] and phase(store, "late") in (None, "Pending")
        kubelet.set_node_ready("sim-node-0", True)
        await rec.until(lambda: running(store, "late"))
        assert "late" in synced
