"""metadata.managedFields as kube-apiserver's field manager keeps them: the entry a create, an
update, a status write and a server-side apply produce, apply conflicts and force, fields an applier
stops applying, resets, the 10-manager cap, and what kubectl and kubernetes-asyncio see of them."""

from __future__ import annotations

import functools
import json
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.tfjob.crd import build_crd
from tfjob_sim import fieldmanager
from tfjob_sim.errors import ApiError
from tfjob_sim.store import Store, WriteOptions
from tfjob_sim.testing.fixtures import FakeClock
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.objects import widget_crd

NS = "default"
NOW = "2023-11-14T22:13:20Z"  # the FakeClock's instant


def worker_pod(name: str = "w-0") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"replica-type": "worker"}},
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "tf:2.15",
                    "ports": [{"containerPort": 2222, "name": "tfjob-port"}],
                    "env": [{"name": "TF_CONFIG", "value": "{}"}],
                }
            ]
        },
    }


def create_c(store: Store, manager: str | None) -> dict:
    """Creates ConfigMap c (data a=1) as ``manager``; returns a copy of the stored object, free to edit."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    return json.loads(json.dumps(store.create("configmaps", NS, body, field_manager=manager)))


def entries(obj: dict) -> dict[tuple[str, str, str], dict]:
    return {
        (e.get("manager", ""), e["operation"], e.get("subresource", "")): e
        for e in obj["metadata"].get("managedFields") or []
    }


def fields(obj: dict, manager: str, operation: str = "Update", subresource: str = "") -> dict:
    return entries(obj)[(manager, operation, subresource)]["fieldsV1"]


# ------------------------------------------------------------------------------------------- updates


def test_create_records_the_creator_with_defaulted_fields_and_keyed_list_items(store: Store) -> None:
    pod = store.create_ex("pods", NS, worker_pod(), WriteOptions(user_agent="kubectl-create/v1.30.0 (linux)")).obj
    [entry] = pod["metadata"]["managedFields"]
    assert {k: v for k, v in entry.items() if k != "fieldsV1"} == {
        "manager": "kubectl-create",
        "operation": "Update",
        "apiVersion": "v1",
        "time": NOW,
        "fieldsType": "FieldsV1",
    }
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {".": {}, "f:replica-type": {}}},
        "f:spec": {
            "f:containers": {
                'k:{"name":"tensorflow"}': {
                    ".": {},
                    "f:env": {".": {}, 'k:{"name":"TF_CONFIG"}': {".": {}, "f:name": {}, "f:value": {}}},
                    "f:image": {},
                    "f:imagePullPolicy": {},
                    "f:name": {},
                    "f:ports": {
                        ".": {},
                        'k:{"containerPort":2222,"protocol":"TCP"}': {
                            ".": {},
                            "f:containerPort": {},
                            "f:name": {},
                            "f:protocol": {},
                        },
                    },
                    "f:resources": {},
                    "f:terminationMessagePath": {},
                    "f:terminationMessagePolicy": {},
                }
            },
            # Defaults are owned (they are set while decoding); what admission sets later is not:
            # no serviceAccountName, priority or preemptionPolicy, and no status (PrepareForCreate).
            "f:dnsPolicy": {},
            "f:enableServiceLinks": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
            "f:securityContext": {},
            "f:terminationGracePeriodSeconds": {},
        },
    }
    assert list(entry["fieldsV1"]["f:spec"]) == sorted(entry["fieldsV1"]["f:spec"])


def test_status_writes_get_their_own_entry_and_leave_the_creators_alone(store: Store, clock: FakeClock) -> None:
    created = store.create("pods", NS, worker_pod(), field_manager="tfjob-controller")
    clock.now += 1
    store.patch(
        "pods",
        NS,
        "w-0",
        "merge",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
        subresource="status",
        field_manager="kubelet",
    )
    pod = store.patch(
        "pods",
        NS,
        "w-0",
        "merge",
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"}]
            }
        },
        subresource="status",
        field_manager="kubelet",
    )
    assert fields(pod, "tfjob-controller") == fields(created, "tfjob-controller")
    assert fields(pod, "kubelet", subresource="status") == {
        "f:status": {
            "f:conditions": {
                ".": {},
                'k:{"type":"ContainersReady"}': {".": {}, "f:status": {}, "f:type": {}},
                'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}},
            },
            "f:phase": {},
        }
    }
    assert [e.get("subresource", "") for e in pod["metadata"]["managedFields"]] == ["", "status"]


def test_an_update_takes_the_fields_it_changes_from_other_managers(store: Store, clock: FakeClock) -> None:
    store.create("pods", NS, worker_pod(), field_manager="creator")
    clock.now += 60
    pod = store.patch(
        "pods",
        NS,
        "w-0",
        "merge",
        {"metadata": {"labels": {"replica-type": "ps", "extra": "1"}}},
        field_manager="editor",
    )
    assert fields(pod, "editor") == {"f:metadata": {"f:labels": {"f:extra": {}, "f:replica-type": {}}}}
    # The creator still owns the labels map it created, not the label it no longer set.
    assert fields(pod, "creator")["f:metadata"] == {"f:labels": {}}
    assert entries(pod)[("editor", "Update", "")]["time"] == "2023-11-14T22:14:20Z"
    assert entries(pod)[("creator", "Update", "")]["time"] == NOW


def test_removed_fields_leave_every_entry_and_empty_entries_are_dropped(store: Store) -> None:
    create_c(store, "alice")
    store.patch("configmaps", NS, "c", "merge", {"data": {"b": "2"}}, field_manager="bob")
    cm = store.patch("configmaps", NS, "c", "merge", {"data": {"b": None}}, field_manager="carol")
    assert set(entries(cm)) == {("alice", "Update", "")}  # bob owned only b; carol only removed
    cm = store.patch("configmaps", NS, "c", "merge", {"data": None}, field_manager="carol")
    assert "managedFields" not in cm["metadata"]


def test_a_no_op_write_keeps_the_entries_and_the_resource_version(store: Store, clock: FakeClock) -> None:
    created = store.create("pods", NS, worker_pod(), field_manager="creator")
    clock.now += 60
    again = store.patch(
        "pods", NS, "w-0", "merge", {"metadata": {"labels": {"replica-type": "worker"}}}, field_manager="someone-else"
    )
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert again["metadata"]["managedFields"] == created["metadata"]["managedFields"]


def test_custom_resources_own_their_new_spec_node_and_defaults(store: Store) -> None:
    store.create("customresourcedefinitions.apiextensions.k8s.io", None, widget_crd())
    widget = store.create(
        "widgets.example.com",
        NS,
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"replicas": 2}},
        field_manager="kubectl-client-side-apply",
    )
    # A custom resource has no Go zero value: spec is a new node, so it is a member (".").
    assert fields(widget, "kubectl-client-side-apply") == {
        "f:spec": {".": {}, "f:color": {}, "f:maxReplicas": {}, "f:replicas": {}}
    }
    scaled = store.update(
        "widgets.example.com",
        NS,
        "w",
        {"apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": {"name": "w"}, "spec": {"replicas": 5}},
        subresource="scale",
        field_manager="hpa",
    )
    widget = store.get("widgets.example.com", NS, "w")
    assert scaled["spec"]["replicas"] == 5
    assert fields(widget, "hpa", subresource="scale") == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in fields(widget, "kubectl-client-side-apply")["f:spec"]


def test_update_managers_are_capped_at_ten_with_the_oldest_merged(store: Store, clock: FakeClock) -> None:
    store.create(
        "configmaps",
        NS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"base": "v"}},
        field_manager="creator",
    )
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


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        pytest.param(None, "kept", id="absent"),
        pytest.param([], "reset", id="empty-list-resets"),
        pytest.param(
            [{"operation": "Destroy", "fieldsType": "FieldsV1", "fieldsV1": {}}],
            "kept",
            id="invalid-falls-back-to-stored",
        ),
        pytest.param([{}], "reset", id="single-empty-entry-resets"),
        pytest.param([{"fieldsV1": {}}], "kept", id="an-entry-with-fields-is-no-reset"),
        pytest.param(
            [{"manager": "x", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}],
            "kept",
            id="no-api-version-falls-back-to-stored",
        ),
        pytest.param(
            [
                {
                    "manager": "mine",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {"f:a": {}}},
                }
            ],
            "replaced",
            id="valid-list-is-taken",
        ),
    ],
)
def test_managed_fields_sent_in_a_body(store: Store, sent: list | None, expected: str) -> None:
    created = create_c(store, "creator")
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
    body = create_c(store, "creator")
    body["metadata"]["managedFields"] = [
        {
            "manager": "later",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2023-11-14T22:14:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {".": {}}}},
        },
        {
            "manager": "earlier",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2023-11-14T22:13:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {},
        },
    ]
    cm = store.update("configmaps", NS, "c", body, field_manager="editor")
    # Re-encoded: a lone "." is a plain member, the entry without fields is gone, order is by time.
    assert [(e["manager"], e["fieldsV1"]) for e in cm["metadata"]["managedFields"]] == [
        ("later", {"f:data": {"f:a": {}}})
    ]


# --------------------------------------------------------------------------------------------- apply

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}


def apply(store: Store, body: dict, manager: str, force: bool = False) -> dict:
    return store.patch("configmaps", NS, "c", "apply", body, field_manager=manager, force=force)


def test_apply_owns_exactly_the_applied_fields_and_reapplying_is_a_no_op(store: Store, clock: FakeClock) -> None:
    first = apply(store, CM, "alice")
    assert first["metadata"]["managedFields"] == [
        {
            "manager": "alice",
            "operation": "Apply",
            "apiVersion": "v1",
            "time": NOW,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}},
        }
    ]
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
        {"reason": "FieldManagerConflict", "message": 'conflict with "alice"', "field": ".data.a"}
    ]
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
        store.patch(
            "pods",
            NS,
            "w-0",
            "apply",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "w-0"},
                "spec": {"containers": [{"name": "tensorflow", "image": "tf:2.16"}]},
            },
            field_manager="upgrader",
        )
    assert caught.value.message == (
        'Apply failed with 1 conflict: conflict with "tfjob-controller" using v1: '
        '.spec.containers[name="tensorflow"].image'
    )


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
    store.create(
        "configmaps",
        NS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"z": "1"}},
        field_manager="zed",
    )
    clock.now += 1
    cm = apply(store, CM, "alice")
    assert [(e["manager"], e["operation"]) for e in cm["metadata"]["managedFields"]] == [
        ("alice", "Apply"),
        ("zed", "Update"),
    ]


SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "s"},
    "spec": {
        "selector": {"app": "x"},
        "ports": [{"name": "a", "port": 80, "targetPort": 8080}, {"name": "b", "port": 81}],
    },
}


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
    assert caught.value.message == (
        'Apply failed with 1 conflict: conflict with "alice": .spec.ports[port=80,protocol="TCP"].targetPort'
    )


def test_an_applier_dropping_a_list_item_removes_the_whole_item(store: Store) -> None:
    apply_service(store, SERVICE["spec"]["ports"], "alice")
    svc = apply_service(store, [{"name": "a", "port": 80, "targetPort": 8080}], "alice")
    assert [p["port"] for p in svc["spec"]["ports"]] == [80]


def test_a_dropped_item_added_after_creation_is_removed_and_leaves_no_stale_owner(store: Store) -> None:
    first = [{"name": "a", "port": 80}]
    apply_service(store, first, "alice")
    apply_service(store, first + [{"name": "b", "port": 81}], "alice")  # stored without its default protocol
    store.patch(
        "services", NS, "s", "strategic", {"spec": {"ports": [{"port": 81, "targetPort": 9999}]}}, field_manager="bob"
    )
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
        apply(
            store,
            {**CM, "metadata": {"name": "c", "labels": {"z": "2"}}, "data": {"b": "9", "a": "9", "c": "9"}},
            "bob",
        )
    assert caught.value.message == (
        'Apply failed with 4 conflicts: conflicts with "alice":\n- .data.a\n- .data.b\n- .metadata.labels.z\n'
        'conflicts with "editor" using v1:\n- .data.c'
    )
    assert [c["field"] for c in caught.value.status()["details"]["causes"]] == [
        ".data.a",
        ".data.b",
        ".metadata.labels.z",
        ".data.c",
    ]


def test_the_first_apply_to_an_untracked_object_conflicts_with_before_first_apply(store: Store) -> None:
    body = create_c(store, "creator")
    body["metadata"]["managedFields"] = [{}]
    store.update("configmaps", NS, "c", body, field_manager="resetter")
    with pytest.raises(ApiError) as caught:
        apply(store, {**CM, "data": {"a": "9"}}, "alice")
    assert caught.value.message == (
        'Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.a'
    )


def test_emptying_a_map_removes_its_fields_and_gives_the_writer_nothing(store: Store) -> None:
    store.create("pods", NS, worker_pod(), field_manager="creator")
    pod = store.patch(
        "pods", NS, "w-0", "json", [{"op": "replace", "path": "/metadata/labels", "value": {}}], field_manager="editor"
    )
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
    cm = create_c(store, None)
    assert [e["manager"] for e in cm["metadata"]["managedFields"]] == ["unknown"]


# ----------------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("f:spec", "f:replicas"), ".spec.replicas"),
        (("f:spec", "f:containers", 'k:{"name":"tf"}', "f:image"), '.spec.containers[name="tf"].image'),
        (("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}'), '.spec.ports[port=80,protocol="TCP"]'),
        (("f:metadata", "f:finalizers", 'v:"a/b"'), '.metadata.finalizers[="a/b"]'),
    ],
)
def test_field_path_strings_match_the_apiservers(path: tuple[str, ...], expected: str) -> None:
    assert fieldmanager.field_path_string(path) == expected


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("nope", "metadata.managedFields"),
        (
            [{"operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV2", "fieldsV1": {}}],
            "metadata.managedFields[0].fieldsType",
        ),
        (
            [{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"x:bad": {}}}],
            "metadata.managedFields[0].fieldsV1",
        ),
        (
            [{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "manager": 7}],
            "metadata.managedFields[0].manager",
        ),
        ([{"operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}}], "metadata.managedFields[0].apiVersion"),
        (
            [{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"k:notjson": {}}}],
            "metadata.managedFields[0].fieldsV1",
        ),
        (
            [{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"k:[1]": {}}}],
            "metadata.managedFields[0].fieldsV1",
        ),
        (
            [{"operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"i:x": {}}}],
            "metadata.managedFields[0].fieldsV1",
        ),
    ],
)
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
        "kubectl-create",
        "Update",
        {"f:data": {".": {}, "f:a": {}}},
    )
    rc, _out, err = await kubectl("label", "configmap", "c", "team=ml")
    assert rc == 0, err
    rc, out, err = await kubectl("get", "configmap", "c", "-o", "json", "--show-managed-fields")
    assert rc == 0, err
    managers = {(e["manager"], e["operation"]) for e in json.loads(out)["metadata"]["managedFields"]}
    assert managers == {("kubectl-create", "Update"), ("kubectl-label", "Update")}


async def test_kubectl_server_side_apply_conflict_and_force(kubectl: Kubectl) -> None:
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: '{}'\n"
    rc, out, err = await kubectl("apply", "--server-side", "--field-manager=alice", "-f", "-", input=manifest.format(1))
    assert (rc, out.strip()) == (0, "configmap/c serverside-applied"), err
    rc, _out, err = await kubectl("apply", "--server-side", "--field-manager=bob", "-f", "-", input=manifest.format(2))
    assert rc == 1
    assert 'Apply failed with 1 conflict: conflict with "alice": .data.a' in err
    rc, _out, err = await kubectl(
        "apply", "--server-side", "--field-manager=bob", "--force-conflicts", "-f", "-", input=manifest.format(2)
    )
    assert rc == 0, err
    rc, out, err = await kubectl("get", "configmap", "c", "-o", "json", "--show-managed-fields")
    doc = json.loads(out)
    assert doc["data"] == {"a": "2"}
    assert [(e["manager"], e["operation"]) for e in doc["metadata"]["managedFields"]] == [("bob", "Apply")]


# ------------------------------------------------------------------- the one-walk diff against the path-set model
# update_ownership builds the field set of a write in its wire form in one walk and merges it into the
# writer's entry node by node. The model below is the straightforward form it replaced (and that the
# semantics are written in): the changed fields as a list of paths, each checked against and inserted into
# the entries from the root. Both must give the same entries, down to the order of keys on the wire.


def _model_compare(old: Any, new: Any, schema: dict, path: tuple, present: bool, changed: list, removed: list) -> None:
    if fieldmanager._granular_map(new, schema):
        if type(old) is not dict:
            _model_node_is_new(old, path, present, changed, removed)
            old = {}
        top, meta = not path, path == ("f:metadata",)
        for key, value in new.items():
            if (top and key in fieldmanager._STRIPPED_TOP) or (meta and key in fieldmanager._STRIPPED_META):
                continue
            if key in old and old[key] == value and type(old[key]) is type(value):
                continue
            _model_compare(
                old.get(key),
                value,
                fieldmanager._child(schema, key),
                path + ("f:" + key,),
                key in old,
                changed,
                removed,
            )
        removed.extend(
            path + ("f:" + key,)
            for key in old
            if key not in new
            and not ((top and key in fieldmanager._STRIPPED_TOP) or (meta and key in fieldmanager._STRIPPED_META))
        )
        return
    items = fieldmanager._keyed_items(new, schema) if type(new) is list and new else None
    old_items = (fieldmanager._keyed_items(old, schema) if type(old) is list else {}) if items is not None else None
    if items is not None and old_items is not None:
        if type(old) is not list:
            _model_node_is_new(old, path, present, changed, removed)
        item_schema = schema.get("items") or {}
        for pe, item in items.items():
            before = old_items.get(pe)
            if pe in old_items and before == item:
                continue
            if pe not in old_items:
                changed.append(path + (pe,))
            if type(item) is dict and item_schema.get("x-kubernetes-map-type") != "atomic":
                _model_compare(
                    before if type(before) is dict else {}, item, item_schema, path + (pe,), True, changed, removed
                )
            elif before is not None:
                changed.append(path + (pe,))
        removed.extend(path + (pe,) for pe in old_items if pe not in items)
        return
    if present and type(old) in (dict, list) and old:
        children = fieldmanager._children(old, schema)
        if type(new) is type(old) and not new and children is not None:
            removed.extend(path + (pe,) for pe in children)
            return
        removed.append(path)
        if new is None and children is not None:
            return
    changed.append(path)


def _model_node_is_new(old: Any, path: tuple, present: bool, changed: list, removed: list) -> None:
    if not present:
        if path and path != ("f:metadata",):
            changed.append(path)
    elif old is not None:
        removed.append(path)
        changed.append(path)


def _model_is_member(fields: dict, path: tuple) -> bool:
    found = fieldmanager._wire_find(fields, path)
    return found is not None and (not found or "." in found)


def _model_update(
    schema: dict, before: dict, after: dict, managed: Any, manager: str, subresource: str, api_version: str, now: str
) -> Any:
    changed: list = []
    removed: list = []
    _model_compare(before, after, schema, (), True, changed, removed)
    if not changed and not removed:
        return managed
    identity = (manager, "Update", subresource, api_version)
    out, mine, mine_fields = [], None, {}
    for raw in managed or ():
        fields = raw.get("fieldsV1") or {}
        if fieldmanager._wire_identity(raw) == identity:
            mine, mine_fields = raw, fieldmanager._wire_copy(fields)
            continue
        hit_removed = [p for p in removed if fieldmanager._wire_find(fields, p) is not None]
        hit_changed = [p for p in changed if _model_is_member(fields, p)]
        if not hit_removed and not hit_changed:
            out.append(raw)
            continue
        fields = fieldmanager._wire_copy(fields)
        for path in hit_removed:
            fieldmanager._wire_remove(fields, path, subtree=True)
        for path in hit_changed:
            fieldmanager._wire_remove(fields, path, subtree=False)
        if fields:
            out.append({**raw, "fieldsV1": fields})
    for path in removed:
        fieldmanager._wire_remove(mine_fields, path, subtree=True)
    fieldmanager._wire_insert_all(mine_fields, changed)
    if mine_fields:
        if changed or mine is None:
            out.append(fieldmanager.Entry(manager, "Update", api_version, now, subresource, mine_fields).encode())
        else:
            out.append({**mine, "fieldsV1": mine_fields})
    if sum(1 for raw in out if raw.get("operation") == "Update") > fieldmanager.MAX_UPDATE_MANAGERS:
        entries = fieldmanager._cap_update_managers(fieldmanager.decode_entries(out), now)
        return fieldmanager.encode_entries(entries)
    out.sort(key=fieldmanager._wire_order)
    return out


_KEYS = st.sampled_from(["a", "b", "name", "type"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(0, 2), st.sampled_from(["x", "y"]))
# Any JSON, from a small vocabulary so that successive versions of an object collide: a field turns from
# a map into a list or a scalar, null, empty; a keyed list loses its keys (atomic) and gets them back.
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=8,
)


def _maybe(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(strategy, strategy, strategy, _JSON)  # mostly well-formed, sometimes anything


def _fields(required: dict, optional: dict) -> st.SearchStrategy:
    return st.fixed_dictionaries(
        {k: v for k, v in required.items()}, optional={k: _maybe(v) for k, v in optional.items()}
    )


_CONTAINER = _fields(
    {"name": st.sampled_from(["main", "side"])},
    {
        "image": st.sampled_from(["tf:1", "tf:2"]),
        "ports": st.lists(
            _fields(
                {"containerPort": st.sampled_from([80, 81])},
                {"protocol": st.sampled_from(["TCP", "UDP"]), "name": st.sampled_from(["p", "q"])},
            ),
            max_size=3,
        ),
        "env": st.lists(_fields({}, {"name": st.sampled_from(["A", "B"]), "value": _SCALARS}), max_size=3),
        "resources": _JSON,
    },
)
_META = _fields(
    {"name": st.just("o")},
    {
        "labels": st.dictionaries(_KEYS, st.sampled_from(["x", "y"]), max_size=3),
        "annotations": st.dictionaries(_KEYS, st.sampled_from(["x", "y"]), max_size=2),
        "finalizers": st.lists(st.sampled_from(["f/1", "f/2", "f/3"]), max_size=3),
        "ownerReferences": st.lists(
            _fields({"uid": st.sampled_from(["u1", "u2"])}, {"name": st.just("j")}), max_size=2
        ),
        "resourceVersion": st.sampled_from(["1", "2"]),
    },
)
_CONDITIONS = st.lists(
    _fields(
        {}, {"type": st.sampled_from(["Ready", "Created"]), "status": _SCALARS, "reason": st.sampled_from(["r", "s"])}
    ),
    max_size=3,
)
_POD = _fields(
    {"apiVersion": st.just("v1"), "kind": st.just("Pod"), "metadata": _META},
    {
        "spec": _fields(
            {},
            {
                "containers": st.lists(_CONTAINER, max_size=3),
                "nodeSelector": st.dictionaries(_KEYS, _SCALARS),
                "restartPolicy": st.sampled_from(["Never", "Always"]),
                "extra": _JSON,
            },
        ),
        "status": _fields(
            {},
            {
                "conditions": _CONDITIONS,
                "phase": st.sampled_from(["Pending", "Running"]),
                "podIPs": st.lists(_fields({}, {"ip": st.sampled_from(["10.0.0.1", "10.0.0.2"])}), max_size=2),
                "containerStatuses": st.lists(_JSON, max_size=2),
            },
        ),
    },
)
_SERVICE = _fields(
    {"apiVersion": st.just("v1"), "kind": st.just("Service"), "metadata": _META},
    {
        "spec": _fields(
            {},
            {
                "ports": st.lists(
                    _fields(
                        {"port": st.sampled_from([80, 81])},
                        {"protocol": st.sampled_from(["TCP", "UDP"]), "targetPort": _SCALARS},
                    ),
                    max_size=3,
                ),
                "selector": st.dictionaries(_KEYS, st.sampled_from(["x", "y"]), max_size=2),
                "clusterIP": st.sampled_from(["None", "10.0.0.9"]),
            },
        ),
        "status": _fields({}, {"conditions": _CONDITIONS}),
    },
)
_REPLICA = _fields(
    {},
    {
        "replicas": st.integers(0, 3),
        "restartPolicy": st.sampled_from(["ExitCode", "Never"]),
        "template": _fields(
            {},
            {
                "metadata": _fields({}, {"annotations": st.dictionaries(_KEYS, _SCALARS)}),
                "spec": _fields({}, {"containers": st.lists(_CONTAINER, max_size=2)}),
            },
        ),
    },
)
_TFJOB = _fields(
    {"apiVersion": st.just("kubeflow.org/v1"), "kind": st.just("TFJob"), "metadata": _META},
    {
        "spec": _fields(
            {},
            {
                "enableDynamicWorker": st.booleans(),
                "tfReplicaSpecs": st.dictionaries(st.sampled_from(["PS", "Worker"]), _REPLICA, max_size=2),
                "runPolicy": _fields({}, {"suspend": st.booleans()}),
            },
        ),
        "status": _fields(
            {},
            {
                "conditions": _CONDITIONS,
                "startTime": st.sampled_from(["t1", "t2"]),
                "replicaStatuses": st.dictionaries(st.sampled_from(["PS", "Worker"]), _JSON, max_size=2),
            },
        ),
    },
)


@functools.cache
def _schema(kind: str, custom: bool) -> dict:
    crd_schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"] if custom else None
    return fieldmanager.root_schema(kind, custom, crd_schema)


_KINDS = {"Pod": (_POD, False), "Service": (_SERVICE, False), "TFJob": (_TFJOB, True)}
_FUZZ = settings(
    derandomize=True,
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# A field set a client made up: managedFields may be edited, so an entry may claim fields the object does
# not have, own a map's fields but not the map, and so on.
_PATH_ELEMENTS = st.sampled_from(
    [
        "f:spec",
        "f:status",
        "f:metadata",
        "f:labels",
        "f:extra",
        "f:a",
        "f:b",
        "f:containers",
        'k:{"name":"main"}',
        "f:image",
        "f:restartPolicy",
        "f:phase",
        "f:enableDynamicWorker",
        "f:clusterIP",
    ]
)
_MADE_UP_FIELDS = st.recursive(
    st.just({}),
    lambda inner: st.builds(
        lambda member, children: {**({".": {}} if member else {}), **children},
        st.booleans(),
        st.dictionaries(_PATH_ELEMENTS, inner, min_size=1, max_size=3),
    ),
    max_leaves=12,
)


def _shuffled(node: dict, rnd: Any) -> dict:
    # A client may send its keys in any order (the "." member is put first on decoding).
    keys = [k for k in node if k != "."]
    rnd.shuffle(keys)
    out = {".": {}} if "." in node else {}
    out.update((k, _shuffled(node[k], rnd)) for k in keys)
    return out


@_FUZZ
@given(data=st.data())
def test_update_ownership_matches_the_path_set_model(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(sorted(_KINDS)))
    strategy, custom = _KINDS[kind]
    schema = _schema(kind, custom)
    before = fieldmanager.zero_object(kind, custom)
    managed: Any = None
    for step in range(data.draw(st.integers(1, 6))):
        after = data.draw(strategy)
        manager = data.draw(st.sampled_from(["controller", "kubelet", "kubectl", "hpa"]))
        subresource = data.draw(st.sampled_from(["", "status"]))
        version = data.draw(st.sampled_from(["v1", "v2"]))
        if managed and data.draw(st.booleans()):
            rnd = data.draw(st.randoms(use_true_random=False))
            managed = [{**raw, "fieldsV1": _shuffled(raw["fieldsV1"], rnd)} for raw in managed]
        if data.draw(st.integers(0, 3)) == 0:
            made_up = {
                "manager": data.draw(st.sampled_from([manager, "kubelet"])),
                "operation": "Update",
                "apiVersion": version,
                "time": "2023-11-14T22:13:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": data.draw(_MADE_UP_FIELDS),
                **({"subresource": subresource} if subresource else {}),
            }
            sent = [
                raw for raw in managed or () if fieldmanager._wire_identity(raw) != fieldmanager._wire_identity(made_up)
            ] + [made_up]
            assert not fieldmanager.validate_entries(sent)
            managed = fieldmanager.encode_entries(fieldmanager.decode_entries(sent))  # as the store takes a body's
        now = f"2023-11-14T22:13:{20 + step}Z"
        want = _model_update(schema, before, after, managed, manager, subresource, version, now)
        got = fieldmanager.update_ownership(schema, before, after, managed, manager, subresource, version, now)
        assert orjson.dumps(got) == orjson.dumps(want)  # the order of keys too
        assert (got is managed) == (want is managed)
        managed, before = got, after


@_FUZZ
@given(data=st.data())
def test_the_fields_an_apply_conflicts_on_match_the_path_set_model(data: st.DataObject) -> None:
    strategy, _ = _KINDS["Pod"]
    schema = fieldmanager.root_schema("Pod", False, None)
    old, new, owned = data.draw(strategy), data.draw(strategy), data.draw(strategy)
    # Someone's field set: what a create of ``owned`` records.
    theirs = fieldmanager._diff(fieldmanager.zero_object("Pod", False), owned, schema, (), True, []) or {}
    changed: list = []
    removed: list = []
    _model_compare(old, new, schema, (), True, changed, removed)
    got_removed: list = []
    diff = fieldmanager._diff(old, new, schema, (), True, got_removed)
    assert got_removed == removed
    assert orjson.dumps(diff or {}) == orjson.dumps(fieldmanager._wire_build(changed))
    assert (diff is None) == (not changed)
    hits = fieldmanager._wire_common_members(theirs, diff) if diff else []
    assert sorted(hits) == sorted({p for p in changed if _model_is_member(theirs, p)})


def test_a_changed_field_an_edited_entry_owned_only_below_becomes_a_member_listed_first() -> None:
    # A client-edited entry may own fields under what is a scalar on the object; the writer changing the
    # scalar owns it as a member, and on the wire "." comes before the node's children, as the model does.
    schema = fieldmanager.root_schema("Pod", False, None)
    before = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "o"}, "spec": {"restartPolicy": "Never"}}
    after = {**before, "spec": {"restartPolicy": "Always"}}
    managed = [
        {
            "manager": "m",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2023-11-14T22:13:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:restartPolicy": {"f:z": {}, "f:a": {}}}},
        }
    ]
    [entry] = fieldmanager.update_ownership(schema, before, after, managed, "m", "", "v1", NOW)
    assert orjson.dumps(entry["fieldsV1"]) == orjson.dumps(
        {"f:spec": {"f:restartPolicy": {".": {}, "f:z": {}, "f:a": {}}}}
    )
    assert entry == _model_update(schema, before, after, managed, "m", "", "v1", NOW)[0]
