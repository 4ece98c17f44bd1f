"""The TFJob CRD: the committed YAML is the generator's output, the schema is structural and a
superset of upstream's for valid jobs, and its rules reject exactly the invalid TFJobs with the
messages users will see from ``kubectl apply``.

Objects are validated by the simulator's structural-schema validator (``tfjob_sim.schema``,
which evaluates the CEL rules with ``tfjob_sim.cel`` on RE2, as cel-go does), so the tests pin
the exact causes a user sees from ``kubectl apply``.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.tfjob import crd as crd_module
from controller.tfjob.crd import (
    QUANTITY_PATTERN,
    SchemaGenerationError,
    build_crd,
    pod_template_schema,
    to_yaml,
)
from tfjob_sim.cel import CelRule
from tfjob_sim.jsonpath import evaluate as jsonpath_evaluate
from tfjob_sim.jsonpath import format_cell
from tfjob_sim.schema import StructuralSchema, validate_crd

REPO = Path(__file__).resolve().parents[2]
CRD_PATH = REPO / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"


@functools.cache
def _schema() -> dict[str, Any]:
    # Built once so compiled rules can be cached per schema node; tests must not mutate it.
    return build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


# --------------------------------------------------------------------------------------------
# Validation as the simulated apiserver does it (tfjob_sim.schema): the messages below are the
# ones `kubectl apply` prints.

_NOT_CHECKED = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid"


@functools.cache
def _structural() -> StructuralSchema:
    return StructuralSchema(_schema())


def validate(obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """Every cause as ``field: message`` (empty when the object is valid)."""
    return [f"{cause['field']}: {cause['message']}" for cause in _structural().validate(obj, old)]


# --------------------------------------------------------------------------------------------
# Fixtures: TFJobs as users write them (shapes of upstream's examples).


def _replica(replicas: int | None = 1, image: str = "kubeflow/tf-dist-mnist-test:1.0", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "template": {"spec": {"containers": [{"name": "tensorflow", "image": image}]}},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    spec.update(extra)
    return spec


def tfjob(name: str = "dist-mnist", **replica_specs: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"tfReplicaSpecs": replica_specs or {"PS": _replica(2), "Worker": _replica(4)}},
    }


MNIST_WITH_SUMMARIES = yaml.safe_load(
    """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist, namespace: kubeflow}
spec:
  runPolicy: {cleanPodPolicy: None}
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        metadata:
          annotations: {scheduling.k8s.io/group-name: mnist}
          labels: {team: ml}
        spec:
          containers:
          - name: tensorflow
            image: kubeflow/tf-mnist-with-summaries:latest
            command: [python, /var/tf_mnist/mnist_with_summaries.py, --log_dir=/train/logs]
            ports: [{name: tfjob-port, containerPort: 2222}]
            resources:
              limits: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 1}
              requests: {cpu: 500m, memory: 1.5Gi}
            readinessProbe: {httpGet: {path: /healthz, port: tfjob-port}, periodSeconds: 5}
            livenessProbe: {tcpSocket: {port: 2222}}
            volumeMounts: [{mountPath: /train, name: training}]
            env:
            - name: MY_CPU
              valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}
          - name: sidecar
            image: busybox:1.36
          terminationGracePeriodSeconds: 3000000000
          securityContext: {runAsUser: 4294967296, fsGroup: 2000}
          volumes:
          - name: training
            persistentVolumeClaim: {claimName: tfevent-volume}
          - name: scratch
            emptyDir: {sizeLimit: 10Gi}
