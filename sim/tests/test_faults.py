"""Every fault of the simulator, seen from a client: what it receives must be what a real apiserver
(or the network in front of it) would send. Also the request log and the /_sim/ HTTP control API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import anyio
import orjson
import pytest

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.objects import pod
from tfjob_sim.testing.waiting import eventually, never
from tfjob_sim.testing.watchstream import open_watch
from tfjob_sim.watch import WatchConfig

CMS = "/api/v1/namespaces/default/configmaps"
PODS = "/api/v1/namespaces/default/pods"


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=2, time_scale=0.01, fault_seed=7, watch=WatchConfig(bookmark_period=0.2))


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def get(session: aiohttp.ClientSession, cluster: SimCluster, path: str) -> tuple[int, bytes, dict]:
    async with session.get(cluster.url + path) as resp:
        return resp.status, await resp.read(), dict(resp.headers)


async def test_429_is_plain_text_with_retry_after(session, sim_cluster: SimCluster) -> None:
    sim_cluster.faults.fail("list", "configmaps", 429, retry_after=3)
    code, body, headers = await get(session, sim_cluster, CMS)
    assert code == 429
    assert body == b"Too many requests, please try again later.\n"
    assert headers["Content-Type"].startswith("text/plain") and headers["Retry-After"] == "3"
    assert "X-Kubernetes-PF-FlowSchema-UID" in headers
    assert (await get(session, sim_cluster, "/api/v1/namespaces/default/secrets"))[0] == 200  # other resource


@pytest.mark.parametrize(
    ("code", "reason", "message"),
    [
        (500, "InternalError", "Internal error occurred: injected fault"),
        (503, "ServiceUnavailable", "apiserver is shutting down"),
        (504, "Timeout", "Timeout: request did not complete within the allotted timeout"),
    ],
)
async def test_server_errors_are_status_objects(
    session, sim_cluster: SimCluster, code: int, reason: str, message: str
) -> None:
    sim_cluster.faults.fail_next("get", "configmaps", code, retry_after=1 if code == 503 else None)
    sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "a"}})
    status, body, headers = await get(session, sim_cluster, CMS + "/a")
    assert status == code
    parsed = orjson.loads(body)
    assert parsed["kind"] == "Status" and parsed["reason"] == reason and parsed["code"] == code
    assert parsed["message"] == message
    if code == 503:
        assert headers["Retry-After"] == "1"
    assert (await get(session, sim_cluster, CMS + "/a"))[0] == 200  # one-shot


async def test_one_shot_conflict_then_success(session, sim_cluster: SimCluster) -> None:
    obj = sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"k": "1"}})
    sim_cluster.faults.fail_next("update", "configmaps", 409, count=2)
    body = orjson.dumps({**obj, "data": {"k": "2"}})
    codes = []
    for _ in range(3):
        async with session.put(
            sim_cluster.url + CMS + "/a", data=body, headers={"Content-Type": "application/json"}
        ) as resp:
            codes.append(resp.status)
            if resp.status == 409:
                parsed = await resp.json()
                assert parsed["reason"] == "Conflict" and 'configmaps "a"' in parsed["message"]
    assert codes == [409, 409, 200]


async def test_error_rate_and_matching(session, sim_cluster: SimCluster) -> None:
    sim_cluster.faults.fail("get", "pods", 500, rate=0.5)
    sim_cluster.store.create("pods", "default", pod("p"))
    codes = [(await get(session, sim_cluster, PODS + "/p"))[0] for _ in range(40)]
    assert 5 < codes.count(500) < 35 and codes.count(200) == 40 - codes.count(500)
    sim_cluster.faults.clear()
    rule = sim_cluster.faults.fail("get", "pods", 503)  # "pods" covers its subresources
    assert (await get(session, sim_cluster, PODS + "/p/status"))[0] == 503
    assert (await get(session, sim_cluster, PODS))[0] == 200  # a list is not a get
    sim_cluster.faults.remove(rule)
    assert (await get(session, sim_cluster, PODS + "/p"))[0] == 200
    with pytest.raises(ValueError):
        sim_cluster.faults.fail("frobnicate", "pods", 500)
    # Every kind of rule refuses what could never match as meant, not only an error rule.
    with pytest.raises(ValueError, match="unknown verb 'gett'"):
        sim_cluster.faults.drop_connections("gett", "pods")
    with pytest.raises(ValueError, match="rate must be within"):
        sim_cluster.faults.drop_connections("get", "pods", rate=2.0)
    with pytest.raises(ValueError, match="count must be >= 1"):
        sim_cluster.faults.drop_connections("get", "pods", count=0)
    with pytest.raises(ValueError, match="unknown verb 'lsit'"):
        sim_cluster.faults.add_latency(0.1, "lsit", "pods")
    assert sim_cluster.faults.rules == []
    async with session.post(sim_cluster.url + "/_sim/faults", json={"drop": True, "verb": "gett"}) as resp:
        assert resp.status == 400 and "unknown verb 'gett'" in (await resp.json())["error"]


async def test_faults_aimed_at_one_client(session, sim_cluster: SimCluster) -> None:
    """A rule with a user agent throttles that client's flow only; others are served (APF per flow)."""

    async def list_as(agent: str) -> int:
        async with session.get(sim_cluster.url + CMS, headers={"User-Agent": agent}) as resp:
            return resp.status

    sim_cluster.faults.fail("list", "configmaps", 429, user_agent="tfjob-controller")
    assert await list_as("tfjob-controller/0.1.0 (leader)") == 429
    assert await list_as("soak-observer") == 200
    async with session.post(
        sim_cluster.url + "/_sim/faults", json={"code": 503, "resource": "secrets", "userAgent": "kubectl"}
    ) as resp:
        assert resp.status == 201 and (await resp.json())["userAgent"] == "kubectl"
    async with session.get(
        sim_cluster.url + "/api/v1/namespaces/default/secrets", headers={"User-Agent": "kubectl/v1.31.0"}
    ) as resp:
        assert resp.status == 503
    async with session.post(sim_cluster.url + "/_sim/faults", json={"code": 503, "userAgent": 7}) as resp:
        assert resp.status == 400 and "userAgent must be a string" in (await resp.json())["error"]


