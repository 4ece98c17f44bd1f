"""Watch semantics on the wire: synthetic ADDEDs, exact resume, 410 as
an ERROR event, selector transitions, DELETED with the deletion RV, bookmarks, timeoutSeconds with a
clean EOF, one compact JSON object per line, slow-consumer termination."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import anyio
import orjson
import pytest

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.objects import pod, widget_crd
from tfjob_sim.testing.waiting import eventually
from tfjob_sim.testing.watchstream import open_watch
from tfjob_sim.watch import WatchConfig

CMS = "/api/v1/namespaces/default/configmaps"


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(
        nodes=1,
        time_scale=0.01,
        kubelet=False,
        gc=False,
        watch=WatchConfig(bookmark_period=0.2, bookmark_before_deadline=0.3, buffer_limit=50),
    )


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def cm(store, name: str, labels: dict | None = None, **data: str) -> dict:
    return store.create(
        "configmaps", "default", {"metadata": {"name": name, **({"labels": labels} if labels else {})}, "data": data}
    )


def summary(events: list[dict]) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["object"]["metadata"].get("name", ""), e["object"]["metadata"]["resourceVersion"]) for e in events
    ]


async def test_headers_arrive_before_any_event_and_lines_are_compact(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    with anyio.fail_after(30):  # an empty watch must still answer with headers at once, not at its first event
        stream = await open_watch(session, sim_cluster, f"{CMS}?watch=True&resourceVersion={store.resource_version}")
    assert stream.resp.headers["Content-Type"] == "application/json"
    assert stream.resp.headers.get("Transfer-Encoding") == "chunked"
    created = cm(store, "a", v="x" * 300_000)  # a line far beyond 128 KiB
    event = await stream.next()
    assert event["type"] == "ADDED" and event["object"] == created
    assert event["object"]["kind"] == "ConfigMap" and event["object"]["apiVersion"] == "v1"
    assert stream.raw_lines[0] == orjson.dumps(event)  # compact, one object per line
    stream.resp.close()


async def test_synthetic_added_then_changes(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    cm(store, "a"), cm(store, "b")
    for rv_param in ("", "&resourceVersion=0"):
        a, b = store.get("configmaps", "default", "a"), store.get("configmaps", "default", "b")
        stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true{rv_param}")
        initial = await stream.collect(2)
        assert sorted(summary(initial)) == [
            ("ADDED", "a", a["metadata"]["resourceVersion"]),
            ("ADDED", "b", b["metadata"]["resourceVersion"]),
        ]
        changed = store.patch("configmaps", "default", "a", "merge", {"data": {"k": rv_param or "unset"}})
        assert summary(await stream.collect(1)) == [("MODIFIED", "a", changed["metadata"]["resourceVersion"])]
        stream.resp.close()


async def test_resume_from_rv_is_exact_and_deleted_carries_deletion_rv(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    cm(store, "a")
    start = store.resource_version
    b = cm(store, "b")
    store.patch("configmaps", "default", "a", "merge", {"data": {"x": "1"}})
    store.delete("configmaps", "default", "b")
    deletion_rv = str(store.resource_version)
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=1&resourceVersion={start}")
    events = await stream.collect(3)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] == start + 1
    deleted = events[2]["object"]
    assert deleted["metadata"]["resourceVersion"] == deletion_rv
    assert deleted["metadata"]["uid"] == b["metadata"]["uid"]
    stream.resp.close()


async def test_too_old_rv_is_an_error_event_then_eof(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    cm(store, "a")
    old = store.resource_version
    cm(store, "b")
    sim_cluster.faults.compact()
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&resourceVersion={old}")
    events = await stream.expect_eof()
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {old} (")


async def test_selector_transitions(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    cm(store, "a", labels={"app": "web"})
    start = store.resource_version
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&labelSelector=app%3Dweb&resourceVersion={start}")
    before = store.get("configmaps", "default", "a")
    store.patch("configmaps", "default", "a", "merge", {"metadata": {"labels": {"app": "db"}}})
    left_rv = str(store.resource_version)
    cm(store, "other", labels={"app": "db"})  # never matches: no event
    store.patch("configmaps", "default", "a", "merge", {"metadata": {"labels": {"app": "web"}}})
    events = await stream.collect(2)
    assert summary(events) == [("DELETED", "a", left_rv), ("ADDED", "a", str(store.resource_version))]
    # Leaving the selector is reported with the previous state (still labelled app=web).
    assert events[0]["object"]["metadata"]["labels"] == before["metadata"]["labels"]
    stream.resp.close()


async def test_namespace_and_field_selector_scope(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    store.create("namespaces", None, {"metadata": {"name": "other"}})
    start = store.resource_version
    stream = await open_watch(
        session, sim_cluster, f"{CMS}?watch=true&fieldSelector=metadata.name%3Dwanted&resourceVersion={start}"
    )
    store.create("configmaps", "other", {"metadata": {"name": "wanted"}})
    cm(store, "unwanted")
    mine = cm(store, "wanted")
    assert summary(await stream.collect(1)) == [("ADDED", "wanted", mine["metadata"]["resourceVersion"])]
    stream.resp.close()


async def test_bookmarks_only_when_asked(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    cm(store, "a")
    rv = store.resource_version
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&allowWatchBookmarks=True&resourceVersion={rv}")
    store.create("secrets", "default", {"metadata": {"name": "s"}})  # progress elsewhere
    event = await stream.next()
    assert event["type"] == "BOOKMARK"
    assert event["object"]["kind"] == "ConfigMap" and event["object"]["apiVersion"] == "v1"
    assert event["object"]["metadata"]["resourceVersion"] == str(store.resource_version)
    stream.resp.close()
    quiet = await open_watch(session, sim_cluster, f"{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=1")
    assert await quiet.expect_eof() == []  # no bookmarks without allowWatchBookmarks


async def test_timeout_seconds_ends_cleanly_after_a_pre_deadline_bookmark(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    rv = store.resource_version
    sim_cluster.hub.config.bookmark_period = 60.0  # only the pre-deadline bookmark can arrive
    started = anyio.current_time()
    stream = await open_watch(
        session, sim_cluster, f"{CMS}?watch=true&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={rv}"
    )
    # Without timeoutSeconds the watch would run for the server's default (minutes): the read deadline tells.
    events = await stream.expect_eof()
    elapsed = anyio.current_time() - started
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert elapsed >= 0.9, elapsed


async def test_slow_watcher_is_closed_with_plain_eof(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    rv = store.resource_version
    stream = await open_watch(session, sim_cluster, f"{CMS}?watch=true&resourceVersion={rv}")
    await eventually(lambda: sim_cluster.hub.watchers("configmaps"), timeout=30, what="the watch registered")
    for i in range(60):  # one synchronous burst: more than buffer_limit (50) undelivered events
        cm(store, f"burst-{i}")
    assert await stream.expect_eof() == []
    assert not sim_cluster.hub.watchers("configmaps")


async def test_table_watch_for_kubectl_get_w(session, sim_cluster: SimCluster) -> None:
    store = sim_cluster.store
    rv = store.resource_version
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    stream = await open_watch(
        session, sim_cluster, f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}", {"Accept": accept}
    )
    store.create("pods", "default", pod("tp"))
    event = await stream.next()
    assert event["type"] == "ADDED" and event["object"]["kind"] == "Table"
    assert event["object"]["rows"][0]["cells"][:3] == ["tp", "0/1", "Pending"]
    stream.resp.close()


async def test_watch_of_unknown_resource_or_bad_params(session, sim_cluster: SimCluster) -> None:
    async with session.get(sim_cluster.url + "/api/v1/frobs?watch=true") as resp:
        assert resp.status == 404
    async with session.get(sim_cluster.url + f"{CMS}?watch=true&resourceVersion=x") as resp:
        assert resp.status == 400
        body = await resp.json()
        assert body["reason"] == "BadRequest"


async def test_watches_of_a_custom_resource_end_when_its_crd_goes(session, sim_cluster: SimCluster) -> None:

    store = sim_cluster.store
    store.create("customresourcedefinitions.apiextensions.k8s.io", None, widget_crd())
    rv = store.resource_version
    stream = await open_watch(
        session, sim_cluster, f"/apis/example.com/v1/namespaces/default/widgets?watch=true&resourceVersion={rv}"
    )
    store.delete("customresourcedefinitions.apiextensions.k8s.io", None, "widgets.example.com")
    assert await stream.expect_eof() == []
