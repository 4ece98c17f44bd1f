"""Secure mode through the real kubectl: TLS with the generated CA, the admin's client certificate,
401 without credentials, ServiceAccount tokens from ``kubectl create token``, RBAC decisions and
their exact 403 texts, aggregated ClusterRoles, and ``kubectl auth can-i`` / ``whoami``."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import aiohttp
import anyio
import pytest
import yaml

from controller.runtime.client import PODS, ApiClient, RetryPolicy
from controller.runtime.errors import Forbidden, TransportError
from tfjob_sim.auth import SecureMaterial
from tfjob_sim.cluster import SimCluster, SimConfig, kubeconfig_document
from tfjob_sim.rbac import Attributes, UserInfo, rule_allows
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.waiting import eventually


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=2, time_scale=0.01, secure=True)


class TokenKubectl(Kubectl):
    """The admin's kubectl (same kubeconfig, so the server is verified against the cluster's CA) with
    ``--token``, which replaces the kubeconfig's token."""

    def __init__(self, admin: Kubectl, token: str) -> None:
        super().__init__(admin.binary, admin.kubeconfig, admin.cache_dir)
        self.token = token

    def argv(self, *args: str) -> list[str]:
        return super().argv("--token", self.token, *args)


def as_token(kubectl: Kubectl, token: str) -> Kubectl:
    return TokenKubectl(kubectl, token)


async def new_token(kubectl: Kubectl, sa: str, namespace: str = "default") -> str:
    await kubectl.ok("-n", namespace, "create", "serviceaccount", sa)
    return (await kubectl.ok("-n", namespace, "create", "token", sa)).strip()


def test_rule_matching_follows_the_rbac_authorizer() -> None:
    user = UserInfo("jane")

    def allows(rule: dict, **attrs: str) -> bool:
        return rule_allows(Attributes(user, attrs.pop("verb", "get"), "path" not in attrs, **attrs), rule)

    pods = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}
    assert allows(pods, resource="pods", name="web")
    assert not allows(pods, resource="pods", subresource="log", name="web")  # pods does not cover pods/log
    assert not allows({**pods, "resources": ["pods/*"]}, resource="pods", subresource="log")
    assert allows({**pods, "resources": ["*/log"]}, resource="pods", subresource="log")
    assert allows({**pods, "resources": ["*"]}, resource="pods", subresource="log")
    assert not allows(pods, resource="pods", api_group="apps")
    assert not allows(pods, verb="list", resource="pods")
    named = {**pods, "resourceNames": ["web"]}
    assert allows(named, resource="pods", name="web") and not allows(named, resource="pods", name="db")
    assert not allows({**named, "verbs": ["list"]}, verb="list", resource="pods")  # no name: never matches
    urls = {"nonResourceURLs": ["/healthz/*", "/version"], "verbs": ["get"]}
    assert allows(urls, path="/healthz/etcd") and allows(urls, path="/version")
    assert not allows(urls, path="/versions") and not allows(urls, verb="post", path="/version")


