"""The client-side request limit as `tfjob-controller run` applies it (--kube-api-qps / --kube-api-burst):

- default ``auto`` against a server with API Priority and Fairness (the simulator's default, as
  kube-apiserver's): the first response's APF headers lift the fallback bucket, one info line says so,
  and no later request meets a bucket -- a burst of job creations included;
- ``auto`` against a server without APF (``--no-priority-and-fairness``): the fallback bucket stays, every
  request passes it;
- an explicit ``--kube-api-qps`` against a server with APF: honoured, every request passes the bucket.

Throttling is observed as state, not time: ``rest_client_rate_limiter_duration_seconds`` (client-go's
metric) records one sample per request that went through a bucket. The fallback burst is set to 1 so that
a bucket, had it stayed, would really have made the burst wait. Leader election is off here: its client
has a bucket of its own (tests/runtime/test_client.py), which would add its requests to the same metric.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from controller.runtime.client import PODS, ApiClient
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import CRD_PATH, CRDS, eventually, tfjob
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.processes import ControllerProcess

JOBS = 4
WORKERS = 2
LIFTED = "API Priority and Fairness detected on the server"


def limiter_samples(metrics_text: str, verb: str | None = None) -> float:
    """Requests that went through a client-side bucket (all verbs, or one)."""
    total = 0.0
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "rest_client_rate_limiter_duration_seconds":
            total += sum(
                s.value
                for s in family.samples
                if s.name.endswith("_count") and (verb is None or s.labels["verb"] == verb)
            )
    return total


async def scrape(controller: ControllerProcess) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{controller.metrics_port}/metrics") as response:
            return await response.text()


async def burst_of_jobs(cluster: SimCluster, controller: ControllerProcess) -> int:
    """Create JOBS TFJobs at once and wait for all their pods to run; returns the controller's creates."""
    assert cluster.kubeconfig_path
    async with await ApiClient.from_kubeconfig(cluster.kubeconfig_path, qps=0, user_agent="limit-test") as client:
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await eventually(
            lambda: any(r.get("event") == "starting" for r in controller.events()), what="the controller to start"
        )
        since = len(cluster.faults.requests())
        for i in range(JOBS):
            await client.create(TFJOBS, tfjob(f"limit-{i}", workers=WORKERS), namespace="default")

        async def all_running() -> bool:
            pods = (await client.list(PODS, namespace="default"))["items"]
            return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") == JOBS * WORKERS

        await eventually(all_running, timeout=60, what="every job's pods to run")
    creates = [
        r
        for r in cluster.faults.requests(since)
        if r.verb == "create" and r.user_agent.startswith("tfjob-controller/") and 200 <= r.code < 300
    ]
    return len(creates)


def controller_for(cluster: SimCluster, *args: str) -> ControllerProcess:
    assert cluster.kubeconfig_path
    return ControllerProcess("--kubeconfig", cluster.kubeconfig_path, "--no-leader-elect", "--workers", "2", *args)


def starting(controller: ControllerProcess) -> dict[str, Any]:
    [record] = [r for r in controller.events() if r.get("event") == "starting"]
    return record


@pytest.mark.parametrize("sim_config", [SimConfig(nodes=3, time_scale=0.01)], ids=["apf"])
async def test_auto_lifts_the_limit_on_a_server_with_priority_and_fairness(sim_cluster: SimCluster) -> None:
    async with controller_for(sim_cluster, "--kube-api-burst", "1") as controller:
        creates = await burst_of_jobs(sim_cluster, controller)
        assert creates >= 2 * JOBS * WORKERS  # pods and services: a burst the 1-token fallback would have queued
        lifted = controller.logged(LIFTED)
        assert len(lifted) == 1, controller.stderr[-3000:]
        assert lifted[0]["level"] == "info"
        assert "(X-Kubernetes-PF-FlowSchema-UID): client-side rate limit off; set --kube-api-qps" in lifted[0]["event"]
        assert starting(controller)["kube_api_qps"] == "auto"
        assert starting(controller)["client_limit"] == "off (APF detected)"
        # Only the very first request (GET /version, whose answer showed APF) met the bucket.
        assert limiter_samples(await scrape(controller)) == 1


@pytest.mark.parametrize(
    "sim_config", [SimConfig(nodes=3, time_scale=0.01, priority_and_fairness=False)], ids=["no-apf"]
)
async def test_auto_keeps_the_fallback_bucket_on_a_server_without_priority_and_fairness(
    sim_cluster: SimCluster,
) -> None:
    async with controller_for(sim_cluster, "--kube-api-burst", "1") as controller:
        creates = await burst_of_jobs(sim_cluster, controller)
        assert not controller.logged(LIFTED)
        assert starting(controller)["client_limit"] == (
            "500/s, burst 1 until the server shows API Priority and Fairness"
        )
        assert limiter_samples(await scrape(controller), "POST") >= creates >= 2 * JOBS * WORKERS


@pytest.mark.parametrize("sim_config", [SimConfig(nodes=3, time_scale=0.01)], ids=["apf"])
async def test_an_explicit_qps_is_honoured_on_a_server_with_priority_and_fairness(sim_cluster: SimCluster) -> None:
    async with controller_for(sim_cluster, "--kube-api-qps", "50") as controller:
        creates = await burst_of_jobs(sim_cluster, controller)
        assert not controller.logged(LIFTED)
        assert (starting(controller)["kube_api_qps"], starting(controller)["client_limit"]) == (50.0, "50/s, burst 100")
        assert limiter_samples(await scrape(controller), "POST") >= creates >= 2 * JOBS * WORKERS
