"""TF_CONFIG, byte for byte: upstream's pod_test.go "Test ClusterSpec" and "Test IsDistributed",
tensorflow_test.go's sparse conversion, the reference's dense example, and our sparse form (Q8)."""

from __future__ import annotations

import json

import pytest

from controller.tfjob import tfconfig
from controller.tfjob.defaults import defaulted
from controller.tfjob.pods import build_pod

from .builders import container, make_job, replica


def tf_config_env(pod: dict) -> list[str]:
    container_spec = next(c for c in pod["spec"]["containers"] if c["name"] == "tensorflow")
    return [e["value"] for e in container_spec.get("env", []) if e["name"] == "TF_CONFIG"]


@pytest.mark.parametrize(
    ("kwargs", "namespace", "domain", "expected"),
    [
        ({"worker": 1}, "ns0", "", None),
        ({"worker": 1}, "ns1", "tf.training.com", None),
        (
            {"worker": 1, "ps": 1},
            "ns2",
            "tf.training.org",
            '{"cluster":{"ps":["test-tfjob-ps-0.ns2.svc.tf.training.org:2222"],'
            '"worker":["test-tfjob-worker-0.ns2.svc.tf.training.org:2222"]},'
            '"task":{"type":"worker","index":0},"environment":"cloud"}',
        ),
        (
            {"worker": 1, "ps": 1, "evaluator": 1},
            "ns3",
            "tf.training.io",
            '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc.tf.training.io:2222"],'
            '"ps":["test-tfjob-ps-0.ns3.svc.tf.training.io:2222"],'
            '"worker":["test-tfjob-worker-0.ns3.svc.tf.training.io:2222"]},'
            '"task":{"type":"worker","index":0},"environment":"cloud"}',
        ),
        (
            {"worker": 1, "ps": 1, "evaluator": 1},
            "ns3",
            "",
            '{"cluster":{"evaluator":["test-tfjob-evaluator-0.ns3.svc:2222"],'
            '"ps":["test-tfjob-ps-0.ns3.svc:2222"],"worker":["test-tfjob-worker-0.ns3.svc:2222"]},'
            '"task":{"type":"worker","index":0},"environment":"cloud"}',
        ),
    ],
)
def test_upstream_cluster_spec_cases(kwargs, namespace, domain, expected):
    job = defaulted(make_job(namespace=namespace, **kwargs))
    pod = build_pod(job, "Worker", 0, cluster_domain=domain)
    assert tf_config_env(pod) == ([] if expected is None else [expected])
    assert tfconfig.tf_config(job, "Worker", 0, domain) == expected


@pytest.mark.parametrize(
    ("kwargs", "distributed"),
    [
        ({"worker": 1}, False),
        ({"worker": 1, "ps": 1}, True),
        ({"ps": 1}, False),
        ({"chief": 1, "worker": 1}, True),
        ({"worker": 0}, True),
        ({"worker": 3}, True),
    ],
)
def test_is_distributed(kwargs, distributed):
    assert tfconfig.is_distributed(defaulted(make_job(**kwargs))) is distributed


def test_replicas_unset_counts_as_one():
    job = make_job(worker=replica(None))
    assert tfconfig.is_distributed(job) is False


MNIST = make_job("mnist", "kubeflow", chief=1, evaluator=1, ps=2, worker=3)
MNIST_CLUSTER = (
    '{"chief":["mnist-chief-0.kubeflow.svc:2222"],"evaluator":["mnist-evaluator-0.kubeflow.svc:2222"],'
    '"ps":["mnist-ps-0.kubeflow.svc:2222","mnist-ps-1.kubeflow.svc:2222"],'
    '"worker":["mnist-worker-0.kubeflow.svc:2222","mnist-worker-1.kubeflow.svc:2222",'
    '"mnist-worker-2.kubeflow.svc:2222"]}'
)


def test_dense_reference_example():
    job = defaulted(MNIST)
    assert tfconfig.tf_config(job, "Worker", 1) == (
        '{"cluster":' + MNIST_CLUSTER + ',"task":{"type":"worker","index":1},"environment":"cloud"}'
    )
    assert tfconfig.tf_config(job, "Evaluator", 0) == (
        '{"cluster":' + MNIST_CLUSTER + ',"task":{"type":"evaluator","index":0},"environment":"cloud"}'
    )


