"""Dashboards, alerting rules and kube-prometheus manifests for tfjob-controller, generated from code.

Why generated: two dashboards, a rules file, a PrometheusRule, dashboard ConfigMaps and the metric table in
``docs/metrics.md`` must agree with each other and with :mod:`generators.catalogue`; written by hand they
drift. ``python -m generators.monitoring`` rewrites them all (``--check`` only compares, for CI); the
JSON and YAML are committed, so users import files, not code.

What each file is made from: :mod:`generators.dashboards` (the panels and their queries) through
:mod:`generators.grafana` (the Grafana Foundation SDK's builders) for ``grafana/*.json``; :mod:`generators.alerts`
for ``grafana/alerts.yaml``; :mod:`generators.manifests` for ``manifests/monitoring/``; :mod:`generators.metrics_doc`
for ``docs/metrics.md``. Queries are scoped as :mod:`generators.promql` says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from generators.alerts import RULES_HEADER, rules_document
from generators.dashboards import DASHBOARDS
from generators.grafana import dashboard_text
from generators.manifests import manifest_files, to_yaml
from generators.metrics_doc import metrics_doc

REPO = Path(__file__).resolve().parents[1]


def generated_files() -> dict[Path, str]:
    """Every generated file (path relative to the repository) and its exact content."""
    files: dict[Path, str] = {}
    for dashboard in DASHBOARDS:
        files[Path("grafana") / dashboard.file] = dashboard_text(dashboard)
    files[Path("grafana/alerts.yaml")] = RULES_HEADER + to_yaml(rules_document())
    for name, content in manifest_files().items():
        files[Path("manifests/monitoring") / name] = content
    files[Path("docs/metrics.md")] = metrics_doc()
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m generators.monitoring", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report files that differ; exit 1 if any")
    parser.add_argument("--root", type=Path, default=REPO, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    stale = []
    for relative, content in generated_files().items():
        path = args.root / relative
        current = path.read_text() if path.exists() else None
        if current == content:
            continue
        stale.append(str(relative))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    if args.check and stale:
        print("out of date (run `python -m generators.monitoring`): " + ", ".join(stale), file=sys.stderr)
        return 1
    for name in stale:
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
