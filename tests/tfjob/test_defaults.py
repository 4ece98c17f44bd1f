"""Defaulting: upstream's tensorflow_defaults_test.go cases, plus the robustness we add."""

from __future__ import annotations

import copy

import pytest

from controller.tfjob.defaults import canonical_replica_type, defaulted, set_defaults

from .builders import container, make_job, replica


def worker_job(worker_spec: dict, run_policy: dict | None = None) -> dict:
    return make_job(worker=worker_spec, run_policy=run_policy)


def test_full_spec_keeps_values_and_fills_policies():
    # no replicas, restartPolicy Always, tfjob-port present -> replicas 1, Always, None, ""
    job = defaulted(worker_job(replica(None, "Always")))
    spec = job["spec"]
    worker = spec["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 1
    assert worker["restartPolicy"] == "Always"
    assert worker["template"]["spec"]["containers"][0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert spec["runPolicy"]["cleanPodPolicy"] == "None"
    assert spec["successPolicy"] == ""


def test_missing_restart_policy_becomes_never():
    job = defaulted(worker_job(replica(1)))
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"


def test_empty_restart_policy_becomes_never():
    job = defaulted(worker_job(replica(1, "")))
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"


def test_no_ports_gets_default_port():
    job = defaulted(worker_job(replica(1, containers=[container()])))
    ports = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "tfjob-port", "containerPort": 2222}]


def test_custom_port_is_kept_and_default_port_appended():
    custom = [{"name": "customPort", "containerPort": 1234}]
    job = defaulted(worker_job(replica(1, containers=[container(ports=custom)])))
    ports = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"]
    assert ports == [{"name": "customPort", "containerPort": 1234}, {"name": "tfjob-port", "containerPort": 2222}]


def test_clean_pod_policy_all_is_kept():
    job = defaulted(worker_job(replica(1), run_policy={"cleanPodPolicy": "All"}))
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "All"


def test_empty_clean_pod_policy_means_none():
    # upstream leaves "" alone and then treats it like All; we treat "undefined" as unset
    job = defaulted(worker_job(replica(1), run_policy={"cleanPodPolicy": ""}))
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "None"


@pytest.mark.parametrize(
    ("key", "canonical"),
    [
        ("WORKER", "Worker"),
        ("worker", "Worker"),
        ("ps", "PS"),
        ("Ps", "PS"),
        ("chief", "Chief"),
        ("MASTER", "Master"),
        ("evaluator", "Evaluator"),
        ("Worker", "Worker"),
    ],
)
def test_type_names_are_normalised(key, canonical):
    job = make_job()
    job["spec"]["tfReplicaSpecs"] = {key: replica(2)}
    assert list(defaulted(job)["spec"]["tfReplicaSpecs"]) == [canonical]
    assert canonical_replica_type(key) == canonical


def test_unknown_type_is_left_alone():
    assert canonical_replica_type("Launcher") is None
    job = make_job()
    job["spec"]["tfReplicaSpecs"] = {"Launcher": replica(1)}
    assert list(defaulted(job)["spec"]["tfReplicaSpecs"]) == ["Launcher"]


def test_port_goes_to_the_tensorflow_container_not_the_first():
    containers = [container("sidecar", ports=[]), container("tensorflow")]
    job = defaulted(worker_job(replica(1, containers=containers)))
    got = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert got[0]["ports"] == []
    assert got[1]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]


def test_without_tensorflow_container_port_goes_to_container_zero():
    job = defaulted(worker_job(replica(1, containers=[container("main"), container("other")])))
    got = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    assert got[0]["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert "ports" not in got[1]


def test_zero_containers_does_not_crash():
    # upstream panics here (quirk Q14)
    job = defaulted(worker_job(replica(3, containers=[])))
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 3


def test_defaulted_does_not_mutate_its_argument():
    job = make_job(worker=2, ps=1)
    job["spec"]["tfReplicaSpecs"] = {"worker": replica(None, containers=[container()])}
    before = copy.deepcopy(job)
    defaulted(job)
    assert job == before


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        3,
        "x",
        [],
        {"spec": None},
        {"spec": {"tfReplicaSpecs": [1]}},
        {"spec": {"runPolicy": 7}},
        {"spec": {"tfReplicaSpecs": {"Worker": None}}},
        {"spec": {"tfReplicaSpecs": {"Worker": {"template": 5}}}},
        {"spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [5]}}}}}},
        {"spec": {"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [{"ports": 5}]}}}}}},
    ],
)
def test_malformed_input_never_raises(garbage):
    set_defaults(copy.deepcopy(garbage))
