"""A real Prometheus scraping ``tfjob-controller run`` and a foreign exporter, and a scenario to play.

Shared by tests/ops/test_prometheus.py (which checks that every dashboard query and alert tells the truth)
and benchmarks/render_dashboards.py (which draws the README's dashboard images from the same run).

- :class:`Prometheus`: the Debian ``prometheus`` binary as a subprocess on a free loopback port, a temporary
  config (1 s scrape and rule evaluation) and storage directory; :meth:`Prometheus.query` uses the HTTP API.
- :class:`ForeignExporter`: another component in the same Prometheus (job ``kube-controller-manager``) that
  exports metrics with the controller's names and label values, with large, moving values: if any query
  leaked across jobs, the numbers would be wrong.
- :func:`play_scenario`: jobs created, workers deleted, evicted and OOM-killed, a scale-up and a scale-down,
  one job failing and one succeeding, two throttled status writes; returns what an SRE should then see.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import yaml
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from controller.runtime.client import CUSTOM_RESOURCE_DEFINITIONS as CRDS
from controller.runtime.client import NAMESPACES, PODS, ApiClient
from controller.runtime.errors import NotFound
from controller.tfjob.api import ANNOTATION_POD_DELETION_COST as DELETION_COST
from controller.tfjob.executor import TFJOBS
from tfjob_sim.cluster import SimCluster
from tfjob_sim.kubelet import EVICT, EXIT_CODE, RUN_SECONDS
from tfjob_sim.testing.objects import is_true, tfjob
from tfjob_sim.testing.waiting import eventually as _eventually

REPO = Path(__file__).resolve().parents[1]
CRD_PATH = REPO / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"
RULES = REPO / "grafana" / "alerts.yaml"
SCRAPE_JOB = "tfjob-controller"
FOREIGN_JOB = "kube-controller-manager"
CONTROLLER_NAMESPACE = "tfjob-controller"


async def eventually(check: Any, timeout: float = 30.0, interval: float = 0.02, what: str = "") -> Any:
    """:func:`tfjob_sim.testing.waiting.eventually` where a failed assertion, a missing key or a 404 means "not yet"."""
    return await _eventually(
        check, timeout, interval=interval, what=what, tolerate=(AssertionError, LookupError, NotFound)
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def substitute(expr: str, rate_interval: str, range_: str) -> str:
    """A panel query as Grafana runs it for this controller with "All" namespaces, instances and TFJob
    namespaces selected."""
    for name, value in (
        ("$__rate_interval", rate_interval),
        ("$__range", range_),
        ("$job_namespace", ".*"),
        ("$namespace", ".*"),
        ("$instance", ".*"),
        ("$job", SCRAPE_JOB),
    ):
        expr = expr.replace(name, value)
    if "$" in expr:
        raise ValueError(f"unknown template variable in {expr!r}")
    return expr


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise RuntimeError("the prometheus binary is required (Debian package 'prometheus'; .ci/run installs it)")
    return found


class Prometheus:
    """One Prometheus server; ``async with Prometheus(targets) as prom``."""

    def __init__(self, targets: dict[str, tuple[str, dict[str, str]]], rules: Path | None = RULES) -> None:
        # job name -> ("host:port", static labels)
        self.targets = targets
        self.rules = rules
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="prometheus-")
        self._proc: asyncio.subprocess.Process | None = None
        self._http: aiohttp.ClientSession | None = None
        self.log = Path(self._dir.name) / "prometheus.log"

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.rules)] if self.rules else [],
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": [address], "labels": labels}]}
                for job, (address, labels) in self.targets.items()
            ],
        }

    async def __aenter__(self) -> Prometheus:
        root = Path(self._dir.name)
        (root / "prometheus.yml").write_text(yaml.safe_dump(self.config()))
        log = self.log.open("wb")
        self._proc = await asyncio.create_subprocess_exec(
            prometheus_binary(),
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
            stdout=log,
            stderr=log,
        )
        log.close()
        self._http = aiohttp.ClientSession()

        async def ready() -> bool:
            assert self._proc is not None
            if self._proc.returncode is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                async with self._http.get(f"{self.url}/-/ready") as response:  # type: ignore[union-attr]
                    return response.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(ready, timeout=30, what="prometheus to be ready")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()
        if self._proc is not None and self._proc.returncode is None:
            self._proc.send_signal(signal.SIGTERM)
            with anyio.move_on_after(20):
                await self._proc.wait()
            if self._proc.returncode is None:
                self._proc.kill()
                await self._proc.wait()
        self._dir.cleanup()

    async def _api(self, path: str, params: dict[str, str]) -> Any:
        assert self._http is not None
        async with self._http.get(f"{self.url}/api/v1/{path}", params=params) as response:
            body = await response.json()
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    async def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = await self._api("query", params)
        assert data["resultType"] == "vector", (expr, data["resultType"])
        return data["result"]

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = await self._api(
            "query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        )
        return data["result"]

    async def rule_states(self) -> list[dict[str, Any]]:
        return [rule for group in (await self._api("rules", {}))["groups"] for rule in group["rules"]]

    async def targets_up(self) -> dict[str, float]:
        return {r["metric"]["job"]: float(r["value"][1]) for r in await self.query("up")}

    async def wait_for_targets(self) -> None:
        """Until every target has been scraped successfully (so the scenario's first events are seen)."""
        expected = dict.fromkeys(self.targets, 1.0)

        async def all_up() -> bool:
            return await self.targets_up() == expected

        await eventually(all_up, timeout=60, what="every target scraped and up")


class _ForeignMetrics(Collector):
    """Same names and label values as tfjob-controller, large values that move with time."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def collect(self) -> Any:
        elapsed = time.monotonic() - self.started
        leader = GaugeMetricFamily("leader_election_master_status", "foreign", labels=["name"])
        leader.add_metric(["kube-controller-manager"], 1)
        leader.add_metric(["tfjob-controller"], 1)  # as if another install of ours led its own lease
        depth = GaugeMetricFamily("workqueue_depth", "foreign", labels=["name", "controller", "priority"])
        depth.add_metric(["tfjob-controller", "tfjob-controller", ""], 999)
        requests = CounterMetricFamily("rest_client_requests", "foreign", labels=["code", "method", "host"])
        requests.add_metric(["503", "GET", "api"], 1000 * elapsed)
        requests.add_metric(["429", "PUT", "api"], 1000 * elapsed)
        reconciles = CounterMetricFamily("controller_runtime_reconcile", "foreign", labels=["controller", "result"])
        reconciles.add_metric(["tfjob-controller", "error"], 500 * elapsed)
        errors = CounterMetricFamily("controller_runtime_reconcile_errors", "foreign", labels=["controller"])
        errors.add_metric(["tfjob-controller"], 500 * elapsed)
        failovers = CounterMetricFamily("tfjob_worker_failovers", "foreign", labels=["job_namespace", "reason"])
        failovers.add_metric(["default", "Evicted"], 100 * elapsed)
        jobs = GaugeMetricFamily("tfjob_jobs", "foreign", labels=["job_namespace", "state"])
        jobs.add_metric(["default", "Running"], 77)
        jobs.add_metric(["default", "Failed"], 77)
        yield from (leader, depth, requests, reconciles, errors, failovers, jobs)


class ForeignExporter:
    def __init__(self) -> None:
        self.port = free_port()
        registry = CollectorRegistry()
        registry.register(_ForeignMetrics())
        self._server, self._thread = start_http_server(self.port, addr="127.0.0.1", registry=registry)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class ControllerProcess:
    """``tfjob-controller run`` against the simulated cluster, with a 1 s failover back-off, watching the
    scenario's namespaces (as a production install scoped to its namespaces would)."""

    def __init__(self, kubeconfig: str, namespaces: tuple[str, ...] = ("default", "team-b")) -> None:
        self.kubeconfig = kubeconfig
        self.namespaces = namespaces
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "controller",
            "run",
            "--kubeconfig",
            self.kubeconfig,
            "--workers",
            "2",
            "--metrics-addr",
            f"127.0.0.1:{self.metrics_port}",
            "--health-addr",
            f"127.0.0.1:{self.health_port}",
            "--leader-election-namespace",
            "default",
            "--failover-backoff",
            "1",
            "2",
            *(arg for namespace in self.namespaces for arg in ("--namespace", namespace)),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )

    async def scrape(self) -> str:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response:
                return await response.text()

    async def while_running(self, work: Any) -> Any:
        """Await ``work``, failing at once with the controller's log if the controller exits meanwhile."""
        assert self.proc is not None
        task = asyncio.ensure_future(work)
        exited = asyncio.ensure_future(self.proc.wait())
        try:
            await asyncio.wait({task, exited}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            exited.cancel()
        if not task.done():
            task.cancel()
            rc, stderr = await self.stop()
            raise AssertionError(f"tfjob-controller exited ({rc}) during the scenario:\n{stderr[-6000:]}")
        return task.result()

    async def stop(self) -> tuple[int, str]:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            _, stderr = await self.proc.communicate()
        assert self.proc.returncode is not None
        return self.proc.returncode, stderr.decode()


def scrape_targets(controller: ControllerProcess, foreign: ForeignExporter) -> dict[str, tuple[str, dict[str, str]]]:
    """The controller and the foreign component as Prometheus jobs, each with its Kubernetes namespace label
    (what a ServiceMonitor attaches)."""
    return {
        SCRAPE_JOB: (f"127.0.0.1:{controller.metrics_port}", {"namespace": CONTROLLER_NAMESPACE}),
        FOREIGN_JOB: (f"127.0.0.1:{foreign.port}", {"namespace": "kube-system"}),
    }


@dataclass
class Expected:
    """What the scenario did, as an SRE should read it from Prometheus."""

    jobs_by_state: dict[tuple[str, str], int] = field(default_factory=dict)  # (job_namespace, state) -> jobs
    failovers: dict[str, int] = field(default_factory=dict)  # reason -> failovers (namespace default)
    ps_failovers: dict[str, int] = field(default_factory=dict)  # reason -> PS failovers (namespace default)
    scaled_down: dict[str, int] = field(default_factory=dict)  # chosen_by -> workers removed (namespace default)
    created: int = 0
    succeeded: int = 0
    failed: int = 0
    throttled_writes: int = 0  # 429s answered to the controller's status writes
    started: float = 0.0  # unix time the scenario began
    ended: float = 0.0


async def _pods(client: ApiClient, job: str, namespace: str = "default") -> list[dict[str, Any]]:
    selector = f"training.kubeflow.org/job-name={job}"
    return (await client.list(PODS, namespace=namespace, label_selector=selector))["items"]


async def _running_workers(client: ApiClient, job: str, namespace: str = "default") -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["metadata"]["uid"]
        for p in await _pods(client, job, namespace)
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


async def _replaced(client: ApiClient, job: str, name: str, old_uid: str, workers: int) -> None:
    async def back() -> bool:
        running = await _running_workers(client, job)
        return len(running) == workers and running.get(name, old_uid) != old_uid

    await eventually(back, timeout=90, what=f"{name} replaced and running")


async def install(client: ApiClient) -> None:
    """The CRD and the scenario's second namespace, before the controller starts (as in production: the CRD is
    installed first; a CRD's schema is also the heaviest thing the simulator compiles, and it should not compete
    with the controller's first lease renewals on a loaded machine)."""
    await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})


