"""Behaviour of the simulated nodes' lifecycle (tfjob_sim.nodelifecycle): registration, readiness faults
and taints, and the node lifecycle controller's handling of the pods of an unreachable node.

The end-to-end tests run the real Store with a Kubelet at time_scale 0.01 (tfjob_sim.testing.nodes).
"""

from __future__ import annotations

import anyio
import pytest

from tfjob_sim.errors import ApiError
from tfjob_sim.kubelet import KubeletConfig
from tfjob_sim.nodelifecycle import NODE_CONTROLLER, NodeLifecycle
from tfjob_sim.nodestate import NodeState
from tfjob_sim.scheduler import TAINT_UNREACHABLE
from tfjob_sim.store import Store
from tfjob_sim.testing.nodes import (
    NS,
    SCALE,
    cluster,
    condition,
    get_pod,
    make_pod,
    pod_events,
    running,
    sentinel,
)

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


async def test_unreachable_node_events() -> None:
    async with cluster(nodes=1) as (store, kubelet, rec):
        store.create("pods", NS, make_pod("stranded"))
        await rec.until(lambda: running(store, "stranded"))
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


# ------------------------------------------------------------------------------------------- units


def _lifecycle(**config: object) -> tuple[NodeState, NodeLifecycle]:
    state = NodeState(Store(), KubeletConfig(**config))  # type: ignore[arg-type]
    return state, NodeLifecycle(state)


def test_registration_creates_missing_nodes_only() -> None:
    state, lifecycle = _lifecycle(nodes=2, node_name_prefix="w-")
    store = state.store
    store.create("nodes", None, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w-1", "labels": {"x": "y"}}})
    lifecycle.register_nodes()
    nodes = {n["metadata"]["name"]: n for n in store.list("nodes")[0]}
    assert sorted(nodes) == ["w-0", "w-1"]
    assert nodes["w-1"]["metadata"]["labels"] == {"x": "y"}  # an existing node is kept as it is
    info = nodes["w-0"]["status"]["nodeInfo"]
    assert info["systemUUID"] != info["bootID"] and len(info["machineID"]) == 32
    again = lifecycle.node_object("w-0", 0)
    assert again["status"]["nodeInfo"] == info  # stable identifiers: derived from the name


def test_set_node_ready_writes_conditions_taints_and_one_event_per_change() -> None:
    async def run() -> None:
        state, lifecycle = _lifecycle(nodes=1)
        store = state.store
        lifecycle.register_nodes()
        store.patch(
            "nodes", None, "sim-node-0", "merge", {"spec": {"taints": [{"key": "own", "effect": "NoSchedule"}]}}
        )
        lifecycle.set_node_ready("sim-node-0", False)
        lifecycle.set_node_ready("sim-node-0", False)
        node = store.get("nodes", None, "sim-node-0")
        assert {c["status"] for c in node["status"]["conditions"]} == {"Unknown"}
        assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
            ("own", "NoSchedule"),
            (TAINT_UNREACHABLE, "NoSchedule"),
            (TAINT_UNREACHABLE, "NoExecute"),
        ]
        lifecycle.set_node_ready("sim-node-0", True)
        node = store.get("nodes", None, "sim-node-0")
        assert node["spec"]["taints"] == [{"key": "own", "effect": "NoSchedule"}]  # only its own taints go
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
        events = [e for e in pod_events(store, "sim-node-0") if e[2] == NODE_CONTROLLER]
        assert [e[1] for e in events] == ["NodeNotReady", "NodeReady"]
        with pytest.raises(ApiError) as info:
            lifecycle.set_node_ready("absent", True)
        assert info.value.code == 404

    anyio.run(run)


def test_unreachable_pod_waits_for_its_toleration_then_is_deleted_gracefully() -> None:
    async def run() -> None:
        state, lifecycle = _lifecycle(nodes=1, time_scale=SCALE, node_eviction_seconds=5)
        store = state.store
        lifecycle.register_nodes()
        lifecycle.set_node_ready("sim-node-0", False)
        state.node_event("ADDED", None, store.get("nodes", None, "sim-node-0"))
        body = make_pod("w", terminationGracePeriodSeconds=30)
        body["spec"]["nodeName"] = "sim-node-0"
        store.create("pods", NS, body)
        pod = store.get("pods", NS, "w")
        state.pod_event("ADDED", None, pod)
        rec = state.pods[pod["metadata"]["uid"]]
        node = state.nodes["sim-node-0"]
        due = lifecycle.unreachable(pod, rec, node)
        assert due is not None and due >= anyio.current_time()
        assert rec.unreachable_marked and "deletionTimestamp" not in store.get("pods", NS, "w")["metadata"]
        await anyio.sleep(max(0.0, due - anyio.current_time()))
        assert lifecycle.unreachable(store.get("pods", NS, "w"), rec, node) is None
        pod = store.get("pods", NS, "w")
        assert pod["metadata"]["deletionTimestamp"] and rec.taint_evicted
        assert condition(pod, "DisruptionTarget")["reason"] == "DeletionByTaintManager"
        assert lifecycle.unreachable(pod, rec, node) is None  # terminating: nothing more to do
        lifecycle.reachable(rec)
        assert not rec.unreachable_marked

    anyio.run(run)
