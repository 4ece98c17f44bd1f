"""GET pods/{name}/log as kube-apiserver and the kubelet answer it (sim/tfjob_sim/logs.py): options
and their validation, container choice, the kubelet's status rules, follow, and the real
kubernetes-asyncio client reading it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from kubernetes_asyncio import client, config

from tfjob_sim.cluster import SimCluster
from tfjob_sim.kubelet import EXIT_CODE, START_SECONDS, UNSCHEDULABLE
from tfjob_sim.logs import LOG, LOG_INTERVAL_SECONDS
from tfjob_sim.testing.waiting import eventually

PODS = "/api/v1/namespaces/default/pods"


def make_pod(
    name: str,
    annotations: dict[str, str] | None = None,
    containers: tuple[str, ...] = ("main",),
    init: tuple[str, ...] = (),
    restart: str = "Always",
) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": c, "image": "python:3.12"} for c in containers],
            "initContainers": [{"name": c, "image": "busybox:1.36"} for c in init],
        },
    }


@pytest.fixture
async def http(sim_cluster: SimCluster) -> AsyncIterator[Any]:
    async with aiohttp.ClientSession() as session:

        async def get(path: str, method: str = "GET") -> tuple[int, str, Any]:
            async with session.request(method, sim_cluster.url + path) as resp:
                text = (await resp.read()).decode()
                if resp.headers.get("Content-Type", "").startswith("application/json"):
                    return resp.status, resp.headers.get("Content-Type"), orjson.loads(text)
                return resp.status, resp.headers.get("Content-Type"), text

        yield get


def running(cluster: SimCluster, name: str) -> bool:
    pod = cluster.store.get("pods", "default", name)
    return bool(
        pod
        and pod.get("status", {}).get("phase") == "Running"
        and all("running" in s["state"] for s in pod["status"]["containerStatuses"])
    )


async def test_options_container_choice_and_their_errors(http: Any, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create(
        "pods",
        "default",
        make_pod(
            "p",
            {LOG: "a {container}\nb {instance}\nc\nd", f"{LOG}.side": "side"},
            containers=("main", "side"),
            init=("setup",),
        ),
    )
    await eventually(lambda: running(sim_cluster, "p"), timeout=30)
    log = f"{PODS}/p/log"
    assert await http(f"{log}?container=main") == (200, "text/plain", "a main\nb 0\nc\nd\n")
    assert await http(f"{log}?container=side") == (200, "text/plain", "side\n")
    assert (await http(f"{log}?container=setup"))[2] == "a setup\nb 0\nc\nd\n"  # a finished init container
    assert (await http(f"{log}?container=main&tailLines=2"))[2] == "c\nd\n"
    assert (await http(f"{log}?container=main&tailLines=0"))[2] == ""
    assert (await http(f"{log}?container=main&limitBytes=5"))[2] == "a mai"  # may cut a line
    stamped = (await http(f"{log}?container=main&timestamps=true&tailLines=1"))[2]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z d\n", stamped), stamped
    assert (await http(f"{log}?container=main&sinceSeconds=3600"))[2] == "a main\nb 0\nc\nd\n"
    assert (await http(f"{log}?container=main&sinceTime=2999-01-01T00:00:00Z"))[2] == ""

    def status(code: int, reason: str, message: str) -> tuple[int, str, dict]:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
        return code, "application/json", body

    code, _, body = await http(log)
    assert (code, body["message"]) == (
        400,
        "a container name must be specified for pod p, choose one of: [setup main side]",
    )
    assert (await http(f"{log}?container=nope")) == status(400, "BadRequest", "container nope is not valid for pod p")
    code, _, body = await http(f"{log}?container=main&previous=true")
    assert (code, body["message"]) == (400, 'previous terminated container "main" in pod "p" not found')
    for query, message in (
        ("tailLines=-1", "tailLines: Invalid value: -1: must be greater than or equal to 0"),
        ("limitBytes=0", "limitBytes: Invalid value: 0: must be greater than 0"),
        ("sinceSeconds=0", "sinceSeconds: Invalid value: 0: must be greater than 0"),
    ):
        code, _, body = await http(f"{log}?container=main&{query}")
        assert (code, body["reason"], body["message"]) == (422, "Invalid", f'PodLogOptions "p" is invalid: {message}')
        assert body["details"]["kind"] == "PodLogOptions"
    code, _, body = await http(f"{log}?container=main&tailLines=x")
    assert code == 400 and "tailLines" in body["message"]
    code, _, body = await http(f"{PODS}/missing/log")
    assert (code, body["message"]) == (404, 'pods "missing" not found')
    code, _, body = await http(f"{log}?container=main", method="POST")
    assert code == 405


async def test_pods_not_running_yet(http: Any, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create("pods", "default", make_pod("pending", {UNSCHEDULABLE: "true"}))
    store.create("pods", "default", make_pod("starting", {START_SECONDS: "100000"}))
    await eventually(
        lambda: (store.get("pods", "default", "starting").get("status") or {}).get("containerStatuses"), timeout=30
    )
    assert await http(f"{PODS}/pending/log") == (204, None, "")  # not bound: no kubelet to ask
    code, _, body = await http(f"{PODS}/starting/log")
    assert (code, body["message"]) == (400, 'container "main" in pod "starting" is waiting to start: ContainerCreating')


async def test_follow_streams_lines_and_ends_when_the_container_stops(http: Any, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    # One line per simulated 20 s (0.2 s here); the container is stopped after the second line, so
    # the rest is never printed.
    store.create(
        "pods",
        "default",
        make_pod("chatty", {LOG: "one\ntwo\nthree\nfour\nfive", LOG_INTERVAL_SECONDS: "20"}, restart="Never"),
    )
    await eventually(lambda: running(sim_cluster, "chatty"), timeout=30)
    received: list[str] = []
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{sim_cluster.url}{PODS}/chatty/log?follow=true") as resp:
            assert resp.status == 200 and resp.headers["Content-Type"] == "text/plain"
            assert await resp.content.readline() == b"one\n"
            assert await resp.content.readline() == b"two\n"
            store.patch("pods", "default", "chatty", "merge", {"metadata": {"annotations": {EXIT_CODE: "3"}}})
            with anyio.fail_after(30):
                rest = await resp.content.read()  # the response ends with the container
            received = (b"one\ntwo\n" + rest).decode().splitlines()
    assert received in (["one", "two"], ["one", "two", "three"]), received  # "three" only if due before the exit
    assert store.get("pods", "default", "chatty")["status"]["phase"] == "Failed"
    # Afterwards the terminated instance's log is what it printed.
    assert (await http(f"{PODS}/chatty/log"))[2].splitlines() == received


async def test_kubernetes_asyncio_reads_pod_logs(sim_cluster: SimCluster) -> None:
    sim_cluster.store.create("pods", "default", make_pod("reader", {LOG: "epoch 1 loss 0.5\nepoch 2 loss 0.25"}))
    await eventually(lambda: running(sim_cluster, "reader"), timeout=30)
    configuration = client.Configuration()
    await config.load_kube_config(config_file=sim_cluster.kubeconfig_path, client_configuration=configuration)
    async with client.ApiClient(configuration=configuration) as api:
        v1 = client.CoreV1Api(api)
        assert await v1.read_namespaced_pod_log("reader", "default") == "epoch 1 loss 0.5\nepoch 2 loss 0.25\n"
        assert (
            await v1.read_namespaced_pod_log("reader", "default", container="main", tail_lines=1, timestamps=False)
            == "epoch 2 loss 0.25\n"
        )
        with pytest.raises(client.ApiException) as info:
            await v1.read_namespaced_pod_log("reader", "default", previous=True)
        assert info.value.status == 400
        assert (
            orjson.loads(info.value.body)["message"] == 'previous terminated container "main" in pod "reader" not found'
        )


async def test_follow_ends_when_the_pod_is_deleted(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create("pods", "default", make_pod("doomed", {LOG: "working"}))
    await eventually(lambda: running(sim_cluster, "doomed"), timeout=30)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{sim_cluster.url}{PODS}/doomed/log?follow=true&timestamps=true") as resp:
            first = await resp.content.readline()
            assert first.endswith(b"Z working\n")
            store.delete("pods", "default", "doomed")  # SIGTERM: the process exits, the stream ends
            with anyio.fail_after(30):
                assert await resp.content.read() == b""
    await eventually(lambda: store.get("pods", "default", "doomed") is None, timeout=30)
