"""Pods and services: names, labels, ownerReferences, pod spec (restart policy mapping, TF_CONFIG),
headless services, and the classification of existing pods. Ports upstream's util_test.go,
job_test.go (labels/annotations, CreateNewService) and the common package's helpers."""

from __future__ import annotations

import pytest

from controller.tfjob import api, pods
from controller.tfjob.defaults import defaulted
from controller.tfjob.tfconfig import general_name

from .builders import container, disruption_condition, make_job, make_pod, replica, ts


def test_owner_reference():
    job = make_job("test-tfjob")
    ref = pods.owner_reference(job)
    assert ref == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "name": "test-tfjob",
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_gen_labels_replaces_slash():
    assert pods.base_labels("test/key") == {
        "training.kubeflow.org/job-name": "test-key",
        "training.kubeflow.org/operator-name": "tfjob-controller",
    }


@pytest.mark.parametrize("replica_type", ["worker", "WORKER", "Worker"])
def test_general_name(replica_type):
    assert general_name("1/2/3/4/5", replica_type, 1) == "1-2-3-4-5-worker-1"


@pytest.mark.parametrize(
    ("replica_policy", "pod_policy"),
    [("ExitCode", "Never"), ("Never", "Never"), ("Always", "Always"), ("OnFailure", "OnFailure")],
)
def test_restart_policy_mapping(replica_policy, pod_policy):
    assert pods.pod_restart_policy(replica_policy) == pod_policy
    job = defaulted(make_job(worker=replica(1, replica_policy)))
    assert pods.build_pod(job, "Worker", 0)["spec"]["restartPolicy"] == pod_policy


def test_pod_copies_template_labels_and_annotations_and_overrides_ours():
    worker = replica(1)
    worker["template"]["metadata"] = {
        "labels": {"label1": "1", api.LABEL_REPLICA_INDEX: "99"},
        "annotations": {"annotation1": "1"},
        "finalizers": ["example.com/keep"],
    }
    job = defaulted(make_job("test-copy-labels-anno", worker=worker))
    pod = pods.build_pod(job, "Worker", 0)
    meta = pod["metadata"]
    assert meta["name"] == "test-copy-labels-anno-worker-0"
    assert meta["namespace"] == "default"
    assert meta["labels"] == {
        "label1": "1",
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/job-name": "test-copy-labels-anno",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/job-role": "master",
    }
    assert meta["annotations"] == {"annotation1": "1"}
    assert meta["finalizers"] == ["example.com/keep"]
    assert meta["ownerReferences"] == [pods.owner_reference(job)]
    # the job is not shared with the pod
    pod["metadata"]["annotations"]["x"] = "y"
    assert "x" not in job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"]


def test_job_role_master_goes_to_chief_pods_when_there_is_one():
    job = defaulted(make_job(chief=1, worker=2))
    assert pods.build_pod(job, "Chief", 0)["metadata"]["labels"][api.LABEL_JOB_ROLE] == "master"
    assert api.LABEL_JOB_ROLE not in pods.build_pod(job, "Worker", 0)["metadata"]["labels"]
    plain = defaulted(make_job(worker=2, ps=1))
    assert pods.build_pod(plain, "Worker", 0)["metadata"]["labels"][api.LABEL_JOB_ROLE] == "master"
    assert api.LABEL_JOB_ROLE not in pods.build_pod(plain, "Worker", 1)["metadata"]["labels"]
    assert api.LABEL_JOB_ROLE not in pods.build_pod(plain, "PS", 0)["metadata"]["labels"]


def test_tf_config_goes_to_the_tensorflow_container_and_replaces_a_user_one():
    containers = [
        container("sidecar"),
        {**container("tensorflow"), "env": [{"name": "A", "value": "1"}, {"name": "TF_CONFIG", "value": "mine"}]},
    ]
    job = defaulted(make_job("j", "ns", worker=replica(2, containers=containers)))
    pod = pods.build_pod(job, "Worker", 1)
    sidecar, tensorflow = pod["spec"]["containers"]
    assert "env" not in sidecar
    assert [e["name"] for e in tensorflow["env"]] == ["A", "TF_CONFIG"]
    assert tensorflow["env"][1]["value"].startswith('{"cluster":{"worker":["j-worker-0.ns.svc:2222"')
    # the job's template is untouched
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][1]["env"][1]["value"] == "mine"


def test_service():
    # CreateNewService case 3 (with a real replica type)
    job = defaulted(make_job("test-tfjob", worker=2, ps=1))
    service = pods.build_service(job, "Worker", 0)
    labels = {
        "training.kubeflow.org/job-name": "test-tfjob",
        "training.kubeflow.org/operator-name": "tfjob-controller",
        "training.kubeflow.org/replica-index": "0",
        "training.kubeflow.org/replica-type": "worker",
    }
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "test-tfjob-worker-0",
            "namespace": "default",
            "labels": labels,
            "ownerReferences": [pods.owner_reference(job)],
        },
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "tfjob-port", "port": 2222}]},
    }


def test_service_ports_follow_the_container_in_order():
    ports = [{"name": "b", "containerPort": 2}, {"name": "a", "containerPort": 1}, {"name": "b", "containerPort": 3}]
    job = defaulted(make_job(worker=replica(1, containers=[container(ports=ports)])))
    assert pods.build_service(job, "Worker", 0)["spec"]["ports"] == [
        {"name": "b", "port": 2},
        {"name": "a", "port": 1},
        {"name": "tfjob-port", "port": 2222},
    ]


