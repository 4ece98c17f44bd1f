"""Names and values of the TFJob API (kubeflow.org/v1) that every other module agrees on.

Why a module of constants: the TFJob controller is a drop-in replacement for the TFJob part of
Kubeflow's training-operator (v1.8/v1.9). Label keys, condition reasons, event reasons, metric
names and defaults are part of that compatibility contract (tools, dashboards and the Kubeflow SDK
read them), so they are spelled exactly once, here, and never inline.
"""

from __future__ import annotations

from typing import Final

# --- resource identity ---------------------------------------------------------------------------
GROUP: Final = "kubeflow.org"
VERSION: Final = "v1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "TFJob"
LIST_KIND: Final = "TFJobList"
PLURAL: Final = "tfjobs"
SINGULAR: Final = "tfjob"
RESOURCE: Final = f"{PLURAL}.{GROUP}"

FRAMEWORK: Final = "tensorflow"
CONTROLLER_NAME: Final = "tfjob-controller"

# v1.9 `spec.runPolicy.managedBy`: absent or MANAGED_BY_SELF means "ours"; MANAGED_BY_MULTIKUEUE
# means another controller owns the job and we must not touch it at all.
MANAGED_BY_SELF: Final = "kubeflow.org/training-operator"
MANAGED_BY_MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"
MANAGED_BY_ALLOWED: Final = (MANAGED_BY_SELF, MANAGED_BY_MULTIKUEUE)

# --- labels put on pods and services (v1.7.0+ prefixed set; no group-name label) ------------------
LABEL_OPERATOR_NAME: Final = "training.kubeflow.org/operator-name"
LABEL_JOB_NAME: Final = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
LABEL_JOB_ROLE: Final = "training.kubeflow.org/job-role"
JOB_ROLE_MASTER: Final = "master"

# --- replica types ---------------------------------------------------------------------------------
CHIEF: Final = "Chief"
MASTER: Final = "Master"
PS: Final = "PS"
WORKER: Final = "Worker"
EVALUATOR: Final = "Evaluator"
# The order upstream's UpdateJobStatus evaluates types in; we use it for every per-type loop so
# that decisions (which type's failure is reported first) are deterministic.
REPLICA_TYPES: Final = (CHIEF, EVALUATOR, MASTER, PS, WORKER)
CHIEF_TYPES: Final = (CHIEF, MASTER)

# --- field names of the TFJob spec and status (every module reads them from here) --------------------
SPEC_REPLICA_SPECS: Final = "tfReplicaSpecs"
SPEC_RUN_POLICY: Final = "runPolicy"
SPEC_SUCCESS_POLICY: Final = "successPolicy"
SPEC_ENABLE_DYNAMIC_WORKER: Final = "enableDynamicWorker"
# One entry of tfReplicaSpecs.
REPLICA_REPLICAS: Final = "replicas"
REPLICA_RESTART_POLICY: Final = "restartPolicy"
REPLICA_TEMPLATE: Final = "template"
# spec.runPolicy.
RUN_CLEAN_POD_POLICY: Final = "cleanPodPolicy"
RUN_TTL_SECONDS_AFTER_FINISHED: Final = "ttlSecondsAfterFinished"
RUN_ACTIVE_DEADLINE_SECONDS: Final = "activeDeadlineSeconds"
RUN_BACKOFF_LIMIT: Final = "backoffLimit"
RUN_SUSPEND: Final = "suspend"
RUN_MANAGED_BY: Final = "managedBy"
RUN_SCHEDULING_POLICY: Final = "schedulingPolicy"
# spec.runPolicy.schedulingPolicy (gang scheduling).
SCHEDULING_MIN_AVAILABLE: Final = "minAvailable"
SCHEDULING_QUEUE: Final = "queue"
SCHEDULING_PRIORITY_CLASS: Final = "priorityClass"
SCHEDULING_MIN_RESOURCES: Final = "minResources"
SCHEDULING_SCHEDULE_TIMEOUT_SECONDS: Final = "scheduleTimeoutSeconds"
# status.
STATUS_CONDITIONS: Final = "conditions"
STATUS_REPLICA_STATUSES: Final = "replicaStatuses"
STATUS_START_TIME: Final = "startTime"
STATUS_COMPLETION_TIME: Final = "completionTime"
# One entry of status.replicaStatuses.
REPLICA_STATUS_ACTIVE: Final = "active"
REPLICA_STATUS_SUCCEEDED: Final = "succeeded"
REPLICA_STATUS_FAILED: Final = "failed"
REPLICA_STATUS_SELECTOR: Final = "selector"
# One entry of status.conditions.
CONDITION_TYPE: Final = "type"
CONDITION_STATUS: Final = "status"
CONDITION_REASON: Final = "reason"
CONDITION_MESSAGE: Final = "message"
CONDITION_LAST_UPDATE_TIME: Final = "lastUpdateTime"
CONDITION_LAST_TRANSITION_TIME: Final = "lastTransitionTime"

