"""Spec sequences against the oracle: what a user does to a dynamic TFJob, done on the simulated cluster with a
controller process, and after each settled step the cluster compared with :mod:`benchmarks.chaos.oracle`.

:class:`SpecRunner` holds one job's story on a running :class:`~benchmarks.chaos.systematic.World`:
:meth:`SpecRunner.step` applies one step of the oracle's vocabulary (create, a spec change, a deletion-cost
annotation, a pod disruption, the job's deletion) and :meth:`SpecRunner.batch` several spec changes at once,
without waiting in between; each then waits until the cluster matches one of the outcomes the oracle allows
(and the controller is idle), or fails with the difference. :func:`random_story` draws a seeded story;
tests/reliability/test_spec_sequences.py draws them with hypothesis, which shrinks a failing one.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.chaos.invariants import conditions, live
from benchmarks.chaos.oracle import (
    Create,
    DeleteJob,
    Disrupt,
    Expected,
    Record,
    SetCost,
    SetSpec,
    Spec,
    Step,
    apply,
    outcomes,
)
from benchmarks.chaos.scenarios import COST, NAMESPACE, TFJOBS, Scenario, annotate, delete_pod, evict_pod
from benchmarks.chaos.systematic import OBSERVE_INTERVAL, SETTLE_STREAK, Controller, Snapshot, World
from tfjob_sim.kubelet import EXIT_CODE

SETTLE_SECONDS = 30.0


class OracleMismatch(AssertionError):
    """The cluster settled somewhere the oracle does not allow."""


def manifest(job: str, spec: Spec) -> dict[str, Any]:
    """The TFJob of ``spec``: dynamic, restartPolicy ExitCode (an OOM kill is a retryable own failure)."""

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "ExitCode",
            "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]}},
        }

    specs = {"Worker": replica(spec.workers)}
    if spec.ps:
        specs["PS"] = replica(spec.ps)
    body: dict[str, Any] = {"tfReplicaSpecs": specs, "enableDynamicWorker": True, "runPolicy": run_policy(spec)}
    if spec.workers_to_delete:
        body["workersToDelete"] = list(spec.workers_to_delete)
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": job, "namespace": NAMESPACE},
        "spec": body,
    }


def run_policy(spec: Spec) -> dict[str, Any]:
    return {"suspend": spec.suspend, **dict(spec.run_policy)}


@dataclass
class Observed:
    """What the cluster shows of one job, in the oracle's terms."""

    exists: bool
    pods: list[str]  # live pods
    services: list[str]
    members: tuple[int, ...] | None
    active: dict[str, int]
    true_conditions: set[str]
    workers: dict[int, Record]
    parameter_servers: dict[int, Record]
    uids: dict[str, str]  # live pod name -> uid

    def __str__(self) -> str:
        return (
            f"pods {self.pods}, services {self.services}, members {self.members}, active {self.active}, "
            f"conditions {sorted(self.true_conditions)}, worker records {self.workers}, PS records "
            f"{self.parameter_servers}"
        )


def _records(raw: Mapping[str, Any] | None) -> dict[int, Record]:
    out = {}
    for index, r in (raw or {}).items():
        if isinstance(r, Mapping):
            out[int(index)] = Record(
                int(r.get("failovers", 0)), str(r.get("lastReason", "")), int(r.get("failures", 0))
            )
    return out


def observe(snap: Snapshot) -> Observed:
    job = snap.job
    status = (job or {}).get("status") or {}
    dynamic = status.get("dynamicWorkers") or {}
    live_pods = [p for p in snap.pods if live(p)]
    members = dynamic.get("members")
    return Observed(
        exists=job is not None,
        pods=sorted(p["metadata"]["name"] for p in live_pods),
        services=sorted(s["metadata"]["name"] for s in snap.services if not s["metadata"].get("deletionTimestamp")),
        members=tuple(members) if isinstance(members, list) else None,
        active={rt: int((e or {}).get("active", 0)) for rt, e in (status.get("replicaStatuses") or {}).items()},
        true_conditions={t for t, c in conditions(job).items() if c.get("status") == "True"} if job else set(),
        workers=_records(dynamic.get("workers")),
        parameter_servers=_records(dynamic.get("parameterServers")),
        uids={p["metadata"]["name"]: p["metadata"]["uid"] for p in live_pods},
    )


