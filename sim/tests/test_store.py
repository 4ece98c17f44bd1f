"""Store semantics (resourceVersion and pagination of lists; create, update with optimistic concurrency,
patch types, the status and scale subresources, generation, deletion with finalizers and propagation,
graceful pod deletion), driven through the Python Store API that the
kubelet and GC use. HTTP-specific behaviour is in test_http.py."""

from __future__ import annotations

import copy
import os
import uuid

import orjson
import pytest

from tfjob_sim.errors import ApiError
from tfjob_sim.store import Store, StoreConfig, WriteOptions, uid_from_bytes
from tfjob_sim.testing.fixtures import FakeClock
from tfjob_sim.testing.objects import pod, widget, widget_crd


@pytest.fixture
def events(store: Store) -> list[tuple[str, str, dict | None, dict | None]]:
    seen: list[tuple[str, str, dict | None, dict | None]] = []
    store.add_listener(lambda t, r, old, new: seen.append((t, r, old, new)))
    return seen


def raises(code: int, reason: str | None = None):
    class _Ctx:
        def __enter__(self):
            return self

        def __exit__(self, exc_type, exc, tb):
            assert exc_type is not None, f"expected ApiError {code}"
            assert issubclass(exc_type, ApiError), exc
            assert exc.code == code, exc.status()
            if reason is not None:
                assert exc.reason == reason, exc.status()
            self.error = exc
            return True

    return _Ctx()


# ---------------------------------------------------------------- uid


@pytest.mark.parametrize("raw", [bytes(16), b"\xff" * 16, bytes(range(16)), os.urandom(16), os.urandom(16)])
def test_uid_text_is_what_the_uuid_module_gives_for_the_same_bytes(raw: bytes) -> None:
    assert uid_from_bytes(raw) == str(uuid.UUID(bytes=raw, version=4))


def test_created_objects_get_distinct_version_4_uids(store: Store) -> None:
    uids = [
        store.create("configmaps", "default", {"metadata": {"name": f"c{i}"}})["metadata"]["uid"] for i in range(50)
    ]
    assert len(set(uids)) == 50
    assert all(uuid.UUID(u).version == 4 and str(uuid.UUID(u)) == u for u in uids)


@pytest.mark.parametrize("bound", [4096, 2])
def test_label_and_annotation_keys_are_checked_on_every_write(
    store: Store, monkeypatch: pytest.MonkeyPatch, bound: int
) -> None:
    """Keys that passed are remembered (the same few come with every object); a bad key is refused
    every time, with the same causes, whatever was remembered or forgotten before."""
    from tfjob_sim import resources

    monkeypatch.setattr(resources, "_VALID_KEYS_MAX", bound)
    monkeypatch.setattr(resources, "_VALID_KEYS", set())
    good = {"example.com/app": "a", "tier": "b", "x.y/z": "c"}
    causes = []
    for i in range(3):
        store.create("configmaps", "default", {"metadata": {"name": f"ok{i}", "labels": good, "annotations": good}})
        with raises(422, "Invalid") as ctx:
            store.create(
                "configmaps",
                "default",
                {
                    "metadata": {
                        "name": f"bad{i}",
                        "labels": {**good, "-bad": "v"},
                        "annotations": {"a/b/c": "v", **good},
                    }
                },
            )
        causes.append(ctx.error.status()["details"]["causes"])
    assert causes[0] == causes[1] == causes[2]
    assert [c["field"] for c in causes[0]] == ["metadata.labels", "metadata.annotations"]
    assert 0 < len(resources._VALID_KEYS) <= bound


# ---------------------------------------------------------------- resourceVersion


def test_one_global_rv_across_kinds_and_list_rv_is_the_counter(store: Store) -> None:
    start = store.resource_version
    cm = store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    p = store.create("pods", "default", pod("p"))
    assert int(cm["metadata"]["resourceVersion"]) == start + 1
    assert int(p["metadata"]["resourceVersion"]) == start + 2
    items, list_rv = store.list("configmaps", "default")
    assert list_rv == str(start + 2)  # the global counter, not the newest configmap
    assert [i["metadata"]["name"] for i in items] == ["a"]