async def test_latency(session, sim_cluster: SimCluster) -> None:
    rule = sim_cluster.faults.add_latency(0.3, "list", "configmaps")
    start = anyio.current_time()
    assert (await get(session, sim_cluster, CMS))[0] == 200
    assert anyio.current_time() - start >= 0.3
    # Only matching requests wait: with a minute of latency on configmaps, a secrets request still answers (a
    # bound on how fast it answers would be a timed test; a minute against 30 s is a difference no load blurs).
    sim_cluster.faults.remove(rule)
    sim_cluster.faults.add_latency(60, "list", "configmaps")
    with anyio.fail_after(30):
        assert (await get(session, sim_cluster, "/api/v1/namespaces/default/secrets"))[0] == 200


async def test_dropped_connection(session, sim_cluster: SimCluster) -> None:
    # aiohttp (hence kubernetes-asyncio) retries an idempotent request once on a dropped connection.
    sim_cluster.faults.drop_connections("list", "configmaps", count=2)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await get(session, sim_cluster, CMS)
    assert (await get(session, sim_cluster, CMS))[0] == 200
    sim_cluster.faults.drop_connections("create", "configmaps", count=1)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    with pytest.raises(aiohttp.ServerDisconnectedError):
        async with session.post(sim_cluster.url + CMS, json=body):
            pass
    assert sim_cluster.store.get("configmaps", "default", "x") is None  # dropped before handling


async def test_close_all_watches(session, sim_cluster: SimCluster) -> None:
    rv = sim_cluster.store.resource_version
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&resourceVersion={rv}")
    await eventually(lambda: sim_cluster.hub.watchers("configmaps"))
    assert sim_cluster.faults.close_watches() == 1
    assert await stream.expect_eof() == []


async def test_stalled_watch_sends_nothing_until_closed(session, sim_cluster: SimCluster) -> None:
    rv = sim_cluster.store.resource_version
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&allowWatchBookmarks=true&resourceVersion={rv}")
    await eventually(lambda: sim_cluster.hub.watchers("configmaps"))
    sim_cluster.faults.stall_watches("configmaps")
    sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "unseen"}})
    with pytest.raises(TimeoutError):  # no event and no bookmark (period 0.2 s) within a second
        await stream.next(timeout=1.0)
    assert not stream.resp.content.at_eof()
    sim_cluster.faults.unstall_watches()
    assert await stream.expect_eof() == []


