"""Autoscaling through ``/scale`` as an HPA or KEDA drives it: what the scale subresource answers an HPA's read, and
that an autoscaler's write ends in the same targeted scale-down as ``kubectl scale``; the examples of
docs/autoscaling.md are valid and target the example job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from controller.runtime.client import PODS
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import Operator, annotate_pod, create_and_wait_running, eventually, live, tfjob
from tests.e2e.test_targeted_scale_down import COST, members_of, wait_for_workers

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "autoscaling"
EXAMPLE_JOB = yaml.safe_load((ROOT / "examples" / "dynamic-workers" / "tfjob.yaml").read_text())


def test_the_examples_target_the_example_job_and_the_hpa_is_valid_autoscaling_v2(tmp_path: Path) -> None:
    hpa = yaml.safe_load((EXAMPLES / "hpa.yaml").read_text())
    keda = yaml.safe_load((EXAMPLES / "keda-scaledobject.yaml").read_text())
    target = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": EXAMPLE_JOB["metadata"]["name"]}
    assert hpa["spec"]["scaleTargetRef"] == target
    assert keda["spec"]["scaleTargetRef"] == target
    assert EXAMPLE_JOB["spec"]["enableDynamicWorker"] is True
    tool = Path(sys.executable).parent / "kubernetes-validate"
    done = subprocess.run(
        [str(tool), "--kubernetes-version", "1.32.0", "--strict", "--quiet", str(EXAMPLES / "hpa.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


async def test_an_hpas_read_of_scale_selects_exactly_the_worker_pods(operator: Operator) -> None:
    await create_and_wait_running(operator, tfjob("auto", workers=3, ps=1, chief=1), running=5)

    async def counted() -> dict | None:
        scale = await operator.client.get(TFJOBS, "auto", namespace="default", subresource="scale")
        return scale if scale["status"].get("replicas") == 3 else None

    scale = await eventually(counted, what="the scale subresource counting three workers")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3
    selected = await operator.client.list(PODS, namespace="default", label_selector=scale["status"]["selector"])
    every = await operator.pods("auto")
    workers = sorted(p["metadata"]["name"] for p in every if "-worker-" in p["metadata"]["name"])
    assert (
        sorted(p["metadata"]["name"] for p in selected["items"])
        == workers
        == [
            "auto-worker-0",
            "auto-worker-1",
            "auto-worker-2",
        ]
    )
    assert len(every) == 5  # the chief and the PS exist, and the selector leaves them out


async def test_an_autoscalers_write_to_scale_removes_the_chosen_worker_like_kubectl_scale(
    operator: Operator, kubectl
) -> None:
    await create_and_wait_running(operator, tfjob("auto", workers=4), running=4)
    await annotate_pod(operator, "auto-worker-1", {COST: "-100"})
    # What the HPA controller's scale client does: read /scale, set spec.replicas, write /scale back.
    scale = await operator.client.get(TFJOBS, "auto", namespace="default", subresource="scale")
    scale["spec"]["replicas"] = 3
    await operator.client.replace(TFJOBS, scale, namespace="default", name="auto", subresource="scale")

    pods = await wait_for_workers(operator, "auto", 0, 2, 3)
    assert [p["metadata"]["name"] for p in live(pods)] == ["auto-worker-0", "auto-worker-2", "auto-worker-3"]
    job = await eventually(lambda: _members(operator, [0, 2, 3]), what="members 0,2,3 recorded")
    assert job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 3

    async def described() -> str | None:
        out = await kubectl.ok("describe", "tfjob", "auto")
        return out if "WorkerScaledDown" in out else None

    description = await eventually(described, what="the WorkerScaledDown event")
    # The same words kubectl scale's scale-down gets (tests/e2e/test_targeted_scale_down.py).
    assert "removed auto-worker-1 (pod-deletion-cost -100); workers now 0,2,3" in description


async def _members(operator: Operator, expected: list[int]) -> dict | None:
    job = await operator.job("auto")
    return job if members_of(job) == expected else None
