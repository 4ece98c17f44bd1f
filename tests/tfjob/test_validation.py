"""Validation: upstream's tfjob_webhook_test.go cases (type + field), the rules the controller adds
(quirk Q19), and the exact message format."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.tfjob.dynamic import parse_worker_records
from controller.tfjob.validation import (
    DUPLICATE,
    FORBIDDEN,
    INVALID,
    NOT_SUPPORTED,
    REQUIRED,
    FieldError,
    summarize,
    validate,
    validate_status,
)

from .builders import container, make_job, replica
from .hostile import json_values

W = "spec.tfReplicaSpecs[Worker]"


def kinds(job) -> list[tuple[str, str]]:
    return [(e.type, e.field) for e in validate(job)]


def valid_job() -> dict:
    return make_job(worker=replica(2, "OnFailure"))


def test_valid_job_has_no_errors():
    assert validate(valid_job()) == []


def test_bad_name():
    job = valid_job()
    job["metadata"]["name"] = "00test"
    assert kinds(job) == [(INVALID, "metadata.name")]


def test_no_containers_gives_two_required_errors():
    job = make_job(worker=replica(1, containers=[]))
    assert kinds(job) == [(REQUIRED, f"{W}.template.spec.containers")] * 2


def test_empty_image():
    job = make_job(worker=replica(1, containers=[container(image="")]))
    assert kinds(job) == [(REQUIRED, f"{W}.template.spec.containers[0].image")]


def test_single_container_with_empty_name():
    job = make_job(worker=replica(1, containers=[container(name="")]))
    assert kinds(job) == [(REQUIRED, f"{W}.template.spec.containers")]


def test_chief_and_master_together():
    job = make_job(chief=1, master=1, worker=1)
    assert kinds(job) == [(FORBIDDEN, "spec.tfReplicaSpecs")]


def test_chief_and_master_in_other_casing_also_rejected():
    # upstream's check is case-sensitive (CHIEF + Master passes); defaulting would make them both
    # chiefs, so we reject on the normalised names.
    job = make_job(worker=1)
    job["spec"]["tfReplicaSpecs"].update({"CHIEF": replica(1), "Master": replica(1)})
    assert kinds(job) == [(FORBIDDEN, "spec.tfReplicaSpecs")]


def test_managed_by_known_values_are_valid():
    for value in ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"):
        job = valid_job()
        job["spec"]["runPolicy"] = {"managedBy": value}
        assert validate(job) == []


def test_managed_by_other_controller_is_not_supported():
    job = valid_job()
    job["spec"]["runPolicy"] = {"managedBy": "other-job-controller"}
    assert kinds(job) == [(NOT_SUPPORTED, "spec.runPolicy.managedBy")]


# --- rules the controller adds (Q19); the CRD's CEL rules and schema mirror them ---------------
@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda j: j["spec"]["tfReplicaSpecs"].update({"Launcher": replica(1)}),
            [(NOT_SUPPORTED, "spec.tfReplicaSpecs[Launcher]")],
        ),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=-1), [(INVALID, f"{W}.replicas")]),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="2"), [(INVALID, f"{W}.replicas")]),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=True), [(INVALID, f"{W}.replicas")]),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=10001), [(INVALID, f"{W}.replicas")]),
        (
            lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes"),
            [(NOT_SUPPORTED, f"{W}.restartPolicy")],
        ),
        (
            lambda j: j["spec"].update(runPolicy={"cleanPodPolicy": "Some"}),
            [(NOT_SUPPORTED, "spec.runPolicy.cleanPodPolicy")],
        ),
        (lambda j: j["spec"].update(successPolicy="AnyWorker"), [(NOT_SUPPORTED, "spec.successPolicy")]),
        (lambda j: j["spec"].update(runPolicy={"backoffLimit": -1}), [(INVALID, "spec.runPolicy.backoffLimit")]),
        (
            lambda j: j["spec"].update(runPolicy={"activeDeadlineSeconds": "10"}),
            [(INVALID, "spec.runPolicy.activeDeadlineSeconds")],
        ),
        (
            lambda j: j["spec"].update(runPolicy={"ttlSecondsAfterFinished": 1.5}),
            [(INVALID, "spec.runPolicy.ttlSecondsAfterFinished")],
        ),
        (lambda j: j["spec"].update(runPolicy={"suspend": "yes"}), [(INVALID, "spec.runPolicy.suspend")]),
        (lambda j: j["spec"].update(runPolicy=[]), [(INVALID, "spec.runPolicy")]),
        (lambda j: j["spec"].update(enableDynamicWorker="true"), [(INVALID, "spec.enableDynamicWorker")]),
        (lambda j: j["spec"].update(tfReplicaSpecs={}), [(REQUIRED, "spec.tfReplicaSpecs")]),
        (lambda j: j["spec"].pop("tfReplicaSpecs"), [(REQUIRED, "spec.tfReplicaSpecs")]),
        (lambda j: j["spec"]["tfReplicaSpecs"].update(Worker=None), [(REQUIRED, f"{W}.template.spec.containers")]),
        (
            lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].pop("template"),
            [(REQUIRED, f"{W}.template.spec.containers")],
        ),
        (lambda j: j["spec"]["tfReplicaSpecs"].update(worker=replica(1)), [(DUPLICATE, "spec.tfReplicaSpecs[worker]")]),
        (lambda j: j["metadata"].pop("uid"), [(REQUIRED, "metadata.uid")]),
        (lambda j: j["metadata"].pop("namespace"), [(REQUIRED, "metadata.namespace")]),
        (lambda j: j["metadata"].update(name="a" * 64), [(INVALID, "metadata.name")]),
        (lambda j: j["metadata"].update(name="Upper"), [(INVALID, "metadata.name")]),
        (lambda j: j.pop("spec"), [(REQUIRED, "spec")]),
        (lambda j: j["spec"].update(workersToDelete=[1]), [(INVALID, "spec.workersToDelete")]),
        (lambda j: j["spec"].update(workersToDelete=[], enableDynamicWorker=False), []),
        (lambda j: j["spec"].update(workersToDelete=[3, 1], enableDynamicWorker=True), []),
        (
            lambda j: j["spec"].update(workersToDelete=[1, 1], enableDynamicWorker=True),
            [(DUPLICATE, "spec.workersToDelete[1]")],
        ),
        (
            lambda j: j["spec"].update(workersToDelete=[-1, "w-1", True, 10000], enableDynamicWorker=True),
            [(INVALID, f"spec.workersToDelete[{i}]") for i in range(4)],
        ),
        (
            lambda j: j["spec"].update(workersToDelete="1", enableDynamicWorker=True),
            [(INVALID, "spec.workersToDelete")],
        ),
    ],
)
def test_controller_rules(mutate, expected):
    job = valid_job()
    mutate(job)
    assert kinds(job) == expected


def test_edited_fields_must_have_their_types():
    job = make_job(
        worker=replica(
            1, containers=[{"name": "tensorflow", "image": "x", "env": "A=1", "ports": [{"containerPort": 0}]}]
        )
    )
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["metadata"] = {"labels": {"a": 1}}
    assert kinds(job) == [
        (INVALID, f"{W}.template.metadata.labels"),
        (INVALID, f"{W}.template.spec.containers[0].env"),
        (INVALID, f"{W}.template.spec.containers[0].ports[0].containerPort"),
    ]


def test_lower_case_keys_and_every_type_are_valid():
    job = make_job()
    job["spec"]["tfReplicaSpecs"] = {
        "chief": replica(1),
        "ps": replica(2),
        "worker": replica(0),
        "evaluator": replica(1),
    }
    assert validate(job) == []


@pytest.mark.parametrize("garbage", [None, 1, "job", [], {"metadata": 3, "spec": "x"}])
def test_garbage_is_reported_not_raised(garbage):
    assert validate(garbage)


def test_message_formats_follow_apimachinery():
    job = valid_job()
    job["metadata"]["name"] = "00test"
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = -1
    job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    errors = validate(job)
    assert [str(e) for e in errors] == [
        'metadata.name: Invalid value: "00test": should match: a DNS-1035 label must consist of lower case '
        "alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric "
        "character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
        "spec.tfReplicaSpecs[Worker].replicas: Invalid value: -1: must be greater than or equal to 0",
        'spec.tfReplicaSpecs[Worker].restartPolicy: Unsupported value: "Sometimes": supported values: '
        '"Always", "OnFailure", "Never", "ExitCode"',
    ]
    assert summarize(errors[1:2]) == str(errors[1])
    assert summarize(errors).startswith("[metadata.name: Invalid value") and summarize(errors).endswith('"ExitCode"]')


def test_required_message_without_value():
    assert str(FieldError(REQUIRED, "spec.tfReplicaSpecs", "must be required")) == (
        "spec.tfReplicaSpecs: Required value: must be required"
    )


# --- every generated name fits a DNS-1035 label -----------------------------------------------------------------

GENERATED_NAMES = {
    # case: (name length, replica specs, longest generated name length or None when valid, allowed length)
    "worker-0 exactly 63": (54, {"Worker": replica(1)}, None, None),
    "worker-0 one too long": (55, {"Worker": replica(1)}, 64, 54),
    "replicas unset means index 0": (55, {"Worker": replica(None)}, 64, 54),
    "the largest index counts: worker-10": (54, {"Worker": replica(11)}, 64, 53),
    "worker-9 still fits": (54, {"Worker": replica(10)}, None, None),
    "no replicas, no names": (60, {"Worker": replica(0), "Chief": replica(1)}, 68, 55),
    "evaluator is the longest type": (52, {"Worker": replica(2), "Evaluator": replica(1)}, 64, 51),
    "lower-case keys name the same pods": (55, {"worker": replica(1)}, 64, 54),
    "the 10000-replica maximum": (48, {"Worker": replica(10000)}, None, None),
}


@pytest.mark.parametrize(
    ("length", "specs", "longest", "allowed"), list(GENERATED_NAMES.values()), ids=list(GENERATED_NAMES)
)
def test_every_generated_name_must_fit_a_dns_1035_label(length, specs, longest, allowed):
    job = valid_job()
    job["metadata"]["name"] = name = "a" * length
    job["spec"]["tfReplicaSpecs"] = specs
    errors = validate(job)
    if longest is None:
        assert errors == []
        return
    assert kinds(job) == [(INVALID, "metadata.name")]
    message = str(errors[0])
    assert message.startswith(f'metadata.name: Invalid value: "{name}": must be no more than {allowed} characters')
    assert "must be a DNS-1035 label of at most 63 characters" in message
    assert message.endswith(f"has {longest}")


def test_a_name_invalid_in_itself_is_reported_once():
    job = make_job(name="a" * 70, worker=replica(3))
    assert kinds(job) == [(INVALID, "metadata.name")]


worker_keys = st.one_of(
    st.sampled_from(["0", "7", "007", "123456789", "1234567890", "-1", "+1", " 3", "1.0", "\u0661", "\u00bd", ""]),
    st.text(max_size=10),
)
worker_records = st.one_of(
    st.fixed_dictionaries(
        {"state": st.sampled_from(["Replacing", "Replaced", "Failed", "replaced", ""])},
        optional={"failovers": json_values, "lastReason": json_values, "exitCode": json_values},
    ),
    json_values,
)


@settings(derandomize=True, database=None, max_examples=300)
@given(st.dictionaries(worker_keys, worker_records, max_size=5))
def test_status_validation_reports_exactly_the_worker_records_the_controller_cannot_read(workers):
    status = {"dynamicWorkers": {"workers": workers}}
    reported = [e for e in validate_status(status) if e.field.startswith("status.dynamicWorkers.workers")]
    unreadable = [k for k, v in workers.items() if not parse_worker_records({"dynamicWorkers": {"workers": {k: v}}})]
    assert len(reported) == len(unreadable)