def differences(
    expected: Expected, seen: Observed, job: str, before: Expected, before_uids: Mapping[str, str]
) -> list[str]:
    """Why ``seen`` is not the settled state ``expected`` (empty: it is)."""
    out = []
    if seen.exists != expected.exists:
        return [f"job exists: {seen.exists}, expected {expected.exists}"]
    pods = expected.pods(job)
    if seen.pods != pods:
        out.append(f"pods {seen.pods}, expected {pods}")
    if seen.services != pods:
        out.append(f"services {seen.services}, expected {pods}")
    if not expected.exists:
        return out
    if seen.members != expected.members:
        out.append(f"members {seen.members}, expected {expected.members}")
    active = expected.active()
    if {k: seen.active.get(k, 0) for k in active} != active:
        out.append(f"active {seen.active}, expected {active}")
    wrong = {"Failed", "Succeeded", "Running" if expected.spec.suspend else "Suspended"}
    if not expected.true_conditions() <= seen.true_conditions or wrong & seen.true_conditions:
        out.append(f"true conditions {sorted(seen.true_conditions)}, expected {sorted(expected.true_conditions())}")
    if not _same_records(expected.workers, seen.workers):
        out.append(f"worker records {seen.workers}, expected {expected.workers}")
    if not _same_records(expected.parameter_servers, seen.parameter_servers):
        out.append(f"PS records {seen.parameter_servers}, expected {expected.parameter_servers}")
    for name in pods:
        old = before_uids.get(name)
        if old is None:
            continue
        same = expected.generations.get(name) == before.generations.get(name)
        if same and seen.uids.get(name) not in (None, old):
            out.append(f"{name} was replaced, but nothing asked for it")
        if not same and seen.uids.get(name) == old:
            out.append(f"{name} not replaced yet")
    return out


def _same_records(expected: Mapping[int, Record], seen: Mapping[int, Record]) -> bool:
    """Equal, except that an eviction may be recorded as a deletion: an evicted pod that is gone before the
    controller looks at it tells nothing of its eviction any more, and docs/tfjob-compatibility.md (section 3.3)
    records a pod that vanishes as Deleted. Only the last reason can be told apart so."""
    if expected.keys() != seen.keys():
        return False
    return all(
        e == s or (e.last_reason == "Evicted" and s == Record(e.failovers, "Deleted", e.failures))
        for e, s in ((expected[i], seen[i]) for i in expected)
    )


class SpecRunner:
    """One job's story on ``world`` (see the module docstring)."""

    def __init__(self, world: World, controller: Controller, job: str, settle_seconds: float = SETTLE_SECONDS) -> None:
        self.world = world
        self.controller = controller
        self.job = job
        self.settle_seconds = settle_seconds
        self.state = Expected(exists=False)
        self.history: list[Step | list[SetSpec]] = []
        self.uids: dict[str, str] = {}

    async def step(self, step: Step) -> None:
        self.history.append(step)
        before = self.state
        await self._do(step)
        await self._settle([apply(before, step, self.job)], before)

    async def batch(self, steps: Sequence[SetSpec]) -> None:
        """Spec changes made one after the other without waiting: any outcome :func:`outcomes` allows."""
        self.history.append(list(steps))
        before = self.state
        for step in steps:
            await self._do(step)
        await self._settle(outcomes(before, steps, self.job), before)

    async def _do(self, step: Step) -> None:
        api, job = self.world.api, self.job
        if isinstance(step, Create):
            await api.call("POST", TFJOBS, manifest(job, step.spec), tolerate=())
        elif isinstance(step, SetSpec):
            spec = step.spec
            patch = {
                "spec": {
                    "tfReplicaSpecs": {"Worker": {"replicas": spec.workers}},
                    "workersToDelete": list(spec.workers_to_delete) or None,
                    "runPolicy": run_policy(spec),
                }
            }
            await api.call("PATCH", f"{TFJOBS}/{job}", patch, content_type="application/merge-patch+json", tolerate=())
        elif isinstance(step, SetCost):
            if step.index in self.state.members and not self.state.spec.suspend:
                await annotate(self.world, f"{job}-worker-{step.index}", {COST: step.cost})  # type: ignore[dict-item]
        elif isinstance(step, Disrupt):
            if self.state.spec.suspend or (
                step.index not in self.state.members
                if step.replica_type == "Worker"
                else step.index >= self.state.spec.ps
            ):
                return  # a story drawn ahead of time named a slot this outcome does not have: nothing to disrupt
            name = f"{job}-{step.replica_type.lower()}-{step.index}"
            if step.kind == "delete":
                await delete_pod(self.world, name)
            elif step.kind == "evict":
                await evict_pod(self.world, name)
            else:
                await annotate(self.world, name, {EXIT_CODE: "137"})
        elif isinstance(step, DeleteJob):
            await api.call("DELETE", f"{TFJOBS}/{job}", {"propagationPolicy": "Foreground"}, tolerate=())

    async def _settle(self, allowed: list[Expected], before: Expected) -> None:
        assert self.world.session is not None
        deadline = time.monotonic() + self.settle_seconds
        streak, match = 0, None
        problems: list[list[str]] = []
        seen: Observed | None = None
        while True:
            seen = observe(await self.world.snapshot(job=self.job))
            problems = [differences(e, seen, self.job, before, self.uids) for e in allowed]
            match = next((e for e, p in zip(allowed, problems, strict=True) if not p), None)
            idle = match is not None and await self.controller.idle(self.world.session)
            streak = streak + 1 if idle else 0
            if streak >= SETTLE_STREAK:
                break
            if time.monotonic() > deadline:
                shown = "; ".join(f"outcome {n + 1}: {p}" for n, p in enumerate(problems))
                raise OracleMismatch(f"{self.job} after {self.history[-1]}: {seen} -- {shown}")
            await asyncio.sleep(OBSERVE_INTERVAL)
        assert match is not None and seen is not None
        self.state = match
        self.uids = seen.uids


