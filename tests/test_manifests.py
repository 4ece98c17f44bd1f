"""Deployment artefacts hang together: the Kubernetes manifests, the Dockerfile, the Grafana dashboard
and the Prometheus alerts.

Nothing here can run a cluster, a Docker build or Grafana, so the tests check what would break them:
names, namespaces and selectors that must match across files, container args that must be flags the
CLI accepts, RBAC that must cover what the controller does, and PromQL that must at least parse and
name metrics the controller exports (KNOWN_METRICS, cross-checked against the metric registry by the
lead).
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
DASHBOARD = REPO / "grafana" / "tfjob-controller.json"
ALERTS = REPO / "grafana" / "alerts.yaml"
DOCKERFILE = REPO / "Dockerfile"

CONTROLLER_NAMESPACE = "tfjob-controller"
SERVICE_ACCOUNT = "tfjob-controller"

# Every metric family the dashboard and alerts may use (histograms by base name).
KNOWN_METRICS = frozenset(
    {
        "training_operator_jobs_created_total",
        "training_operator_jobs_successful_total",
        "training_operator_jobs_failed_total",
        "training_operator_jobs_restarted_total",
        "training_operator_jobs_deleted_total",
        "tfjob_worker_failovers_total",
        "tfjob_worker_scaled_down_total",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_errors_total",
        "controller_runtime_reconcile_time_seconds",
        "controller_runtime_active_workers",
        "controller_runtime_max_concurrent_reconciles",
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
        "workqueue_retries_total",
        "rest_client_requests_total",
        "rest_client_request_duration_seconds",
        "informer_watch_restarts_total",
        "informer_relists_total",
        "informer_events_total",
        "informer_last_event_timestamp_seconds",
        "informer_cache_objects",
        "leader_election_master_status",
    }
)

# The CLI contract from the TFJob issue: `tfjob-controller run --kubeconfig PATH [--namespace NS]...
# [--workers N] [--metrics-addr HOST:PORT] [--health-addr HOST:PORT]`.
CLI_FLAGS = {"--kubeconfig", "--namespace", "--workers", "--metrics-addr", "--health-addr"}


# --------------------------------------------------------------------------------------------
# PromQL checks (syntax-level: balanced brackets outside strings, metric names known).

_PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
}
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _strip_strings(expr: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def check_balanced(expr: str) -> None:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for char in _strip_strings(expr):
        if char in "([{":
            stack.append(char)
        elif char in pairs:
            assert stack and stack[-1] == pairs[char], f"unbalanced {char!r} in {expr!r}"
            stack.pop()
    assert not stack, f"unclosed {stack} in {expr!r}"


def metric_names(expr: str) -> set[str]:
    text = _strip_strings(expr)
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # range selectors and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        name, is_call = match.group(1), match.group(2)
        if is_call or name in _PROMQL_KEYWORDS:
            continue
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in KNOWN_METRICS:
                name = name[: -len(suffix)]
        names.add(name)
    return names


def test_promql_checker_catches_mistakes() -> None:
    # The checker itself must be able to fail, or the dashboard tests prove nothing.
    with pytest.raises(AssertionError):
        check_balanced('sum(rate(workqueue_adds_total[5m])')
    with pytest.raises(AssertionError):
        check_balanced('sum by (name) (workqueue_depth{name="a"))')
    check_balanced('sum(rate(x{le="(("}[5m]))')
    assert metric_names(
        'histogram_quantile(0.99, sum by (name, le) (rate(workqueue_work_duration_seconds_bucket{a="b"}[5m])))'
    ) == {"workqueue_work_duration_seconds"}
    assert metric_names("time() - max by (resource) (informer_last_event_timestamp_seconds) > 1e-9") == {
        "informer_last_event_timestamp_seconds"
    }
    assert metric_names("sum(rate(workqueue_addz_total[5m]))") == {"workqueue_addz_total"}


# --------------------------------------------------------------------------------------------
# Grafana dashboard.


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _panels() -> list[dict[str, Any]]:
    return [panel for panel in _dashboard()["panels"] if panel["type"] != "row"]


def _rows() -> dict[str, list[dict[str, Any]]]:
    """Row title -> the panels under it (panels follow their row in the flat panel list)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    current = None
    for panel in _dashboard()["panels"]:
        if panel["type"] == "row":
            current = panel["title"]
            rows[current] = []
        else:
            assert current is not None, f"panel {panel['title']!r} is outside any row"
            rows[current].append(panel)
    return rows


def test_dashboard_variables() -> None:
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] >= 36
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    namespace = variables["namespace"]
    assert namespace["type"] == "query" and namespace["includeAll"] and namespace["multi"]
    assert "job_namespace" in namespace["definition"]


