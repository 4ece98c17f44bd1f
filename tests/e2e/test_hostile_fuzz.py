"""Hostile input, layer (b): a batch of fuzzed TFJobs, written past the CRD's rules, beside good jobs.

The TFJob CRD is replaced by one whose spec and status schemas keep anything and whose CEL rules are
gone (as an old, webhook-less CRD would store them), so hypothesis-built jobs reach the controller as
written: broken specs, names too long for the pods and services they need, huge replica counts and
annotations, deep templates, unicode, and garbage written to their status subresource. Each bad job must get a clear ``TFJobFailedValidation``
condition and event (and no pods); no worker may be wedged; good jobs created after the batch must
run as if nothing happened. The run is derandomized and bounded: the same batches every time.
"""

from __future__ import annotations

import copy
import tempfile
from typing import Any

import anyio
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from controller.runtime.client import ApiClient
from controller.tfjob import api
from controller.tfjob.decide import DecideConfig
from controller.tfjob.executor import TFJOBS
from controller.tfjob.validation import validate, validate_pod_count
from tests.e2e.conftest import (
    CRD_PATH,
    CRDS,
    FAST_FAILOVER,
    Operator,
    condition,
    create_and_wait_running,
    eventually,
    is_true,
    start_operator,
    tfjob,
)
from tests.tfjob.hostile import deep, stored_json_values
from tfjob_sim.cluster import SimCluster, SimConfig

MAX_PODS = 16
CONFIG = DecideConfig(
    failover_backoff_base=FAST_FAILOVER.failover_backoff_base,
    failover_backoff_cap=FAST_FAILOVER.failover_backoff_cap,
    max_pods_per_job=MAX_PODS,
)
BATCH = 10


def lawless_crd() -> dict[str, Any]:
    """The TFJob CRD with spec and status schemas that keep anything, and no CEL rules."""
    crd = yaml.safe_load(CRD_PATH.read_text())
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        schema.pop("x-kubernetes-validations", None)
        for part in ("spec", "status"):
            schema["properties"][part] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


DAMAGES = [
    "replicas",
    "huge-replicas",
    "restart-policy",
    "no-tensorflow",
    "no-image",
    "deep-template",
    "unicode-env",
    "big-annotation",
    "unknown-type",
    "run-policy",
    "success-policy",
    "dynamic-garbage",
    "dotted-name",
    "long-name",
    "containers-garbage",
    "template-garbage",
    "no-template",
    "spec-garbage",
]


@st.composite
def hostile_job(draw: st.DrawFn, index: int) -> dict[str, Any]:
    """A TFJob damaged in one to three ways (it may still come out valid: then it must run)."""
    job = tfjob(
        f"fuzz-{index}",
        workers=draw(st.integers(1, 3)),
        ps=draw(st.integers(0, 1)),
        dynamic=draw(st.booleans()),
        restart_policy=draw(st.sampled_from(["OnFailure", "Never", "ExitCode"])),
    )
    specs = job["spec"]["tfReplicaSpecs"]
    worker = specs["Worker"]
    chosen = draw(st.lists(st.sampled_from(DAMAGES), min_size=1, max_size=3, unique=True))
    for damage in sorted(chosen, key=DAMAGES.index):  # structure-breaking damage last
        if damage == "replicas":
            worker["replicas"] = draw(st.one_of(st.integers(-5, -1), stored_json_values))
        elif damage == "huge-replicas":
            worker["replicas"] = draw(st.sampled_from([MAX_PODS + 1, 10_000, 10**9]))
        elif damage == "restart-policy":
            worker["restartPolicy"] = draw(st.one_of(st.text(max_size=12), stored_json_values))
        elif damage == "no-tensorflow":
            worker["template"]["spec"]["containers"][0]["name"] = draw(st.sampled_from(["main", "TensorFlow"]))
        elif damage == "no-image":
            worker["template"]["spec"]["containers"][0]["image"] = draw(st.sampled_from(["", None, 7]))
        elif damage == "template-garbage":
            worker["template"] = draw(stored_json_values)
        elif damage == "deep-template":
            worker["template"]["spec"]["containers"][0]["env"] = [{"name": "DEEP", "valueFrom": deep(60)}]
        elif damage == "unicode-env":
            worker["template"]["spec"]["containers"][0]["env"] = [
                {
                    "name": draw(st.sampled_from(["ワーカー", "A B", "\u202eX", "OK"])),
                    "value": draw(st.text(max_size=30)),
                }
            ]
        elif damage == "big-annotation":
            job["metadata"]["annotations"] = {"fuzz/big": "x" * draw(st.sampled_from([100_000, 250_000]))}
        elif damage == "unknown-type":
            specs[draw(st.sampled_from(["Launcher", "worker", "Master"]))] = copy.deepcopy(worker)
        elif damage == "spec-garbage":
            job["spec"][draw(st.sampled_from(["tfReplicaSpecs", "runPolicy"]))] = draw(stored_json_values)
        elif damage == "run-policy":
            job["spec"]["runPolicy"] = {
                draw(
                    st.sampled_from(
                        [
                            "backoffLimit",
                            "activeDeadlineSeconds",
                            "cleanPodPolicy",
                            "ttlSecondsAfterFinished",
                            "suspend",
                        ]
                    )
                ): draw(stored_json_values)
            }
        elif damage == "success-policy":
            job["spec"]["successPolicy"] = draw(stored_json_values)
        elif damage == "dynamic-garbage":
            job["spec"]["enableDynamicWorker"] = draw(stored_json_values)
        elif damage == "dotted-name":
            job["metadata"]["name"] = f"fuzz.{index}"
        elif damage == "long-name":  # valid as a name, too long for "<name>-worker-<index>" services
            prefix = f"fuzz-{index}-"
            job["metadata"]["name"] = prefix + "n" * (draw(st.integers(48, 63)) - len(prefix))
        elif damage == "no-template":
            worker.pop("template", None)
        elif damage == "containers-garbage":
            worker["template"]["spec"]["containers"] = draw(stored_json_values)
    return job


