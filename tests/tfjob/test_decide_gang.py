"""Gang scheduling in the decision: upstream's PodGroup behaviour (training-operator v1.8/v1.9
with ``--gang-scheduler-name``) and the
dynamic-aware gang of enableDynamicWorker jobs (docs/tfjob-compatibility.md, "Gang scheduling").

Each test drives :class:`~tests.tfjob.builders.Cluster`, which applies decisions the way the API server
would, PodGroups included; a scheduler is played by setting the PodGroup's ``status.phase``.
"""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from controller.tfjob import gang
from controller.tfjob.actions import CreatePod, CreatePodGroup, DeletePodGroup, UpdatePodGroup
from controller.tfjob.decide import DecideConfig, decide

from .builders import (
    NOW,
    Cluster,
    actions_of,
    assert_converged,
    at,
    created_pod_names,
    event_reasons,
    make_job,
    replica,
    ts,
)

VOLCANO = DecideConfig(gang_scheduler="volcano")
PLUGINS = DecideConfig(gang_scheduler="scheduler-plugins")
SCHEDULER_WARNING = "SetPodTemplateSchedulerName"


def with_resources(
    replicas: int, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **pod_spec: Any
) -> dict[str, Any]:
    spec = replica(replicas)
    container = spec["template"]["spec"]["containers"][0]
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        container["resources"] = resources
    spec["template"]["spec"].update(pod_spec)
    return spec


def admit(cluster: Cluster, phase: str = "Inqueue") -> None:
    """The gang scheduler moves the group to ``phase`` (a status update bumping the resourceVersion)."""
    assert cluster.pod_group is not None
    cluster.pod_group["status"] = {"phase": phase}
    cluster.pod_group["metadata"]["resourceVersion"] = str(int(cluster.pod_group["metadata"]["resourceVersion"]) + 1)


def pod_group_of(decision: Any) -> dict[str, Any]:
    [create] = actions_of(decision, CreatePodGroup)
    return create.pod_group


