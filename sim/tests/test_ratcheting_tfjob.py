"""CRD validation ratcheting (KEP-4008, as kube-apiserver 1.33 does it) for TFJobs stored under an older CRD.

A TFJob written while a looser CRD was installed must keep working once the CRD is tightened: the controller
must still be able to write its status (the ``/status`` subresource is ratcheted since 1.33), and users may
still edit the job without touching the offending value. A *changed* invalid value is rejected, and
transition rules (``oldSelf``) still apply.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from controller.tfjob.crd import build_crd
from tfjob_sim.errors import ApiError
from tfjob_sim.store import CRD_RESOURCE, Store
from tfjob_sim.testing.objects import tfjob

TFJOBS = "tfjobs.kubeflow.org"
NS = "default"
KINDS = ("bad-policy", "no-tensorflow", "long")
TESTS = ("status", "edit", "changed", "fix", "transition")


def job_name(test: str, kind: str) -> str:
    """Each test has its own jobs (the store is shared by the module: installing the CRD twice takes seconds)."""
    if kind == "long":
        return f"{test}-{'a' * 60}"[:56]  # <name>-worker-0 has 65 characters
    return f"{test}-{kind}"


def loose_crd() -> dict[str, Any]:
    """The TFJob CRD as an older release shipped it: no CEL rules, a spec that keeps anything."""
    crd = build_crd()
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    schema.pop("x-kubernetes-validations", None)
    schema["properties"]["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


def bad_policy(name: str) -> dict[str, Any]:
    job = tfjob(name, workers=1)
    job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"  # not in the enum
    return job


def no_tensorflow(name: str) -> dict[str, Any]:
    job = tfjob(name, workers=1)
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"  # a CEL rule
    return job


@pytest.fixture(scope="module")
def store() -> Store:
    """Jobs written under the loose CRD, then the CRD tightened to the current one."""
    store = Store()
    store.create(CRD_RESOURCE, None, loose_crd())
    makers = {"bad-policy": bad_policy, "no-tensorflow": no_tensorflow, "long": lambda n: tfjob(n, workers=1)}
    for test in TESTS:
        for kind in KINDS:
            store.create(TFJOBS, NS, makers[kind](job_name(test, kind)))
    tight = build_crd()
    tight["metadata"]["resourceVersion"] = store.get(CRD_RESOURCE, None, tight["metadata"]["name"])["metadata"][
        "resourceVersion"
    ]
    store.update(CRD_RESOURCE, None, tight["metadata"]["name"], tight)
    return store


def failed_status() -> dict[str, Any]:
    return {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "TFJobFailedValidation",
                "message": "failed validation",
                "lastUpdateTime": "2026-01-01T00:00:00Z",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }


def edited(store: Store, name: str, change: Any) -> dict[str, Any]:
    job = copy.deepcopy(store.get(TFJOBS, NS, name))
    change(job)
    return job


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_stored_under_a_looser_crd_still_gets_a_status(store: Store, kind: str) -> None:
    name = job_name("status", kind)
    job = edited(store, name, lambda j: j.update(status=failed_status()))
    stored = store.update(TFJOBS, NS, name, job, "status")
    assert stored["status"]["conditions"][0]["reason"] == "TFJobFailedValidation"


@pytest.mark.parametrize("kind", KINDS)
def test_edits_that_leave_the_invalid_value_alone_are_accepted(store: Store, kind: str) -> None:
    name = job_name("edit", kind)
    job = edited(store, name, lambda j: j["metadata"].setdefault("labels", {}).update(team="ml"))
    assert store.update(TFJOBS, NS, name, job)["metadata"]["labels"] == {"team": "ml"}
    job = edited(store, name, lambda j: j["spec"].update(runPolicy={"backoffLimit": 3}))
    assert store.update(TFJOBS, NS, name, job)["spec"]["runPolicy"]["backoffLimit"] == 3


CHANGED_AND_STILL_INVALID = [
    (
        "bad-policy",
        lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(restartPolicy="Whenever"),
        'spec.tfReplicaSpecs.Worker.restartPolicy: Unsupported value: "Whenever"',
    ),
    (
        "no-tensorflow",
        lambda j: j["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(name="other"),
        "template.spec.containers must include a container named tensorflow",
    ),
    (
        "long",
        lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=11),
        "metadata.name must be at most 53 characters for this job",
    ),
]


@pytest.mark.parametrize(
    ("kind", "change", "message"), CHANGED_AND_STILL_INVALID, ids=[k for k, _, _ in CHANGED_AND_STILL_INVALID]
)
def test_a_changed_invalid_value_is_still_rejected(store: Store, kind: str, change: Any, message: str) -> None:
    name = job_name("changed", kind)
    with pytest.raises(ApiError) as caught:
        store.update(TFJOBS, NS, name, edited(store, name, change))
    assert caught.value.code == 422 and message in str(caught.value), str(caught.value)


def test_a_fix_is_accepted(store: Store) -> None:
    name = job_name("fix", "bad-policy")
    job = edited(store, name, lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(restartPolicy="Never"))
    assert store.update(TFJOBS, NS, name, job)["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"


def test_transition_rules_still_apply_to_a_ratcheted_job(store: Store) -> None:
    name = job_name("transition", "bad-policy")
    job = edited(store, name, lambda j: j["spec"].update(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}))
    store.update(TFJOBS, NS, name, job)  # absent -> set: the transition rule cannot see it
    job = edited(store, name, lambda j: j["spec"]["runPolicy"].update(managedBy="kubeflow.org/training-operator"))
    with pytest.raises(ApiError) as caught:
        store.update(TFJOBS, NS, name, job)
    assert caught.value.code == 422 and "spec.runPolicy.managedBy is immutable" in str(caught.value)