async def test_delayed_watch_events_for_one_watcher(session, sim_cluster: SimCluster) -> None:
    rv = sim_cluster.store.resource_version
    slow = await open_watch(
        session, sim_cluster, f"{CMS}?watch=true&resourceVersion={rv}", {"User-Agent": "slow-informer/1.0"}
    )
    fast = await open_watch(session, sim_cluster, f"{CMS}?watch=true&resourceVersion={rv}")
    await eventually(lambda: len(sim_cluster.hub.watchers("configmaps")) == 2)
    sim_cluster.faults.delay_watch_events(0.4, "configmaps", user_agent="slow-informer")
    start = anyio.current_time()
    sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "late"}})
    assert (await slow.next())["object"]["metadata"]["name"] == "late"
    assert anyio.current_time() - start >= 0.4
    assert (await fast.next())["object"]["metadata"]["name"] == "late"
    # Only the slow watcher waits: with its events a minute late, the other one still gets the next event
    # (a bound on how fast would be a timed test; a minute against 30 s is a difference no load blurs).
    sim_cluster.faults.delay_watch_events(60, "configmaps", user_agent="slow-informer")
    sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "later"}})
    assert (await fast.next(timeout=30))["object"]["metadata"]["name"] == "later"
    slow.resp.close()
    fast.resp.close()


async def test_compaction_makes_resume_410(session, sim_cluster: SimCluster) -> None:
    rv = sim_cluster.store.resource_version
    sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "a"}})
    sim_cluster.faults.compact()
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&resourceVersion={rv}")
    (error,) = await stream.expect_eof()
    assert error["type"] == "ERROR" and error["object"]["code"] == 410


async def test_restart_drops_connections_and_keeps_state(session, sim_cluster: SimCluster) -> None:
    sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "kept"}})
    rv = sim_cluster.store.resource_version
    port = sim_cluster.port
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&resourceVersion={rv}")
    await eventually(lambda: sim_cluster.hub.watchers("configmaps"))
    await sim_cluster.faults.restart_server()
    assert sim_cluster.port == port
    try:
        assert await stream.expect_eof() == []
    except aiohttp.ClientPayloadError:
        pass  # a dropped connection may also surface as an incomplete body
    code, body, _ = await get(session, sim_cluster, CMS + "/kept")
    assert code == 200 and orjson.loads(body)["metadata"]["resourceVersion"] == str(rv)
    assert sim_cluster.store.resource_version == rv
    # The HTTP control endpoint restarts too (answers first, then restarts).
    restarts = sim_cluster.server.restarts
    async with session.post(sim_cluster.url + "/_sim/restart") as resp:
        assert resp.status == 202
    await eventually(lambda: sim_cluster.server.restarts == restarts + 1)

    async def serving() -> bool:
        return (await get(session, sim_cluster, CMS + "/kept"))[0] == 200

    await eventually(serving, timeout=30, interval=0.02, tolerate=(aiohttp.ClientError,), what="the server back")


