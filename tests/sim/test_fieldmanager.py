"""metadata.managedFields as kube-apiserver's field manager keeps them: the entry a create, an
update, a status write and a server-side apply produce, apply conflicts and force, fields an applier
stops applying, resets, the 10-manager cap, and what kubectl and kubernetes-asyncio see of them."""

from __future__ import annotations

import json

import pytest
import yaml

from controller.sim import fieldmanager
from controller.sim.errors import ApiError
from controller.sim.store import Store, WriteOptions
from tests.conftest import Kubectl
from tests.sim.conftest import FakeClock
from tests.sim.crds import widget_crd

NS = "default"
NOW = "2023-11-14T22:13:20Z"  # the FakeClock's instant


def worker_pod(name: str = "w-0") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"replica-type": "worker"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf:2.15",
                                     "ports": [{"containerPort": 2222, "name": "tfjob-port"}],
                                     "env": [{"name": "TF_CONFIG", "value": "{}"}]}]}}


def entries(obj: dict) -> dict[tuple[str, str, str], dict]:
    return {(e.get("manager", ""), e["operation"], e.get("subresource", "")): e
            for e in obj["metadata"].get("managedFields") or []}


def fields(obj: dict, manager: str, operation: str = "Update", subresource: str = "") -> dict:
    return entries(obj)[(manager, operation, subresource)]["fieldsV1"]


# ------------------------------------------------------------------------------------------- updates


def test_create_records_the_creator_with_defaulted_fields_and_keyed_list_items(store: Store) -> None:
    pod = store.create_ex("pods", NS, worker_pod(), WriteOptions(user_agent="kubectl-create/v1.30.0 (linux)")).obj
    [entry] = pod["metadata"]["managedFields"]
    assert {k: v for k, v in entry.items() if k != "fieldsV1"} == {
        "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": NOW,
        "fieldsType": "FieldsV1"}
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:replica-type": {}}},
        "f:spec": {
            "f:containers": {'k:{"name":"tensorflow"}': {
                ".": {}, "f:env": {".": {}, 'k:{"name":"TF_CONFIG"}': {".": {}, "f:name": {}, "f:value": {}}},
                "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                "f:ports": {".": {}, 'k:{"containerPort":2222,"protocol":"TCP"}': {
                    ".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                "f:resources": {}, "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
            # Defaults are owned (they are set while decoding); what admission sets later is not:
            # no serviceAccountName, priority or preemptionPolicy, and no status (PrepareForCreate).
            "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {}, "f:schedulerName": {},
            "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}}}
    assert list(entry["fieldsV1"]["f:spec"]) == sorted(entry["fieldsV1"]["f:spec"])


def test_status_writes_get_their_own_entry_and_leave_the_creators_alone(store: Store, clock: FakeClock) -> None:
    created = store.create("pods", NS, worker_pod(), field_manager="tfjob-controller")
    clock.now += 1
    store.patch("pods", NS, "w-0", "merge", {"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True"}]}}, subresource="status", field_manager="kubelet")
    pod = store.patch("pods", NS, "w-0", "merge", {"status": {"conditions": [
        {"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"}]}},
        subresource="status", field_manager="kubelet")
    assert fields(pod, "tfjob-controller") == fields(created, "tfjob-controller")
    assert fields(pod, "kubelet", subresource="status") == {"f:status": {
        "f:conditions": {".": {}, 'k:{"type":"ContainersReady"}': {".": {}, "f:status": {}, "f:type": {}},
                         'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}},
        "f:phase": {}}}
    assert [e.get("subresource", "") for e in pod["metadata"]["managedFields"]] == ["", "status"]


def test_an_update_takes_the_fields_it_changes_from_other_managers(store: Store, clock: FakeClock) -> None:
    store.create("pods", NS, worker_pod(), field_manager="creator")
    clock.now += 60
    pod = store.patch("pods", NS, "w-0", "merge", {"metadata": {"labels": {"replica-type": "ps", "extra": "1"}}},
                      field_manager="editor")
    assert fields(pod, "editor") == {"f:metadata": {"f:labels": {"f:extra": {}, "f:replica-type": {}}}}
    # The creator still owns the labels map it created, not the label it no longer set.
    assert fields(pod, "creator")["f:metadata"] == {"f:labels": {}}
    assert entries(pod)[("editor", "Update", "")]["time"] == "2023-11-14T22:14:20Z"
    assert entries(pod)[("creator", "Update", "")]["time"] == NOW


def test_removed_fields_leave_every_entry_and_empty_entries_are_dropped(store: Store) -> None:
    store.create("configmaps", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                    "data": {"a": "1"}}, field_manager="alice")
    store.patch("configmaps", NS, "c", "merge", {"data": {"b": "2"}}, field_manager="bob")
    cm = store.patch("configmaps", NS, "c", "merge", {"data": {"b": None}}, field_manager="carol")
    assert set(entries(cm)) == {("alice", "Update", "")}  # bob owned only b; carol only removed
    cm = store.patch("configmaps", NS, "c", "merge", {"data": None}, field_manager="carol")
    assert "managedFields" not in cm["metadata"]


