"""The example manifests train as shipped: ``kubectl apply -k manifests/examples/`` (and ``kubectl apply -k
examples/dynamic-workers/``, which it includes), unchanged, on the simulator's process runtime with the controller
running. The image they name, ``tensorflow/tensorflow:2.21.0``, is mapped to this interpreter's environment
(``SimConfig(image_map=...)``, as ``tfjob-controller sim --image`` does), so ``command: [python, /opt/...]`` runs
this interpreter, and the programs reach the pods as the ConfigMap volumes kustomize generates: what a real cluster
does with the same ``kubectl apply -k``.

Every job trains: its trainers log global steps, the evaluator reports accuracy, and each job succeeds as its
comments say (worker 0 without a chief, the chief with one), with no pod restarted.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Operator, eventually, is_true, running_pods, until_true
from tfjob_sim.cluster import SimConfig

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
DYNAMIC = ROOT / "examples" / "dynamic-workers"
IMAGE = "tensorflow/tensorflow:2.21.0"
NS = "default"
# Eleven TensorFlow tasks start at once: seconds of CPU each, many more on a busy 2-core machine.
SLOW = 200.0
STEP = re.compile(r"^step=(\d+) ", re.M)
EVAL = re.compile(r"^eval step=(\d+) accuracy=([0-9.]+)$", re.M)
FINISHED = re.compile(r"^event=finished\b.*\bstep=(\d+)", re.M)
# What ends each job (its comments say so) and the pods that train in it.
FINISHERS = {"ps-worker": "ps-worker-worker-0", "chief-evaluator": "chief-evaluator-chief-0"}
TRAINERS = {
    "ps-worker": ["ps-worker-worker-0", "ps-worker-worker-1"],
    "chief-evaluator": ["chief-evaluator-chief-0", "chief-evaluator-worker-0"],
    "dynamic-workers": [f"dynamic-workers-worker-{i}" for i in range(3)],
}

pytestmark = [pytest.mark.timeout(600), pytest.mark.needs("linux", "root", "ip", "tensorflow")]


@pytest.fixture
def sim_config() -> SimConfig:
    # Real time: the programs' own step delays and the pods' grace periods are what a cluster gives them.
    return SimConfig(nodes=3, time_scale=1.0, runtime="process", image_map={IMAGE: sys.prefix})


async def log(operator: Operator, pod: str, *, follow: bool = False) -> str:
    """The pod's log through pods/log (``kubectl logs [-f]``); with ``follow`` it returns when the process ends."""
    params = {"container": "tensorflow", **({"follow": "true"} if follow else {})}
    _, body = await operator.client.request_raw(
        "GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log", params=params, timeout=SLOW if follow else 30
    )
    return body.decode(errors="replace")


async def evaluator_output(operator: Operator) -> str:
    """The evaluator's whole output: followed from its start until its process ends (it may be removed with the
    job's other running pods once the chief has finished)."""

    async def started() -> bool:
        return "chief-evaluator-evaluator-0" in {
            p["metadata"]["name"] for p in running_pods(await operator.pods("chief-evaluator"))
        }

    await eventually(started, SLOW, interval=0.2, what="the evaluator running")
    return await log(operator, "chief-evaluator-evaluator-0", follow=True)


async def test_the_example_manifests_train_as_shipped(operator: Operator, kubectl: Any) -> None:
    rc, out, err = await kubectl("apply", "-k", str(EXAMPLES), "-n", NS, timeout=120)
    assert rc == 0, err
    assert sorted(out.split()) == sorted(
        [
            "configmap/dynamic-workers-program",
            "configmap/example-programs",
            "tfjob.kubeflow.org/chief-evaluator",
            "tfjob.kubeflow.org/dynamic-workers",
            "tfjob.kubeflow.org/ps-worker",
        ]
        + ["created"] * 5
    ), out
    # The dynamic example's own kustomization is the same objects: applying it changes nothing.
    rc, out, err = await kubectl("apply", "-k", str(DYNAMIC), "-n", NS, timeout=120)
    assert rc == 0, err
    assert sorted(out.splitlines()) == [
        "configmap/dynamic-workers-program unchanged",
        "tfjob.kubeflow.org/dynamic-workers unchanged",
    ], out
    evaluator = asyncio.create_task(evaluator_output(operator))

    for job in TRAINERS:
        done = await until_true(operator, job, "Succeeded", timeout=SLOW, interval=0.5)
        assert not is_true(done, "Failed") and not is_true(done, "Restarting"), done["status"]
    pods = {p["metadata"]["name"]: p for job in TRAINERS for p in await operator.pods(job)}
    for job, trainers in TRAINERS.items():
        for name in trainers:
            pod = pods[name]
            assert pod["status"]["phase"] == "Succeeded", (name, pod["status"])
            assert [c["restartCount"] for c in pod["status"]["containerStatuses"]] == [0], (name, pod["status"])
            steps = [int(s) for s in STEP.findall(await log(operator, name))]
            assert steps and steps == sorted(steps), f"{name} logged no training step: {steps}"
        # What ended the job trained to the end: its last words name a global step at TRAIN_STEPS or past it.
        finisher = FINISHERS.get(job, f"{job}-worker-0")
        ended = FINISHED.search(await log(operator, finisher))
        assert ended and int(ended.group(1)) >= _target(pods[finisher]), f"{finisher} did not finish training"
    # The PS tasks served until the job was done, then were removed with the other pods still running.
    await eventually(lambda: _no_ps_left(operator), 60, interval=0.5, what="every PS removed")

    evaluated = EVAL.findall(await asyncio.wait_for(evaluator, SLOW))
    assert evaluated, "the evaluator reported no accuracy"
    assert all(0.0 <= float(accuracy) <= 1.0 for _, accuracy in evaluated)
    assert [int(step) for step, _ in evaluated] == sorted(int(step) for step, _ in evaluated)


def _target(pod: dict[str, Any]) -> int:
    """The pod's TRAIN_STEPS (as its manifest sets it)."""
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
    return int(env["TRAIN_STEPS"])


async def _no_ps_left(operator: Operator) -> bool:
    for job in TRAINERS:
        if running_pods(await operator.pods(job, replica_type="PS")):
            return False
    return True
