"""Indexer and transform semantics (controller.runtime.cache): keys, indices kept in step with the store,
tombstone unwrapping, and a default transform that drops the heavy fields and shares repeated strings."""

from __future__ import annotations

import copy

import pytest

from controller.runtime.cache import (
    CONTROLLER_UID_INDEX,
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    Indexer,
    compact_transform,
    controller_owner_uid_index,
    controller_ref,
    default_transform,
    intern_transform,
    object_key,
    split_key,
    strip_managed_fields,
)


def pod(name: str, ns: str = "default", owner_uid: str | None = None, rv: str = "1", node: str = "", **labels: str):
    meta = {"name": name, "namespace": ns, "resourceVersion": rv, "labels": dict(labels)}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "job", "uid": owner_uid, "controller": True},
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": node}}


def node_index(obj):
    node = obj["spec"].get("nodeName")
    return (node,) if node else ()


def test_object_key_and_split_key():
    assert object_key(pod("a", "ns1")) == "ns1/a"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"
    assert object_key(DeletedFinalStateUnknown("ns/x", None)) == "ns/x"
    assert split_key("ns1/a") == ("ns1", "a")
    assert split_key("node-1") == (None, "node-1")
    with pytest.raises(ValueError, match="metadata.name"):
        object_key({"metadata": {}})


def test_put_get_list_delete():
    idx = Indexer()
    a, b = pod("a"), pod("b", "other")
    assert idx.put("default/a", a) is None
    idx.put("other/b", b)
    assert idx.get("default/a") is a  # shared, not copied
    assert len(idx) == 2 and "other/b" in idx
    assert sorted(o["metadata"]["name"] for o in idx.list()) == ["a", "b"]
    a2 = pod("a", rv="2")
    assert idx.put("default/a", a2) is a
    assert idx.delete("default/a") is a2
    assert idx.delete("default/a") is None
    assert idx.keys() == ["other/b"]


def test_namespace_index_is_builtin_and_tracks_deletes():
    idx = Indexer()
    for i in range(3):
        idx.put(f"ns1/p{i}", pod(f"p{i}", "ns1"))
    idx.put("ns2/q", pod("q", "ns2"))
    assert sorted(idx.index_keys(NAMESPACE_INDEX, "ns1")) == ["ns1/p0", "ns1/p1", "ns1/p2"]
    idx.delete("ns1/p1")
    assert sorted(o["metadata"]["name"] for o in idx.by_index(NAMESPACE_INDEX, "ns1")) == ["p0", "p2"]
    idx.delete("ns2/q")
    assert idx.by_index(NAMESPACE_INDEX, "ns2") == []
    assert "ns2" not in idx.index_values(NAMESPACE_INDEX)  # empty buckets are dropped


def test_custom_and_owner_indices_follow_updates():
    idx = Indexer({CONTROLLER_UID_INDEX: controller_owner_uid_index, "node": node_index})
    idx.put("ns/a", pod("a", "ns", owner_uid="u1", node="n1"))
    idx.put("ns/b", pod("b", "ns", owner_uid="u1"))
    assert sorted(idx.index_keys(CONTROLLER_UID_INDEX, "u1")) == ["ns/a", "ns/b"]
    assert idx.index_keys("node", "n1") == ["ns/a"]
    # The pod is re-owned and re-scheduled: both indices move with it, nothing stale remains.
    idx.put("ns/a", pod("a", "ns", owner_uid="u2", node="n2", rv="2"))
    assert idx.index_keys(CONTROLLER_UID_INDEX, "u1") == ["ns/b"]
    assert idx.index_keys(CONTROLLER_UID_INDEX, "u2") == ["ns/a"]
    assert idx.index_keys("node", "n1") == [] and idx.index_keys("node", "n2") == ["ns/a"]
    assert sorted(idx.index_values("node")) == ["n2"]


def test_add_indexer_later_indexes_existing_objects():
    idx = Indexer()
    idx.put("ns/a", pod("a", "ns", node="n1"))
    idx.add_indexer("node", node_index)
    assert idx.index_keys("node", "n1") == ["ns/a"]
    with pytest.raises(ValueError, match="already exists"):
        idx.add_indexer("node", node_index)


