"""What the node components share (tfjob_sim.nodestate): the configuration, the node and pod tables with
node usage, the worker's timers, and the status write that does not wake the worker for itself."""

from __future__ import annotations

import pytest

from tfjob_sim.kubelet import KubeletConfig
from tfjob_sim.nodestate import NodeState, pod_requests
from tfjob_sim.podstate import go_duration
from tfjob_sim.quantity import parse_quantity
from tfjob_sim.store import Store
from tfjob_sim.testing.nodes import NS, make_pod

# ------------------------------------------------------------------------------------------- configuration


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


# ------------------------------------------------------------------------------------------- tables


def _node(name: str, ready: bool = True, cpu: str = "4") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "1Gi", "pods": "10"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }


def _bound(name: str, node: str, cpu: str, phase: str = "Running") -> dict:
    body = make_pod(name, nodeName=node)
    body["metadata"].update(namespace=NS, uid=f"uid-{name}")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": cpu}}
    body["status"] = {"phase": phase}
    return body


def test_pod_requests_sum_containers_and_take_the_largest_init_container() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "1"}}},  # limits count as requests
        ],
        "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
    }
    assert pod_requests(spec) == (2000, 2**30)
    with pytest.raises(ValueError):
        pod_requests({"containers": [{"resources": {"requests": {"cpu": "lots"}}}]})


def test_node_usage_follows_bound_non_terminal_pods_in_any_event_order() -> None:
    state = NodeState(Store(), KubeletConfig(nodes=0))
    state.pod_event("ADDED", None, _bound("early", "n", "1"))  # seen before its node
    state.node_event("ADDED", None, _node("n"))
    assert state.nodes["n"].used_cpu_m == 1000 and state.nodes["n"].used_pods == 1
    state.pod_event("ADDED", None, _bound("second", "n", "2"))
    assert state.nodes["n"].used_cpu_m == 3000
    state.retry_unschedulable = False
    state.pod_event("MODIFIED", None, _bound("second", "n", "2", phase="Succeeded"))
    assert state.nodes["n"].used_cpu_m == 1000 and state.retry_unschedulable  # capacity freed
    gone = state.pod_event("DELETED", _bound("early", "n", "1"), None)
    assert gone is not None and gone.name == "early"
    assert state.nodes["n"].used_pods == 0 and "uid-early" not in state.pods
    assert state.pods_by_node == {"n": {"uid-second"}}


async def test_node_events_track_readiness_and_bump_the_generation() -> None:
    state = NodeState(Store(), KubeletConfig(nodes=0))
    state.pod_event("ADDED", None, _bound("p", "n", "1"))
    generation = state.node_generation
    state.dirty.clear()
    state.node_event("ADDED", None, _node("n", ready=False))
    assert state.node_generation == generation + 1
    assert state.nodes["n"].not_ready_since is not None and list(state.dirty) == ["uid-p"]
    state.dirty.clear()
    state.node_event("MODIFIED", None, _node("n", ready=False, cpu="8"))
    assert not state.dirty and state.nodes["n"].used_cpu_m == 1000  # usage carried over
    state.node_event("MODIFIED", None, _node("n", ready=True))
    assert state.nodes["n"].not_ready_since is None and list(state.dirty) == ["uid-p"]
    state.node_event("DELETED", _node("n"), None)
    assert "n" not in state.nodes


def test_timers_fire_in_order_and_only_the_latest_per_pod() -> None:
    state = NodeState(Store(), KubeletConfig(nodes=0))
    for name in ("a", "b"):
        state.pod_event("ADDED", None, _bound(name, "n", "1"))
    state.dirty.clear()
    a, b = state.pods["uid-a"], state.pods["uid-b"]
    state.set_timer(a, 5.0)
    state.set_timer(b, 3.0)
    state.set_timer(a, 1.0)  # replaces 5.0
    assert state.next_timer() == 1.0
    state.fire_timers(2.0)
    assert list(state.dirty) == ["uid-a"] and a.timer_due is None
    state.fire_timers(10.0)  # b fires; a's stale 5.0 entry does not
    assert list(state.dirty) == ["uid-a", "uid-b"]
    assert state.next_timer() is None


def test_own_status_writes_skip_no_ops_and_do_not_mark_the_pod_dirty() -> None:
    store = Store()
    state = NodeState(store, KubeletConfig(nodes=0))
    store.add_listener(lambda _t, resource, old, new: state.pod_event(_t, old, new) if resource == "pods" else None)
    store.create("pods", NS, make_pod("p"))
    pod = store.get("pods", NS, "p")
    state.dirty.clear()
    rv = pod["metadata"]["resourceVersion"]
    written = state.write_status(pod, {"phase": "Pending", "reason": None})
    assert written["metadata"]["resourceVersion"] != rv or written is pod
    assert not state.dirty
    assert state.write_status(written, {"phase": written["status"].get("phase")}) is written  # a no-op: no write
    store.patch("pods", NS, "p", "merge", {"metadata": {"labels": {"a": "b"}}})
    assert list(state.dirty) == [pod["metadata"]["uid"]]  # anyone else's write does
    state.delete_now(written)
    state.delete_now(written)  # already gone: no error
    assert store.get("pods", NS, "p") is None
