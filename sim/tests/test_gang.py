"""The simulated gang schedulers (sim/tfjob_sim/gang/) on a cluster with little capacity (two nodes
of 4 CPUs): all-or-nothing placement per PodGroup, admission of Volcano groups before their pods
exist, lowering minMember, pods beyond minMember placed one by one, PodGroup phases and counts as
each scheduler writes them, the messages of unplaceable gangs, and the real kubectl showing it all.
Pods of the default scheduler keep their behaviour; without the CRDs nobody schedules gang pods."""

from __future__ import annotations

from typing import Any

import pytest

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.crds import crd_dir
from tfjob_sim.kubelet import EXIT_CODE
from tfjob_sim.store import Store
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.waiting import eventually, never
from tfjob_sim.watch import WatchConfig

VOLCANO_PG = "podgroups.scheduling.volcano.sh"
SP_PG = "podgroups.scheduling.x-k8s.io"
DEADLINE = 30.0


def gang_config(crds: str) -> SimConfig:
    return SimConfig(
        nodes=2,
        time_scale=0.01,
        watch=WatchConfig(),
        podgroup_crds=crds,
        kubelet_options={"node_cpu": "4", "node_memory": "16Gi"},
    )


def make_pod(
    name: str,
    *,
    cpu: str = "1",
    scheduler: str = "volcano",
    group: str | None = "job",
    annotations: dict[str, str] | None = None,
    restart: str = "Never",
) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "annotations": dict(annotations or {})}
    if group is not None:
        if scheduler == "volcano":
            meta["annotations"]["scheduling.k8s.io/group-name"] = group
        else:
            meta["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler,
            "restartPolicy": restart,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}
            ],
        },
    }


def volcano_group(name: str = "job", **spec: Any) -> dict:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def sp_group(name: str = "job", **spec: Any) -> dict:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def pod(store: Store, name: str) -> dict:
    found = store.get("pods", "default", name)
    assert found is not None, f"pod {name} is gone"
    return found


def scheduled_condition(store: Store, name: str) -> dict:
    return next(
        (c for c in pod(store, name).get("status", {}).get("conditions", []) if c.get("type") == "PodScheduled"), {}
    )


def node_of(store: Store, name: str) -> str | None:
    return pod(store, name)["spec"].get("nodeName")


def pg_status(store: Store, resource: str, name: str = "job") -> dict:
    found = store.get(resource, "default", name)
    assert found is not None, f"{resource} {name} is gone"
    return found.get("status") or {}


def events_of(store: Store, kind: str, name: str) -> list[dict]:
    return [
        e
        for e in store.list("events", "default")[0]
        if e["involvedObject"].get("kind") == kind and e["involvedObject"].get("name") == name
    ]


def set_min_member(store: Store, resource: str, value: int) -> None:
    store.patch(resource, "default", "job", "merge", {"spec": {"minMember": value}})


