"""The pods and headless services of a TFJob: how they are named, labelled, owned and built, and
the facts the decision reads from an existing pod.

Why one module: names, labels, selectors and ownerReferences are the compatibility surface other
tools see (``kubectl get pods -l training.kubeflow.org/job-name=mnist``, the Kubeflow SDK's log
helpers, dashboards), and the classification helpers are the only place that interprets a pod's
status, so "what counts as evicted / lost / failed" is decided once.

Builders take a *defaulted, validated* job and return fresh plain dicts (never sharing structure
with the job). Accessors take a pod as decoded from the API and tolerate any malformed content:
they answer None / False instead of raising.
"""

from __future__ import annotations

from typing import Any

from . import api, tfconfig
from .conditions import parse_time
from .jsoncopy import json_copy


# --- small safe accessors ------------------------------------------------------------------------
def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def metadata(obj: Any) -> dict[str, Any]:
    """The object's ``metadata`` if it is an object, else an empty one."""
    return _dict(_dict(obj).get("metadata"))


def labels(obj: Any) -> dict[str, Any]:
    """The object's labels if they are an object, else an empty one."""
    return _dict(metadata(obj).get("labels"))


def name(obj: Any) -> str | None:
    """The object's name, or None when it has no usable one."""
    value = metadata(obj).get("name")
    return value if isinstance(value, str) and value else None


def uid(obj: Any) -> str:
    """The object's uid, "" when it has none."""
    value = metadata(obj).get("uid")
    return value if isinstance(value, str) else ""


def namespace(obj: Any) -> str:
    """The object's namespace, "" when it has none."""
    value = metadata(obj).get("namespace")
    return value if isinstance(value, str) else ""


def status_of(obj: Any) -> dict[str, Any]:
    """The object's ``status`` if it is an object, else an empty one."""
    return _dict(_dict(obj).get("status"))


# --- naming and labels ---------------------------------------------------------------------------
def job_name_label_value(job_name: str) -> str:
    """The job-name label value of a job (``/`` cannot appear in a label value)."""
    return job_name.replace("/", "-")


def base_labels(job_name: str, controller_name: str = api.CONTROLLER_NAME) -> dict[str, str]:
    """The labels every pod and service of the job carries (also the selector to list them)."""
    return {
        api.LABEL_OPERATOR_NAME: controller_name,
        api.LABEL_JOB_NAME: job_name_label_value(job_name),
    }


def replica_labels(
    job_name: str, replica_type: str, index: int, controller_name: str = api.CONTROLLER_NAME
) -> dict[str, str]:
    """Base labels plus replica type (lower case) and index: a pod's identity, a service's selector."""
    result = base_labels(job_name, controller_name)
    result[api.LABEL_REPLICA_TYPE] = replica_type.lower()
    result[api.LABEL_REPLICA_INDEX] = str(index)
    return result


def type_selector(job_name: str, replica_type: str, controller_name: str = api.CONTROLLER_NAME) -> str:
    """The label selector string of all pods of one replica type, keys sorted (as labels.Set formats)."""
    selector = base_labels(job_name, controller_name)
    selector[api.LABEL_REPLICA_TYPE] = replica_type.lower()
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def is_master_role(replica_types: list[str] | tuple[str, ...], replica_type: str, index: int) -> bool:
    """Which pods get ``job-role=master``: Chief/Master pods if the spec has one, else worker 0."""
    if any(t in api.CHIEF_TYPES for t in replica_types):
        return replica_type in api.CHIEF_TYPES
    return replica_type == api.WORKER and index == 0


def owner_reference(job: dict[str, Any]) -> dict[str, Any]:
    """The controlling ownerReference that makes the job own a pod, service or PodGroup."""
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.KIND,
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Any) -> str | None:
    """UID of the object's controlling ownerReference, or None."""
    for ref in _list(metadata(obj).get("ownerReferences")):
        if isinstance(ref, dict) and ref.get("controller") is True:
            value = ref.get("uid")
            return value if isinstance(value, str) else None
    return None


def replica_type_label(obj: Any) -> str | None:
    """The replica-type label (lower case type) of a pod or service, or None."""
    value = labels(obj).get(api.LABEL_REPLICA_TYPE)
    return value if isinstance(value, str) else None


def parse_index(value: Any) -> int | None:
    """A replica index written as text (a label, a key of ``status.dynamicWorkers.workers``): a plain decimal
    of at most 9 digits as a non-negative int, else None."""
    if not isinstance(value, str) or not value.isascii() or not value.isdigit() or len(value) > 9:
        return None
    return int(value)


def replica_index(obj: Any) -> int | None:
    """The replica-index label as a non-negative int, or None if missing or not a plain decimal."""
    return parse_index(labels(obj).get(api.LABEL_REPLICA_INDEX))


# --- builders ------------------------------------------------------------------------------------
def pod_restart_policy(replica_restart_policy: str) -> str:
    """Replica restartPolicy -> pod restartPolicy (ExitCode is ours, so the kubelet sees Never)."""
    return api.POD_RESTART_POLICY.get(replica_restart_policy, replica_restart_policy)