async def test_tls_with_ca_verification_admin_token_and_401(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    assert sim_cluster.url.startswith("https://127.0.0.1:")
    config = yaml.safe_load(await anyio.Path(kubectl.kubeconfig).read_text())
    assert config["clusters"][0]["cluster"]["certificate-authority-data"]
    assert "insecure-skip-tls-verify" not in config["clusters"][0]["cluster"]
    whoami = await kubectl.ok("auth", "whoami", "-o", "json")
    assert json.loads(whoami)["status"]["userInfo"] == {
        "username": "kubernetes-admin",
        "groups": ["system:masters", "system:authenticated"],
    }
    assert (await kubectl.ok("get", "nodes", "-o", "name")).split() == ["node/sim-node-0", "node/sim-node-1"]

    # No credentials: 401 with the real Status, over a connection that verified the server against the CA.
    context = ssl.create_default_context(cadata=sim_cluster.secure.ca_cert.decode())
    async with aiohttp.ClientSession() as http:
        for path in ("/api/v1/pods", "/version", "/_sim/requests", "/api/v1/watch/pods"):
            async with http.get(sim_cluster.url + path, ssl=context) as response:
                assert response.status == 401, path
                assert await response.json() == {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "Unauthorized",
                    "reason": "Unauthorized",
                    "code": 401,
                }
        async with http.get(
            sim_cluster.url + "/api/v1/pods", ssl=context, headers={"Authorization": "Bearer not-a-token"}
        ) as response:
            assert response.status == 401
    rc, _out, err = await as_token(kubectl, "not-a-token")("get", "pods")
    assert rc == 1 and "error: You must be logged in to the server (Unauthorized)" in err


async def test_service_account_token_rbac_and_403_texts(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    token = await new_token(kubectl, "bot")
    bot = as_token(kubectl, token)
    user = "system:serviceaccount:default:bot"
    # Discovery and the auth APIs work for any authenticated user (system:discovery, system:basic-user).
    whoami = json.loads(await bot.ok("auth", "whoami", "-o", "json"))["status"]["userInfo"]
    assert (
        whoami["username"] == user
        and whoami["uid"] == sim_cluster.store.get("serviceaccounts", "default", "bot")["metadata"]["uid"]
    )
    assert whoami["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]

    rc, _out, err = await bot("run", "web", "--image=nginx:1.27")
    assert rc == 1
    assert err.strip() == (
        f'Error from server (Forbidden): pods is forbidden: User "{user}" cannot create resource '
        '"pods" in API group "" in the namespace "default"'
    )
    rc, _out, err = await bot("get", "deployments", "-n", "kube-system")
    assert (
        f'deployments.apps is forbidden: User "{user}" cannot list resource "deployments" in API group "apps" '
        'in the namespace "kube-system"' in err
    )
    rc, _out, err = await bot("get", "nodes")
    assert f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" at the cluster scope' in err
    rc, _out, err = await bot("get", "--raw", "/_sim/requests")
    assert f'forbidden: User "{user}" cannot get path "/_sim/requests"' in err
    rc, out, _err = await bot("auth", "can-i", "list", "pods")
    assert (rc, out.strip()) == (1, "no")

    # view is aggregated from system:aggregate-to-view: binding it lets the bot read pods and logs.
    await kubectl.ok("create", "rolebinding", "bot-view", "--clusterrole=view", "--serviceaccount=default:bot")
    assert (await bot.ok("auth", "can-i", "list", "pods")).strip() == "yes"
    assert (await bot.ok("auth", "can-i", "get", "pods", "--subresource=log")).strip() == "yes"
    assert (await bot.ok("auth", "can-i", "watch", "deployments.apps")).strip() == "yes"
    rc, out, _err = await bot("auth", "can-i", "delete", "pods")
    assert (rc, out.strip()) == (1, "no")
    rc, out, _err = await bot("auth", "can-i", "list", "pods", "-n", "kube-system")
    assert (rc, out.strip()) == (1, "no")
    await bot.ok("get", "pods")
    await kubectl.ok("run", "web", "--image=nginx:1.27")
    watch = await bot.spawn("get", "pods", "-w", "-o", "name")
    try:
        assert watch.stdout is not None
        line = await watch.stdout.readline()
        assert line.decode().strip() == "pod/web"
    finally:
        watch.terminate()
        await watch.wait()
    # The log route is authorized as the pods/log subresource: view grants it; "get pods" alone does not.
    await eventually(
        lambda: (sim_cluster.store.get("pods", "default", "web") or {}).get("status", {}).get("phase") == "Running",
        timeout=20,
        what="pod web running",
    )
    assert (await bot.ok("logs", "web")).strip()
    reader = as_token(kubectl, await new_token(kubectl, "reader"))
    await kubectl.ok("create", "role", "pod-reader", "--verb=get", "--resource=pods")
    await kubectl.ok("create", "rolebinding", "reader", "--role=pod-reader", "--serviceaccount=default:reader")
    await reader.ok("get", "pod", "web")
    rc, _out, err = await reader("logs", "web")
    assert (
        rc == 1
        and 'pods "web" is forbidden: User "system:serviceaccount:default:reader" cannot get resource '
        '"pods/log" in API group "" in the namespace "default"'
        in err
    )
    listing = await bot.ok("auth", "can-i", "--list")
    assert "selfsubjectaccessreviews.authorization.k8s.io" in listing
    assert any(row.split()[0] == "pods" and "[get list watch]" in row for row in listing.splitlines())

    # A Role with resourceNames: exactly that object, and never a list.
    await kubectl.ok("create", "role", "one-secret", "--verb=get", "--resource=secrets", "--resource-name=a")
    await kubectl.ok("create", "rolebinding", "bot-one-secret", "--role=one-secret", "--serviceaccount=default:bot")
    await kubectl.ok("create", "secret", "generic", "a")
    await kubectl.ok("create", "secret", "generic", "b")
    await bot.ok("get", "secret", "a")
    rc, _out, err = await bot("get", "secret", "b")
    assert (
        f'secrets "b" is forbidden: User "{user}" cannot get resource "secrets" in API group "" in the '
        'namespace "default"' in err
    )
    # A binding to a role that does not exist explains itself.
    await kubectl.ok("create", "rolebinding", "bot-ghost", "--role=ghost", "--serviceaccount=default:bot")
    rc, _out, err = await bot("get", "secrets")
    assert err.strip().endswith(': RBAC: role.rbac.authorization.k8s.io "ghost" not found')

    # The aggregation controller keeps aggregated roles filled, also for roles added later.
    await kubectl.ok("create", "clusterrole", "widgets-view", "--verb=get", "--resource=configmaps")
    await kubectl.ok("label", "clusterrole", "widgets-view", "rbac.authorization.k8s.io/aggregate-to-view=true")

    def aggregated() -> bool:
        view = sim_cluster.store.get("clusterroles.rbac.authorization.k8s.io", None, "view")
        return {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]} in view["rules"]

    await eventually(aggregated, timeout=30, what="view to aggregate widgets-view")
    admin = sim_cluster.store.get("clusterroles.rbac.authorization.k8s.io", None, "admin")
    assert {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]} in admin["rules"]

    # Tokens die with their ServiceAccount.
    await kubectl.ok("delete", "serviceaccount", "bot")
    rc, _out, err = await bot("get", "pods")
    assert rc == 1 and "(Unauthorized)" in err


async def test_token_request_validation(kubectl: Kubectl) -> None:
    rc, _out, err = await kubectl("create", "token", "nope")
    assert rc == 1 and 'serviceaccounts "nope" not found' in err
    await kubectl.ok("create", "serviceaccount", "bot")
    rc, _out, err = await kubectl("create", "token", "bot", "--duration=1m")
    assert (
        rc == 1 and "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes" in err
    )
    request = json.loads(await kubectl.ok("create", "token", "bot", "--duration=2h", "-o", "json"))
    assert request["kind"] == "TokenRequest" and request["spec"]["expirationSeconds"] == 7200
    assert request["status"]["token"].count(".") == 2


async def test_rbac_objects_are_validated(kubectl: Kubectl) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "r"},
        "rules": [{"nonResourceURLs": ["/healthz"], "verbs": ["get"]}, {"resources": ["pods"], "verbs": []}],
    }
    rc, _out, err = await kubectl("create", "-f", "-", input=json.dumps(role))
    assert rc == 1
    assert (
        'rules[0].nonResourceURLs: Invalid value: []string{"/healthz"}: namespaced rules cannot apply to '
        "non-resource URLs" in err
    )
    assert "rules[1].verbs: Required value: verbs must contain at least one value" in err
    assert "rules[1].apiGroups: Required value: resource rules must supply at least one api group" in err
    await kubectl.ok("create", "rolebinding", "b", "--clusterrole=view", "--user=jane")
    rc, _out, err = await kubectl("patch", "rolebinding", "b", "--type=merge", "-p", '{"roleRef":{"name":"edit"}}')
    assert (
        rc == 1
        and 'roleRef: Invalid value: rbac.RoleRef{APIGroup:"rbac.authorization.k8s.io", '
        'Kind:"ClusterRole", Name:"edit"}: cannot change roleRef'
        in err
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "c"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "x"},
        "subjects": [{"kind": "ServiceAccount", "name": "bot"}],
    }
    rc, _out, err = await kubectl("create", "-f", "-", input=json.dumps(binding))
    assert rc == 1 and 'roleRef.kind: Unsupported value: "Role": supported values: "ClusterRole"' in err
    assert "subjects[0].namespace: Required value" in err