def test_a_no_op_write_keeps_the_entries_and_the_resource_version(store: Store, clock: FakeClock) -> None:
    created = store.create("pods", NS, worker_pod(), field_manager="creator")
    clock.now += 60
    again = store.patch("pods", NS, "w-0", "merge", {"metadata": {"labels": {"replica-type": "worker"}}},
                        field_manager="someone-else")
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == created["metadata"]["managedFields"]


def test_custom_resources_own_their_new_spec_node_and_defaults(store: Store) -> None:
    store.create("customresourcedefinitions.apiextensions.k8s.io", None, widget_crd())
    widget = store.create("widgets.example.com", NS, {
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"replicas": 2}},
        field_manager="kubectl-client-side-apply")
    # A custom resource has no Go zero value: spec is a new node, so it is a member (".").
    assert fields(widget, "kubectl-client-side-apply") == {
        "f:spec": {".": {}, "f:color": {}, "f:maxReplicas": {}, "f:replicas": {}}}
    scaled = store.update("widgets.example.com", NS, "w", {"apiVersion": "autoscaling/v1", "kind": "Scale",
                                                            "metadata": {"name": "w"}, "spec": {"replicas": 5}},
                          subresource="scale", field_manager="hpa")
    widget = store.get("widgets.example.com", NS, "w")
    assert scaled["spec"]["replicas"] == 5
    assert fields(widget, "hpa", subresource="scale") == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in fields(widget, "kubectl-client-side-apply")["f:spec"]


def test_update_managers_are_capped_at_ten_with_the_oldest_merged(store: Store, clock: FakeClock) -> None:
    store.create("configmaps", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                    "data": {"base": "v"}}, field_manager="creator")
    for i in range(12):
        clock.now += 1
        cm = store.patch("configmaps", NS, "c", "merge", {"data": {f"k{i}": "v"}}, field_manager=f"m{i}")
    managers = [e["manager"] for e in cm["metadata"]["managedFields"]]
    assert len(managers) == fieldmanager.MAX_UPDATE_MANAGERS
    assert fieldmanager.ANCIENT_CHANGES in managers and "m11" in managers and "m0" not in managers
    ancient = next(e for e in cm["metadata"]["managedFields"] if e["manager"] == fieldmanager.ANCIENT_CHANGES)
    # The creator (oldest) and m0..m2 went into the bucket, which took the time of the newest of them.
    assert ancient["fieldsV1"] == {"f:data": {".": {}, "f:base": {}, "f:k0": {}, "f:k1": {}, "f:k2": {}}}
    assert ancient["time"] == "2023-11-14T22:13:23Z"
    assert managers == [fieldmanager.ANCIENT_CHANGES] + [f"m{i}" for i in range(3, 12)]