def test_dashboard_rows_are_the_documented_ones() -> None:
    assert list(_rows()) == [
        "Jobs",
        "Dynamic workers — why did my job change",
        "Reconcile",
        "Work queue",
        "API server",
        "Informers",
        "Leader election",
    ]


def test_every_panel_uses_the_datasource_variable_and_has_queries() -> None:
    ids = [panel["id"] for panel in _dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    for panel in _panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_panels_do_not_overlap_and_fit_the_grid() -> None:
    occupied: set[tuple[int, int]] = set()
    for panel in _dashboard()["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & occupied, f"{panel['title']!r} overlaps another panel"
        occupied |= cells


def test_every_dashboard_expression_parses_and_names_known_metrics() -> None:
    for panel in _panels():
        for target in panel["targets"]:
            expr = target["expr"]
            check_balanced(expr)
            names = metric_names(expr)
            assert names, f"{panel['title']!r}: no metric in {expr!r}"
            assert names <= KNOWN_METRICS, f"{panel['title']!r}: unknown metrics {names - KNOWN_METRICS}"
            for variable in re.findall(r"\$\{?(\w+)", expr):
                assert variable in {"namespace", "__rate_interval", "__range"}, (panel["title"], variable)


def test_job_metrics_are_filtered_by_the_namespace_variable() -> None:
    rows = _rows()
    for row in ("Jobs", "Dynamic workers — why did my job change"):
        for panel in rows[row]:
            for target in panel["targets"]:
                assert 'job_namespace=~"$namespace"' in target["expr"], panel["title"]


def _row_metrics(row: str) -> set[str]:
    return {name for panel in _rows()[row] for target in panel["targets"] for name in metric_names(target["expr"])}


@pytest.mark.parametrize(
    "row, required",
    [
        ("Jobs", {f"training_operator_jobs_{kind}_total" for kind in ("created", "successful", "failed", "restarted", "deleted")}),
        ("Dynamic workers — why did my job change", {"tfjob_worker_failovers_total", "tfjob_worker_scaled_down_total"}),
        (
            "Reconcile",
            {
                "controller_runtime_reconcile_total",
                "controller_runtime_reconcile_errors_total",
                "controller_runtime_reconcile_time_seconds",
                "controller_runtime_active_workers",
            },
        ),
        (
            "Work queue",
            {
                "workqueue_depth",
                "workqueue_adds_total",
                "workqueue_queue_duration_seconds",
                "workqueue_work_duration_seconds",
                "workqueue_retries_total",
                "workqueue_unfinished_work_seconds",
                "workqueue_longest_running_processor_seconds",
            },
        ),
        ("API server", {"rest_client_requests_total", "rest_client_request_duration_seconds"}),
        (
            "Informers",
            {
                "informer_watch_restarts_total",
                "informer_relists_total",
                "informer_events_total",
                "informer_last_event_timestamp_seconds",
                "informer_cache_objects",
            },
        ),
        ("Leader election", {"leader_election_master_status"}),
    ],
)
def test_each_row_shows_its_metrics(row: str, required: set[str]) -> None:
    assert required <= _row_metrics(row)


def test_staleness_panel_is_seconds_since_the_last_event() -> None:
    [panel] = [p for p in _rows()["Informers"] if "last_event_timestamp" in p["targets"][0]["expr"]]
    assert panel["targets"][0]["expr"].startswith("time() - ")
    assert panel["fieldConfig"]["defaults"]["unit"] == "s"


# --------------------------------------------------------------------------------------------
# Prometheus alerting rules (promtool checks them in CI; here: shape and metric names).


def test_alert_rules_are_well_formed() -> None:
    document = yaml.safe_load(ALERTS.read_text())
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}, rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        check_balanced(rule["expr"])
        assert metric_names(rule["expr"]) <= KNOWN_METRICS, rule["alert"]


def test_alerts_cover_the_failure_modes() -> None:
    document = yaml.safe_load(ALERTS.read_text())
    by_metric = {
        name: rule["alert"]
        for group in document["groups"]
        for rule in group["rules"]
        for name in metric_names(rule["expr"])
    }
    for metric in (
        "controller_runtime_reconcile_errors_total",
        "workqueue_depth",
        "informer_last_event_timestamp_seconds",
        "tfjob_worker_failovers_total",
    ):
        assert metric in by_metric, metric


# --------------------------------------------------------------------------------------------
# Kubernetes manifests.


@functools.cache
def _manifest_objects() -> tuple[tuple[Path, dict[str, Any]], ...]:
    # Parsed once: the CRD alone is 200 KB of YAML. Callers must not mutate the objects.
    objects = []
    for path in sorted(MANIFESTS.rglob("*.yaml")):
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
    on_disk = sorted(str(path.relative_to(MANIFESTS)) for path in MANIFESTS.rglob("*.yaml") if path.name != "kustomization.yaml")
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
