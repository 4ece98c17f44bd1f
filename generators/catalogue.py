"""The metric catalogue: every series family the controller exports, as data.

Why data and not only a table in the docs: the dashboards, the alerting rules and ``docs/metrics.md`` are
generated from it (by ``generators.monitoring``), and the tests compare it with a live scrape of
``tfjob-controller run`` and with every panel and alert. A metric that is exported but not catalogued, catalogued
but charted nowhere, or charted but not exported fails a test, so the table cannot drift from the code.

Names are the ones PromQL uses: counters with ``_total``, histograms by their base name (``_bucket``,
``_sum`` and ``_count`` are implied).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True)
class Metric:
    name: str
    type: MetricType
    labels: tuple[str, ...]
    meaning: str
    source: str  # the module (or library) that defines it


_RUNTIME = "controller/runtime/metrics.py"
_CLIENT = "controller/runtime/client_metrics.py"
_EVENTS = "controller/runtime/events.py"
_TFJOB = "controller/tfjob/metrics.py"
_OBSERVE = "controller/tfjob/observe.py"
_FOREIGN = "controller/tfjob/foreign.py"
_BUILD_INFO = "controller/ops/build_info.py"
_PROCESS = "prometheus_client ProcessCollector"

CATALOGUE: tuple[Metric, ...] = (
    # --- the TFJob domain ----------------------------------------------------------------------------------
    Metric(
        "tfjob_jobs",
        "gauge",
        ("job_namespace", "state"),
        "TFJobs in the leader's cache by state (Pending: no status yet; Created, Running, Restarting, "
        "Suspended, Succeeded, Failed). A standby reports none.",
        _OBSERVE,
    ),
    Metric(
        "tfjob_jobs_degraded",
        "gauge",
        ("job_namespace",),
        "Running or Restarting TFJobs with fewer running Worker pods than spec Worker replicas.",
        _OBSERVE,
    ),
    Metric(
        "tfjob_jobs_degraded_longest_seconds",
        "gauge",
        ("job_namespace",),
        "How long the longest-degraded TFJob has been below its desired workers (0: none). Measured by the "
        "leader at scrape time; starts again after a controller restart.",
        _OBSERVE,
    ),
    Metric(
        "tfjob_jobs_not_running_longest_seconds",
        "gauge",
        ("job_namespace",),
        "Age of the oldest TFJob that has not reached Running yet (not finished, not suspended; 0: none).",
        _OBSERVE,
    ),
    Metric(
        "training_operator_jobs_created_total",
        "counter",
        ("job_namespace", "framework"),
        "TFJobs the controller started handling (upstream's name).",
        _TFJOB,
    ),
    Metric(
        "training_operator_jobs_successful_total",
        "counter",
        ("job_namespace", "framework"),
        "TFJobs that succeeded.",
        _TFJOB,
    ),
    Metric(
        "training_operator_jobs_failed_total",
        "counter",
        ("job_namespace", "framework"),
        "TFJobs that failed (including validation failures).",
        _TFJOB,
    ),
    Metric(
        "training_operator_jobs_restarted_total",
        "counter",
        ("job_namespace", "framework"),
        "Pod restarts of non-dynamic replicas that put a TFJob into Restarting.",
        _TFJOB,
    ),
    Metric(
        "training_operator_jobs_deleted_total",
        "counter",
        ("job_namespace", "framework"),
        "TFJobs deleted by the controller when their ttlSecondsAfterFinished expired.",
        _TFJOB,
    ),
    Metric(
        "tfjob_worker_failovers_total",
        "counter",
        ("job_namespace", "reason"),
        "Dynamic workers replaced, by cause: Deleted, Evicted, Preempted, NodeLost, Disrupted, OOMKilled, Error.",
        _TFJOB,
    ),
    Metric(
        "tfjob_replica_failovers_total",
        "counter",
        ("job_namespace", "replica_type", "reason"),
        "Parameter servers of dynamic TFJobs re-created at their name and address after a disruption, by replica "
        "type (PS) and cause: Deleted, Evicted, Preempted, NodeLost, Disrupted. Each is also a PSFailover Warning "
        "event on the job; the workers keep running.",
        _TFJOB,
    ),
    Metric(
        "tfjob_worker_scaled_down_total",
        "counter",
        ("job_namespace", "chosen_by"),
        "Workers removed from dynamic TFJobs because Worker replicas were lowered, by how they were chosen: "
        "workersToDelete (listed in the spec), deletionCost (a lower controller.kubernetes.io/pod-deletion-cost "
        "than a worker that stays), highestIndex (the highest index among equals, upstream's choice).",
        _TFJOB,
    ),
    Metric(
        "tfjob_foreign_writes_total",
        "counter",
        ("job_namespace", "write"),
        "Writes by another controller to TFJobs this one manages, seen in managedFields: write=status (their "
        "status), write=pod (a pod created for one). Each contest is also a ForeignWriter Warning event on the job.",
        _FOREIGN,
    ),
    Metric(
        "tfjob_worker_failover_seconds",
        "histogram",
        ("job_namespace", "reason"),
        "From the controller observing a worker's failure or disruption until its replacement runs (includes "
        "the back-off).",
        _TFJOB,
    ),
    Metric(
        "tfjob_job_time_to_running_seconds",
        "histogram",
        ("job_namespace",),
        "From a TFJob's creation until all its replicas first run at the same time.",
        _TFJOB,
    ),
    # --- reconcile and work queue (controller-runtime's names) ---------------------------------------------
    Metric(
        "controller_runtime_reconcile_total",
        "counter",
        ("controller", "result"),
        "Reconciles by result: success, error, requeue, requeue_after.",
        _RUNTIME,
    ),
    Metric(
        "controller_runtime_reconcile_errors_total",
        "counter",
        ("controller",),
        "Reconciles that raised an error.",
        _RUNTIME,
    ),
    Metric(
        "controller_runtime_reconcile_errors_by_reason_total",
        "counter",
        ("controller", "reason"),
        "Reconciles that raised an error, by kind: throttled, server_error, transport, conflict, not_found "
        "(routine); forbidden, invalid, api_error, unexpected (need a human).",
        _RUNTIME,
    ),
    Metric(
        "controller_runtime_reconcile_time_seconds",
        "histogram",
        ("controller",),
        "Duration of each reconcile.",
        _RUNTIME,
    ),
    Metric("controller_runtime_active_workers", "gauge", ("controller",), "Workers processing an item now.", _RUNTIME),
    Metric(
        "controller_runtime_max_concurrent_reconciles",
        "gauge",
        ("controller",),
        "Configured workers (--workers).",
        _RUNTIME,
    ),
    Metric(
        "workqueue_depth", "gauge", ("name", "controller", "priority"), "Items waiting in the work queue.", _RUNTIME
    ),
    Metric("workqueue_adds_total", "counter", ("name", "controller"), "Adds that made an item pending.", _RUNTIME),
    Metric(
        "workqueue_retries_total",
        "counter",
        ("name", "controller"),
        "Rate-limited re-adds (retries after an error or a requeue).",
        _RUNTIME,
    ),
    Metric(
        "workqueue_queue_duration_seconds",
        "histogram",
        ("name", "controller"),
        "Time an item waits before a worker takes it.",
        _RUNTIME,
    ),
    Metric(
        "workqueue_work_duration_seconds",
        "histogram",
        ("name", "controller"),
        "Time a worker spends on an item.",
        _RUNTIME,
    ),
    Metric(
        "workqueue_unfinished_work_seconds",
        "gauge",
        ("name", "controller"),
        "Sum of the ages of the items being processed; grows without bound when a worker is stuck.",
        _RUNTIME,
    ),
    Metric(
        "workqueue_longest_running_processor_seconds",
        "gauge",
        ("name", "controller"),
        "Age of the longest-running item being processed.",
        _RUNTIME,
    ),
    # --- API client, informers, leader election, events ----------------------------------------------------
    Metric(
        "rest_client_requests_total",
        "counter",
        ("code", "method", "host"),
        'HTTP attempts to the API server by status code ("<error>": no response) and verb.',
        _CLIENT,
    ),
    Metric(
        "rest_client_request_duration_seconds",
        "histogram",
        ("verb", "host"),
        "API request latency up to the response headers.",
        _CLIENT,
    ),
    Metric(
        "rest_client_request_retries_total",
        "counter",
        ("code", "verb", "host"),
        "API requests retried (429 with Retry-After, 5xx, transport errors).",
        _CLIENT,
    ),
    Metric(
        "rest_client_rate_limiter_duration_seconds",
        "histogram",
        ("verb", "host"),
        "Wait on the client-side limit before a request, per request while a bucket applies (none once API "
        "Priority and Fairness lifted the --kube-api-qps auto bucket; leader election's own bucket always).",
        _CLIENT,
    ),
    Metric(
        "informer_watch_restarts_total",
        "counter",
        ("resource", "reason"),
        "Watches re-established without a relist, by reason (timeout, closed, short, stalled, throttled, error).",
        _CLIENT,
    ),
    Metric(
        "informer_relists_total",
        "counter",
        ("resource", "reason"),
        "Full lists, by reason (initial, expired, error).",
        _CLIENT,
    ),
    Metric(
        "informer_events_total",
        "counter",
        ("resource", "type"),
        "Watch events received (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR).",
        _CLIENT,
    ),
    Metric(
        "informer_last_event_timestamp_seconds",
        "gauge",
        ("resource",),
        "Unix time of the last watch event or bookmark (0 before the first, e.g. on a standby).",
        _CLIENT,
    ),
    Metric("informer_cache_objects", "gauge", ("resource",), "Objects in the informer's cache.", _CLIENT),
    Metric(
        "leader_election_master_status",
        "gauge",
        ("name",),
        "1 while this replica holds the Lease `name`, 0 on a standby.",
        _CLIENT,
    ),
    Metric(
        "events_dropped_total",
        "counter",
        ("reason",),
        "Kubernetes Events the controller did not write: dropped by its recorder (QueueFull, SpamFilter, "
        "Shutdown, Evicted) or refused by the API server (the error's class); logged instead.",
        _EVENTS,
    ),
    # --- the process ---------------------------------------------------------------------------------------
    Metric(
        "tfjob_controller_build_info",
        "gauge",
        ("version", "python_version", "kubernetes_asyncio_version"),
        "Always 1; the labels say which versions run: tfjob-controller's (also in the start-up log line), "
        "Python's and kubernetes-asyncio's. Join on it to split any series by version.",
        _BUILD_INFO,
    ),
    Metric("process_cpu_seconds_total", "counter", (), "CPU time of the controller process.", _PROCESS),
    Metric("process_resident_memory_bytes", "gauge", (), "Resident memory of the controller process.", _PROCESS),
    Metric(
        "process_start_time_seconds", "gauge", (), "Unix time the process started (restarts show as jumps).", _PROCESS
    ),
)

# Exported, deliberately charted nowhere: generic Python/process series with no question an SRE of this
# controller asks of them (they stay available for ad-hoc queries).
UNCHARTED: frozenset[str] = frozenset(
    {
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "python_info",
        "python_gc_objects_collected_total",
        "python_gc_objects_uncollectable_total",
        "python_gc_collections_total",
    }
)

# Series Prometheus itself attaches to every target; dashboards and alerts may use them.
SYNTHETIC: frozenset[str] = frozenset({"up"})

BY_NAME: dict[str, Metric] = {metric.name: metric for metric in CATALOGUE}