def test_noop_update_keeps_rv_and_emits_nothing(store: Store, events: list) -> None:
    cm = store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    events.clear()
    rv_before = store.resource_version
    same = store.update("configmaps", "default", "a", dict(cm))
    assert same["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]
    assert store.resource_version == rv_before
    patched = store.patch("configmaps", "default", "a", "merge", {"data": {"k": "v"}})
    assert patched is store.get("configmaps", "default", "a")
    assert events == []
    changed = store.patch("configmaps", "default", "a", "merge", {"data": {"k": "w"}})
    assert int(changed["metadata"]["resourceVersion"]) == rv_before + 1
    assert [e[0] for e in events] == ["MODIFIED"]


def test_cluster_scoped_lookups_ignore_a_namespace(store: Store) -> None:
    store.create("nodes", None, {"metadata": {"name": "n1"}})
    assert store.get("nodes", "default", "n1") is store.get("nodes", None, "n1") is not None


def test_returned_objects_are_not_mutated_by_later_writes(store: Store) -> None:
    first = store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    store.patch("configmaps", "default", "a", "merge", {"data": {"k": "w"}, "metadata": {"labels": {"x": "y"}}})
    assert first["data"] == {"k": "v"}
    assert "labels" not in first["metadata"]


def test_patch_bodies_get_the_real_servers_answers(store: Store, events: list) -> None:
    """The store hands bodies to the patch engines unchecked, so their (real-server) codes reach clients."""
    store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"k": "v"}})
    events.clear()
    rv_before = store.resource_version
    # A JSON null decodes to an empty JSON patch / strategic patch: a no-op write, no event.
    assert store.patch("configmaps", "default", "a", "json", None) is store.get("configmaps", "default", "a")
    assert store.patch("configmaps", "default", "a", "strategic", None) is store.get("configmaps", "default", "a")
    assert store.resource_version == rv_before and events == []
    with raises(422, "Invalid") as array_merge:  # the array replaces the document, which is no object
        store.patch("configmaps", "default", "a", "merge", [{"op": "add"}])
    assert "cannot unmarshal array" in array_merge.error.message
    with raises(400, "BadRequest") as null_merge:
        store.patch("configmaps", "default", "a", "merge", None)
    assert null_merge.error.message == "Invalid JSON Patch"
    with raises(400, "BadRequest") as object_json:
        store.patch("configmaps", "default", "a", "json", {"op": "add"})
    assert "cannot unmarshal object into Go value of type jsonpatch.Patch" in object_json.error.message
    with raises(422, "Invalid") as scalar_root:  # replacing the root with an array: no object to store
        store.patch("configmaps", "default", "a", "json", [{"op": "replace", "path": "", "value": [1]}])
    assert "cannot unmarshal array" in scalar_root.error.message
    assert store.resource_version == rv_before and events == []


def test_apply_picks_the_engine_by_kind_and_its_errors_propagate(store: Store, events: list) -> None:
    """Built-ins merge strategically (keyed lists), no silent fallback to JSON merge on an error."""
    store.create("pods", "default", pod("p"))
    opts = WriteOptions(field_manager="m", force=True)  # the image is the creator's: take it over
    applied = store.patch_ex(
        "pods",
        "default",
        "p",
        "apply",
        {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}},
        opts=opts,
    ).obj
    containers = applied["spec"]["containers"]
    assert [c["image"] for c in containers] == ["busybox:1.37"]
    assert containers[0]["terminationMessagePolicy"] == "File"  # merged by name, not replaced
    events.clear()
    with raises(500) as no_merge_key:  # a JSON merge fallback would have replaced the list instead
        store.patch_ex(
            "pods",
            "default",
            "p",
            "apply",
            {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"image": "x"}]}},
            opts=opts,
        )
    assert "does not contain declared merge key: name" in no_merge_key.error.message
    assert events == []


def test_patches_never_alias_stored_objects_or_the_request_body(store: Store) -> None:
    """Patch results are stored without a defensive copy: nothing may leak between versions or bodies."""
    import orjson

    store.create("configmaps", "default", {"metadata": {"name": "a", "labels": {"k": "v"}}, "data": {"x": "1"}})
    versions = [store.get("configmaps", "default", "a")]
    snapshots = [orjson.dumps(versions[0])]
    body = {"metadata": {"labels": {"k": "w"}}, "data": {"nested": "2"}}
    for patch_type, patch in (
        ("merge", body),
        ("strategic", {"metadata": {"labels": {"k": "s"}}}),
        ("json", [{"op": "add", "path": "/data/y", "value": "3"}]),
    ):
        versions.append(store.patch("configmaps", "default", "a", patch_type, patch))
        snapshots.append(orjson.dumps(versions[-1]))
    body["metadata"]["labels"]["k"] = "mutated by the client"
    body["data"]["nested"] = "mutated"
    assert [orjson.dumps(v) for v in versions] == snapshots
    assert store.get("configmaps", "default", "a")["data"] == {"x": "1", "nested": "2", "y": "3"}


def test_pod_status_writes_share_the_unchanged_parts_and_keep_old_versions_intact(store: Store) -> None:
    import orjson

    before = store.create("pods", "default", pod("p"))
    snapshot = orjson.dumps(before)
    after = store.patch(
        "pods",
        "default",
        "p",
        "merge",
        {"status": {"phase": "Running"}, "spec": {"nodeName": "ignored"}},
        subresource="status",
    )
    assert orjson.dumps(before) == snapshot  # the earlier version is untouched (its RV too)
    assert after["status"]["phase"] == "Running" and "nodeName" not in after["spec"]
    assert after["spec"] is before["spec"]  # one copy per status write: the spec is shared, not re-copied
    assert after["metadata"] is not before["metadata"]
    assert int(after["metadata"]["resourceVersion"]) == int(before["metadata"]["resourceVersion"]) + 1
    # The next status write copies only the status maps it patches: the version before it stays whole.
    snapshot = orjson.dumps(after)
    latest = store.patch(
        "pods", "default", "p", "merge", {"status": {"phase": "Succeeded", "qosClass": None}}, subresource="status"
    )
    assert orjson.dumps(after) == snapshot
    assert latest["status"] == {"phase": "Succeeded"} and latest["spec"] is before["spec"]


# ---------------------------------------------------------------- create