# --- the PodGroup upstream creates ---------------------------------------------------------------------
def test_volcano_pod_group_from_the_scheduling_policy() -> None:
    job = make_job(
        worker=3,
        ps=1,
        run_policy={
            "schedulingPolicy": {
                "minAvailable": 2,
                "queue": "research",
                "priorityClass": "high",
                "minResources": {"cpu": "3", "nvidia.com/gpu": 2},
                "scheduleTimeoutSeconds": 30,
            }
        },
    )
    job["metadata"]["annotations"] = {"team": "vision"}
    decision = Cluster(job, config=VOLCANO).decide()
    assert pod_group_of(decision) == {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "test-tfjob",
            "namespace": "default",
            "annotations": {"team": "vision"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TFJob",
                    "name": "test-tfjob",
                    "uid": "job-uid-1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        # scheduleTimeoutSeconds is scheduler-plugins' only
        "spec": {
            "minMember": 2,
            "minResources": {"cpu": "3", "nvidia.com/gpu": 2},
            "queue": "research",
            "priorityClassName": "high",
        },
    }


def test_scheduler_plugins_pod_group_from_the_scheduling_policy() -> None:
    job = make_job(
        worker=3,
        ps=1,
        run_policy={
            "schedulingPolicy": {
                "minAvailable": 2,
                "queue": "research",
                "priorityClass": "high",
                "scheduleTimeoutSeconds": 30,
            }
        },
    )
    spec = pod_group_of(Cluster(job, config=PLUGINS).decide())
    assert spec["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert "annotations" not in spec["metadata"]
    # No queue or priority class in that API; no minResources when nothing is requested (omitempty).
    assert spec["spec"] == {"minMember": 2, "scheduleTimeoutSeconds": 30}


@pytest.mark.parametrize(
    "config, expected",
    [
        # Volcano: minResources is never nil, the queue defaults to "default"
        (VOLCANO, {"minMember": 4, "minResources": {}, "queue": "default"}),
        (PLUGINS, {"minMember": 4}),
    ],
)
def test_without_a_scheduling_policy_the_gang_is_every_replica(config: DecideConfig, expected: dict) -> None:
    # A replica spec without `replicas` counts 1.
    job = make_job(worker=2, ps=1, chief=replica(None))
    assert pod_group_of(Cluster(job, config=config).decide())["spec"] == expected


MIN_RESOURCES_CASES = [
    # id, replica specs, minAvailable, priority classes, expected minResources
    (
        "requests of every pod summed",
        {
            "worker": with_resources(2, {"cpu": "500m", "memory": "1Gi"}),
            "ps": with_resources(1, {"cpu": "1", "memory": "512Mi"}),
        },
        None,
        {},
        {"cpu": "2", "memory": "2560Mi"},
    ),
    (
        "limits only where a container has no requests",
        {"worker": with_resources(2, None, {"cpu": "2"}), "ps": with_resources(1, {"cpu": "1"}, {"cpu": "4"})},
        None,
        {},
        {"cpu": "5"},
    ),
    ("an empty requests map hides the limits", {"worker": with_resources(1, {}, {"cpu": "2"})}, None, {}, {}),
    (
        "init containers are not counted",
        {
            "worker": with_resources(
                1,
                {"cpu": "1"},
                initContainers=[{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "8"}}}],
            )
        },
        None,
        {},
        {"cpu": "1"},
    ),
    (
        "minAvailable takes types in the fixed order when priorities tie: PS before Worker",
        {"worker": with_resources(3, {"cpu": "1"}), "ps": with_resources(1, {"cpu": "4"})},
        2,
        {},
        {"cpu": "5"},
    ),
    (
        "a higher PriorityClass goes first",
        {"worker": with_resources(3, {"cpu": "1"}, priorityClassName="urgent"), "ps": with_resources(1, {"cpu": "4"})},
        2,
        {"urgent": 1000},
        {"cpu": "2"},
    ),
    (
        "an unknown PriorityClass counts 0",
        {
            "worker": with_resources(3, {"cpu": "1"}, priorityClassName="missing"),
            "ps": with_resources(1, {"cpu": "4"}, priorityClassName="low"),
        },
        3,
        {"low": -5},
        {"cpu": "3"},
    ),
    (
        "decimal sums keep their unit",
        {"worker": with_resources(3, {"memory": "1.5G", "cpu": "250m"})},
        None,
        {},
        {"cpu": "750m", "memory": "4500M"},
    ),
]


@pytest.mark.parametrize(
    "specs, min_available, classes, expected",
    [c[1:] for c in MIN_RESOURCES_CASES],
    ids=[c[0] for c in MIN_RESOURCES_CASES],
)
def test_min_resources_computed_as_upstream(
    specs: dict, min_available: int | None, classes: dict, expected: dict
) -> None:
    run_policy = {"schedulingPolicy": {"minAvailable": min_available}} if min_available is not None else None
    cluster = Cluster(make_job(**specs, run_policy=run_policy), config=PLUGINS, priority_classes=classes)
    assert pod_group_of(cluster.decide())["spec"].get("minResources", {}) == expected


@pytest.mark.parametrize(
    "text, value, binary",
    [
        ("500m", Decimal("0.5"), False),
        ("1Gi", Decimal(2**30), True),
        ("1e3", Decimal(1000), False),
        ("2", Decimal(2), False),
        (3, Decimal(3), False),
        ("1.5k", Decimal(1500), False),
        ("100Ki", Decimal(102400), True),
    ],
)
def test_quantities_parse(text: Any, value: Decimal, binary: bool) -> None:
    assert gang.parse_quantity(text) == (value, binary)


@pytest.mark.parametrize(
    "text", ["", "Ki", "abc", "1 Gi", "1x", "NaN", "Infinity", True, None, float("nan"), float("inf")]
)
def test_non_quantities_are_refused(text: Any) -> None:
    assert gang.parse_quantity(text) is None


@pytest.mark.parametrize(
    "value, binary, text",
    [
        (Decimal("1.5"), False, "1500m"),
        (Decimal(4000), False, "4k"),
        (Decimal(3 * 2**30), True, "3Gi"),
        (Decimal(2**30 + 1), True, "1073741825"),
        (Decimal("0.0000000001"), False, "1n"),
        (Decimal(0), True, "0"),
    ],
)
def test_quantities_format_canonically(value: Decimal, binary: bool, text: str) -> None:
    assert gang.format_quantity(value, binary) == text


