"""Invalid TFJobs: rejected by the CRD through the real ``kubectl apply``, and, when written past the
rules, failed by the controller with a clear message, creating nothing and never crashing.

No admission webhook: the CRD itself enforces upstream's rules (a container named
``tensorflow`` in every replica template, an image in every container, at most one of
Chief/Master, a DNS-1035 name, known replica types, replicas >= 0). The controller re-checks every
job because objects can predate the rules (quirk Q19): such a job gets a Warning
``TFJobFailedValidation`` event and a ``Failed`` condition, and no pod or service. "Written past
the rules" is simulated by installing a copy of the CRD whose spec schema accepts anything and
whose CEL rules are removed — as an old, webhook-less CRD would.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import yaml

from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import (
    CRD_PATH,
    CRDS,
    Operator,
    conditions,
    create_and_wait_running,
    eventually,
    is_true,
    reconciled_once_more,
    running_operator,
    start_operator,
    tfjob,
)
from tfjob_sim.cluster import SimCluster


def no_tensorflow_container(name: str = "bad") -> dict[str, Any]:
    job = tfjob(name, workers=1)
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    return job


def empty_image(name: str = "bad") -> dict[str, Any]:
    job = tfjob(name, workers=1)
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = ""
    return job


def chief_and_master(name: str = "bad") -> dict[str, Any]:
    job = tfjob(name, workers=1, chief=1)
    job["spec"]["tfReplicaSpecs"]["Master"] = copy.deepcopy(job["spec"]["tfReplicaSpecs"]["Chief"])
    return job


def unknown_replica_type(name: str = "bad") -> dict[str, Any]:
    job = tfjob(name, workers=1)
    job["spec"]["tfReplicaSpecs"]["Launcher"] = copy.deepcopy(job["spec"]["tfReplicaSpecs"]["Worker"])
    return job


def negative_replicas(name: str = "bad") -> dict[str, Any]:
    job = tfjob(name, workers=1)
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = -1
    return job


def bad_name(name: str = "bad.name") -> dict[str, Any]:
    # A valid object name (RFC 1123 subdomain) that is not a DNS-1035 label, so only TFJob's rule
    # rejects it (services named after the job need DNS-1035 labels).
    return tfjob(name, workers=1)


LONG = "a" * 55  # a valid name, but <name>-worker-0 has 64 characters: too long for a Service


def long_name(name: str = LONG) -> dict[str, Any]:
    return tfjob(name, workers=1)


GENERATED_NAMES = (
    "the name of each of its pods and services, <name>-<replica type>-<index>, must be a DNS-1035 "
    "label of at most 63 characters"
)

DNS1035 = (
    "metadata.name must be a DNS-1035 label: at most 63 lower-case letters, digits or '-', starting with "
    "a letter and ending with a letter or digit"
)

REJECTED = [
    (
        no_tensorflow_container,
        'The TFJob "bad" is invalid: spec.tfReplicaSpecs[Worker]: Invalid value: "object": '
        "template.spec.containers must include a container named tensorflow",
    ),
    (
        empty_image,
        'The TFJob "bad" is invalid: spec.tfReplicaSpecs[Worker].template.spec.containers: Invalid value: '
        '"array": every container must have a non-empty image',
    ),
    (
        chief_and_master,
        'The TFJob "bad" is invalid: spec.tfReplicaSpecs: Invalid value: "object": must not have more '
        "than 1 Chief or Master role",
    ),
    (
        unknown_replica_type,
        'The TFJob "bad" is invalid: spec.tfReplicaSpecs: Invalid value: "object": replica types '
        "must be Chief, Master, PS, Worker or Evaluator (any letter case)",
    ),
    (
        negative_replicas,
        'The TFJob "bad" is invalid: spec.tfReplicaSpecs.Worker.replicas: Invalid value: -1: '
        "spec.tfReplicaSpecs.Worker.replicas in body should be greater than or equal to 0",
    ),
    (bad_name, f'The TFJob "bad.name" is invalid: <nil>: Invalid value: "object": {DNS1035}'),
    (
        long_name,
        f'The TFJob "{LONG}" is invalid: <nil>: Invalid value: "object": metadata.name must be at most 54 '
        f"characters for this job: {GENERATED_NAMES}",
    ),
]


@pytest.mark.parametrize(("make", "message"), REJECTED, ids=[m.__name__ for m, _ in REJECTED])
async def test_the_crd_rejects_invalid_tfjobs_through_kubectl_apply(
    operator: Operator, kubectl, make, message: str
) -> None:
    manifest = make()
    rc, out, err = await kubectl("apply", "-f", "-", input=json.dumps(manifest))
    assert rc == 1 and out == "", (rc, out, err)
    assert err.strip() == message
    items = (await operator.client.list(TFJOBS, namespace="default"))["items"]
    assert items == [], "a rejected TFJob must not be stored"


async def test_a_valid_tfjob_is_accepted_by_kubectl_apply(operator: Operator, kubectl) -> None:
    rc, out, err = await kubectl("apply", "-f", "-", input=json.dumps(tfjob("good", workers=1)))
    assert rc == 0, err
    assert out.strip() == "tfjob.kubeflow.org/good created"


# --- written past the rules: the controller's own check ---------------------------------------------
def loosened_crd() -> dict[str, Any]:
    """The TFJob CRD with a spec schema that keeps anything and no CEL rules (status unchanged)."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        schema.pop("x-kubernetes-validations", None)
        schema["properties"]["spec"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


@pytest.fixture
async def lax_operator(sim_cluster: SimCluster) -> AsyncIterator[Operator]:
    from controller.runtime.client import ApiClient

    assert sim_cluster.kubeconfig_path
    installer = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    try:
        await installer.create(CRDS, loosened_crd())
    finally:
        await installer.close()
    async with running_operator(sim_cluster, install_crd=False) as op:
        yield op


PAST_THE_RULES = [
    (
        no_tensorflow_container,
        "bad",
        "spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: "
        "must have at least one container with name tensorflow",
    ),
    (
        empty_image,
        "bad",
        "spec.tfReplicaSpecs[Worker].template.spec.containers[0].image: Required value: must be required",
    ),
    (chief_and_master, "bad", "spec.tfReplicaSpecs: Forbidden: must not have more than 1 Chief or Master role"),
    (
        unknown_replica_type,
        "bad",
        'spec.tfReplicaSpecs[Launcher]: Unsupported value: "Launcher": supported values: '
        '"Chief", "Evaluator", "Master", "PS", "Worker"',
    ),
    (
        negative_replicas,
        "bad",
        "spec.tfReplicaSpecs[Worker].replicas: Invalid value: -1: must be greater than or equal to 0",
    ),
    (
        bad_name,
        "bad.name",
        'metadata.name: Invalid value: "bad.name": should match: a DNS-1035 label must consist '
        "of lower case alphanumeric characters or '-', start with an alphabetic character, and "
        "end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
        "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
    ),
    (
        long_name,
        LONG,
        f'metadata.name: Invalid value: "{LONG}": must be no more than 54 characters for this job: '
        f'{GENERATED_NAMES}, and "{LONG}-worker-0" has 64',
    ),
]


@pytest.mark.parametrize(("make", "name", "reason"), PAST_THE_RULES, ids=[m.__name__ for m, _, _ in PAST_THE_RULES])
async def test_the_controller_fails_an_invalid_job_written_past_the_rules(
    lax_operator: Operator, make, name: str, reason: str
) -> None:
    operator = lax_operator
    faults = operator.cluster.faults
    mark = faults.mark()
    await operator.client.create(TFJOBS, make(name), namespace="default")

    async def failed() -> dict | None:
        job = await operator.job(name)
        return job if is_true(job, "Failed") else None

    job = await eventually(failed, what=f"{name} Failed by the controller's validation")
    cond_type, status, cond_reason, message = conditions(job)[-1]
    assert (cond_type, status, cond_reason) == ("Failed", "True", "TFJobFailedValidation")
    prefix = f"TFJob default/{name} failed validation because "
    assert message.startswith(prefix), message
    assert message == prefix + reason
    assert "\n" not in message and "Traceback" not in message
    assert job["status"].get("completionTime"), "a failed job needs completionTime (TTL must work)"

    await reconciled_once_more(operator, name)
    events = [e for e in await operator.events(name) if e["reason"] == "TFJobFailedValidation"]
    assert len(events) == 1 and events[0]["type"] == "Warning" and events[0]["message"] == message
    assert events[0].get("count", 1) == 1, "reported once, not on every pass"
    assert await operator.pods(name) == [] and await operator.services(name) == []
    assert faults.count("create", "pods", since=mark) == 0
    assert faults.count("create", "services", since=mark) == 0
    assert operator.metric("controller_runtime_reconcile_errors_total", {"controller": "tfjob-controller"}) == 0
    assert (
        operator.metric("training_operator_jobs_failed_total", {"job_namespace": "default", "framework": "tensorflow"})
        == 1
    )
    # The worker is neither crashed nor stalled: a valid job right after runs normally.
    await create_and_wait_running(operator, tfjob("after", workers=1), running=1)
    assert conditions(await operator.job(name)) == conditions(job), "the invalid job's status must be stable"


async def test_a_job_made_invalid_by_an_update_is_failed_and_left_alone(lax_operator: Operator) -> None:
    operator = lax_operator
    await create_and_wait_running(operator, tfjob("later", workers=2), running=2)
    await operator.client.patch(
        TFJOBS, "later", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": -3}}}}, namespace="default"
    )

    async def failed() -> dict | None:
        job = await operator.job("later")
        return job if is_true(job, "Failed") else None

    job = await eventually(failed, what="the updated job Failed by validation")
    assert conditions(job)[-1][2] == "TFJobFailedValidation"
    await reconciled_once_more(operator, "later")
    assert operator.metric("controller_runtime_reconcile_errors_total", {"controller": "tfjob-controller"}) == 0


async def test_an_invalid_job_with_a_ttl_is_deleted_after_it(lax_operator: Operator) -> None:
    """completionTime is set on a validation failure too, so TTL cleanup works for it."""
    from controller.runtime.errors import NotFound

    operator = lax_operator
    manifest = negative_replicas("ttlbad")
    manifest["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 1}
    await operator.client.create(TFJOBS, manifest, namespace="default")

    async def gone() -> bool:
        try:
            await operator.job("ttlbad")
        except NotFound:
            return True
        return False

    await eventually(gone, what="the invalid job deleted by its TTL")
    assert operator.metric("controller_runtime_reconcile_errors_total", {"controller": "tfjob-controller"}) == 0


async def test_a_job_stored_before_the_crd_was_tightened_still_gets_its_condition(sim_cluster: SimCluster) -> None:
    """Ratcheting: a job that an older CRD let in is failed by the controller once the CRD
    is upgraded; its status write must be accepted although the job breaks the new rules."""
    from controller.runtime.client import ApiClient

    assert sim_cluster.kubeconfig_path
    installer = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    try:
        await installer.create(CRDS, loosened_crd())
        await installer.create(TFJOBS, long_name(), namespace="default")
        await installer.create(TFJOBS, negative_replicas("old-bad"), namespace="default")
        tight = yaml.safe_load(CRD_PATH.read_text())
        current = await installer.get(CRDS, tight["metadata"]["name"])
        tight["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await installer.replace(CRDS, tight)
    finally:
        await installer.close()
    operator = await start_operator(sim_cluster, install_crd=False)
    try:

        async def failed(name: str) -> dict | None:
            job = await operator.job(name)
            return job if is_true(job, "Failed") else None

        for name in (LONG, "old-bad"):
            job = await eventually(partial(failed, name), what=f"{name} Failed by the controller's validation")
            assert conditions(job)[-1][2] == "TFJobFailedValidation"
            await reconciled_once_more(operator, name)
        assert operator.metric("controller_runtime_reconcile_errors_total", {"controller": "tfjob-controller"}) == 0
        assert await operator.pods(LONG) == [] and await operator.pods("old-bad") == []
    finally:
        await operator.stop()


def lawless_status_crd() -> dict[str, Any]:
    """The loosened CRD whose status keeps any JSON value, a string included (an older or edited CRD)."""
    crd = loosened_crd()
    for version in crd["spec"]["versions"]:
        version["schema"]["openAPIV3Schema"]["properties"]["status"] = {"x-kubernetes-preserve-unknown-fields": True}
    return crd


async def test_a_status_written_past_the_rules_is_reported_once_and_replaced(sim_cluster: SimCluster) -> None:
    """A job's status overwritten with a string, then a list, in one generation: every observer reads on
    (no handler fails, no traceback), the controller says once what it cannot read, and its next status
    write puts a status back; the job keeps running its pods."""
    from structlog.testing import capture_logs

    from controller.runtime.client import ApiClient

    assert sim_cluster.kubeconfig_path
    installer = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    try:
        await installer.create(CRDS, lawless_status_crd())
    finally:
        await installer.close()
    async with running_operator(sim_cluster, install_crd=False) as operator:
        with capture_logs() as logs:
            await create_and_wait_running(operator, tfjob("garbled", workers=2), running=2)
            pods = {p["metadata"]["uid"] for p in await operator.pods("garbled")}
            for garbage in ("Running", ["Running", {"type": "Failed"}]):
                job = await operator.job("garbled")
                await operator.client.replace(
                    TFJOBS, {**job, "status": garbage}, namespace="default", subresource="status"
                )

                async def rewritten() -> bool:
                    status = (await operator.job("garbled")).get("status")
                    return isinstance(status, dict) and is_true({"status": status}, "Running")

                await eventually(rewritten, what=f"the status {garbage!r} replaced by the controller")
            await reconciled_once_more(operator, "garbled")
        assert {p["metadata"]["uid"] for p in await operator.pods("garbled")} == pods, "no pod was touched"
        broken = [e for e in logs if e.get("log_level") in ("error", "critical") or "exc_info" in e]
        assert broken == []
        reports = [e for e in logs if e.get("event", "").startswith("TFJob status cannot be read")]
        assert [(e["job"], e["error"]) for e in reports] == [
            ("default/garbled", 'status: Invalid value: "Running": must be an object')
        ], reports
