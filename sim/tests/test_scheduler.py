"""Behaviour of the simulated kube-scheduler (tfjob_sim.scheduler): filters, score, the FailedScheduling
message, binding, retries when capacity frees, and its per-shape filter cache against the brute-force
filter.

The end-to-end tests run the real Store with a Kubelet at time_scale 0.01 (tfjob_sim.testing.nodes).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tfjob_sim.errors import ApiError
from tfjob_sim.kubelet import UNSCHEDULABLE, Kubelet, KubeletConfig
from tfjob_sim.nodestate import NodeState
from tfjob_sim.scheduler import (
    Scheduler,
    fit_error,
    least_allocated,
    node_affinity_matches,
    node_filter,
    tolerates,
)
from tfjob_sim.store import Store
from tfjob_sim.testing.nodes import (
    NS,
    SCALE,
    annotate,
    cluster,
    condition,
    get_pod,
    make_pod,
    running,
    sentinel,
)
from tfjob_sim.testing.recorder import Recorder

# ------------------------------------------------------------------------------------------- placement


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


async def test_deleted_pending_pod_is_never_resurrected() -> None:
    async with cluster() as (store, _k, rec):
        store.create("pods", NS, make_pod("ghost", {UNSCHEDULABLE: "true"}))
        await rec.until(lambda: condition(get_pod(store, "ghost"), "PodScheduled"))
        store.delete("pods", NS, "ghost")
        assert get_pod(store, "ghost") is None  # unscheduled: gone at once
        await sentinel(store, rec, 2)
        assert get_pod(store, "ghost") is None
        assert [e for _t, e, _o in rec.pod_states("ghost")][-1] == "DELETED"


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


# ------------------------------------------------------------------------------------------- the fast path (per-shape static filter cache) against the brute-force filter


def brute_force_find_node(
    scheduler: Scheduler,
    state: NodeState,
    pod: dict,
    requests: tuple[int, int],
    extra: dict[str, tuple[int, int, int]] | None = None,
) -> tuple[str | None, str]:
    """What find_node answered before its cache: every filter on every node, then the best score."""
    spec = pod.get("spec") or {}
    forced = ((pod.get("metadata") or {}).get("annotations") or {}).get(UNSCHEDULABLE) == "true"
    total = len(state.nodes)
    reasons: dict[str, int] = {}
    resource_failures = 0
    candidates = []
    extra = extra or {}
    for node in state.nodes.values():
        failed = node_filter(
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
    best = min(candidates, key=lambda n: scheduler.score(n, requests[0], requests[1], extra.get(n.name)))
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
            state = NodeState(Store(), KubeletConfig(nodes=0))
            scheduler = Scheduler(state)
            nodes: dict[int, dict] = {}
            for i, args in enumerate(initial):
                nodes[i] = _node_object(i, *args)
                state.node_event("ADDED", None, nodes[i])
            for serial, step in enumerate(steps):
                if step[0] == "node":
                    _kind, i, args = step
                    new = _node_object(i, *args)
                    state.node_event("MODIFIED" if i in nodes else "ADDED", nodes.get(i), new)
                    nodes[i] = new
                    continue
                if step[0] == "delete":
                    if step[1] in nodes:
                        state.node_event("DELETED", nodes.pop(step[1]), None)
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
                if not state.nodes:
                    continue
                chosen = scheduler.find_node(pod, (cpu, mem), extra)
                assert chosen == brute_force_find_node(scheduler, state, pod, (cpu, mem), extra)
                if step[0] == "bind" and chosen[0] is not None:
                    # Accounted like a bound pod's ADDED event: usage changes, the static cache stays.
                    state.pod_event(
                        "ADDED",
                        None,
                        dict(pod, spec=dict(pod["spec"], nodeName=chosen[0]), status={"phase": "Pending"}),
                    )

        anyio.run(run)

    check()


# ------------------------------------------------------------------------------------------- units


def _state_with_nodes(*nodes: dict) -> tuple[NodeState, Scheduler]:
    state = NodeState(Store(), KubeletConfig(nodes=0))
    scheduler = Scheduler(state)
    for node in nodes:
        state.node_event("ADDED", None, node)
    return state, scheduler


def _pod(name: str, cpu: str | None = None, **spec: Any) -> dict:
    body = make_pod(name, **spec)
    body["metadata"].update(namespace=NS, uid=f"uid-{name}")
    if cpu is not None:
        body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return body


def test_tolerations_match_taints_as_the_api_defines() -> None:
    taint = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    assert tolerates([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}], taint) is not None
    assert tolerates([{"key": "dedicated", "operator": "Exists"}], taint) is not None
    assert tolerates([{"operator": "Exists"}], taint) is not None  # tolerates everything
    assert tolerates([{"key": "dedicated", "value": "cpu"}], taint) is None
    assert tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], taint) is None
    assert tolerates(["not a dict"], taint) is None


def test_node_affinity_and_selector() -> None:
    labels = {"zone": "a", "rank": "3"}
    assert node_affinity_matches({}, labels, "n0")
    assert node_affinity_matches({"nodeSelector": {"zone": "a"}}, labels, "n0")
    assert not node_affinity_matches({"nodeSelector": {"zone": "b"}}, labels, "n0")

    def required(*terms: dict) -> dict:
        return {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
            }
        }

    gt2 = {"matchExpressions": [{"key": "rank", "operator": "Gt", "values": ["2"]}]}
    lt2 = {"matchExpressions": [{"key": "rank", "operator": "Lt", "values": ["2"]}]}
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert node_affinity_matches(required(gt2), labels, "n0")
    assert not node_affinity_matches(required(lt2), labels, "n0")
    assert node_affinity_matches(required(lt2, by_name), labels, "n1")  # terms are ORed
    assert not node_affinity_matches(required({}), labels, "n0")  # an empty term matches nothing


def test_fit_error_gives_the_default_preemption_verdict() -> None:
    assert fit_error(3, {"Insufficient cpu": 2, "node(s) were unschedulable": 1}, 2) == (
        "0/3 nodes are available: 1 node(s) were unschedulable, 2 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )


def test_place_prefers_the_least_allocated_node_and_counts_bound_pods() -> None:
    state, scheduler = _state_with_nodes(
        _node_object(0, {}, [], False, True, 10, 4000, 2**32),
        _node_object(1, {}, [], False, True, 10, 4000, 2**32),
    )
    first = _pod("first", cpu="1")
    state.pod_event("ADDED", None, first)
    assert scheduler.requests(first) == (1000, 0)
    assert scheduler.place(first, {}) == ("n0", "")  # a tie: the name decides
    state.pod_event("MODIFIED", None, dict(first, spec=dict(first["spec"], nodeName="n0")))
    assert state.nodes["n0"].used_cpu_m == 1000
    second = _pod("second", cpu="1")
    state.pod_event("ADDED", None, second)
    assert scheduler.place(second, {}) == ("n1", "")
    # A gang's tentative placements count like bound pods.
    assert scheduler.place(second, {"n1": (2000, 0, 1)}) == ("n0", "")
    assert least_allocated(state.nodes["n0"], 1000, 0) < least_allocated(state.nodes["n0"], 2000, 0)


def test_place_tells_invalid_requests_and_an_empty_cluster_apart() -> None:
    state, scheduler = _state_with_nodes()
    pod = _pod("p")
    state.pod_event("ADDED", None, pod)
    assert scheduler.place(pod, {}) == (None, "no nodes available to schedule pods")
    state, scheduler = _state_with_nodes(_node_object(0, {}, [], False, True, 10, 4000, 2**32))
    bad = _pod("bad", cpu="lots")
    state.pod_event("ADDED", None, bad)
    node, message = scheduler.place(bad, {})
    assert node is None and message.startswith("0/1 nodes are available: invalid resource requests: ")
    assert scheduler.requests(bad) == (0, 0)


def test_filter_cache_follows_node_changes() -> None:
    """A node change invalidates the static filter results cached per pod shape."""
    state, scheduler = _state_with_nodes(_node_object(0, {}, [], True, True, 10, 4000, 2**32))
    pod = _pod("p")
    state.pod_event("ADDED", None, pod)
    assert scheduler.place(pod, {})[0] is None
    state.node_event("MODIFIED", None, _node_object(0, {}, [], False, True, 10, 4000, 2**32))
    assert scheduler.place(pod, {}) == ("n0", "")
    assert scheduler.filter(state.nodes["n0"], pod, {}) is None
    state.node_event(
        "MODIFIED", None, _node_object(0, {}, [{"key": "k", "effect": "NoSchedule"}], False, True, 1, 1, 1)
    )
    assert scheduler.filter(state.nodes["n0"], pod, {}) == "node(s) had untolerated taint {k: }"


def test_retry_gives_unschedulable_pods_a_new_attempt_only_when_something_changed() -> None:
    state, scheduler = _state_with_nodes(_node_object(0, {}, [], False, True, 10, 500, 2**32))
    store = state.store
    store.create("pods", NS, make_pod("big"))
    big = store.get("pods", NS, "big")
    big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    state.pod_event("ADDED", None, big)
    rec = state.pods[big["metadata"]["uid"]]
    scheduler.schedule(big, rec)
    assert condition(store.get("pods", NS, "big"), "PodScheduled")["reason"] == "Unschedulable"
    state.dirty.clear()
    state.retry_unschedulable = False
    scheduler.retry()
    assert not state.dirty  # nothing changed: no new attempt
    state.retry_unschedulable = True
    scheduler.retry()
    assert list(state.dirty) == [rec.uid] and not rec.scheduling_attempted
    scheduler.forget(rec.uid)
    state.dirty.clear()
    state.retry_unschedulable = True
    scheduler.retry()
    assert not state.dirty
