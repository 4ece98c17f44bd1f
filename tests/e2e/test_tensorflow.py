"""Real TensorFlow under the real controller: the simulated cluster's process runtime runs every container as a
process (its own network namespace, cluster DNS, memory cgroup), so the TFJob's pods are real TensorFlow tasks
that find each other by the addresses in their TF_CONFIG.

The dynamic job runs examples/dynamic-workers/tfjob.yaml as shipped, except for the command (the runtime
pulls no image: this interpreter and the checkout's train.py) and the training length. One job
lives through every scenario in turn, because each TensorFlow task costs seconds of CPU to start: a deleted, an
OOM-killed (its memory limit) and an evicted worker each get a replacement whose first logged global step is not
below the shared step before the failure, while the other pods keep their uid and restart count and the job
stays Running; a scale-up adds a worker at the shared step; a scale-down stops the highest workers with SIGTERM
and training goes on; the job succeeds when the program finishes. Logs are read through pods/log, as
``kubectl logs`` reads them.
"""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import tfjob_sim
from benchmarks.rejoin import example_job
from controller.runtime.client import PODS
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import Operator, eventually, is_true, live, running_pods, until_true, worker_record
from tests.test_cli import run_cli
from tfjob_sim.cluster import SimConfig
from tfjob_sim.kubelet import EVICT

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "dynamic-workers"
PROGRAMS = Path(__file__).resolve().parent / "tf_programs"
OOM_ON_DEMAND = Path(tfjob_sim.__file__).resolve().parent / "programs" / "oom_on_demand.py"
NS = "default"
STEP = re.compile(r"^step=(\d+) ", re.M)
# Starting TensorFlow costs a few CPU seconds per task, many more on a busy 2-core machine.
SLOW = 240.0

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture
def sim_config() -> SimConfig:
    # Real time: grace periods are the pods' own 30 s, as a SIGTERM-handling program expects. The shared
    # sim_cluster fixture checks that nothing of the process runtime (process, namespace, link, cgroup) is left.
    return SimConfig(nodes=3, time_scale=1.0, runtime="process")


async def log(operator: Operator, pod: str, *, follow: bool = False) -> str:
    """The pod's log through pods/log (``kubectl logs [-f]``); with ``follow`` it returns when the process ends."""
    params = {"container": "tensorflow", **({"follow": "true"} if follow else {})}
    _, body = await operator.client.request_raw(
        "GET", f"/api/v1/namespaces/{NS}/pods/{pod}/log", params=params, timeout=SLOW if follow else 30
    )
    return body.decode(errors="replace")


def steps(text: str) -> list[int]:
    return [int(s) for s in STEP.findall(text)]


async def shared_step(operator: Operator, job: str) -> int:
    """The highest global step any running worker has logged so far."""
    found = [0]
    for pod in running_pods(await operator.pods(job, replica_type="Worker")):
        found += steps(await log(operator, pod["metadata"]["name"]))
    return max(found)


def identity(pods: list[dict[str, Any]]) -> dict[str, tuple[str, int]]:
    """name -> (uid, restart count of the tensorflow container)."""
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(c.get("restartCount", 0) for c in (p.get("status") or {}).get("containerStatuses") or []),
        )
        for p in live(pods)
    }


async def training(operator: Operator, job: str, pod: str) -> list[int]:
    """The steps ``pod`` (of ``job``) has logged, once it has logged one while running."""

    async def logged() -> list[int]:
        names = {p["metadata"]["name"] for p in running_pods(await operator.pods(job))}
        return steps(await log(operator, pod)) if pod in names else []

    return await eventually(logged, SLOW, interval=0.5, what=f"{pod} logs a training step")