async def test_pause_and_resume_kubelet(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    sim_cluster.faults.pause_kubelet()
    store.create("pods", "default", pod("held"))
    # Unpaused, the kubelet (scheduler included) runs the pod within a few loop turns at this time scale.
    await never(
        lambda: store.get("pods", "default", "held")["status"].get("phase") == "Running",
        within=0.5,
        what="a pod started by a paused kubelet",
    )
    sim_cluster.faults.resume_kubelet()
    await eventually(lambda: store.get("pods", "default", "held")["status"].get("phase") == "Running")


async def test_pause_and_resume_gc(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    owner = store.create("configmaps", "default", {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
    store.create("configmaps", "default", {"metadata": {"name": "dep", "ownerReferences": [ref]}})
    sim_cluster.faults.pause_gc()
    store.delete("configmaps", "default", "owner")
    await never(
        lambda: store.get("configmaps", "default", "dep") is None,
        within=0.5,
        what="a dependent collected by a paused garbage collector",
    )
    sim_cluster.faults.resume_gc()
    await eventually(lambda: store.get("configmaps", "default", "dep") is None)


async def test_node_not_ready(sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    sim_cluster.faults.set_node_ready("sim-node-0", False)
    ready = {c["type"]: c["status"] for c in store.get("nodes", None, "sim-node-0")["status"]["conditions"]}
    assert ready["Ready"] == "Unknown"
    sim_cluster.faults.set_node_ready("sim-node-0", True)
    ready = {c["type"]: c["status"] for c in store.get("nodes", None, "sim-node-0")["status"]["conditions"]}
    assert ready["Ready"] == "True"
    with pytest.raises(Exception, match="not found"):
        sim_cluster.faults.set_node_ready("no-such-node", False)


async def test_request_log_counts_between_marks(session, sim_cluster: SimCluster) -> None:
    faults = sim_cluster.faults
    mark = faults.mark()
    await get(session, sim_cluster, CMS)
    await get(session, sim_cluster, CMS + "/missing")
    await get(session, sim_cluster, "/api")  # discovery: not a resource verb
    assert faults.count("list", "configmaps", since=mark) == 1
    assert faults.count("get", since=mark) == 1
    assert faults.writes(since=mark) == 0
    assert faults.counts(since=mark) == {("list", "configmaps"): 1, ("get", "configmaps"): 1}
    records = faults.requests(since=mark)
    assert [r.code for r in records] == [200, 404, 200]
    second = faults.mark()
    async with session.post(
        sim_cluster.url + CMS, json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}}
    ) as resp:
        assert resp.status == 201
    assert faults.writes(since=second) == 1 and faults.writes(since=mark) == 1


async def test_http_control_api(session, sim_cluster: SimCluster) -> None:
    base = sim_cluster.url + "/_sim"
    async with session.post(
        base + "/faults", json={"verb": "list", "resource": "configmaps", "code": 503, "count": 1, "retryAfter": 2}
    ) as resp:
        assert resp.status == 201
        rule = await resp.json()
    code, _, headers = await get(session, sim_cluster, CMS)
    assert code == 503 and headers["Retry-After"] == "2"
    async with session.get(base + "/requests", params={"since": "0"}) as resp:
        log = await resp.json()
    assert log["counts"]["list configmaps"] >= 1
    assert any(r["fault"] == "error 503" for r in log["requests"])
    async with session.post(base + "/faults", json={"verb": "get", "code": 500}) as resp:
        rule = await resp.json()
    async with session.delete(f"{base}/faults/{rule['id']}") as resp:
        assert resp.status == 200
    async with session.post(base + "/faults", json={"verb": "nope", "code": 500}) as resp:
        assert resp.status == 400 and "unknown verb" in (await resp.json())["error"]
    for action in ("kubelet/pause", "kubelet/resume", "gc/pause", "gc/resume", "compact", "watches/close"):
        async with session.post(f"{base}/{action}") as resp:
            assert resp.status == 200, action
    async with session.post(base + "/nodes/sim-node-1/ready", json={"ready": False}) as resp:
        assert resp.status == 200
    async with session.post(base + "/nodes/sim-node-1/ready", json={"ready": "no"}) as resp:
        assert resp.status == 400
    async with session.get(base + "/bogus") as resp:
        assert resp.status == 404


# --- the benchmark-facing control API: who made which requests, when the store committed what, bulk loads


async def test_request_summary_counts_per_user_agent(session, sim_cluster: SimCluster) -> None:
    mark = sim_cluster.faults.mark()
    for agent in ("one/1.0", "one/1.0", "two/2.0"):
        async with session.post(
            sim_cluster.url + CMS,
            data=orjson.dumps({"metadata": {"generateName": "c-"}}),
            headers={"User-Agent": agent, "Content-Type": "application/json"},
        ) as resp:
            assert resp.status == 201
    async with session.get(sim_cluster.url + CMS, headers={"User-Agent": "two/2.0"}) as resp:
        assert resp.status == 200
    code, body, _ = await get(session, sim_cluster, f"/_sim/requests/summary?since={mark}")
    assert code == 200
    summary = orjson.loads(body)
    assert summary["byUserAgent"]["one/1.0"] == {"create configmaps": 2}
    assert summary["byUserAgent"]["two/2.0"] == {"create configmaps": 1, "list configmaps": 1}
    assert summary["mark"] == mark + 4


async def test_history_reports_each_committed_change_with_the_store_time(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    since = store.resource_version
    created = store.create("configmaps", "default", {"metadata": {"name": "h"}, "data": {"a": "1"}})
    store.delete("configmaps", "default", "h")
    code, body, _ = await get(session, sim_cluster, f"/_sim/history?resource=configmaps&since={since}")
    assert code == 200
    answer = orjson.loads(body)
    events = [e for e in answer["events"] if e["name"] == "h"]
    assert [e["type"] for e in events] == ["ADDED", "DELETED"]
    assert events[0]["uid"] == created["metadata"]["uid"] and events[0]["namespace"] == "default"
    assert events[0]["time"] <= events[1]["time"] and events[0]["rv"] < events[1]["rv"]
    assert answer["resourceVersion"] == store.resource_version


async def test_history_reports_phase_and_true_conditions(session, sim_cluster: SimCluster) -> None:
    since = sim_cluster.store.resource_version
    async with session.post(
        sim_cluster.url + PODS, data=orjson.dumps(pod("hp")), headers={"Content-Type": "application/json"}
    ) as resp:
        assert resp.status == 201

    async def running() -> bool:
        code, body, _ = await get(session, sim_cluster, f"/_sim/history?resource=pods&since={since}")
        return any(e.get("phase") == "Running" and "Ready" in e.get("true", []) for e in orjson.loads(body)["events"])

    await eventually(running, what="a Running, Ready pod in the history")


async def test_history_older_than_retained_is_410(session, sim_cluster: SimCluster) -> None:
    sim_cluster.store.create("configmaps", "default", {"metadata": {"name": "old"}})
    since = sim_cluster.store.resource_version - 1
    sim_cluster.faults.compact()
    code, body, _ = await get(session, sim_cluster, f"/_sim/history?resource=configmaps&since={since}")
    assert code == 410 and orjson.loads(body)["reason"] == "Expired"


async def test_bulk_objects_create_and_replace_status_with_api_semantics(session, sim_cluster: SimCluster) -> None:
    sim_cluster.faults.pause_kubelet()  # nothing else writes the pods while the test replaces a status
    mark = sim_cluster.faults.mark()
    items = [pod(f"bulk-{i}") for i in range(3)] + [{"metadata": {"name": "bad name"}, "spec": {}}]
    async with session.post(
        sim_cluster.url + "/_sim/objects",
        data=orjson.dumps({"resource": "pods", "namespace": "default", "items": items}),
    ) as resp:
        assert resp.status == 200
        answer = await resp.json()
    assert [i["name"] for i in answer["items"]] == ["bulk-0", "bulk-1", "bulk-2"]
    assert len(answer["errors"]) == 1 and answer["errors"][0]["code"] == 422  # validated like an API create
    stored = sim_cluster.store.get("pods", "default", "bulk-0")
    assert stored["metadata"]["uid"] == answer["items"][0]["uid"]
    assert stored["spec"]["containers"][0]["terminationMessagePath"]  # defaulted like an API create
    status_item = {
        "metadata": {"name": "bulk-1", "resourceVersion": answer["items"][1]["resourceVersion"]},
        "status": {"phase": "Pending", "message": "loaded"},
    }
    async with session.post(
        sim_cluster.url + "/_sim/objects",
        data=orjson.dumps(
            {"resource": "pods", "namespace": "default", "subresource": "status", "items": [status_item]}
        ),
    ) as resp:
        answer = await resp.json()
    assert (
        answer["errors"] == [] and sim_cluster.store.get("pods", "default", "bulk-1")["status"]["message"] == "loaded"
    )
    assert sim_cluster.faults.count(since=mark) == 0  # control calls are not API requests
    async with session.post(
        sim_cluster.url + "/_sim/objects", data=orjson.dumps({"resource": "pods", "subresource": "scale", "items": []})
    ) as resp:
        assert resp.status == 400 and "subresource" in (await resp.json())["error"]