def test_create_sets_server_fields_and_generate_name(store: Store) -> None:
    obj = store.create(
        "pods",
        "default",
        {
            **pod(""),
            "metadata": {"generateName": "web-", "uid": "client-uid", "creationTimestamp": "1999-01-01T00:00:00Z"},
        },
    )
    meta = obj["metadata"]
    assert meta["name"].startswith("web-") and len(meta["name"]) == len("web-") + 5
    assert meta["uid"] != "client-uid" and len(meta["uid"]) == 36
    assert meta["creationTimestamp"].endswith("Z") and not meta["creationTimestamp"].startswith("1999")
    assert meta["generation"] == 1
    assert obj["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


def test_create_errors(store: Store) -> None:
    store.create("configmaps", "default", {"metadata": {"name": "a"}})
    with raises(409, "AlreadyExists") as ctx:
        store.create("configmaps", "default", {"metadata": {"name": "a"}})
    assert ctx.error.message == 'configmaps "a" already exists'
    with raises(404, "NotFound") as ctx:
        store.create("configmaps", "nope", {"metadata": {"name": "a"}})
    assert ctx.error.message == 'namespaces "nope" not found'
    with raises(500, "InternalError") as ctx:
        store.create("configmaps", "default", {"metadata": {"name": "b", "resourceVersion": "3"}})
    assert "resourceVersion should not be set on objects to be created" in ctx.error.message
    with raises(422, "Invalid") as ctx:
        store.create("configmaps", "default", {"metadata": {"name": "Bad_Name"}})
    assert ctx.error.status()["details"]["causes"][0]["field"] == "metadata.name"
    with raises(422, "Invalid") as ctx:
        store.create("configmaps", "default", {"metadata": {}})
    assert "name or generateName is required" in ctx.error.message
    with raises(400, "BadRequest"):
        store.create("configmaps", "default", {"metadata": {"name": "c", "namespace": "other"}})
    with raises(422, "Invalid") as ctx:
        store.create("pods", "default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    assert ctx.error.message == 'Pod "p" is invalid: spec.containers: Required value'


def test_dry_run_create_persists_nothing(store: Store, events: list) -> None:
    rv = store.resource_version
    result = store.create_ex("configmaps", "default", {"metadata": {"name": "a"}}, WriteOptions(dry_run=True))
    assert result.code == 201 and result.obj["metadata"]["name"] == "a"
    assert store.get("configmaps", "default", "a") is None
    assert store.resource_version == rv and events == []


# ---------------------------------------------------------------- update / optimistic concurrency


def test_stale_rv_conflicts_and_unconditional_rules(store: Store) -> None:
    cm = store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"k": "1"}})
    store.patch("configmaps", "default", "a", "merge", {"data": {"k": "2"}})
    with raises(409, "Conflict") as ctx:
        store.update("configmaps", "default", "a", {**cm, "data": {"k": "3"}})
    assert ctx.error.message == (
        'Operation cannot be fulfilled on configmaps "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    # Core types allow PUT without an RV (unconditional); leases do not.
    unconditional = {"metadata": {"name": "a"}, "data": {"k": "4"}}
    assert store.update("configmaps", "default", "a", unconditional)["data"] == {"k": "4"}
    lease = store.update(
        "leases.coordination.k8s.io", "default", "l", {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}
    )  # create-on-PUT
    assert lease["spec"]["holderIdentity"] == "me"
    with raises(422, "Invalid") as ctx:
        store.update("leases.coordination.k8s.io", "default", "l", {"metadata": {"name": "l"}, "spec": {}})
    assert ctx.error.message == (
        'leases.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid '
        "value: 0x0: must be specified for an update"
    )
    with raises(404, "NotFound"):
        store.update("configmaps", "default", "missing", {"metadata": {"name": "missing"}})
    with raises(400, "BadRequest"):
        store.update("configmaps", "default", "a", {"metadata": {"name": "b"}})


def test_update_keeps_server_owned_metadata(store: Store) -> None:
    cm = store.create("configmaps", "default", {"metadata": {"name": "a"}})
    body = {
        "metadata": {
            "name": "a",
            "resourceVersion": cm["metadata"]["resourceVersion"],
            "creationTimestamp": "2000-01-01T00:00:00Z",
            "labels": {"x": "y"},
        }
    }
    updated = store.update("configmaps", "default", "a", body)
    assert updated["metadata"]["creationTimestamp"] == cm["metadata"]["creationTimestamp"]
    assert updated["metadata"]["uid"] == cm["metadata"]["uid"]
    with raises(422, "Invalid"):
        store.update("configmaps", "default", "a", {"metadata": {"name": "a", "uid": "other"}})


def test_pod_status_subresource_rules(store: Store) -> None:
    created = store.create("pods", "default", pod("p"))
    # A main-resource write cannot change status; /status cannot change spec or labels.
    body = {**created, "status": {"phase": "Running"}}
    after_main = store.update("pods", "default", "p", body)
    assert after_main["status"]["phase"] == "Pending"
    status_body = {
        **after_main,
        "status": {"phase": "Running"},
        "metadata": {**after_main["metadata"], "labels": {"x": "y"}},
    }
    after_status = store.update("pods", "default", "p", status_body, subresource="status")
    assert after_status["status"]["phase"] == "Running"
    assert "labels" not in after_status["metadata"]
    with raises(422, "Invalid") as ctx:  # pod spec is immutable apart from a few fields
        store.patch("pods", "default", "p", "merge", {"spec": {"restartPolicy": "Never"}})
    assert "pod updates may not change fields" in ctx.error.message
    bound = store.patch("pods", "default", "p", "merge", {"spec": {"nodeName": "n1"}})  # binding-like
    assert bound["spec"]["nodeName"] == "n1"


# ---------------------------------------------------------------- delete, finalizers, graceful pods


def test_binding_sets_the_node_and_pod_scheduled_in_one_write(store: Store, events: list, clock) -> None:
    store.create("pods", "default", pod("p"))
    store.patch(
        "pods",
        "default",
        "p",
        "merge",
        {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/1 nodes",
                        "lastTransitionTime": "2020-01-01T00:00:00Z",
                    }
                ]
            }
        },
        subresource="status",
    )
    events.clear()
    rv_before = store.resource_version
    status = store.bind(
        "default", "p", {"metadata": {"annotations": {"scheduler/by": "sim"}}, "target": {"kind": "Node", "name": "n1"}}
    )
    assert status["status"] == "Success" and status["code"] == 201
    assert store.resource_version == rv_before + 1 and [e[0] for e in events] == ["MODIFIED"]
    bound = store.get("pods", "default", "p")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"scheduler/by": "sim"}
    # The condition is replaced whole (no stale reason/message) and its transition time is now.
    assert bound["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": _rfc(clock.now)}
    ]
    with raises(409, "Conflict"):
        store.bind("default", "p", {"target": {"name": "n2"}})
    with raises(422, "Invalid"):
        store.bind("default", "p", {"target": {}})


