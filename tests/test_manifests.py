"""Deployment artefacts hang together: the Kubernetes manifests and the Dockerfile's user.

Nothing here can run a cluster or a Docker build, so the tests check what would break them: names,
namespaces and selectors that must match across what `kubectl kustomize manifests/` renders, container
args that must be flags the CLI accepts, every object valid against the Kubernetes 1.32 schemas, the
restricted Pod Security profile, high availability, RBAC. The monitoring artefacts (grafana/,
manifests/monitoring/) are tested in tests/ops/test_monitoring.py, the image in tests/test_image.py.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

from tests.test_image import instructions
from tfjob_sim.testing.kubectl import kubectl_binary

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"
DOCKERFILE = REPO / "Dockerfile"

CONTROLLER_NAMESPACE = "tfjob-controller"
SERVICE_ACCOUNT = "tfjob-controller"

# The CLI contract from the TFJob issue: `tfjob-controller run --kubeconfig PATH [--namespace NS]...
# [--workers N] [--metrics-addr HOST:PORT] [--health-addr HOST:PORT]`.
CLI_FLAGS = {"--kubeconfig", "--namespace", "--workers", "--metrics-addr", "--health-addr", "--leader-elect"}

KUBERNETES_VERSION = "1.32.0"


# --------------------------------------------------------------------------------------------
# Kubernetes manifests.


def _kubectl() -> str:
    return kubectl_binary()


@functools.cache
def _rendered() -> str:
    """What `kubectl apply -k manifests/` applies: the kustomization as kubectl renders it."""
    result = subprocess.run([_kubectl(), "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@functools.cache
def _manifest_objects() -> tuple[tuple[str, dict[str, Any]], ...]:
    # Parsed once: the CRD alone is 200 KB of YAML. Callers must not mutate the objects.
    return tuple((f"{doc['kind']}/{doc['metadata']['name']}", doc) for doc in yaml.safe_load_all(_rendered()) if doc)


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        obj
        for _, obj in _manifest_objects()
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def test_every_manifest_has_identity_and_the_right_namespace() -> None:
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    for where, obj in _manifest_objects():
        assert obj.get("apiVersion") and obj.get("kind") and obj["metadata"].get("name"), where
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], where
        else:
            assert obj["metadata"]["namespace"] == CONTROLLER_NAMESPACE, where
    assert _one("Namespace")["metadata"]["name"] == CONTROLLER_NAMESPACE


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    listed = kustomization["resources"]
    # Directories with a kustomization of their own (examples/, monitoring/) are applied separately.
    separate = {path.parent for path in MANIFESTS.rglob("kustomization.yaml") if path.parent != MANIFESTS}
    on_disk = sorted(
        str(path.relative_to(MANIFESTS))
        for path in MANIFESTS.rglob("*.yaml")
        if path.name != "kustomization.yaml" and not any(path.is_relative_to(d) for d in separate)
    )
    assert sorted(listed) == on_disk
    # The namespace must exist before anything is created in it.
    assert listed[0] == "deployment/namespace.yaml"


def test_kubectl_kustomize_renders_the_whole_install() -> None:
    kinds = sorted(obj["kind"] for _, obj in _manifest_objects())
    assert kinds == sorted(
        [
            "Namespace",
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "PodDisruptionBudget",
        ]
    )


def _kubernetes_validate(path: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "kubernetes-validate"
    assert tool.exists(), "kubernetes-validate is part of the test extra: pip install -e '.[test]'"
    return subprocess.run(
        [str(tool), "--kubernetes-version", KUBERNETES_VERSION, "--strict", "--quiet", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_rendered_object_validates_against_kubernetes_1_32(tmp_path: Path) -> None:
    rendered = tmp_path / "install.yaml"
    rendered.write_text(_rendered())
    result = _kubernetes_validate(rendered)
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), (
        result.stdout + result.stderr
    )


def test_kubernetes_validate_rejects_a_broken_object(tmp_path: Path) -> None:
    # The validation must be able to fail, or the test above proves nothing: a misspelt field
    # (strict mode) and a wrong type.
    broken = yaml.safe_load(
        "\n".join(doc for doc in _rendered().split("\n---\n") if "kind: PodDisruptionBudget" in doc)
    )
    broken["spec"]["minAvailabel"] = 1
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    result = _kubernetes_validate(path)
    assert result.returncode != 0 and "minAvailabel" in result.stdout + result.stderr


def test_namespace_enforces_the_restricted_pod_security_profile() -> None:
    labels = _one("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


def test_controller_pod_meets_the_restricted_profile() -> None:
    # What Pod Security admission's `restricted` level checks on this pod (kubernetes.io/docs/concepts/
    # security/pod-security-standards): non-root, no privilege escalation, only NET_BIND_SERVICE may be
    # added after dropping ALL, RuntimeDefault/Localhost seccomp, no host namespaces, ports or volumes.
    pod = _one("Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] in {"RuntimeDefault", "Localhost"}
    assert not {"hostNetwork", "hostPID", "hostIPC", "volumes"} & pod.keys()
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert set(context["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}
        assert context.get("privileged", False) is False
        assert all("hostPort" not in port for port in container["ports"])


def test_deployment_is_highly_available() -> None:
    deployment = _one("Deployment", "tfjob-controller")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    # A rollout starts the new pod before it stops an old one.
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod_labels = spec["template"]["metadata"]["labels"]
    budget = _one("PodDisruptionBudget", "tfjob-controller")
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    # Soft spreading across nodes: preferred anti-affinity on the hostname (a one-node cluster still runs both).
    [term] = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
    for constraint in spec["template"]["spec"]["topologySpreadConstraints"]:
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
        assert constraint["labelSelector"]["matchLabels"].items() <= pod_labels.items()


def _controller_container() -> dict[str, Any]:
    [container] = _one("Deployment", "tfjob-controller")["spec"]["template"]["spec"]["containers"]
    return container


def test_deployment_runs_the_released_image_of_this_version() -> None:
    """The image `kubectl apply -k manifests/` runs is the one the release workflow pushes for the package version:
    a public registry path every node can pull, tagged with the version in pyproject.toml."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    released = yaml.safe_load((REPO / ".github" / "workflows" / "release.yml").read_text())["env"]["IMAGE"]
    assert released == "ghcr.io/tfjob-controller/tfjob-controller"
    assert _controller_container()["image"] == f"{released}:{version}"
    # Also when deployment.yaml is applied alone, without kustomize.
    [container] = yaml.safe_load((MANIFESTS / "deployment" / "deployment.yaml").read_text())["spec"]["template"][
        "spec"
    ]["containers"]
    assert container["image"] == f"{released}:{version}"