batches = st.tuples(*[hostile_job(i) for i in range(BATCH)])
HUGE_STATUS = {  # thousands of conditions of someone else's making, and a long-winded replica status
    "conditions": [{"type": f"Foreign{i}", "status": "True", "message": "m" * 64} for i in range(3000)],
    "replicaStatuses": {"Worker": {"active": 10**6, "labelSelector": {"matchLabels": {"x": "y" * 1000}}}},
}
statuses = st.lists(
    st.one_of(
        stored_json_values.filter(lambda v: isinstance(v, dict)),
        st.fixed_dictionaries(
            {
                "conditions": stored_json_values,
                "replicaStatuses": stored_json_values,
                "startTime": stored_json_values,
                "dynamicWorkers": stored_json_values,
            }
        ),
    ),
    min_size=BATCH - 1,
    max_size=BATCH - 1,
).map(lambda garbage: [HUGE_STATUS, *garbage])


def expected_invalid(stored: dict[str, Any]) -> bool:
    return bool(validate(stored) or validate_pod_count(stored, MAX_PODS))


async def scenario(jobs: tuple[dict[str, Any], ...], garbage_statuses: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory(prefix="hostile-") as workdir:  # one per hypothesis example, removed after it
        await run_scenario(workdir, jobs, garbage_statuses)


async def run_scenario(workdir: str, jobs: tuple[dict[str, Any], ...], garbage_statuses: list[dict[str, Any]]) -> None:
    async with SimCluster(SimConfig(nodes=3, time_scale=0.01, kubeconfig_path=f"{workdir}/kubeconfig")) as cluster:
        installer = await ApiClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await installer.create(CRDS, lawless_crd())
        finally:
            await installer.close()
        op = await start_operator(cluster, install_crd=False, config=CONFIG)
        try:
            await check(op, jobs, garbage_statuses)
            assert op.task is not None and not op.task.done(), "the controller task ended"
        finally:
            await op.stop()


async def check(op: Operator, jobs: tuple[dict[str, Any], ...], garbage_statuses: list[dict[str, Any]]) -> None:
    names = []
    for manifest, garbage in zip(jobs, garbage_statuses, strict=True):
        created = await op.client.create(TFJOBS, manifest, namespace="default")
        name = created["metadata"]["name"]
        names.append(name)
        # Garbage in the status too (its subresource accepts any object under this CRD). A merge patch:
        # the controller may have written a status already, and garbage merges into it.
        await op.client.patch(TFJOBS, name, {"status": garbage}, namespace="default", subresource="status")
    # No worker is wedged: good jobs created after the batch run normally and promptly.
    await create_and_wait_running(op, tfjob("good-a", workers=2, ps=1), running=3)
    await create_and_wait_running(op, tfjob("good-b", workers=1, dynamic=False), running=1)

    for name in names:
        stored = await op.job(name)
        if expected_invalid(stored):

            async def answered(name: str = name) -> dict[str, Any] | None:
                job = await op.job(name)
                return job if is_true(job, "Failed") else None

            job = await eventually(answered, what=f"{name} failed by validation")
            failed = condition(job, "Failed")
            assert failed is not None and failed["reason"] == api.REASON_FAILED_VALIDATION, failed
            message = failed["message"]
            assert message.startswith(f"TFJob default/{name} failed validation because ") and "\n" not in message
            events = [e for e in await op.events(name) if e["reason"] == api.REASON_FAILED_VALIDATION]
            assert [e["message"] for e in events] == [message] and events[0]["type"] == "Warning"
            assert await op.pods(name) == [], f"{name} is invalid: no pods"
        else:
            # It survived the damage: the controller takes it as a job (and never beyond the cap).
            async def started(name: str = name) -> dict[str, Any] | None:
                job = await op.job(name)
                return job if condition(job, "Created") else None

            await eventually(started, what=f"{name} (valid after all) taken on by the controller")
            assert len(await op.pods(name)) <= MAX_PODS
    errors = op.metric("controller_runtime_reconcile_errors_total", {"controller": "tfjob-controller"})
    assert errors == 0, f"{errors} reconcile errors: a bad job must be answered, not retried"


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # big reprs of 250 kB annotations
@settings(
    derandomize=True,
    database=None,
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(jobs=batches, garbage_statuses=statuses)
def test_fuzzed_jobs_get_a_clear_answer_and_good_jobs_run(
    jobs: tuple[dict[str, Any], ...], garbage_statuses: list[dict[str, Any]]
) -> None:
    anyio.run(scenario, jobs, garbage_statuses)
