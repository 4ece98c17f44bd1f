"""PATCH engines: results and error codes/messages as kube-apiserver produces them.

Ordering expectations for strategic merge lists come from apimachinery's own test vectors
(``set elements order ... with server-only items``, ``add an item ... and preserve order``),
re-expressed on real Pod fields.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tfjob_sim.errors import ApiError
from tfjob_sim.patch import (
    MAX_JSON_PATCH_OPERATIONS,
    STRATEGIC_MERGE_KINDS,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)

GENERIC_422 = "the server rejected our request due to an error in our request"


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "tf-worker-0",
            "namespace": "ml",
            "resourceVersion": "41",
            "labels": {"job": "mnist", "role": "worker"},
            "finalizers": ["a.example.com/f", "b.example.com/f"],
            "ownerReferences": [{"uid": "u1", "name": "mnist", "kind": "TFJob", "controller": True}],
        },
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "image": "tf:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 2222, "name": "tfjob-port"}],
                    "volumeMounts": [{"mountPath": "/data", "name": "data"}],
                },
                {"name": "sidecar", "image": "side:1"},
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "restartPolicy": "Never",
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}],
        },
    }


def _error(call: Any, *args: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args)
    return caught.value


# ------------------------------------------------------------------------------------------
# JSON patch
# ------------------------------------------------------------------------------------------

JSON_PATCH_CASES = [
    (
        "add object member",
        [{"op": "add", "path": "/metadata/labels/tier", "value": "gpu"}],
        lambda d: d["metadata"]["labels"].update(tier="gpu"),
    ),
    (
        "add overwrites an existing member",
        [{"op": "add", "path": "/metadata/labels/job", "value": "other"}],
        lambda d: d["metadata"]["labels"].update(job="other"),
    ),
    (
        "add inserts at an array index",
        [{"op": "add", "path": "/metadata/finalizers/1", "value": "x"}],
        lambda d: d["metadata"]["finalizers"].insert(1, "x"),
    ),
    (
        "add appends with -",
        [{"op": "add", "path": "/metadata/finalizers/-", "value": "x"}],
        lambda d: d["metadata"]["finalizers"].append("x"),
    ),
    (
        "add at index == length appends",
        [{"op": "add", "path": "/metadata/finalizers/2", "value": "x"}],
        lambda d: d["metadata"]["finalizers"].append("x"),
    ),
    (
        "add with a negative index counts from the end",
        [{"op": "add", "path": "/metadata/finalizers/-1", "value": "x"}],
        lambda d: d["metadata"]["finalizers"].append("x"),
    ),
    (
        "add without value adds null",
        [{"op": "add", "path": "/spec/nodeName"}],
        lambda d: d["spec"].update(nodeName=None),
    ),
    (
        "remove object member",
        [{"op": "remove", "path": "/metadata/labels/role"}],
        lambda d: d["metadata"]["labels"].pop("role"),
    ),
    (
        "remove array element",
        [{"op": "remove", "path": "/metadata/finalizers/0"}],
        lambda d: d["metadata"]["finalizers"].pop(0),
    ),
    (
        "remove last element by negative index",
        [{"op": "remove", "path": "/metadata/finalizers/-1"}],
        lambda d: d["metadata"]["finalizers"].pop(),
    ),
    (
        "replace object member",
        [{"op": "replace", "path": "/status/phase", "value": "Succeeded"}],
        lambda d: d["status"].update(phase="Succeeded"),
    ),
    (
        "replace of a missing object member adds it (json-patch v4, as the server)",
        [{"op": "replace", "path": "/status/reason", "value": "Evicted"}],
        lambda d: d["status"].update(reason="Evicted"),
    ),
    (
        "replace array element",
        [{"op": "replace", "path": "/spec/containers/1/image", "value": "side:2"}],
        lambda d: d["spec"]["containers"][1].update(image="side:2"),
    ),
    (
        "move",
        [{"op": "move", "from": "/metadata/labels/role", "path": "/metadata/labels/kind"}],
        lambda d: d["metadata"]["labels"].update(kind=d["metadata"]["labels"].pop("role")),
    ),
    (
        "move within an array",
        [{"op": "move", "from": "/metadata/finalizers/0", "path": "/metadata/finalizers/-"}],
        lambda d: d["metadata"]["finalizers"].append(d["metadata"]["finalizers"].pop(0)),
    ),
    (
        "copy",
        [{"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"}],
        lambda d: d["metadata"].update(annotations=dict(d["metadata"]["labels"])),
    ),
    (
        "copy from a missing member inserts null (library quirk)",
        [{"op": "copy", "from": "/metadata/nothing", "path": "/metadata/copied"}],
        lambda d: d["metadata"].update(copied=None),
    ),
    (
        "test then write: optimistic locking on resourceVersion",
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "41"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "tf:2"},
        ],
        lambda d: d["spec"]["containers"][0].update(image="tf:2"),
    ),
    (
        "test of a whole subtree",
        [{"op": "test", "path": "/metadata/labels", "value": {"role": "worker", "job": "mnist"}}],
        lambda d: None,
    ),
    (
        "test of a missing member against null passes (library quirk)",
        [{"op": "test", "path": "/metadata/missing", "value": None}],
        lambda d: None,
    ),
    (
        "pointer escapes ~1 and ~0",
        [
            {"op": "add", "path": "/metadata/annotations", "value": {}},
            {"op": "add", "path": "/metadata/annotations/example.com~1owner", "value": "x"},
            {"op": "add", "path": "/metadata/annotations/tilde~0key", "value": "y"},
        ],
        lambda d: d["metadata"].update(annotations={"example.com/owner": "x", "tilde~key": "y"}),
    ),
    (
        "replace the whole document",
        [{"op": "replace", "path": "", "value": {"kind": "Pod", "metadata": {"name": "new"}}}],
        lambda d: (d.clear(), d.update(kind="Pod", metadata={"name": "new"})),
    ),
    ("empty patch", [], lambda d: None),
]


@pytest.mark.parametrize(("description", "ops", "edit"), JSON_PATCH_CASES, ids=[c[0] for c in JSON_PATCH_CASES])
def test_json_patch_operations(description: str, ops: list[dict[str, Any]], edit: Any) -> None:
    expected = _pod()
    edit(expected)
    assert json_patch(_pod(), ops) == expected


def test_json_patch_null_body_is_an_empty_patch() -> None:
    assert json_patch(_pod(), None) == _pod()


JSON_PATCH_APPLY_FAILURES = [
    ("failing test", [{"op": "test", "path": "/metadata/resourceVersion", "value": "40"}], "test failed"),
    ("test of a missing member against a value", [{"op": "test", "path": "/metadata/x", "value": "v"}], "test failed"),
    ("test without value on a present member", [{"op": "test", "path": "/status/phase"}], "test failed"),
    (
        "test is type-strict: true is not 1",
        [{"op": "test", "path": "/metadata/ownerReferences/0/controller", "value": 1}],
        "test failed",
    ),
    (
        "test is type-strict: 2222.0 is not 2222",
        [{"op": "test", "path": "/spec/containers/0/ports/0/containerPort", "value": 2222.0}],
        "test failed",
    ),
    (
        "test of a number against a string",
        [{"op": "test", "path": "/spec/containers/0/ports/0/containerPort", "value": "2222"}],
        "test failed",
    ),
    ("remove of a missing member", [{"op": "remove", "path": "/metadata/labels/none"}], "nonexistent key"),
    ("remove past the end", [{"op": "remove", "path": "/metadata/finalizers/2"}], "invalid index"),
    ("replace past the end", [{"op": "replace", "path": "/metadata/finalizers/5", "value": "x"}], "invalid index"),
    ("add beyond length + 1", [{"op": "add", "path": "/metadata/finalizers/3", "value": "x"}], "invalid index"),
    ("add with a non-numeric index", [{"op": "add", "path": "/metadata/finalizers/x", "value": "x"}], "array index"),
    (
        "missing intermediate member",
        [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {}}],
        "missing path",
    ),
    ("path through a scalar", [{"op": "add", "path": "/status/phase/x", "value": 1}], "missing path"),
    ("empty path for add", [{"op": "add", "path": "", "value": {}}], "missing path"),
    ("op missing", [{"path": "/a", "value": 1}], "Unexpected kind: unknown"),
    ("unknown op", [{"op": "merge", "path": "/a", "value": 1}], "Unexpected kind: merge"),
    ("path missing", [{"op": "add", "value": 1}], "decode path"),
    ("path not a string", [{"op": "remove", "path": 3}], "decode path"),
    ("from missing", [{"op": "move", "path": "/a"}], "decode from"),
    ("move from a missing member", [{"op": "move", "from": "/metadata/none", "path": "/x"}], "nonexistent key"),
    ("replace root with a scalar", [{"op": "replace", "path": "", "value": 1}], "object or array"),
    ("null operation", [None], "Unexpected kind: unknown"),
    (
        "failure after earlier successes",
        [{"op": "add", "path": "/a", "value": 1}, {"op": "remove", "path": "/b"}],
        "nonexistent key",
    ),
]


@pytest.mark.parametrize(
    ("description", "ops", "detail"), JSON_PATCH_APPLY_FAILURES, ids=[c[0] for c in JSON_PATCH_APPLY_FAILURES]
)
def test_json_patch_apply_failures_are_the_generic_422(description: str, ops: list[Any], detail: str) -> None:
    error = _error(json_patch, _pod(), ops)
    assert (error.code, error.reason, error.message) == (422, "Invalid", GENERIC_422)
    # The server drops the library's detail; it is kept for logs as the cause.
    assert detail in str(error.__cause__)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"op": "add", "path": "/a", "value": 1},
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        ),
        ("add", "json: cannot unmarshal string into Go value of type jsonpatch.Patch"),
        (7, "json: cannot unmarshal number into Go value of type jsonpatch.Patch"),
        ([1], "json: cannot unmarshal number into Go value of type jsonpatch.Operation"),
        ([["add"]], "json: cannot unmarshal array into Go value of type jsonpatch.Operation"),
    ],
)
def test_json_patch_undecodable_body_is_400(body: Any, message: str) -> None:
    error = _error(json_patch, _pod(), body)
    assert (error.code, error.reason, error.message) == (400, "BadRequest", message)


def test_json_patch_operation_limit_is_413() -> None:
    ops = [{"op": "test", "path": "/kind", "value": "Pod"}] * MAX_JSON_PATCH_OPERATIONS
    assert json_patch(_pod(), ops) == _pod()
    error = _error(json_patch, _pod(), [*ops, ops[0]])
    assert (error.code, error.reason) == (413, "RequestEntityTooLarge")
    assert error.message == (
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    )


def test_json_patch_that_leaves_no_object_is_422_invalid() -> None:
    error = _error(json_patch, _pod(), [{"op": "replace", "path": "", "value": [1, 2]}])
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message.startswith(' "" is invalid: patch: Invalid value: "[1,2]": couldn\'t get version/kind')
    assert error.details is not None and error.details["causes"][0]["field"] == "patch"


def test_json_patch_members_an_operation_does_not_use_are_not_checked() -> None:
    patched = json_patch(_pod(), [{"op": "add", "path": "/spec/nodeName", "value": "n1", "from": 5}])
    assert patched["spec"]["nodeName"] == "n1"


# ------------------------------------------------------------------------------------------
# JSON merge patch
# ------------------------------------------------------------------------------------------

MERGE_PATCH_CASES = [
    ("set a member", {"spec": {"nodeName": "n1"}}, lambda d: d["spec"].update(nodeName="n1")),
    ("null deletes", {"metadata": {"labels": {"role": None}}}, lambda d: d["metadata"]["labels"].pop("role")),
    ("null for a missing member is a no-op", {"metadata": {"absent": None}}, lambda d: None),
    (
        "lists are replaced wholesale",
        {"metadata": {"finalizers": ["z"]}},
        lambda d: d["metadata"].update(finalizers=["z"]),
    ),
    (
        "nested objects merge",
        {"status": {"phase": "Failed", "reason": "OOMKilled"}},
        lambda d: d["status"].update(phase="Failed", reason="OOMKilled"),
    ),
    (
        "nulls inside a new subtree are pruned",
        {"metadata": {"annotations": {"a": "1", "b": None, "n": {"c": None}}}},
        lambda d: d["metadata"].update(annotations={"a": "1", "n": {}}),
    ),
    (
        "nulls inside arrays are kept",
        {"spec": {"args": ["x", None]}},
        lambda d: d["spec"].update(args=["x", None]),
    ),
    (
        "objects inside new arrays lose their null members",
        {"spec": {"hostAliases": [{"ip": "1.1.1.1", "hostnames": None}]}},
        lambda d: d["spec"].update(hostAliases=[{"ip": "1.1.1.1"}]),
    ),
    (
        "an object replaces a scalar",
        {"status": {"phase": {"x": 1, "y": None}}},
        lambda d: d["status"].update(phase={"x": 1}),
    ),
    ("a scalar replaces an object", {"spec": "flat"}, lambda d: d.update(spec="flat")),
    ("empty patch", {}, lambda d: None),
]


@pytest.mark.parametrize(("description", "patch", "edit"), MERGE_PATCH_CASES, ids=[c[0] for c in MERGE_PATCH_CASES])
def test_merge_patch(description: str, patch: dict[str, Any], edit: Any) -> None:
    expected = _pod()
    edit(expected)
    assert merge_patch(_pod(), patch) == expected


@pytest.mark.parametrize(("description", "patch", "edit"), MERGE_PATCH_CASES, ids=[c[0] for c in MERGE_PATCH_CASES])
def test_merge_patch_sharing_the_document_gives_the_same_result_and_changes_no_input(
    description: str, patch: dict[str, Any], edit: Any
) -> None:
    # The store patches a stored pod's status this way: the stored version must stay as it was,
    # and the request body must not end up inside the new version.
    expected = _pod()
    edit(expected)
    doc, body = _pod(), copy.deepcopy(patch)
    result = merge_patch(doc, body, share=True)
    assert result == expected
    assert doc == _pod() and body == patch
    for key, value in result.items():
        if key in patch:
            assert value is not doc.get(key) or not isinstance(value, dict)
        else:
            assert value is doc[key]  # untouched subtrees are not copied


@pytest.mark.parametrize("body", [None, "text", 3, True])
def test_merge_patch_null_or_scalar_body_is_400(body: Any) -> None:
    error = _error(merge_patch, _pod(), body)
    assert (error.code, error.reason, error.message) == (400, "BadRequest", "Invalid JSON Patch")


def test_merge_patch_array_body_is_422_invalid() -> None:
    error = _error(merge_patch, _pod(), [{"a": None}])
    assert (error.code, error.reason) == (422, "Invalid")
    assert error.message.startswith(' "" is invalid: patch: Invalid value: "[{}]"')


# ------------------------------------------------------------------------------------------
# Strategic merge patch
# ------------------------------------------------------------------------------------------


def _names(items: list[dict[str, Any]], key: str = "name") -> list[Any]:
    return [item[key] for item in items]


def test_smp_updates_a_container_in_place_by_name() -> None:
    patched = strategic_merge_patch(_pod(), {"spec": {"containers": [{"name": "sidecar", "image": "side:2"}]}}, "Pod")
    assert _names(patched["spec"]["containers"]) == ["tensorflow", "sidecar"]
    assert patched["spec"]["containers"][1] == {"name": "sidecar", "image": "side:2"}
    assert patched["spec"]["containers"][0] == _pod()["spec"]["containers"][0]


def test_smp_new_list_items_go_first_without_an_order_directive() -> None:
    patched = strategic_merge_patch(_pod(), {"spec": {"containers": [{"name": "init", "image": "i"}]}}, "Pod")
    assert _names(patched["spec"]["containers"]) == ["init", "tensorflow", "sidecar"]


def test_smp_nested_merge_lists_env_ports_mounts() -> None:
    patch = {
        "spec": {
            "containers": [
                {
                    "name": "tensorflow",
                    "env": [
                        {"name": "B", "value": "20"},
                        {"name": "C", "value": "3"},
                        {"name": "A", "$patch": "delete"},
                    ],
                    "ports": [{"containerPort": 2222, "protocol": "TCP"}],
                    "volumeMounts": [{"mountPath": "/ckpt", "name": "ckpt"}],
                }
            ]
        }
    }
    container = strategic_merge_patch(_pod(), patch, "Pod")["spec"]["containers"][0]
    assert container["env"] == [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]
    assert container["ports"] == [{"containerPort": 2222, "name": "tfjob-port", "protocol": "TCP"}]
    assert _names(container["volumeMounts"], "mountPath") == ["/ckpt", "/data"]


def test_smp_delete_and_replace_directives_in_lists() -> None:
    deleted = strategic_merge_patch(_pod(), {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}, "Pod")
    assert _names(deleted["spec"]["containers"]) == ["tensorflow"]
    missing = strategic_merge_patch(_pod(), {"spec": {"containers": [{"name": "nope", "$patch": "delete"}]}}, "Pod")
    assert _names(missing["spec"]["containers"]) == ["tensorflow", "sidecar"]
    replaced = strategic_merge_patch(
        _pod(), {"spec": {"containers": [{"name": "only", "image": "o"}, {"$patch": "replace"}]}}, "Pod"
    )
    assert replaced["spec"]["containers"] == [{"name": "only", "image": "o"}]
    emptied = strategic_merge_patch(_pod(), {"spec": {"volumes": [{"$patch": "replace"}]}}, "Pod")
    assert emptied["spec"]["volumes"] == []


def test_smp_lists_without_strategy_are_replaced() -> None:
    patched = strategic_merge_patch(_pod(), {"spec": {"tolerations": [{"key": "spot", "operator": "Exists"}]}}, "Pod")
    assert patched["spec"]["tolerations"] == [{"key": "spot", "operator": "Exists"}]


def test_smp_map_directives_and_nulls() -> None:
    replaced = strategic_merge_patch(_pod(), {"metadata": {"labels": {"$patch": "replace", "only": "me"}}}, "Pod")
    assert replaced["metadata"]["labels"] == {"only": "me"}
    deleted = strategic_merge_patch(_pod(), {"status": {"$patch": "delete"}}, "Pod")
    assert deleted["status"] == {}
    nulled = strategic_merge_patch(_pod(), {"metadata": {"labels": {"role": None, "new": "x"}}}, "Pod")
    assert nulled["metadata"]["labels"] == {"job": "mnist", "new": "x"}
    # A new subtree is stored without its nulls and without directive maps.
    added = strategic_merge_patch(
        _pod(),
        {"spec": {"affinity": {"nodeAffinity": None, "podAffinity": {"$patch": "delete"}, "x": {"y": 1}}}},
        "Pod",
    )
    assert added["spec"]["affinity"] == {"x": {"y": 1}}


def test_smp_status_conditions_merge_by_type_for_pods_and_nodes() -> None:
    patched = strategic_merge_patch(_pod(), {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "Pod")
    assert patched["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "Initialized", "status": "True"},
    ]
    node = {
        "kind": "Node",
        "metadata": {"name": "n1"},
        "spec": {"podCIDRs": ["10.0.0.0/24"]},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }
    patch = {
        "spec": {"podCIDRs": ["fd00::/64"]},
        "status": {
            "conditions": [{"type": "MemoryPressure", "status": "False"}],
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.2"}],
        },
    }
    patched_node = strategic_merge_patch(node, patch, "Node")
    assert patched_node["spec"]["podCIDRs"] == ["fd00::/64", "10.0.0.0/24"]
    assert _names(patched_node["status"]["conditions"], "type") == ["MemoryPressure", "Ready"]
    assert patched_node["status"]["addresses"] == [
        {"type": "Hostname", "address": "n1"},
        {"type": "InternalIP", "address": "10.0.0.2"},
    ]


def test_smp_owner_references_merge_by_uid() -> None:
    patch = {"metadata": {"ownerReferences": [{"uid": "u1", "controller": False}, {"uid": "u2", "name": "other"}]}}
    refs = strategic_merge_patch(_pod(), patch, "Pod")["metadata"]["ownerReferences"]
    assert refs == [
        {"uid": "u1", "name": "mnist", "kind": "TFJob", "controller": False},
        {"uid": "u2", "name": "other"},
    ]


def test_smp_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    added = strategic_merge_patch(_pod(), {"metadata": {"finalizers": ["b.example.com/f", "c.example.com/f"]}}, "Pod")
    assert added["metadata"]["finalizers"] == ["a.example.com/f", "b.example.com/f", "c.example.com/f"]
    removed = strategic_merge_patch(
        _pod(), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/f", "absent"]}}, "Pod"
    )
    assert removed["metadata"]["finalizers"] == ["b.example.com/f"]
    # Deleting from a list the object lacks does not create it.
    no_list = strategic_merge_patch(
        {"metadata": {"name": "x"}}, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, "Pod"
    )
    assert no_list == {"metadata": {"name": "x"}}


def test_smp_set_element_order_with_server_only_items() -> None:
    live = [
        {"name": "1", "other": "a"},
        {"name": "2", "v": 2},
        {"name": "7"},
        {"name": "9"},
        {"name": "8"},
        {"name": "3", "v": 3},
        {"name": "4", "v": 4},
    ]
    patch = {"spec": {"$setElementOrder/containers": [{"name": n} for n in "2143"]}}
    patched = strategic_merge_patch({"spec": {"containers": live}}, patch, "Pod")
    assert _names(patched["spec"]["containers"]) == ["2", "1", "7", "9", "8", "4", "3"]


def test_smp_set_element_order_with_additions() -> None:
    live = [{"name": "1", "other": "a"}, {"name": "2", "v": 2, "other": "b"}]
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": n} for n in "4123"],
            "containers": [{"name": "4", "v": 4}, {"name": "3", "v": 3}],
        }
    }
    patched = strategic_merge_patch({"spec": {"containers": live}}, patch, "Pod")
    assert patched["spec"]["containers"] == [
        {"name": "4", "v": 4},
        {"name": "1", "other": "a"},
        {"name": "2", "v": 2, "other": "b"},
        {"name": "3", "v": 3},
    ]


def test_smp_set_element_order_on_a_primitive_list() -> None:
    patch = {"metadata": {"$setElementOrder/finalizers": ["3", "1", "2"], "finalizers": ["3"]}}
    patched = strategic_merge_patch({"metadata": {"finalizers": ["1", "4", "2"]}}, patch, "Pod")
    assert patched["metadata"]["finalizers"] == ["3", "1", "4", "2"]


def test_smp_retain_keys_clears_unlisted_fields() -> None:
    patch = {"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/d"}}]}}
    patched = strategic_merge_patch(_pod(), patch, "Pod")
    assert patched["spec"]["volumes"] == [{"name": "data", "hostPath": {"path": "/d"}}]


def test_smp_applies_the_pod_table_inside_templates_of_other_kinds() -> None:
    job = {
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": {"metadata": {"labels": {"a": "1"}}, "spec": _pod()["spec"]}},
        "status": {"conditions": [{"type": "Complete", "status": "False"}]},
    }
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "tensorflow", "env": [{"name": "Z", "value": "z"}]}]}}},
        "status": {"conditions": [{"type": "Failed", "status": "True"}]},
    }
    for kind in ("Job", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "ReplicationController"):
        patched = strategic_merge_patch(job, patch, kind)
        containers = patched["spec"]["template"]["spec"]["containers"]
        assert _names(containers) == ["tensorflow", "sidecar"], kind
        assert _names(containers[0]["env"]) == ["Z", "A", "B"], kind
        assert _names(patched["status"]["conditions"], "type") == ["Failed", "Complete"], kind
    cron = strategic_merge_patch(
        {"spec": {"jobTemplate": {"spec": job["spec"]}}}, {"spec": {"jobTemplate": patch}}, "CronJob"
    )
    assert _names(cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]) == ["tensorflow", "sidecar"]


def test_smp_service_ports_merge_by_port() -> None:
    service = {"kind": "Service", "spec": {"ports": [{"port": 2222, "name": "tfjob-port"}], "clusterIP": "None"}}
    patched = strategic_merge_patch(
        service, {"spec": {"ports": [{"port": 2222, "targetPort": 2222}, {"port": 80}]}}, "Service"
    )
    assert patched["spec"]["ports"] == [{"port": 2222, "name": "tfjob-port", "targetPort": 2222}, {"port": 80}]


def test_smp_kinds_without_strategic_fields_merge_generically() -> None:
    config = {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}
    assert strategic_merge_patch(config, {"data": {"b": None, "c": "3"}}, "ConfigMap")["data"] == {"a": "1", "c": "3"}
    assert {"Pod", "Node", "Service", "Job", "ConfigMap", "Lease", "Event", "Scale"} <= STRATEGIC_MERGE_KINDS
    scale = {"kind": "Scale", "spec": {"replicas": 2}, "status": {"replicas": 2}}
    assert strategic_merge_patch(scale, {"spec": {"replicas": 5}}, "Scale")["spec"] == {"replicas": 5}


def test_smp_null_body_is_an_empty_patch() -> None:
    assert strategic_merge_patch(_pod(), None, "Pod") == _pod()


SMP_ERRORS = [
    # (description, patch, code, reason, message)
    (
        "$patch merge on a map",
        {"metadata": {"labels": {"$patch": "merge"}}},
        500,
        "",
        "unknown patch type: merge in map: map[$patch:merge]",
    ),
    (
        "unknown map directive",
        {"spec": {"$patch": "zap", "a": 1}},
        500,
        "",
        "unknown patch type: zap in map: map[$patch:zap a:1]",
    ),
    (
        "$patch merge in a list",
        {"spec": {"containers": [{"name": "x", "$patch": "merge"}]}},
        500,
        "",
        "merging lists cannot yet be specified in the patch",
    ),
    (
        "delete item without merge key",
        {"spec": {"containers": [{"$patch": "delete"}]}},
        500,
        "",
        "map: map[$patch:delete] does not contain declared merge key: name",
    ),
    (
        "item without merge key",
        {"spec": {"containers": [{"image": "x"}]}},
        500,
        "",
        "map: map[image:x] does not contain declared merge key: name",
    ),
    (
        "mixed element types",
        {"metadata": {"finalizers": [1]}},
        500,
        "",
        "list element types are not identical: [[a.example.com/f b.example.com/f] [1]]",
    ),
    ("list of lists", {"spec": {"volumes": None, "containers": [["x"]]}}, 500, "", None),
    (
        "retainKeys not a list",
        {"spec": {"$retainKeys": "containers"}},
        400,
        "BadRequest",
        "invalid patch format of retainKeys",
    ),
    (
        "patch field outside retainKeys",
        {"spec": {"$retainKeys": ["volumes"], "nodeName": "n"}},
        400,
        "BadRequest",
        "invalid patch format of retainKeys",
    ),
    (
        "malformed $deleteFromPrimitiveList key",
        {"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}},
        400,
        "BadRequest",
        "invalid patch format of primitive list",
    ),
    (
        "malformed $setElementOrder key",
        {"metadata": {"$setElementOrderfinalizers": ["a"]}},
        400,
        "BadRequest",
        "invalid patch format of setElementOrder list",
    ),
    (
        "$setElementOrder not a list",
        {"metadata": {"$setElementOrder/finalizers": "a"}},
        500,
        "",
        "expected a []interface {}, but received a string",
    ),
    (
        "patch list out of $setElementOrder order",
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "tensorflow"}, {"name": "sidecar"}],
                "containers": [{"name": "sidecar"}, {"name": "tensorflow"}],
            }
        },
        500,
        "",
        "The order in patch list:\n[map[name:sidecar] map[name:tensorflow]]\n doesn't match $setElementOrder list:\n"
        "[map[name:tensorflow] map[name:sidecar]]\n",
    ),
    (
        "array body",
        ["x"],
        400,
        "BadRequest",
        "json: cannot unmarshal array into Go value of type map[string]interface {}",
    ),
    (
        "string body",
        "x",
        400,
        "BadRequest",
        "json: cannot unmarshal string into Go value of type map[string]interface {}",
    ),
]


@pytest.mark.parametrize(
    ("description", "patch", "code", "reason", "message"), SMP_ERRORS, ids=[c[0] for c in SMP_ERRORS]
)
def test_smp_errors(description: str, patch: Any, code: int, reason: str, message: str | None) -> None:
    error = _error(strategic_merge_patch, _pod(), patch, "Pod")
    assert (error.code, error.reason) == (code, reason)
    if message is not None:
        assert error.message == message


def test_smp_list_of_lists_is_the_generic_422() -> None:
    patch = {"spec": {"hostAliases": [["a"]]}}
    error = _error(strategic_merge_patch, {"spec": {"hostAliases": [["b"]]}}, patch, "Pod")
    assert (error.code, error.reason, error.message) == (422, "Invalid", GENERIC_422)
    assert "lists of lists are not supported" in str(error.__cause__)


def test_smp_is_not_offered_for_custom_resources() -> None:
    error = _error(strategic_merge_patch, {"kind": "TFJob"}, {"spec": {}}, "TFJob")
    assert (error.code, error.reason) == (415, "UnsupportedMediaType")
    assert error.message == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


# ------------------------------------------------------------------------------------------
# Inputs are never mutated, results never alias inputs
# ------------------------------------------------------------------------------------------

NON_MUTATION_CASES: list[tuple[str, Any, Any]] = [
    ("json add", json_patch, [{"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "N", "value": "v"}}]),
    ("json move", json_patch, [{"op": "move", "from": "/spec/containers/1", "path": "/spec/containers/0"}]),
    ("json copy", json_patch, [{"op": "copy", "from": "/spec/containers/0", "path": "/spec/containers/-"}]),
    (
        "json failing midway",
        json_patch,
        [{"op": "remove", "path": "/metadata/labels"}, {"op": "test", "path": "/kind", "value": "Job"}],
    ),
    (
        "merge",
        merge_patch,
        {"metadata": {"labels": {"role": None, "new": {"deep": [1, {"x": None}]}}}, "spec": {"containers": []}},
    ),
    (
        "strategic",
        lambda doc, patch: strategic_merge_patch(doc, patch, "Pod"),
        {
            "metadata": {
                "$deleteFromPrimitiveList/finalizers": ["a.example.com/f"],
                "labels": {"$patch": "replace", "x": "y"},
            },
            "spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "new"}, {"name": "tensorflow"}],
                "containers": [
                    {"name": "new", "env": [{"name": "E", "value": None}]},
                    {"name": "tensorflow", "env": [{"name": "A", "$patch": "delete"}]},
                ],
                "volumes": [{"name": "data", "$retainKeys": ["name"]}],
            },
        },
    ),
    (
        "strategic failing",
        lambda doc, patch: strategic_merge_patch(doc, patch, "Pod"),
        {"spec": {"containers": [{"image": "no-name"}]}},
    ),
]


@pytest.mark.parametrize(("description", "engine", "patch"), NON_MUTATION_CASES, ids=[c[0] for c in NON_MUTATION_CASES])
def test_inputs_are_not_mutated_and_results_do_not_alias_them(description: str, engine: Any, patch: Any) -> None:
    doc = _pod()
    doc_before = copy.deepcopy(doc)
    patch_before = copy.deepcopy(patch)
    try:
        result = engine(doc, patch)
    except ApiError:
        result = None
    assert doc == doc_before
    assert patch == patch_before
    if result is not None:
        _scramble(result)
        assert doc == doc_before
        assert patch == patch_before


def _scramble(value: Any) -> None:
    """Mutate every container in ``value``; any alias into the inputs would show."""
    if isinstance(value, dict):
        for item in value.values():
            _scramble(item)
        value["__scrambled__"] = True
    elif isinstance(value, list):
        for item in value:
            _scramble(item)
        value.append("__scrambled__")


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "replace", "path": "/a/-1", "value": 9}], {"a": [1, 2, 9]}),
        ([{"op": "remove", "path": "/a/-3"}], {"a": [2, 3]}),
        ([{"op": "add", "path": "/a/3", "value": 4}], {"a": [1, 2, 3, 4]}),  # the end is a valid add index
        ([{"op": "add", "path": "/a/-4", "value": 0}], {"a": [0, 1, 2, 3]}),
    ],
)
def test_array_indices_resolve_the_same_way_for_every_operation(ops: list, expected: dict) -> None:
    assert json_patch({"a": [1, 2, 3]}, ops) == expected


@pytest.mark.parametrize(
    "op",
    [
        {"op": "replace", "path": "/a/3", "value": 0},
        {"op": "replace", "path": "/a/-4", "value": 0},
        {"op": "remove", "path": "/a/3"},
        {"op": "add", "path": "/a/4", "value": 0},
        {"op": "add", "path": "/a/-5", "value": 0},
        {"op": "remove", "path": "/a/x"},
    ],
)
def test_out_of_range_array_indices_are_the_generic_422(op: dict) -> None:
    with pytest.raises(ApiError) as raised:
        json_patch({"a": [1, 2, 3]}, [op])
    assert raised.value.code == 422 and raised.value.message == GENERIC_422