def _parse_args(args: list[str]) -> tuple[str, dict[str, list[str]]]:
    """``[subcommand, --flag, value | --flag=value, ...]`` -> (subcommand, {flag: [values]})."""
    subcommand, *rest = args
    flags: dict[str, list[str]] = {}
    for i, token in enumerate(rest):
        if not token.startswith("--"):
            assert i > 0 and rest[i - 1].startswith("--") and "=" not in rest[i - 1], f"stray argument {token!r}"
            continue
        flag, sep, value = token.partition("=")
        following = rest[i + 1] if i + 1 < len(rest) else None
        # A switch (--leader-elect) takes no value: the next token is another flag.
        takes_value = not sep and following is not None and not following.startswith("--")
        flags.setdefault(flag, []).append(value if sep else following if takes_value else "")
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
    from controller.cli import parse_args

    options = parse_args(_controller_container()["args"], environ={})
    assert options.command == "run"
    assert options.metrics_addr == ("0.0.0.0", 8080)
    assert options.health_addr == ("0.0.0.0", 8081)
    assert options.kubeconfig is None
    # One Deployment may run several replicas: only the Lease holder may act.
    assert options.leader_elect is True


def test_deployment_env_sets_the_api_limits_the_cli_reads() -> None:
    from controller.app import DEFAULT_KUBE_API_BURST, DEFAULT_KUBE_API_QPS
    from controller.cli import parse_args

    env = {e["name"]: e["value"] for e in _controller_container()["env"]}
    # the manifest says the default: no client-side limit on a server with API Priority and Fairness
    assert env["TFJOB_CONTROLLER_KUBE_API_QPS"] == DEFAULT_KUBE_API_QPS == "auto"
    assert env["TFJOB_CONTROLLER_KUBE_API_BURST"] == DEFAULT_KUBE_API_BURST == "auto"
    options = parse_args(_controller_container()["args"], environ=env)
    assert (options.kube_api_qps, options.kube_api_burst) == ("auto", "auto")
    changed = {"TFJOB_CONTROLLER_KUBE_API_QPS": "123.5", "TFJOB_CONTROLLER_KUBE_API_BURST": "77"}
    options = parse_args(_controller_container()["args"], environ=changed)
    assert (options.kube_api_qps, options.kube_api_burst) == (123.5, 77)
    # a flag overrides the environment
    options = parse_args([*_controller_container()["args"], "--kube-api-qps", "9"], environ=changed)
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
    # tests/e2e/test_rbac.py proves these from the requests the controller issues; this pins the file.
    assert _permissions(_one("ClusterRole", "tfjob-controller")) == {
        ("kubeflow.org", "tfjobs"): {"list", "watch", "delete"},
        ("kubeflow.org", "tfjobs/status"): {"update"},
        # blockOwnerDeletion on the pods' and services' ownerReferences needs this.
        ("kubeflow.org", "tfjobs/finalizers"): {"update"},
        ("", "pods"): {"list", "watch", "create", "delete"},
        ("", "services"): {"list", "watch", "create", "delete"},
        ("", "events"): {"create", "patch"},
    }


