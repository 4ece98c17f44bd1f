"""The example manifests train as shipped: ``kubectl apply -k manifests/examples/`` (and ``kubectl apply -k
examples/dynamic-workers/``, which it includes), unchanged, on the simulator's process runtime with the controller
running. The image they name, ``tensorflow/tensorflow:2.21.0``, is mapped to this interpreter's environment
(``SimConfig(image_map=...)``, as ``tfjob-controller sim --image`` does), so ``command: [python, /opt/...]`` runs
this interpreter, and the programs reach the pods as the ConfigMap volumes kustomize generates: what a real cluster
does with the same ``kubectl apply -k``.

Every job trains: the task that ends it (worker 0 without a chief, the chief with one) logs global steps in order
until TRAIN_STEPS and succeeds, never restarted, and the job succeeds as its comments say; every other trainer logs
its steps in order (followed from its start: a trainer still running when its job succeeds is removed then; one
whose TensorFlow came up late on a busy machine may log none), and the evaluator reports accuracy.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

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
EVALUATOR = "chief-evaluator-evaluator-0"
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


async def output(operator: Operator, job: str, pod: str) -> str:
    """The pod's whole output, followed from its start until its process ends: a pod still running when its job
    succeeds (a PS, the evaluator, a trainer that had not finished) is removed then (cleanPodPolicy Running)."""

    async def started() -> bool:
        return pod in {p["metadata"]["name"] for p in running_pods(await operator.pods(job))}

    await eventually(started, SLOW, interval=0.2, what=f"{pod} running")
    return await log(operator, pod, follow=True)


async def rendered(kubectl: Any, directory: Path) -> list[str]:
    """What ``kubectl apply -k directory`` names in its output, one per object ``kubectl kustomize`` renders:
    ``<kind>[.<group>]/<name>``, as kubectl prints them."""
    rc, out, err = await kubectl("kustomize", str(directory), timeout=120)
    assert rc == 0, err
    refs = []
    for obj in yaml.safe_load_all(out):
        group = obj["apiVersion"].rpartition("/")[0]
        refs.append(f"{obj['kind'].lower()}{'.' + group if group else ''}/{obj['metadata']['name']}")
    return sorted(refs)


async def test_the_example_manifests_train_as_shipped(operator: Operator, kubectl: Any) -> None:
    objects = await rendered(kubectl, EXAMPLES)
    assert {f"tfjob.kubeflow.org/{job}" for job in TRAINERS} <= set(objects), objects
    assert {"configmap/example-programs", "configmap/dynamic-workers-program"} <= set(objects), objects
    rc, out, err = await kubectl("apply", "-k", str(EXAMPLES), "-n", NS, timeout=120)
    assert rc == 0, err
    assert sorted(out.splitlines()) == [f"{ref} created" for ref in objects], out
    # The dynamic example's own kustomization is some of the same objects: applying it changes nothing.
    dynamic = await rendered(kubectl, DYNAMIC)
    assert set(dynamic) <= set(objects)
    rc, out, err = await kubectl("apply", "-k", str(DYNAMIC), "-n", NS, timeout=120)
    assert rc == 0, err
    assert sorted(out.splitlines()) == [f"{ref} unchanged" for ref in dynamic], out
    followed = {
        pod: asyncio.create_task(output(operator, job, pod))
        for job, pods in {**TRAINERS, "chief-evaluator": [*TRAINERS["chief-evaluator"], EVALUATOR]}.items()
        for pod in pods
    }

    try:
        for job in TRAINERS:
            done = await until_true(operator, job, "Succeeded", timeout=SLOW, interval=0.5)
            assert not is_true(done, "Failed") and not is_true(done, "Restarting"), done["status"]
        outputs = {pod: await asyncio.wait_for(task, SLOW) for pod, task in followed.items()}
    finally:
        for task in followed.values():
            task.cancel()
    for job, trainers in TRAINERS.items():
        finisher = FINISHERS.get(job, f"{job}-worker-0")
        for name in trainers:
            steps = [int(s) for s in STEP.findall(outputs[name])]
            assert steps == sorted(steps), f"{name} logged its steps out of order: {outputs[name][-2000:]}"
            # The finisher trains from the start. Another trainer joins whenever its TensorFlow is up: on a busy
            # machine that can be after the last step (it then only says it finished) or never (removed with the
            # job's other running pods when the finisher is done), so only its order is checked.
            assert steps or name != finisher, f"{name} logged no training step: {outputs[name][-2000:]}"
        # What ended the job trained to the end: it succeeded, and its last words name a global step at
        # TRAIN_STEPS or past it.
        pod = next(p for p in await operator.pods(job) if p["metadata"]["name"] == finisher)
        assert pod["status"]["phase"] == "Succeeded", pod["status"]
        assert [c["restartCount"] for c in pod["status"]["containerStatuses"]] == [0], pod["status"]
        ended = FINISHED.search(outputs[finisher])
        assert ended and int(ended.group(1)) >= _target(pod), f"{finisher} did not finish: {outputs[finisher][-2000:]}"
    # The PS tasks served until the job was done, then were removed with the other pods still running.
    await eventually(lambda: _no_ps_left(operator), 60, interval=0.5, what="every PS removed")

    evaluated = EVAL.findall(outputs[EVALUATOR])
    assert evaluated, f"the evaluator reported no accuracy: {outputs[EVALUATOR][-2000:]}"
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
