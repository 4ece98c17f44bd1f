"""The perturbing proxy (benchmarks/chaos/proxy.py) on its own, against the simulated API server: what it forwards
unchanged, and each perturbation doing exactly what it says and nothing else.

A plain aiohttp client stands in for the controller: the proxy cannot tell them apart, and a test can then see
precisely what a client is answered and when. ConfigMaps stand in for the objects: no kubelet or garbage
collector touches them.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml

from benchmarks.chaos.proxy import PerturbingProxy, is_state_write, parse_target, state_writes
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.watchstream import Stream

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, time_scale=0.01, kubelet=False, gc=False)


@pytest.fixture
async def proxy(sim_cluster: SimCluster, tmp_path: Path) -> AsyncIterator[PerturbingProxy]:
    async with PerturbingProxy(sim_cluster.url, tmp_path / "proxy") as p:
        yield p


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(headers={"User-Agent": "tfjob-controller/test"}) as session:
        yield session


def configmap(name: str, value: str = "1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


async def call(
    session: aiohttp.ClientSession, method: str, url: str, body: Any = None, timeout: float = 30.0
) -> tuple[int, Any]:
    headers = {"Content-Type": "application/merge-patch+json" if method == "PATCH" else "application/json"}
    data = orjson.dumps(body) if body is not None else None
    async with session.request(
        method, url, data=data, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)
    ) as resp:
        return resp.status, orjson.loads(await resp.read())


def names(listing: dict[str, Any]) -> list[str]:
    return sorted(item["metadata"]["name"] for item in listing["items"])


def test_paths_name_their_resource_and_state_writes_leave_out_leases_and_events() -> None:
    pod = parse_target("/api/v1/namespaces/default/pods/p-0/eviction")
    assert pod is not None and (pod.qualified, pod.namespace, pod.name, pod.subresource) == (
        "pods",
        "default",
        "p-0",
        "eviction",
    )
    status = parse_target("/apis/kubeflow.org/v1/namespaces/ns/tfjobs/j/status")
    assert status is not None and status.label == "tfjobs.kubeflow.org/status" and status.name == "j"
    every = parse_target("/apis/kubeflow.org/v1/tfjobs")
    assert every is not None and (every.qualified, every.namespace, every.name) == ("tfjobs.kubeflow.org", None, None)
    assert parse_target("/version") is None and parse_target("/apis") is None
    namespace = parse_target("/api/v1/namespaces/default")
    assert namespace is not None and (namespace.resource, namespace.name) == ("namespaces", "default")
    lease = parse_target("/apis/coordination.k8s.io/v1/namespaces/default/leases/tfjob-controller")
    event = parse_target("/api/v1/namespaces/default/events")
    assert is_state_write("POST", pod) and is_state_write("PUT", status) and is_state_write("DELETE", pod)
    assert not is_state_write("PUT", lease) and not is_state_write("POST", event) and not is_state_write("GET", pod)


async def test_requests_and_watches_pass_unchanged_and_are_logged(
    proxy: PerturbingProxy, client: aiohttp.ClientSession, sim_cluster: SimCluster
) -> None:
    ep = await proxy.endpoint("a")
    kubeconfig = yaml.safe_load(ep.kubeconfig.read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == ep.url
    code, created = await call(client, "POST", ep.url + CONFIGMAPS, configmap("one"))
    assert code == 201 and created["metadata"]["name"] == "one"
    assert sim_cluster.store.get("configmaps", "default", "one") is not None
    code, listed = await call(client, "GET", ep.url + CONFIGMAPS)
    assert code == 200 and names(listed) == ["one"]
    code, missing = await call(client, "GET", ep.url + CONFIGMAPS + "/none")
    assert code == 404 and missing["reason"] == "NotFound"
    async with client.get(
        ep.url + CONFIGMAPS, params={"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
    ) as resp:
        stream = Stream(resp)
        assert (await call(client, "PATCH", ep.url + CONFIGMAPS + "/one", {"data": {"v": "2"}}))[0] == 200
        event = await stream.next()
        assert event is not None and event["type"] == "MODIFIED" and event["object"]["data"] == {"v": "2"}
    writes = state_writes(proxy.since(0))
    assert [(w.method, w.target, w.name or w.created, w.code) for w in writes] == [
        ("POST", "configmaps", "one", 201),
        ("PATCH", "configmaps", "one", 200),
    ]


async def test_a_crash_after_write_k_kills_once_the_write_is_committed_and_never_answers(
    proxy: PerturbingProxy, client: aiohttp.ClientSession, sim_cluster: SimCluster
) -> None:
    ep = await proxy.endpoint("a")
    killed: list[float] = []

    async def kill() -> None:
        killed.append(time.monotonic())

    rule = ep.crash_after(2, kill)
    assert (await call(client, "POST", ep.url + CONFIGMAPS, configmap("one")))[0] == 201
    # An Event is not a state write: it neither counts nor crashes.
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}, "involvedObject": {}, "reason": "R"}
    assert (await call(client, "POST", ep.url + "/api/v1/namespaces/default/events", event))[0] == 201
    with pytest.raises(TimeoutError):
        await call(client, "POST", ep.url + CONFIGMAPS, configmap("two"), timeout=1.0)
    await asyncio.wait_for(rule.done.wait(), 30)
    assert len(killed) == 1 and rule.fired is not None and rule.fired.created == "two"
    assert sim_cluster.store.get("configmaps", "default", "two") is not None, "the write was committed"
    # Frozen: nothing more reaches the server, nothing more is answered.
    with pytest.raises(TimeoutError):
        await call(client, "POST", ep.url + CONFIGMAPS, configmap("three"), timeout=1.0)
    assert sim_cluster.store.get("configmaps", "default", "three") is None
    assert len(killed) == 1


async def test_the_first_list_is_served_from_the_past_and_the_watch_replays_after_the_hold(
    proxy: PerturbingProxy, client: aiohttp.ClientSession
) -> None:
    direct = proxy.upstream
    await call(client, "POST", direct + CONFIGMAPS, configmap("one"))
    _, listed = await call(client, "GET", direct + CONFIGMAPS)
    past = int(listed["metadata"]["resourceVersion"])
    await call(client, "POST", direct + CONFIGMAPS, configmap("two"))
    await call(client, "PATCH", direct + CONFIGMAPS + "/one", {"data": {"v": "2"}})
    ep = await proxy.endpoint("standby")
    rule = ep.stale_first_lists({"configmaps": past}, hold_seconds=1.0)
    code, stale = await call(client, "GET", ep.url + CONFIGMAPS, timeout=10)
    assert code == 200 and names(stale) == ["one"] and stale["items"][0]["data"] == {"v": "1"}
    assert stale["metadata"]["resourceVersion"] == str(past) and rule.served == {"configmaps": past}
    _, fresh = await call(client, "GET", ep.url + CONFIGMAPS)  # only the first list is stale
    assert names(fresh) == ["one", "two"]
    async with client.get(ep.url + CONFIGMAPS, params={"watch": "true", "resourceVersion": str(past)}) as resp:
        stream = Stream(resp)
        events = await stream.collect(2)
        arrived = time.monotonic()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "two"), ("MODIFIED", "one")]
    assert arrived >= rule.hold_until["configmaps"], "the replay came before the hold ended"


async def test_coalescing_passes_on_the_latest_version_of_each_object_once(
    proxy: PerturbingProxy, client: aiohttp.ClientSession, sim_cluster: SimCluster
) -> None:
    ep = await proxy.endpoint("a")
    _, listed = await call(client, "GET", ep.url + CONFIGMAPS)
    await call(client, "POST", proxy.upstream + CONFIGMAPS, configmap("kept"))
    ep.coalesce(math.inf)  # gather until flushed
    async with client.get(
        ep.url + CONFIGMAPS, params={"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
    ) as resp:
        stream = Stream(resp)
        await call(client, "PATCH", proxy.upstream + CONFIGMAPS + "/kept", {"data": {"v": "2"}})
        await call(client, "PATCH", proxy.upstream + CONFIGMAPS + "/kept", {"data": {"v": "3"}})
        await call(client, "POST", proxy.upstream + CONFIGMAPS, configmap("brief"))
        await call(client, "DELETE", proxy.upstream + CONFIGMAPS + "/brief")
        await call(client, "POST", proxy.upstream + CONFIGMAPS, configmap("new"))
        await _until(lambda: ep.gathered == 6, "six events gathered")
        assert await _nothing_within(stream, 0.3), "an event was passed on before the flush"
        ep.flush()
        events = await stream.collect(2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "kept"), ("ADDED", "new")]
    assert events[0]["object"]["data"] == {"v": "3"}
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs)


async def test_expired_watches_end_with_a_410_and_drop_what_was_not_passed_on(
    proxy: PerturbingProxy, client: aiohttp.ClientSession
) -> None:
    ep = await proxy.endpoint("a")
    _, listed = await call(client, "GET", ep.url + CONFIGMAPS)
    rule = ep.expire_after(1)
    async with client.get(
        ep.url + CONFIGMAPS, params={"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"]}
    ) as resp:
        stream = Stream(resp)
        await _until(lambda: len(ep.watches) == 1, "the watch to be open")
        ep.coalesce(math.inf)  # hold the event of the write in the window, then expire before the flush
        assert (await call(client, "POST", ep.url + CONFIGMAPS, configmap("one")))[0] == 201
        event = await stream.next()
        assert event is not None and event["type"] == "ERROR"
        assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
        assert await stream.next() is None, "the watch goes on after its 410"
    assert rule.fired and ep.expired_watches == 1


async def _until(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not reached: {what}"
        await asyncio.sleep(0.01)


async def _nothing_within(stream: Stream, seconds: float) -> bool:
    try:
        await stream.next(timeout=seconds)
    except TimeoutError:
        return True
    return False
