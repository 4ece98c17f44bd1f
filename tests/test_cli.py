"""The command line as users run it: subprocesses, real signals, real ports."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import shutil

import aiohttp
import anyio
import pytest

from controller.runtime.client import LEASES, PODS, ApiClient
from controller.sim.cluster import SimCluster
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import CRD_PATH, CRDS, eventually, tfjob

import yaml

CLI = [sys.executable, "-m", "controller"]


@pytest.fixture
def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is required on PATH for this test", pytrace=False)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def run_cli(*args: str, timeout: float = 60.0) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    with anyio.fail_after(timeout):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_bad_arguments_get_one_line_and_exit_2():
    rc, out, err = await run_cli("run", "--workers", "zero")
    assert rc == 2
    assert "argument --workers: expected a whole number, got 'zero'" in err
    assert "Traceback" not in err
    rc, _, err = await run_cli("run", "--metrics-addr", "8080")
    assert rc == 2 and "invalid address '8080'" in err
    rc, _, err = await run_cli("run", "--failover-backoff", "30", "10")
    assert rc == 2 and "--failover-backoff: BASE must not exceed CAP" in err
    rc, _, err = await run_cli("run", "--max-pods-per-job", "0")
    assert rc == 2 and "argument --max-pods-per-job: must be at least 1, got 0" in err
    rc, _, err = await run_cli("run", "--leader-election-id", "Shard_A")
    assert rc == 2 and "argument --leader-election-id: 'Shard_A' is not a valid object name" in err


async def test_bad_api_limits_get_one_line_whether_flag_or_environment():
    rc, _, err = await run_cli("run", "--kube-api-qps", "-5")
    assert rc == 2 and "argument --kube-api-qps: must be a finite number >= 0" in err and "Traceback" not in err
    rc, _, err = await run_cli("run", "--kube-api-burst", "0")
    assert rc == 2 and "argument --kube-api-burst: must be at least 1" in err
    proc = await asyncio.create_subprocess_exec(
        *CLI, "run", env={**os.environ, "TFJOB_CONTROLLER_KUBE_API_QPS": "fast"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    with anyio.fail_after(60):
        _, raw = await proc.communicate()
    err = raw.decode()
    assert proc.returncode == 2 and "Traceback" not in err
    assert err.strip() == ("tfjob-controller: environment variable TFJOB_CONTROLLER_KUBE_API_QPS: expected a number "
                           "of requests per second, got 'fast'")


async def test_run_with_a_missing_kubeconfig_fails_with_one_line(tmp_path: Path):
    rc, _, err = await run_cli("run", "--kubeconfig", str(tmp_path / "nope"))
    assert rc == 1
    assert err.strip().splitlines()[-1].startswith("tfjob-controller run: kubeconfig not found:")
    assert "Traceback" not in err


async def test_demo_runs_the_story_to_the_end():
    rc, out, err = await run_cli("demo", "--time-scale", "0.02", timeout=120)
    assert rc == 0, out + err
    assert "was deleted (Deleted): replacing it" in out
    assert "OOM-killed (exit code 137)" in out
    assert "Scaled down to 2 worker(s): removed mnist-worker-3, mnist-worker-2" in out
    assert "without ever leaving Running" in out


async def test_sim_serves_kubectl_and_exits_cleanly_on_sigterm(tmp_path: Path, kubectl_binary: str):
    kubeconfig = tmp_path / "kc"
    proc = await asyncio.create_subprocess_exec(
        *CLI, "sim", "--port", "0", "--kubeconfig", str(kubeconfig), "--nodes", "2",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            line = (await proc.stdout.readline()).decode()
        assert "simulated cluster serving at http://127.0.0.1:" in line
        get = await asyncio.create_subprocess_exec(
            kubectl_binary, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
            "get", "nodes", "-o", "name", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "HOME": str(tmp_path)},
        )
        with anyio.fail_after(30):
            out, err = await get.communicate()
        assert get.returncode == 0, err
        assert out.decode().split() == ["node/sim-node-0", "node/sim-node-1"]
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            rc = await proc.wait()
    assert rc == 0


async def test_run_reconciles_serves_metrics_and_health_and_releases_the_lease(sim_cluster: SimCluster):
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    metrics_port, health_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        *CLI, "run", "--kubeconfig", sim_cluster.kubeconfig_path, "--workers", "2",
        "--metrics-addr", f"127.0.0.1:{metrics_port}", "--health-addr", f"127.0.0.1:{health_port}",
        "--leader-election-namespace", "default",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stderr = b""
    try:
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await client.create(TFJOBS, tfjob("cli", workers=2), namespace="default")

        async def pods_running() -> bool:
            pods = (await client.list(PODS, namespace="default", label_selector="training.kubeflow.org/job-name=cli"))["items"]
            return len([p for p in pods if p.get("status", {}).get("phase") == "Running"]) == 2

        await eventually(pods_running, timeout=30, what="the controller process to create the job's pods")
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                try:
                    async with http.get(f"http://127.0.0.1:{health_port}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(ready, what="/readyz to report ready")
            created = 'training_operator_jobs_created_total{framework="tensorflow",job_namespace="default"}'

            async def scrape() -> str | None:
                # The series exists at 0 from the moment the job is seen; it moves to 1 once the
                # reconcile's status write is done, not when the pods run.
                async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                    body = await r.text()
                return body if f"{created} 1.0" in body else None

            text = await eventually(scrape, what="the created-jobs counter to reach 1")
            assert 'leader_election_master_status{name="tfjob-controller"} 1.0' in text
            assert "workqueue_adds_total" in text and "controller_runtime_reconcile_total" in text
        lease = await client.get(LEASES, "tfjob-controller", namespace="default")
        assert lease["spec"]["holderIdentity"]
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            _, stderr = await proc.communicate()
    try:
        assert proc.returncode == 0, stderr.decode()[-3000:]
        lease = await client.get(LEASES, "tfjob-controller", namespace="default")
        assert lease["spec"].get("holderIdentity", "") == "", "the lease is released on shutdown"
    finally:
        await client.close()


@pytest.mark.parametrize("module", ["re2", "celpy", "cryptography"])
async def test_sim_without_its_extra_fails_at_once_with_one_line(tmp_path: Path, module: str):
    # The extra's module made unimportable, as in an install without [sim] (cryptography: secure mode).
    secure = ", '--secure'" if module == "cryptography" else ""
    code = (f"import sys; sys.modules[{module!r}] = None; from controller.cli import main; "
            f"sys.exit(main(['sim', '--kubeconfig', {str(tmp_path / 'kc')!r}{secure}]))")
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    with anyio.fail_after(60):
        out, err = await proc.communicate()
    assert proc.returncode == 1 and out == b""
    lines = err.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tfjob-controller sim: the simulated cluster needs the [sim] extra (cannot import ")
    assert module in lines[0]
    assert lines[0].endswith("install it with: pip install 'tfjob-controller[sim]'")
    assert not (tmp_path / "kc").exists()  # it never started


async def test_run_as_the_manifests_service_account_over_tls_with_no_403(tmp_path: Path):
    """``tfjob-controller run`` as the shipped Deployment runs it: the ServiceAccount token and RBAC of
    manifests/, the cluster's CA verified, leader election in the controller's own namespace."""
    from controller.sim.cluster import SimConfig
    from tests.e2e.conftest import CONTROLLER_NAMESPACE, controller_kubeconfig

    config = SimConfig(nodes=2, time_scale=0.01, secure=True, kubeconfig_path=str(tmp_path / "admin"))
    async with SimCluster(config) as cluster:
        admin = await ApiClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await admin.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
            kubeconfig = await controller_kubeconfig(cluster, admin)
            assert "token" in yaml.safe_load(Path(kubeconfig).read_text())["users"][0]["user"]
            proc = await asyncio.create_subprocess_exec(
                *CLI, "run", "--kubeconfig", kubeconfig, "--workers", "2",
                "--metrics-addr", f"127.0.0.1:{free_port()}", "--health-addr", f"127.0.0.1:{free_port()}",
                "--leader-election-namespace", CONTROLLER_NAMESPACE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            try:
                await admin.create(TFJOBS, tfjob("secure", workers=2), namespace="default")

                async def pods_running() -> bool:
                    pods = (await admin.list(PODS, namespace="default",
                                             label_selector="training.kubeflow.org/job-name=secure"))["items"]
                    return len([p for p in pods if p.get("status", {}).get("phase") == "Running"]) == 2

                await eventually(pods_running, timeout=60, what="the controller process to create the job's pods")
                lease = await admin.get(LEASES, "tfjob-controller", namespace=CONTROLLER_NAMESPACE)
                assert lease["spec"]["holderIdentity"]
            finally:
                proc.send_signal(signal.SIGTERM)
                with anyio.fail_after(30):
                    _, stderr = await proc.communicate()
            assert proc.returncode == 0, stderr.decode()[-3000:]
            lease = await admin.get(LEASES, "tfjob-controller", namespace=CONTROLLER_NAMESPACE)
            assert lease["spec"].get("holderIdentity", "") == "", "the lease is released on shutdown"
            assert list(cluster.server.auth.forbidden_log) == []
        finally:
            await admin.close()