# --- waiting for admission ---------------------------------------------------------------------------
def test_volcano_holds_the_pods_back_until_it_admits_the_group() -> None:
    cluster = Cluster(make_job(worker=2, ps=1), config=VOLCANO)
    first = cluster.step()
    assert [type(a) for a in first.actions] == [CreatePodGroup]
    assert first.status["lastReconcileTime"] == ts()
    assert "startTime" not in first.status  # waiting does not start the job's clock (activeDeadlineSeconds)
    assert [c["type"] for c in first.status["conditions"]] == ["Created"]

    # A new group has no phase, then Pending: still nothing but the time of the pass.
    for phase in ("", "Pending"):
        admit(cluster, phase)
        later = cluster.step(at(5))
        assert later.actions == () and later.events == ()
        assert later.status["lastReconcileTime"] == ts(5)
    assert_converged(cluster, at(5))

    admit(cluster, "Inqueue")
    admitted = cluster.step(at(9))
    assert created_pod_names(admitted) == ["test-tfjob-ps-0", "test-tfjob-worker-0", "test-tfjob-worker-1"]
    assert admitted.status["startTime"] == ts(9)
    assert admitted.status["lastReconcileTime"] == ts(5)  # only ever written while waiting
    for action in actions_of(admitted, CreatePod):
        assert action.pod["spec"]["schedulerName"] == "volcano"
        assert action.pod["metadata"]["annotations"] == {
            "scheduling.k8s.io/group-name": "test-tfjob",
            "volcano.sh/task-spec": action.replica_type.lower(),
        }
    assert_converged(cluster, at(9))


@pytest.mark.parametrize("phase", ["Inqueue", "Running", "Unknown", "Completed"])
def test_every_other_volcano_phase_lets_pods_be_created(phase: str) -> None:
    cluster = Cluster(make_job(worker=1), config=VOLCANO)
    cluster.step()
    admit(cluster, phase)
    assert created_pod_names(cluster.decide()) == ["test-tfjob-worker-0"]


def test_scheduler_plugins_creates_the_group_and_the_pods_in_one_pass() -> None:
    cluster = Cluster(make_job(worker=2), config=DecideConfig(gang_scheduler="scheduler-plugins-scheduler"))
    decision = cluster.step()
    assert isinstance(decision.actions[0], CreatePodGroup)  # the group before its pods
    assert created_pod_names(decision) == ["test-tfjob-worker-0", "test-tfjob-worker-1"]
    assert "lastReconcileTime" not in decision.status
    for action in actions_of(decision, CreatePod):
        assert action.pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert action.pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "test-tfjob"
        assert "annotations" not in action.pod["metadata"]
    assert_converged(cluster)


def test_a_non_dynamic_job_waits_again_when_volcano_takes_admission_back() -> None:
    # Upstream: a Running group back to Pending (a pod lost) freezes the job's pod reconciliation.
    cluster = Cluster(make_job(worker=2, restart_policy="OnFailure"), config=VOLCANO)
    cluster.step()
    admit(cluster, "Running")
    cluster.step()
    cluster.run_all()
    cluster.step()
    cluster.remove_pod("test-tfjob-worker-1")
    admit(cluster, "Pending")
    decision = cluster.step(at(3))
    assert decision.actions == () and decision.status["lastReconcileTime"] == ts(3)


