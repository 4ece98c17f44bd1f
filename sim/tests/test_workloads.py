"""apps/v1 through the real kubectl: the project's own manifests applied with ``kubectl apply -k``,
``rollout status``, ``scale``, a rolling update and its undo, apps validation, the Scale subresource,
and server-side apply of every manifest (including the client-side -> server-side migration)."""

from __future__ import annotations

import json
from pathlib import Path

from tfjob_sim.cluster import SimCluster
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.waiting import eventually
from tfjob_sim.workloads import pod_template_hash

ROOT = Path(__file__).resolve().parents[2]
NS = "tfjob-controller"
DEPLOY = "deployment/tfjob-controller"


async def get_json(kubectl: Kubectl, *args: str) -> dict:
    return json.loads(await kubectl.ok("get", *args, "-o", "json"))


def controller_pods(cluster: SimCluster) -> list[dict]:
    pods, _ = cluster.store.list("pods", NS, "app.kubernetes.io/name=tfjob-controller")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def test_apply_k_manifests_then_rollout_status_and_scale(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    await kubectl.ok("apply", "-k", str(ROOT / "manifests"))
    out = await kubectl.ok("-n", NS, "rollout", "status", DEPLOY, "--timeout=60s", timeout=90)
    assert 'deployment "tfjob-controller" successfully rolled out' in out

    deploy = await get_json(kubectl, "-n", NS, DEPLOY)
    spec = deploy["spec"]
    # The manifest's rollout strategy (a standby always exists); the rest are kube-apiserver's apps/v1 defaults.
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert spec["revisionHistoryLimit"] == 10 and spec["progressDeadlineSeconds"] == 600
    assert spec["template"]["spec"]["dnsPolicy"] == "ClusterFirst"
    assert spec["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTP"
    assert deploy["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    status = deploy["status"]
    assert (status["replicas"], status["updatedReplicas"], status["readyReplicas"], status["availableReplicas"]) == (
        2,
        2,
        2,
        2,
    )
    assert status["observedGeneration"] == deploy["metadata"]["generation"]
    assert {c["type"]: c["reason"] for c in status["conditions"]} == {
        "Available": "MinimumReplicasAvailable",
        "Progressing": "NewReplicaSetAvailable",
    }

    # One ReplicaSet named after the template hash, owning two running pods that carry the hash label.
    template_hash = pod_template_hash(spec["template"])
    rs = await get_json(kubectl, "-n", NS, f"rs/tfjob-controller-{template_hash}")
    assert rs["metadata"]["ownerReferences"][0]["uid"] == deploy["metadata"]["uid"]
    assert rs["spec"]["selector"]["matchLabels"]["pod-template-hash"] == template_hash
    pods = controller_pods(sim_cluster)
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["name"].startswith(f"tfjob-controller-{template_hash}-")
        assert pod["metadata"]["labels"]["pod-template-hash"] == template_hash
        assert pod["metadata"]["ownerReferences"][0]["uid"] == rs["metadata"]["uid"]
        assert pod["status"]["phase"] == "Running" and pod["spec"]["serviceAccountName"] == "tfjob-controller"

    table = await kubectl.ok("-n", NS, "get", "deploy")
    assert table.split("\n")[0].split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table.split("\n")[1].split()[:4] == ["tfjob-controller", "2/2", "2", "2"]

    # kubectl scale goes through the Scale subresource; the selector is the deployment's.
    await kubectl.ok("-n", NS, "scale", DEPLOY, "--replicas=3")
    await kubectl.ok("-n", NS, "rollout", "status", DEPLOY, "--timeout=60s", timeout=90)
    assert len(controller_pods(sim_cluster)) == 3
    scale = json.loads(
        await kubectl.ok("get", "--raw", f"/apis/apps/v1/namespaces/{NS}/deployments/tfjob-controller/scale")
    )
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3
    assert (
        scale["status"]["selector"] == "app.kubernetes.io/component=controller,app.kubernetes.io/name=tfjob-controller"
    )
    await kubectl.ok("-n", NS, "scale", DEPLOY, "--replicas=1")
    await eventually(lambda: len(controller_pods(sim_cluster)) == 1, timeout=30, what="scale down to 1 pod")


async def test_rolling_update_and_undo_reuse_replicasets(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    await kubectl.ok("apply", "-k", str(ROOT / "manifests"))
    await kubectl.ok("-n", NS, "scale", DEPLOY, "--replicas=4")
    await kubectl.ok("-n", NS, "rollout", "status", DEPLOY, "--timeout=60s", timeout=90)
    first = {rs["metadata"]["name"] for rs in (await get_json(kubectl, "-n", NS, "rs"))["items"]}

    await kubectl.ok("-n", NS, "set", "image", DEPLOY, "controller=tfjob-controller:0.2.0")
    await kubectl.ok("-n", NS, "rollout", "status", DEPLOY, "--timeout=60s", timeout=90)
    sets = {rs["metadata"]["name"]: rs for rs in (await get_json(kubectl, "-n", NS, "rs"))["items"]}
    (new,) = set(sets) - first
    assert (
        sets[new]["spec"]["replicas"] == 4
        and sets[new]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    )
    assert all(sets[name]["spec"]["replicas"] == 0 for name in first)
    pods = controller_pods(sim_cluster)
    assert len(pods) == 4 and {p["spec"]["containers"][0]["image"] for p in pods} == {"tfjob-controller:0.2.0"}

    # Undo goes back to the first template: its ReplicaSet is reused as revision 3.
    await kubectl.ok("-n", NS, "rollout", "undo", DEPLOY)
    await kubectl.ok("-n", NS, "rollout", "status", DEPLOY, "--timeout=60s", timeout=90)
    sets = {rs["metadata"]["name"]: rs for rs in (await get_json(kubectl, "-n", NS, "rs"))["items"]}
    assert set(sets) == first | {new}
    (reused,) = first
    assert sets[reused]["spec"]["replicas"] == 4
    assert sets[reused]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "3"
    await eventually(
        lambda: (
            {p["spec"]["containers"][0]["image"] for p in controller_pods(sim_cluster)}
            == {"ghcr.io/tfjob-controller/tfjob-controller:0.1.0"}
        ),
        timeout=30,
        what="old-image pods replaced",
    )


DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: %s}
    spec:
      containers: [{name: web, image: nginx:1.27}]
"""


async def test_apps_validation_messages(kubectl: Kubectl) -> None:
    rc, _out, err = await kubectl("apply", "-f", "-", input=DEPLOYMENT % "other")
    assert rc != 0
    assert (
        'The Deployment "web" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"other"}: `selector` does not match template `labels`' in err
    )
    await kubectl.ok("apply", "-f", "-", input=DEPLOYMENT % "web")
    rc, _out, err = await kubectl(
        "patch",
        "deploy",
        "web",
        "--type=merge",
        "-p",
        '{"spec":{"selector":{"matchLabels":{"app":"x"}},"template":{"metadata":{"labels":{"app":"x"}}}}}',
    )
    assert rc != 0 and "spec.selector: Invalid value: " in err and "field is immutable" in err
    rc, _out, err = await kubectl("scale", "deploy", "web", "--replicas=-1")
    assert rc != 0


SERVICE = """
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - port: 80
    targetPort: 8080
"""


async def test_client_side_to_server_side_apply_migration(kubectl: Kubectl) -> None:
    await kubectl.ok("apply", "-f", "-", input=SERVICE)
    out = await kubectl.ok("apply", "--server-side", "-f", "-", input=SERVICE)
    assert "service/web serverside-applied" in out
    svc = await get_json(kubectl, "svc", "web", "--show-managed-fields")
    # Defaulted fields the applier stopped owning are defaulted again, owned by no one.
    assert svc["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 8080}]
    assert (svc["spec"]["type"], svc["spec"]["sessionAffinity"]) == ("ClusterIP", "None")
    managers = {(e["manager"], e["operation"]) for e in svc["metadata"]["managedFields"]}
    assert managers == {("kubectl", "Apply"), ("kubectl-last-applied", "Apply")}
    kubectl_fields = next(e for e in svc["metadata"]["managedFields"] if e["manager"] == "kubectl")["fieldsV1"]
    assert kubectl_fields["f:spec"]["f:ports"] == {
        'k:{"port":80,"protocol":"TCP"}': {".": {}, "f:port": {}, "f:targetPort": {}}
    }
    # Both directions keep working afterwards.
    assert "unchanged" in await kubectl.ok("apply", "-f", "-", input=SERVICE)
    await kubectl.ok("apply", "--server-side", "-f", "-", input=SERVICE)


# Namespace, CRD, ServiceAccount, 3 ClusterRoles, ClusterRoleBinding, Role, RoleBinding, Deployment, Service, PDB.
INSTALL_OBJECTS = 12


async def test_server_side_apply_of_every_manifest(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    manifests = str(ROOT / "manifests")
    out = await kubectl.ok("apply", "--server-side", "-k", manifests)
    assert out.count("serverside-applied") == INSTALL_OBJECTS
    await kubectl.ok("-n", NS, "rollout", "status", DEPLOY, "--timeout=60s", timeout=90)
    before = {rt: sim_cluster.store.list(rt)[0] for rt in ("deployments.apps", "replicasets.apps", "services")}
    # Re-applying the same configuration is a no-op; then the migration from client-side apply.
    await kubectl.ok("apply", "--server-side", "-k", manifests)
    assert {rt: sim_cluster.store.list(rt)[0] for rt in before} == before
    await kubectl.ok("delete", "-k", manifests, "--wait=false", "--ignore-not-found")
    await eventually(
        lambda: (
            sim_cluster.store.get("namespaces", None, NS) is None
            and sim_cluster.store.get("customresourcedefinitions.apiextensions.k8s.io", None, "tfjobs.kubeflow.org")
            is None
        ),
        timeout=30,
        what="manifests deleted",
    )
    await kubectl.ok("apply", "-k", manifests)
    out = await kubectl.ok("apply", "--server-side", "-k", manifests)
    assert out.count("serverside-applied") == INSTALL_OBJECTS
    await kubectl.ok("-n", NS, "rollout", "status", DEPLOY, "--timeout=60s", timeout=90)
    # The migration changed no template: still the one ReplicaSet.
    assert len(sim_cluster.store.list("replicasets.apps", NS)[0]) == 1
    for path in ("deployment/deployment.yaml", "deployment/service.yaml", "rbac/cluster_role.yaml"):
        rc, out, err = await kubectl("diff", "--server-side", "-f", str(ROOT / "manifests" / path))
        assert rc == 0, f"{path} differs after server-side apply: {out}{err}"
