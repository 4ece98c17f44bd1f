"""The monitoring artefacts hang together: catalogue, dashboards, alerting rules, runbook, kube-prometheus
manifests. (That they tell the truth against a real Prometheus is tests/ops/test_prometheus.py.)

- the committed files are exactly what ``python -m generators.monitoring`` generates, and the dashboards are
  Grafana's typed schema as the Grafana Foundation SDK reads it, with every panel where Grafana shows it;
- every catalogued metric is used by a panel or an alert, and every metric a panel or alert uses is catalogued
  (the live test checks the catalogue against what the controller really exports);
- every query is scoped to this controller (job, namespace; rules: job="tfjob-controller"), so a foreign
  component exporting the same names can neither hide nor fake anything;
- promtool accepts the rules and their unit tests pass, with a firing and a quiet case for every alert;
- ``kubectl kustomize manifests/monitoring/`` renders, and what it renders is the rules file and the dashboards.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from generators import grafana, monitoring
from generators.alerts import ALERTS, RUNBOOK_URL
from generators.catalogue import BY_NAME, CATALOGUE, SYNTHETIC
from generators.dashboards import CONTROLLER_HEALTH, DASHBOARDS, TRAINING_JOBS, Dashboard, Panel, Query, Row
from generators.promql import SCRAPE_JOB, metric_names

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "grafana"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is required on PATH (.ci/run installs it)", pytrace=False)
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO)


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric, matchers) of every selector; a metric written without braces has matchers ``""``."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: "_" * len(m.group(0)), expr)  # keep offsets
    found = []
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{)?", text):
        name = match.group(1)
        if name not in metric_names(name):
            continue  # a function, keyword or grouping label
        if match.group(2):
            end = text.index("}", match.end())
            found.append((name, expr[match.end() : end]))
        elif not re.match(r"\s*\(", text[match.end() :]) and name in metric_names(expr):
            found.append((name, ""))
    return found


def _dashboard_exprs() -> list[tuple[str, str, str]]:
    return [(d.uid, p.title, q.expr) for d in DASHBOARDS for p in d.panels() for q in p.queries]


def test_generated_files_are_up_to_date() -> None:
    stale = [
        str(path) for path, content in monitoring.generated_files().items() if (REPO / path).read_text() != content
    ]
    assert not stale, f"run `python -m generators.monitoring`: {stale}"


def test_the_check_command_passes_on_this_checkout_and_names_what_is_stale(tmp_path: Path) -> None:
    # What CI runs: `python -m generators.monitoring --check` (exit 1 naming each stale file; nothing written).
    command = [sys.executable, "-m", "generators.monitoring", "--check"]
    assert _run(*command).returncode == 0
    (tmp_path / "grafana").mkdir()
    (tmp_path / "grafana" / "training-jobs.json").write_text("{}\n")
    stale = _run(*command, "--root", str(tmp_path))
    assert stale.returncode == 1 and "grafana/training-jobs.json" in stale.stderr, stale.stderr
    assert (tmp_path / "grafana" / "training-jobs.json").read_text() == "{}\n"
    assert _run(sys.executable, "-m", "generators.monitoring", "--root", str(tmp_path)).returncode == 0
    assert _run(*command, "--root", str(tmp_path)).returncode == 0


def test_the_dashboards_are_grafanas_typed_schema() -> None:
    # Decoded into the SDK's typed models (every panel and query by its plugin) and encoded again, each committed
    # dashboard comes back unchanged: no field outside the schema, none of the wrong type.
    register_default_plugins()
    for dashboard in DASHBOARDS:
        document = json.loads((GRAFANA / dashboard.file).read_text())
        typed = DashboardModel.from_json(document)
        assert json.loads(JSONEncoder().encode(typed)) == document, dashboard.file
        assert {
            type(panel.targets[0]).__module__ for panel in typed.panels or [] if getattr(panel, "targets", None)
        } == {"grafana_foundation_sdk.models.prometheus"}


def test_every_panel_is_shown_where_its_row_is_with_its_query_unit_and_thresholds() -> None:
    for dashboard in DASHBOARDS:
        document = json.loads((GRAFANA / dashboard.file).read_text())
        # An open row holds no panels (Grafana would not show them): each row's panels follow it, in order.
        shown: list[tuple[str, str]] = []
        row = ""
        for panel in document["panels"]:
            if panel["type"] == "row":
                assert panel["collapsed"] is False and panel["panels"] == [], panel["title"]
                row = panel["title"]
                continue
            shown.append((row, panel["title"]))
            data = next(p for p in dashboard.panels() if p.title == panel["title"])
            assert panel["type"] == data.kind and panel["gridPos"]["w"] == data.width, panel["title"]
            assert panel["fieldConfig"]["defaults"]["unit"] == data.unit, panel["title"]
            assert [t["expr"] for t in panel["targets"]] == [q.expr for q in data.queries], panel["title"]
            assert all(t["instant"] is data.instant for t in panel["targets"]), panel["title"]
            # Explicit everywhere: Grafana's implicit default would colour any value from 80 red (an uptime!).
            steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            assert steps[0]["value"] is None and all(step["value"] != 80 for step in steps), panel["title"]
        assert shown == [(r.title, p.title) for r in dashboard.rows for p in r.panels]
    up = next(
        p for p in json.loads((GRAFANA / CONTROLLER_HEALTH.file).read_text())["panels"] if p["title"] == "Targets up"
    )
    assert up["fieldConfig"]["defaults"]["thresholds"]["steps"] == [
        {"value": None, "color": "red"},
        {"value": 1, "color": "green"},
    ]


def test_the_version_table_shows_the_build_info_labels_per_instance() -> None:
    document = json.loads((GRAFANA / CONTROLLER_HEALTH.file).read_text())
    [panel] = [p for p in document["panels"] if p["title"] == "Version"]
    [target] = panel["targets"]
    assert target["format"] == "table" and target["instant"] is True
    assert metric_names(target["expr"]) == {"tfjob_controller_build_info"}
    kept = next(t for t in panel["transformations"] if t["id"] == "filterFieldsByName")
    assert kept["options"]["include"]["names"] == ["instance", *BY_NAME["tfjob_controller_build_info"].labels]


def test_a_row_whose_widths_overflow_the_grid_is_refused() -> None:
    # The SDK wraps a line only once it is full: a panel that does not fit would stick out of the grid unnoticed.
    query = (Query('up{job="$job", namespace=~"$namespace"}'),)
    crooked = Dashboard(
        uid="crooked",
        title="crooked",
        description="",
        file="crooked.json",
        variables=("job", "namespace"),
        rows=(Row("r", (Panel("a", "", query, width=10), Panel("b", "", query, width=10), Panel("c", "", query))),),
    )
    with pytest.raises(ValueError, match="'c' sticks out of the grid"):
        grafana.dashboard_json(crooked)


def test_metric_names_and_selectors_checkers_can_fail() -> None:
    expr = 'histogram_quantile(0.99, sum by (verb, le) (rate(rest_client_request_duration_seconds_bucket{a="b"}[5m])))'
    assert metric_names(expr) == {"rest_client_request_duration_seconds"}
    assert metric_names("sum(rate(workqueue_addz_total[5m]))") == {"workqueue_addz_total"}
    assert selectors('sum(up{job="x"}) or vector(0) > bool workqueue_depth') == [
        ("up", 'job="x"'),
        ("workqueue_depth", ""),
    ]


def test_every_catalogued_metric_is_used_and_every_used_metric_is_catalogued() -> None:
    used: dict[str, list[str]] = {}
    for uid, title, expr in _dashboard_exprs():
        for name in metric_names(expr):
            used.setdefault(name, []).append(f"{uid}: {title}")
    for alert in ALERTS:
        for name in metric_names(alert.expr) | metric_names(alert.signal):
            used.setdefault(name, []).append(f"alert {alert.name}")
    unused = [metric.name for metric in CATALOGUE if metric.name not in used]
    assert not unused, f"catalogued but used by no panel or alert: {unused}"
    unknown = {name: where for name, where in used.items() if name not in BY_NAME and name not in SYNTHETIC}
    assert not unknown, f"used but not in the catalogue (so not known to be exported): {unknown}"
    assert len(BY_NAME) == len(CATALOGUE), "duplicate catalogue entries"


def test_every_panel_has_a_description_the_datasource_and_a_scoped_query() -> None:
    for dashboard in DASHBOARDS:
        document = json.loads((GRAFANA / dashboard.file).read_text())
        variables = [v["name"] for v in document["templating"]["list"]]
        assert variables[0] == "datasource" and {"job", "namespace"} <= set(variables), dashboard.uid
        panels = [p for p in document["panels"] if p["type"] != "row"]
        assert len({p["id"] for p in document["panels"]}) == len(document["panels"])
        for panel in panels:
            assert len(panel["description"]) > 20, panel["title"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                for name, matchers in selectors(target["expr"]):
                    assert 'job="$job"' in matchers and 'namespace=~"$namespace"' in matchers, (panel["title"], name)
                    if dashboard is TRAINING_JOBS:
                        assert 'job_namespace=~"$job_namespace"' in matchers, (panel["title"], name)
                for variable in re.findall(r"\$\{?(\w+)", target["expr"]):
                    assert variable in {*variables, "__rate_interval", "__range"}, (panel["title"], variable)


def test_panels_do_not_overlap_and_fit_the_grid() -> None:
    for dashboard in DASHBOARDS:
        occupied: set[tuple[int, int]] = set()
        for panel in json.loads((GRAFANA / dashboard.file).read_text())["panels"]:
            grid = panel["gridPos"]
            assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
            cells = {
                (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
            }
            assert not cells & occupied, f"{panel['title']!r} overlaps another panel"
            occupied |= cells


def test_alert_rules_are_scoped_documented_and_linked_to_the_runbook() -> None:
    document = yaml.safe_load((GRAFANA / "alerts.yaml").read_text())
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    assert [rule["alert"] for rule in rules] == [alert.name for alert in ALERTS]
    runbook = (REPO / "docs" / "runbook.md").read_text()
    headings = {line[3:].strip().lower() for line in runbook.splitlines() if line.startswith("## ")}
    for rule in rules:
        for name, matchers in selectors(rule["expr"]):
            assert 'job="tfjob-controller"' in matchers, (rule["alert"], name)
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], rule["alert"]
        url = annotations["runbook_url"]
        assert url.startswith(RUNBOOK_URL + "#"), url
        assert url.rsplit("#", 1)[1] in headings, f"docs/runbook.md has no section for {rule['alert']}"
        assert rule["labels"]["severity"] in {"warning", "critical"}
    assert len(headings) == len(rules), "a runbook section without an alert"


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    promtool = _tool("promtool")
    checked = _run(promtool, "check", "rules", "grafana/alerts.yaml")
    assert checked.returncode == 0 and f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout, (
        checked.stdout + checked.stderr
    )
    tested = _run(promtool, "test", "rules", "grafana/alerts_test.yaml")
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    cases = yaml.safe_load((GRAFANA / "alerts_test.yaml").read_text())["tests"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {alert.name for alert in ALERTS}
    assert fires == names and quiet == names


def test_promtool_unit_tests_would_catch_an_unscoped_rule(tmp_path: Path) -> None:
    # The foreign-component cases only prove something if dropping the job selector breaks them.
    promtool = _tool("promtool")
    rules = (
        (GRAFANA / "alerts.yaml")
        .read_text()
        .replace('job="tfjob-controller", ', "")
        .replace('{job="tfjob-controller"}', "")
    )
    (tmp_path / "alerts.yaml").write_text(rules)
    (tmp_path / "alerts_test.yaml").write_text((GRAFANA / "alerts_test.yaml").read_text())
    result = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yaml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert result.returncode != 0
    failed = set(re.findall(r"alertname: (\w+)", result.stdout + result.stderr))
    # Every alert whose input has a foreign same-named series must notice (Down is scoped by `up` alone).
    assert {
        "TFJobControllerNoLeader",
        "TFJobControllerReconcileErrors",
        "TFJobControllerWorkqueueBacklogGrowing",
        "TFJobControllerWatchStalled",
        "TFJobWorkerFailoverStorm",
        "TFJobsDegradedForLong",
        "TFJobsStuckNotRunning",
        "TFJobControllerAPIErrors",
        "TFJobControllerDown",
    } <= failed, result.stdout


def test_kube_prometheus_manifests_render_and_match_the_sources() -> None:
    kubectl = _tool("kubectl")
    rendered = _run(kubectl, "kustomize", "manifests/monitoring/")
    assert rendered.returncode == 0, rendered.stderr
    objects = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    by_kind: dict[str, list[dict]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    assert sorted(by_kind) == ["ConfigMap", "PrometheusRule", "Role", "RoleBinding", "ServiceMonitor"]
    assert all(obj["metadata"]["namespace"] == "tfjob-controller" for obj in objects)
    [role], [binding] = by_kind["Role"], by_kind["RoleBinding"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert {"services", "endpoints", "pods"} <= {r for rule in role["rules"] for r in rule["resources"]}
    [rule] = by_kind["PrometheusRule"]
    assert rule["spec"] == yaml.safe_load((GRAFANA / "alerts.yaml").read_text())
    dashboards = {}
    for config_map in by_kind["ConfigMap"]:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        for file, content in config_map["data"].items():
            dashboards[file] = json.loads(content)
    assert dashboards == {d.file: json.loads((GRAFANA / d.file).read_text()) for d in DASHBOARDS}
    [monitor] = by_kind["ServiceMonitor"]
    service = yaml.safe_load((REPO / "manifests/deployment/service.yaml").read_text())
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    # The job label the rules select is the value of the Service label named by jobLabel.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == SCRAPE_JOB
    base = yaml.safe_load((REPO / "manifests/kustomization.yaml").read_text())
    assert not any("monitoring" in resource for resource in base["resources"])