# --- pod template (upstream's TestIsCustomSchedulerSet) -----------------------------------------------
@pytest.mark.parametrize(
    "worker_scheduler, ps_scheduler, warned",
    [
        (None, None, False),
        ("volcano", None, False),  # the gang scheduler itself is not "another"
        (None, "default-scheduler", True),  # any type's template counts, for every pod created
        ("my-scheduler", "volcano", True),
    ],
)
def test_another_scheduler_in_a_template_is_kept_with_a_warning(
    worker_scheduler: str | None, ps_scheduler: str | None, warned: bool
) -> None:
    worker = with_resources(2, **({"schedulerName": worker_scheduler} if worker_scheduler else {}))
    ps = with_resources(1, **({"schedulerName": ps_scheduler} if ps_scheduler else {}))
    cluster = Cluster(make_job(worker=worker, ps=ps), config=VOLCANO)
    cluster.step()
    admit(cluster)
    decision = cluster.decide()
    assert event_reasons(decision).count(SCHEDULER_WARNING) == (3 if warned else 0)
    names = {a.pod["metadata"]["name"]: a.pod["spec"]["schedulerName"] for a in actions_of(decision, CreatePod)}
    assert names == {
        "test-tfjob-ps-0": ps_scheduler or "volcano",
        "test-tfjob-worker-0": worker_scheduler or "volcano",
        "test-tfjob-worker-1": worker_scheduler or "volcano",
    }
    if warned:
        [event] = {e for e in decision.events if e.reason == SCHEDULER_WARNING}
        assert (event.type, event.message) == (
            "Warning",
            "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten",
        )


def test_without_gang_scheduling_nothing_of_it_happens() -> None:
    job = make_job(worker=2, run_policy={"schedulingPolicy": {"minAvailable": 5, "queue": "q"}})
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["schedulerName"] = "other"
    stray = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "test-tfjob", "namespace": "default", "uid": "pg"},
        "spec": {},
    }
    cluster = Cluster(job, pod_group=stray)
    decision = cluster.decide()
    assert not [a for a in decision.actions if isinstance(a, CreatePodGroup | UpdatePodGroup | DeletePodGroup)]
    assert SCHEDULER_WARNING not in event_reasons(decision)
    for action in actions_of(decision, CreatePod):
        assert action.pod["spec"]["schedulerName"] == "other"
        assert "annotations" not in action.pod["metadata"]
        assert "scheduling.x-k8s.io/pod-group" not in action.pod["metadata"]["labels"]
    assert "lastReconcileTime" not in decision.status


def test_an_unknown_gang_scheduler_is_refused_before_any_decision() -> None:
    with pytest.raises(ValueError, match="unknown gang scheduler 'volcan'"):
        DecideConfig(gang_scheduler="volcan")


# --- updates ----------------------------------------------------------------------------------------------
def test_a_changed_policy_updates_our_fields_and_keeps_the_rest() -> None:
    job = make_job(worker=2, run_policy={"schedulingPolicy": {"minAvailable": 10, "queue": "q1"}})
    cluster = Cluster(job, config=VOLCANO)
    cluster.step()
    admit(cluster, "Pending")
    cluster.pod_group["spec"]["minTaskMember"] = {"worker": 1}  # set by someone else
    assert_converged(cluster)  # nothing changed: no write (upstream Updates every pass, a no-op)

    # The e2e case of upstream's SDK: lowering minAvailable lets the job run once Volcano admits it.
    cluster.job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] = 1
    decision = cluster.step(at(2))
    [update] = actions_of(decision, UpdatePodGroup)
    assert update.pod_group["spec"] == {
        "minMember": 1,
        "minResources": {},
        "queue": "q1",
        "minTaskMember": {"worker": 1},
    }
    assert update.pod_group["status"] == {"phase": "Pending"}  # Volcano has no status subresource
    assert update.pod_group["metadata"]["resourceVersion"] == "2"
    assert created_pod_names(decision) == []


def test_the_queue_of_an_existing_group_never_changes() -> None:
    cluster = Cluster(make_job(worker=1), config=VOLCANO)
    cluster.step()
    cluster.pod_group["spec"]["queue"] = "assigned"
    cluster.job["spec"]["runPolicy"] = {"schedulingPolicy": {"queue": "other"}}
    assert_converged(cluster)


def test_a_pod_group_controlled_by_another_object_is_not_ours() -> None:
    cluster = Cluster(make_job(worker=1), config=VOLCANO)
    cluster.step()
    foreign = copy.deepcopy(cluster.pod_group)
    foreign["metadata"]["ownerReferences"][0]["uid"] = "an-older-job"
    admit(cluster, "Running")
    decision = decide(cluster.job, [], [], NOW, VOLCANO, pod_group=foreign)
    assert [type(a) for a in decision.actions] == [CreatePodGroup]  # AlreadyExists until GC removed it