def test_unknown_index_and_reserved_name():
    idx = Indexer()
    with pytest.raises(KeyError, match="no index named 'nope'"):
        idx.by_index("nope", "x")
    with pytest.raises(ValueError, match="reserved"):
        Indexer({NAMESPACE_INDEX: node_index})


def test_replace_rebuilds_indices():
    idx = Indexer({"node": node_index})
    idx.put("ns/old", pod("old", "ns", node="n1"))
    idx.replace({"ns/new": pod("new", "ns", node="n2")})
    assert idx.keys() == ["ns/new"]
    assert idx.index_keys("node", "n1") == [] and idx.index_keys("node", "n2") == ["ns/new"]
    assert idx.index_keys(NAMESPACE_INDEX, "ns") == ["ns/new"]


def test_controller_ref_picks_the_controller_owner_only():
    obj = pod("a")
    obj["metadata"]["ownerReferences"] = [
        {"kind": "ConfigMap", "name": "x", "uid": "c1"},
        {"kind": "TFJob", "name": "job", "uid": "j1", "controller": True},
    ]
    assert controller_ref(obj)["uid"] == "j1"
    assert controller_owner_uid_index(obj) == ("j1",)
    assert controller_owner_uid_index(pod("b")) == ()


def test_tombstone_unwrap():
    obj = pod("a")
    assert DeletedFinalStateUnknown.unwrap(obj) is obj
    assert DeletedFinalStateUnknown.unwrap(DeletedFinalStateUnknown("default/a", obj)) is obj
    assert DeletedFinalStateUnknown.unwrap(DeletedFinalStateUnknown("default/a", None)) is None


def heavy_pod(name: str) -> dict:
    obj = pod(name, "team-a", owner_uid="owner-uid-1", node="node-1", app="trainer", role="worker")
    obj["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    obj["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{...}" * 100}
    obj["spec"]["containers"] = [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]
    return obj


def test_strip_managed_fields_drops_only_heavy_fields():
    obj = heavy_pod("a")
    obj["metadata"]["annotations"]["keep"] = "me"
    strip_managed_fields(obj)
    assert "managedFields" not in obj["metadata"]
    assert obj["metadata"]["annotations"] == {"keep": "me"}
    only_last_applied = heavy_pod("b")
    strip_managed_fields(only_last_applied)
    assert "annotations" not in only_last_applied["metadata"]


def _equal_distinct_pods():
    # Decoded JSON never shares string objects; build equal-but-distinct strings the same way.
    import orjson

    a = orjson.loads(orjson.dumps(heavy_pod("a")))
    b = orjson.loads(orjson.dumps(heavy_pod("b")))
    assert a["metadata"]["namespace"] is not b["metadata"]["namespace"]
    return a, b


def _shared(a, b, path) -> bool:
    for step in path:
        a, b = a[step], b[step]
    return a is b


METADATA_PATHS = (("metadata", "namespace"), ("metadata", "labels", "app"), ("metadata", "ownerReferences", 0, "uid"))
SPEC_PATHS = (("spec", "nodeName"), ("spec", "containers", 0, "image"))


def test_default_transform_is_strip_managed_fields():
    assert default_transform is strip_managed_fields
    a, b = _equal_distinct_pods()
    default_transform(a)
    assert "managedFields" not in a["metadata"] and "annotations" not in a["metadata"]
    assert a["spec"] == b["spec"]  # nothing else touched


def test_intern_transform_shares_metadata_strings_and_is_idempotent():
    a, b = _equal_distinct_pods()
    intern_transform(a)
    intern_transform(b)
    assert "managedFields" not in a["metadata"] and "annotations" not in a["metadata"]
    assert all(_shared(a, b, path) for path in METADATA_PATHS)
    assert not any(_shared(a, b, path) for path in SPEC_PATHS)  # left to compact_transform
    again = copy.deepcopy(a)
    assert intern_transform(again) == a


def test_compact_transform_also_interns_spec_fields():
    a, b = _equal_distinct_pods()
    compact_transform(a)
    compact_transform(b)
    assert all(_shared(a, b, path) for path in METADATA_PATHS + SPEC_PATHS)
    assert "managedFields" not in a["metadata"]
    assert compact_transform(copy.deepcopy(a)) == a