def test_finalizers_hold_deletion_until_removed(store: Store, events: list) -> None:
    store.create("configmaps", "default", {"metadata": {"name": "a", "finalizers": ["example.com/hold"]}})
    events.clear()
    answer = store.delete("configmaps", "default", "a")
    assert answer["metadata"]["deletionTimestamp"]  # the object, still there
    assert [e[0] for e in events] == ["MODIFIED"]
    with raises(422, "Invalid") as ctx:
        store.patch(
            "configmaps", "default", "a", "merge", {"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}
        )
    assert "no new finalizers can be added if the object is being deleted" in ctx.error.message
    last = store.get("configmaps", "default", "a")
    store.patch("configmaps", "default", "a", "merge", {"metadata": {"finalizers": None}})
    assert store.get("configmaps", "default", "a") is None
    kind, _res, old, new = events[-1]
    assert kind == "DELETED" and new is None
    assert old is last  # the DELETED event carries the last stored state (with the finalizer)


def test_delete_returns_status_or_object_and_preconditions(store: Store) -> None:
    cm = store.create("configmaps", "default", {"metadata": {"name": "a"}})
    with raises(409, "Conflict") as ctx:
        store.delete("configmaps", "default", "a", {"preconditions": {"uid": "other"}})
    assert "the UID in the precondition (other) does not match the UID in record" in ctx.error.message
    with raises(409, "Conflict"):
        store.delete("configmaps", "default", "a", {"preconditions": {"resourceVersion": "1"}})
    status = store.delete("configmaps", "default", "a")
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": "a", "kind": "configmaps", "uid": cm["metadata"]["uid"]},
    }
    with raises(404, "NotFound"):
        store.delete("configmaps", "default", "a")
    store.create("pods", "default", pod("p"))
    deleted = store.delete("pods", "default", "p")  # unscheduled: gone at once, object returned
    assert deleted["kind"] == "Pod" and store.get("pods", "default", "p") is None
    assert int(deleted["metadata"]["resourceVersion"]) == store.resource_version


def test_graceful_pod_deletion(store: Store, clock: FakeClock) -> None:
    store.create("pods", "default", pod("p", node="n1"))
    gen = store.get("pods", "default", "p")["metadata"]["generation"]
    terminating = store.delete("pods", "default", "p")
    meta = terminating["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 30
    assert meta["deletionTimestamp"] == _rfc(clock.now + 30)
    assert meta["generation"] == gen + 1
    assert store.get("pods", "default", "p") is not None
    # A shorter grace period shortens it; a longer one does not.
    store.delete("pods", "default", "p", {"gracePeriodSeconds": 60})
    assert store.get("pods", "default", "p")["metadata"]["deletionGracePeriodSeconds"] == 30
    store.delete("pods", "default", "p", {"gracePeriodSeconds": 5})
    assert store.get("pods", "default", "p")["metadata"]["deletionGracePeriodSeconds"] == 5
    # The kubelet confirms with grace 0.
    store.delete("pods", "default", "p", {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}})
    assert store.get("pods", "default", "p") is None


def test_terminal_pods_are_deleted_at_once(store: Store) -> None:
    store.create("pods", "default", pod("p", node="n1"))
    store.patch("pods", "default", "p", "merge", {"status": {"phase": "Succeeded"}}, subresource="status")
    store.delete("pods", "default", "p")
    assert store.get("pods", "default", "p") is None


def test_propagation_policies_add_gc_finalizers(store: Store) -> None:
    store.create("configmaps", "default", {"metadata": {"name": "o"}})
    store.create("configmaps", "default", {"metadata": {"name": "f"}})
    store.create("configmaps", "default", {"metadata": {"name": "b", "finalizers": ["orphan"]}})
    assert store.delete("configmaps", "default", "o", {"propagationPolicy": "Orphan"})["metadata"]["finalizers"] == [
        "orphan"
    ]
    assert store.delete("configmaps", "default", "f", {"propagationPolicy": "Foreground"})["metadata"][
        "finalizers"
    ] == ["foregroundDeletion"]
    store.delete("configmaps", "default", "b", {"propagationPolicy": "Background"})  # drops "orphan"
    assert store.get("configmaps", "default", "b") is None
    with raises(422, "Invalid"):
        store.delete("configmaps", "default", "o", {"propagationPolicy": "Sideways"})