def test_user_roles_aggregate_into_edit_and_view() -> None:
    edit, view = _one("ClusterRole", "tfjob-edit"), _one("ClusterRole", "tfjob-view")
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    edit_permissions = _permissions(edit)
    assert edit_permissions[("kubeflow.org", "tfjobs")] >= {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
    }
    # `kubectl scale tfjob/NAME` reads and writes the scale subresource.
    assert edit_permissions[("kubeflow.org", "tfjobs/scale")] >= {"get", "update", "patch"}
    # The status is the controller's: users read it and cannot write it.
    assert edit_permissions[("kubeflow.org", "tfjobs/status")] == {"get"}
    for permission, verbs in _permissions(view).items():
        assert verbs <= {"get", "list", "watch"}, permission
    assert ("kubeflow.org", "tfjobs") in _permissions(view)


def test_leader_election_role_is_limited_to_leases() -> None:
    role = _one("Role", "tfjob-controller-leader-election")
    assert _permissions(role) == {("coordination.k8s.io", "leases"): {"get", "create", "update", "watch"}}


def test_crd_manifest_is_the_tfjob_crd() -> None:
    crd = _one("CustomResourceDefinition")
    assert crd["metadata"]["name"] == "tfjobs.kubeflow.org"


# --------------------------------------------------------------------------------------------
# The Dockerfile's user (tests/test_image.py checks the rest of the image).


def _dockerfile_user_uid() -> int:
    users = [rest for keyword, rest in instructions(DOCKERFILE.read_text()) if keyword == "USER"]
    assert users, "the Dockerfile must set a USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), f"USER must be numeric for runAsNonRoot, got {uid!r}"
    return int(uid)


# --------------------------------------------------------------------------------------------
# Gang scheduling: kustomize components that add PodGroup RBAC and the flag, and nothing else.

GANG_COMPONENTS = {
    "gang-volcano": ("scheduling.volcano.sh", "volcano"),
    "gang-scheduler-plugins": ("scheduling.x-k8s.io", "scheduler-plugins-scheduler"),
}


def _rendered_with(component: str, workdir: str) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize` of a user's kustomization: the install plus one gang component (relative paths, as
    kustomize requires)."""
    root = Path(workdir) / component
    root.mkdir(parents=True)
    relative = Path(*[".."] * len(root.parts[1:])) / Path(*MANIFESTS.parts[1:])
    (root / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(relative)],
                "components": [str(relative / "components" / component)],
            }
        )
    )
    result = subprocess.run([_kubectl(), "kustomize", str(root)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def test_gang_components_add_podgroup_rbac_and_the_flag_and_nothing_else(tmp_path: Path) -> None:
    from controller.cli import parse_args

    plain = {(obj["kind"], obj["metadata"]["name"]): obj for _, obj in _manifest_objects()}
    for component, (group, scheduler) in GANG_COMPONENTS.items():
        objects = {(obj["kind"], obj["metadata"]["name"]): obj for obj in _rendered_with(component, str(tmp_path))}
        role_name = f"tfjob-controller-{component}"
        assert objects.keys() - plain.keys() == {("ClusterRole", role_name), ("ClusterRoleBinding", role_name)}
        assert _permissions(objects[("ClusterRole", role_name)]) == {
            (group, "podgroups"): {"list", "watch", "create", "update", "delete"}
        }
        binding = objects[("ClusterRoleBinding", role_name)]
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name}
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": CONTROLLER_NAMESPACE}
        ]
        deployment = objects[("Deployment", "tfjob-controller")]
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TFJOB_CONTROLLER_GANG_SCHEDULER_NAME"] == scheduler
        # Only that variable was added; everything else is the plain install.
        plain_container = _controller_container()
        assert {k: v for k, v in env.items() if k != "TFJOB_CONTROLLER_GANG_SCHEDULER_NAME"} == {
            e["name"]: e["value"] for e in plain_container["env"]
        }
        assert parse_args(container["args"], environ=env).gang_scheduler_name == scheduler
        for key, obj in plain.items():
            if key != ("Deployment", "tfjob-controller"):
                assert objects[key] == obj, key
        # The plain install grants nothing on PodGroups.
        assert not any(
            resource == "podgroups"
            for role in (obj for obj in plain.values() if obj["kind"] == "ClusterRole")
            for (_, resource) in _permissions(role)
        )
        rendered = tmp_path / f"{component}.yaml"
        rendered.write_text(yaml.safe_dump_all(objects.values()))
        result = _kubernetes_validate(rendered)
        assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