"""
)

DYNAMIC_FULL_RUN_POLICY = {
    **tfjob("dynamic", Chief=_replica(1), Worker=_replica(3, restartPolicy="ExitCode")),
}
DYNAMIC_FULL_RUN_POLICY["spec"].update(
    {
        "enableDynamicWorker": True,
        "successPolicy": "AllWorkers",
        "runPolicy": {
            "activeDeadlineSeconds": 0,
            "backoffLimit": 3,
            "cleanPodPolicy": "Running",
            "ttlSecondsAfterFinished": 600,
            "suspend": False,
            "managedBy": "kubeflow.org/training-operator",
            "schedulingPolicy": {
                "minAvailable": 4,
                "queue": "research",
                "minResources": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 2},
                "priorityClass": "high",
                "scheduleTimeoutSeconds": 60,
            },
        },
    }
)


def _with(job: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of ``job`` with the dotted ``path`` set to ``value`` (``None`` deletes)."""
    job = copy.deepcopy(job)
    *parents, last = path.split(".")
    node: Any = job
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if value is None:
        del node[int(last) if isinstance(node, list) else last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return job


VALID_TFJOBS = {
    "mnist PS+Worker": tfjob(),
    "chief+worker+evaluator": tfjob("cwe", Chief=_replica(1), Worker=_replica(2), Evaluator=_replica(1)),
    "master+ps+worker": tfjob("mpw", Master=_replica(1), PS=_replica(1), Worker=_replica(2)),
    "lowercase keys": tfjob("lower", worker=_replica(2), ps=_replica(1), chief=_replica(1)),
    "uppercase keys": tfjob("upper", WORKER=_replica(2), PS=_replica(1)),
    "replicas omitted": tfjob("defaults", Worker=_replica(None)),
    "zero workers with a chief": tfjob("zero", Chief=_replica(1), Worker=_replica(0)),
    "mnist with summaries (probes, quantities, int64s)": MNIST_WITH_SUMMARIES,
    "dynamic worker, full runPolicy": DYNAMIC_FULL_RUN_POLICY,
    "success policy empty string": {**tfjob("sp"), "spec": {**tfjob("sp")["spec"], "successPolicy": ""}},
    "63-character name without pods": tfjob("a" * 63, Worker=_replica(0)),
    "name as long as its pod names allow": tfjob("a" * 54, PS=_replica(2), Worker=_replica(10)),
    "dynamic job with workersToDelete": _with(DYNAMIC_FULL_RUN_POLICY, "spec.workersToDelete", [3, 1]),
    "static job with an empty workersToDelete": _with(tfjob(), "spec.workersToDelete", []),
}


@pytest.mark.parametrize("name", list(VALID_TFJOBS))
def test_valid_tfjobs_are_accepted(name: str) -> None:
    assert validate(VALID_TFJOBS[name]) == []


_W = "spec.tfReplicaSpecs.Worker"
_W_CONTAINERS = f"{_W}.template.spec.containers"
_BAD_NAME = (
    '<nil>: Invalid value: "object": metadata.name must be a DNS-1035 label: at most 63 lower-case letters,'
    " digits or '-', starting with a letter and ending with a letter or digit"
)
_TF_CONTAINER_MESSAGE = "template.spec.containers must include a container named tensorflow"

INVALID_TFJOBS = {
    "no tensorflow container": (
        _with(tfjob(), f"{_W_CONTAINERS}.0.name", "trainer"),
        f'spec.tfReplicaSpecs[Worker]: Invalid value: "object": {_TF_CONTAINER_MESSAGE}',
    ),
    "no containers at all": (
        _with(tfjob(), f"{_W_CONTAINERS}", []),
        f'spec.tfReplicaSpecs[Worker]: Invalid value: "object": {_TF_CONTAINER_MESSAGE}',
    ),
    "no template": (
        _with(tfjob(), f"{_W}.template", None),
        f'spec.tfReplicaSpecs[Worker]: Invalid value: "object": {_TF_CONTAINER_MESSAGE}',
    ),
    "empty image": (
        _with(tfjob(), f"{_W_CONTAINERS}.0.image", ""),
        'spec.tfReplicaSpecs[Worker].template.spec.containers: Invalid value: "array":'
        " every container must have a non-empty image",
    ),
    "missing image on a sidecar": (
        _with(tfjob(), f"{_W_CONTAINERS}", [{"name": "tensorflow", "image": "tf:2"}, {"name": "side"}]),
        'spec.tfReplicaSpecs[Worker].template.spec.containers: Invalid value: "array":'
        " every container must have a non-empty image",
    ),
    "Chief and Master together": (
        tfjob("cm", Chief=_replica(1), Master=_replica(1), Worker=_replica(1)),
        'spec.tfReplicaSpecs: Invalid value: "object": must not have more than 1 Chief or Master role',
    ),
    "chief and MASTER together (any case)": (
        tfjob("cm", chief=_replica(1), MASTER=_replica(1)),
        'spec.tfReplicaSpecs: Invalid value: "object": must not have more than 1 Chief or Master role',
    ),
    "Worker and worker together": (
        tfjob("ww", Worker=_replica(1), worker=_replica(1)),
        'spec.tfReplicaSpecs: Invalid value: "object": a replica type must not appear twice in different letter case',
    ),
    "unknown replica type": (
        tfjob("unknown", Worker=_replica(1), Launcher=_replica(1)),
        'spec.tfReplicaSpecs: Invalid value: "object":'
        " replica types must be Chief, Master, PS, Worker or Evaluator (any letter case)",
    ),
    "replica type with a suffix": (
        tfjob("suffix", Workers=_replica(1)),
        'spec.tfReplicaSpecs: Invalid value: "object":'
        " replica types must be Chief, Master, PS, Worker or Evaluator (any letter case)",
    ),
    "negative replicas": (
        _with(tfjob(), f"{_W}.replicas", -1),
        "spec.tfReplicaSpecs.Worker.replicas: Invalid value: -1:"
        " spec.tfReplicaSpecs.Worker.replicas in body should be greater than or equal to 0",
    ),
    "bad restartPolicy": (
        _with(tfjob(), f"{_W}.restartPolicy", "Sometimes"),
        'spec.tfReplicaSpecs.Worker.restartPolicy: Unsupported value: "Sometimes":'
        ' supported values: "Always", "OnFailure", "Never", "ExitCode"',
    ),
    "bad cleanPodPolicy": (
        _with(tfjob(), "spec.runPolicy.cleanPodPolicy", "Some"),
        'spec.runPolicy.cleanPodPolicy: Unsupported value: "Some": supported values: "All", "Running", "None"',
    ),
    "bad successPolicy": (
        _with(tfjob(), "spec.successPolicy", "AnyWorker"),
        'spec.successPolicy: Unsupported value: "AnyWorker": supported values: "", "AllWorkers"',
    ),
    "negative backoffLimit": (
        _with(tfjob(), "spec.runPolicy.backoffLimit", -1),
        "spec.runPolicy.backoffLimit: Invalid value: -1: spec.runPolicy.backoffLimit in body should be greater"
        " than or equal to 0",
    ),
    "negative ttlSecondsAfterFinished": (
        _with(tfjob(), "spec.runPolicy.ttlSecondsAfterFinished", -5),
        "spec.runPolicy.ttlSecondsAfterFinished: Invalid value: -5: spec.runPolicy.ttlSecondsAfterFinished in body"
        " should be greater than or equal to 0",
    ),
    "negative activeDeadlineSeconds": (
        _with(tfjob(), "spec.runPolicy.activeDeadlineSeconds", -1),
        "spec.runPolicy.activeDeadlineSeconds: Invalid value: -1: spec.runPolicy.activeDeadlineSeconds in body"
        " should be greater than or equal to 0",
    ),
    "unknown managedBy": (
        _with(tfjob(), "spec.runPolicy.managedBy", "someone-else"),
        'spec.runPolicy.managedBy: Unsupported value: "someone-else":'
        ' supported values: "kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"',
    ),
    "name starting with a digit": (tfjob("1mnist"), _BAD_NAME),
    "name with a dot": (tfjob("mnist.v2"), _BAD_NAME),
    "name with upper case": (tfjob("Mnist"), _BAD_NAME),
    "name ending with a dash": (tfjob("mnist-"), _BAD_NAME),
    "64-character name": (tfjob("a" * 64), _BAD_NAME),
    "name too long for its pod names": (
        tfjob("a" * 55, Worker=_replica(1)),
        '<nil>: Invalid value: "object": metadata.name must be at most 54 characters for this job: the name of each'
        " of its pods and services, <name>-<replica type>-<index>, must be a DNS-1035 label of at most 63 characters",
    ),
    "name too long for the largest index": (
        tfjob("a" * 53, PS=_replica(1), Worker=_replica(10000)),
        '<nil>: Invalid value: "object": metadata.name must be at most 51 characters for this job',
    ),
    "quantity that is not a quantity": (
        _with(tfjob(), f"{_W_CONTAINERS}.0.resources", {"limits": {"cpu": "two"}}),
        'spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu: Invalid value: "two":'
        " spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.cpu in body should match '^(",
    ),
    "container without a name": (
        _with(tfjob(), f"{_W_CONTAINERS}", [{"name": "tensorflow", "image": "tf:2"}, {"image": "side:1"}]),
        "spec.tfReplicaSpecs.Worker.template.spec.containers[1].name: Required value",
    ),
    "missing tfReplicaSpecs": (_with(tfjob(), "spec.tfReplicaSpecs", None), "spec.tfReplicaSpecs: Required value"),
    "missing spec": (_with(tfjob(), "spec", None), "spec: Required value"),
    "workersToDelete on a static job": (
        _with(tfjob(), "spec.workersToDelete", [1]),
        'spec: Invalid value: "object": spec.workersToDelete needs spec.enableDynamicWorker: true (a job without'
        " dynamic workers loses its highest indices on a scale-down, as upstream)",
    ),
    "workersToDelete naming an index twice": (
        _with(DYNAMIC_FULL_RUN_POLICY, "spec.workersToDelete", [1, 1]),
        "spec.workersToDelete[1]: Duplicate value: 1",
    ),
    "workersToDelete with a negative index": (
        _with(DYNAMIC_FULL_RUN_POLICY, "spec.workersToDelete", [-1]),
        "spec.workersToDelete[0]: Invalid value: -1: spec.workersToDelete[0] in body should be greater than or equal"
        " to 0",
    ),
    "workersToDelete with a pod name": (
        _with(DYNAMIC_FULL_RUN_POLICY, "spec.workersToDelete", ["dynamic-worker-1"]),
        'spec.workersToDelete[0]: Invalid value: "string": spec.workersToDelete[0] in body must be of type integer',
    ),
    "replicas as a string": (
        _with(tfjob(), f"{_W}.replicas", "3"),
        'spec.tfReplicaSpecs.Worker.replicas: Invalid value: "string":'
        ' spec.tfReplicaSpecs.Worker.replicas in body must be of type integer: "string"',
    ),
}


@pytest.mark.parametrize("name", list(INVALID_TFJOBS))
def test_invalid_tfjobs_are_rejected_with_a_clear_message(name: str) -> None:
    job, expected = INVALID_TFJOBS[name]
    errors = validate(job)
    assert errors and errors[0].startswith(expected), errors


def test_each_invalid_job_reports_only_its_own_problem() -> None:
    # A rule that fires on valid parts of the object would drown the real message. (After a schema
    # error the server skips the CEL rules and says so in one extra cause.)
    for name, (job, _expected) in INVALID_TFJOBS.items():
        errors = [error for error in validate(job) if not error.startswith(_NOT_CHECKED)]
        assert len(errors) == 1, (name, errors)


def test_a_scale_up_that_would_make_a_generated_name_too_long_is_refused() -> None:
    old = tfjob("a" * 54, Worker=_replica(10))
    assert validate(_with(old, f"{_W}.replicas", 11), old)[0].endswith(
        "must be at most 53 characters for this job"
        ": the name of each of its pods and services,"
        " <name>-<replica type>-<index>, must be a"
        " DNS-1035 label of at most 63 characters"
    )


def test_a_job_stored_before_the_generated_names_rule_may_change_as_long_as_its_names_do_not_grow() -> None:
    # A root rule is never ratcheted; without its tolerance such a job could not even get a status.
    old = tfjob("a" * 56, Worker=_replica(3))
    assert validate(old)  # rejected on create
    assert validate({**old, "status": {"conditions": []}}, old) == []
    assert validate(_with(old, f"{_W}.replicas", 1), old) == []  # scaling down
    assert validate(_with(old, f"{_W}.replicas", 10), old) == []  # worker-9: no longer than worker-2
    assert validate(_with(old, f"{_W}.replicas", 11), old)  # worker-10: longer, refused
    assert validate(_with(old, "spec.tfReplicaSpecs.Evaluator", _replica(1)), old)  # a longer type: refused
    scaled_to_zero = _with(old, f"{_W}.replicas", 0)
    assert validate(_with(scaled_to_zero, f"{_W}.replicas", 1), scaled_to_zero)  # no names before: refused


def test_queue_is_immutable_but_other_fields_may_change() -> None:
    old = DYNAMIC_FULL_RUN_POLICY
    new_queue = _with(old, "spec.runPolicy.schedulingPolicy.queue", "production")
    assert validate(new_queue, old=old) == [
        'spec.runPolicy.schedulingPolicy.queue: Invalid value: "string": spec.runPolicy.schedulingPolicy.queue is immutable'
    ]
    scaled = _with(old, "spec.tfReplicaSpecs.Worker.replicas", 10)
    assert validate(scaled, old=old) == []


def test_managed_by_is_immutable() -> None:
    old = DYNAMIC_FULL_RUN_POLICY
    moved = _with(old, "spec.runPolicy.managedBy", "kueue.x-k8s.io/multikueue")
    assert validate(moved, old=old) == [
        'spec.runPolicy.managedBy: Invalid value: "string": spec.runPolicy.managedBy is immutable'
    ]
    # Transition rules need an old value: setting it on create is fine.
    assert validate(old) == []


def test_known_replica_type_rule_matches_whole_keys_only() -> None:
    # RE2 and Python's re differ on '$' before a trailing newline; the rule must reject it.
    node = _schema()["properties"]["spec"]["properties"]["tfReplicaSpecs"]
    program = CelRule(node["x-kubernetes-validations"][0]["rule"], node)
    for key, accepted in [("Worker", True), ("eVaLuAtOr", True), ("Worker\n", False), ("xps", False), ("", False)]:
        assert program.evaluate({key: {}}) is accepted, key


def test_every_rule_compiles_against_its_schema_node() -> None:
    # Field names in rules are checked against the schema (a typo is a CRD-creation error on a real
    # server); every rule also needs a message, since that is what users see.
    rules = 0
    for path, node in _walk(_schema()):
        for rule in node.get("x-kubernetes-validations", []):
            CelRule(rule["rule"], node, is_root=not path)
            if "messageExpression" in rule:
                CelRule(rule["messageExpression"], node, is_root=not path)
            assert set(rule) - {"messageExpression", "optionalOldSelf"} == {"rule", "message"} and rule["message"], (
                path,
                rule,
            )
            rules += 1
    assert rules == 10


# --------------------------------------------------------------------------------------------
# The CRD document itself.


def test_committed_yaml_is_the_generators_output() -> None:
    assert CRD_PATH.read_text() == to_yaml(build_crd()), (
        "manifests/crd/kubeflow.org_tfjobs.yaml is stale: run"
        " `python -m controller.tfjob.crd > manifests/crd/kubeflow.org_tfjobs.yaml`"
    )


@pytest.mark.parametrize(
    "command", [["-m", "controller.tfjob.crd"], ["-m", "controller", "crd"]], ids=["module", "cli crd"]
)
def test_entry_points_print_the_committed_yaml(command: list[str]) -> None:
    result = subprocess.run([sys.executable, *command], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == CRD_PATH.read_text()


def test_entry_point_rejects_arguments_with_usage() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "controller.tfjob.crd", "--bogus"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.startswith("usage:") and "Traceback" not in result.stderr


def test_the_simulated_apiserver_accepts_the_crd() -> None:
    assert validate_crd(build_crd()) == []


def test_generation_is_deterministic() -> None:
    assert to_yaml(build_crd()) == to_yaml(build_crd())
    assert build_crd() == yaml.safe_load(CRD_PATH.read_text())


def test_identity_versions_and_subresources() -> None:
    crd = build_crd()
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "tfjobs.kubeflow.org"
    spec = crd["spec"]
    assert spec["group"] == "kubeflow.org"
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {"kind": "TFJob", "listKind": "TFJobList", "plural": "tfjobs", "singular": "tfjob"}
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1", True, True)
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.tfReplicaSpecs.Worker.replicas",
            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
        },
    }
    columns = version["additionalPrinterColumns"]
    # Upstream's two columns come first and unchanged, then a dynamic job's members; extras only show with -o wide.
    assert columns[:3] == [
        {"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        {"name": "Members", "type": "string", "jsonPath": ".status.dynamicWorkers.summary"},
    ]
    assert all(column.get("priority") == 1 for column in columns[3:])


def test_printer_columns_show_state_and_worker_counts() -> None:
    # Evaluated with the simulator's kubectl-JSONPath engine, as the server builds Table rows.
    columns = build_crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    running = {
        "metadata": {"creationTimestamp": "2024-05-01T12:00:00Z"},
        "spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}},
        "status": {
            "conditions": [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}],
            "replicaStatuses": {"Worker": {"active": 3}},
            "dynamicWorkers": {"members": [0, 2, 3, 4], "summary": "0,2-4", "workers": {}},
        },
    }
    cells = {
        c["name"]: format_cell(jsonpath_evaluate(running, c["jsonPath"]), c["type"], c.get("format", ""))
        for c in columns
    }
    assert cells.pop("Age")  # rendered relative to now by the server
    assert cells == {"State": "Running", "Members": "0,2-4", "Workers": 4, "Active": 3}
    fresh = {"metadata": {"creationTimestamp": "2024-05-01T12:00:00Z"}, "spec": {"tfReplicaSpecs": {"PS": {}}}}
    cells = {
        c["name"]: format_cell(jsonpath_evaluate(fresh, c["jsonPath"]), c["type"], c.get("format", "")) for c in columns
    }
    assert cells.pop("Age")
    assert cells == {"State": None, "Members": None, "Workers": None, "Active": None}