def test_namespace_deletion_removes_contents_then_namespace(store: Store) -> None:
    store.create("namespaces", None, {"metadata": {"name": "team"}})
    store.create("configmaps", "team", {"metadata": {"name": "a"}})
    store.create("pods", "team", pod("running", node="n1"))
    answer = store.delete("namespaces", None, "team")
    assert answer["status"]["phase"] == "Terminating"
    assert store.get("configmaps", "team", "a") is None
    assert store.get("pods", "team", "running")["metadata"]["deletionTimestamp"]
    assert store.get("namespaces", None, "team") is not None  # waits for the terminating pod
    with raises(403, "Forbidden") as ctx:
        store.create("configmaps", "team", {"metadata": {"name": "late"}})
    assert "because it is being terminated" in ctx.error.message
    store.delete("pods", "team", "running", {"gracePeriodSeconds": 0})
    assert store.get("namespaces", None, "team") is None


def test_system_namespaces_cannot_be_deleted(store: Store) -> None:
    with raises(403, "Forbidden") as ctx:
        store.delete("namespaces", None, "default")
    assert ctx.error.message == 'namespaces "default" is forbidden: this namespace may not be deleted'


def test_delete_collection_by_label(store: Store) -> None:
    for name, tier in (("a", "x"), ("b", "x"), ("c", "y")):
        store.create("configmaps", "default", {"metadata": {"name": name, "labels": {"tier": tier}}})
    result = store.delete_collection("configmaps", "default", label_selector="tier=x")
    assert result["kind"] == "ConfigMapList"
    assert sorted(i["metadata"]["name"] for i in result["items"]) == ["a", "b"]
    assert [i["metadata"]["name"] for i in store.list("configmaps", "default")[0]] == ["c"]


# ---------------------------------------------------------------- lists: selectors, exact RV, continue


def test_list_selectors_and_namespaces(store: Store) -> None:
    store.create("namespaces", None, {"metadata": {"name": "other"}})
    store.create("pods", "default", pod("a", labels={"app": "web"}))
    store.create("pods", "default", pod("b", node="n1", labels={"app": "db"}))
    store.create("pods", "other", pod("c", labels={"app": "web"}))
    names = lambda items: [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items]  # noqa: E731
    assert names(store.list("pods")[0]) == [("default", "a"), ("default", "b"), ("other", "c")]
    assert names(store.list("pods", label_selector="app=web")[0]) == [("default", "a"), ("other", "c")]
    assert names(store.list("pods", "default", label_selector="app in (web,db)")[0]) == [
        ("default", "a"),
        ("default", "b"),
    ]
    assert names(store.list("pods", field_selector="spec.nodeName=n1")[0]) == [("default", "b")]
    assert names(store.list("pods", field_selector="status.phase=Pending,metadata.namespace=other")[0]) == [
        ("other", "c")
    ]
    with raises(400, "BadRequest") as ctx:
        store.list("pods", field_selector="spec.bogus=1")
    assert "field label not supported: spec.bogus" in ctx.error.message
    with raises(400, "BadRequest"):
        store.list("pods", label_selector="app in (web")