class DynamicJob:
    def __init__(self, operator: Operator, name: str) -> None:
        self.operator = operator
        self.name = name

    async def others_untouched(self, before: dict[str, tuple[str, int]], *, except_: set[str]) -> None:
        now = identity(await self.operator.pods(self.name))
        for name, was in before.items():
            if name not in except_:
                assert now.get(name) == was, f"{name} was restarted or replaced: {was} -> {now.get(name)}"
        job = await self.operator.job(self.name)
        assert is_true(job, "Running"), job["status"]
        assert not is_true(job, "Restarting") and not is_true(job, "Failed"), job["status"]

    async def replaced(self, pod: str, old_uid: str, reason: str, before_step: int) -> int:
        """Wait until ``pod`` has a new incarnation that trains; its first logged step must not be below
        ``before_step``. Returns that step."""

        async def new_one_trains() -> list[int]:
            current = {p["metadata"]["name"]: p for p in running_pods(await self.operator.pods(self.name))}
            if pod not in current or current[pod]["metadata"]["uid"] == old_uid:
                return []
            return steps(await log(self.operator, pod))

        first = (await eventually(new_one_trains, SLOW, interval=0.5, what=f"a new {pod} trains"))[0]
        assert first >= before_step, f"{pod} rejoined at global step {first}, below {before_step}"
        index = int(pod.rsplit("-", 1)[1])
        record = worker_record(await self.operator.job(self.name), index)
        assert record is not None and record["lastReason"] == reason, record
        return first