def test_compact_json_fits_the_last_applied_annotation() -> None:
    # Client-side `kubectl apply` stores the whole object in an annotation limited to 256 KiB.
    size = len(json.dumps(build_crd(), separators=(",", ":")))
    assert size < 262_144 - 4096, size


def _walk(schema: dict[str, Any], path: str = ""):
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")
    if "items" in schema:
        yield from _walk(schema["items"], f"{path}[]")


def test_schema_is_structural() -> None:
    for path, node in _walk(_schema()):
        assert "description" not in node, path
        assert "$ref" not in node, path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            assert "type" not in node, path
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        if node["type"] == "array":
            assert "items" in node, path
        if node["type"] == "object":
            assert not ("properties" in node and "additionalProperties" in node), path
            free_form = node.get("x-kubernetes-preserve-unknown-fields") is True
            assert free_form or "properties" in node or "additionalProperties" in node or path == ".metadata", path
        for name in node.get("required", []):
            assert name in node.get("properties", {}), (path, name)


def test_schema_matches_upstream_shapes() -> None:
    schema = _schema()
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["tfReplicaSpecs"]
    replica = spec["properties"]["tfReplicaSpecs"]["additionalProperties"]
    template = replica["properties"]["template"]
    assert template["properties"]["metadata"]["properties"].keys() == {
        "annotations",
        "finalizers",
        "labels",
        "name",
        "namespace",
    }
    status = schema["properties"]["status"]["properties"]
    assert status["conditions"]["items"]["required"] == ["status", "type"]
    assert status["replicaStatuses"]["additionalProperties"]["properties"].keys() == {
        "active",
        "failed",
        "labelSelector",
        "selector",
        "succeeded",
    }
    for field in ("startTime", "completionTime", "lastReconcileTime"):
        assert status[field] == {"type": "string", "format": "date-time"}
    assert status["dynamicWorkers"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    run_policy = spec["properties"]["runPolicy"]["properties"]
    assert run_policy["suspend"] == {"type": "boolean", "default": False}
    assert run_policy["schedulingPolicy"]["properties"]["queue"]["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "spec.runPolicy.schedulingPolicy.queue is immutable"}
    ]


def _pod_spec_node(path: str) -> dict[str, Any]:
    node = pod_template_schema()["properties"]["spec"]
    for part in path.split("."):
        if part == "[]":
            node = node["items"]
        elif part == "{}":
            node = node["additionalProperties"]
        else:
            node = node["properties"][part]
    return node


QUANTITY = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "pattern": QUANTITY_PATTERN,
    "x-kubernetes-int-or-string": True,
}
INT_OR_STRING = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}