def test_exact_rv_list_reconstructs_the_past_and_410s_after_compaction(store: Store) -> None:
    store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"v": "1"}})
    store.create("configmaps", "default", {"metadata": {"name": "b"}})
    past = store.resource_version
    store.patch("configmaps", "default", "a", "merge", {"data": {"v": "2"}})
    store.delete("configmaps", "default", "b")
    store.create("configmaps", "default", {"metadata": {"name": "c"}})
    result = store.list_ex("configmaps", "default", resource_version=str(past), resource_version_match="Exact")
    assert result.resource_version == str(past)
    assert [(i["metadata"]["name"], i.get("data")) for i in result.items] == [("a", {"v": "1"}), ("b", None)]
    store.compact()
    with raises(410, "Expired") as ctx:
        store.list_ex("configmaps", "default", resource_version=str(past), resource_version_match="Exact")
    assert ctx.error.message == "The resourceVersion for the provided list is too old."
    with raises(504, "Timeout") as ctx:
        store.list_ex(
            "configmaps", resource_version=str(store.resource_version + 5), resource_version_match="NotOlderThan"
        )
    assert ctx.error.status()["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_continue_pages_are_a_consistent_snapshot(store: Store) -> None:
    for i in range(7):
        store.create("configmaps", "default", {"metadata": {"name": f"cm-{i}"}, "data": {"v": "old"}})
    first = store.list_ex("configmaps", "default", limit=3)
    assert [i["metadata"]["name"] for i in first.items] == ["cm-0", "cm-1", "cm-2"]
    assert first.continue_token and first.remaining == 4
    # Changes after the first page are invisible to later pages.
    store.delete("configmaps", "default", "cm-4")
    store.patch("configmaps", "default", "cm-5", "merge", {"data": {"v": "new"}})
    store.create("configmaps", "default", {"metadata": {"name": "cm-3a"}})
    second = store.list_ex("configmaps", "default", limit=3, continue_token=first.continue_token)
    assert second.resource_version == first.resource_version
    assert [i["metadata"]["name"] for i in second.items] == ["cm-3", "cm-4", "cm-5"]
    assert second.items[2]["data"] == {"v": "old"}
    third = store.list_ex("configmaps", "default", limit=3, continue_token=second.continue_token)
    assert [i["metadata"]["name"] for i in third.items] == ["cm-6"] and third.continue_token == ""
    # RV=0 lists ignore limit (served from the cache), as client-go's reflector expects.
    assert len(store.list_ex("configmaps", "default", resource_version="0", limit=2).items) == 7


def test_expired_continue_token_gets_410_with_a_fresh_token(store: Store) -> None:
    for i in range(4):
        store.create("configmaps", "default", {"metadata": {"name": f"cm-{i}"}})
    first = store.list_ex("configmaps", "default", limit=2)
    store.create("configmaps", "default", {"metadata": {"name": "cm-9"}})
    store.compact()
    with raises(410, "Expired") as ctx:
        store.list_ex("configmaps", "default", limit=2, continue_token=first.continue_token)
    fresh = ctx.error.status()["metadata"]["continue"]
    rest = store.list_ex("configmaps", "default", limit=10, continue_token=fresh)  # inconsistent continuation
    assert [i["metadata"]["name"] for i in rest.items] == ["cm-2", "cm-3", "cm-9"]
    with raises(400, "BadRequest"):
        store.list_ex("configmaps", "default", continue_token="not-a-token")


def test_history_bounded_by_count(clock: FakeClock) -> None:
    store = Store(StoreConfig(history_max_events=3), clock=clock)
    store.create("configmaps", "default", {"metadata": {"name": "a"}, "data": {"v": "0"}})
    start = store.resource_version
    for i in range(5):
        store.patch("configmaps", "default", "a", "merge", {"data": {"v": str(i + 1)}})
    assert store.history_since("configmaps", start) is None  # fell out of the history
    recent = store.history_since("configmaps", store.resource_version - 2)
    assert [e.rv for e in recent] == [store.resource_version - 1, store.resource_version]


def test_history_bounded_by_age(clock: FakeClock) -> None:
    store = Store(StoreConfig(history_max_age=10), clock=clock)
    store.create("configmaps", "default", {"metadata": {"name": "a"}})
    start = store.resource_version
    clock.now += 11
    store.create("configmaps", "default", {"metadata": {"name": "b"}})
    assert store.history_since("configmaps", start - 1) is None


def test_listener_failures_do_not_break_writes(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("listener bug")

    store.add_listener(broken)
    store.create("configmaps", "default", {"metadata": {"name": "a"}})
    assert store.get("configmaps", "default", "a") is not None
    assert "store listener failed" in caplog.text


# ---------------------------------------------------------------- custom resources


@pytest.fixture
def crd_store(store: Store) -> Store:
    store.create("customresourcedefinitions.apiextensions.k8s.io", None, widget_crd())
    return store


def test_crd_is_served_at_once_with_status(crd_store: Store) -> None:
    crd = crd_store.get("customresourcedefinitions.apiextensions.k8s.io", None, "widgets.example.com")
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    assert crd["status"]["storedVersions"] == ["v1"]
    created = crd_store.create("widgets.example.com", "default", widget("w", status={"phase": "x"}))
    assert created["apiVersion"] == "example.com/v1" and created["metadata"]["generation"] == 1
    assert "status" not in created  # dropped on create with a status subresource
    assert created["spec"] == {"replicas": 1, "maxReplicas": 10, "color": "red"}  # defaults


def test_a_crd_update_brings_new_rules_and_defaults_not_remembered_ones(crd_store: Store) -> None:
    """CEL results are remembered and defaulting planned per CRD version: after the CRD changes, the
    very spec that passed meets the new rule, and new objects get the new default."""
    crds = "customresourcedefinitions.apiextensions.k8s.io"
    assert crd_store.create("widgets.example.com", "default", widget("a", 3, maxReplicas=5))["spec"]["color"] == "red"
    crd = copy.deepcopy(crd_store.get(crds, None, "widgets.example.com"))
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["x-kubernetes-validations"] = [
        {"rule": "self.replicas < self.maxReplicas - 2", "message": "leave room for two"}
    ]
    spec_schema["properties"]["size"] = {"type": "string", "default": "m"}
    crd_store.update(crds, None, "widgets.example.com", crd)
    with pytest.raises(ApiError, match="leave room for two"):
        crd_store.create("widgets.example.com", "default", widget("b", 3, maxReplicas=5))
    assert crd_store.create("widgets.example.com", "default", widget("c", 3, maxReplicas=6))["spec"]["size"] == "m"


CRDS = "customresourcedefinitions.apiextensions.k8s.io"


def _status_crd(status_default: bool) -> dict:
    crd = widget_crd()
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    root["properties"]["status"] = {
        "type": "object",
        **({"default": {"phase": "New"}} if status_default else {}),
        "properties": {
            "replicas": {"type": "integer"},
            "phase": {"type": "string", "default": "Pending"},
            "note": {"type": "string", "nullable": True},
            "selector": {"type": "string"},
            "conditions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"type": {"type": "string"}, "status": {"type": "string", "default": "Unknown"}},
                },
            },
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    return crd


STATUS_WRITES = [
    pytest.param("update", {"replicas": 2, "phase": "Running"}, id="plain"),
    pytest.param("update", {"replicas": 2, "extra": 1, "conditions": [{"type": "A", "x": 1}]}, id="unknown-fields"),
    pytest.param("update", {"replicas": None, "note": None, "selector": None, "phase": None}, id="nulls"),
    pytest.param("update", {"free": {"any": {"thing": [1, None]}}, "conditions": [{"type": "B"}]}, id="defaults"),
    pytest.param("update", None, id="no-status"),
    pytest.param("update", "null", id="null-status"),
    pytest.param("merge", {"status": {"replicas": 3, "bogus": True}}, id="merge-patch"),
    pytest.param("json", [{"op": "add", "path": "/status", "value": {"conditions": [{"type": "C"}]}}], id="json-patch"),
    pytest.param(
        "apply",
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w"},
            "status": {"replicas": 4, "unknown": 1},
        },
        id="apply",
    ),
]


def _status_write(store: Store, how: str, status: object, validation: str) -> tuple[dict, list[str]]:
    opts = WriteOptions(field_validation=validation, field_manager="tester", force=how == "apply")
    if how == "update":
        body = copy.deepcopy(store.get("widgets.example.com", "default", "w"))
        body["spec"]["replicas"] = 7  # ignored through /status
        if status is None:
            body.pop("status", None)
        else:
            body["status"] = None if status == "null" else copy.deepcopy(status)
        result = store.update_ex("widgets.example.com", "default", "w", body, "status", opts)
    else:
        result = store.patch_ex("widgets.example.com", "default", "w", how, copy.deepcopy(status), "status", opts)
    return result.obj, result.warnings


@pytest.mark.parametrize("status_default", [False, True])
@pytest.mark.parametrize("validation", ["Warn", "Ignore"])
@pytest.mark.parametrize(("how", "status"), STATUS_WRITES)
def test_a_status_write_normalizing_only_the_status_stores_what_normalizing_everything_does(
    clock: FakeClock, how: str, status: object, validation: str, status_default: bool
) -> None:
    """The fast path of a custom resource's /status write (the rest of the stored object is already
    pruned and defaulted: only the new status is) against the full pass over the whole object."""
    outcomes = []
    for fast in (True, False):
        store = Store(clock=clock)
        store.create(CRDS, None, _status_crd(status_default))
        store.create("widgets.example.com", "default", widget("w", 2, free={"kept": {"x": 1}}))
        if status != "null":  # a first status, so the write changes one
            store.patch("widgets.example.com", "default", "w", "merge", {"status": {"replicas": 1}}, "status")
        bucket = store._buckets["widgets.example.com"]
        assert bucket.normalized is not None
        if not fast:
            bucket.normalized = None
        obj, warnings = _status_write(store, how, status, validation)
        stored = store.get("widgets.example.com", "default", "w")
        assert stored is obj
        outcomes.append(orjson.dumps({**obj, "metadata": {**obj["metadata"], "uid": ""}}) + repr(warnings).encode())
    assert outcomes[0] == outcomes[1]


def test_a_status_write_after_a_schema_change_still_defaults_the_whole_object(crd_store: Store) -> None:
    crd_store.create("widgets.example.com", "default", widget("w", 2))
    crd = copy.deepcopy(crd_store.get(CRDS, None, "widgets.example.com"))
    crd["metadata"]["labels"] = {"touched": "yes"}  # the schema stays: status writes stay on the fast path
    crd_store.update(CRDS, None, "widgets.example.com", crd)
    rt = crd_store.resource_type("widgets.example.com")
    crd_store.get("widgets.example.com", "default", "w")
    assert crd_store._bucket(rt).normalized is rt.schema
    crd = copy.deepcopy(crd_store.get(CRDS, None, "widgets.example.com"))
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = {
        "type": "string",
        "default": "m",
    }
    crd_store.update(CRDS, None, "widgets.example.com", crd)
    written = crd_store.patch("widgets.example.com", "default", "w", "merge", {"status": {"phase": "Up"}}, "status")
    assert written["spec"]["size"] == "m" and written["status"] == {"phase": "Up"}


def test_cr_pruning_validation_and_strict(crd_store: Store) -> None:
    obj = widget("w", 2, extra="gone", free={"anything": {"goes": 1}})
    created = crd_store.create("widgets.example.com", "default", obj)
    assert "extra" not in created["spec"] and created["spec"]["free"] == {"anything": {"goes": 1}}
    with raises(400, "BadRequest") as ctx:
        crd_store.create_ex(
            "widgets.example.com", "default", widget("s", extra=1), WriteOptions(field_validation="Strict")
        )
    assert ctx.error.message == (
        'Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.extra"'
    )
    warned = crd_store.create_ex(
        "widgets.example.com", "default", widget("t", extra=1), WriteOptions(field_validation="Warn")
    )
    assert warned.warnings == ['unknown field "spec.extra"']
    with raises(422, "Invalid") as ctx:
        crd_store.create("widgets.example.com", "default", widget("bad", -1, color="pink"))
    fields = [c["field"] for c in ctx.error.status()["details"]["causes"]]
    assert "spec.replicas" in fields and "spec.color" in fields
    with raises(422, "Invalid") as ctx:
        crd_store.create("widgets.example.com", "default", widget("cel", 20, maxReplicas=5))
    assert "replicas must not exceed maxReplicas" in ctx.error.message


def test_cr_unknown_metadata_fields_are_reported_once(crd_store: Store) -> None:
    body = widget("w")
    body["metadata"]["bogus"] = 1
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u", "extra": True}
    ]
    body["spec"]["unknownSpec"] = 1
    warned = crd_store.create_ex("widgets.example.com", "default", body, WriteOptions(field_validation="Warn"))
    assert warned.warnings == [
        'unknown field "metadata.bogus"',
        'unknown field "metadata.ownerReferences[0].extra"',
        'unknown field "spec.unknownSpec"',
    ]
    assert "bogus" not in warned.obj["metadata"] and "extra" not in warned.obj["metadata"]["ownerReferences"][0]
    body["metadata"]["name"] = "w2"
    with raises(400, "BadRequest") as strict:
        crd_store.create_ex("widgets.example.com", "default", body, WriteOptions(field_validation="Strict"))
    assert strict.error.message.count('unknown field "metadata.bogus"') == 1


