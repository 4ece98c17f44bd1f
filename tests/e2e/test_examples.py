"""The example TFJobs of manifests/examples/ are accepted by the CRD and run to their expected end, on the
simulator's annotation runtime (nothing runs; tests/e2e/test_example_manifests.py trains them for real).

Each example is applied with the real ``kubectl apply`` (so the simulated apiserver validates it
against the CRD's schema and CEL rules, as a real one would); the only change made to it is the
simulator's pod annotations (how long a container runs), added to the replica templates. What each
example promises in its comments is what the test checks.
"""

from __future__ import annotations

import copy
import json
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from controller.runtime.client import PODS, ApiClient
from controller.tfjob.executor import TFJOBS
from tests.deployment import manifest_run_args
from tests.e2e.conftest import Operator, eventually, is_true, live, running_pods
from tfjob_sim.kubelet import RUN_SECONDS
from tfjob_sim.testing.processes import ControllerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
DYNAMIC = Path(__file__).resolve().parents[2] / "examples" / "dynamic-workers"


def example(name: str, annotations: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """The example as a user applies it, plus per-replica-type simulator annotations."""
    job = copy.deepcopy(yaml.safe_load((EXAMPLES / name).read_text()))
    for replica_type, values in (annotations or {}).items():
        template = job["spec"]["tfReplicaSpecs"][replica_type]["template"]
        template.setdefault("metadata", {}).setdefault("annotations", {}).update(values)
    return job


async def apply(kubectl: Any, job: dict[str, Any]) -> None:
    rc, out, err = await kubectl("apply", "-n", "default", "-f", "-", input=json.dumps(job))
    assert rc == 0, err
    assert out.strip() == f"tfjob.kubeflow.org/{job['metadata']['name']} created"


async def succeeded_and_cleaned(operator: Operator, name: str) -> None:
    async def done() -> bool:
        job = await operator.job(name)
        return is_true(job, "Succeeded") and not running_pods(await operator.pods(name))

    await eventually(done, timeout=60, what=f"{name} Succeeded with no pod left running (cleanPodPolicy Running)")


def test_the_examples_kustomization_lists_every_example_and_its_program() -> None:
    kustomization = yaml.safe_load((EXAMPLES / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    here = sorted(p.name for p in EXAMPLES.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(r for r in listed if not r.startswith("../")) == here
    assert [r for r in listed if r.startswith("../")] == ["../../examples/dynamic-workers"]
    programs = [f for generator in kustomization["configMapGenerator"] for f in generator["files"]]
    assert programs == [str(p.relative_to(EXAMPLES)) for p in sorted(EXAMPLES.glob("programs/*.py"))]


async def test_ps_worker_example_succeeds_when_worker_0_completes(operator: Operator, kubectl: Any) -> None:
    # The PS runs until it is removed; the workers train for a while and exit 0.
    await apply(kubectl, example("ps-worker.yaml", {"Worker": {RUN_SECONDS: "100"}}))
    await succeeded_and_cleaned(operator, "ps-worker")
    job = await operator.job("ps-worker")
    assert not is_true(job, "Failed")


async def test_chief_evaluator_example_succeeds_when_the_chief_completes(operator: Operator, kubectl: Any) -> None:
    # Only the chief ends; the workers and the evaluator would run for ever.
    await apply(kubectl, example("chief-evaluator.yaml", {"Chief": {RUN_SECONDS: "100"}}))
    await succeeded_and_cleaned(operator, "chief-evaluator")
    pods = await operator.pods("chief-evaluator")
    assert {p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Succeeded"} == {
        "chief-evaluator-chief-0"
    }


async def test_dynamic_workers_example_scales_with_kubectl_and_then_succeeds(operator: Operator, kubectl: Any) -> None:
    name = "dynamic-workers"
    rc, _, err = await kubectl("apply", "-k", str(DYNAMIC), "-n", "default")
    assert rc == 0, err

    async def workers(count: int) -> bool:
        pods = running_pods(await operator.pods(name, replica_type="Worker"))
        return len(pods) == count and len(live(await operator.pods(name, replica_type="Worker"))) == count

    await eventually(lambda: workers(3), what="three running workers")
    for replicas in (4, 1):
        rc, out, err = await kubectl("scale", f"tfjob/{name}", f"--replicas={replicas}", "-n", "default")
        assert rc == 0, err
        await eventually(partial(workers, replicas), what=f"{replicas} running workers after kubectl scale")
        assert is_true(await operator.job(name), "Running")
    # Worker 0 finishes training (there is no chief): the job succeeds whatever the other workers do.
    rc, _, err = await kubectl("annotate", "pod", f"{name}-worker-0", "-n", "default", "sim.tfjob.dev/exit-code=0")
    assert rc == 0, err
    await succeeded_and_cleaned(operator, name)


async def test_kubectl_apply_k_installs_the_controller_and_the_examples_run_to_their_end(
    sim_cluster: Any, kubectl: Any
) -> None:
    # The whole install as a user runs it, then the controller as the Deployment runs it (the
    # simulated pods of the Deployment run no code, so the real process stands in for its leader).
    rc, out, err = await kubectl("apply", "-k", str(EXAMPLES.parent), timeout=120)
    assert rc == 0, err
    for created in (
        "namespace/tfjob-controller",
        "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org",
        "deployment.apps/tfjob-controller",
        "poddisruptionbudget.policy/tfjob-controller",
        "clusterrole.rbac.authorization.k8s.io/tfjob-edit",
    ):
        assert f"{created} created" in out, out
    rc, out, err = await kubectl(
        "rollout", "status", "deployment/tfjob-controller", "-n", "tfjob-controller", "--timeout=90s", timeout=120
    )
    assert rc == 0 and "successfully rolled out" in out, out + err
    rc, out, err = await kubectl("get", "pods", "-n", "tfjob-controller", "-o", "name")
    assert rc == 0 and len(out.split()) == 2, out  # two replicas

    async with ControllerProcess(
        *manifest_run_args(),
        "--kubeconfig",
        sim_cluster.kubeconfig_path,
        "--leader-election-namespace",
        "tfjob-controller",
    ) as controller:
        rc, out, err = await kubectl("apply", "-k", str(EXAMPLES), "-n", "default")
        assert rc == 0, err
        created = {line for line in out.splitlines() if line.startswith("tfjob.kubeflow.org/")}
        assert created == {
            f"tfjob.kubeflow.org/{name} created" for name in ("ps-worker", "dynamic-workers", "chief-evaluator")
        }, out
        client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
        try:
            # What ends each job, as its comments say: worker 0 of a PS job, the chief when there is one.
            finishers = {
                "ps-worker": "ps-worker-worker-0",
                "chief-evaluator": "chief-evaluator-chief-0",
                "dynamic-workers": "dynamic-workers-worker-0",
            }

            async def running(pod: str) -> bool:
                return (await client.get(PODS, pod, namespace="default"))["status"].get("phase") == "Running"

            for pod in finishers.values():
                await eventually(partial(running, pod), timeout=60, what=f"{pod} running")
                rc, _, err = await kubectl("annotate", "pod", pod, "-n", "default", "sim.tfjob.dev/exit-code=0")
                assert rc == 0, err

            async def succeeded(job: str) -> bool:
                return is_true(await client.get(TFJOBS, job, namespace="default"), "Succeeded")

            for job in finishers:
                await eventually(partial(succeeded, job), timeout=60, what=f"{job} Succeeded")
        finally:
            await client.close()
    assert controller.proc is not None and controller.proc.returncode == 0, controller.stderr[-2000:]