@pytest.mark.parametrize(
    "path, expected",
    [
        ("containers.[].resources.limits.{}", QUANTITY),
        ("containers.[].resources.requests.{}", QUANTITY),
        ("initContainers.[].resources.limits.{}", QUANTITY),
        ("overhead.{}", QUANTITY),
        ("volumes.[].emptyDir.sizeLimit", QUANTITY),
        ("volumes.[].ephemeral.volumeClaimTemplate.spec.resources.requests.{}", QUANTITY),
        ("containers.[].env.[].valueFrom.resourceFieldRef.divisor", QUANTITY),
        ("containers.[].livenessProbe.httpGet.port", INT_OR_STRING),
        ("containers.[].readinessProbe.tcpSocket.port", INT_OR_STRING),
        ("containers.[].lifecycle.preStop.httpGet.port", INT_OR_STRING),
        ("containers.[].ports.[].containerPort", {"type": "integer", "format": "int32"}),
        ("terminationGracePeriodSeconds", {"type": "integer", "format": "int64"}),
        ("activeDeadlineSeconds", {"type": "integer", "format": "int64"}),
        ("securityContext.runAsUser", {"type": "integer", "format": "int64"}),
        ("securityContext.supplementalGroups.[]", {"type": "integer", "format": "int64"}),
        ("tolerations.[].tolerationSeconds", {"type": "integer", "format": "int64"}),
        ("hostNetwork", {"type": "boolean"}),
        ("nodeSelector", {"type": "object", "additionalProperties": {"type": "string"}}),
    ],
)
def test_pod_template_field_types(path: str, expected: dict[str, Any]) -> None:
    assert _pod_spec_node(path) == expected


