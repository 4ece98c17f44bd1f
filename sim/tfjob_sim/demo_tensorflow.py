"""``tfjob-controller demo --tensorflow``: the demo's story with real training.

The simulated cluster runs on its process runtime (every container a real process in its own network namespace,
with cluster DNS and a memory cgroup), and the TFJob is examples/dynamic-workers/tfjob.yaml: a parameter-server
program that trains on while workers are deleted, OOM-killed and rescaled. The narration prints the shared global
step each worker logs (read through pods/log, as ``kubectl logs`` reads it), so one sees a returning or added
worker continue where the job is rather than start over.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import re
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

import controller
from controller.runtime.client import PODS, ApiClient
from controller.tfjob.executor import TFJOBS
from tfjob_sim.demo import DemoFailed, _job, _pods, _running, _show, _until, report, run_story, say

NAME = "mnist"
NS = "default"
INSTALL_HINT = "pip install -e '.[tensorflow]'"
OOM_ON_DEMAND = Path(__file__).resolve().parent / "programs" / "oom_on_demand.py"
STEP = re.compile(r"^step=(\d+) ", re.M)
# Each TensorFlow task spends seconds of CPU importing TensorFlow before its first step.
SLOW = 300.0


def example_dir() -> Path | None:
    """examples/dynamic-workers/ of the checkout the controller runs from (or of the working directory)."""
    for root in (Path(controller.__file__).resolve().parents[1], Path.cwd()):
        candidate = root / "examples" / "dynamic-workers"
        if (candidate / "train.py").is_file() and (candidate / "tfjob.yaml").is_file():
            return candidate
    return None


def preflight() -> tuple[int, str] | None:
    """Why the TensorFlow demo cannot run here, as (exit code, one line), or None."""
    if importlib.util.find_spec("tensorflow") is None:
        return 1, f"TensorFlow is not installed in {sys.executable}; install it with: {INSTALL_HINT}"
    if example_dir() is None:
        return 1, "examples/dynamic-workers/ was not found: run the demo from a checkout installed with pip install -e"
    from tfjob_sim.process.runtime import RuntimeUnavailable, check_available

    try:
        check_available()
    except RuntimeUnavailable as exc:
        return 2, str(exc)
    return None


def job_manifest(example: Path, trigger_dir: Path) -> dict[str, Any]:
    """The example TFJob with 4 workers, run by this Python; workers go through the OOM-on-demand wrapper."""
    job = copy.deepcopy(yaml.safe_load((example / "tfjob.yaml").read_text()))
    job["metadata"] = {"name": NAME, "namespace": NS}
    specs = job["spec"]["tfReplicaSpecs"]
    specs["Worker"]["replicas"] = 4
    for replica_type, spec in specs.items():
        pod_spec = spec["template"]["spec"]
        pod_spec.pop("volumes", None)  # the process runtime reads train.py from the checkout
        container = pod_spec["containers"][0]
        container.pop("volumeMounts", None)
        wrapper = [str(OOM_ON_DEMAND), str(trigger_dir)] if replica_type == "Worker" else []
        container["command"] = [sys.executable, *wrapper, str(example / "train.py")]
        # No checkpoint volume here (popped above): the story is about workers, and worker 0 refuses a
        # CHECKPOINT_DIR that is not a directory.
        env = [
            e
            for e in container.get("env", [])
            if e["name"] != "TRAIN_STEPS" and not e["name"].startswith("CHECKPOINT_")
        ]
        env.append({"name": "TRAIN_STEPS", "value": "100000000"})  # trains until the demo ends
        env.append({"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}})
        container["env"] = env
    return job


async def _log(client: ApiClient, pod: str, *, follow: bool = False) -> str:
    params = {"container": "tensorflow", **({"follow": "true"} if follow else {})}
    _, body = await client.request_raw(
        "GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log", params=params, timeout=SLOW if follow else 30
    )
    return body.decode(errors="replace")


async def _steps(client: ApiClient, pod: str) -> list[int]:
    return [int(s) for s in STEP.findall(await _log(client, pod))]


async def global_step(client: ApiClient) -> int:
    """The highest global step a running worker has logged."""
    found = [0]
    for name in _running(await _pods(client)):
        if "-worker-" in name:
            found += await _steps(client, name)
    return max(found)


async def _first_step(client: ApiClient, pod: str, old_uid: str = "") -> int:
    """Wait until a running ``pod`` other than ``old_uid`` has logged a training step; return its first one."""
    first: list[int] = []

    async def trains() -> bool:
        current = (await _pods(client)).get(pod)
        if current is None or current["metadata"]["uid"] == old_uid or pod not in _running({pod: current}):
            return False
        first[:] = (await _steps(client, pod))[:1]
        return bool(first)

    await _until(f"{pod} trains", trains, timeout=SLOW)
    return first[0]


async def _rejoin(client: ApiClient, pod: str, old_uid: str, before: int) -> None:
    """Wait for ``pod``'s new incarnation to train; it must start at or above ``before`` (the job's step when it
    failed or was added). Says how long that took: pod gone, replacement created and started, TensorFlow imported,
    session opened, first step."""
    since = time.monotonic()
    first = await _first_step(client, pod, old_uid)
    if first < before:
        raise DemoFailed(f"{pod} came back at global step {first}, below the {before} the job had reached")
    say(
        f"   {pod} trains again {time.monotonic() - since:.0f} s later: its first step is global step {first}"
        f" (the job was at {before}: no restart from 0)"
    )


async def demo_tensorflow(time_scale: float | None = None) -> int:
    """The demo's story with the example training program as real processes (the caller checked
    :func:`preflight`). Real processes take real time: the pods' grace periods are the 30 s a SIGTERM
    handler expects, so time is not scaled unless asked."""
    return await run_story(1.0 if time_scale is None else time_scale, narrate_tensorflow, "process")


async def narrate_tensorflow(client: ApiClient, registry: CollectorRegistry) -> None:
    example = example_dir()
    if example is None:
        raise DemoFailed("examples/dynamic-workers/ was not found")
    with TemporaryDirectory(prefix="tfjob-demo-oom-") as trigger:
        await _narrate(client, registry, example, Path(trigger))


async def _narrate(client: ApiClient, registry: CollectorRegistry, example: Path, trigger_dir: Path) -> None:
    say(
        f"\n1. Create TFJob {NAME}: examples/dynamic-workers/tfjob.yaml with 4 workers — a parameter-server"
        f" program, every pod a real TensorFlow process ({sys.executable})."
    )
    await client.create(TFJOBS, job_manifest(example, trigger_dir), namespace=NS)
    for i in range(4):
        await _first_step(client, f"{NAME}-worker-{i}")
    await _show(client)
    start = await global_step(client)
    say(f"   training: global step {start}")

    pods = await _pods(client)
    say("\n2. Someone deletes worker 1 (kubectl delete pod): a replacement rejoins the training.")
    before = await global_step(client)
    await client.delete(PODS, f"{NAME}-worker-1", namespace=NS)
    await _rejoin(client, f"{NAME}-worker-1", pods[f"{NAME}-worker-1"]["metadata"]["uid"], before)
    await _show(client)

    pods = await _pods(client)
    say("\n3. Worker 2 allocates beyond its 2Gi memory limit: the kernel OOM-kills it (exit 137), it is replaced.")
    before = await global_step(client)
    (trigger_dir / pods[f"{NAME}-worker-2"]["metadata"]["uid"]).touch()
    await _rejoin(client, f"{NAME}-worker-2", pods[f"{NAME}-worker-2"]["metadata"]["uid"], before)
    await _show(client)

    say(
        "\n4. Off-peak, and worker 1's node is to be drained: mark it cheapest to lose (pod-deletion-cost -100), then"
        " scale workers to 2: workers 1 and 3 get SIGTERM, finish their step and leave."
    )
    # Follow both logs (kubectl logs -f) from before the scale-down: they end when the processes do.
    endings = {i: asyncio.create_task(_log(client, f"{NAME}-worker-{i}", follow=True)) for i in (1, 3)}
    await client.patch(
        PODS,
        f"{NAME}-worker-1",
        {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-100"}}},
        namespace=NS,
    )
    await client.patch(TFJOBS, NAME, {"spec": {"replicas": 2}}, namespace=NS, subresource="scale")
    stopped = 0
    for i, ending in endings.items():
        last = (await ending).strip().splitlines()[-1]
        say(f"   {NAME}-worker-{i}'s last words: {last}")
        found = re.search(r"step=(\d+)", last)
        stopped = max(stopped, int(found.group(1)) if found else 0)

    async def trains_on() -> bool:
        return await global_step(client) > stopped

    await _until("workers 0 and 2 train on", trains_on, timeout=SLOW)
    await _show(client)
    say(f"   training goes on: global step {await global_step(client)}")

    say("\n5. Peak again: scale workers to 3: the hole at index 1 is refilled, the new worker joins the training.")
    before = await global_step(client)
    await client.patch(TFJOBS, NAME, {"spec": {"replicas": 3}}, namespace=NS, subresource="scale")
    await _rejoin(client, f"{NAME}-worker-1", "", before)
    await _show(client)

    await report(client, registry)
    end = await global_step(client)
    true = {c["type"] for c in (await _job(client))["status"]["conditions"] if c["status"] == "True"}
    if "Running" not in true or true & {"Restarting", "Failed"}:
        raise DemoFailed(f"the job is not (only) Running: {sorted(true)}")
    say(
        f"\nTraining went from global step {start} to {end} through two worker failures and two rescalings, the job"
        " Running throughout. (At TRAIN_STEPS the program ends training: worker 0 exits 0 and the job succeeds.)"
    )

    say(f"\n6. kubectl delete tfjob {NAME}: every pod gets SIGTERM and stops.")
    await client.delete(TFJOBS, NAME, namespace=NS)

    async def gone() -> bool:
        return not await _pods(client)

    await _until("every pod of the job gone", gone, timeout=SLOW)
    say("   no pod left.")