def test_type_selector_is_sorted_label_string():
    assert pods.type_selector("mnist", "Worker") == (
        "training.kubeflow.org/job-name=mnist,training.kubeflow.org/operator-name=tfjob-controller,"
        "training.kubeflow.org/replica-type=worker"
    )


# --- reading existing pods ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0),
        ("12", 12),
        ("-1", None),
        ("x", None),
        ("", None),
        ("1.0", None),
        ("١", None),
        (None, None),
        ("9999999999", None),
    ],
)
def test_replica_index_label(value, expected):
    pod = make_pod(make_job(), "Worker", 0)
    if value is None:
        del pod["metadata"]["labels"][api.LABEL_REPLICA_INDEX]
    else:
        pod["metadata"]["labels"][api.LABEL_REPLICA_INDEX] = value
    assert pods.replica_index(pod) == expected


def test_replica_type_label_is_read_verbatim():
    pod = make_pod(make_job(), "Worker", 0)
    assert pods.replica_type_label(pod) == "worker"
    del pod["metadata"]["labels"][api.LABEL_REPLICA_TYPE]
    assert pods.replica_type_label(pod) is None


@pytest.mark.parametrize(
    ("code", "retryable"),
    [(1, False), (2, False), (3, False), (0, False), (127, False), (128, True), (130, True), (137, True), (138, True)],
)
def test_retryable_exit_codes(code, retryable):
    assert pods.is_retryable_exit_code(code) is retryable


def test_exit_code_of_tensorflow_container_only():
    job = make_job()
    assert pods.exit_code(make_pod(job, "Worker", 0, "Failed", exit_code=3)) == 3
    assert pods.exit_code(make_pod(job, "Worker", 0, "Failed", exit_code=3, container_name="dummy")) is None
    assert pods.exit_code_or_missing(make_pod(job, "Worker", 0, "Failed")) == 0xBEEF


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"phase": "Failed", "reason": "Evicted"}, "Evicted"),
        ({"phase": "Failed", "reason": "Preempting"}, "Preempted"),
        ({"phase": "Running", "reason": "NodeLost"}, "NodeLost"),
        ({"phase": "Failed", "reason": "Terminated"}, "NodeLost"),
        ({"phase": "Running", "conditions": [disruption_condition("PreemptionByScheduler")]}, "Preempted"),
        ({"phase": "Running", "conditions": [disruption_condition("EvictionByEvictionAPI")]}, "Evicted"),
        ({"phase": "Failed", "conditions": [disruption_condition("TerminationByKubelet")]}, "Evicted"),
        ({"phase": "Running", "conditions": [disruption_condition("DeletionByTaintManager")]}, "NodeLost"),
        ({"phase": "Failed", "conditions": [disruption_condition("DeletionByPodGC")]}, "NodeLost"),
        ({"phase": "Running", "conditions": [disruption_condition("SomethingNew")]}, "Disrupted"),
        ({"phase": "Running", "conditions": [{**disruption_condition(), "status": "False"}]}, None),
        ({"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "reason": "NodeLost"}]}, "NodeLost"),
        ({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}, None),
        ({"phase": "Unknown"}, "NodeLost"),
        ({"phase": "Failed", "exit_code": 137}, None),
        ({"phase": "Succeeded", "conditions": [disruption_condition()]}, None),
        ({"phase": "Running"}, None),
    ],
)
def test_disruption(kwargs, expected):
    phase = kwargs.pop("phase")
    assert pods.disruption(make_pod(make_job(), "Worker", 0, phase, **kwargs)) == expected


def test_exit_failure_reason():
    job = make_job()
    assert pods.exit_failure_reason(make_pod(job, "Worker", 0, "Failed", exit_code=137)) == "OOMKilled"
    oom = make_pod(job, "Worker", 0, "Failed", exit_code=1, termination_reason="OOMKilled")
    assert pods.exit_failure_reason(oom) == "OOMKilled"
    assert pods.exit_failure_reason(make_pod(job, "Worker", 0, "Failed", exit_code=2)) == "Error"


def test_run_seconds():
    job = make_job()
    running = make_pod(job, "Worker", 0, "Running", started_at=ts(0))
    assert pods.run_seconds(running, pods.parse_time(ts(42))) == 42
    finished = make_pod(job, "Worker", 0, "Failed", exit_code=1, started_at=ts(0), finished_at=ts(7))
    assert pods.run_seconds(finished, pods.parse_time(ts(100))) == 7
    assert pods.run_seconds(make_pod(job, "Worker", 0, "Pending"), 0.0) is None


def test_restart_count_sums_init_and_regular_containers():
    pod = make_pod(make_job(), "Worker", 0, "Running", restart_count=2)
    pod["status"]["initContainerStatuses"] = [{"name": "init", "restartCount": 1}, {"name": "x", "restartCount": "9"}]
    assert pods.restart_count(pod) == 3


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        1,
        "pod",
        [],
        {"metadata": 1, "status": "x"},
        {"status": {"containerStatuses": [1, {"name": "tensorflow", "state": 5}]}},
        {"status": {"conditions": "x", "phase": 3}},
    ],
)
def test_accessors_tolerate_garbage(garbage):
    assert pods.exit_code(garbage) is None
    assert pods.disruption(garbage) in (None, "NodeLost")
    assert pods.replica_index(garbage) is None
    assert pods.controller_uid(garbage) is None
    assert pods.restart_count(garbage) == 0
    assert pods.started_at(garbage) is None
    assert pods.is_terminating(garbage) is False