def test_dense_with_cluster_domain():
    job = defaulted(MNIST)
    value = tfconfig.tf_config(job, "PS", 0, "cluster.local")
    assert json.loads(value)["cluster"]["ps"][0] == "mnist-ps-0.kubeflow.svc.cluster.local:2222"


def test_dense_master_and_zero_replicas():
    # master + 0 workers is a single replica: not distributed, no TF_CONFIG
    assert tfconfig.tf_config(defaulted(make_job("j", "ns", master=1, worker=0)), "Master", 0) is None
    job = defaulted(make_job("j", "ns", master=1, ps=1, worker=0))
    assert tfconfig.tf_config(job, "Master", 0) == (
        '{"cluster":{"master":["j-master-0.ns.svc:2222"],"ps":["j-ps-0.ns.svc:2222"],"worker":[]},'
        '"task":{"type":"master","index":0},"environment":"cloud"}'
    )


def test_port_comes_from_tfjob_port_of_each_type():
    ps = replica(1, containers=[container(ports=[{"name": "tfjob-port", "containerPort": 3333}])])
    worker = replica(1, containers=[container(ports=[{"name": "grpc", "containerPort": 4444}])])
    job = defaulted(make_job("j", "ns", ps=ps, worker=worker))
    assert tfconfig.tf_config(job, "Worker", 0) == (
        '{"cluster":{"ps":["j-ps-0.ns.svc:3333"],"worker":["j-worker-0.ns.svc:2222"]},'
        '"task":{"type":"worker","index":0},"environment":"cloud"}'
    )


# --- sparse (enableDynamicWorker) -------------------------------------------------------------
def sparse(job: dict, replica_type: str, index: int) -> str:
    value = tfconfig.tf_config(defaulted(job), replica_type, index)
    assert value is not None
    return value


def test_sparse_worker_gets_own_address_and_all_ps():
    # tensorflow_test.go's conversion, worker 0: {Worker: {0: worker-0}, PS: [ps-0, ps-1]}
    job = make_job(worker=2, ps=2, dynamic=True)
    assert sparse(job, "Worker", 0) == (
        '{"cluster":{"worker":{"0":"test-tfjob-worker-0.default.svc:2222"},'
        '"ps":["test-tfjob-ps-0.default.svc:2222","test-tfjob-ps-1.default.svc:2222"]},'
        '"task":{"type":"worker","index":0}}'
    )


def test_sparse_reference_worker_example():
    job = make_job("mnist", "kubeflow", worker=3, ps=2, dynamic=True)
    assert sparse(job, "Worker", 1) == (
        '{"cluster":{"worker":{"1":"mnist-worker-1.kubeflow.svc:2222"},'
        '"ps":["mnist-ps-0.kubeflow.svc:2222","mnist-ps-1.kubeflow.svc:2222"]},"task":{"type":"worker","index":1}}'
    )


def test_sparse_ps_gets_the_full_ps_list():
    # upstream gives PS i only its own address (a one-element list indexed by i: unusable for i>0)
    job = make_job("mnist", "kubeflow", worker=3, ps=2, dynamic=True)
    assert sparse(job, "PS", 1) == (
        '{"cluster":{"worker":{},"ps":["mnist-ps-0.kubeflow.svc:2222","mnist-ps-1.kubeflow.svc:2222"]},'
        '"task":{"type":"ps","index":1}}'
    )


def test_sparse_chief_gets_own_address_and_ps():
    # upstream writes {"cluster":{"worker":{},"ps":[]},...} here -- TensorFlow refuses to start
    job = make_job("mnist", "kubeflow", chief=1, worker=2, ps=1, dynamic=True)
    assert sparse(job, "Chief", 0) == (
        '{"cluster":{"worker":{},"ps":["mnist-ps-0.kubeflow.svc:2222"],'
        '"chief":{"0":"mnist-chief-0.kubeflow.svc:2222"}},"task":{"type":"chief","index":0}}'
    )


