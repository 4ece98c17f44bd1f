"""Behaviour of the simulated pod garbage collector (tfjob_sim.podgc): pods of a node that no longer
exists are failed and force-deleted after a quarantine.

The end-to-end test runs the real Store with a Kubelet at time_scale 0.01 (tfjob_sim.testing.nodes).
"""

from __future__ import annotations

import anyio

from tfjob_sim.kubelet import KubeletConfig
from tfjob_sim.nodestate import NodeState
from tfjob_sim.podgc import PodGC
from tfjob_sim.store import Store
from tfjob_sim.testing.nodes import LONG_GRACE, NS, SCALE, cluster, condition, make_pod, running

# ------------------------------------------------------------------------------------------- orphans


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


def test_collect_orphan_waits_for_the_quarantine_and_acts_once() -> None:
    async def run() -> None:
        state = NodeState(Store(), KubeletConfig(nodes=0, time_scale=SCALE, pod_gc_orphan_seconds=5))
        gc = PodGC(state)
        store = state.store
        body = make_pod("orphan", terminationGracePeriodSeconds=LONG_GRACE)
        body["spec"]["nodeName"] = "gone"
        body["metadata"]["finalizers"] = ["example.com/hold"]  # keeps the deleted pod readable
        store.create("pods", NS, body)
        pod = store.get("pods", NS, "orphan")
        state.pod_event("ADDED", None, pod)
        rec = state.pods[pod["metadata"]["uid"]]
        started = anyio.current_time()
        due = gc.collect_orphan(pod, rec)
        assert due is not None and due - started >= 5 * SCALE * 0.99
        # The node came back in between: a later loss starts a new quarantine.
        gc.node_back(rec)
        await anyio.sleep(due - anyio.current_time())
        due = gc.collect_orphan(pod, rec)
        assert due is not None
        await anyio.sleep(max(0.0, due - anyio.current_time()))
        assert gc.collect_orphan(pod, rec) is None and rec.gc_done
        pod = store.get("pods", NS, "orphan")
        assert pod["status"]["phase"] == "Failed"
        assert condition(pod, "DisruptionTarget")["reason"] == "DeletionByPodGC"
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 0  # force-deleted, no grace period
        assert gc.collect_orphan(pod, rec) is None  # once

    anyio.run(run)