# --- replica restart policies ----------------------------------------------------------------------
RESTART_ALWAYS: Final = "Always"
RESTART_ON_FAILURE: Final = "OnFailure"
RESTART_NEVER: Final = "Never"
RESTART_EXIT_CODE: Final = "ExitCode"
RESTART_POLICIES: Final = (RESTART_ALWAYS, RESTART_ON_FAILURE, RESTART_NEVER, RESTART_EXIT_CODE)
# Replica restartPolicy -> pod restartPolicy. ExitCode is implemented by the controller, so the
# kubelet must not restart the container itself.
POD_RESTART_POLICY: Final = {
    RESTART_ALWAYS: "Always",
    RESTART_ON_FAILURE: "OnFailure",
    RESTART_NEVER: "Never",
    RESTART_EXIT_CODE: "Never",
}

# --- run policy ------------------------------------------------------------------------------------
CLEAN_POD_ALL: Final = "All"
CLEAN_POD_RUNNING: Final = "Running"
CLEAN_POD_NONE: Final = "None"
CLEAN_POD_POLICIES: Final = (CLEAN_POD_ALL, CLEAN_POD_RUNNING, CLEAN_POD_NONE)

SUCCESS_DEFAULT: Final = ""
SUCCESS_ALL_WORKERS: Final = "AllWorkers"
SUCCESS_POLICIES: Final = (SUCCESS_DEFAULT, SUCCESS_ALL_WORKERS)

# --- defaults (in-memory defaulting, never persisted) ----------------------------------------------
DEFAULT_CONTAINER_NAME: Final = "tensorflow"
DEFAULT_PORT_NAME: Final = "tfjob-port"
DEFAULT_PORT: Final = 2222
DEFAULT_RESTART_POLICY: Final = RESTART_NEVER
DEFAULT_REPLICAS: Final = 1
DEFAULT_CLEAN_POD_POLICY: Final = CLEAN_POD_NONE
TF_CONFIG_ENV: Final = "TF_CONFIG"

# Upstream treats a missing exit code of the tensorflow container as this magic value, which is
# >= 128 and therefore "retryable" under restartPolicy ExitCode.
MISSING_EXIT_CODE: Final = 0xBEEF
RETRYABLE_EXIT_CODE_MIN: Final = 128

# Upper bound on replicas per type that the controller accepts. Upstream has none, but a dense
# TF_CONFIG lists every replica in every pod's environment (Linux caps one env string at 128 KiB,
# about 3000 addresses), so far larger values cannot work and would only make a decision huge.
MAX_REPLICAS: Final = 10000
# Pod and service names are <job>-<replica type>-<index>; a Service name is a DNS-1035 label.
MAX_GENERATED_NAME_LENGTH: Final = 63

# --- conditions ------------------------------------------------------------------------------------
COND_CREATED: Final = "Created"
COND_RUNNING: Final = "Running"
COND_RESTARTING: Final = "Restarting"
COND_SUCCEEDED: Final = "Succeeded"
COND_FAILED: Final = "Failed"
COND_SUSPENDED: Final = "Suspended"

REASON_CREATED: Final = "TFJobCreated"
REASON_RUNNING: Final = "TFJobRunning"
REASON_RESTARTING: Final = "TFJobRestarting"
REASON_SUCCEEDED: Final = "TFJobSucceeded"
REASON_FAILED: Final = "TFJobFailed"
REASON_SUSPENDED: Final = "TFJobSuspended"
REASON_RESUMED: Final = "TFJobResumed"
REASON_FAILED_VALIDATION: Final = "TFJobFailedValidation"

# --- event reasons emitted by the decision (the executor emits the per-action outcome events) -----
EVENT_NORMAL: Final = "Normal"
EVENT_WARNING: Final = "Warning"