async def test_a_dynamic_job_trains_through_failures_and_rescaling(
    operator: Operator, kubectl: Any, tmp_path: Path
) -> None:
    name = "tf"
    trigger_dir = tmp_path / "oom"
    trigger_dir.mkdir()
    manifest = example_job(
        name,
        workers=3,
        dynamic=True,
        steps=10**9,
        worker_command=[str(OOM_ON_DEMAND), str(trigger_dir)],
    )
    await operator.client.create(TFJOBS, manifest, namespace=NS)
    job = DynamicJob(operator, name)
    for i in range(3):
        await training(operator, name, f"{name}-worker-{i}")
    assert is_true(await operator.job(name), "Running")

    # kubectl delete pod: the replacement rejoins at the shared global step.
    pods = identity(await operator.pods(name))
    before = await shared_step(operator, name)
    rc, _, err = await kubectl("delete", "pod", f"{name}-worker-1", "--wait=false")
    assert rc == 0, err
    await job.replaced(f"{name}-worker-1", pods[f"{name}-worker-1"][0], "Deleted", before)
    await job.others_untouched(pods, except_={f"{name}-worker-1"})

    # Over its memory limit: the kernel kills it (137, OOMKilled) and it is replaced.
    pods = identity(await operator.pods(name))
    before = await shared_step(operator, name)
    (trigger_dir / pods[f"{name}-worker-2"][0]).touch()
    await job.replaced(f"{name}-worker-2", pods[f"{name}-worker-2"][0], "OOMKilled", before)
    await job.others_untouched(pods, except_={f"{name}-worker-2"})

    # Scale 3 -> 4: the new worker starts at the shared step.
    pods = identity(await operator.pods(name))
    before = await shared_step(operator, name)
    rc, _, err = await kubectl("scale", f"tfjob/{name}", "--replicas=4")
    assert rc == 0, err
    assert (await training(operator, name, f"{name}-worker-3"))[0] >= before
    await job.others_untouched(pods, except_=set())

    # Scale 4 -> 2: workers 2 and 3 are stopped with SIGTERM (their program says so as it exits), and the
    # others train on.
    pods = identity(await operator.pods(name))
    endings = [asyncio.create_task(log(operator, f"{name}-worker-{i}", follow=True)) for i in (2, 3)]
    rc, _, err = await kubectl("scale", f"tfjob/{name}", "--replicas=2")
    assert rc == 0, err
    stopped_at = 0
    for i, ending in zip((2, 3), endings, strict=True):
        last = (await ending).strip().splitlines()[-1]
        stopped = re.fullmatch(rf"event=stopped step=(\d+) worker={i} reason=SIGTERM", last)
        assert stopped, f"worker {i} did not stop on SIGTERM; its last line: {last!r}"
        stopped_at = max(stopped_at, int(stopped.group(1)))

    async def scaled_down() -> bool:
        names = sorted(p["metadata"]["name"] for p in await operator.pods(name, replica_type="Worker"))
        return names == [f"{name}-worker-0", f"{name}-worker-1"]

    await eventually(scaled_down, SLOW, what="workers 2 and 3 gone")
    await eventually(lambda: _above(operator, name, stopped_at), SLOW, interval=0.5, what="workers 0 and 1 train on")
    await job.others_untouched(pods, except_={f"{name}-worker-2", f"{name}-worker-3"})

    # Evicted (node pressure): the replacement of worker 0 rejoins at the shared step. TRAIN_STEPS is read when
    # a task starts; lowered in the template to just above the shared step, it makes this replacement the one
    # that ends training, and the job succeeds when it does (the others are removed: cleanPodPolicy Running).
    pods = identity(await operator.pods(name))
    before = await shared_step(operator, name)
    # Far enough above the shared step that worker 1, training alone meanwhile (at most 20 steps a second),
    # cannot reach it before the replacement has started TensorFlow and joined, even on a busy machine (about a
    # minute of margin): a replacement that joined at or past the target would finish at once, never log a step.
    target = before + 1200
    index = next(
        i
        for i, e in enumerate(manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"])
        if e["name"] == "TRAIN_STEPS"
    )
    rc, _, err = await kubectl(
        "patch", f"tfjob/{name}", "--type=json", "-p",
        f'[{{"op":"replace","path":"/spec/tfReplicaSpecs/Worker/template/spec/containers/0/env/{index}/value",'
        f'"value":"{target}"}}]',
    )  # fmt: skip
    assert rc == 0, err
    await operator.client.patch(PODS, f"{name}-worker-0", {"metadata": {"annotations": {EVICT: "true"}}}, namespace=NS)
    await job.replaced(f"{name}-worker-0", pods[f"{name}-worker-0"][0], "Evicted", before)
    await job.others_untouched(pods, except_={f"{name}-worker-0"})
    what = "the job Succeeded when worker 0 finished training"
    done = await until_true(operator, name, "Succeeded", timeout=SLOW, interval=0.5, what=what)
    assert not is_true(done, "Failed"), done["status"]
    worker_0 = {p["metadata"]["name"]: p for p in await operator.pods(name)}[f"{name}-worker-0"]
    assert worker_0["status"]["phase"] == "Succeeded", worker_0["status"]
    ended = re.search(r"^event=finished step=(\d+) worker=0$", await log(operator, f"{name}-worker-0"), re.M)
    assert ended and int(ended.group(1)) >= target


async def _above(operator: Operator, job: str, step: int) -> bool:
    return await shared_step(operator, job) > step


async def test_the_same_program_as_a_static_job_trains_to_success(operator: Operator) -> None:
    manifest = example_job("static", workers=2, dynamic=False, steps=300, worker_command=[])
    await operator.client.create(TFJOBS, manifest, namespace=NS)
    done = await until_true(operator, "static", "Succeeded", timeout=SLOW * 2, interval=0.5)
    assert not is_true(done, "Failed") and not is_true(done, "Restarting"), done["status"]
    assert done["status"]["replicaStatuses"]["Worker"].get("succeeded", 0) >= 1, done["status"]


async def test_an_independently_written_program_rejoins_after_its_worker_is_deleted(
    operator: Operator, kubectl: Any
) -> None:
    def replica(count: int) -> dict[str, Any]:
        container = {
            "name": "tensorflow",
            "image": "ignored",
            "command": [sys.executable, str(PROGRAMS / "logistic.py")],
        }
        return {"replicas": count, "restartPolicy": "ExitCode", "template": {"spec": {"containers": [container]}}}

    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "logistic", "namespace": NS},
        "spec": {
            "enableDynamicWorker": True,
            "runPolicy": {"cleanPodPolicy": "Running"},
            "tfReplicaSpecs": {"PS": replica(1), "Worker": replica(2)},
        },
    }
    await operator.client.create(TFJOBS, manifest, namespace=NS)
    pattern = re.compile(r"^\[worker \d+\] global_step (\d+) ", re.M)

    async def logged(pod: str, not_uid: str = "") -> list[int]:
        current = {p["metadata"]["name"]: p for p in running_pods(await operator.pods("logistic"))}
        if pod not in current or current[pod]["metadata"]["uid"] == not_uid:
            return []
        return [int(s) for s in pattern.findall(await log(operator, pod))]

    for i in (0, 1):
        await eventually(lambda i=i: logged(f"logistic-worker-{i}"), SLOW, interval=0.5, what=f"worker {i} trains")
    pods = identity(await operator.pods("logistic"))
    before = max([*await logged("logistic-worker-0"), *await logged("logistic-worker-1")])
    rc, _, err = await kubectl("delete", "pod", "logistic-worker-1", "--wait=false")
    assert rc == 0, err
    old = pods["logistic-worker-1"][0]
    first = (await eventually(lambda: logged("logistic-worker-1", old), SLOW, interval=0.5, what="worker 1 rejoins"))[0]
    assert first >= before, f"the replacement started at global step {first}, below {before}"
    assert identity(await operator.pods("logistic"))["logistic-worker-0"] == pods["logistic-worker-0"]
    assert identity(await operator.pods("logistic"))["logistic-ps-0"] == pods["logistic-ps-0"]