def test_cr_generation_and_status_subresource(crd_store: Store) -> None:
    w = crd_store.create("widgets.example.com", "default", widget("w"))
    with raises(422, "Invalid"):  # custom resources refuse PUT without an RV
        crd_store.update("widgets.example.com", "default", "w", widget("w", 2))
    labeled = crd_store.patch("widgets.example.com", "default", "w", "merge", {"metadata": {"labels": {"a": "b"}}})
    assert labeled["metadata"]["generation"] == 1  # metadata-only change
    spec = crd_store.patch("widgets.example.com", "default", "w", "merge", {"spec": {"replicas": 3}})
    assert spec["metadata"]["generation"] == 2
    main_status = crd_store.patch("widgets.example.com", "default", "w", "merge", {"status": {"phase": "x"}})
    assert "status" not in main_status  # status ignored on the main resource
    status = crd_store.patch(
        "widgets.example.com",
        "default",
        "w",
        "merge",
        {"status": {"phase": "Running"}, "spec": {"replicas": 9}},
        subresource="status",
    )
    assert status["status"] == {"phase": "Running"} and status["spec"]["replicas"] == 3
    assert status["metadata"]["generation"] == 2
    with raises(409, "Conflict"):
        crd_store.update("widgets.example.com", "default", "w", {**w, "status": {"phase": "old"}}, subresource="status")
    with raises(415, "UnsupportedMediaType"):
        crd_store.patch("widgets.example.com", "default", "w", "strategic", {"spec": {"replicas": 1}})