EV_EXITED_WITH_CODE: Final = "ExitedWithCode"
EV_SET_POD_TEMPLATE_RESTART_POLICY: Final = "SetPodTemplateRestartPolicy"
EV_WORKER_FAILOVER: Final = "WorkerFailover"
EV_WORKER_FAILED: Final = "WorkerFailed"
EV_WORKER_SCALED_DOWN: Final = "WorkerScaledDown"
# A dynamic job's disrupted parameter server, re-created at its name and address (decision/psfailover.py).
EV_PS_FAILOVER: Final = "PSFailover"
EV_INVALID_POD_DELETION_COST: Final = "InvalidPodDeletionCost"
# Gang scheduling: upstream's event reasons for the pod template's scheduler name and the PodGroup's deletion.
EV_SET_POD_TEMPLATE_SCHEDULER_NAME: Final = "SetPodTemplateSchedulerName"
EV_JOB_TERMINATED: Final = "JobTerminated"
EV_SUCCESSFUL_DELETE_POD_GROUP: Final = "SuccessfulDeletePodGroup"
EV_FAILED_DELETE_POD_GROUP: Final = "FailedDeletePodGroup"
# Ours (upstream only logs PodGroup sync failures): the API refused the job's PodGroup, or it is foreign.
EV_FAILED_CREATE_POD_GROUP: Final = "FailedCreatePodGroup"
EV_FAILED_UPDATE_POD_GROUP: Final = "FailedUpdatePodGroup"
# Outcome events the executor emits after applying an action (listed so both sides share names).
EV_SUCCESSFUL_CREATE_POD: Final = "SuccessfulCreatePod"
EV_FAILED_CREATE_POD: Final = "FailedCreatePod"
EV_SUCCESSFUL_DELETE_POD: Final = "SuccessfulDeletePod"
EV_FAILED_DELETE_POD: Final = "FailedDeletePod"
EV_SUCCESSFUL_CREATE_SERVICE: Final = "SuccessfulCreateService"
EV_FAILED_CREATE_SERVICE: Final = "FailedCreateService"
EV_SUCCESSFUL_DELETE_SERVICE: Final = "SuccessfulDeleteService"
EV_FAILED_DELETE_SERVICE: Final = "FailedDeleteService"
EV_SUCCESSFUL_DELETE_JOB: Final = "SuccessfulDeleteJob"
EV_FAILED_DELETE_JOB: Final = "FailedDeleteJob"
# Another controller wrote the job's status or created its pods (controller.tfjob.foreign).
EV_FOREIGN_WRITER: Final = "ForeignWriter"

# --- status fields -----------------------------------------------------------------------------------
# Set only while gang scheduling holds the job's pods back (the PodGroup is not admitted yet).
STATUS_LAST_RECONCILE_TIME: Final = "lastReconcileTime"

# --- metrics ---------------------------------------------------------------------------------------
METRIC_JOBS_CREATED: Final = "training_operator_jobs_created_total"
METRIC_JOBS_DELETED: Final = "training_operator_jobs_deleted_total"
METRIC_JOBS_SUCCESSFUL: Final = "training_operator_jobs_successful_total"
METRIC_JOBS_FAILED: Final = "training_operator_jobs_failed_total"
METRIC_JOBS_RESTARTED: Final = "training_operator_jobs_restarted_total"
METRIC_WORKER_FAILOVERS: Final = "tfjob_worker_failovers_total"
# Replicas other than dynamic workers re-created after a disruption (today: the PS of a dynamic job).
METRIC_REPLICA_FAILOVERS: Final = "tfjob_replica_failovers_total"
METRIC_WORKER_SCALED_DOWN: Final = "tfjob_worker_scaled_down_total"
METRIC_FOREIGN_WRITES: Final = "tfjob_foreign_writes_total"
FOREIGN_WRITE_STATUS: Final = "status"  # the `write` label: what another controller wrote
FOREIGN_WRITE_POD: Final = "pod"
FOREIGN_WRITES: Final = (FOREIGN_WRITE_STATUS, FOREIGN_WRITE_POD)

