"""Events users can find after a burst: 300 TFJobs created at once each get their creation Events (a
SuccessfulCreatePod per pod, a SuccessfulCreateService per service), none is dropped, and `kubectl describe
tfjob` shows them.

Two workers a job make ~6 Events per job, ~1,800 in all within seconds: more than a 1,000-slot queue
behind a writer paced at 50/s (the recorder before) kept, which dropped the excess.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest

from controller.runtime.client import EVENTS
from controller.runtime.events import DROP_REASONS
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import eventually, is_true, running_operator, tfjob
from tfjob_sim.cluster import SimCluster, SimConfig

JOBS = 300
WORKERS = 2
pytestmark = pytest.mark.timeout(300)  # 300 jobs in one process with the simulator: ~1 min on a busy machine


@pytest.fixture
def sim_config() -> SimConfig:
    # 110 pods a node; Events live an hour of real time (the TTL is simulated time, 100x faster here)
    return SimConfig(nodes=8, time_scale=0.01, event_ttl_seconds=360_000)


async def test_every_job_of_a_burst_has_its_creation_events(sim_cluster: SimCluster, kubectl: Any) -> None:
    async with running_operator(sim_cluster, workers=16) as operator:
        names = [f"burst-{i}" for i in range(JOBS)]
        for name in names:
            await operator.client.create(TFJOBS, tfjob(name, workers=WORKERS), namespace="default")

        async def all_running() -> bool:
            jobs = (await operator.client.list(TFJOBS, namespace="default"))["items"]
            return sum(1 for job in jobs if is_true(job, "Running")) == JOBS

        await eventually(all_running, timeout=180, interval=0.5, what="every job Running")
        recorder = operator.controller.recorder
        await eventually(lambda: recorder.queued == 0, timeout=120, interval=0.2, what="every event written")

        by_job: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        for event in (await operator.client.list(EVENTS, namespace="default"))["items"]:
            involved = event.get("involvedObject") or {}
            if involved.get("kind") == "TFJob":
                by_job[involved["name"]][event["reason"]].add(event["message"])
        for name in names:
            pods = {f"Created pod: {name}-worker-{i}" for i in range(WORKERS)}
            services = {f"Created service: {name}-worker-{i}" for i in range(WORKERS)}
            assert by_job[name]["SuccessfulCreatePod"] == pods, (name, dict(by_job[name]))
            assert by_job[name]["SuccessfulCreateService"] == services, (name, dict(by_job[name]))
        # Every reason's series exists from the start: a renamed metric or reason fails here instead of reading 0.
        dropped = {reason: operator.metric("events_dropped_total", {"reason": reason}) for reason in DROP_REASONS}
        assert dropped == dict.fromkeys(DROP_REASONS, 0.0), dropped

    rc, out, err = await kubectl("describe", "tfjob", names[-1])
    assert rc == 0, err
    events = out.split("Events:", 1)[1]
    assert "SuccessfulCreatePod" in events and f"Created pod: {names[-1]}-worker-1" in events
    assert "SuccessfulCreateService" in events