async def test_a_targeted_scale_down_removes_the_chosen_worker_and_a_scale_up_brings_it_back(
    operator: Operator, kubectl: Any
) -> None:
    """4 workers; worker 1 is marked cheapest to lose and the job scaled to 3: worker 1 stops on SIGTERM, workers
    0, 2 and 3 keep their pods and train on past the step it stopped at; scaled back to 4, index 1 (the hole)
    comes back and joins at the shared step."""
    name = "pick"
    manifest = example_job(name, workers=4, dynamic=True, steps=10**9, worker_command=[])
    await operator.client.create(TFJOBS, manifest, namespace=NS)
    job = DynamicJob(operator, name)
    for i in range(4):
        await training(operator, name, f"{name}-worker-{i}")

    pods = identity(await operator.pods(name))
    ending = asyncio.create_task(log(operator, f"{name}-worker-1", follow=True))
    rc, _, err = await kubectl("annotate", "pod", f"{name}-worker-1", "controller.kubernetes.io/pod-deletion-cost=-100")
    assert rc == 0, err
    rc, _, err = await kubectl("scale", f"tfjob/{name}", "--replicas=3")
    assert rc == 0, err
    last = (await ending).strip().splitlines()[-1]
    stopped = re.fullmatch(r"event=stopped step=(\d+) worker=1 reason=SIGTERM", last)
    assert stopped, f"worker 1 did not stop on SIGTERM; its last line: {last!r}"
    stopped_at = int(stopped.group(1))

    async def hole_at_one() -> bool:
        names = sorted(p["metadata"]["name"] for p in await operator.pods(name, replica_type="Worker"))
        return names == [f"{name}-worker-{i}" for i in (0, 2, 3)]

    await eventually(hole_at_one, SLOW, what="worker 1 gone, workers 0, 2 and 3 left")
    assert (await operator.job(name))["status"]["dynamicWorkers"]["members"] == [0, 2, 3]

    async def each_trains_on() -> bool:
        logs = [steps(await log(operator, f"{name}-worker-{i}")) for i in (0, 2, 3)]
        return all(found and max(found) > stopped_at for found in logs)

    await eventually(each_trains_on, SLOW, interval=0.5, what="workers 0, 2 and 3 train past worker 1's last step")
    await job.others_untouched(pods, except_={f"{name}-worker-1"})

    pods = identity(await operator.pods(name))
    before = await shared_step(operator, name)
    rc, _, err = await kubectl("scale", f"tfjob/{name}", "--replicas=4")
    assert rc == 0, err
    assert (await training(operator, name, f"{name}-worker-1"))[0] >= before, "index 1 rejoined below the shared step"
    assert (await operator.job(name))["status"]["dynamicWorkers"]["members"] == [0, 1, 2, 3]
    await job.others_untouched(pods, except_=set())


async def test_the_tensorflow_demo_tells_its_story() -> None:
    rc, out, err = await run_cli("demo", "--tensorflow", timeout=900)
    assert rc == 0, out + err
    for i in (1, 2):  # deleted, OOM-killed: each came back at the shared step (the demo checks >= before)
        assert re.search(
            rf"^   mnist-worker-{i} trains again \d+ s later: its first step is global step \d+ \(the job was at \d+",
            out,
            re.M,
        )
    for i in (1, 3):
        assert re.search(
            rf"mnist-worker-{i}'s last words: event=stopped step=\d+ worker={i} reason=SIGTERM$", out, re.M
        )
    assert "tfjob_worker_failovers_total{job_namespace=default,reason=OOMKilled} 1" in out
    assert out.rstrip().endswith("no pod left."), out


async def test_the_tensorflow_demo_without_tensorflow_says_how_to_install_it() -> None:
    # This interpreter has TensorFlow; hide it from the import system as if it had not.
    code = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"
        "from controller.cli import main\n"
        "sys.exit(main(['demo', '--tensorflow']))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1 and out == b""
    assert err.decode().splitlines() == [
        f"tfjob-controller demo --tensorflow: TensorFlow is not installed in {sys.executable}; install it with:"
        " pip install -e '.[tensorflow]'"
    ]