# --- deletion reasons carried by DeletePod / DeleteService / DeleteJob -----------------------------
DELETE_SCALE_DOWN: Final = "ScaleDown"
DELETE_RESTART: Final = "Restart"
DELETE_FAILOVER: Final = "Failover"
DELETE_CLEANUP: Final = "Cleanup"
DELETE_SUSPEND: Final = "Suspend"
DELETE_DEADLINE: Final = "Deadline"
DELETE_BACKOFF_LIMIT: Final = "BackoffLimit"
DELETE_TTL: Final = "TTL"

# --- pod facts we classify on (Kubernetes core vocabulary) -----------------------------------------
POD_PENDING: Final = "Pending"
POD_RUNNING: Final = "Running"
POD_SUCCEEDED: Final = "Succeeded"
POD_FAILED: Final = "Failed"
POD_UNKNOWN: Final = "Unknown"
POD_CONDITION_DISRUPTION_TARGET: Final = "DisruptionTarget"
POD_CONDITION_READY: Final = "Ready"
POD_REASON_EVICTED: Final = "Evicted"
POD_REASON_NODE_LOST: Final = "NodeLost"
POD_REASON_PREEMPTING: Final = "Preempting"
POD_REASON_NODE_SHUTDOWN: Final = "Terminated"  # kubelet graceful node shutdown sets this

# --- dynamic-worker failover reasons (the `reason` label of tfjob_worker_failovers_total) ----------
# A fixed, small vocabulary: metric label values must have bounded cardinality.
FAILOVER_DELETED: Final = "Deleted"
FAILOVER_EVICTED: Final = "Evicted"
FAILOVER_PREEMPTED: Final = "Preempted"
FAILOVER_NODE_LOST: Final = "NodeLost"
FAILOVER_DISRUPTED: Final = "Disrupted"
FAILOVER_OOM_KILLED: Final = "OOMKilled"
FAILOVER_ERROR: Final = "Error"

# --- status.dynamicWorkers -------------------------------------------------------------------------
STATUS_DYNAMIC_WORKERS: Final = "dynamicWorkers"
WORKER_STATE_REPLACING: Final = "Replacing"  # waiting for the old pod to go and the back-off to end
WORKER_STATE_REPLACED: Final = "Replaced"  # replacement created; history kept until it runs 10 min
WORKER_STATE_FAILED: Final = "Failed"  # failed by its own exit, restart policy forbids a retry
STATUS_MEMBERS: Final = "members"  # the worker indices in the job, ascending: the record of holes
STATUS_MEMBERS_SUMMARY: Final = "summary"  # the same as text for kubectl get ("0,2-4"); never read back
STATUS_WORKERS: Final = "workers"  # worker index (decimal string) -> its record
# PS index (decimal string) -> its record, the same shape as a worker's (only indices that failed over).
STATUS_PARAMETER_SERVERS: Final = "parameterServers"
# One worker record of status.dynamicWorkers.workers.
WORKER_STATE: Final = "state"
WORKER_FAILOVERS: Final = "failovers"
WORKER_FAILURES: Final = "failures"
WORKER_LAST_FAILOVER_TIME: Final = "lastFailoverTime"
WORKER_LAST_REASON: Final = "lastReason"
WORKER_RETRY_AFTER: Final = "retryAfter"
WORKER_POD_UID: Final = "podUID"
WORKER_EXIT_CODE: Final = "exitCode"

# --- choosing who leaves a dynamic job (targeted scale-down) ------------------------------------------
SPEC_WORKERS_TO_DELETE: Final = "workersToDelete"  # worker indices that leave first and are not refilled
# Why workersToDelete is refused on a static job: the controller's validation and the CRD's CEL rule say it alike.
WORKERS_TO_DELETE_NEEDS_DYNAMIC: Final = (
    "needs spec.enableDynamicWorker: true (a job without dynamic workers loses its highest indices on a scale-down,"
    " as upstream)"
)
# A pod annotation Kubernetes defines for ReplicaSets (int32 as a string): lowest cost leaves first.
ANNOTATION_POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
# How a removed worker was chosen (the `chosen_by` label of tfjob_worker_scaled_down_total).
CHOSEN_BY_LIST: Final = "workersToDelete"
CHOSEN_BY_DELETION_COST: Final = "deletionCost"
CHOSEN_BY_HIGHEST_INDEX: Final = "highestIndex"
CHOSEN_BY: Final = (CHOSEN_BY_LIST, CHOSEN_BY_DELETION_COST, CHOSEN_BY_HIGHEST_INDEX)