@pytest.mark.parametrize(("sent", "expected"), [
    pytest.param(None, "kept", id="absent"),
    pytest.param([], "reset", id="empty-list-resets"),
    pytest.param([{"operation": "Destroy", "fieldsType": "FieldsV1", "fieldsV1": {}}], "kept",
                 id="invalid-falls-back-to-stored"),
    pytest.param([{}], "reset", id="single-empty-entry-resets"),
    pytest.param([{"fieldsV1": {}}], "kept", id="an-entry-with-fields-is-no-reset"),
    pytest.param([{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}], "kept",
                 id="no-api-version-falls-back-to-stored"),
    pytest.param([{"manager": "mine", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                   "fieldsV1": {"f:data": {"f:a": {}}}}], "replaced", id="valid-list-is-taken"),
])
def test_managed_fields_sent_in_a_body(store: Store, sent: list | None, expected: str) -> None:
    created = store.create("configmaps", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                              "data": {"a": "1"}}, field_manager="creator")
    body = json.loads(json.dumps(created))
    body["metadata"].pop("managedFields")
    if sent is not None:
        body["metadata"]["managedFields"] = sent
    cm = store.update("configmaps", NS, "c", body, field_manager="editor")
    if expected == "kept":
        assert cm["metadata"]["managedFields"] == created["metadata"]["managedFields"]
    elif expected == "reset":
        assert "managedFields" not in cm["metadata"]
        # ...and stays untracked: updates never start tracking an object that has no entries.
        later = store.patch("configmaps", NS, "c", "merge", {"data": {"b": "2"}}, field_manager="later")
        assert "managedFields" not in later["metadata"]
    else:
        assert [e["manager"] for e in cm["metadata"]["managedFields"]] == ["mine"]


def test_an_accepted_body_list_is_stored_in_normal_form(store: Store) -> None:
    created = store.create("configmaps", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                              "data": {"a": "1"}}, field_manager="creator")
    body = json.loads(json.dumps(created))
    body["metadata"]["managedFields"] = [
        {"manager": "later", "operation": "Update", "apiVersion": "v1", "time": "2023-11-14T22:14:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {".": {}}}}},
        {"manager": "earlier", "operation": "Update", "apiVersion": "v1", "time": "2023-11-14T22:13:00Z",
         "fieldsType": "FieldsV1", "fieldsV1": {}}]
    cm = store.update("configmaps", NS, "c", body, field_manager="editor")
    # Re-encoded: a lone "." is a plain member, the entry without fields is gone, order is by time.
    assert [(e["manager"], e["fieldsV1"]) for e in cm["metadata"]["managedFields"]] == [
        ("later", {"f:data": {"f:a": {}}})]


# --------------------------------------------------------------------------------------------- apply

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}


def apply(store: Store, body: dict, manager: str, force: bool = False) -> dict:
    return store.patch("configmaps", NS, "c", "apply", body, field_manager=manager, force=force)


def test_apply_owns_exactly_the_applied_fields_and_reapplying_is_a_no_op(store: Store, clock: FakeClock) -> None:
    first = apply(store, CM, "alice")
    assert first["metadata"]["managedFields"] == [{
        "manager": "alice", "operation": "Apply", "apiVersion": "v1", "time": NOW, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}]
    clock.now += 60
    again = apply(store, CM, "alice")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == first["metadata"]["managedFields"]


def test_apply_conflicts_with_another_managers_field_and_force_takes_it(store: Store) -> None:
    apply(store, CM, "alice")
    with pytest.raises(ApiError) as caught:
        apply(store, {**CM, "data": {"a": "9"}}, "bob")
    status = caught.value.status()
    assert (status["code"], status["reason"]) == (409, "Conflict")
    # An Apply manager is named without a version (it is one identity across versions).
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "alice": .data.a'
    assert status["details"]["causes"] == [
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.a"}]
    # Applying the same value is shared ownership, not a conflict.
    shared = apply(store, {**CM, "data": {"b": "2"}}, "bob")
    assert fields(shared, "bob", "Apply") == {"f:data": {"f:b": {}}}
    assert fields(shared, "alice", "Apply") == {"f:data": {"f:a": {}, "f:b": {}}}
    forced = apply(store, {**CM, "data": {"a": "9"}}, "bob", force=True)
    assert forced["data"]["a"] == "9"
    assert fields(forced, "alice", "Apply") == {"f:data": {"f:b": {}}}
    assert fields(forced, "bob", "Apply") == {"f:data": {"f:a": {}}}


def test_apply_conflicts_with_an_update_manager_too(store: Store) -> None:
    store.create("pods", NS, worker_pod(), field_manager="tfjob-controller")
    with pytest.raises(ApiError) as caught:
        store.patch("pods", NS, "w-0", "apply", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0"},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf:2.16"}]}}, field_manager="upgrader")
    assert caught.value.message == ('Apply failed with 1 conflict: conflict with "tfjob-controller" using v1: '
                                    '.spec.containers[name="tensorflow"].image')