def build_pod(
    job: dict[str, Any],
    replica_type: str,
    index: int,
    cluster_domain: str = "",
    controller_name: str = api.CONTROLLER_NAME,
    tf_configs: tfconfig.TFConfigs | None = None,
) -> dict[str, Any]:
    """The pod for replica ``index`` of ``replica_type``: upstream's name, labels, owner reference and spec. Pass
    ``tf_configs`` (built for the same job and cluster domain) when building many pods."""
    job_meta = job["metadata"]
    replica_spec = job["spec"][api.SPEC_REPLICA_SPECS][replica_type]
    template = replica_spec.get(api.REPLICA_TEMPLATE) or {}
    template_meta = template.get("metadata") or {}

    pod_labels = dict(template_meta.get("labels") or {})
    pod_labels.update(replica_labels(job_meta["name"], replica_type, index, controller_name))
    if is_master_role(list(job["spec"][api.SPEC_REPLICA_SPECS]), replica_type, index):
        pod_labels[api.LABEL_JOB_ROLE] = api.JOB_ROLE_MASTER

    pod_meta: dict[str, Any] = {
        "name": tfconfig.general_name(job_meta["name"], replica_type, index),
        "namespace": job_meta["namespace"],
        "labels": pod_labels,
        "ownerReferences": [owner_reference(job)],
    }
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    if template_meta.get("finalizers"):
        pod_meta["finalizers"] = list(template_meta["finalizers"])

    pod_spec = json_copy(template.get("spec") or {})
    pod_spec["restartPolicy"] = pod_restart_policy(replica_spec[api.REPLICA_RESTART_POLICY])
    if tf_configs is None:
        tf_configs = tfconfig.TFConfigs(job, cluster_domain)
    tf_config = tf_configs.for_task(replica_type, index)
    container = tfconfig.tensorflow_container(pod_spec)
    if tf_config is not None and container is not None:
        # Quirk Q16: upstream appends a second TF_CONFIG after a user-defined one (the later entry
        # wins in the container). We replace it instead: same effective value, no duplicate name.
        env = [e for e in container.get("env") or [] if e.get("name") != api.TF_CONFIG_ENV]
        env.append({"name": api.TF_CONFIG_ENV, "value": tf_config})
        container["env"] = env
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": pod_spec}


def template_sets_restart_policy(job: dict[str, Any], replica_type: str) -> bool:
    """Whether the template has its own restartPolicy (overwritten, with a Warning event)."""
    template = job["spec"][api.SPEC_REPLICA_SPECS][replica_type].get(api.REPLICA_TEMPLATE) or {}
    value = (template.get("spec") or {}).get("restartPolicy")
    return isinstance(value, str) and value != ""


def service_ports(job: dict[str, Any], replica_type: str) -> list[dict[str, Any]]:
    """One port per named port of the ``tensorflow`` container, in declaration order."""
    template = job["spec"][api.SPEC_REPLICA_SPECS][replica_type].get(api.REPLICA_TEMPLATE) or {}
    container = tfconfig.tensorflow_container(template.get("spec") or {})
    ports: list[dict[str, Any]] = []
    seen: set[Any] = set()
    for port in (container or {}).get("ports") or []:
        port_name = port.get("name")
        if port_name in seen:
            continue  # upstream keys ports by name, so a repeated name collapses into one
        seen.add(port_name)
        entry: dict[str, Any] = {"port": port["containerPort"]}
        if port_name is not None:
            entry = {"name": port_name, **entry}
        ports.append(entry)
    return ports


def build_service(
    job: dict[str, Any], replica_type: str, index: int, controller_name: str = api.CONTROLLER_NAME
) -> dict[str, Any]:
    """The headless service giving replica ``index`` its stable DNS name, as upstream's: one port per
    port of the ``tensorflow`` container, the replica's labels as selector."""
    job_meta = job["metadata"]
    service_labels = replica_labels(job_meta["name"], replica_type, index, controller_name)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": tfconfig.general_name(job_meta["name"], replica_type, index),
            "namespace": job_meta["namespace"],
            "labels": service_labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "clusterIP": "None",
            "selector": dict(service_labels),
            "ports": service_ports(job, replica_type),
        },
    }


# --- facts about an existing pod -----------------------------------------------------------------
def is_terminating(obj: Any) -> bool:
    """Whether the object has a deletionTimestamp (it is going)."""
    return metadata(obj).get("deletionTimestamp") is not None


def phase(pod: Any) -> str:
    """The pod's phase, "" when it has none."""
    value = status_of(pod).get("phase")
    return value if isinstance(value, str) else ""


def _tensorflow_status(pod: Any) -> dict[str, Any] | None:
    for status in _list(status_of(pod).get("containerStatuses")):
        if isinstance(status, dict) and status.get("name") == api.DEFAULT_CONTAINER_NAME:
            return status
    return None


def _terminated(pod: Any) -> dict[str, Any] | None:
    status = _tensorflow_status(pod)
    if status is None:
        return None
    terminated = _dict(status.get("state")).get("terminated")
    return terminated if isinstance(terminated, dict) else None


