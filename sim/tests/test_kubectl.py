"""The real kubectl against the simulator: discovery, apply of a CRD and of
custom resources (valid and invalid), get in every output form, get -w, label, annotate, patch,
scale, delete, wait, drain-style eviction, and a pod running to completion via annotations."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
import yaml

from tfjob_sim.cluster import SimCluster
from tfjob_sim.kubelet import EXIT_CODE, RUN_SECONDS
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.objects import widget_crd
from tfjob_sim.testing.waiting import eventually

REPO = Path(__file__).resolve().parents[2]


def manifest(*docs: dict) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


WIDGET = {
    "apiVersion": "example.com/v1",
    "kind": "Widget",
    "metadata": {"name": "w1"},
    "spec": {"replicas": 2, "color": "green"},
}


@pytest.fixture
async def widgets(kubectl: Kubectl) -> Kubectl:
    out = await kubectl.ok("apply", "-f", "-", input=manifest(widget_crd()))
    assert out.strip() == "customresourcedefinition.apiextensions.k8s.io/widgets.example.com created"
    return kubectl


async def test_api_resources_lists_builtins_and_new_crds(widgets: Kubectl) -> None:
    out = await widgets.ok("api-resources")
    rows = {tuple(line.split()[:1]) for line in out.splitlines()[1:]}
    for name in (
        "pods",
        "namespaces",
        "nodes",
        "services",
        "configmaps",
        "secrets",
        "events",
        "leases",
        "customresourcedefinitions",
        "widgets",
        "roles",
        "clusterrolebindings",
    ):
        assert (name,) in rows, f"{name} missing from:\n{out}"
    widget_row = next(line.split() for line in out.splitlines() if line.startswith("widgets"))
    assert widget_row == ["widgets", "wd", "example.com/v1", "true", "Widget"]


async def test_apply_custom_resources_valid_and_invalid(widgets: Kubectl) -> None:
    assert (await widgets.ok("apply", "-f", "-", input=manifest(WIDGET))).strip() == "widget.example.com/w1 created"
    again = await widgets.ok("apply", "-f", "-", input=manifest(WIDGET))
    assert again.strip() == "widget.example.com/w1 unchanged"
    bad = json.loads(json.dumps(WIDGET))
    bad["metadata"]["name"] = "bad"
    bad["spec"].update(replicas=-1, color="pink")
    rc, _out, err = await widgets("apply", "-f", "-", input=manifest(bad))
    assert rc == 1
    assert 'The Widget "bad" is invalid' in err
    assert "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0" in err
    assert 'spec.color: Unsupported value: "pink": supported values: "red", "green", "blue"' in err
    cel = json.loads(json.dumps(WIDGET))
    cel["metadata"]["name"] = "cel"
    cel["spec"].update(replicas=50, maxReplicas=3)
    rc, _out, err = await widgets("apply", "-f", "-", input=manifest(cel))
    assert rc == 1 and "replicas must not exceed maxReplicas" in err
    unknown = json.loads(json.dumps(WIDGET))
    unknown["metadata"]["name"] = "unknown"
    unknown["spec"]["colour"] = "red"
    rc, _out, err = await widgets("apply", "-f", "-", input=manifest(unknown))
    assert rc == 1 and 'strict decoding error: unknown field "spec.colour"' in err


async def test_apply_the_project_tfjob_crd(kubectl: Kubectl) -> None:
    crd = REPO / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml"
    out = await kubectl.ok("apply", "-f", str(crd))
    assert "tfjobs.kubeflow.org created" in out
    out = await kubectl.ok(
        "get",
        "crd",
        "tfjobs.kubeflow.org",
        "-o",
        'jsonpath={.status.conditions[?(@.type=="Established")].status}',
    )
    assert out == "True"


async def test_get_outputs_and_printer_columns(widgets: Kubectl) -> None:
    await widgets.ok("apply", "-f", "-", input=manifest(WIDGET))
    table = await widgets.ok("get", "widgets")
    header, row = table.splitlines()
    assert header.split() == ["NAME", "REPLICAS", "COLOR", "AGE"]
    assert row.split()[:3] == ["w1", "2", "green"]
    as_json = json.loads(await widgets.ok("get", "widget", "w1", "-o", "json"))
    assert as_json["kind"] == "Widget" and as_json["spec"]["maxReplicas"] == 10  # defaulted by the schema
    as_yaml = yaml.safe_load(await widgets.ok("get", "wd", "w1", "-o", "yaml"))
    assert as_yaml["metadata"]["uid"] == as_json["metadata"]["uid"]
    listing = json.loads(await widgets.ok("get", "widgets", "-o", "json"))
    assert listing["kind"] == "List" and [i["metadata"]["name"] for i in listing["items"]] == ["w1"]
    rc, pods, err = await widgets("get", "pods", "-A")
    assert rc == 0 and pods == "" and err.strip() == "No resources found"
    nodes = await widgets.ok("get", "nodes")
    assert nodes.splitlines()[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert len(nodes.splitlines()) == 4 and all(" Ready " in line for line in nodes.splitlines()[1:])
    rc, _out, err = await widgets("get", "frobnicators")
    assert rc == 1 and 'the server doesn\'t have a resource type "frobnicators"' in err
    rc, _out, err = await widgets("get", "widget", "missing")
    assert rc == 1 and 'Error from server (NotFound): widgets.example.com "missing" not found' in err


async def test_get_watch_streams_changes(widgets: Kubectl, sim_cluster: SimCluster) -> None:
    await widgets.ok("apply", "-f", "-", input=manifest(WIDGET))
    proc = await widgets.spawn("get", "widgets", "-w", "--output-watch-events")
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        with anyio.fail_after(30):
            while not any("w1" in line for line in lines):
                lines.append((await proc.stdout.readline()).decode())
            await widgets.ok("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"color":"blue"}}')
            while not any("blue" in line for line in lines):
                line = (await proc.stdout.readline()).decode()
                assert line, f"kubectl get -w ended early: {lines}"
                lines.append(line)
        modified = next(line for line in lines if "blue" in line)
        assert modified.split()[:4] == ["MODIFIED", "w1", "2", "blue"]
    finally:
        proc.terminate()
        await proc.wait()


async def test_label_annotate_and_patch(widgets: Kubectl, sim_cluster: SimCluster) -> None:
    await widgets.ok("apply", "-f", "-", input=manifest(WIDGET))
    await widgets.ok("label", "widget", "w1", "tier=gold")
    await widgets.ok("annotate", "widget", "w1", "note=hello")
    await widgets.ok("patch", "widget", "w1", "--type=merge", "-p", '{"spec":{"replicas":3}}')
    await widgets.ok(
        "patch", "widget", "w1", "--type=json", "-p", '[{"op":"replace","path":"/spec/color","value":"red"}]'
    )
    stored = sim_cluster.store.get("widgets.example.com", "default", "w1")
    assert stored["metadata"]["labels"] == {"tier": "gold"}
    assert stored["metadata"]["annotations"]["note"] == "hello"
    assert stored["spec"]["replicas"] == 3 and stored["spec"]["color"] == "red"
    assert stored["metadata"]["generation"] == 3  # two spec changes; label/annotate are metadata-only
    out = await widgets.ok("get", "widgets", "-l", "tier=gold", "-o", "name")
    assert out.strip() == "widget.example.com/w1"
    rc, _out, err = await widgets("patch", "widget", "w1", "-p", '{"spec":{"replicas":1}}')  # strategic on a CR
    assert rc == 1 and "application/strategic-merge-patch+json is not supported" in err
    rc, _out, err = await widgets(
        "patch", "widget", "w1", "--type=json", "-p", '[{"op":"test","path":"/spec/color","value":"green"}]'
    )
    assert rc == 1 and "The request is invalid" in err  # 422, the generic message kubectl prints
    await widgets.ok("label", "configmap", "--all", "x=y")  # no configmaps: still succeeds


async def test_scale_custom_resource(widgets: Kubectl, sim_cluster: SimCluster) -> None:
    await widgets.ok("apply", "-f", "-", input=manifest(WIDGET))
    assert (await widgets.ok("scale", "widget", "w1", "--replicas=5")).strip() == "widget.example.com/w1 scaled"
    assert sim_cluster.store.get("widgets.example.com", "default", "w1")["spec"]["replicas"] == 5
    rc, _out, err = await widgets("scale", "widget", "w1", "--replicas=6", "--current-replicas=2")
    assert rc == 1 and "Expected replicas to be 2, was 5" in err


async def test_delete_with_and_without_wait_and_wait_for_delete(widgets: Kubectl, sim_cluster: SimCluster) -> None:
    second = json.loads(json.dumps(WIDGET))
    second["metadata"]["name"] = "w2"
    held = json.loads(json.dumps(WIDGET))
    held["metadata"].update(name="held", finalizers=["example.com/hold"])
    await widgets.ok("apply", "-f", "-", input=manifest(WIDGET, second, held))
    assert (await widgets.ok("delete", "widget", "w1")).strip() == 'widget.example.com "w1" deleted'
    assert sim_cluster.store.get("widgets.example.com", "default", "w1") is None
    await widgets.ok("delete", "widget", "w2", "--wait=false")
    await widgets.ok("delete", "widget", "held", "--wait=false")
    assert sim_cluster.store.get("widgets.example.com", "default", "held")["metadata"]["deletionTimestamp"]
    mark = sim_cluster.faults.mark()
    waiter = await widgets.spawn("wait", "--for=delete", "widget/held", "--timeout=60s")
    # kubectl is watching the object before it goes
    await eventually(
        lambda: sim_cluster.faults.count("watch", "widgets.example.com", since=mark), what="kubectl's watch"
    )
    sim_cluster.store.patch("widgets.example.com", "default", "held", "merge", {"metadata": {"finalizers": None}})
    with anyio.fail_after(60):
        rc = await waiter.wait()
    assert rc == 0, (await waiter.stderr.read()).decode() if waiter.stderr else rc


async def test_wait_for_jsonpath_and_a_pod_running_to_completion(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "job", "annotations": {RUN_SECONDS: "20"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    await kubectl.ok("apply", "-f", "-", input=manifest(pod))
    await kubectl.ok("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/job", "--timeout=30s")
    out = await kubectl.ok("get", "pod", "job")
    assert out.splitlines()[1].split()[:3] == ["job", "0/1", "Completed"]
    exit_code = await kubectl.ok(
        "get", "pod", "job", "-o", "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}"
    )
    assert exit_code == "0"
    failing = json.loads(json.dumps(pod))
    failing["metadata"].update(name="fails", annotations={RUN_SECONDS: "10", EXIT_CODE: "3"})
    await kubectl.ok("apply", "-f", "-", input=manifest(failing))
    await kubectl.ok("wait", "--for=jsonpath={.status.phase}=Failed", "pod/fails", "--timeout=30s")
    # A running pod told to exit through an annotation.
    runner = json.loads(json.dumps(pod))
    runner["metadata"].update(name="runner", annotations={})
    await kubectl.ok("apply", "-f", "-", input=manifest(runner))
    await kubectl.ok("wait", "--for=condition=Ready", "pod/runner", "--timeout=30s")
    await kubectl.ok("annotate", "pod", "runner", "sim.tfjob.dev/exit-code=0")
    await kubectl.ok("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/runner", "--timeout=30s")


async def test_drain_evicts_pods(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"d{i}"},
            "spec": {"nodeName": "sim-node-0", "containers": [{"name": "main", "image": "busybox:1.36"}]},
        }
        for i in range(2)
    ]
    await kubectl.ok("apply", "-f", "-", input=manifest(*pods))
    await kubectl.ok("wait", "--for=condition=Ready", "pod/d0", "pod/d1", "--timeout=30s")
    rc, out, err = await kubectl("drain", "sim-node-0", "--force", "--ignore-daemonsets", "--timeout=30s", timeout=60)
    assert rc == 0, err
    assert "evicting pod default/d0" in err + out and "drained" in out
    assert sim_cluster.store.get("pods", "default", "d0") is None
    assert sim_cluster.store.get("nodes", None, "sim-node-0")["spec"]["unschedulable"] is True
    assert "uncordoned" in await kubectl.ok("uncordon", "sim-node-0")
    assert not sim_cluster.store.get("nodes", None, "sim-node-0")["spec"].get("unschedulable")


async def test_delete_pod_waits_for_graceful_termination(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "g"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }
    await kubectl.ok("apply", "-f", "-", input=manifest(pod))
    await kubectl.ok("wait", "--for=condition=Ready", "pod/g", "--timeout=30s")
    assert (await kubectl.ok("delete", "pod", "g")).strip() == 'pod "g" deleted'
    assert sim_cluster.store.get("pods", "default", "g") is None


async def test_create_generators_send_protobuf(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    # kubectl encodes the objects of its create subcommands as application/vnd.kubernetes.protobuf.
    await kubectl.ok("create", "configmap", "gen", "--from-literal=a=b", "--from-literal=c=d")
    await kubectl.ok("create", "secret", "generic", "pw", "--from-literal=pw=hunter2")
    await kubectl.ok("create", "namespace", "team")
    await kubectl.ok("create", "rolebinding", "rb", "--clusterrole=view", "--serviceaccount=default:bot")
    store = sim_cluster.store
    assert store.get("configmaps", "default", "gen")["data"] == {"a": "b", "c": "d"}
    assert store.get("secrets", "default", "pw")["data"] == {"pw": "aHVudGVyMg=="}
    assert store.get("namespaces", None, "team")["status"]["phase"] == "Active"
    binding = store.get("rolebindings.rbac.authorization.k8s.io", "default", "rb")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "bot", "namespace": "default"}]
    rc, _out, err = await kubectl("delete", "namespace", "default")
    assert rc == 1 and 'namespaces "default" is forbidden: this namespace may not be deleted' in err
