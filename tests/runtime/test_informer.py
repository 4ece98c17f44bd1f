"""Informer behaviour against the simulated apiserver and its fault injection.

Every scenario ends with the same two checks: the informer's cache equals the server's state (keys and
resourceVersions), and a *mirror* built only from the handler notifications equals it too — so no
change, and in particular no deletion, was lost on the way to the handlers. The simulator's request log
proves that no relist happened where a plain re-watch suffices.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from controller.runtime.cache import CONTROLLER_UID_INDEX, DeletedFinalStateUnknown, controller_owner_uid_index
from controller.runtime.client import CONFIGMAPS, NODES, ApiClient, Resource, RetryPolicy
from controller.runtime.clock import FakeClock
from controller.runtime.informer import Backoff, Informer, _BackoffState
from tfjob_sim.cluster import SimConfig
from tfjob_sim.testing.waiting import eventually
from tfjob_sim.watch import WatchConfig

NS = "default"
FAST_BACKOFF = Backoff(initial=0.05, factor=2.0, cap=0.2, jitter=0.5, reset_after=5.0)


@pytest.fixture
def sim_config() -> SimConfig:
    # Config maps only: no kubelet/GC writing on their own, so "equal to the server" is a fixed point.
    return SimConfig(nodes=1, kubelet=False, gc=False, watch=WatchConfig(bookmark_period=60.0))


async def wait_until(condition, timeout: float = 30.0, what: str = "") -> None:
    await eventually(condition, timeout, what=what)


class Mirror:
    """State rebuilt purely from handler calls; also records what was called."""

    def __init__(self, informer: Informer) -> None:
        self.state: dict[str, str] = {}
        self.adds: list[str] = []
        self.updates: list[tuple[str, str, str]] = []
        self.deletes: list[dict | DeletedFinalStateUnknown] = []
        informer.add_handler(self.on_add, self.on_update, self.on_delete)

    @staticmethod
    def _key(obj: dict) -> str:
        m = obj["metadata"]
        return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]

    def on_add(self, obj: dict) -> None:
        key = self._key(obj)
        assert key not in self.state, f"add for a key already present: {key}"
        self.state[key] = obj["metadata"]["resourceVersion"]
        self.adds.append(key)

    def on_update(self, old: dict, new: dict) -> None:
        key = self._key(new)
        assert self.state.get(key) == old["metadata"]["resourceVersion"], "old is not the last state delivered"
        assert old["metadata"]["resourceVersion"] != new["metadata"]["resourceVersion"], "no-op update delivered"
        self.state[key] = new["metadata"]["resourceVersion"]
        self.updates.append((key, old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"]))

    def on_delete(self, obj: dict | DeletedFinalStateUnknown) -> None:
        key = obj.key if isinstance(obj, DeletedFinalStateUnknown) else self._key(obj)
        assert key in self.state, f"delete for an unknown key: {key}"
        del self.state[key]
        self.deletes.append(obj)

    def tombstones(self) -> list[DeletedFinalStateUnknown]:
        return [d for d in self.deletes if isinstance(d, DeletedFinalStateUnknown)]


def server_state(cluster, resource: str = "configmaps", namespace: str | None = NS) -> dict[str, str]:
    items, _ = cluster.store.list(resource, namespace)
    return {
        (
            f"{i['metadata']['namespace']}/{i['metadata']['name']}"
            if i["metadata"].get("namespace")
            else i["metadata"]["name"]
        ): i["metadata"]["resourceVersion"]
        for i in items
    }


def cache_state(informer: Informer) -> dict[str, str]:
    return {k: o["metadata"]["resourceVersion"] for k in informer.cache.keys() for o in [informer.cache.get(k)]}


async def converged(
    cluster, informer: Informer, mirror: Mirror, namespace: str | None = NS, timeout: float = 30.0
) -> None:
    await wait_until(
        lambda: (
            cache_state(informer) == server_state(cluster, namespace=namespace)
            and mirror.state == cache_state(informer)
        ),
        timeout,
        "informer cache / handler mirror equal to the server state",
    )


def cm(name: str, ns: str = NS, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": dict(data) or {"v": "0"},
    }


def bump(cluster, name: str, value: str, ns: str = NS) -> None:
    cluster.store.patch("configmaps", ns, name, "merge", {"data": {"v": value}})


@asynccontextmanager
async def running(
    cluster, resource: Resource = CONFIGMAPS, **kwargs: Any
) -> AsyncIterator[tuple[Informer, Mirror, CollectorRegistry]]:
    registry = CollectorRegistry()
    kwargs.setdefault("namespace", NS)
    kwargs.setdefault("backoff", FAST_BACKOFF)
    kwargs.setdefault("inactivity_timeout", 30.0)
    async with await ApiClient.from_kubeconfig(
        cluster.kubeconfig_path,
        retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05, max_retry_after=0.05),
    ) as client:
        informer = Informer(client, resource, registry=registry, **kwargs)
        mirror = Mirror(informer)
        async with anyio.create_task_group() as tg:
            tg.start_soon(informer.run)
            with anyio.fail_after(30):
                await informer.wait_for_sync()
            # Watch faults act on open watches: start each test with the informer's watch(es) established.
            await wait_until(
                lambda: len(cluster.hub.watchers(resource.qualified)) >= len(informer.namespaces),
                what="informer watch established",
            )
            yield informer, mirror, registry
            tg.cancel_scope.cancel()


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def lists(cluster, since: int, resource: str = "configmaps") -> int:
    return cluster.faults.count("list", resource, since=since)


def watches(cluster, since: int, resource: str = "configmaps") -> int:
    return cluster.faults.count("watch", resource, since=since)


# -- sync, pagination, handlers -----------------------------------------------------------------------------


async def test_initial_paginated_list_then_watch(sim_cluster):
    for i in range(1203):
        sim_cluster.store.create("configmaps", NS, cm(f"c{i:04d}"))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster, page_size=500) as (informer, mirror, registry):
        assert informer.has_synced()
        assert cache_state(informer) == server_state(sim_cluster)
        assert len(mirror.adds) == 1203 and not mirror.updates and not mirror.deletes
        assert lists(sim_cluster, mark) == 3  # 500 + 500 + 203, following continue
        sim_cluster.store.create("configmaps", NS, cm("late"))
        bump(sim_cluster, "c0001", "1")
        sim_cluster.store.delete("configmaps", NS, "c0002")
        await converged(sim_cluster, informer, mirror)
        assert [d["metadata"]["name"] for d in mirror.deletes] == ["c0002"]  # a real DELETED, no tombstone
        assert metric(registry, "informer_relists_total", resource="configmaps", reason="initial") == 1
        assert metric(registry, "informer_events_total", resource="configmaps", type="ADDED") == 1
        assert metric(registry, "informer_events_total", resource="configmaps", type="MODIFIED") == 1
        assert metric(registry, "informer_events_total", resource="configmaps", type="DELETED") == 1
        assert metric(registry, "informer_cache_objects", resource="configmaps") == 1203
        assert metric(registry, "informer_last_event_timestamp_seconds", resource="configmaps") > 1e9
    assert lists(sim_cluster, mark) == 3


async def test_list_items_get_kind_and_transform_strips_managed_fields(sim_cluster):
    obj = cm("c1")
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "x"}
    sim_cluster.store.create("configmaps", NS, obj)
    async with running(sim_cluster) as (informer, mirror, _):
        cached = informer.get(f"{NS}/c1")
        assert cached["kind"] == "ConfigMap" and cached["apiVersion"] == "v1"
        assert "managedFields" not in cached["metadata"]
        assert cached["metadata"]["annotations"] == {"keep": "x"}


@pytest.mark.parametrize("identity", [None, "constructed", "replaced"])
async def test_watched_objects_lose_managed_fields_only_to_a_transform_that_drops_them(sim_cluster, identity):
    # The default transform drops managedFields, so the informer does not even decode them from watch
    # events; a transform of the caller's own must still receive them, in full, whether it was passed to the
    # constructor or assigned to ``informer.transform`` afterwards (the TFJob controller wraps its informers'
    # transforms that way, to read managedFields).
    kwargs: dict[str, Any] = {"transform": (lambda o: o)} if identity == "constructed" else {}
    async with running(sim_cluster, **kwargs) as (informer, mirror, _):
        if identity == "replaced":
            informer.transform = lambda o: o
        sim_cluster.store.create("configmaps", NS, cm("w1"))
        bump(sim_cluster, "w1", "2")
        await converged(sim_cluster, informer, mirror)
        cached = informer.get(f"{NS}/w1")
        server = sim_cluster.store.get("configmaps", NS, "w1")
        assert server["metadata"]["managedFields"]
        if identity:
            assert cached == server
        else:
            server["metadata"].pop("managedFields")
            assert cached == server


async def test_late_handler_receives_existing_objects(sim_cluster):
    sim_cluster.store.create("configmaps", NS, cm("a"))
    sim_cluster.store.create("configmaps", NS, cm("b"))
    async with running(sim_cluster) as (informer, _, _):
        seen: list[str] = []
        remove = informer.add_handler(on_add=lambda o: seen.append(o["metadata"]["name"]))
        assert sorted(seen) == ["a", "b"]
        remove()
        sim_cluster.store.create("configmaps", NS, cm("c"))
        await wait_until(lambda: informer.get(f"{NS}/c") is not None)
        assert sorted(seen) == ["a", "b"]  # removed handler no longer called


async def test_failing_handler_does_not_stop_the_informer(sim_cluster):
    async with running(sim_cluster) as (informer, mirror, _):

        def boom(obj: dict) -> None:
            raise RuntimeError("handler bug")

        informer.add_handler(on_add=boom)
        sim_cluster.store.create("configmaps", NS, cm("x"))
        sim_cluster.store.create("configmaps", NS, cm("y"))
        await converged(sim_cluster, informer, mirror)  # the other handler still saw both


async def test_indexers_and_owner_index(sim_cluster):
    for name, uid in (("a", "u1"), ("b", "u1"), ("c", "u2")):
        obj = cm(name)
        obj["metadata"]["ownerReferences"] = [
            {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "j", "uid": uid, "controller": True}
        ]
        sim_cluster.store.create("configmaps", NS, obj)
    async with running(sim_cluster, indexers={CONTROLLER_UID_INDEX: controller_owner_uid_index}) as (
        informer,
        mirror,
        _,
    ):
        assert sorted(o["metadata"]["name"] for o in informer.by_index(CONTROLLER_UID_INDEX, "u1")) == ["a", "b"]
        sim_cluster.store.delete("configmaps", NS, "a")
        await converged(sim_cluster, informer, mirror)
        assert [o["metadata"]["name"] for o in informer.by_index(CONTROLLER_UID_INDEX, "u1")] == ["b"]


# -- recovery without relisting ---------------------------------------------------------------------------


async def test_watch_timeout_rewatches_from_last_rv_without_relist(sim_cluster):
    sim_cluster.store.create("configmaps", NS, cm("a"))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster, watch_timeout=(1, 2)) as (informer, mirror, registry):
        for round_ in range(3):
            bump(sim_cluster, "a", str(round_))
            await wait_until(
                lambda expected=round_ + 2: watches(sim_cluster, mark) >= expected,
                what="the server timed the watch out",
            )
        sim_cluster.store.create("configmaps", NS, cm("b"))
        await converged(sim_cluster, informer, mirror)
        assert metric(registry, "informer_watch_restarts_total", resource="configmaps", reason="timeout") >= 2
    assert lists(sim_cluster, mark) == 1


async def test_dropped_connection_rewatches_without_relist(sim_cluster):
    sim_cluster.store.create("configmaps", NS, cm("a"))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster) as (informer, mirror, registry):
        for i in range(3):
            w = watches(sim_cluster, mark)
            assert sim_cluster.faults.close_watches("configmaps") == 1
            bump(sim_cluster, "a", f"v{i}")
            sim_cluster.store.create("configmaps", NS, cm(f"n{i}"))
            await wait_until(lambda before=w: watches(sim_cluster, mark) > before, what="re-watch")
        await converged(sim_cluster, informer, mirror)
        # A watch closed within a second without events counts as "short" (re-watched after a backoff).
        assert (
            sum(
                metric(registry, "informer_watch_restarts_total", resource="configmaps", reason=reason)
                for reason in ("closed", "short")
            )
            == 3
        )
    assert lists(sim_cluster, mark) == 1


async def test_stalled_watch_is_detected_and_resumed(sim_cluster):
    sim_cluster.store.create("configmaps", NS, cm("a"))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster, inactivity_timeout=0.5) as (informer, mirror, registry):
        assert sim_cluster.faults.stall_watches("configmaps") == 1
        bump(sim_cluster, "a", "while-stalled")
        sim_cluster.store.delete("configmaps", NS, "a")
        sim_cluster.store.create("configmaps", NS, cm("b"))
        await converged(sim_cluster, informer, mirror)
        # Here every 0.5 s without a byte is a stall (this module's simulator bookmarks once a minute), so a loaded
        # machine that pauses the test for that long before stall_watches() or after converged() adds one.
        assert metric(registry, "informer_watch_restarts_total", resource="configmaps", reason="stalled") >= 1
        assert [d["metadata"]["name"] for d in mirror.deletes if isinstance(d, dict)] == ["a"]
    assert lists(sim_cluster, mark) == 1


async def test_apiserver_restart_rewatches_without_relist(sim_cluster):
    sim_cluster.store.create("configmaps", NS, cm("a"))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster) as (informer, mirror, _):
        await sim_cluster.faults.restart_server()
        bump(sim_cluster, "a", "after-restart")
        sim_cluster.store.create("configmaps", NS, cm("b"))
        sim_cluster.store.delete("configmaps", NS, "a")
        await converged(sim_cluster, informer, mirror)
    assert lists(sim_cluster, mark) == 1


async def test_watch_429_storm_backs_off_and_rewatches_without_relist(sim_cluster):
    sim_cluster.store.create("configmaps", NS, cm("a"))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster) as (informer, mirror, registry):
        rule = sim_cluster.faults.fail("watch", "configmaps", 429, retry_after=1)
        sim_cluster.faults.close_watches("configmaps")
        for i in range(5):
            bump(sim_cluster, "a", str(i))
        await wait_until(lambda: rule.hits >= 4, what="several throttled watch attempts")
        hits = rule.hits
        sim_cluster.faults.remove(rule)
        await converged(sim_cluster, informer, mirror)
        assert metric(registry, "informer_watch_restarts_total", resource="configmaps", reason="throttled") >= hits
    assert lists(sim_cluster, mark) == 1


async def test_500_storm_on_every_verb_converges(sim_cluster):
    for i in range(20):
        sim_cluster.store.create("configmaps", NS, cm(f"c{i}"))
    rule = sim_cluster.faults.fail("*", "configmaps", 500, rate=0.6)
    async with running(sim_cluster) as (informer, mirror, _):  # the initial list itself fights the storm
        for i in range(5):
            # Knock the watch down repeatedly while changes happen; every re-watch runs into the storm.
            mark = sim_cluster.faults.mark()
            sim_cluster.faults.close_watches("configmaps")
            bump(sim_cluster, f"c{i + 5}", "storm")
            sim_cluster.store.delete("configmaps", NS, f"c{i}")
            await wait_until(
                lambda mark=mark: len(sim_cluster.hub.watchers("configmaps")) == 1 and watches(sim_cluster, mark) >= 1,
                10,
                "a watch re-established through the storm",
            )
        assert rule.hits >= 1
        sim_cluster.faults.remove(rule)
        await converged(sim_cluster, informer, mirror)


async def test_deletes_during_disconnect_arrive_as_deleted_events_when_history_allows(sim_cluster):
    for name in ("a", "b", "c"):
        sim_cluster.store.create("configmaps", NS, cm(name))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster) as (informer, mirror, _):
        rule = sim_cluster.faults.fail("watch", "configmaps", 503, retry_after=1)
        sim_cluster.faults.close_watches("configmaps")
        await wait_until(lambda: rule.hits >= 1)
        sim_cluster.store.delete("configmaps", NS, "a")
        sim_cluster.store.delete("configmaps", NS, "b")
        sim_cluster.faults.remove(rule)
        await converged(sim_cluster, informer, mirror)
        assert sorted(d["metadata"]["name"] for d in mirror.deletes) == ["a", "b"]
        assert mirror.tombstones() == []
    assert lists(sim_cluster, mark) == 1


# -- 410 → relist with tombstones --------------------------------------------------------------------------


async def test_410_after_compaction_relists_and_delivers_missed_deletes_as_tombstones(sim_cluster):
    for name in ("a", "b", "c", "d"):
        sim_cluster.store.create("configmaps", NS, cm(name))
    mark = sim_cluster.faults.mark()
    async with running(sim_cluster) as (informer, mirror, registry):
        rule = sim_cluster.faults.fail("watch", "configmaps", 500)  # keep the informer away meanwhile
        sim_cluster.faults.close_watches("configmaps")
        await wait_until(lambda: rule.hits >= 1)
        last_seen_a = informer.get(f"{NS}/a")
        sim_cluster.store.delete("configmaps", NS, "a")
        sim_cluster.store.delete("configmaps", NS, "b")
        bump(sim_cluster, "c", "changed")
        sim_cluster.store.create("configmaps", NS, cm("e"))
        sim_cluster.faults.compact()  # the informer's RV is now older than the history
        updates_before = len(mirror.updates)
        sim_cluster.faults.remove(rule)
        await converged(sim_cluster, informer, mirror)
        tombstones = mirror.tombstones()
        assert sorted(t.key for t in tombstones) == [f"{NS}/a", f"{NS}/b"]
        assert next(t for t in tombstones if t.key == f"{NS}/a").obj is last_seen_a  # last known state
        # Only the changed object is re-delivered as an update; the unchanged d is not.
        assert [u[0] for u in mirror.updates[updates_before:]] == [f"{NS}/c"]
        assert f"{NS}/e" in mirror.adds
        assert metric(registry, "informer_relists_total", resource="configmaps", reason="expired") == 1
    assert lists(sim_cluster, mark) == 2  # initial + exactly one relist


async def test_relist_handlers_follow_the_object_handlers_with_the_lists_generation(sim_cluster):
    """A write acknowledged before list_generation() returned g is in the cache once a relist handler gets
    a generation > g: here a config map created and deleted while the watch was down (no event names it)."""
    sim_cluster.store.create("configmaps", NS, cm("kept"))
    async with running(sim_cluster) as (informer, mirror, _):
        relists: list[tuple[str | None, int, dict[str, str]]] = []
        informer.add_relist_handler(lambda ns, generation: relists.append((ns, generation, dict(mirror.state))))
        rule = sim_cluster.faults.fail("watch", "configmaps", 500)
        sim_cluster.faults.close_watches("configmaps")
        await wait_until(lambda: rule.hits >= 1)
        sim_cluster.store.create("configmaps", NS, cm("ephemeral"))
        acknowledged_at = informer.list_generation(NS)
        assert acknowledged_at == 1
        sim_cluster.store.delete("configmaps", NS, "ephemeral")
        bump(sim_cluster, "kept", "changed")
        sim_cluster.faults.compact()
        sim_cluster.faults.remove(rule)
        await wait_until(lambda: relists, what="a relist handler call")
        namespace, generation, seen = relists[0]
        assert (namespace, generation) == (NS, 2) and generation > acknowledged_at
        # The per-object handlers ran first: the update of "kept" was delivered before the relist call.
        assert seen == server_state(sim_cluster) and "default/ephemeral" not in mirror.adds
        assert informer.list_generation(NS) == 2


async def test_list_generation_is_per_namespace(sim_cluster):
    for ns in ("team-a", "team-b"):
        sim_cluster.store.create(
            "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
    async with running(sim_cluster, namespace=None, namespaces=["team-a", "team-b"]) as (informer, _, _):
        assert informer.list_generation("team-a") == informer.list_generation("team-b") == 1
        with pytest.raises(ValueError, match="does not watch namespace 'team-c'"):
            informer.list_generation("team-c")


async def test_410_on_continue_restarts_the_list(sim_cluster):
    for i in range(30):
        sim_cluster.store.create("configmaps", NS, cm(f"c{i:02d}"))
    # Compact between the first and the second page: the continue token expires.
    compacted = False
    original_list = sim_cluster.store.list_ex

    def list_then_compact(*args: Any, **kwargs: Any):
        nonlocal compacted
        result = original_list(*args, **kwargs)
        if not compacted and args and args[0] == "configmaps" and kwargs.get("continue_token") is None:
            compacted = True
            sim_cluster.store.create("configmaps", NS, cm("between-pages"))
            sim_cluster.faults.compact()
        return result

    mark = sim_cluster.faults.mark()
    sim_cluster.store.list_ex = list_then_compact  # type: ignore[method-assign]
    try:
        async with running(sim_cluster, page_size=10) as (informer, mirror, _):
            assert compacted
            assert cache_state(informer) == server_state(sim_cluster)
            assert len(mirror.adds) == 31
    finally:
        sim_cluster.store.list_ex = original_list  # type: ignore[method-assign]
    assert lists(sim_cluster, mark) >= 5  # page 1, expired page 2, then a full fresh 4-page list


# -- scopes and selectors ----------------------------------------------------------------------------------


async def test_several_namespaces_one_cache_relist_is_scoped(sim_cluster):
    for ns in ("team-a", "team-b", "team-c"):
        sim_cluster.store.create(
            "namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        )
        sim_cluster.store.create("configmaps", ns, cm("x", ns))
    async with running(sim_cluster, namespace=None, namespaces=["team-a", "team-b"]) as (informer, mirror, _):
        assert sorted(informer.cache.keys()) == ["team-a/x", "team-b/x"]
        sim_cluster.store.create("configmaps", "team-c", cm("y", "team-c"))
        sim_cluster.store.create("configmaps", "team-b", cm("y", "team-b"))
        await wait_until(lambda: "team-b/y" in informer.cache)
        assert "team-c/y" not in informer.cache
        assert set(informer.resource_versions()) == {"team-a", "team-b"}


async def test_label_selector_transition_delivers_delete(sim_cluster):
    obj = cm("a")
    obj["metadata"]["labels"] = {"app": "trainer"}
    sim_cluster.store.create("configmaps", NS, obj)
    sim_cluster.store.create("configmaps", NS, cm("other"))
    async with running(sim_cluster, label_selector="app=trainer") as (informer, mirror, _):
        assert informer.cache.keys() == [f"{NS}/a"]
        sim_cluster.store.patch("configmaps", NS, "a", "merge", {"metadata": {"labels": {"app": None}}})
        await wait_until(lambda: not informer.cache.keys())
        assert [d["metadata"]["name"] for d in mirror.deletes] == ["a"]


async def test_cluster_scoped_resource(sim_cluster):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    sim_cluster.store.create("nodes", None, node)
    async with running(sim_cluster, resource=NODES, namespace=None) as (informer, mirror, _):
        assert informer.cache.keys() == ["n1"]  # cluster-scoped key: the bare name
        sim_cluster.store.create("nodes", None, dict(node, metadata={"name": "n2"}))
        sim_cluster.store.delete("nodes", None, "n1")
        await wait_until(
            lambda: (
                cache_state(informer) == server_state(sim_cluster, "nodes", None)
                and mirror.state == cache_state(informer)
            )
        )
        assert informer.cache.keys() == ["n2"]


def test_constructor_rejects_bad_arguments():
    from kubernetes_asyncio.client import Configuration

    configuration = Configuration()
    configuration.host = "http://127.0.0.1:1"
    client = ApiClient(configuration)
    with pytest.raises(ValueError, match="either namespace"):
        Informer(client, CONFIGMAPS, namespace="a", namespaces=["b"])
    with pytest.raises(ValueError, match="non-empty"):
        Informer(client, CONFIGMAPS, namespaces=[])
    with pytest.raises(ValueError, match="cluster-scoped"):
        Informer(client, NODES, namespace="a")
    with pytest.raises(ValueError, match="watch_timeout"):
        Informer(client, CONFIGMAPS, watch_timeout=(10, 5))


# -- backoff arithmetic ------------------------------------------------------------------------------------


def test_backoff_doubles_caps_and_resets_after_a_healthy_period():
    clock = FakeClock()
    state = _BackoffState(Backoff(initial=0.8, factor=2.0, cap=30.0, jitter=0.0, reset_after=120.0), clock)
    delays = []
    for _ in range(8):
        delays.append(state.next_delay())
        clock.advance(delays[-1])
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]
    clock.advance(119.0)  # not yet healthy for 2 minutes
    assert state.next_delay() == 30.0
    clock.advance(30.0 + 120.5)
    assert state.next_delay() == 0.8


def test_backoff_jitter_stays_within_bounds():
    clock = FakeClock()
    state = _BackoffState(Backoff(initial=0.8, jitter=1.0), clock)
    first = state.next_delay()
    second = state.next_delay()
    assert 0.8 <= first < 1.6 and 1.6 <= second < 3.2