def exit_code(pod: Any) -> int | None:
    """Exit code of the terminated ``tensorflow`` container, or None if it has not terminated."""
    terminated = _terminated(pod)
    if terminated is None:
        return None
    code = terminated.get("exitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def exit_code_or_missing(pod: Any) -> int:
    """Like :func:`exit_code`, with upstream's 0xbeef for "no exit code" (which is retryable)."""
    code = exit_code(pod)
    return api.MISSING_EXIT_CODE if code is None else code


def is_retryable_exit_code(code: int) -> bool:
    """Under restartPolicy ExitCode: 1-127 (and 0 on a Failed pod) are permanent, >= 128 retryable."""
    return code >= api.RETRYABLE_EXIT_CODE_MIN


def termination_reason(pod: Any) -> str | None:
    """The ``tensorflow`` container's terminated reason (e.g. OOMKilled, Error), or None."""
    terminated = _terminated(pod)
    reason = terminated.get("reason") if terminated else None
    return reason if isinstance(reason, str) else None


def _condition(pod: Any, cond_type: str) -> dict[str, Any] | None:
    for condition in _list(status_of(pod).get("conditions")):
        if isinstance(condition, dict) and condition.get("type") == cond_type:
            return condition
    return None


_DISRUPTION_TARGET_REASONS = {
    "PreemptionByScheduler": api.FAILOVER_PREEMPTED,
    "PreemptionByKubeScheduler": api.FAILOVER_PREEMPTED,
    "EvictionByEvictionAPI": api.FAILOVER_EVICTED,
    "TerminationByKubelet": api.FAILOVER_EVICTED,
    "DeletionByTaintManager": api.FAILOVER_NODE_LOST,
    "DeletionByPodGC": api.FAILOVER_NODE_LOST,
}
_POD_REASONS = {
    api.POD_REASON_EVICTED: api.FAILOVER_EVICTED,
    api.POD_REASON_PREEMPTING: api.FAILOVER_PREEMPTED,
    api.POD_REASON_NODE_LOST: api.FAILOVER_NODE_LOST,
    api.POD_REASON_NODE_SHUTDOWN: api.FAILOVER_NODE_LOST,
    "UnexpectedAdmissionError": api.FAILOVER_EVICTED,
}


def disruption(pod: Any) -> str | None:
    """Why the pod is being taken away from under us, in the failover vocabulary, or None.

    A disruption is anything not caused by the training process itself: kubelet eviction
    (``status.reason`` Evicted), preemption, a ``DisruptionTarget=True`` condition (set by the
    eviction API, the scheduler, the taint manager, pod GC, node shutdown), a lost node (Ready
    False with reason NodeLost, or phase Unknown). A Succeeded pod is never disrupted: its work is done.
    """
    current_phase = phase(pod)
    if current_phase == api.POD_SUCCEEDED:
        return None
    status_reason = status_of(pod).get("reason")
    if isinstance(status_reason, str) and status_reason in _POD_REASONS:
        return _POD_REASONS[status_reason]
    target = _condition(pod, api.POD_CONDITION_DISRUPTION_TARGET)
    if target is not None and target.get("status") == "True":
        return _DISRUPTION_TARGET_REASONS.get(str(target.get("reason")), api.FAILOVER_DISRUPTED)
    ready = _condition(pod, api.POD_CONDITION_READY)
    if ready is not None and ready.get("status") == "False" and ready.get("reason") == api.POD_REASON_NODE_LOST:
        return api.FAILOVER_NODE_LOST
    if current_phase == api.POD_UNKNOWN:
        return api.FAILOVER_NODE_LOST
    return None


def exit_failure_reason(pod: Any) -> str:
    """Failover-vocabulary reason of a pod that failed by its own exit: OOMKilled or Error."""
    if exit_code(pod) == 137 or termination_reason(pod) == "OOMKilled":
        return api.FAILOVER_OOM_KILLED
    return api.FAILOVER_ERROR


def started_at(pod: Any) -> float | None:
    """When the ``tensorflow`` container (else the pod) started running, in epoch seconds."""
    status = _tensorflow_status(pod)
    if status is not None:
        state = _dict(status.get("state"))
        for key in ("running", "terminated"):
            moment = parse_time(_dict(state.get(key)).get("startedAt"))
            if moment is not None:
                return moment
    return parse_time(status_of(pod).get("startTime"))


def run_seconds(pod: Any, now: float) -> float | None:
    """How long the pod has run (until its container terminated, or until now), if known."""
    start = started_at(pod)
    if start is None:
        return None
    terminated = _terminated(pod)
    end = parse_time(terminated.get("finishedAt")) if terminated else None
    return (end if end is not None else now) - start


def restart_count(pod: Any) -> int:
    """Sum of restartCount over init and regular container statuses."""
    total = 0
    status = status_of(pod)
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in _list(status.get(key)):
            count = container.get("restartCount") if isinstance(container, dict) else None
            if isinstance(count, int) and not isinstance(count, bool) and count > 0:
                total += count
    return total