# --- deletion -------------------------------------------------------------------------------------------
def running_gang_job(config: DecideConfig = VOLCANO, **job: Any) -> Cluster:
    cluster = Cluster(make_job(**job), config=config)
    cluster.step()
    admit(cluster, "Running")
    cluster.step()
    cluster.run_all()
    cluster.step()
    return cluster


@pytest.mark.parametrize("config", [VOLCANO, PLUGINS], ids=["volcano", "scheduler-plugins"])
def test_a_finished_job_deletes_its_pod_group_once(config: DecideConfig) -> None:
    cluster = running_gang_job(config, worker=1)
    cluster.set_phase("test-tfjob-worker-0", "Succeeded", exit_code=0)
    finished = cluster.step()
    assert (finished.status["conditions"][-1]["type"], finished.status["conditions"][-1]["status"]) == (
        "Succeeded",
        "True",
    )
    [delete] = actions_of(finished, DeletePodGroup)
    assert delete.name == "test-tfjob"
    assert cluster.pod_group is None
    assert_converged(cluster)  # upstream repeats JobTerminated/SuccessfulDeletePodGroup every pass


def test_a_job_finished_earlier_deletes_a_pod_group_it_still_has() -> None:
    cluster = running_gang_job(worker=1)
    cluster.set_phase("test-tfjob-worker-0", "Failed", exit_code=1)
    cluster.step()
    assert cluster.pod_group is None
    # A group re-created meanwhile (say by a controller without this fix) goes on the next pass.
    cluster.pod_group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "test-tfjob",
            "namespace": "default",
            "uid": "pg-2",
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TFJob",
                    "name": "test-tfjob",
                    "uid": "job-uid-1",
                    "controller": True,
                }
            ],
        },
        "spec": {"minMember": 1},
    }
    assert [type(a) for a in cluster.step().actions] == [DeletePodGroup]


def test_suspend_deletes_the_pod_group_and_resume_waits_for_a_new_one() -> None:
    cluster = running_gang_job(worker=2)
    cluster.job["spec"]["runPolicy"] = {"suspend": True}
    suspended = cluster.step(at(10))
    assert len(actions_of(suspended, DeletePodGroup)) == 1
    assert cluster.pod_group is None
    for pod in list(cluster.pods):
        cluster.remove_pod(pod["metadata"]["name"])
    assert_converged(cluster, at(10))

    cluster.job["spec"]["runPolicy"] = {"suspend": False}
    resumed = cluster.step(at(20))
    assert [type(a) for a in resumed.actions] == [CreatePodGroup]  # pods wait for the new group's admission
    assert resumed.status["startTime"] == ts(20)  # upstream resets it on resume, before the gang step


def test_backoff_failure_deletes_the_pod_group() -> None:
    cluster = running_gang_job(worker=1, run_policy={"backoffLimit": 1}, restart_policy="OnFailure")
    cluster.set_phase("test-tfjob-worker-0", "Running", restart_count=1, started_at=ts())
    decision = cluster.step()
    assert len(actions_of(decision, DeletePodGroup)) == 1
    assert decision.status["conditions"][-1]["type"] == "Failed"


def test_waiting_for_admission_does_not_start_the_active_deadline() -> None:
    cluster = Cluster(make_job(worker=1, run_policy={"activeDeadlineSeconds": 5}), config=VOLCANO)
    cluster.step()
    waiting = cluster.step(at(60))
    assert waiting.requeue_after is None and "startTime" not in waiting.status
    assert [c["type"] for c in waiting.status["conditions"]] == ["Created"]


# --- dynamic-aware gangs (beyond upstream) ---------------------------------------------------------------
def min_member(cluster: Cluster) -> int:
    assert cluster.pod_group is not None
    return cluster.pod_group["spec"].get("minMember", 0)


def scale_workers(cluster: Cluster, replicas: int) -> None:
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = replicas


def test_before_a_dynamic_job_runs_its_gang_is_every_replica() -> None:
    cluster = Cluster(make_job(worker=2, ps=1, dynamic=True), config=VOLCANO)
    cluster.step()
    assert min_member(cluster) == 3
    scale_workers(cluster, 4)  # not running yet: upstream's rule, the gang grows
    cluster.step()
    assert min_member(cluster) == 5


