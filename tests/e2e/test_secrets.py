"""Credentials never leak: not in logs, not in events, not in metrics.

The controller runs against the simulated cluster in secure mode (HTTPS, authentication, RBAC), so the
token is really checked, with a kubeconfig carrying the bearer token, or an exec credential plugin that
prints it (the plugin's environment holds the token and another secret), while the API fails in the ways that
produce the most text: 500s on creates (FailedCreatePod events, warning lines), a 409 on a status write,
a 401, dropped connections, a stalled and compacted watch. Every log line (structlog's and the standard
library's, at debug level), every event the controller recorded and the whole metrics exposition are
then searched for the secrets.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from structlog.testing import capture_logs

from controller.runtime.client import EVENTS, PODS, ApiClient
from controller.tfjob.controller import TFJobController
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import CRD_PATH, CRDS, FAST_FAILOVER, Operator, eventually, is_true, running_pods, tfjob
from tfjob_sim.cluster import SimCluster, SimConfig


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=3, time_scale=0.01, secure=True)


def kubeconfig(cluster: SimCluster, user: dict[str, Any], path: Path) -> str:
    ca = base64.b64encode(cluster.secure.ca_cert).decode()
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": cluster.url, "certificate-authority-data": ca}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "default"}}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return str(path)


def bearer_user(tmp_path: Path, token: str, other_secret: str) -> dict[str, Any]:
    return {"token": token}


def exec_user(tmp_path: Path, token: str, other_secret: str) -> dict[str, Any]:
    plugin = tmp_path / "credential-plugin.py"
    plugin.write_text(
        "import json, os\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': {'token': os.environ['PLUGIN_TOKEN'], 'expirationTimestamp': '2999-01-01T00:00:00Z'}}))\n"
    )
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
            "env": [{"name": "PLUGIN_TOKEN", "value": token}, {"name": "API_KEY", "value": other_secret}],
        }
    }


@pytest.mark.parametrize("make_user", [bearer_user, exec_user], ids=["bearer-token", "exec-plugin"])
async def test_no_credential_appears_in_logs_events_or_metrics(
    sim_cluster: SimCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture, make_user: Any
) -> None:
    token = sim_cluster.secure.admin_token
    other_secret = "s3cr3t" + secrets.token_hex(12)
    path = kubeconfig(sim_cluster, make_user(tmp_path, token, other_secret), tmp_path / "kubeconfig")
    registry = CollectorRegistry()
    faults = sim_cluster.faults
    caplog.set_level(logging.DEBUG)
    with capture_logs() as logs:
        client = await ApiClient.from_kubeconfig(path, registry=registry)
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        controller = TFJobController(client, registry=registry, workers=2, decide_config=FAST_FAILOVER)
        task = asyncio.create_task(controller.run())
        operator = Operator(sim_cluster, client, registry, controller, task)
        try:
            await eventually(lambda: task.done() or controller.pods.has_synced(), what="caches synced")
            faults.fail("create", "pods", 500, count=2, message="etcdserver: request timed out")
            faults.fail_next("update", "tfjobs.kubeflow.org/status", 409)
            faults.fail_next("list", "services", 401)
            faults.drop_connections("get", "*", count=2)
            await client.create(TFJOBS, tfjob("guarded", workers=2), namespace="default")

            async def running() -> bool:
                job = await operator.job("guarded")
                return is_true(job, "Running") and len(running_pods(await operator.pods("guarded"))) == 2

            await eventually(running, timeout=30.0, what="the job running despite the faults")
            faults.stall_watches("pods")
            await client.delete(PODS, "guarded-worker-1", namespace="default")
            faults.compact()
            faults.unstall_watches()

            async def replaced() -> bool:
                return len(running_pods(await operator.pods("guarded"))) == 2 and any(
                    e.get("reason") == "WorkerFailover" for e in await operator.events("guarded")
                )

            await eventually(replaced, timeout=30.0, what="worker-1 replaced after the relist")
            events = (await client.list(EVENTS, namespace="default"))["items"]
        finally:
            await operator.stop()
            await client.close()
    assert task.done()
    texts = {
        "structlog": json.dumps(logs, default=str),
        "stdlib logging": caplog.text,
        "events": json.dumps(events),
        "metrics": generate_latest(registry).decode(),
    }
    assert any(e.get("reason") == "FailedCreatePod" for e in events), "the failure paths were exercised"
    assert any(entry.get("event") == "reconcile failed; retrying with backoff" for entry in logs)
    for where, text in texts.items():
        for secret in (token, other_secret):
            assert secret not in text, f"a credential leaked into the {where}"