def test_sparse_master_and_evaluator():
    job = make_job("j", "ns", master=1, worker=1, evaluator=2, dynamic=True)
    assert sparse(job, "Master", 0) == (
        '{"cluster":{"worker":{},"ps":[],"master":{"0":"j-master-0.ns.svc:2222"}},"task":{"type":"master","index":0}}'
    )
    assert sparse(job, "Evaluator", 1) == (
        '{"cluster":{"worker":{},"ps":[],"evaluator":{"1":"j-evaluator-1.ns.svc:2222"}},'
        '"task":{"type":"evaluator","index":1}}'
    )


def test_sparse_without_ps_is_an_empty_list_not_null():
    job = make_job("x", "ns", worker=2, dynamic=True)
    assert sparse(job, "Worker", 0) == (
        '{"cluster":{"worker":{"0":"x-worker-0.ns.svc:2222"},"ps":[]},"task":{"type":"worker","index":0}}'
    )


# Distribution of a dynamic job is a property of the job, not of today's replica counts: a pod created
# while the job has one replica in total (a PS re-created while Worker replicas are 0, a lone worker
# before a scale-up) gets its sparse TF_CONFIG like every other. Non-dynamic jobs keep upstream's rule.
@pytest.mark.parametrize(
    ("kwargs", "dynamic", "distributed"),
    [
        ({"worker": 1}, True, True),
        ({"worker": 1}, False, False),
        ({"worker": 1}, None, False),
        ({"ps": 1, "worker": 0}, True, True),
        ({"ps": 1, "worker": 0}, False, False),
        ({"chief": 1, "worker": 0}, True, True),
        ({"chief": 1, "worker": 0}, False, False),
        ({"worker": 0}, True, True),
        ({"worker": 0}, False, True),
        ({"ps": 1, "worker": 2}, True, True),
        ({"ps": 1, "worker": 2}, False, True),
    ],
)
def test_a_dynamic_job_is_always_distributed(kwargs, dynamic, distributed):
    job = defaulted(make_job("x", "ns", dynamic=dynamic, **kwargs))
    assert tfconfig.is_distributed(job) is distributed
    for replica_type, spec in job["spec"]["tfReplicaSpecs"].items():
        for index in range(spec["replicas"]):
            value = tfconfig.tf_config(job, replica_type, index)
            if not distributed:
                assert value is None
            elif dynamic:
                assert value == tfconfig.sparse_tf_config(job, replica_type, index)
            else:
                assert value == tfconfig.dense_tf_config(job, replica_type, index)


def test_the_ps_of_a_dynamic_job_scaled_to_zero_workers_gets_its_sparse_tf_config():
    job = defaulted(make_job("x", "ns", ps=1, worker=0, dynamic=True))
    pod = build_pod(job, "PS", 0)
    assert tf_config_env(pod) == [
        '{"cluster":{"worker":{},"ps":["x-ps-0.ns.svc:2222"]},"task":{"type":"ps","index":0}}'
    ]


def test_a_lone_dynamic_worker_gets_its_sparse_tf_config():
    assert tfconfig.tf_config(defaulted(make_job("x", "ns", worker=1, dynamic=True)), "Worker", 0) == (
        '{"cluster":{"worker":{"0":"x-worker-0.ns.svc:2222"},"ps":[]},"task":{"type":"worker","index":0}}'
    )


def test_go_html_escaping():
    job = defaulted(make_job("j", "ns", worker=2))
    assert "\\u003c" in tfconfig.tf_config(job, "Worker", 0, "a<b")


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"worker": 3, "ps": 2, "chief": 1, "evaluator": 2},
        {"worker": 2},
        {"master": 1, "worker": 0, "ps": 1},
        {"worker": 1, "evaluator": 1},
    ],
)
def test_cached_builder_matches_the_reference_forms(dynamic, kwargs):
    # TFConfigs serialises the shared part once; it must produce exactly the dict-based bytes
    job = defaulted(make_job("j", "ns", dynamic=dynamic, **kwargs))
    configs = tfconfig.TFConfigs(job, "cluster.local")
    reference = tfconfig.sparse_tf_config if dynamic else tfconfig.dense_tf_config
    for replica_type, spec in job["spec"]["tfReplicaSpecs"].items():
        for index in range(spec["replicas"]):
            assert configs.for_task(replica_type, index) == reference(job, replica_type, index, "cluster.local")
