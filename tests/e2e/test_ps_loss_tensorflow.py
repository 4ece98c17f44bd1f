"""A lost parameter server costs seconds, not the training, with real TensorFlow on the process runtime.

The program is tests/e2e/tf_programs/ps_checkpoint.py, written apart from the example: its own checkpoint logic
(an ``.npz`` assembled on an emptyDir, published on a PersistentVolumeClaim by an atomic rename), delivered to every
pod by a ConfigMap volume, and it refuses to run unless those three are real mounts. A dynamic TFJob (chief, PS, 2
workers, ``restartPolicy: Never``) loses its PS twice: deleted, then evicted through the Eviction API. Each time
the controller re-creates the PS at its address, the job stays Running, nobody else is replaced, and the chief
restores a checkpoint at least as new as the last one written before the loss. The claim, of no named storage
class, outlives the job.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from controller.runtime.client import PODS, Resource
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import Operator, eventually, is_true, live, running_pods
from tfjob_sim.cluster import SimConfig

PROGRAM = Path(__file__).resolve().parent / "tf_programs" / "ps_checkpoint.py"
NS = "default"
CONFIGMAPS = Resource("", "v1", "configmaps")
PVCS = Resource("", "v1", "persistentvolumeclaims")
SAVED = re.compile(r"^\[chief 0\] checkpoint step (\d+) ", re.M)
RESTORED = re.compile(r"^\[chief 0\] restored step (\d+) ", re.M)
STEP = re.compile(r"^\[\w+ \d+\] global_step (\d+) ", re.M)
# Starting TensorFlow costs a few CPU seconds per task, many more on a busy 2-core machine.
SLOW = 240.0

pytestmark = [pytest.mark.timeout(1200), pytest.mark.needs("root", "ip", "tensorflow")]


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=3, time_scale=1.0, runtime="process")


def job_manifest() -> dict[str, Any]:
    program = {"name": "program", "mountPath": "/opt/psc-program", "readOnly": True}

    def replica(count: int, *, writer: bool = False) -> dict[str, Any]:
        mounts = [program]
        volumes: list[dict[str, Any]] = [{"name": "program", "configMap": {"name": "psc-program"}}]
        env = [{"name": "PSC_CHECKPOINT_SECONDS", "value": "2"}, {"name": "PSC_STEP_DELAY", "value": "0.02"}]
        if writer:
            mounts += [
                {"name": "checkpoints", "mountPath": "/var/lib/psc-checkpoints"},
                {"name": "scratch", "mountPath": "/var/lib/psc-scratch"},
            ]
            volumes += [
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "psc-checkpoints"}},
                {"name": "scratch", "emptyDir": {}},
            ]
            env += [
                {"name": "PSC_CHECKPOINT_DIR", "value": "/var/lib/psc-checkpoints"},
                {"name": "PSC_SCRATCH_DIR", "value": "/var/lib/psc-scratch"},
            ]
        container = {
            "name": "tensorflow",
            "image": "tensorflow/tensorflow:2.21.0",
            "command": [sys.executable, "/opt/psc-program/ps_checkpoint.py"],
            "env": env,
            "volumeMounts": mounts,
        }
        return {
            "replicas": count,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [container], "volumes": volumes}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "psc", "namespace": NS},
        "spec": {
            "enableDynamicWorker": True,
            "tfReplicaSpecs": {"Chief": replica(1, writer=True), "PS": replica(1), "Worker": replica(2)},
        },
    }


async def log(operator: Operator, pod: str) -> str:
    _, body = await operator.client.request_raw(
        "GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log", params={"container": "tensorflow"}, timeout=30
    )
    return body.decode(errors="replace")


def identities(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in live(pods)}


async def test_a_lost_ps_resumes_from_the_last_checkpoint_and_the_claim_outlives_the_job(operator: Operator) -> None:
    client = operator.client
    program = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "psc-program"}}
    program["data"] = {"ps_checkpoint.py": PROGRAM.read_text()}
    await client.create(CONFIGMAPS, program, namespace=NS)
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "psc-checkpoints"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    await client.create(PVCS, claim, namespace=NS)
    await client.create(TFJOBS, job_manifest(), namespace=NS)
    conditions_seen: set[str] = set()

    async def watch_conditions() -> None:
        job = await operator.job("psc")
        conditions_seen.update(c["type"] for c in job.get("status", {}).get("conditions", []) if c["status"] == "True")

    async def saved_after(step: int) -> int | None:
        await watch_conditions()
        found = [int(s) for s in SAVED.findall(await log(operator, "psc-chief-0"))]
        return max(found) if found and max(found) > step else None

    async def lose_ps(how: str, last: int) -> int:
        """Lose the PS the way ``how`` says once a checkpoint newer than ``last`` exists; the step restored."""
        saved = await eventually(lambda: saved_after(last), SLOW, interval=0.5, what="a new checkpoint")
        before = identities(await operator.pods("psc"))
        restored_before = len(RESTORED.findall(await log(operator, "psc-chief-0")))
        if how == "delete":
            await client.delete(PODS, "psc-ps-0", namespace=NS)
        else:
            eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "psc-ps-0"}}
            await client.create(PODS, eviction, namespace=NS, name="psc-ps-0", subresource="eviction")

        async def restored() -> int | None:
            await watch_conditions()
            found = [int(s) for s in RESTORED.findall(await log(operator, "psc-chief-0"))]
            return found[-1] if len(found) > restored_before else None

        step = await eventually(restored, SLOW, interval=0.5, what=f"the chief restoring after the PS was {how}d")
        # Saved before the loss was requested, so the restored checkpoint is at least as new.
        assert step >= saved, f"restored step {step} is older than checkpoint {saved}, written before the loss"
        after = identities(await operator.pods("psc"))
        assert after["psc-ps-0"] != before["psc-ps-0"], "the PS is a new pod"
        assert {n: u for n, u in after.items() if n != "psc-ps-0"} == {
            n: u for n, u in before.items() if n != "psc-ps-0"
        }, "no other pod was replaced"

        async def trains_past() -> bool:
            logged = [int(s) for s in STEP.findall(await log(operator, "psc-chief-0"))]
            return bool(logged) and logged[-1] > step

        await eventually(trains_past, SLOW, interval=0.5, what="training going on past the restored step")
        return step

    restored = await lose_ps("delete", 0)
    await lose_ps("evict", restored)
    job = await operator.job("psc")
    assert is_true(job, "Running")
    assert not conditions_seen & {"Failed", "Restarting", "Succeeded"}, conditions_seen
    record = job["status"]["dynamicWorkers"]["parameterServers"]["0"]
    assert record["failovers"] == 2 and record["lastReason"] == "Evicted", record

    await client.delete(TFJOBS, "psc", namespace=NS)

    async def gone() -> bool:
        return not running_pods(await operator.pods("psc"))

    await eventually(gone, SLOW, what="the job's pods gone with it")
    kept = await client.get(PVCS, "psc-checkpoints", namespace=NS)
    assert kept["status"]["phase"] == "Bound" and not kept["metadata"].get("deletionTimestamp")