@pytest.mark.parametrize("config", [VOLCANO, PLUGINS], ids=["volcano", "scheduler-plugins"])
def test_scaling_a_running_dynamic_job_up_does_not_grow_its_gang(config: DecideConfig) -> None:
    cluster = running_gang_job(config, worker=2, ps=1, dynamic=True)
    assert min_member(cluster) == 3
    scale_workers(cluster, 5)
    decision = cluster.step()
    assert not actions_of(decision, UpdatePodGroup)
    assert created_pod_names(decision) == ["test-tfjob-worker-2", "test-tfjob-worker-3", "test-tfjob-worker-4"]
    assert min_member(cluster) == 3


def test_scaling_a_running_dynamic_job_down_shrinks_its_gang_to_what_remains() -> None:
    cluster = running_gang_job(worker=4, ps=1, dynamic=True)
    scale_workers(cluster, 1)
    decision = cluster.step()
    [update] = actions_of(decision, UpdatePodGroup)
    assert update.pod_group["spec"]["minMember"] == 2
    scale_workers(cluster, 3)  # back up: the gang stays at what training needed at its smallest
    assert not actions_of(cluster.step(), UpdatePodGroup)
    assert min_member(cluster) == 2


def test_a_dynamic_jobs_min_available_is_capped_by_its_replicas() -> None:
    job = make_job(worker=3, dynamic=True, run_policy={"schedulingPolicy": {"minAvailable": 2}})
    cluster = Cluster(job, config=PLUGINS)
    cluster.step()
    assert min_member(cluster) == 2
    scale_workers(cluster, 1)
    cluster.step()
    assert min_member(cluster) == 1  # non-dynamic jobs keep upstream's unsatisfiable minMember


def test_a_failed_over_worker_is_replaced_while_volcano_has_the_group_pending() -> None:
    # Volcano reports Unknown while members still run and Pending once none do (or minMember rose above
    # what runs); a running dynamic job's replacement is created whatever the phase (upstream freezes
    # the whole job on Pending until re-admission).
    cluster = running_gang_job(worker=2, dynamic=True)
    cluster.remove_pod("test-tfjob-worker-1")
    admit(cluster, "Pending")
    assert created_pod_names(cluster.step(at(1))) == []  # the failover recorded first, then the replacement
    decision = cluster.step(at(1))
    assert created_pod_names(decision) == ["test-tfjob-worker-1"]
    assert decision.status["lastReconcileTime"] == ts()  # from the first wait, not this pass: not waiting
    [create] = actions_of(decision, CreatePod)
    assert create.pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "test-tfjob"


def test_a_dynamic_job_that_never_ran_still_waits_for_admission() -> None:
    cluster = Cluster(make_job(worker=2, dynamic=True), config=VOLCANO)
    decision = cluster.step()
    assert created_pod_names(decision) == [] and "lastReconcileTime" in decision.status


def test_a_job_edited_into_an_invalid_one_deletes_its_pod_group() -> None:
    cluster = running_gang_job(worker=1)
    cluster.job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = []
    decision = cluster.step()
    assert decision.status["conditions"][-1]["reason"] == "TFJobFailedValidation"
    assert len(actions_of(decision, DeletePodGroup)) == 1
    assert_converged(cluster)


def test_a_ps_restart_after_a_scale_up_keeps_the_gang_and_replaces_the_ps() -> None:
    # A PS restart replaces the Running condition with Restarting; the gang must not grow to every worker
    # (the scaled-up ones would become all-or-nothing again) nor hold the PS's replacement back.
    cluster = running_gang_job(worker=2, ps=1, dynamic=True, restart_policy="ExitCode")
    scale_workers(cluster, 6)
    cluster.step()
    cluster.run_all()
    cluster.step()
    assert min_member(cluster) == 3
    cluster.set_phase("test-tfjob-ps-0", "Failed", exit_code=137)
    restarting = cluster.step(at(1))
    assert [c["type"] for c in restarting.status["conditions"] if c["status"] == "True"][-1] == "Restarting"
    admit(cluster, "Pending")  # Volcano, with a member gone
    replaced = cluster.step(at(2))
    assert created_pod_names(replaced) == ["test-tfjob-ps-0"]
    assert not actions_of(replaced, UpdatePodGroup) and min_member(cluster) == 3
    cluster.run_all()
    cluster.step(at(3))
    scale_workers(cluster, 8)
    assert created_pod_names(cluster.step(at(4))) == ["test-tfjob-worker-6", "test-tfjob-worker-7"]
    assert min_member(cluster) == 3