async def test_the_controllers_client_verifies_the_server_against_the_kubeconfig_ca(
    sim_cluster: SimCluster, tmp_path: Path
) -> None:
    """The controller's kubeconfig handling over TLS: the CA of the kubeconfig is what the server is
    verified against (another CA fails the handshake), and a ServiceAccount kubeconfig works."""
    stranger = SecureMaterial.generate("127.0.0.1")
    path = tmp_path / "wrong-ca"
    path.write_text(
        yaml.safe_dump(
            kubeconfig_document(
                sim_cluster.url, ca_cert=stranger.ca_cert, user={"token": sim_cluster.secure.admin_token}
            )
        )
    )
    client = await ApiClient.from_kubeconfig(str(path), retry=RetryPolicy(max_attempts=1))
    try:
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.list(PODS, namespace="default")
    finally:
        await client.close()

    sim_cluster.store.create("serviceaccounts", "default", {"metadata": {"name": "reader"}})
    config = yaml.safe_load(
        await anyio.Path(sim_cluster.service_account_kubeconfig(tmp_path / "sa", "default", "reader")).read_text()
    )
    assert config["clusters"][0]["cluster"]["certificate-authority-data"] and config["users"][0]["user"]["token"]
    client = await ApiClient.from_kubeconfig(str(tmp_path / "sa"), retry=RetryPolicy(max_attempts=1))
    try:
        with pytest.raises(Forbidden):
            await client.list(PODS, namespace="default")
    finally:
        await client.close()