class TestVolcano:
    @pytest.fixture
    def sim_config(self) -> SimConfig:
        return gang_config("volcano")

    async def test_a_podgroup_is_admitted_before_any_pod_exists(
        self, sim_cluster: SimCluster, kubectl: Kubectl
    ) -> None:
        store = sim_cluster.store
        assert store.get("queues.scheduling.volcano.sh", None, "default") is not None  # vc-scheduler made it
        store.create(VOLCANO_PG, "default", volcano_group(minMember=2))
        status = await eventually(
            lambda: pg_status(store, VOLCANO_PG).get("phase") == "Inqueue" and pg_status(store, VOLCANO_PG),
            DEADLINE,
            what="a group without minResources enqueued",
        )
        assert (
            status["conditions"][0]["message"]
            == "2/0 tasks in gang unschedulable: pod group is not ready, 2 minAvailable"
        )
        row = (await kubectl.ok("get", "podgroup-v1beta1", "job", "--no-headers")).split()
        assert row[:3] == ["job", "Inqueue", "2"]

        # minResources beyond 1.2 x the cluster's 8 CPUs: not admitted, as the overcommit plugin says.
        store.create(VOLCANO_PG, "default", volcano_group("big", minMember=1, minResources={"cpu": "10"}))
        await eventually(
            lambda: any(
                e["reason"] == "Unschedulable" and e["message"] == "resource in cluster is overused"
                for e in events_of(store, "PodGroup", "big")
            ),
            DEADLINE,
        )
        assert pg_status(store, VOLCANO_PG, "big").get("phase") == "Pending"
        store.patch(VOLCANO_PG, "default", "big", "merge", {"spec": {"minResources": {"cpu": "9"}}})
        await eventually(lambda: pg_status(store, VOLCANO_PG, "big").get("phase") == "Inqueue", DEADLINE)

    async def test_a_failing_gang_listener_is_recorded_not_only_logged(
        self, sim_cluster: SimCluster, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # The store's write path must survive it, and a test must be able to see it (the gang e2e
        # fixture asserts the record stays empty): a log line alone would let a group silently stall.
        kubelet = sim_cluster.kubelet

        def broken(*_: Any) -> None:
            raise RuntimeError("boom")

        monkeypatch.setattr(kubelet.gang, "on_event", broken)
        sim_cluster.store.create(VOLCANO_PG, "default", volcano_group(minMember=1))
        assert sim_cluster.store.get(VOLCANO_PG, "default", "job") is not None
        assert kubelet.listener_failures == [f"gang scheduler ADDED {VOLCANO_PG}: RuntimeError('boom')"]

    async def test_a_group_in_a_missing_queue_is_never_touched(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group("lost", minMember=1, queue="nope"))
        store.create(VOLCANO_PG, "default", volcano_group("found", minMember=1))
        await eventually(lambda: pg_status(store, VOLCANO_PG, "found").get("phase") == "Inqueue", DEADLINE)
        await never(
            lambda: pg_status(store, VOLCANO_PG, "lost") or events_of(store, "PodGroup", "lost"),
            0.5,
            what="a group of a missing queue touched",
        )

    async def test_all_or_nothing_then_lowering_min_member_lets_it_run(
        self, sim_cluster: SimCluster, kubectl: Kubectl
    ) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group(minMember=3))
        for i in range(3):  # 3 CPUs each on two 4-CPU nodes: room for two of them only
            store.create("pods", "default", make_pod(f"job-{i}", cpu="3"))
        await eventually(
            lambda: all(scheduled_condition(store, f"job-{i}") for i in range(3)),
            DEADLINE,
            what="every pod of the gang tried",
        )
        assert [node_of(store, f"job-{i}") for i in range(3)] == [None, None, None]
        fits = [scheduled_condition(store, f"job-{i}") for i in range(2)]
        assert [c["reason"] for c in fits] == ["Schedulable", "Schedulable"]
        assert all(
            c["message"].startswith(f"Pod default/job-{i} can possibly be assigned to sim-node-")
            for i, c in enumerate(fits)
        )
        assert scheduled_condition(store, "job-2")["message"] == "0/2 nodes are unavailable: 2 Insufficient cpu."
        status = pg_status(store, VOLCANO_PG)
        assert status["phase"] == "Inqueue"
        assert status["conditions"][0]["type"] == "Unschedulable"
        assert status["conditions"][0]["message"] == (
            "1/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; "
            "Pending: 1 Unschedulable, 2 Schedulable"
        )
        warnings = [e["message"] for e in events_of(store, "PodGroup", "job") if e["reason"] == "Unschedulable"]
        assert (
            "3/3 tasks in gang unschedulable: pod group is not ready, 3 Pending, 3 minAvailable; "
            "Pending: 1 Unschedulable, 2 Schedulable" in warnings
        )
        assert [e["message"] for e in events_of(store, "Pod", "job-2") if e["reason"] == "FailedScheduling"] == [
            "0/2 nodes are unavailable: 2 Insufficient cpu."
        ]

        set_min_member(store, VOLCANO_PG, 2)
        await eventually(
            lambda: pg_status(store, VOLCANO_PG).get("running") == 2, DEADLINE, what="two of the gang running"
        )
        status = pg_status(store, VOLCANO_PG)
        assert status["phase"] == "Running"
        assert {c["type"]: c["status"] for c in status["conditions"]} == {"Unschedulable": "True", "Scheduled": "True"}
        assert node_of(store, "job-2") is None
        assert any(
            e["reason"] == "Scheduled" and e["message"] == "pod group is ready"
            for e in events_of(store, "PodGroup", "job")
        )
        row = (await kubectl.ok("get", "podgroups.scheduling.volcano.sh", "job", "--no-headers")).split()
        assert row[:4] == ["job", "Running", "2", "2"]
        assert any(
            e["reason"] == "Scheduled" and e["source"]["component"] == "volcano"
            for e in events_of(store, "Pod", "job-0")
        )

    async def test_an_unplaceable_gang_is_not_retried_until_something_changes(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group(minMember=3))
        for i in range(3):
            store.create("pods", "default", make_pod(f"job-{i}", cpu="3"))
        await eventually(lambda: all(scheduled_condition(store, f"job-{i}") for i in range(3)), DEADLINE)
        await eventually(lambda: pg_status(store, VOLCANO_PG).get("conditions"), DEADLINE)
        # Event-driven, no polling: nothing is written (no retried session, no repeated event) while
        # nothing changes. A polling scheduler would record its Unschedulable event again at once.
        settled = store.resource_version
        await never(lambda: store.resource_version != settled, 1.0, what="a write while nothing changed")
        # Capacity freed elsewhere is a change: the group is evaluated again (and still does not fit).
        other = make_pod("other", group=None, cpu="1")
        del other["spec"]["schedulerName"]
        store.create("pods", "default", other)
        await eventually(lambda: node_of(store, "other"), DEADLINE)
        before = sum(e.get("count", 1) for e in events_of(store, "PodGroup", "job") if e["reason"] == "Unschedulable")
        store.delete("pods", "default", "other", {"gracePeriodSeconds": 0})
        await eventually(
            lambda: (
                sum(e.get("count", 1) for e in events_of(store, "PodGroup", "job") if e["reason"] == "Unschedulable")
                > before
            ),
            DEADLINE,
            what="the group retried when capacity freed",
        )
        assert [node_of(store, f"job-{i}") for i in range(3)] == [None, None, None]

    async def test_pods_beyond_min_member_are_placed_one_by_one(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group(minMember=2))
        for i in range(2):
            store.create("pods", "default", make_pod(f"job-{i}", cpu="2"))
        await eventually(lambda: pg_status(store, VOLCANO_PG).get("running") == 2, DEADLINE)
        # 2 CPUs left on each node: a third pod of 2 CPUs fits, a fourth of 3 does not; the gang is
        # ready, so the third runs without waiting for the fourth.
        store.create("pods", "default", make_pod("job-2", cpu="2"))
        store.create("pods", "default", make_pod("job-3", cpu="3"))
        await eventually(lambda: pg_status(store, VOLCANO_PG).get("running") == 3, DEADLINE)
        await eventually(
            lambda: (
                scheduled_condition(store, "job-3").get("message") == "0/2 nodes are unavailable: 2 Insufficient cpu."
            ),
            DEADLINE,
        )
        status = pg_status(store, VOLCANO_PG)
        assert status["phase"] == "Running" and status["conditions"][-1]["type"] == "Scheduled"

    async def test_phases_unknown_and_completed(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group(minMember=2))
        for i in range(2):
            store.create("pods", "default", make_pod(f"job-{i}"))
        await eventually(lambda: pg_status(store, VOLCANO_PG).get("running") == 2, DEADLINE)
        # minMember above the pods that exist while some run: Volcano's Unknown.
        set_min_member(store, VOLCANO_PG, 3)
        await eventually(lambda: pg_status(store, VOLCANO_PG).get("phase") == "Unknown", DEADLINE)
        set_min_member(store, VOLCANO_PG, 2)
        await eventually(lambda: pg_status(store, VOLCANO_PG).get("phase") == "Running", DEADLINE)
        for i in range(2):  # both exit 0 in the same kubelet pass
            store.patch("pods", "default", f"job-{i}", "merge", {"metadata": {"annotations": {EXIT_CODE: "0"}}})
        status = await eventually(
            lambda: pg_status(store, VOLCANO_PG).get("phase") == "Completed" and pg_status(store, VOLCANO_PG),
            DEADLINE,
            what="both pods succeeded",
        )
        assert status.get("succeeded") == 2 and "running" not in status  # omitempty, as Volcano writes it

    async def test_min_task_member_holds_the_gang_until_every_task_has_its_pods(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group(minMember=2, minTaskMember={"ps": 1, "worker": 1}))
        for i in range(2):
            store.create("pods", "default", make_pod(f"job-worker-{i}", annotations={"volcano.sh/task-spec": "worker"}))
        await eventually(lambda: scheduled_condition(store, "job-worker-0"), DEADLINE)
        assert node_of(store, "job-worker-0") is None and node_of(store, "job-worker-1") is None  # no ps yet
        store.create("pods", "default", make_pod("job-ps-0", annotations={"volcano.sh/task-spec": "ps"}))
        await eventually(lambda: pg_status(store, VOLCANO_PG).get("running") == 3, DEADLINE)

    async def test_a_pod_whose_podgroup_is_missing_waits_with_a_reason(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create("pods", "default", make_pod("lonely", group="ghost"))
        await eventually(
            lambda: (
                scheduled_condition(store, "lonely").get("message")
                == 'failed to get PodGroup for pod default/lonely: podgroups.scheduling.volcano.sh "ghost" '
                "not found"
            ),
            DEADLINE,
        )
        assert any(e["reason"] == "FailedScheduling" for e in events_of(store, "Pod", "lonely"))
        store.create(VOLCANO_PG, "default", volcano_group("ghost", minMember=1))
        await eventually(lambda: node_of(store, "lonely"), DEADLINE)

    async def test_default_scheduler_pods_are_unaffected(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group(minMember=5))
        for i in range(2):
            store.create("pods", "default", make_pod(f"job-{i}"))
        plain = make_pod("plain", group=None)
        del plain["spec"]["schedulerName"]
        store.create("pods", "default", plain)
        await eventually(lambda: node_of(store, "plain"), DEADLINE)
        assert any(
            e["reason"] == "Scheduled" and e["reportingComponent"] == "default-scheduler"
            for e in events_of(store, "Pod", "plain")
        )
        # A Volcano pod in no group is placed alone.
        store.create("pods", "default", make_pod("solo", group=None))
        await eventually(lambda: node_of(store, "solo"), DEADLINE)
        assert node_of(store, "job-0") is None and node_of(store, "job-1") is None


class TestSchedulerPlugins:
    @pytest.fixture
    def sim_config(self) -> SimConfig:
        return gang_config("scheduler-plugins")

    async def test_all_or_nothing_phases_and_lowering_min_member(
        self, sim_cluster: SimCluster, kubectl: Kubectl
    ) -> None:
        store = sim_cluster.store
        owner = store.create(
            "configmaps", "default", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "job"}}
        )
        store.create(SP_PG, "default", sp_group(minMember=3))
        await eventually(lambda: pg_status(store, SP_PG).get("phase") == "Pending", DEADLINE)
        pods = [make_pod(f"job-{i}", cpu="3", scheduler="scheduler-plugins-scheduler") for i in range(3)]
        for p in pods:
            p["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "job", "uid": owner["metadata"]["uid"]}
            ]
        store.create("pods", "default", pods[0])
        await eventually(
            lambda: (
                scheduled_condition(store, "job-0").get("message")
                == (
                    "0/2 nodes are available: pre-filter pod job-0 cannot find enough sibling pods, current pods number: 1, "
                    "minMember of group: 3. preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
                    "scheduling., PodGroup default/job gets rejected due to Pod job-0 is unschedulable even after "
                    "PostFilter."
                )
            ),
            DEADLINE,
        )
        for p in pods[1:]:
            store.create("pods", "default", p)
        await eventually(
            lambda: "Insufficient cpu" in scheduled_condition(store, "job-2").get("message", ""),
            DEADLINE,
            what="the pod that does not fit tried",
        )
        assert [node_of(store, f"job-{i}") for i in range(3)] == [None, None, None]
        assert scheduled_condition(store, "job-2")["message"] == (
            "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption "
            "victims found for incoming pod., PodGroup default/job gets rejected due to Pod job-2 is unschedulable "
            "even after PostFilter."
        )
        assert {scheduled_condition(store, f"job-{i}")["message"] for i in range(2)} == {
            "optimistic rejection in PostFilter"
        }
        failed = [e for e in events_of(store, "Pod", "job-2") if e["reason"] == "FailedScheduling"]
        assert failed and failed[0]["reportingComponent"] == "scheduler-plugins-scheduler"
        status = await eventually(
            lambda: pg_status(store, SP_PG).get("phase") == "Scheduling" and pg_status(store, SP_PG), DEADLINE
        )
        assert status["occupiedBy"] == "default/job"

        set_min_member(store, SP_PG, 2)
        await eventually(lambda: pg_status(store, SP_PG).get("running") == 2, DEADLINE)
        assert pg_status(store, SP_PG)["phase"] == "Running"
        assert node_of(store, "job-2") is None
        await eventually(
            lambda: (
                scheduled_condition(store, "job-2").get("message")
                == "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No "
                "preemption victims found for incoming pod."
            ),
            DEADLINE,
            what="a pod beyond minMember rejected alone, not its gang",
        )
        row = (await kubectl.ok("get", "pgs", "job", "--no-headers")).split()
        assert row[:4] == ["job", "Running", "2", "2"]

    async def test_pods_beyond_min_member_and_finished(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(SP_PG, "default", sp_group(minMember=2))
        for i in range(2):
            store.create("pods", "default", make_pod(f"job-{i}", cpu="2", scheduler="scheduler-plugins-scheduler"))
        await eventually(lambda: pg_status(store, SP_PG).get("running") == 2, DEADLINE)
        # 2 CPUs left on each node: a third pod fits, and is placed alone (the quorum is there).
        store.create("pods", "default", make_pod("job-2", cpu="2", scheduler="scheduler-plugins-scheduler"))
        await eventually(lambda: pg_status(store, SP_PG).get("running") == 3, DEADLINE, what="an extra pod placed")
        for i in range(3):  # all exit 0 in the same kubelet pass
            store.patch("pods", "default", f"job-{i}", "merge", {"metadata": {"annotations": {EXIT_CODE: "0"}}})
        status = await eventually(
            lambda: pg_status(store, SP_PG).get("phase") == "Finished" and pg_status(store, SP_PG), DEADLINE
        )
        assert status.get("succeeded") == 3 and "running" not in status  # omitempty

    async def test_min_resources_gap_and_missing_group(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(SP_PG, "default", sp_group(minMember=1, minResources={"cpu": "20"}))
        store.create("pods", "default", make_pod("job-0", scheduler="scheduler-plugins-scheduler"))
        await eventually(
            lambda: "resource gap: map[cpu:" in scheduled_condition(store, "job-0").get("message", ""), DEADLINE
        )
        store.patch(SP_PG, "default", "job", "merge", {"spec": {"minResources": {"cpu": "2"}}})
        await eventually(lambda: node_of(store, "job-0"), DEADLINE)
        store.create("pods", "default", make_pod("lonely", group="ghost", scheduler="scheduler-plugins-scheduler"))
        await eventually(
            lambda: (
                scheduled_condition(store, "lonely").get("message") == "0/1 nodes are available: 1 PodGroup not found."
            ),
            DEADLINE,
        )


class TestNotInstalled:
    async def test_gang_pods_wait_for_a_scheduler_that_is_not_there(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create("pods", "default", make_pod("v", scheduler="volcano"))
        store.create("pods", "default", make_pod("s", scheduler="scheduler-plugins-scheduler"))
        plain = make_pod("plain", group=None)
        del plain["spec"]["schedulerName"]
        store.create("pods", "default", plain)
        await eventually(lambda: pod(store, "plain")["status"].get("phase") == "Running", DEADLINE)
        for name in ("v", "s"):
            assert node_of(store, name) is None and scheduled_condition(store, name) == {}
            assert not events_of(store, "Pod", name)

    async def test_installing_the_crds_later_starts_the_scheduler(
        self, sim_cluster: SimCluster, kubectl: Kubectl
    ) -> None:
        store = sim_cluster.store
        store.create("pods", "default", make_pod("solo", group=None))
        store.create("pods", "default", make_pod("member"))
        await kubectl.ok("apply", "-f", str(crd_dir("volcano")))
        await eventually(lambda: node_of(store, "solo"), DEADLINE, what="a groupless Volcano pod placed")
        await eventually(lambda: "not found" in scheduled_condition(store, "member").get("message", ""), DEADLINE)
        await eventually(lambda: store.get("queues.scheduling.volcano.sh", None, "default"), DEADLINE)
        store.create(VOLCANO_PG, "default", volcano_group(minMember=1))
        await eventually(lambda: node_of(store, "member"), DEADLINE)


class TestVolcanoBestEffort:
    """Pods without requests are BestEffort: Volcano's allocate skips them and its backfill binds them
    one by one once the group is admitted and has minMember pods (they count as ready while pending)."""

    @pytest.fixture
    def sim_config(self) -> SimConfig:
        return SimConfig(
            nodes=1, time_scale=0.01, watch=WatchConfig(), podgroup_crds="volcano", kubelet_options={"node_pods": 2}
        )

    async def test_best_effort_pods_are_backfilled_one_by_one(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(VOLCANO_PG, "default", volcano_group(minMember=3))
        for i in range(2):
            p = make_pod(f"job-{i}")
            del p["spec"]["containers"][0]["resources"]
            store.create("pods", "default", p)
        await eventually(lambda: all(scheduled_condition(store, f"job-{i}") for i in range(2)), DEADLINE)
        assert node_of(store, "job-0") is None  # two pods of a group of three: not valid yet
        assert scheduled_condition(store, "job-0")["message"] == (
            "3/2 tasks in gang unschedulable: pod group is not ready, 2 Pending, 3 minAvailable; "
            "Pending: 2 Unschedulable"
        )
        p = make_pod("job-2")
        del p["spec"]["containers"][0]["resources"]
        store.create("pods", "default", p)
        # Room for two pods on the node: two are bound although the group needs three.
        await eventually(lambda: node_of(store, "job-0") and node_of(store, "job-1"), DEADLINE)
        await eventually(
            lambda: (
                scheduled_condition(store, "job-2").get("message")
                == "0/1 nodes are unavailable: 1 node(s) pod number exceeded."
            ),
            DEADLINE,
        )
        status = pg_status(store, VOLCANO_PG)
        assert status["conditions"][-1]["type"] == "Scheduled"


class TestCoschedulingNearQuorum:
    """PostFilter leaves the group alone when it is short by at most 10 % of minMember: its pods keep
    waiting at Permit until they time out together, instead of being rejected at once."""

    @pytest.fixture
    def sim_config(self) -> SimConfig:
        return SimConfig(
            nodes=1,
            time_scale=0.01,
            watch=WatchConfig(),
            podgroup_crds="scheduler-plugins",
            kubelet_options={"node_pods": 9},
        )

    async def test_short_by_one_of_ten_waits_then_times_out(self, sim_cluster: SimCluster) -> None:
        store = sim_cluster.store
        store.create(SP_PG, "default", sp_group(minMember=10, scheduleTimeoutSeconds=15))
        for i in range(10):
            store.create("pods", "default", make_pod(f"job-{i}", scheduler="scheduler-plugins-scheduler"))
        await eventually(lambda: all(scheduled_condition(store, f"job-{i}") for i in range(10)), DEADLINE)
        assert scheduled_condition(store, "job-9")["message"] == (
            "0/1 nodes are available: 1 Too many pods. preemption: 0/1 nodes are available: 1 No preemption "
            "victims found for incoming pod."
        )
        assert {scheduled_condition(store, f"job-{i}")["message"] for i in range(9)} == {
            "rejected due to timeout after waiting 15s at plugin Coscheduling"
        }
        assert all(node_of(store, f"job-{i}") is None for i in range(10))
