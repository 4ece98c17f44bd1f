"""The HTTP layer: routing, negotiation, status codes and Status bodies, bad input (never a 500),
list options, discovery and OpenAPI — what kube-apiserver answers on the wire."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tfjob_sim import protobuf
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.objects import pod, widget, widget_crd

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
PODS = "/api/v1/namespaces/default/pods"
CMS = "/api/v1/namespaces/default/configmaps"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=2, time_scale=0.01, rv_wait_timeout=0.2)


class Api:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def __call__(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any, aiohttp.typedefs.LooseHeaders]:
        hdrs = dict(headers or {})
        data = raw
        if body is not None:
            data = orjson.dumps(body)
        if data is not None:
            hdrs["Content-Type"] = content_type
        async with self.session.request(method, self.base + path, data=data, headers=hdrs) as resp:
            text = await resp.read()
            ctype = resp.headers.get("Content-Type", "")
            parsed: Any = orjson.loads(text) if ctype.startswith("application/json") and text else text.decode()
            return resp.status, parsed, resp.headers


@pytest.fixture
async def api(sim_cluster: SimCluster) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession() as session:
        yield Api(session, sim_cluster.url)


def assert_status(body: Any, code: int, reason: str, message_part: str = "") -> None:
    assert isinstance(body, dict) and body["kind"] == "Status", body
    assert body["status"] == "Failure" and body["code"] == code and body.get("reason", "") == reason, body
    assert message_part in body["message"], body["message"]


async def test_unknown_paths_get_plain_text_404(api: Api) -> None:
    for path in (
        "/nope",
        "/api/v2",
        "/api/v1/frobs",
        "/apis/example.com/v1/widgets",
        "/api/v1/pods/x",
        "/api/v1/namespaces/default/nodes",
        "/openapi/v2",
    ):
        code, body, headers = await api("GET", path)
        assert code == 404 and body == "404 page not found\n", path
        assert headers["Content-Type"].startswith("text/plain")


async def test_writes_to_a_resource_not_served_are_404_and_discovery_paths_405(api: Api) -> None:
    # A deleted CRD's resource path: kube-apiserver's not-found handler answers 404 whatever the verb
    # (a 405 would tell a client the resource exists); its GET-only discovery routes refuse writes with 405.
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in ("/apis/example.com/v1/namespaces/default/widgets", "/api/v1/namespaces/default/frobs/x"):
            code, body, _ = await api(method, path, {"kind": "Widget"})
            assert code == 404 and body == "404 page not found\n", (method, path)
        for path in ("/api", "/apis", "/api/v1", "/apis/apps/v1"):
            code, body, _ = await api(method, path, {"kind": "Widget"})
            assert code == 405, (method, path)
            assert_status(body, 405, "MethodNotAllowed")


async def test_health_version_and_content_negotiation(api: Api) -> None:
    for path in ("/healthz", "/livez", "/readyz"):
        assert (await api("GET", path))[:2] == (200, "ok")
    code, version, _ = await api("GET", "/version")
    assert code == 200 and version["gitVersion"].startswith("v1.")
    code, body, _ = await api("GET", PODS, headers={"Accept": "application/vnd.kubernetes.protobuf"})
    assert code == 406
    assert_status(body, 406, "NotAcceptable")
    code, body, _ = await api("GET", PODS, headers={"Accept": "application/vnd.kubernetes.protobuf,application/json"})
    assert code == 200 and body["kind"] == "PodList"


async def test_create_get_update_delete_round_trip(api: Api) -> None:
    code, created, _ = await api(
        "POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}
    )
    assert code == 201 and created["metadata"]["resourceVersion"]
    code, got, _ = await api("GET", CMS + "/a")
    assert code == 200 and got == created
    got["data"]["k"] = "w"
    code, updated, _ = await api("PUT", CMS + "/a", got)
    assert code == 200 and int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    code, body, _ = await api("PUT", CMS + "/a", got)  # stale RV now
    assert code == 409
    assert_status(body, 409, "Conflict", 'Operation cannot be fulfilled on configmaps "a"')
    assert body["details"] == {"name": "a", "kind": "configmaps"}
    code, body, _ = await api(
        "DELETE", CMS + "/a", {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
    )
    assert code == 200 and body["status"] == "Success" and body["details"]["uid"] == created["metadata"]["uid"]
    code, body, _ = await api("GET", CMS + "/a")
    assert code == 404
    assert_status(body, 404, "NotFound", 'configmaps "a" not found')


async def test_bad_bodies_get_real_status_errors(api: Api) -> None:
    code, body, _ = await api("POST", CMS, raw=b'{"apiVersion": "v1", "kind": ')
    assert code == 400
    assert_status(body, 400, "BadRequest", "couldn't get version/kind; json parse error")
    # Like the typed decoders of kube-apiserver, missing kind/apiVersion default from the URL.
    code, body, _ = await api("POST", CMS, {"metadata": {"name": "defaulted"}})
    assert code == 201 and (body["kind"], body["apiVersion"]) == ("ConfigMap", "v1")
    code, body, _ = await api("POST", CMS, {"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "a"}})
    assert code == 400
    assert_status(
        body, 400, "BadRequest", "the API version in the data (v2) does not match the expected API version (v1)"
    )
    code, body, _ = await api("POST", CMS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}})
    assert code == 400
    assert_status(body, 400, "BadRequest", "does not match the expected kind")
    code, body, _ = await api("POST", CMS, ["not", "an", "object"])
    assert code == 400
    code, body, _ = await api(
        "POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}, content_type="text/csv"
    )
    assert code == 415
    assert_status(body, 415, "UnsupportedMediaType")
    code, body, _ = await api(
        "POST", CMS + "/named", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}
    )
    assert code == 405
    assert_status(body, 405, "MethodNotAllowed")
    code, body, _ = await api(
        "POST",
        PODS,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}},
    )
    assert code == 422
    assert_status(body, 422, "Invalid", 'Pod "p" is invalid: spec.containers[0].image: Required value')
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers[0].image"}
    ]


async def test_protobuf_bodies(api: Api) -> None:
    # The envelope kubectl sends for `create configmap pb --from-literal=a=b`.
    body = (
        b'k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x18\n\x0e\n\x02pb\x12\x00\x1a\x00"\x00'
        b'8\x00B\x00\x12\x06\n\x01a\x12\x01b\x1a\x00"\x00'
    )
    code, created, _ = await api("POST", CMS, raw=body, content_type="application/vnd.kubernetes.protobuf")
    assert code == 201 and created["metadata"]["name"] == "pb" and created["data"] == {"a": "b"}
    code, err, _ = await api("POST", CMS, raw=b"k8s\x00\n\xff", content_type="application/vnd.kubernetes.protobuf")
    assert code == 400
    assert_status(err, 400, "BadRequest", "invalid protobuf body")
    pod_envelope = b"k8s\x00\n\t\n\x02v1\x12\x03Pod\x12\x00"
    code, err, _ = await api("POST", CMS, raw=pod_envelope, content_type="application/vnd.kubernetes.protobuf")
    assert code == 415 and "does not decode protobuf bodies of v1/Pod" in err["message"]


def test_protobuf_times_decode_as_metav1_time() -> None:
    # A ConfigMap whose metadata carries creationTimestamp {seconds: 1700000000} and an empty deletionTimestamp.
    body = (
        b"k8s\x00\n\x0f\n\x02v1\x12\tConfigMap\x12\x18\n\x0e\n\x02pbB\x06\x08\x80\xe2\xcf\xaa\x06J\x00"
        b"\x12\x06\n\x01a\x12\x01b"
    )
    assert protobuf.decode(body)["metadata"] == {"name": "pb", "creationTimestamp": "2023-11-14T22:13:20Z"}


async def test_field_validation_strict_warn_ignore(api: Api) -> None:
    base = {"apiVersion": "v1", "kind": "ConfigMap", "data": {}, "spec": {"bogus": 1}}
    code, body, _ = await api("POST", CMS + "?fieldValidation=Strict", {**base, "metadata": {"name": "s"}})
    assert code == 400
    assert_status(body, 400, "BadRequest", 'strict decoding error: unknown field "spec"')
    code, body, headers = await api("POST", CMS, {**base, "metadata": {"name": "w"}})  # default: Warn
    assert code == 201 and "spec" not in body
    assert headers.getall("Warning") == ['299 - "unknown field \\"spec\\""']
    code, body, headers = await api("POST", CMS + "?fieldValidation=Ignore", {**base, "metadata": {"name": "i"}})
    assert code == 201 and "Warning" not in headers
    code, body, _ = await api("POST", CMS + "?fieldValidation=Loud", {**base, "metadata": {"name": "x"}})
    assert code == 400


async def test_dry_run(api: Api) -> None:
    code, body, _ = await api(
        "POST", CMS + "?dryRun=All", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}}
    )
    assert code == 201 and body["metadata"]["name"] == "d"
    assert (await api("GET", CMS + "/d"))[0] == 404
    assert (
        await api("POST", CMS + "?dryRun=Some", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d"}})
    )[0] == 400


async def test_patches_and_bad_patches(api: Api) -> None:
    await api("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "p"}, "data": {"a": "1"}})
    code, body, _ = await api("PATCH", CMS + "/p", {"data": {"b": "2"}}, content_type="application/merge-patch+json")
    assert code == 200 and body["data"] == {"a": "1", "b": "2"}
    code, body, _ = await api(
        "PATCH",
        CMS + "/p",
        [{"op": "replace", "path": "/data/a", "value": "9"}],
        content_type="application/json-patch+json",
    )
    assert code == 200 and body["data"]["a"] == "9"
    code, body, _ = await api(
        "PATCH", CMS + "/p", {"data": {"c": "3"}}, content_type="application/strategic-merge-patch+json"
    )
    assert code == 200 and body["data"]["c"] == "3"
    rv = body["metadata"]["resourceVersion"]
    code, body, _ = await api(
        "PATCH",
        CMS + "/p",
        [{"op": "test", "path": "/data/a", "value": "nope"}],
        content_type="application/json-patch+json",
    )
    assert code == 422, body
    code, body, _ = await api("PATCH", CMS + "/p", {"op": "add"}, content_type="application/json-patch+json")
    assert code == 400 and body["kind"] == "Status"
    code, body, _ = await api("PATCH", CMS + "/p", raw=b"{not json", content_type="application/merge-patch+json")
    assert code == 400
    assert_status(body, 400, "BadRequest")
    code, body, _ = await api("PATCH", CMS + "/p", {"data": {}}, content_type="application/xml")
    assert code == 415
    code, body, _ = await api(
        "PATCH",
        CMS + "/p",
        {"metadata": {"resourceVersion": "1"}, "data": {"z": "1"}},
        content_type="application/merge-patch+json",
    )
    assert code == 409  # an RV inside a merge patch is a precondition
    code, body, _ = await api("GET", CMS + "/p")
    assert body["metadata"]["resourceVersion"] == rv  # none of the failed patches wrote anything


async def test_server_side_apply_creates_and_updates(api: Api) -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1"}}
    code, body, _ = await api("PATCH", CMS + "/ssa", manifest, content_type="application/apply-patch+yaml")
    assert code == 422 and "fieldManager" in body["message"]
    code, body, _ = await api(
        "PATCH", CMS + "/ssa?fieldManager=test", manifest, content_type="application/apply-patch+yaml"
    )
    assert code == 201 and body["data"] == {"a": "1"}
    manifest["data"] = {"a": "2"}
    code, body, _ = await api(
        "PATCH", CMS + "/ssa?fieldManager=test", manifest, content_type="application/apply-patch+yaml"
    )
    assert code == 200 and body["data"] == {"a": "2"}


async def test_list_options_validation(api: Api) -> None:
    code, body, _ = await api("GET", PODS + "?resourceVersionMatch=Exact")
    assert code == 422
    assert_status(body, 422, "Invalid", "resourceVersionMatch is forbidden unless resourceVersion is provided")
    assert body["details"]["kind"] == "ListOptions" and body["details"]["group"] == "meta.k8s.io"
    code, body, _ = await api("GET", PODS + "?resourceVersionMatch=Exact&resourceVersion=0")
    assert code == 422
    code, body, _ = await api("GET", PODS + "?resourceVersion=abc")
    assert code == 400
    assert_status(body, 400, "BadRequest", "invalid resource version")
    code, body, _ = await api("GET", PODS + "?limit=1&continue=abc&resourceVersion=5")
    assert code == 400
    assert_status(body, 400, "BadRequest", "specifying resource version is not allowed when using continue")
    code, body, _ = await api("GET", PODS + "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
    assert code == 422
    code, body, _ = await api("GET", PODS + "?watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=1")
    assert code == 422
    code, body, _ = await api("GET", PODS + "?labelSelector=a%20in%20(b")
    assert code == 400
    assert_status(body, 400, "BadRequest")
    code, body, _ = await api("GET", PODS + "?fieldSelector=spec.bogus%3D1")
    assert code == 400
    assert_status(body, 400, "BadRequest", "field label not supported: spec.bogus")
    code, body, _ = await api("GET", PODS + "?limit=ten")
    assert code == 400


async def test_future_resource_version_times_out_with_504(api: Api, sim_cluster: SimCluster) -> None:
    future = sim_cluster.store.resource_version + 10
    code, body, headers = await api("GET", f"{PODS}?resourceVersion={future}")
    assert code == 504 and headers["Retry-After"] == "1"
    assert_status(body, 504, "Timeout", f"Too large resource version: {future}")
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


async def test_typed_list_items_omit_kind_custom_ones_keep_it(api: Api) -> None:
    await api("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "k"}})
    code, listing, _ = await api("GET", CMS)
    assert listing["kind"] == "ConfigMapList" and listing["apiVersion"] == "v1"
    assert "kind" not in listing["items"][0] and "apiVersion" not in listing["items"][0]
    await api("POST", CRDS, widget_crd())
    await api("POST", WIDGETS, widget("w"))
    code, listing, _ = await api("GET", WIDGETS)
    assert listing["kind"] == "WidgetList"
    assert (listing["items"][0]["kind"], listing["items"][0]["apiVersion"]) == ("Widget", "example.com/v1")


async def test_pagination_and_expired_continue(api: Api, sim_cluster: SimCluster) -> None:
    for i in range(5):
        await api("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{i}"}})
    code, page, _ = await api("GET", CMS + "?limit=2")
    assert [i["metadata"]["name"] for i in page["items"]] == ["c0", "c1"]
    token = page["metadata"]["continue"]
    code, page2, _ = await api("GET", f"{CMS}?limit=2&continue={token}")
    assert [i["metadata"]["name"] for i in page2["items"]] == ["c2", "c3"]
    assert page2["metadata"]["resourceVersion"] == page["metadata"]["resourceVersion"]
    await api("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c9"}})
    sim_cluster.faults.compact()
    code, body, _ = await api("GET", f"{CMS}?limit=2&continue={page2['metadata']['continue']}")
    assert code == 410
    assert_status(body, 410, "Expired", "The provided continue parameter is too old")
    assert body["metadata"]["continue"]


async def test_table_output(api: Api) -> None:
    await api("POST", PODS, pod("t1"))
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    code, table, _ = await api("GET", PODS, headers={"Accept": accept})
    assert code == 200 and table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][0] == "t1"
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    code, table, _ = await api("GET", CMS, headers={"Accept": accept})
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Data", "Age"]
    code, table, _ = await api("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles", headers={"Accept": accept})
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Created At"]
    code, body, _ = await api("GET", PODS + "?includeObject=Everything", headers={"Accept": accept})
    assert code == 400


async def test_discovery_and_openapi_follow_crds(api: Api) -> None:
    assert (await api("GET", "/apis/example.com/v1"))[0] == 404
    code, _, _ = await api("POST", CRDS, widget_crd())
    assert code == 201
    code, doc, _ = await api("GET", "/apis/example.com/v1")
    assert code == 200 and doc["kind"] == "APIResourceList" and doc["apiVersion"] == "v1"
    by_name = {r["name"]: r for r in doc["resources"]}
    assert by_name["widgets"]["shortNames"] == ["wd"] and by_name["widgets"]["kind"] == "Widget"
    assert by_name["widgets/status"]["verbs"] == ["get", "patch", "update"]
    assert {k: by_name["widgets/scale"][k] for k in ("group", "version", "kind")} == {
        "group": "autoscaling",
        "version": "v1",
        "kind": "Scale",
    }
    code, groups, _ = await api("GET", "/apis")
    assert "example.com" in [g["name"] for g in groups["groups"]]
    code, core, _ = await api("GET", "/api/v1")
    core_by_name = {r["name"]: r for r in core["resources"]}
    assert "apiVersion" not in core
    assert core_by_name["pods"]["categories"] == ["all"] and core_by_name["pods"]["shortNames"] == ["po"]
    assert core_by_name["pods/eviction"]["group"] == "policy" and core_by_name["pods/eviction"]["kind"] == "Eviction"
    code, root, _ = await api("GET", "/openapi/v3")
    url = root["paths"]["apis/example.com/v1"]["serverRelativeURL"]
    code, gv, _ = await api("GET", url)
    patch_op = gv["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
    assert patch_op["x-kubernetes-group-version-kind"] == {"group": "example.com", "version": "v1", "kind": "Widget"}
    assert "fieldValidation" in [p["name"] for p in patch_op["parameters"]]
    code, _, _ = await api("POST", WIDGETS, widget("w1"))
    assert code == 201


async def test_custom_resource_subresources_over_http(api: Api) -> None:
    await api("POST", CRDS, widget_crd())
    await api("POST", WIDGETS, widget("w", 2))
    code, scale, _ = await api("GET", WIDGETS + "/w/scale")
    assert code == 200 and scale["spec"] == {"replicas": 2}
    code, scale, _ = await api(
        "PATCH", WIDGETS + "/w/scale", {"spec": {"replicas": 4}}, content_type="application/merge-patch+json"
    )
    assert code == 200 and scale["spec"]["replicas"] == 4
    code, body, _ = await api(
        "PATCH", WIDGETS + "/w", {"spec": {"replicas": 1}}, content_type="application/strategic-merge-patch+json"
    )
    assert code == 415
    assert_status(body, 415, "UnsupportedMediaType", "application/json-patch+json, application/merge-patch+json")
    code, body, _ = await api("PUT", WIDGETS + "/w", widget("w", 3))
    assert code == 422 and "must be specified for an update" in body["message"]
    code, body, _ = await api(
        "PATCH", WIDGETS + "/w/status", {"status": {"phase": "Up"}}, content_type="application/merge-patch+json"
    )
    assert code == 200 and body["status"]["phase"] == "Up"
    code, body, _ = await api("GET", CMS.replace("configmaps", "pods") + "/none/scale")
    assert code == 404


async def test_eviction_and_delete_collection(api: Api, sim_cluster: SimCluster) -> None:
    await api("POST", PODS, {**pod("e", node="sim-node-0")})
    code, body, _ = await api(
        "POST",
        PODS + "/e/eviction",
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "e", "namespace": "default"}},
    )
    assert code == 201 and body["status"] == "Success"
    current = sim_cluster.store.get("pods", "default", "e")
    assert current is None or current["metadata"]["deletionTimestamp"]
    for i in range(3):
        await api(
            "POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"dc{i}", "labels": {"g": "x"}}}
        )
    code, body, _ = await api("DELETE", CMS + "?labelSelector=g%3Dx")
    assert code == 200 and body["kind"] == "ConfigMapList" and len(body["items"]) == 3
    code, body, _ = await api("DELETE", "/api/v1/namespaces")
    assert code == 405