async def play_scenario(cluster: SimCluster, client: ApiClient) -> Expected:
    expected = Expected(started=time.time())

    # A dynamic job that loses workers three ways, then scales 3 -> 5 -> 2.
    await client.create(TFJOBS, tfjob("elastic", workers=3, restart_policy="ExitCode"), namespace="default")
    # Two plain jobs in another namespace: one fails (exit 1 under Never), one succeeds.
    await client.create(
        TFJOBS,
        tfjob(
            "doomed",
            workers=1,
            dynamic=False,
            restart_policy="Never",
            annotations={RUN_SECONDS: "200", EXIT_CODE: "1"},
            namespace="team-b",
        ),
        namespace="team-b",
    )
    await client.create(
        TFJOBS,
        tfjob(
            "finisher",
            workers=1,
            dynamic=False,
            restart_policy="Never",
            annotations={RUN_SECONDS: "200"},
            namespace="team-b",
        ),
        namespace="team-b",
    )
    # A dynamic job whose parameter server is deleted: re-created at its address, the job stays Running.
    await client.create(TFJOBS, tfjob("sharded", workers=1, ps=1, restart_policy="Never"), namespace="default")
    expected.created = 4

    await eventually(lambda: _running_workers(client, "elastic"), timeout=90, what="elastic's workers running")

    async def three_running() -> bool:
        return len(await _running_workers(client, "elastic")) == 3

    await eventually(three_running, timeout=90, what="elastic's 3 workers running")
    # Two throttled status writes (API priority and fairness): retried by the client, counted as 429s.
    cluster.faults.fail_next("update", "tfjobs.kubeflow.org/status", code=429, count=2, retry_after=1)
    expected.throttled_writes = 2

    running = await _running_workers(client, "elastic")
    await client.delete(PODS, "elastic-worker-0", namespace="default")
    await _replaced(client, "elastic", "elastic-worker-0", running["elastic-worker-0"], 3)
    running = await _running_workers(client, "elastic")
    await client.patch(PODS, "elastic-worker-1", {"metadata": {"annotations": {EVICT: "true"}}}, namespace="default")
    await _replaced(client, "elastic", "elastic-worker-1", running["elastic-worker-1"], 3)
    running = await _running_workers(client, "elastic")
    await client.patch(PODS, "elastic-worker-2", {"metadata": {"annotations": {EXIT_CODE: "137"}}}, namespace="default")
    await _replaced(client, "elastic", "elastic-worker-2", running["elastic-worker-2"], 3)
    expected.failovers = {"Deleted": 1, "Evicted": 1, "OOMKilled": 1}

    async def sharded_running() -> dict[str, str] | None:
        running = await _running_workers(client, "sharded")
        return running if len(running) == 2 else None

    ps_uid = (await eventually(sharded_running, timeout=90, what="sharded's PS and worker running"))["sharded-ps-0"]
    await client.delete(PODS, "sharded-ps-0", namespace="default")
    await _replaced(client, "sharded", "sharded-ps-0", ps_uid, 2)
    expected.ps_failovers = {"Deleted": 1}

    scale = {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 5}}}}
    await client.patch(TFJOBS, "elastic", scale, namespace="default")

    async def five_running() -> bool:
        return len(await _running_workers(client, "elastic")) == 5

    await eventually(five_running, timeout=90, what="elastic scaled up to 5 running workers")
    # 5 -> 2, each leaver chosen another way: worker 3 is listed, worker 1 is the cheapest to lose, then the
    # highest index (4) goes.
    await client.patch(
        PODS, "elastic-worker-1", {"metadata": {"annotations": {DELETION_COST: "-100"}}}, namespace="default"
    )
    scale["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    await client.patch(
        TFJOBS, "elastic", {**scale, "spec": {**scale["spec"], "workersToDelete": [3]}}, namespace="default"
    )

    async def two_left() -> bool:
        live = [
            p["metadata"]["name"] for p in await _pods(client, "elastic") if not p["metadata"].get("deletionTimestamp")
        ]
        return sorted(live) == ["elastic-worker-0", "elastic-worker-2"]

    await eventually(two_left, timeout=90, what="elastic scaled down to workers 0 and 2")
    expected.scaled_down = {"workersToDelete": 1, "deletionCost": 1, "highestIndex": 1}

    async def finished(name: str, condition: str) -> bool:
        return is_true(await client.get(TFJOBS, name, namespace="team-b"), condition)

    await eventually(lambda: finished("doomed", "Failed"), timeout=90, what="doomed Failed")
    await eventually(lambda: finished("finisher", "Succeeded"), timeout=90, what="finisher Succeeded")
    expected.succeeded, expected.failed = 1, 1
    expected.jobs_by_state = {("default", "Running"): 2, ("team-b", "Failed"): 1, ("team-b", "Succeeded"): 1}
    expected.ended = time.time()
    return expected
