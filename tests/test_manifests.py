"""Deployment artefacts hang together: the Kubernetes manifests and the Dockerfile.

Nothing here can run a cluster or a Docker build, so the tests check what would break them: names,
namespaces and selectors that must match across files, container args that must be flags the CLI
accepts, RBAC that must cover what the controller does. The monitoring artefacts (grafana/,
manifests/monitoring/) are tested in tests/ops/test_monitoring.py.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

import yaml

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"
DOCKERFILE = REPO / "Dockerfile"

CONTROLLER_NAMESPACE = "tfjob-controller"
SERVICE_ACCOUNT = "tfjob-controller"

# The CLI contract from the TFJob issue: `tfjob-controller run --kubeconfig PATH [--namespace NS]...
# [--workers N] [--metrics-addr HOST:PORT] [--health-addr HOST:PORT]`.
CLI_FLAGS = {"--kubeconfig", "--namespace", "--workers", "--metrics-addr", "--health-addr"}

# --------------------------------------------------------------------------------------------
# Kubernetes manifests.

MONITORING = MANIFESTS / "monitoring"  # its own kustomization, deliberately not part of the base install

def _base_manifests() -> list[Path]:
    return sorted(path for path in MANIFESTS.rglob("*.yaml") if MONITORING not in path.parents)

@functools.cache
def _manifest_objects() -> tuple[tuple[Path, dict[str, Any]], ...]:
    # Parsed once: the CRD alone is 200 KB of YAML. Callers must not mutate the objects.
    objects = []
    for path in _base_manifests():
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                objects.append((path, document))
    return tuple(objects)

def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [obj for _, obj in _manifest_objects() if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]

def test_every_manifest_has_identity_and_the_right_namespace() -> None:
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for path, obj in _manifest_objects():
        assert obj.get("apiVersion") and obj.get("kind") and obj["metadata"].get("name"), path
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], path
        else:
            assert obj["metadata"]["namespace"] == CONTROLLER_NAMESPACE, path
    assert _one("Namespace")["metadata"]["name"] == CONTROLLER_NAMESPACE

def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    on_disk = sorted(str(path.relative_to(MANIFESTS)) for path in _base_manifests() if path.name != "kustomization.yaml")
    assert sorted(listed) == on_disk
    # The namespace must exist before anything is created in it.
    assert listed[0] == "deployment/namespace.yaml"

def test_kubectl_kustomize_renders_the_whole_install() -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not on PATH: install it (the test suite needs the real kubectl)"
    result = subprocess.run([kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(result.stdout) if doc)
    assert kinds == sorted(
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
        ]
    )

def _controller_container() -> dict[str, Any]:
    [container] = _one("Deployment", "tfjob-controller")["spec"]["template"]["spec"]["containers"]
    return container

def _parse_args(args: list[str]) -> tuple[str, dict[str, list[str]]]:
    """``[subcommand, --flag, value | --flag=value, ...]`` -> (subcommand, {flag: [values]})."""
    subcommand, *rest = args
    flags: dict[str, list[str]] = {}
    tokens = iter(rest)
    for token in tokens:
        assert token.startswith("--"), f"unexpected positional argument {token!r}"
        flag, sep, value = token.partition("=")
        flags.setdefault(flag, []).append(value if sep else next(tokens))
    return subcommand, flags

def test_deployment_runs_the_cli_with_the_documented_flags() -> None:
    container = _controller_container()
    assert "command" not in container, "the image ENTRYPOINT (tfjob-controller) must stay in charge"
    subcommand, flags = _parse_args(container["args"])
    assert subcommand == "run"
    assert set(flags) <= CLI_FLAGS, set(flags) - CLI_FLAGS
    assert flags["--metrics-addr"] == ["0.0.0.0:8080"]
    assert flags["--health-addr"] == ["0.0.0.0:8081"]
    assert "--kubeconfig" not in flags, "in-cluster configuration is the default without --kubeconfig"

def test_deployment_args_parse_with_the_real_cli() -> None:
    from controller.cli import build_parser

    options = build_parser().parse_args(_controller_container()["args"])
    assert options.command == "run"
    assert options.metrics_addr == ("0.0.0.0", 8080)
    assert options.health_addr == ("0.0.0.0", 8081)
    assert options.kubeconfig is None
    # One Deployment may run several replicas: only the Lease holder may act.
    assert options.leader_elect is True

def test_deployment_env_sets_the_api_limits_the_cli_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from controller.app import DEFAULT_KUBE_API_BURST, DEFAULT_KUBE_API_QPS
    from controller.cli import KUBE_API_BURST_ENV, KUBE_API_QPS_ENV, build_parser

    env = {e["name"]: e["value"] for e in _controller_container()["env"]}
    assert float(env[KUBE_API_QPS_ENV]) == DEFAULT_KUBE_API_QPS  # the manifest says what the default is
    assert int(env[KUBE_API_BURST_ENV]) == DEFAULT_KUBE_API_BURST
    monkeypatch.setenv(KUBE_API_QPS_ENV, "123.5")
    monkeypatch.setenv(KUBE_API_BURST_ENV, "77")
    options = build_parser().parse_args(_controller_container()["args"])
    assert (options.kube_api_qps, options.kube_api_burst) == (123.5, 77)
    # a flag overrides the environment
    options = build_parser().parse_args([*_controller_container()["args"], "--kube-api-qps", "9"])
    assert options.kube_api_qps == 9


def test_ports_probes_and_service_agree_with_the_flags() -> None:
    container = _controller_container()
    _, flags = _parse_args(container["args"])
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["metrics"] == int(flags["--metrics-addr"][0].rsplit(":", 1)[1])
    assert ports["health"] == int(flags["--health-addr"][0].rsplit(":", 1)[1])
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    service = _one("Service", "tfjob-controller-metrics")
    [service_port] = service["spec"]["ports"]
    assert service_port["targetPort"] in ports
    assert service_port["targetPort"] == "metrics"
    pod_labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()

def test_deployment_selector_resources_and_security() -> None:
    deployment = _one("Deployment", "tfjob-controller")
    template = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    pod = template["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == _dockerfile_user_uid()
    container = _controller_container()
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}
    assert "memory" in container["resources"]["limits"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # The controller reads its Lease namespace from the mounted service-account token.
    assert pod.get("automountServiceAccountToken", True) is True

def test_service_account_and_bindings_match() -> None:
    account = _one("ServiceAccount", SERVICE_ACCOUNT)
    assert account["metadata"]["namespace"] == CONTROLLER_NAMESPACE
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": CONTROLLER_NAMESPACE}
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = _one(binding_kind)
        assert binding["subjects"] == [subject]
        assert binding["roleRef"]["kind"] == role_kind
        role = _one(role_kind, binding["roleRef"]["name"])
        if role_kind == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == CONTROLLER_NAMESPACE

def _permissions(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted

def test_cluster_role_grants_what_the_controller_needs_and_no_more() -> None:
    assert _permissions(_one("ClusterRole", "tfjob-controller")) == {
        ("kubeflow.org", "tfjobs"): {"get", "list", "watch", "update", "patch", "delete"},
        ("kubeflow.org", "tfjobs/status"): {"get", "update", "patch"},
        ("kubeflow.org", "tfjobs/scale"): {"get"},
        # blockOwnerDeletion on the pods' and services' ownerReferences needs this.
        ("kubeflow.org", "tfjobs/finalizers"): {"update"},
        ("", "pods"): {"get", "list", "watch", "create", "delete"},
        ("", "services"): {"get", "list", "watch", "create", "delete"},
        ("", "events"): {"create", "patch"},
        ("events.k8s.io", "events"): {"create", "patch"},
    }

def test_leader_election_role_is_limited_to_leases() -> None:
    role = _one("Role", "tfjob-controller-leader-election")
    assert _permissions(role) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}

def test_crd_manifest_is_the_tfjob_crd() -> None:
    crd = _one("CustomResourceDefinition")
    assert crd["metadata"]["name"] == "tfjobs.kubeflow.org"

# --------------------------------------------------------------------------------------------
# Dockerfile (no Docker engine here: check it is coherent).

def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    instructions = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            instructions.append((keyword.upper(), rest.strip()))
    return instructions

def _dockerfile_user_uid() -> int:
    users = [rest for keyword, rest in _dockerfile_instructions() if keyword == "USER"]
    assert users, "the Dockerfile must set a USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), f"USER must be numeric for runAsNonRoot, got {uid!r}"
    return int(uid)

def test_dockerfile_is_coherent() -> None:
    instructions = _dockerfile_instructions()
    keywords = [keyword for keyword, _ in instructions]
    assert instructions[0] == ("FROM", "python:3.11-slim")
    assert _dockerfile_user_uid() != 0
    # Install as root, then drop privileges: the last USER comes after every RUN.
    last_user = max(i for i, keyword in enumerate(keywords) if keyword == "USER")
    assert all(i < last_user for i, keyword in enumerate(keywords) if keyword == "RUN")
    runs = " ".join(rest for keyword, rest in instructions if keyword == "RUN")
    assert re.search(r"pip install \.(\s|$)", runs), "the image installs the package itself"
    assert "[sim]" not in runs and "[test]" not in runs, "no simulator or test extras in the image"
    entrypoint = json.loads(dict(instructions)["ENTRYPOINT"])
    assert entrypoint == ["tfjob-controller"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert entrypoint[0] in scripts, "ENTRYPOINT must be a console script of the package"
    assert json.loads(dict(instructions)["CMD"]) == ["run"]
    for keyword, rest in instructions:
        if keyword == "COPY":
            *sources, _destination = rest.split()
            for source in sources:
                assert (REPO / source).exists(), f"COPY source {source} does not exist"