def test_fields_an_applier_stops_applying_are_removed_unless_someone_else_owns_them(store: Store) -> None:
    apply(store, CM, "alice")
    store.patch("configmaps", NS, "c", "merge", {"data": {"c": "3"}}, field_manager="editor")
    apply(store, {**CM, "data": {"a": "1", "b": "2", "c": "3"}}, "alice")  # now co-owns c
    cm = apply(store, {**CM, "data": {"a": "1"}}, "alice")
    assert cm["data"] == {"a": "1", "c": "3"}  # b was alice's alone: gone; c is still the editor's
    assert fields(cm, "alice", "Apply") == {"f:data": {"f:a": {}}}


def test_apply_creates_with_an_apply_entry_and_rejects_sent_managed_fields(store: Store) -> None:
    cm = apply(store, CM, "alice")
    assert [e["operation"] for e in cm["metadata"]["managedFields"]] == ["Apply"]
    body = {**CM, "metadata": {"name": "c", "managedFields": [{}]}}
    with pytest.raises(ApiError) as caught:
        apply(store, body, "alice")
    assert (caught.value.code, caught.value.message) == (400, "metadata.managedFields must be nil")


def test_apply_entries_come_before_update_entries(store: Store, clock: FakeClock) -> None:
    store.create("configmaps", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                    "data": {"z": "1"}}, field_manager="zed")
    clock.now += 1
    cm = apply(store, CM, "alice")
    assert [(e["manager"], e["operation"]) for e in cm["metadata"]["managedFields"]] == [
        ("alice", "Apply"), ("zed", "Update")]


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
           "spec": {"selector": {"app": "x"}, "ports": [{"name": "a", "port": 80, "targetPort": 8080},
                                                        {"name": "b", "port": 81}]}}


def apply_service(store: Store, spec_ports: list[dict], manager: str) -> dict:
    body = json.loads(json.dumps(SERVICE))
    body["spec"]["ports"] = spec_ports
    return store.patch("services", NS, "s", "apply", body, field_manager=manager)


def test_applied_list_items_are_keyed_with_defaulted_keys_and_conflict_per_field(store: Store) -> None:
    svc = apply_service(store, SERVICE["spec"]["ports"], "alice")
    ports = fields(svc, "alice", "Apply")["f:spec"]["f:ports"]
    assert set(ports) == {'k:{"port":80,"protocol":"TCP"}', 'k:{"port":81,"protocol":"TCP"}'}
    with pytest.raises(ApiError) as caught:
        apply_service(store, [{"name": "a", "port": 80, "targetPort": 9090}], "bob")
    assert caught.value.message == ('Apply failed with 1 conflict: conflict with "alice": '
                                    '.spec.ports[port=80,protocol="TCP"].targetPort')


def test_an_applier_dropping_a_list_item_removes_the_whole_item(store: Store) -> None:
    apply_service(store, SERVICE["spec"]["ports"], "alice")
    svc = apply_service(store, [{"name": "a", "port": 80, "targetPort": 8080}], "alice")
    assert [p["port"] for p in svc["spec"]["ports"]] == [80]


def test_a_dropped_item_added_after_creation_is_removed_and_leaves_no_stale_owner(store: Store) -> None:
    first = [{"name": "a", "port": 80}]
    apply_service(store, first, "alice")
    apply_service(store, first + [{"name": "b", "port": 81}], "alice")  # stored without its default protocol
    store.patch("services", NS, "s", "strategic", {"spec": {"ports": [{"port": 81, "targetPort": 9999}]}},
                field_manager="bob")
    svc = apply_service(store, first, "alice")
    assert [p["port"] for p in svc["spec"]["ports"]] == [80]
    assert ("bob", "Update", "") not in entries(svc)  # bob owned only fields of the deleted item
    again = apply_service(store, first + [{"name": "b", "port": 81, "targetPort": 7000}], "alice")
    assert [p.get("targetPort") for p in again["spec"]["ports"]] == [80, 7000]


