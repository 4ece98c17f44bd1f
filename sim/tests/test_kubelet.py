"""Behaviour of the simulated scheduler, kubelet, node lifecycle controller and pod GC.

Every test runs the real Store with a Kubelet at time_scale 0.01 (1 simulated second = 10 ms) and
synchronises on store changes with a deadline; timing assertions use lower bounds (a timer never
fires early) and generous upper bounds. "Nothing happens" is shown with a sentinel: a later timer of
the same kubelet that fired proves every earlier one was processed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from tfjob_sim.errors import ApiError
from tfjob_sim.kubelet import (
    EVICT,
    EXIT_CODE,
    IGNORE_SIGTERM,
    REASON,
    RUN_SECONDS,
    SIGTERM_EXIT_CODE,
    SIGTERM_SECONDS,
    START_SECONDS,
    UNSCHEDULABLE,
    Kubelet,
    KubeletConfig,
    fit_error,
    image_size,
    parse_quantity,
)
from tfjob_sim.podstate import go_duration
from tfjob_sim.store import Store
from tfjob_sim.testing.recorder import Recorder

SCALE = 0.01
NS = "default"
# A grace period (simulated seconds) that "exited early" is told from by 30 real seconds: a loaded machine
# cannot blur that, and waiting it out would fail the recorder's deadline anyway.
LONG_GRACE = 3000


@asynccontextmanager
async def cluster(**config: Any) -> AsyncIterator[tuple[Store, Kubelet, Recorder]]:
    config.setdefault("time_scale", SCALE)
    store = Store()
    recorder = Recorder(store)
    kubelet = Kubelet(store, KubeletConfig(**config))
    async with anyio.create_task_group() as tg:
        tg.start_soon(kubelet.run)
        expected = kubelet.config.nodes
        await recorder.until(lambda: len(store.list("nodes")[0]) == expected or expected == 0)
        await anyio.wait_all_tasks_blocked()
        yield store, kubelet, recorder
        tg.cancel_scope.cancel()


def make_pod(
    name: str,
    annotations: dict[str, str] | None = None,
    restart: str = "Always",
    containers: tuple[str, ...] = ("main",),
    **spec: Any,
) -> dict:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": c, "image": "busybox:1.36"} for c in containers],
            **spec,
        },
    }
    return body


def get_pod(store: Store, name: str) -> dict | None:
    return store.get("pods", NS, name)


def phase(store: Store, name: str) -> str | None:
    pod = get_pod(store, name)
    return (pod.get("status") or {}).get("phase") if pod else None


def condition(pod: dict, ctype: str) -> dict | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def container(pod: dict, name: str = "main") -> dict:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)


def annotate(store: Store, name: str, **values: str | None) -> None:
    store.patch("pods", NS, name, "merge", {"metadata": {"annotations": values}})


def running(store: Store, name: str) -> bool:
    pod = get_pod(store, name)
    return bool(
        pod
        and pod["status"].get("phase") == "Running"
        and all(s.get("state", {}).get("running") for s in pod["status"].get("containerStatuses", []))
    )


def restart_count(store: Store, name: str) -> int:
    pod = get_pod(store, name)
    return container(pod)["restartCount"] if pod and pod["status"].get("containerStatuses") else -1


async def sentinel(store: Store, recorder: Recorder, seconds: float, name: str = "sentinel") -> None:
    """Run a pod for ``seconds`` simulated seconds to completion: once it has finished, every timer
    of the kubelet due earlier has fired (one worker, timers in due order)."""
    store.create("pods", NS, make_pod(name, {RUN_SECONDS: str(seconds), START_SECONDS: "0"}, restart="Never"))
    await recorder.until(lambda: phase(store, name) == "Succeeded")


# ------------------------------------------------------------------------------------------- nodes


async def test_nodes_are_created_ready_with_capacity() -> None:
    async with cluster(nodes=3, node_cpu="8", node_memory="16Gi", node_pods=20) as (store, _k, _r):
        nodes, _ = store.list("nodes")
        assert [n["metadata"]["name"] for n in nodes] == ["sim-node-0", "sim-node-1", "sim-node-2"]
        for node in nodes:
            status = node["status"]
            assert status["capacity"] == {"cpu": "8", "ephemeral-storage": "100Gi", "memory": "16Gi", "pods": "20"}
            assert status["allocatable"] == status["capacity"]
            ready = next(c for c in status["conditions"] if c["type"] == "Ready")
            assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
            assert {c["type"] for c in status["conditions"]} == {
                "Ready",
                "MemoryPressure",
                "DiskPressure",
                "PIDPressure",
            }
            assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]
        ips = {next(a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP") for n in nodes}
        assert len(ips) == 3


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        KubeletConfig(time_scale=0)
    with pytest.raises(ValueError, match="node_memory"):
        KubeletConfig(node_memory="lots")
    with pytest.raises(ValueError, match="nodes"):
        KubeletConfig(nodes=-1)


def test_quantities_and_durations() -> None:
    assert parse_quantity("500m") * 1000 == 500
    assert parse_quantity("1Gi") == 2**30
    assert parse_quantity("1e3") == 1000
    assert parse_quantity("2k") == 2000
    assert parse_quantity(3) == 3
    with pytest.raises(ValueError):
        parse_quantity("1.2.3")
    assert [go_duration(s) for s in (10, 20, 80, 160, 300)] == ["10s", "20s", "1m20s", "2m40s", "5m0s"]


# ------------------------------------------------------------------------------------------- scheduling + start


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


async def test_pods_spread_over_nodes_and_get_unique_ips() -> None:
    async with cluster(nodes=3) as (store, _k, rec):
        for i in range(9):
            store.create("pods", NS, make_pod(f"p{i}"))
        await rec.until(lambda: all(running(store, f"p{i}") for i in range(9)))
        pods = [get_pod(store, f"p{i}") for i in range(9)]
        per_node: dict[str, int] = {}
        for pod in pods:
            per_node[pod["spec"]["nodeName"]] = per_node.get(pod["spec"]["nodeName"], 0) + 1
        assert per_node == {"sim-node-0": 3, "sim-node-1": 3, "sim-node-2": 3}
        assert len({p["status"]["podIP"] for p in pods}) == 9


async def test_unschedulable_annotation_keeps_pod_pending_until_removed() -> None:
    async with cluster(nodes=3) as (store, _k, rec):
        store.create("pods", NS, make_pod("stuck", {UNSCHEDULABLE: "true"}))
        cond = await rec.until(lambda: condition(get_pod(store, "stuck"), "PodScheduled"))
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        assert cond["message"] == (
            "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. "
            "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        )
        pod = get_pod(store, "stuck")
        assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
        annotate(store, "stuck", **{UNSCHEDULABLE: None})
        await rec.until(lambda: running(store, "stuck"))
        assert condition(get_pod(store, "stuck"), "PodScheduled")["status"] == "True"


async def test_insufficient_resources_and_retry_when_capacity_frees() -> None:
    async with cluster(nodes=2, node_cpu="4", node_pods=1) as (store, _k, rec):
        big = make_pod("big")
        big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "8"}}
        store.create("pods", NS, big)
        cond = await rec.until(lambda: condition(get_pod(store, "big"), "PodScheduled"))
        assert cond["message"] == (
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are "
            "available: 2 No preemption victims found for incoming pod."
        )
        store.create("pods", NS, make_pod("a"))
        store.create("pods", NS, make_pod("b"))
        await rec.until(lambda: running(store, "a") and running(store, "b"))
        store.create("pods", NS, make_pod("c"))
        cond = await rec.until(lambda: condition(get_pod(store, "c"), "PodScheduled"))
        assert cond["message"].startswith("0/2 nodes are available: 2 Too many pods.")
        # A pod that goes away frees its slot: the waiting pod is scheduled without a change of its own.
        node_b = get_pod(store, "b")["spec"]["nodeName"]
        store.delete("pods", NS, "b", {"gracePeriodSeconds": 0})
        await rec.until(lambda: running(store, "c"))
        assert get_pod(store, "c")["spec"]["nodeName"] == node_b
        assert not get_pod(store, "big")["spec"].get("nodeName")


async def test_no_nodes_and_other_schedulers() -> None:
    async with cluster(nodes=0) as (store, _k, rec):
        store.create("pods", NS, make_pod("lonely"))
        cond = await rec.until(lambda: condition(get_pod(store, "lonely"), "PodScheduled"))
        assert (cond["reason"], cond["message"]) == ("Unschedulable", "no nodes available to schedule pods")
    async with cluster(nodes=1) as (store, _k, rec):
        store.create("pods", NS, make_pod("volcano-pod", schedulerName="volcano"))
        await sentinel(store, rec, 1)
        pod = get_pod(store, "volcano-pod")
        assert not pod["spec"].get("nodeName") and "conditions" not in pod["status"]


async def test_node_selector_and_cordon() -> None:
    async with cluster(nodes=2) as (store, _k, rec):
        store.patch("nodes", None, "sim-node-1", "merge", {"metadata": {"labels": {"gpu": "yes"}}})
        store.create("pods", NS, make_pod("gpu", nodeSelector={"gpu": "yes"}))
        await rec.until(lambda: running(store, "gpu"))
        assert get_pod(store, "gpu")["spec"]["nodeName"] == "sim-node-1"
        for name in ("sim-node-0", "sim-node-1"):
            store.patch("nodes", None, name, "merge", {"spec": {"unschedulable": True}})
        store.create("pods", NS, make_pod("cordoned"))
        cond = await rec.until(lambda: condition(get_pod(store, "cordoned"), "PodScheduled"))
        assert cond["message"].startswith("0/2 nodes are available: 2 node(s) were unschedulable.")
        store.patch("nodes", None, "sim-node-0", "merge", {"spec": {"unschedulable": None}})
        await rec.until(lambda: running(store, "cordoned"))
        assert get_pod(store, "cordoned")["spec"]["nodeName"] == "sim-node-0"


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


async def test_deleted_pending_pod_is_never_resurrected() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("ghost", {UNSCHEDULABLE: "true"}))
        await rec.until(lambda: condition(get_pod(store, "ghost"), "PodScheduled"))
        store.delete("pods", NS, "ghost")
        assert get_pod(store, "ghost") is None  # unscheduled: gone at once
        await sentinel(store, rec, 2)
        assert get_pod(store, "ghost") is None
        assert [e for _t, e, _o in rec.pod_states("ghost")][-1] == "DELETED"


# ------------------------------------------------------------------------------------------- nodes failing


async def test_not_ready_node_evicts_pods_which_stay_terminating_until_node_returns() -> None:
    async with cluster(nodes=2, node_eviction_seconds=20) as (store, kubelet, rec):
        store.patch("nodes", None, "sim-node-1", "merge", {"spec": {"unschedulable": True}})
        store.create("pods", NS, make_pod("w", terminationGracePeriodSeconds=5))
        tolerant = make_pod(
            "tolerant",
            tolerations=[{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}],
        )
        store.create("pods", NS, tolerant)
        await rec.until(lambda: running(store, "w") and running(store, "tolerant"))
        assert get_pod(store, "w")["spec"]["nodeName"] == "sim-node-0"
        store.patch("nodes", None, "sim-node-1", "merge", {"spec": {"unschedulable": None}})

        went_down = anyio.current_time()
        kubelet.set_node_ready("sim-node-0", False)
        node = store.get("nodes", None, "sim-node-0")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
        )
        assert {(t["key"], t["effect"]) for t in node["spec"]["taints"]} == {
            ("node.kubernetes.io/unreachable", "NoSchedule"),
            ("node.kubernetes.io/unreachable", "NoExecute"),
        }
        # Node lifecycle controller: pods not ready at once; taint manager: deletion after 20 s.
        await rec.until(lambda: condition(get_pod(store, "w"), "Ready")["status"] == "False")
        await rec.until(lambda: get_pod(store, "w")["metadata"].get("deletionTimestamp"))
        evicted_at = anyio.current_time()
        assert evicted_at - went_down >= 20 * SCALE
        target = condition(get_pod(store, "w"), "DisruptionTarget")
        assert (target["reason"], target["message"]) == (
            "DeletionByTaintManager",
            "Taint manager: deleting due to NoExecute taint",
        )
        # New pods avoid the tainted node.
        store.create("pods", NS, make_pod("fresh"))
        await rec.until(lambda: running(store, "fresh"))
        assert get_pod(store, "fresh")["spec"]["nodeName"] == "sim-node-1"
        # No kubelet can confirm the deletion: it outlives its grace period many times over.
        await sentinel(store, rec, 50)
        assert get_pod(store, "w")["metadata"]["deletionTimestamp"]
        assert get_pod(store, "tolerant") is not None
        assert "deletionTimestamp" not in get_pod(store, "tolerant")["metadata"]  # tolerates forever

        kubelet.set_node_ready("sim-node-0", True)
        node = store.get("nodes", None, "sim-node-0")
        assert "taints" not in node["spec"]
        await rec.until(lambda: get_pod(store, "w") is None)
        await rec.until(lambda: condition(get_pod(store, "tolerant"), "Ready")["status"] == "True")


async def test_unreachable_nodes_are_reported_by_the_scheduler() -> None:
    async with cluster(nodes=2) as (store, kubelet, rec):
        kubelet.set_node_ready("sim-node-0", False)
        kubelet.set_node_ready("sim-node-1", False)
        store.create("pods", NS, make_pod("nowhere"))
        cond = await rec.until(lambda: condition(get_pod(store, "nowhere"), "PodScheduled"))
        assert cond["message"].startswith(
            "0/2 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/unreachable: }."
        )
        kubelet.set_node_ready("sim-node-1", True)
        await rec.until(lambda: running(store, "nowhere"))
        with pytest.raises(ApiError) as info:
            kubelet.set_node_ready("no-such-node", False)
        assert info.value.code == 404 and info.value.message == 'nodes "no-such-node" not found'


async def test_deleted_node_pods_are_failed_and_force_deleted_by_pod_gc() -> None:
    async with cluster(nodes=2, pod_gc_orphan_seconds=10) as (store, _k, rec):
        store.patch("nodes", None, "sim-node-1", "merge", {"spec": {"unschedulable": True}})
        store.create("pods", NS, make_pod("orphan", terminationGracePeriodSeconds=LONG_GRACE))
        await rec.until(lambda: running(store, "orphan"))
        gone = anyio.current_time()
        store.delete("nodes", None, "sim-node-0")
        await rec.until(lambda: rec.deleted_at("orphan"))
        assert rec.deleted_at("orphan") - gone >= 10 * SCALE  # quarantine
        assert rec.deleted_at("orphan") - gone < LONG_GRACE * SCALE  # force-deleted, no grace period
        last = [o for _t, e, o in rec.pod_states("orphan") if e == "MODIFIED"][-1]
        assert last["status"]["phase"] == "Failed"
        target = condition(last, "DisruptionTarget")
        assert (target["reason"], target["message"]) == ("DeletionByPodGC", "PodGC: node no longer exists")


async def test_scheduling_is_one_write_with_pod_scheduled() -> None:
    """The binding sets spec.nodeName and PodScheduled=True together: no watcher sees one without the other."""
    store = Store()
    rec = Recorder(store)
    kubelet = Kubelet(store, KubeletConfig(nodes=1, time_scale=SCALE))
    async with anyio.create_task_group() as tg:
        tg.start_soon(kubelet.run)
        store.create(
            "pods",
            NS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "one"},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        )
        await rec.until(lambda: (get_pod(store, "one") or {}).get("status", {}).get("phase") == "Running")
        tg.cancel_scope.cancel()
    states = [o for _t, _e, o in rec.pod_states("one")]
    first_bound = next(o for o in states if o["spec"].get("nodeName"))
    assert (condition(first_bound, "PodScheduled") or {}).get("status") == "True"
    assert [bool(o["spec"].get("nodeName")) for o in states].count(False) == 1  # only the created pod is unbound


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


def pod_events(store: Store, name: str) -> list[tuple[str, str, str, str, str, int]]:
    """(type, reason, source component, fieldPath, message, count) of the events of pod ``name``."""
    items, _ = store.list("events", NS, field_selector=f"involvedObject.name={name}")
    items.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [
        (
            e["type"],
            e["reason"],
            e["source"].get("component") or e["reportingComponent"],
            e["involvedObject"].get("fieldPath", ""),
            e["message"],
            e.get("count", 1),
        )
        for e in items
    ]


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


async def test_eviction_and_unreachable_node_events() -> None:
    async with cluster(nodes=1) as (store, kubelet, rec):
        store.create("pods", NS, make_pod("victim"))
        store.create("pods", NS, make_pod("stranded"))
        await rec.until(lambda: running(store, "victim") and running(store, "stranded"))
        annotate(store, "victim", **{EVICT: "true"})
        await rec.until(lambda: phase(store, "victim") == "Failed")
        message = get_pod(store, "victim")["status"]["message"]
        assert pod_events(store, "victim")[-2:] == [
            ("Warning", "Evicted", "kubelet", "", message, 1),
            ("Normal", "Killing", "kubelet", "spec.containers{main}", "Stopping container main", 1),
        ]

        kubelet.set_node_ready("sim-node-0", False)
        await rec.until(lambda: condition(get_pod(store, "stranded"), "Ready")["status"] == "False")
        assert pod_events(store, "stranded")[-1] == (
            "Warning",
            "NodeNotReady",
            "node-controller",
            "",
            "Node is not ready",
            1,
        )
        kubelet.set_node_ready("sim-node-0", False)  # no change, no event
        kubelet.set_node_ready("sim-node-0", True)
        assert [(e[0], e[1], e[2], e[4]) for e in pod_events(store, "sim-node-0")] == [
            ("Normal", "NodeNotReady", "node-controller", "Node sim-node-0 status is now: NodeNotReady"),
            ("Normal", "NodeReady", "node-controller", "Node sim-node-0 status is now: NodeReady"),
        ]


# ------------------------------------------------------------------------------------------------
# The scheduler's fast path (per-shape static filter cache) against the brute-force filter.


def brute_force_find_node(
    kubelet: Kubelet, pod: dict, requests: tuple[int, int], extra: dict[str, tuple[int, int, int]] | None = None
) -> tuple[str | None, str]:
    """What find_node answered before its cache: every filter on every node, then the best score."""
    spec = pod.get("spec") or {}
    forced = ((pod.get("metadata") or {}).get("annotations") or {}).get(UNSCHEDULABLE) == "true"
    total = len(kubelet._nodes)
    reasons: dict[str, int] = {}
    resource_failures = 0
    candidates = []
    extra = extra or {}
    for node in kubelet._nodes.values():
        failed = kubelet._filter(
            node, spec, spec.get("tolerations") or [], forced, requests[0], requests[1], extra.get(node.name)
        )
        if failed:
            if failed[0] in ("Too many pods", "Insufficient cpu", "Insufficient memory"):
                resource_failures += 1
            for reason in failed:
                reasons[reason] = reasons.get(reason, 0) + 1
        else:
            candidates.append(node)
    if not candidates:
        return None, fit_error(total, reasons, resource_failures)
    best = min(candidates, key=lambda n: kubelet.score(n, requests[0], requests[1], extra.get(n.name)))
    return best.name, ""


_TAINTS = [
    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "cpu", "effect": "NoExecute"},
    {"key": "spot", "effect": "PreferNoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
]
_TOLERATIONS = [
    {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
]
_EXPRESSIONS = [
    {"key": "zone", "operator": "In", "values": ["a"]},
    {"key": "zone", "operator": "NotIn", "values": ["b"]},
    {"key": "gpu", "operator": "Exists"},
    {"key": "gpu", "operator": "DoesNotExist"},
    {"key": "rank", "operator": "Gt", "values": ["2"]},
    {"key": "rank", "operator": "Lt", "values": ["4"]},
]


def _node_object(
    index: int, labels: dict, taints: list, unschedulable: bool, ready: bool, pods: int, cpu: int, memory: int
) -> dict:
    name = f"n{index}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"unschedulable": unschedulable, "taints": taints},
        "status": {
            "allocatable": {"cpu": f"{cpu}m", "memory": str(memory), "pods": str(pods)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": f"10.0.0.{index + 1}"}],
        },
    }


def _scheduler_strategies() -> tuple[Any, Any]:
    from hypothesis import strategies as st

    labels = st.fixed_dictionaries(
        {},
        optional={
            "zone": st.sampled_from(["a", "b"]),
            "gpu": st.just("yes"),
            "rank": st.sampled_from(["1", "3", "5", "x"]),
        },
    )
    node = st.tuples(
        labels,
        st.lists(st.sampled_from(_TAINTS), max_size=2, unique_by=lambda t: orjson_key(t)),
        st.booleans(),
        st.booleans(),
        st.integers(1, 3),
        st.sampled_from([500, 1000, 4000]),
        st.sampled_from([2**30, 2**32]),
    )
    term = st.fixed_dictionaries(
        {},
        optional={
            "matchExpressions": st.lists(st.sampled_from(_EXPRESSIONS), max_size=2),
            "matchFields": st.lists(
                st.builds(
                    lambda op, n: {"key": "metadata.name", "operator": op, "values": [f"n{n}"]},
                    st.sampled_from(["In", "NotIn"]),
                    st.integers(0, 5),
                ),
                max_size=1,
            ),
        },
    )
    spec = st.fixed_dictionaries(
        {},
        optional={
            "tolerations": st.lists(st.sampled_from(_TOLERATIONS), max_size=3),
            "nodeSelector": st.dictionaries(
                st.sampled_from(["zone", "gpu"]), st.sampled_from(["a", "b", "yes"]), max_size=2
            ),
            "affinity": st.builds(
                lambda terms: {
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
                },
                st.lists(term, min_size=1, max_size=2),
            ),
        },
    )
    pod = st.tuples(spec, st.booleans(), st.sampled_from([0, 100, 600]), st.sampled_from([0, 2**29, 2**31]))
    return node, pod


def orjson_key(obj: Any) -> bytes:
    import orjson

    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def test_find_node_equals_brute_force_filter_as_nodes_and_usage_change() -> None:
    """A table drawn by hypothesis: nodes with labels, taints, cordons, readiness, capacity and usage; pods
    with tolerations, selectors, required affinity (expressions and fields), the unschedulable annotation,
    requests and a gang's tentative placements. After every node change or binding the cached scheduler
    chooses the node (or writes the FitError message) the brute-force filter does."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    node_st, pod_st = _scheduler_strategies()
    step_st = st.one_of(
        st.tuples(st.just("schedule"), pod_st, st.booleans()),
        st.tuples(st.just("node"), st.integers(0, 5), node_st),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("bind"), pod_st),
    )

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(node_st, min_size=1, max_size=6), st.lists(step_st, min_size=1, max_size=25))
    def check(initial: list, steps: list) -> None:
        async def run() -> None:
            kubelet = Kubelet(Store(), KubeletConfig(nodes=0))
            nodes: dict[int, dict] = {}
            for i, args in enumerate(initial):
                nodes[i] = _node_object(i, *args)
                kubelet._on_node_event("ADDED", None, nodes[i])
            for serial, step in enumerate(steps):
                if step[0] == "node":
                    _kind, i, args = step
                    new = _node_object(i, *args)
                    kubelet._on_node_event("MODIFIED" if i in nodes else "ADDED", nodes.get(i), new)
                    nodes[i] = new
                    continue
                if step[0] == "delete":
                    if step[1] in nodes:
                        kubelet._on_node_event("DELETED", nodes.pop(step[1]), None)
                    continue
                (spec, forced, cpu, mem) = step[1]
                pod = {
                    "metadata": {
                        "name": f"p{serial}",
                        "uid": f"u{serial}",
                        "annotations": {UNSCHEDULABLE: "true"} if forced else {},
                    },
                    "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
                }
                extra = {"n0": (100, 2**28, 1), "n2": (0, 0, 2)} if step[0] == "schedule" and step[2] else None
                if not kubelet._nodes:
                    continue
                chosen = kubelet.find_node(pod, (cpu, mem), extra)
                assert chosen == brute_force_find_node(kubelet, pod, (cpu, mem), extra)
                if step[0] == "bind" and chosen[0] is not None:
                    # Accounted like a bound pod's ADDED event: usage changes, the static cache stays.
                    kubelet._on_pod_event(
                        "ADDED",
                        None,
                        dict(pod, spec=dict(pod["spec"], nodeName=chosen[0]), status={"phase": "Pending"}),
                    )

        anyio.run(run)

    check()