# --- seeded stories --------------------------------------------------------------------------------------
RUN_POLICY_CHANGES = (
    ("cleanPodPolicy", "All"),
    ("cleanPodPolicy", "None"),
    ("backoffLimit", 3),
    ("activeDeadlineSeconds", 86400),
    ("ttlSecondsAfterFinished", 600),
)


def random_story(seed: int, length: int = 8, max_workers: int = 5) -> list[Step | list[SetSpec]]:
    """A seeded story of ``length`` steps after the creation: spec changes (alone or two or three at once), cost
    annotations, disruptions, suspend and resume, other runPolicy fields; the last step may delete the job. Always
    at least one worker (a job resumed without workers never runs, and has no Running condition to compare)."""
    rng = random.Random(f"spec-story-{seed}")
    spec = Spec(workers=rng.randint(1, max_workers), ps=rng.choice([0, 1]))
    story: list[Step | list[SetSpec]] = [Create(spec)]
    state = apply(Expected(exists=False), Create(spec), "j")
    for _ in range(length):
        kind = rng.choices(["scale", "batch", "cost", "disrupt", "suspend", "policy"], [4, 2, 2, 3, 1, 1])[0]
        if kind in ("scale", "batch"):
            changes = []
            for _ in range(1 if kind == "scale" else rng.randint(2, 3)):
                spec = _scaled(rng, spec, state, max_workers)
                changes.append(SetSpec(spec))
            story.append(changes[0] if kind == "scale" else changes)
            state = outcomes(state, changes, "j")[-1]
        elif kind == "cost" and state.members and not spec.suspend:
            step: Step = SetCost(rng.choice(state.members), rng.choice(["-100", "50", "0", None, "x"]))
            story.append(step)
            state = apply(state, step, "j")
        elif kind == "disrupt" and not spec.suspend and (state.members or spec.ps):
            if spec.ps and (not state.members or rng.random() < 0.25):
                step = Disrupt("PS", 0, rng.choice(["delete", "evict"]))
            else:
                step = Disrupt("Worker", rng.choice(state.members), rng.choice(["delete", "evict", "oom"]))
            story.append(step)
            state = apply(state, step, "j")
        elif kind == "suspend":
            spec = Spec(spec.workers, spec.ps, spec.workers_to_delete, not spec.suspend, spec.run_policy)
            story.append(SetSpec(spec))
            state = apply(state, SetSpec(spec), "j")
        else:
            change = rng.choice(RUN_POLICY_CHANGES)
            policy = tuple(sorted({**dict(spec.run_policy), change[0]: change[1]}.items()))
            spec = Spec(spec.workers, spec.ps, spec.workers_to_delete, spec.suspend, policy)
            story.append(SetSpec(spec))
            state = apply(state, SetSpec(spec), "j")
    if rng.random() < 0.3:
        story.append(DeleteJob())
    return story


def _scaled(rng: random.Random, spec: Spec, state: Expected, max_workers: int) -> Spec:
    # At least one worker: a resumed job with no worker never runs, so it has no Running condition to compare.
    workers = rng.randint(1, max_workers)
    listed: tuple[int, ...] = spec.workers_to_delete
    roll = rng.random()
    if roll < 0.35 and state.members:
        listed = tuple(rng.sample(list(state.members), rng.randint(1, min(2, len(state.members)))))
    elif roll < 0.55:
        listed = ()
    return Spec(workers, spec.ps, listed, spec.suspend, spec.run_policy)


async def play(runner: SpecRunner, story: Sequence[Step | list[SetSpec]]) -> None:
    for item in story:
        if isinstance(item, list):
            await runner.batch(item)
        else:
            await runner.step(item)


def _nothing(*_args: Any) -> list[str]:
    return []


async def _no_action(*_args: Any) -> None:
    return None


STORIES = Scenario(
    "spec-sequences",
    "seq",
    lambda: {},
    _nothing,
    _no_action,
    _nothing,
    description="seeded or hypothesis-drawn stories of spec changes and disruptions, judged by the oracle",
)
"""The World's scenario for spec stories: it creates nothing itself; each story names its own job."""


async def play_seeded(world: World, controller: Controller, seed: int, length: int = 8) -> list[str]:
    """Play ``random_story(seed)`` as job ``seq-<seed>``; returns the mismatch (empty: the oracle agreed)."""
    runner = SpecRunner(world, controller, f"seq-{seed}")
    try:
        await play(runner, random_story(seed, length))
    except OracleMismatch as exc:
        return [str(exc)]
    return []
