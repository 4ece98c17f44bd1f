"""Dashboards, alerting rules and kube-prometheus manifests for tfjob-controller, generated from code.

Why generated: two dashboards, a rules file, a PrometheusRule, dashboard ConfigMaps and the metric table in
``docs/metrics.md`` must agree with each other and with :mod:`generators.catalogue`; written by hand they
drift. ``python -m generators.monitoring`` rewrites them all (``--check`` only compares, for CI); the
JSON and YAML are committed, so users import files, not code.

Scoping (kubebuilder's convention): every dashboard query selects ``job="$job"`` and ``namespace=~"$namespace"``
(the controller's scrape job and Kubernetes namespace, the labels a ServiceMonitor attaches), ``instance`` where
one replica differs from another, and the training-jobs dashboard also ``job_namespace=~"$job_namespace"`` (the
TFJobs' namespace). Alerting rules cannot use template variables, so they select ``job="tfjob-controller"``:
the ServiceMonitor sets that job name (``jobLabel``), and a plain Prometheus must use it as ``job_name``. Nothing
is ever summed across jobs, so another component exporting the same names (every kube-controller-manager
exports ``leader_election_master_status`` and ``workqueue_depth``) cannot hide or fake a problem.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from generators.catalogue import BY_NAME, CATALOGUE

SCRAPE_JOB = "tfjob-controller"
CONTROLLER = "tfjob-controller"  # the controller / queue / lease name
RUNBOOK_URL = "https://github.com/tfjob-controller/tfjob-controller/blob/main/docs/runbook.md"

REPO = Path(__file__).resolve().parents[1]
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCOPE = 'job="$job", namespace=~"$namespace"'
INSTANCE = f'{SCOPE}, instance=~"$instance"'
JOBS = f'{SCOPE}, job_namespace=~"$job_namespace"'
RULE_SCOPE = f'job="{SCRAPE_JOB}"'

# --------------------------------------------------------------------------------------------------------------
# PromQL: which metrics an expression reads


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


# --------------------------------------------------------------------------------------------------------------
# Dashboards


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stat | bargauge
    width: int = 8

    @property
    def instant(self) -> bool:
        return self.kind != "timeseries"


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    file: str  # under grafana/
    rows: tuple[Row, ...]
    variables: tuple[str, ...]  # in order, after datasource
    tags: tuple[str, ...] = ("kubeflow", "tfjob", "controller")

    def panels(self) -> list[Panel]:
        return [panel for row in self.rows for panel in row.panels]


def _q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def _quantiles(metric: str, selector: str, by: str = "", label: str = "") -> tuple[Query, ...]:
    group = f"{by}, le" if by else "le"
    prefix = f"{{{{{by}}}}} " if by else label
    return tuple(
        _q(
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{selector}}}[$__rate_interval])))",
            f"{prefix}p{int(q * 100)}",
        )
        for q in (0.5, 0.99)
    )


_CTRL = f'{INSTANCE}, controller="{CONTROLLER}"'
_QUEUE = f'{INSTANCE}, name="{CONTROLLER}"'

CONTROLLER_HEALTH = Dashboard(
    uid="tfjob-controller-health",
    title="tfjob-controller / controller health",
    description="Is the TFJob controller up, leading, keeping up and talking to the API server? Scoped to one "
    "scrape job, Kubernetes namespace and instance.",
    file="controller-health.json",
    variables=("job", "namespace", "instance"),
    rows=(
        Row(
            "Overview",
            (
                Panel(
                    "Targets up",
                    "Scrape targets of this job that answer (1) or not (0). All 0 or none: the "
                    "controller is down (alert TFJobControllerDown).",
                    (_q(f"up{{{INSTANCE}}}", "{{instance}}"),),
                    kind="stat",
                    width=6,
                ),
                Panel(
                    "Leader",
                    "1 for the replica holding the Lease (tfjob-controller unless --leader-election-id "
                    "says otherwise), 0 for standbys. Exactly one replica per Lease should show 1 (alert "
                    "TFJobControllerNoLeader).",
                    (_q(f"leader_election_master_status{{{INSTANCE}}}", "{{instance}} {{name}}"),),
                    kind="stat",
                    width=6,
                ),
                Panel(
                    "Version",
                    "The tfjob-controller version each replica runs (tfjob_controller_build_info).",
                    (_q(f"tfjob_controller_build_info{{{INSTANCE}}}", "{{instance}} {{version}}"),),
                    kind="stat",
                    width=6,
                ),
                Panel(
                    "Uptime",
                    "Seconds since each replica's process started; a drop is a restart.",
                    (_q(f"time() - process_start_time_seconds{{{INSTANCE}}}", "{{instance}}"),),
                    unit="s",
                    kind="stat",
                    width=6,
                ),
            ),
        ),
        Row(
            "Reconcile",
            (
                Panel(
                    "Reconciles / s by result",
                    "How often jobs are reconciled and how each pass ended: success, "
                    "error (retried with back-off), requeue, requeue_after (a timed transition).",
                    (
                        _q(
                            f"sum by (result) (rate(controller_runtime_reconcile_total{{{_CTRL}}}[$__rate_interval]))",
                            "{{result}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Reconcile errors / s",
                    "Reconciles that raised, in total and by kind; the controller log has "
                    "the job key and error. throttled, server_error, transport, conflict and not_found are routine "
                    "under load (one warning line each); forbidden, invalid, api_error and unexpected (a traceback "
                    "in the log) need a human. A sustained ratio over 10% fires TFJobControllerReconcileErrors.",
                    (
                        _q(
                            f"sum(rate(controller_runtime_reconcile_errors_total{{{_CTRL}}}[$__rate_interval]))",
                            "errors",
                        ),
                        _q(
                            f"sum by (reason) (rate(controller_runtime_reconcile_errors_by_reason_total{{{_CTRL}}}"
                            "[$__rate_interval]))",
                            "{{reason}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Reconcile duration",
                    "p50 and p99 of one reconcile (decision plus API writes). Seconds-long "
                    "p99s mean a slow API server.",
                    _quantiles("controller_runtime_reconcile_time_seconds", _CTRL),
                    unit="s",
                ),
                Panel(
                    "Busy workers",
                    "Workers processing a job now, against --workers. Always at the maximum: the "
                    "controller is saturated; raise --workers or look at API latency.",
                    (
                        _q(f"sum by (instance) (controller_runtime_active_workers{{{_CTRL}}})", "busy {{instance}}"),
                        _q(
                            f"sum by (instance) (controller_runtime_max_concurrent_reconciles{{{_CTRL}}})",
                            "max {{instance}}",
                        ),
                    ),
                ),
            ),
        ),
        Row(
            "Work queue",
            (
                Panel(
                    "Queue depth",
                    "Jobs waiting for a worker. A backlog that keeps growing fires "
                    "TFJobControllerWorkqueueBacklogGrowing.",
                    (_q(f"sum by (instance) (workqueue_depth{{{_QUEUE}}})", "{{instance}}"),),
                ),
                Panel(
                    "Adds and retries / s",
                    "Jobs queued (every watch event of a job or its pods queues it once) "
                    "and rate-limited retries after errors or conflicts.",
                    (
                        _q(f"sum(rate(workqueue_adds_total{{{_QUEUE}}}[$__rate_interval]))", "adds"),
                        _q(f"sum(rate(workqueue_retries_total{{{_QUEUE}}}[$__rate_interval]))", "retries"),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Queue wait",
                    "p50 and p99 of how long a queued job waits for a worker: high with a shallow "
                    "queue means the workers are busy for long.",
                    _quantiles("workqueue_queue_duration_seconds", _QUEUE),
                    unit="s",
                ),
                Panel(
                    "Processing time",
                    "p50 and p99 of the time a worker spends on a job (the reconcile plus queue bookkeeping).",
                    _quantiles("workqueue_work_duration_seconds", _QUEUE),
                    unit="s",
                ),
                Panel(
                    "Stuck work",
                    "Age of the longest-running item and the summed age of all items in progress; "
                    "steadily growing means a worker is stuck.",
                    (
                        _q(f"max(workqueue_longest_running_processor_seconds{{{_QUEUE}}})", "longest"),
                        _q(f"sum(workqueue_unfinished_work_seconds{{{_QUEUE}}})", "unfinished"),
                    ),
                    unit="s",
                ),
            ),
        ),
        Row(
            "Watches",
            (
                Panel(
                    "Seconds since the last watch event",
                    "Per watched resource, time since the last event or "
                    "bookmark (bookmarks arrive about once a minute). Over 5 minutes fires "
                    "TFJobControllerWatchStalled: the controller acts on a stale cache.",
                    (
                        _q(
                            f"time() - max by (resource) (informer_last_event_timestamp_seconds{{{INSTANCE}}} > 0)",
                            "{{resource}}",
                        ),
                    ),
                    unit="s",
                ),
                Panel(
                    "Watch restarts and relists",
                    "Watches re-established by reason (timeout and closed are "
                    "routine; stalled, throttled and error are not) and full relists (initial at start, expired "
                    "after a 410).",
                    (
                        _q(
                            f"sum by (resource, reason) (increase(informer_watch_restarts_total{{{INSTANCE}}}"
                            "[$__rate_interval]))",
                            "restart {{resource}} {{reason}}",
                        ),
                        _q(
                            f"sum by (resource, reason) (increase(informer_relists_total{{{INSTANCE}}}"
                            "[$__rate_interval]))",
                            "relist {{resource}} {{reason}}",
                        ),
                    ),
                ),
                Panel(
                    "Watch events / s",
                    "Events received per resource and type; BOOKMARKs show a live but quiet watch.",
                    (
                        _q(
                            f"sum by (resource, type) (rate(informer_events_total{{{INSTANCE}}}[$__rate_interval]))",
                            "{{resource}} {{type}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Cached objects",
                    "Objects in each informer's cache (TFJobs, and the pods and services the "
                    "controller owns): the controller's memory grows with these.",
                    (_q(f"sum by (resource) (informer_cache_objects{{{INSTANCE}}})", "{{resource}}"),),
                ),
            ),
        ),
        Row(
            "API server",
            (
                Panel(
                    "Requests / s by verb and code",
                    "Every HTTP attempt to the API server by verb and status "
                    "code; <error> is an attempt without a response.",
                    (
                        _q(
                            f"sum by (method, code) (rate(rest_client_requests_total{{{INSTANCE}}}[$__rate_interval]))"
                            " > 0",
                            "{{method}} {{code}}",
                        ),
                    ),
                    unit="reqps",
                ),
                Panel(
                    "Throttled and failed requests / s",
                    "429 (API priority and fairness throttling), 5xx and "
                    "requests without a response. Over 5% of all requests fires TFJobControllerAPIErrors.",
                    (
                        _q(
                            f"sum by (method, code) (rate(rest_client_requests_total{{{INSTANCE}, "
                            'code=~"429|5..|<error>"}[$__rate_interval]))',
                            "{{method}} {{code}}",
                        ),
                    ),
                    unit="reqps",
                ),
                Panel(
                    "Retries / s",
                    "Requests retried after a 429 (honouring Retry-After), a 5xx or a transport "
                    "error, by verb and code.",
                    (
                        _q(
                            f"sum by (verb, code) (rate(rest_client_request_retries_total{{{INSTANCE}}}"
                            "[$__rate_interval]))",
                            "{{verb}} {{code}}",
                        ),
                    ),
                    unit="reqps",
                ),
                Panel(
                    "Request latency p99 by verb",
                    "p99 of API request latency up to the response headers (watch "
                    "requests excluded by their nature: they end at the response headers).",
                    _quantiles("rest_client_request_duration_seconds", INSTANCE, by="verb"),
                    unit="s",
                ),
                Panel(
                    "Client-side throttling by verb",
                    "Wait on the controller's own request limit (--kube-api-qps) "
                    "before sending (and leader election's own small bucket). With the default auto limit and an API "
                    "server that runs API Priority and Fairness, only leader election's requests show; a steady wait "
                    "means a bucket, not the server, paces the controller.",
                    _quantiles("rest_client_rate_limiter_duration_seconds", INSTANCE, by="verb"),
                    unit="s",
                ),
            ),
        ),
        Row(
            "Process",
            (
                Panel(
                    "CPU",
                    "CPU cores used by each replica's process.",
                    (_q(f"rate(process_cpu_seconds_total{{{INSTANCE}}}[$__rate_interval])", "{{instance}}"),),
                    unit="short",
                ),
                Panel(
                    "Memory",
                    "Resident memory of each replica's process; compare with the container's limit.",
                    (_q(f"process_resident_memory_bytes{{{INSTANCE}}}", "{{instance}}"),),
                    unit="bytes",
                ),
                Panel(
                    "Events dropped / s",
                    "Kubernetes Events the controller could not write, by reason; they are "
                    "logged instead, but `kubectl describe tfjob` will miss them.",
                    (
                        _q(
                            f"sum by (reason) (rate(events_dropped_total{{{INSTANCE}}}[$__rate_interval]))",
                            "{{reason}}",
                        ),
                    ),
                    unit="ops",
                ),
            ),
        ),
    ),
)

TRAINING_JOBS = Dashboard(
    uid="tfjob-training-jobs",
    title="tfjob-controller / training jobs",
    description="What happens to TFJobs: how many are in each state, which workers failed over and why, "
    "scale-downs, and how long jobs take to run and recover. Scoped to one scrape job and to TFJob namespaces.",
    file="training-jobs.json",
    variables=("job", "namespace", "job_namespace"),
    rows=(
        Row(
            "Jobs",
            (
                Panel(
                    "Jobs by state",
                    "TFJobs known to the leader by state, now. Pending: the controller has not written a status yet.",
                    (_q(f"sum by (state) (tfjob_jobs{{{JOBS}}})", "{{state}}"),),
                    kind="bargauge",
                ),
                Panel(
                    "Jobs created, succeeded, failed in range",
                    "TFJobs created, succeeded, failed, restarted "
                    "(non-dynamic replica restarts) and deleted by TTL in the selected time range.",
                    tuple(
                        _q(f"sum(increase(training_operator_jobs_{kind}_total{{{JOBS}}}[$__range]))", kind)
                        for kind in ("created", "successful", "failed", "restarted", "deleted")
                    ),
                    kind="bargauge",
                ),
                Panel(
                    "Jobs by state over time",
                    "TFJobs by state, over time.",
                    (_q(f"sum by (state) (tfjob_jobs{{{JOBS}}}) > 0", "{{state}}"),),
                ),
            ),
        ),
        Row(
            "Dynamic workers",
            (
                Panel(
                    "Failovers by reason in range",
                    "Dynamic workers replaced in the selected range, by cause: "
                    "Deleted, Evicted, Preempted, NodeLost, Disrupted, OOMKilled, Error. Over 20 in 10 minutes "
                    "in one namespace fires TFJobWorkerFailoverStorm.",
                    (
                        _q(
                            f"sum by (reason) (increase(tfjob_worker_failovers_total{{{JOBS}}}[$__range]))",
                            "{{reason}}",
                        ),
                    ),
                    kind="bargauge",
                ),
                Panel(
                    "Parameter servers failed over in range",
                    "Parameter servers of dynamic jobs re-created at their name and address after a disruption, in "
                    "the selected range, by cause: Deleted, Evicted, Preempted, NodeLost, Disrupted. The workers "
                    "kept running; each is also a PSFailover event on its job.",
                    (
                        _q(
                            f"sum by (reason) (increase(tfjob_replica_failovers_total{{{JOBS}}}[$__range]))",
                            "{{reason}}",
                        ),
                    ),
                    kind="bargauge",
                ),
                Panel(
                    "Workers removed by scale-down in range, by how chosen",
                    "Workers removed because a job's Worker replicas were lowered (kubectl scale), in the selected "
                    "range, by how they were chosen: workersToDelete (listed in the job's spec), deletionCost "
                    "(their pod's controller.kubernetes.io/pod-deletion-cost was lower than a staying worker's), "
                    "highestIndex (the highest index among equals, upstream's choice).",
                    (
                        _q(
                            f"sum by (chosen_by) (increase(tfjob_worker_scaled_down_total{{{JOBS}}}[$__range]))",
                            "{{chosen_by}}",
                        ),
                    ),
                    kind="bargauge",
                ),
                Panel(
                    "Failovers / s by reason",
                    "The failover rate over time, by cause.",
                    (
                        _q(
                            f"sum by (reason) (rate(tfjob_worker_failovers_total{{{JOBS}}}[$__rate_interval])) > 0",
                            "{{reason}}",
                        ),
                    ),
                    unit="ops",
                ),
                Panel(
                    "Failover latency",
                    "p50 and p99 of the time from the controller seeing a worker fail or go "
                    "until its replacement runs (the back-off of 10 s doubling to 5 min included).",
                    _quantiles("tfjob_worker_failover_seconds", JOBS),
                    unit="s",
                ),
                Panel(
                    "Time to Running",
                    "p50 and p99 of the time from a TFJob's creation until all its replicas run "
                    "(scheduling and image pulls dominate).",
                    _quantiles("tfjob_job_time_to_running_seconds", JOBS),
                    unit="s",
                ),
            ),
        ),
        Row(
            "Jobs that need attention",
            (
                Panel(
                    "Degraded jobs",
                    "Running jobs with fewer running workers than they asked for (a failover "
                    "in progress, or replacements that cannot be scheduled).",
                    (_q(f"sum by (job_namespace) (tfjob_jobs_degraded{{{JOBS}}})", "{{job_namespace}}"),),
                ),
                Panel(
                    "Longest degraded",
                    "How long the longest-degraded job has been below its desired workers. "
                    "Over 15 minutes fires TFJobsDegradedForLong.",
                    (
                        _q(
                            f"max by (job_namespace) (tfjob_jobs_degraded_longest_seconds{{{JOBS}}})",
                            "{{job_namespace}}",
                        ),
                    ),
                    unit="s",
                ),
                Panel(
                    "Oldest job not yet Running",
                    "Age of the oldest job that has not reached Running. Over 30 "
                    "minutes fires TFJobsStuckNotRunning (unschedulable pods, missing images, quota).",
                    (
                        _q(
                            f"max by (job_namespace) (tfjob_jobs_not_running_longest_seconds{{{JOBS}}})",
                            "{{job_namespace}}",
                        ),
                    ),
                    unit="s",
                ),
            ),
        ),
    ),
)

DASHBOARDS = (CONTROLLER_HEALTH, TRAINING_JOBS)

_VARIABLES: dict[str, tuple[str, str, str]] = {
    # name -> (label, query, help)
    "job": ("Scrape job", "label_values(tfjob_controller_build_info, job)", "the Prometheus job of the controller"),
    "namespace": (
        "Namespace",
        'label_values(tfjob_controller_build_info{job="$job"}, namespace)',
        "the controller's Kubernetes namespace",
    ),
    "instance": (
        "Instance",
        'label_values(tfjob_controller_build_info{job="$job", namespace=~"$namespace"}, instance)',
        "controller replicas",
    ),
    "job_namespace": (
        "TFJob namespace",
        'label_values(tfjob_jobs{job="$job", namespace=~"$namespace"}, job_namespace)',
        "namespaces of the TFJobs",
    ),
}


def _variable(name: str) -> dict[str, Any]:
    label, query, description = _VARIABLES[name]
    multi = name != "job"
    variable: dict[str, Any] = {
        "name": name,
        "label": label,
        "description": description,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "sort": 1,
        "hide": 0,
        "regex": "",
        "options": [],
        "includeAll": multi,
        "multi": multi,
    }
    if multi:
        variable["allValue"] = ".*"  # also matches a missing label (plain Prometheus has no `namespace`)
        variable["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    else:
        variable["current"] = {"selected": True, "text": SCRAPE_JOB, "value": SCRAPE_JOB}
    return variable


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    targets = [
        {
            "refId": chr(ord("A") + i),
            "datasource": DATASOURCE,
            "expr": query.expr,
            "legendFormat": query.legend,
            "range": not panel.instant,
            "instant": panel.instant,
        }
        for i, query in enumerate(panel.queries)
    ]
    out: dict[str, Any] = {
        "type": panel.kind,
        "id": panel_id,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": targets,
    }
    if panel.kind == "timeseries":
        out["fieldConfig"]["defaults"]["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 10,
            "showPoints": "never",
        }
        out["options"] = {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["max", "lastNotNull"]},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    else:
        out["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
        }
    return out


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for row in dashboard.rows:
        panels.append(
            {
                "type": "row",
                "id": next_id,
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        x = 0
        for panel in row.panels:
            if x + panel.width > 24:
                x, y = 0, y + 8
            panels.append(_panel_json(panel, next_id, x, y))
            next_id += 1
            x += panel.width
        y += 8
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
        "includeAll": False,
        "multi": False,
    }
    return {
        "__inputs": [],
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": list(dashboard.tags),
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [datasource, *(_variable(name) for name in dashboard.variables)]},
        "panels": panels,
    }


# --------------------------------------------------------------------------------------------------------------
# Alerting rules


@dataclass(frozen=True)
class Alert:
    """``expr`` is ``signal`` compared with a threshold; tests evaluate ``signal`` to prove it has data."""

    name: str
    signal: str
    condition: str  # appended to the signal, e.g. "> 0.1"; "" when expr is the whole rule
    for_: str
    severity: str
    summary: str
    description: str
    expr_override: str = ""

    @property
    def expr(self) -> str:
        return self.expr_override or f"{self.signal} {self.condition}".strip()

    @property
    def anchor(self) -> str:
        return self.name.lower()

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{RUNBOOK_URL}#{self.anchor}",
            },
        }


_R = RULE_SCOPE
ALERTS: tuple[Alert, ...] = (
    Alert(
        "TFJobControllerDown",
        signal=f"up{{{_R}}}",
        condition="",
        expr_override=f"absent(up{{{_R}}} == 1)",
        for_="5m",
        severity="critical",
        summary="No tfjob-controller replica is being scraped successfully.",
        description="Prometheus has had no successful scrape of job tfjob-controller for 5 minutes (or no "
        "target at all): TFJobs are not reconciled, failed workers are not replaced.",
    ),
    Alert(
        "TFJobControllerNoLeader",
        signal=f"sum by (name) (leader_election_master_status{{{_R}}})",
        condition="",
        # Per Lease (shards of one install elect separately, --leader-election-id); vector(0) when no replica
        # reports at all.
        expr_override=f"(sum by (name) (leader_election_master_status{{{_R}}}) or on() vector(0)) < 1",
        for_="5m",
        severity="critical",
        summary="No tfjob-controller replica holds the leader Lease{{ if $labels.name }} {{ $labels.name }}{{ end }}.",
        description="For 5 minutes no replica of job tfjob-controller has led (or none is scraped): the TFJobs it "
        "manages are not reconciled.",
    ),
    Alert(
        "TFJobControllerReconcileErrors",
        signal=f"sum by (namespace) (rate(controller_runtime_reconcile_errors_total{{{_R}}}[10m]))"
        f" / sum by (namespace) (rate(controller_runtime_reconcile_total{{{_R}}}[10m]))",
        condition="> 0.1",
        for_="15m",
        severity="warning",
        summary="More than 10% of tfjob-controller reconciles fail.",
        description="{{ $value | humanizePercentage }} of reconciles returned an error over the last 10 minutes. "
        "The controller log has the job key and the error; those TFJobs are not progressing.",
    ),
    Alert(
        "TFJobControllerWorkqueueBacklogGrowing",
        signal=f'sum by (namespace) (workqueue_depth{{{_R}, name="{CONTROLLER}"}})',
        condition=f'> 100 and sum by (namespace) (deriv(workqueue_depth{{{_R}, name="{CONTROLLER}"}}[15m])) > 0',
        for_="15m",
        severity="warning",
        summary="The tfjob-controller work queue keeps growing.",
        description="{{ $value }} jobs are waiting and the backlog has grown for 15 minutes: the workers cannot "
        "keep up (slow API server, too few --workers, or a reconcile that blocks).",
    ),
    Alert(
        "TFJobControllerWatchStalled",
        signal=f"time() - max by (namespace, resource) (informer_last_event_timestamp_seconds{{{_R}}} > 0)",
        condition="> 300",
        for_="2m",
        severity="critical",
        summary="No watch event or bookmark for {{ $labels.resource }} in over 5 minutes.",
        description="Bookmarks normally arrive about once a minute; the {{ $labels.resource }} watch has stalled, "
        "so the controller acts on a stale cache.",
    ),
    Alert(
        "TFJobWorkerFailoverStorm",
        signal=f"sum by (namespace, job_namespace) (increase(tfjob_worker_failovers_total{{{_R}}}[10m]))",
        condition="> 20",
        for_="5m",
        severity="warning",
        summary="Many TFJob worker failovers in namespace {{ $labels.job_namespace }}.",
        description="{{ $value | humanize }} dynamic workers were replaced in the last 10 minutes. Check node "
        "health, evictions and OOM kills (the reason label of tfjob_worker_failovers_total says which).",
    ),
    Alert(
        "TFJobsDegradedForLong",
        signal=f"max by (namespace, job_namespace) (tfjob_jobs_degraded_longest_seconds{{{_R}}})",
        condition="> 900",
        for_="5m",
        severity="warning",
        summary="A TFJob in {{ $labels.job_namespace }} has run below its desired workers for over 15 minutes.",
        description="A running job has been missing workers for {{ $value | humanizeDuration }}: replacements "
        "cannot be scheduled or keep failing.",
    ),
    Alert(
        "TFJobsStuckNotRunning",
        signal=f"max by (namespace, job_namespace) (tfjob_jobs_not_running_longest_seconds{{{_R}}})",
        condition="> 1800",
        for_="5m",
        severity="warning",
        summary="A TFJob in {{ $labels.job_namespace }} has not reached Running for over 30 minutes.",
        description="The oldest job that is not Running was created {{ $value | humanizeDuration }} ago: its pods "
        "are unschedulable, cannot pull their image, or exceed a quota.",
    ),
    Alert(
        "TFJobForeignController",
        signal=f"sum by (namespace, job_namespace) (increase(tfjob_foreign_writes_total{{{_R}}}[10m]))",
        condition="> 0",
        for_="1m",
        severity="warning",
        summary="Another controller writes TFJobs in {{ $labels.job_namespace }}.",
        description="{{ $value | humanize }} writes by another controller to TFJobs this one manages (their status, "
        "or pods created) in the last 10 minutes. Their ForeignWriter events name it; tfjob-controller leaves those "
        "jobs alone meanwhile. Usually training-operator still reconciling TFJobs.",
    ),
    Alert(
        "TFJobControllerAPIErrors",
        signal=f'sum by (namespace) (rate(rest_client_requests_total{{{_R}, code=~"5..|429|<error>"}}[10m]))'
        f" / sum by (namespace) (rate(rest_client_requests_total{{{_R}}}[10m]))",
        condition="> 0.05",
        for_="10m",
        severity="warning",
        summary="More than 5% of tfjob-controller's API requests fail.",
        description="{{ $value | humanizePercentage }} of requests to the API server got a 5xx, a 429 or no "
        "response over the last 10 minutes.",
    ),
)


def rules_document() -> dict[str, Any]:
    return {"groups": [{"name": "tfjob-controller", "rules": [alert.rule() for alert in ALERTS]}]}


# --------------------------------------------------------------------------------------------------------------
# Generated files


RULES_HEADER = """\
# Prometheus alerting rules for tfjob-controller. GENERATED by `python -m generators.monitoring` from
# generators/monitoring.py: edit that, not this file. Load with `rule_files:`; the rules select
# job="tfjob-controller" (the ServiceMonitor in manifests/monitoring/ sets it). Unit tests:
# `promtool test rules grafana/alerts_test.yaml`. Runbook: docs/runbook.md.
"""

MONITORING_HEADER = "# GENERATED by `python -m generators.monitoring`; do not edit.\n"


def _yaml(document: Any) -> str:
    return yaml.safe_dump(document, sort_keys=False, width=120, allow_unicode=True)


def _labels() -> dict[str, str]:
    return {"app.kubernetes.io/name": "tfjob-controller", "app.kubernetes.io/part-of": "tfjob-controller"}


def prometheus_rule() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        # prometheus/role: what older kube-prometheus releases' ruleSelector asks for (newer ones select all).
        "metadata": {
            "name": "tfjob-controller",
            "namespace": "tfjob-controller",
            "labels": {**_labels(), "prometheus": "k8s", "role": "alert-rules"},
        },
        "spec": rules_document(),
    }


def dashboard_config_map(dashboard: Dashboard) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"grafana-dashboard-{dashboard.uid}",
            "namespace": "tfjob-controller",
            "labels": {**_labels(), "grafana_dashboard": "1"},
        },
        "data": {dashboard.file: json.dumps(dashboard_json(dashboard), indent=2) + "\n"},
    }


def service_monitor() -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "tfjob-controller", "namespace": "tfjob-controller", "labels": _labels()},
        "spec": {
            # job="tfjob-controller" (the value of this Service label), which the alerting rules select.
            "jobLabel": "app.kubernetes.io/name",
            "selector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "tfjob-controller",
                    "app.kubernetes.io/component": "controller",
                }
            },
            "namespaceSelector": {"matchNames": ["tfjob-controller"]},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "30s"}],
        },
    }


def prometheus_rbac() -> list[dict[str, Any]]:
    """kube-prometheus' Prometheus (service account prometheus-k8s in namespace monitoring) discovers targets only
    in namespaces where a Role lets it; this grants it the controller's namespace. A binding to a service account
    that does not exist (other Prometheus distributions, which bring cluster-wide RBAC) is harmless."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "prometheus-k8s", "namespace": "tfjob-controller", "labels": _labels()},
        "rules": [
            {"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "prometheus-k8s", "namespace": "tfjob-controller", "labels": _labels()},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "prometheus-k8s"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}],
    }
    return [role, binding]


def _usage() -> dict[str, list[str]]:
    used: dict[str, list[str]] = {}
    for dashboard in DASHBOARDS:
        short = "health" if dashboard is CONTROLLER_HEALTH else "jobs"
        for panel in dashboard.panels():
            for name in sorted({n for q in panel.queries for n in metric_names(q.expr)}):
                entry = f"{short}: {panel.title}"
                if entry not in used.setdefault(name, []):
                    used[name].append(entry)
    for alert in ALERTS:
        for name in sorted(metric_names(alert.expr)):
            used.setdefault(name, []).append(f"alert {alert.name}")
    return used


def metrics_doc() -> str:
    used = _usage()
    lines = [
        "# Metric catalogue",
        "",
        "GENERATED by `python -m generators.monitoring` from `generators/catalogue.py` (the data the tests",
        "compare with a live scrape and with every panel and alert); edit that, not this file.",
        "",
        "Every labelled counter and histogram series exists at 0 before its first increment, so `rate()` and",
        "`increase()` see the first event: the TFJob series of a namespace from the moment the controller first",
        "sees a job there (removed 5 minutes after its last job is gone), every failover reason, informer",
        "restart/relist reason and API failure code (429, 5xx, `<error>`) per verb up front. No label carries a",
        "job or pod name, so cardinality is bounded by namespaces × small fixed vocabularies. A controller watching",
        "all namespaces learns of a namespace from its first job and counts that job's creation before the next",
        "scrape, so a namespace's increments are held until one scrape has shown its series at 0: the first event of",
        "a new namespace is seen one scrape late, never lost to a series born at 1.",
        "",
        "Dashboards: **health** = `grafana/controller-health.json`, **jobs** = `grafana/training-jobs.json`;",
        "alerts: `grafana/alerts.yaml` (runbook: [runbook.md](runbook.md)). Prometheus adds `job`, `namespace`",
        "and `instance` to every series; dashboards and alerts select on them.",
        "",
        "| name | type | labels | meaning | used by |",
        "|---|---|---|---|---|",
    ]
    for metric in CATALOGUE:
        labels = ", ".join(f"`{label}`" for label in metric.labels) or "—"
        users = "<br>".join(used.get(metric.name, [])) or "**nothing**"
        lines.append(f"| `{metric.name}` | {metric.type} | {labels} | {metric.meaning} | {users} |")
    return "\n".join(lines) + "\n"


def generated_files() -> dict[Path, str]:
    """Every generated file (path relative to the repository) and its exact content."""
    files: dict[Path, str] = {}
    for dashboard in DASHBOARDS:
        files[Path("grafana") / dashboard.file] = json.dumps(dashboard_json(dashboard), indent=2) + "\n"
    files[Path("grafana/alerts.yaml")] = RULES_HEADER + _yaml(rules_document())
    monitoring = Path("manifests/monitoring")
    files[monitoring / "prometheusrule.yaml"] = MONITORING_HEADER + _yaml(prometheus_rule())
    files[monitoring / "servicemonitor.yaml"] = MONITORING_HEADER + _yaml(service_monitor())
    files[monitoring / "prometheus_rbac.yaml"] = MONITORING_HEADER + "---\n".join(_yaml(o) for o in prometheus_rbac())
    files[monitoring / "dashboards.yaml"] = MONITORING_HEADER + "".join(
        ("---\n" if i else "") + _yaml(dashboard_config_map(d)) for i, d in enumerate(DASHBOARDS)
    )
    files[monitoring / "kustomization.yaml"] = (
        "# kube-prometheus integration: `kubectl apply -k manifests/monitoring/` on a cluster that runs the\n"
        "# Prometheus Operator (ServiceMonitor, PrometheusRule), Grafana's dashboard sidecar (ConfigMaps\n"
        '# labelled grafana_dashboard="1") and kube-prometheus\' prometheus-k8s (a Role lets it discover the\n'
        "# controller). Not part of manifests/kustomization.yaml, so the base install works where those CRDs\n"
        "# are absent.\n"
        + MONITORING_HEADER
        + _yaml(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["servicemonitor.yaml", "prometheus_rbac.yaml", "prometheusrule.yaml", "dashboards.yaml"],
            }
        )
    )
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