def test_pod_template_required_fields_come_from_the_api() -> None:
    assert _pod_spec_node("containers.[]")["required"] == ["name"]
    assert _pod_spec_node("containers.[].ports.[]")["required"] == ["containerPort"]
    assert _pod_spec_node("volumes.[]")["required"] == ["name"]
    assert pod_template_schema()["properties"]["spec"]["required"] == ["containers"]
    # Optional fields are never required (a superset of upstream must not demand them).
    assert "required" not in _pod_spec_node("containers.[].resources")


def _fake_models(**classes: dict[str, str]) -> types.ModuleType:
    module = types.ModuleType("fake_models")
    for class_name, fields in classes.items():
        attrs = {
            "openapi_types": dict(fields),
            "attribute_map": {attr: attr for attr in fields},
        }
        setattr(module, class_name, type(class_name, (), attrs))
    return module


def test_recursive_models_become_free_form_instead_of_looping() -> None:
    models = _fake_models(V1PodTemplateSpec={"spec": "V1Node"}, V1Node={"name": "str", "children": "list[V1Node]"})
    schema = pod_template_schema(models)
    node = schema["properties"]["spec"]
    assert node["properties"]["name"] == {"type": "string"}
    assert node["properties"]["children"] == {
        "type": "array",
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }


def test_unclassified_object_field_fails_generation_by_name() -> None:
    models = _fake_models(V1PodTemplateSpec={"spec": "V1Thing"}, V1Thing={"blob": "object"})
    with pytest.raises(SchemaGenerationError, match=r"V1Thing\.blob is typed 'object'"):
        pod_template_schema(models)


