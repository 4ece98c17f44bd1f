"""What dashboards and alerting rules share: the scoping selectors, and which metrics a PromQL expression reads.

Scoping (kubebuilder's convention): every dashboard query selects ``job="$job"`` and ``namespace=~"$namespace"``
(the controller's scrape job and Kubernetes namespace, the labels a ServiceMonitor attaches), ``instance`` where
one replica differs from another, and the training-jobs dashboard also ``job_namespace=~"$job_namespace"`` (the
TFJobs' namespace). Alerting rules cannot use template variables, so they select ``job="tfjob-controller"``:
the ServiceMonitor sets that job name (``jobLabel``), and a plain Prometheus must use it as ``job_name``. Nothing
is ever summed across jobs, so another component exporting the same names (every kube-controller-manager
exports ``leader_election_master_status`` and ``workqueue_depth``) cannot hide or fake a problem.
"""

from __future__ import annotations

import re

from generators.catalogue import BY_NAME

SCRAPE_JOB = "tfjob-controller"
CONTROLLER = "tfjob-controller"  # the controller / queue / lease name

SCOPE = 'job="$job", namespace=~"$namespace"'
INSTANCE = f'{SCOPE}, instance=~"$instance"'
JOBS = f'{SCOPE}, job_namespace=~"$job_namespace"'
RULE_SCOPE = f'job="{SCRAPE_JOB}"'

_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "inf", "nan",
}  # fmt: skip
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (histogram series by their base name when it is catalogued)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # range selectors and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", text):
        name, is_call = match.group(1), match.group(2)
        if is_call or name.lower() in _PROMQL_WORDS:
            continue
        for suffix in _HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in BY_NAME:
                name = name[: -len(suffix)]
        names.add(name)
    return names