def test_cr_status_writes_leave_the_stored_version_intact(crd_store: Store) -> None:
    import orjson

    before = crd_store.create("widgets.example.com", "default", widget("w", 2))
    snapshot = orjson.dumps(before)
    after = crd_store.patch(
        "widgets.example.com", "default", "w", "merge", {"status": {"phase": "Ready", "bogus": 1}}, subresource="status"
    )
    assert orjson.dumps(before) == snapshot
    assert after["status"] == {"phase": "Ready"} and after["spec"] == before["spec"]


def test_scale_subresource(crd_store: Store) -> None:
    crd_store.create("widgets.example.com", "default", widget("w", 2))
    crd_store.patch(
        "widgets.example.com",
        "default",
        "w",
        "merge",
        {"status": {"replicas": 1, "selector": "app=w"}},
        subresource="status",
    )
    scale = crd_store.get_scale("widgets.example.com", "default", "w")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"] == {"replicas": 2} and scale["status"] == {"replicas": 1, "selector": "app=w"}
    after = crd_store.patch(
        "widgets.example.com", "default", "w", "merge", {"spec": {"replicas": 5}}, subresource="scale"
    )
    assert after["spec"]["replicas"] == 5
    cr = crd_store.get("widgets.example.com", "default", "w")
    assert cr["spec"]["replicas"] == 5 and cr["metadata"]["generation"] == 2
    with raises(409, "Conflict"):
        crd_store.update("widgets.example.com", "default", "w", scale, subresource="scale")  # stale RV
    with raises(404):
        crd_store.get_scale("configmaps", "default", "w")


def test_crd_deletion_removes_instances_and_the_type(crd_store: Store) -> None:
    crd_store.create("widgets.example.com", "default", widget("w"))
    crd_store.delete("customresourcedefinitions.apiextensions.k8s.io", None, "widgets.example.com")
    assert crd_store.get("customresourcedefinitions.apiextensions.k8s.io", None, "widgets.example.com") is None
    with raises(404):
        crd_store.get("widgets.example.com", "default", "w")


def _rfc(ts: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def test_eviction_marks_the_pod_as_a_disruption_target_before_deleting_it(store: Store, events: list) -> None:
    store.create("pods", "default", pod("p"))
    store.bind("default", "p", {"target": {"kind": "Node", "name": "n1"}})
    store.patch("pods", "default", "p", "merge", {"status": {"phase": "Running"}}, subresource="status")
    events.clear()
    status = store.evict("default", "p", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
    assert status["status"] == "Success"
    assert [e[0] for e in events] == ["MODIFIED", "MODIFIED"]  # the condition, then the graceful delete
    evicted = store.get("pods", "default", "p")
    assert evicted["metadata"]["deletionTimestamp"]
    [target] = [c for c in evicted["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "EvictionByEvictionAPI",
        "Eviction API: evicting",
    )


def test_evicting_a_finished_pod_deletes_it_without_a_condition(store: Store) -> None:
    store.create("pods", "default", pod("done"))
    store.patch("pods", "default", "done", "merge", {"status": {"phase": "Succeeded"}}, subresource="status")
    store.evict("default", "done", {"kind": "Eviction"})
    assert store.get("pods", "default", "done") is None


def test_updates_default_what_they_add_like_creates(store: Store) -> None:
    """The apiserver defaults every object it decodes: a port added later gets its protocol too."""
    store.create("services", "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    svc = store.patch("services", "default", "s", "strategic", {"spec": {"ports": [{"port": 81}]}})
    assert sorted((p["port"], p["protocol"], p["targetPort"]) for p in svc["spec"]["ports"]) == [
        (80, "TCP", 80),
        (81, "TCP", 81),
    ]


@pytest.mark.parametrize(("spec", "json_type"), [("x", "string"), ([], "array"), (3, "number")])
def test_a_builtin_spec_that_is_not_an_object_is_a_bad_request(store: Store, spec: object, json_type: str) -> None:
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    with raises(400) as bad:
        store.create("pods", "default", body)
    assert bad.error.message == (
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal '
        f"{json_type} into Go struct field Pod.spec of type v1.PodSpec"
    )
    store.create("services", "default", {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    with raises(400):
        store.patch("services", "default", "s", "merge", {"spec": spec})