def test_pruning_removes_maps_left_empty_that_nobody_owns(store: Store) -> None:
    apply(store, {**CM, "metadata": {"name": "c", "labels": {"l": "1"}}}, "alice")
    cm = apply(store, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, "alice")
    assert "data" not in cm and "labels" not in cm["metadata"]


def test_several_conflicts_are_listed_by_manager_then_in_field_order(store: Store) -> None:
    apply(store, {**CM, "metadata": {"name": "c", "labels": {"z": "1"}}}, "alice")
    store.patch("configmaps", NS, "c", "merge", {"data": {"c": "3"}}, field_manager="editor")
    with pytest.raises(ApiError) as caught:
        apply(store, {**CM, "metadata": {"name": "c", "labels": {"z": "2"}},
                      "data": {"b": "9", "a": "9", "c": "9"}}, "bob")
    assert caught.value.message == (
        'Apply failed with 4 conflicts: conflicts with "alice":\n- .data.a\n- .data.b\n- .metadata.labels.z\n'
        'conflicts with "editor" using v1:\n- .data.c')
    assert [c["field"] for c in caught.value.status()["details"]["causes"]] == [
        ".data.a", ".data.b", ".metadata.labels.z", ".data.c"]


def test_the_first_apply_to_an_untracked_object_conflicts_with_before_first_apply(store: Store) -> None:
    created = store.create("configmaps", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                              "data": {"a": "1"}}, field_manager="creator")
    body = json.loads(json.dumps(created))
    body["metadata"]["managedFields"] = [{}]
    store.update("configmaps", NS, "c", body, field_manager="resetter")
    with pytest.raises(ApiError) as caught:
        apply(store, {**CM, "data": {"a": "9"}}, "alice")
    assert caught.value.message == ('Apply failed with 1 conflict: conflict with "before-first-apply" using v1: '
                                    '.data.a')


def test_emptying_a_map_removes_its_fields_and_gives_the_writer_nothing(store: Store) -> None:
    store.create("pods", NS, worker_pod(), field_manager="creator")
    pod = store.patch("pods", NS, "w-0", "json", [{"op": "replace", "path": "/metadata/labels", "value": {}}],
                      field_manager="editor")
    assert ("editor", "Update", "") not in entries(pod)
    assert fields(pod, "creator")["f:metadata"] == {"f:labels": {}}


def test_a_status_apply_prunes_nothing_outside_status(store: Store) -> None:
    stored = store.create("pods", NS, worker_pod(), field_manager="creator")
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w-0"}, "status": {"phase": "Running"}}
    store.patch("pods", NS, "w-0", "apply", body, subresource="status", field_manager="kubelet")
    # An entry that (after a client edit) claims the labels must not make a later status apply prune them.
    current = store.get("pods", NS, "w-0")
    edited = json.loads(json.dumps(current))
    for entry in edited["metadata"]["managedFields"]:
        if entry.get("subresource") == "status":
            entry["fieldsV1"]["f:metadata"] = {"f:labels": {"f:replica-type": {}}}
    store.update("pods", NS, "w-0", edited, field_manager="editor")
    before = store.get("pods", NS, "w-0")
    snapshot = json.dumps(before)
    after = store.patch("pods", NS, "w-0", "apply", body, subresource="status", field_manager="kubelet")
    assert after["metadata"]["labels"] == {"replica-type": "worker"}
    assert json.dumps(before) == snapshot and stored["metadata"]["labels"] == {"replica-type": "worker"}


def test_an_eviction_adds_no_ownership_entry(store: Store) -> None:
    store.create("pods", NS, worker_pod(), field_manager="creator")
    seen: list[dict] = []
    store.add_listener(lambda t, r, old, new: seen.append(new) if new is not None and r == "pods" else None)
    store.evict(NS, "w-0", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "w-0"}})
    assert seen and all(set(entries(obj)) == {("creator", "Update", "")} for obj in seen)


def test_a_write_without_manager_or_user_agent_is_recorded_as_unknown(store: Store) -> None:
    cm = store.create("configmaps", NS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                                         "data": {"a": "1"}})
    assert [e["manager"] for e in cm["metadata"]["managedFields"]] == ["unknown"]


