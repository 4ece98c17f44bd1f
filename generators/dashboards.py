"""The two Grafana dashboards as data: rows of panels, each panel its queries, unit, thresholds and width.

What a panel shows is written here once; :mod:`generators.grafana` turns it into Grafana's dashboard JSON with
the Grafana Foundation SDK's typed builders, and the tests read the same data (every query is evaluated against
a real Prometheus in tests/ops/test_prometheus.py, and benchmarks/render_dashboards.py draws them). Queries are
scoped as :mod:`generators.promql` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from generators.promql import CONTROLLER, INSTANCE, JOBS

PanelKind = Literal["timeseries", "stat", "bargauge", "table"]


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Step:
    """A threshold step: values from ``value`` up (``None``: the base, from minus infinity) take ``color``."""

    color: str
    value: float | None = None


# Explicit, so that Grafana's implicit default (red from 80) colours no count or duration: most panels have no
# threshold that means anything, and the ones that do say so.
NEUTRAL = (Step("green"),)


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: PanelKind = "timeseries"
    width: int = 8
    thresholds: tuple[Step, ...] = NEUTRAL
    columns: tuple[str, ...] = ()  # a table's columns: the series labels it shows, in this order

    @property
    def instant(self) -> bool:
        return self.kind != "timeseries"


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str
    description: str

    @property
    def multi(self) -> bool:
        """Every variable but the scrape job selects several values (and All); the job is one, so that
        nothing is ever summed across jobs."""
        return self.name != "job"


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    file: str  # under grafana/
    rows: tuple[Row, ...]
    variables: tuple[str, ...]  # names in VARIABLES, in order, after the data source
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
                    thresholds=(Step("red"), Step("green", 1)),
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
                    "The versions each replica runs (tfjob_controller_build_info), one row per instance: "
                    "tfjob-controller, Python and kubernetes-asyncio. Two controller versions at once: a rollout in "
                    "progress, or one that is stuck.",
                    (_q(f"tfjob_controller_build_info{{{INSTANCE}}}"),),
                    kind="table",
                    width=6,
                    columns=("instance", "version", "python_version", "kubernetes_asyncio_version"),
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

# The template variables (after the data source); each dashboard lists the ones its queries use.
VARIABLES: dict[str, Variable] = {
    variable.name: variable
    for variable in (
        Variable(
            "job",
            "Scrape job",
            "label_values(tfjob_controller_build_info, job)",
            "the Prometheus job of the controller",
        ),
        Variable(
            "namespace",
            "Namespace",
            'label_values(tfjob_controller_build_info{job="$job"}, namespace)',
            "the controller's Kubernetes namespace",
        ),
        Variable(
            "instance",
            "Instance",
            'label_values(tfjob_controller_build_info{job="$job", namespace=~"$namespace"}, instance)',
            "controller replicas",
        ),
        Variable(
            "job_namespace",
            "TFJob namespace",
            'label_values(tfjob_jobs{job="$job", namespace=~"$namespace"}, job_namespace)',
            "namespaces of the TFJobs",
        ),
    )
}
