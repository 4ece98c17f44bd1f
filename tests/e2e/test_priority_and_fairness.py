"""The controller against an API server that pushes back: API Priority and Fairness with limits small enough
that a burst of jobs overflows its priority level.

The controller runs as its ServiceAccount (the secure cluster), so kube-apiserver's bootstrap FlowSchemas put
it in ``service-accounts`` -> ``workload-low``; with ``--max-requests-inflight 1
--max-mutating-requests-inflight 1`` that level has one seat, and with ``--request-timeout 0.8`` a request waits
at most 0.2 s in its queue. Every create of the controller holds its seat 30 ms (injected latency), so a burst
of creates queues past that and is answered 429 with Retry-After. The controller must see those 429s, retry
them after the server's Retry-After, and bring every job to Running with none Failed; meanwhile another
ServiceAccount of the same level is served in its turn, never rejected.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp
import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families

from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import Operator, eventually, is_true, running_operator, running_pods, tfjob
from tfjob_sim.cluster import SimCluster, SimConfig

JOBS = 12
WORKERS = 2
TIGHT = SimConfig(
    nodes=3,
    time_scale=0.01,
    secure=True,
    max_requests_inflight=1,
    max_mutating_requests_inflight=1,
    request_timeout=0.8,
)


def server_rejections(cluster: SimCluster) -> dict[str, float]:
    """The simulator's apiserver_flowcontrol_rejected_requests_total of the controller's flow, by reason."""
    assert cluster.server.flow_control is not None
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(cluster.server.flow_control.metrics_text()):
        for s in family.samples:
            if s.name == "apiserver_flowcontrol_rejected_requests_total" and s.labels["flow_schema"] == (
                "service-accounts"
            ):
                assert s.labels["priority_level"] == "workload-low"
                out[s.labels["reason"]] = out.get(s.labels["reason"], 0) + s.value
    out.pop("cancelled", None)  # a client that went away while queued (the neighbour, stopped): no 429 sent
    return out


def client_counter(operator: Operator, name: str, code: str) -> float:
    total = 0.0
    for metric in operator.registry.collect():
        for s in metric.samples:
            if s.name == name and s.labels.get("code") == code:
                total += s.value
    return total


@pytest.fixture
def sim_config() -> SimConfig:
    return TIGHT


async def test_a_burst_against_tight_limits_is_throttled_retried_and_completes(sim_cluster: SimCluster) -> None:
    """... and the controller is no bad neighbour: another ServiceAccount of the same priority level (another
    flow) polling the server meanwhile gets its turn at every freed seat, so none of its requests waits out
    the queue limit (no 429) while the controller's do."""
    assert sim_cluster.server.auth is not None
    sim_cluster.store.create("serviceaccounts", "default", {"metadata": {"name": "neighbour"}})
    token = sim_cluster.server.auth.token_for("default", "neighbour", 3600)
    assert sim_cluster.secure is not None
    context = ssl.create_default_context(cadata=sim_cluster.secure.ca_cert.decode())
    neighbour: list[int] = []
    async with running_operator(sim_cluster, workers=8) as operator:
        sim_cluster.faults.add_latency(0.03, "create", "*", user_agent="tfjob-controller")

        async def poll(http: aiohttp.ClientSession) -> None:
            while True:
                headers = {"Authorization": f"Bearer {token}"}
                async with http.get(sim_cluster.url + "/version", headers=headers, ssl=context) as response:
                    await response.read()
                    neighbour.append(response.status)
                await asyncio.sleep(0.02)  # a polling client's period, not synchronisation

        async with aiohttp.ClientSession() as http, anyio.create_task_group() as tg:
            tg.start_soon(poll, http)
            for i in range(JOBS):
                await operator.client.create(TFJOBS, tfjob(f"apf-{i}", workers=WORKERS), namespace="default")
            await eventually(lambda: sum(server_rejections(sim_cluster).values()) > 0, timeout=60, what="a 429")
            tg.cancel_scope.cancel()
        assert neighbour and set(neighbour) == {200}, sorted(set(neighbour))

        async def all_running() -> bool:
            for i in range(JOBS):
                job = await operator.job(f"apf-{i}")
                assert not is_true(job, "Failed"), job["status"]
                if not is_true(job, "Running") or len(running_pods(await operator.pods(f"apf-{i}"))) != WORKERS:
                    return False
            return True

        await eventually(all_running, timeout=120, interval=0.2, what="every job Running despite the 429s")
        rejected = server_rejections(sim_cluster)
        assert sum(rejected.values()) > 0, "the server never pushed back: the limits are not tight enough"
        # The controller saw them as 429s and retried them (after Retry-After: controller.runtime.client). The
        # server counts a rejection before it answers and the client once it has read the answer, and the
        # controller may still be writing events: wait for the client's count to reach the server's.
        await eventually(
            lambda: (
                client_counter(operator, "rest_client_requests_total", "429")
                >= sum(server_rejections(sim_cluster).values())
            ),
            timeout=60,
            interval=0.2,
            what="the controller's 429 count reaching the server's",
        )
        assert client_counter(operator, "rest_client_request_retries_total", "429") > 0
        jobs: list[dict[str, Any]] = [await operator.job(f"apf-{i}") for i in range(JOBS)]
        assert not any(is_true(job, "Failed") for job in jobs)