# ----------------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize(("path", "expected"), [
    (("f:spec", "f:replicas"), ".spec.replicas"),
    (("f:spec", "f:containers", 'k:{"name":"tf"}', "f:image"), '.spec.containers[name="tf"].image'),
    (("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}'), '.spec.ports[port=80,protocol="TCP"]'),
    (("f:metadata", "f:finalizers", 'v:"a/b"'), '.metadata.finalizers[="a/b"]'),
])
def test_field_path_strings_match_the_apiservers(path: tuple[str, ...], expected: str) -> None:
    assert fieldmanager.field_path_string(path) == expected


@pytest.mark.parametrize(("value", "field"), [
    ("nope", "metadata.managedFields"),
    ([{"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV2", "fieldsV1": {}}],
     "metadata.managedFields[0].fieldsType"),
    ([{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"x:bad": {}}}],
     "metadata.managedFields[0].fieldsV1"),
    ([{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "manager": 7}],
     "metadata.managedFields[0].manager"),
    ([{"operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}], "metadata.managedFields[0].apiVersion"),
    ([{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"k:notjson": {}}}],
     "metadata.managedFields[0].fieldsV1"),
    ([{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"k:[1]": {}}}],
     "metadata.managedFields[0].fieldsV1"),
    ([{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"i:x": {}}}],
     "metadata.managedFields[0].fieldsV1"),
])
def test_invalid_entries_are_reported_with_the_field_at_fault(value: object, field: str) -> None:
    assert [c["field"] for c in fieldmanager.validate_entries(value)] == [field]


def test_lists_without_their_keys_count_as_atomic(store: Store) -> None:
    body = worker_pod()
    body["spec"]["containers"][0]["env"] = [{"value": "no name"}]
    pod = store.create("pods", NS, body, field_manager="m")
    container = fields(pod, "m")["f:spec"]["f:containers"]['k:{"name":"tensorflow"}']
    assert container["f:env"] == {}


# --------------------------------------------------------------------------- through kubectl and HTTP


async def test_kubectl_hides_managed_fields_unless_asked_and_names_its_managers(kubectl: Kubectl) -> None:
    rc, _out, err = await kubectl("create", "configmap", "c", "--from-literal=a=1")
    assert rc == 0, err
    rc, out, err = await kubectl("get", "configmap", "c", "-o", "yaml")
    assert rc == 0, err
    assert "managedFields" not in yaml.safe_load(out)["metadata"]
    rc, out, err = await kubectl("get", "configmap", "c", "-o", "yaml", "--show-managed-fields")
    assert rc == 0, err
    [entry] = yaml.safe_load(out)["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"], entry["fieldsV1"]) == (
        "kubectl-create", "Update", {"f:data": {".": {}, "f:a": {}}})
    rc, _out, err = await kubectl("label", "configmap", "c", "team=ml")
    assert rc == 0, err
    rc, out, err = await kubectl("get", "configmap", "c", "-o", "json", "--show-managed-fields")
    assert rc == 0, err
    managers = {(e["manager"], e["operation"]) for e in json.loads(out)["metadata"]["managedFields"]}
    assert managers == {("kubectl-create", "Update"), ("kubectl-label", "Update")}


async def test_kubectl_server_side_apply_conflict_and_force(kubectl: Kubectl) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: '{}'\n"
    rc, out, err = await kubectl("apply", "--server-side", "--field-manager=alice", "-f", "-",
                                 input=manifest.format(1))
    assert (rc, out.strip()) == (0, "configmap/c serverside-applied"), err
    rc, _out, err = await kubectl("apply", "--server-side", "--field-manager=bob", "-f", "-",
                                  input=manifest.format(2))
    assert rc == 1
    assert 'Apply failed with 1 conflict: conflict with "alice": .data.a' in err
    rc, _out, err = await kubectl("apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", "-",
                                  input=manifest.format(2))
    assert rc == 0, err
    rc, out, err = await kubectl("get", "configmap", "c", "-o", "json", "--show-managed-fields")
    doc = json.loads(out)
    assert doc["data"] == {"a": "2"}
    assert [(e["manager"], e["operation"]) for e in doc["metadata"]["managedFields"]] == [("bob", "Apply")]
