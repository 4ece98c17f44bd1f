"""The parts of the store (tfjob_sim.storeparts) on their own: each keeps its contract without the others above it.

The store's behaviour as a whole is tested through :class:`~tfjob_sim.store.Store` in test_store.py; these
tests pin what each part promises the parts built on it: the commit order of the change feed, the scale
mapping, the cleanup's progress after deletions, and that the parts stack up into one store.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from tfjob_sim.errors import ApiError
from tfjob_sim.resources import Registry
from tfjob_sim.store import Store
from tfjob_sim.storeparts import scale
from tfjob_sim.storeparts.feed import ChangeFeed
from tfjob_sim.storeparts.revisions import Revisions
from tfjob_sim.storeparts.values import Event


def configmap(name: str, rv: int) -> dict:
    meta = {"name": name, "namespace": "default", "resourceVersion": str(rv)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def test_revisions_number_every_write_once_and_404_unknown_resources() -> None:
    revisions = Revisions(clock=lambda: 0.0)
    assert [revisions._next_rv() for _ in range(3)] == [1, 2, 3]
    assert revisions.resource_version == 3
    rt = revisions.resource_type("configmaps")
    assert revisions._bucket(rt) is revisions._bucket(rt)
    assert revisions._bucket(rt).compacted_rv == 3  # a new bucket's history is complete from now on
    with pytest.raises(ApiError) as err:
        revisions.resource_type("nothings")
    assert err.value.code == 404
    with pytest.raises(ApiError) as err:
        revisions._ns_key(rt, None)
    assert err.value.code == 400


def test_a_commit_stores_then_tells_sinks_listeners_and_deletion_followups_in_that_order() -> None:
    feed = ChangeFeed(clock=lambda: 100.0, registry=Registry())
    seen: list[str] = []
    feed.add_event_sink(lambda event: seen.append(f"sink {event.type} {event.rv}"))

    def listener(type_: str, resource: str, old: dict | None, new: dict | None) -> None:
        key = ("default", "a")
        stored = feed._buckets[resource].objects.get(key)
        seen.append(f"listener {type_} stored={stored is not None}")
        raise RuntimeError("a broken listener is logged, the commit goes on")

    feed.add_listener(listener)
    feed._deletion_followups.append(lambda event: seen.append(f"followup {event.type}"))
    bucket = feed._bucket(feed.resource_type("configmaps"))

    rv = feed._next_rv()
    created = configmap("a", rv)
    feed._commit(bucket, "ADDED", ("default", "a"), None, created, rv)
    rv = feed._next_rv()
    event = feed._commit(bucket, "DELETED", ("default", "a"), created, None, rv)

    assert seen == [
        "sink ADDED 1",
        "listener ADDED stored=True",
        "sink DELETED 2",
        "listener DELETED stored=False",
        "followup DELETED",
    ]
    assert isinstance(event, Event) and event.object["metadata"]["resourceVersion"] == "2"
    assert [e.rv for e in feed.history_since("configmaps", 0) or []] == [1, 2]
    assert feed.compact() == 2 and feed.history_since("configmaps", 1) is None
    assert feed.oldest_resumable_rv("configmaps") == 2


def test_rv_waiters_wake_on_the_commit_that_reaches_them() -> None:
    feed = ChangeFeed(clock=lambda: 0.0)
    bucket = feed._bucket(feed.resource_type("configmaps"))

    async def scenario() -> tuple[bool, bool]:
        waiting = asyncio.ensure_future(feed.wait_for_resource_version(1, 5.0))
        await asyncio.sleep(0)
        rv = feed._next_rv()
        feed._commit(bucket, "ADDED", ("default", "a"), None, configmap("a", rv), rv)
        return await waiting, await feed.wait_for_resource_version(5, 0.01)

    assert asyncio.run(scenario()) == (True, False)


def test_the_scale_mapping_reads_and_writes_the_types_paths() -> None:
    store = Store(clock=lambda: 1_700_000_000.0)
    rt = store.resource_type("deployments.apps")
    deployment = store.create(
        "deployments.apps",
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        },
    )
    spec = scale.scale_spec(rt)
    current = scale.scale_of(rt, deployment)
    assert current["spec"] == {"replicas": 2} and current["status"]["selector"] == "app=web"
    assert current["metadata"]["resourceVersion"] == deployment["metadata"]["resourceVersion"]

    new = scale.scaled(spec, deployment, {"spec": {"replicas": 5}, "metadata": {"resourceVersion": "7"}}, "web")
    assert new["spec"]["replicas"] == 5 and new["metadata"]["resourceVersion"] == "7"
    assert deployment["spec"]["replicas"] == 2  # a copy: the stored object is never written into
    assert "resourceVersion" not in scale.scaled(spec, deployment, {"spec": {"replicas": 1}}, "web")["metadata"]
    for replicas in (-1, True, "3", None):
        with pytest.raises(ApiError) as err:
            scale.scaled(spec, deployment, {"spec": {"replicas": replicas}}, "web")
        assert err.value.code == 422
    with pytest.raises(ApiError) as err:
        scale.scale_spec(store.resource_type("configmaps"))
    assert err.value.code == 404


def test_a_namespace_cleanup_waits_for_a_finalizer_and_ends_with_the_deletion_that_empties_it() -> None:
    store = Store(clock=lambda: 1_700_000_000.0)
    store.create("namespaces", None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    held = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "held", "finalizers": ["example.com/x"]}}
    store.create("configmaps", "team", held)
    store.create("configmaps", "team", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "free"}})

    store.delete("namespaces", None, "team")
    assert store.get("configmaps", "team", "free") is None
    assert store.get("configmaps", "team", "held")["metadata"]["deletionTimestamp"]
    assert store.get("namespaces", None, "team")["status"]["phase"] == "Terminating"

    store.patch("configmaps", "team", "held", "merge", {"metadata": {"finalizers": None}})
    assert store.get("configmaps", "team", "held") is None
    assert store.get("namespaces", None, "team") is None


def test_the_parts_stack_into_one_store() -> None:
    parts = [cls.__module__ for cls in Store.__mro__ if cls.__module__.startswith("tfjob_sim.storeparts.")]
    # Every concern is in the store once, and the objects-and-revisions part is at the bottom.
    assert len(parts) == len(set(parts))
    assert parts[-1] == "tfjob_sim.storeparts.revisions"
    assert {
        "tfjob_sim.storeparts.feed",
        "tfjob_sim.storeparts.reads",
        "tfjob_sim.storeparts.admission",
        "tfjob_sim.storeparts.ownership",
        "tfjob_sim.storeparts.crds",
        "tfjob_sim.storeparts.creation",
        "tfjob_sim.storeparts.updates",
        "tfjob_sim.storeparts.patching",
        "tfjob_sim.storeparts.deletion",
        "tfjob_sim.storeparts.pods",
    } <= set(parts)


def test_a_dropped_store_is_freed_at_once_not_left_to_the_cyclic_collector() -> None:
    # The parts hold no reference cycle through the store (the cleanup holds it weakly): a simulation
    # or a test that drops its store gets the memory of every object in it back right away.
    store = Store(clock=lambda: 1_700_000_000.0)
    store.create("configmaps", "default", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    store.delete("configmaps", "default", "a")
    gone = weakref.ref(store)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del store
        assert gone() is None
    finally:
        if enabled:
            gc.enable()