def test_a_resumed_job_that_was_restarting_waits_for_its_new_gang() -> None:
    # Restarting stays True across a suspension (only Running is flipped): with no pods left it is no
    # proof the new gang was admitted.
    cluster = running_gang_job(worker=2, ps=1, dynamic=True, restart_policy="ExitCode")
    cluster.set_phase("test-tfjob-ps-0", "Failed", exit_code=137)
    cluster.step(at(1))
    cluster.job["spec"]["runPolicy"] = {"suspend": True}
    cluster.step(at(2))
    assert cluster.pods and all("deletionTimestamp" in p["metadata"] for p in cluster.pods)  # still going
    cluster.job["spec"]["runPolicy"] = {"suspend": False}
    resumed = cluster.step(at(4))
    assert [type(a) for a in resumed.actions] == [CreatePodGroup]
    assert created_pod_names(cluster.step(at(5))) == []  # still Pending: no pods
    assert min_member(cluster) == 3


@pytest.mark.parametrize("config", [VOLCANO, PLUGINS], ids=["volcano", "scheduler-plugins"])
def test_scaling_to_no_workers_and_back_does_not_make_the_scale_up_a_gang(config: DecideConfig) -> None:
    cluster = running_gang_job(config, worker=2, dynamic=True)
    scale_workers(cluster, 0)
    cluster.step()
    assert "minMember" not in cluster.pod_group["spec"]  # 0 is omitted, as upstream writes it
    scale_workers(cluster, 3)
    decision = cluster.step()
    assert not actions_of(decision, UpdatePodGroup) and min_member(cluster) == 0
    assert "test-tfjob-worker-2" in created_pod_names(decision)  # 0 and 1 wait for their old pods to go


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_negative_min_available_is_no_gang_rather_than_a_refused_pod_group(dynamic: bool) -> None:
    # minMember -1 is refused by scheduler-plugins' CRD (minimum 1 since v0.29.7); to both schedulers a
    # gang of at most 0 is no gang, so 0 is what is written (omitted, like upstream's 0).
    job = make_job(worker=2, dynamic=dynamic, run_policy={"schedulingPolicy": {"minAvailable": -1}})
    assert "minMember" not in pod_group_of(Cluster(job, config=PLUGINS).decide())["spec"]


def test_a_foreign_pod_group_under_the_jobs_name_is_a_warning_not_a_silent_wait() -> None:
    cluster = Cluster(make_job(worker=1), config=VOLCANO)
    foreign = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "test-tfjob", "namespace": "default", "uid": "pg-other", "resourceVersion": "1"},
        "spec": {"minMember": 5},
        "status": {"phase": "Running"},
    }
    decision = decide(cluster.job, [], [], NOW, VOLCANO, pod_group=foreign)
    assert decision.actions == ()  # nothing to create (AlreadyExists) or update (not ours), no pods
    [warning] = [e for e in decision.events if e.reason == "FailedCreatePodGroup"]
    assert warning.type == "Warning"
    assert warning.message == (
        "PodGroup default/test-tfjob exists and is not controlled by TFJob test-tfjob; "
        "the job's pods wait for it to be deleted"
    )
    assert "lastReconcileTime" in decision.status


def test_the_status_to_write_when_the_pod_group_write_fails_is_the_waiting_one() -> None:
    first = Cluster(make_job(worker=2), config=PLUGINS).decide()
    assert created_pod_names(first)  # scheduler-plugins does not wait for admission...
    failed = first.gang_failed_status
    assert failed is not None  # ...but a refused PodGroup means no pods and this status instead
    assert [c["type"] for c in failed["conditions"]] == ["Created"]
    assert failed["lastReconcileTime"] == ts() and "startTime" not in failed
    cluster = running_gang_job(PLUGINS, worker=2)
    assert assert_converged(cluster).gang_failed_status is None  # no PodGroup write, nothing to fall back on