def test_unknown_type_string_fails_generation_by_name() -> None:
    models = _fake_models(V1PodTemplateSpec={"spec": "V1Thing"}, V1Thing={"when": "decimal"})
    with pytest.raises(SchemaGenerationError, match=r"V1Thing\.when has unsupported type 'decimal'"):
        pod_template_schema(models)


def test_every_object_field_of_the_real_pod_template_is_classified() -> None:
    # Walk kubernetes_asyncio's models the way the generator does and list every 'object' field
    # outside ObjectMeta: each must be in one of the classification tables.
    import kubernetes_asyncio.client.models as models

    seen: set[str] = set()
    found: set[tuple[str, str]] = set()
    pending = ["V1PodSpec"]
    while pending:
        name = pending.pop()
        if name in seen or name == "V1ObjectMeta":
            continue
        seen.add(name)
        cls = getattr(models, name)
        for attr, type_name in cls.openapi_types.items():
            inner = re.sub(r"^(list\[|dict\(str, )+|[\])]+$", "", type_name)
            if inner == "object":
                found.add((name, attr))
            elif hasattr(getattr(models, inner, None), "openapi_types"):
                pending.append(inner)
    classified = crd_module.INT_OR_STRING_FIELDS | crd_module.FREE_FORM_OBJECT_FIELDS
    assert found and found <= classified
    assert {key for key in crd_module.QUANTITY_FIELDS if key[0] in seen} == crd_module.QUANTITY_FIELDS


def test_pod_template_adds_no_constraints_beyond_the_pod_api() -> None:
    # Superset of upstream: inside the template only types, API-required fields, quantity
    # patterns and the one image rule on spec.containers may reject anything.
    replica = _schema()["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
    for path, node in _walk(replica["properties"]["template"]):
        assert not {"enum", "minimum", "maximum", "maxItems", "maxLength", "maxProperties", "default"} & node.keys(), (
            path
        )
        if "pattern" in node:
            assert node["pattern"] == QUANTITY_PATTERN, path
        if "x-kubernetes-validations" in node:
            assert path == ".spec.containers", path
