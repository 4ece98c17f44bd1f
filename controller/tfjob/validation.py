"""Validation of a TFJob as stored, re-checked by the controller on every reconcile.

Why the controller validates although the CRD has CEL rules: objects can predate the rules (written
under upstream's webhook-less CRD, or before the CRD was upgraded), and a job the controller cannot
interpret must fail cleanly with a clear message instead of crashing or looping (quirk Q19). The
decision function also relies on it: once :func:`validate` returns no errors, every field the
controller reads has the type it expects, so the rest of the domain can index without checks.

Rules = upstream's validating webhook (training-operator v1.8 and later) plus the CRD's schema constraints, on the *raw*
(undefaulted) object:

* ``metadata.name`` is a DNS-1035 label; namespace and uid are present (the API always sets them);
* every name the controller will generate, ``<name>-<replica type>-<index>`` for each type's largest
  index (its pods and services; a Service name is a DNS-1035 label), is at most 63 characters; the
  message says how long the job's name may be. The label values the controller sets are the job's
  name (a DNS-1035 label already), the lower-case type and the index, so they fit as well;
* ``spec.tfReplicaSpecs`` is a non-empty map whose keys are known replica types
  (case-insensitive, each at most once), with at most one of Chief/Master;
* each replica spec is an object with ``replicas`` an integer in [0, MAX_REPLICAS], a known
  ``restartPolicy``, and a template whose containers all have an image and one of which is named
  ``tensorflow`` (the env and ports lists the controller edits must be lists of objects);
* ``runPolicy`` fields have their schema types, non-negative integers, known ``cleanPodPolicy``;
  ``managedBy`` (v1.9) one of the supported values;
* ``successPolicy`` is "" or ``AllWorkers``; ``enableDynamicWorker`` a boolean;
* ``workersToDelete`` a list of distinct worker indices, only with ``enableDynamicWorker: true``.

Errors are :class:`FieldError` values whose ``str()`` follows apimachinery's field-error format
(``spec.tfReplicaSpecs[Worker].replicas: Invalid value: -1: must be greater than or equal to 0``),
so the messages read like the ones ``kubectl`` shows for the CRD's own rules. Never raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from . import api
from .conditions import parse_time
from .defaults import canonical_replica_type
from .dynamic import WORKER_STATES, WorkerRecord
from .members import recorded as recorded_members
from .pods import parse_index
from .tfconfig import general_name

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1035_MAX = 63
DNS1035_ERROR = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
    "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)

# apimachinery's field.ErrorType strings, as they appear in messages.
REQUIRED = "Required"
INVALID = "Invalid"
FORBIDDEN = "Forbidden"
NOT_SUPPORTED = "NotSupported"
DUPLICATE = "Duplicate"

_TYPE_TEXT = {
    REQUIRED: "Required value",
    INVALID: "Invalid value",
    FORBIDDEN: "Forbidden",
    NOT_SUPPORTED: "Unsupported value",
    DUPLICATE: "Duplicate value",
}
_NO_VALUE = object()


@dataclass(frozen=True)
class FieldError:
    """One validation failure: what kind, which field, and why."""

    type: str
    field: str
    detail: str = ""
    value: Any = _NO_VALUE

    def __str__(self) -> str:
        text = f"{self.field}: {_TYPE_TEXT.get(self.type, self.type)}"
        if self.value is not _NO_VALUE:
            text += f": {_render_value(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) or value is None:
        return json.dumps(value)
    return f"<{type(value).__name__}>"


def summarize(errors: list[FieldError]) -> str:
    """One line naming every error, like a Kubernetes aggregate error (``[a, b]`` when several)."""
    texts = [str(e) for e in errors]
    if len(texts) == 1:
        return texts[0]
    return "[" + ", ".join(texts) + "]"


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_pod_count(job: Any, max_pods: int) -> list[FieldError]:
    """An error if the pods ``job`` asks for (replicas summed over types, unset = 1) exceed ``max_pods``.

    The cap is the operator's (``--max-pods-per-job``), not the API's: a job may validate against the
    CRD and still ask for more pods than one controller should create for it. Call on a job that
    :func:`validate` accepted; never raises on any other input either.
    """
    spec = job.get("spec") if isinstance(job, dict) else None
    specs = spec.get(api.SPEC_REPLICA_SPECS) if isinstance(spec, dict) else None
    if not isinstance(specs, dict):
        return []
    total = 0
    for replica_spec in specs.values():
        replicas = replica_spec.get(api.REPLICA_REPLICAS) if isinstance(replica_spec, dict) else None
        total += replicas if _is_int(replicas) and replicas > 0 else (api.DEFAULT_REPLICAS if replicas is None else 0)
    if total <= max_pods:
        return []
    return [
        FieldError(
            FORBIDDEN,
            f"spec.{api.SPEC_REPLICA_SPECS}",
            f"the job asks for {total} pods in total, more than this controller's limit of "
            f"{max_pods} pods per job (--max-pods-per-job)",
        )
    ]


def validate(job: Any) -> list[FieldError]:
    """All validation errors of ``job`` (empty list = valid). Never raises."""
    errors: list[FieldError] = []
    if not isinstance(job, dict):
        return [FieldError(INVALID, "<root>", "a TFJob must be a JSON object", job)]
    _validate_metadata(job.get("metadata"), errors)
    spec = job.get("spec")
    if not isinstance(spec, dict):
        errors.append(FieldError(REQUIRED, "spec", "must be an object"))
        return errors
    _validate_replica_specs(spec.get(api.SPEC_REPLICA_SPECS), errors)
    if not errors:
        _validate_generated_names(job["metadata"]["name"], spec[api.SPEC_REPLICA_SPECS], errors)
    _validate_run_policy(spec.get(api.SPEC_RUN_POLICY), errors)
    success_policy = spec.get(api.SPEC_SUCCESS_POLICY)
    if success_policy is not None and success_policy not in api.SUCCESS_POLICIES:
        errors.append(_not_supported(f"spec.{api.SPEC_SUCCESS_POLICY}", success_policy, api.SUCCESS_POLICIES))
    dynamic = spec.get(api.SPEC_ENABLE_DYNAMIC_WORKER)
    if dynamic is not None and not isinstance(dynamic, bool):
        errors.append(FieldError(INVALID, f"spec.{api.SPEC_ENABLE_DYNAMIC_WORKER}", "must be a boolean", dynamic))
    _validate_workers_to_delete(spec.get(api.SPEC_WORKERS_TO_DELETE), dynamic is True, errors)
    return errors


def _validate_workers_to_delete(value: Any, dynamic: bool, errors: list[FieldError]) -> None:
    """``spec.workersToDelete``: distinct worker indices in [0, MAX_REPLICAS), only on a dynamic job."""
    field = f"spec.{api.SPEC_WORKERS_TO_DELETE}"
    if value is None:
        return
    if not isinstance(value, list):
        errors.append(FieldError(INVALID, field, "must be a list of worker indices", value))
        return
    seen: set[int] = set()
    for position, index in enumerate(value):
        where = f"{field}[{position}]"
        if not _is_int(index) or not 0 <= index < api.MAX_REPLICAS:
            errors.append(FieldError(INVALID, where, f"must be a worker index from 0 to {api.MAX_REPLICAS - 1}", index))
        elif index in seen:
            errors.append(FieldError(DUPLICATE, where, value=index))
        else:
            seen.add(index)
    if value and not dynamic:
        errors.append(FieldError(INVALID, field, api.WORKERS_TO_DELETE_NEEDS_DYNAMIC))


def _not_supported(field: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    values = ", ".join(json.dumps(s) for s in supported)
    return FieldError(NOT_SUPPORTED, field, f"supported values: {values}", value)


def _validate_metadata(metadata: Any, errors: list[FieldError]) -> None:
    if not isinstance(metadata, dict):
        errors.append(FieldError(REQUIRED, "metadata", "must be an object"))
        return
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(REQUIRED, "metadata.name", "name is required"))
    else:
        problems = []
        if len(name) > _DNS1035_MAX:
            problems.append(f"must be no more than {_DNS1035_MAX} characters")
        if not _DNS1035.fullmatch(name):
            problems.append(DNS1035_ERROR)
        if problems:
            errors.append(FieldError(INVALID, "metadata.name", "should match: " + ",".join(problems), name))
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not namespace:
        errors.append(FieldError(REQUIRED, "metadata.namespace", "a TFJob is namespaced"))
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:
        errors.append(FieldError(REQUIRED, "metadata.uid", "needed for the ownerReferences of pods"))


def _validate_generated_names(name: str, replica_specs: dict[str, Any], errors: list[FieldError]) -> None:
    """Call only on a valid name and valid replica specs."""
    limit = api.MAX_GENERATED_NAME_LENGTH
    longest = ""
    for key, replica_spec in replica_specs.items():
        replicas = replica_spec.get(api.REPLICA_REPLICAS)
        count = api.DEFAULT_REPLICAS if replicas is None else replicas
        if count > 0:
            generated = general_name(name, key, count - 1)
            if len(generated) > len(longest):
                longest = generated
    if len(longest) > limit:
        allowed = limit - (len(longest) - len(name))
        errors.append(
            FieldError(
                INVALID,
                "metadata.name",
                f"must be no more than {allowed} characters for this job: the name of each of its pods and services, "
                f"<name>-<replica type>-<index>, must be a DNS-1035 label of at most {limit} characters, and "
                f"{json.dumps(longest)} has {len(longest)}",
                name,
            )
        )


def _validate_replica_specs(replica_specs: Any, errors: list[FieldError]) -> None:
    field = f"spec.{api.SPEC_REPLICA_SPECS}"
    if replica_specs is None:
        errors.append(FieldError(REQUIRED, field, "must be required"))
        return
    if not isinstance(replica_specs, dict):
        errors.append(FieldError(INVALID, field, "must be a map of replica type to replica spec", replica_specs))
        return
    if not replica_specs:
        errors.append(FieldError(REQUIRED, field, "must have at least one replica spec"))
        return
    seen: dict[str, str] = {}
    for key, replica_spec in replica_specs.items():
        canonical = canonical_replica_type(key)
        if canonical is None:
            errors.append(_not_supported(f"{field}[{key}]", key, api.REPLICA_TYPES))
            continue
        if canonical in seen:
            errors.append(FieldError(DUPLICATE, f"{field}[{key}]", f"same replica type as {seen[canonical]!r}", key))
            continue
        seen[canonical] = key
        _validate_replica_spec(f"{field}[{key}]", replica_spec, errors)
    if sum(1 for t in api.CHIEF_TYPES if t in seen) > 1:
        errors.append(FieldError(FORBIDDEN, field, "must not have more than 1 Chief or Master role"))


def _validate_replica_spec(field: str, replica_spec: Any, errors: list[FieldError]) -> None:
    containers_field = f"{field}.{api.REPLICA_TEMPLATE}.spec.containers"
    if not isinstance(replica_spec, dict):
        errors.append(FieldError(REQUIRED, containers_field, "must be specified"))
        return
    replicas = replica_spec.get(api.REPLICA_REPLICAS)
    if replicas is not None:
        if not _is_int(replicas):
            errors.append(FieldError(INVALID, f"{field}.{api.REPLICA_REPLICAS}", "must be an integer", replicas))
        elif replicas < 0:
            errors.append(
                FieldError(INVALID, f"{field}.{api.REPLICA_REPLICAS}", "must be greater than or equal to 0", replicas)
            )
        elif replicas > api.MAX_REPLICAS:
            errors.append(
                FieldError(
                    INVALID,
                    f"{field}.{api.REPLICA_REPLICAS}",
                    f"must be less than or equal to {api.MAX_REPLICAS}",
                    replicas,
                )
            )
    restart_policy = replica_spec.get(api.REPLICA_RESTART_POLICY)
    if restart_policy not in (None, "") and restart_policy not in api.RESTART_POLICIES:
        errors.append(_not_supported(f"{field}.{api.REPLICA_RESTART_POLICY}", restart_policy, api.RESTART_POLICIES))
    template = replica_spec.get(api.REPLICA_TEMPLATE)
    if not isinstance(template, dict):
        errors.append(FieldError(REQUIRED, containers_field, "must be specified"))
        return
    _validate_template_metadata(f"{field}.{api.REPLICA_TEMPLATE}.metadata", template.get("metadata"), errors)
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        errors.append(FieldError(REQUIRED, containers_field, "must be specified"))
        return
    containers = pod_spec.get("containers")
    if containers is not None and not isinstance(containers, list):
        errors.append(FieldError(INVALID, containers_field, "must be a list", containers))
        return
    if not containers:
        # Upstream reports both of these for an empty list (rule 3 and rule 5).
        errors.append(FieldError(REQUIRED, containers_field, "must be specified"))
        errors.append(FieldError(REQUIRED, containers_field, "must have at least one container with name tensorflow"))
        return
    has_tensorflow = False
    for i, container in enumerate(containers):
        container_field = f"{containers_field}[{i}]"
        if not isinstance(container, dict):
            errors.append(FieldError(INVALID, container_field, "must be an object", container))
            continue
        image = container.get("image")
        if not isinstance(image, str) or not image:
            errors.append(FieldError(REQUIRED, f"{container_field}.image", "must be required"))
        name = container.get("name")
        if name is not None and not isinstance(name, str):
            errors.append(FieldError(INVALID, f"{container_field}.name", "must be a string", name))
        if name == api.DEFAULT_CONTAINER_NAME:
            has_tensorflow = True
        _validate_env(f"{container_field}.env", container.get("env"), errors)
        _validate_ports(f"{container_field}.ports", container.get("ports"), errors)
    if not has_tensorflow:
        errors.append(FieldError(REQUIRED, containers_field, "must have at least one container with name tensorflow"))


def _validate_template_metadata(field: str, metadata: Any, errors: list[FieldError]) -> None:
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        errors.append(FieldError(INVALID, field, "must be an object", metadata))
        return
    for key in ("labels", "annotations"):
        mapping = metadata.get(key)
        if mapping is None:
            continue
        if not isinstance(mapping, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()
        ):
            errors.append(FieldError(INVALID, f"{field}.{key}", "must be a map of string to string", mapping))
    finalizers = metadata.get("finalizers")
    if finalizers is not None and (not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)):
        errors.append(FieldError(INVALID, f"{field}.finalizers", "must be a list of strings", finalizers))


def _validate_env(field: str, env: Any, errors: list[FieldError]) -> None:
    if env is None:
        return
    if not isinstance(env, list) or not all(isinstance(e, dict) for e in env):
        errors.append(FieldError(INVALID, field, "must be a list of objects", env))


def _validate_ports(field: str, ports: Any, errors: list[FieldError]) -> None:
    if ports is None:
        return
    if not isinstance(ports, list):
        errors.append(FieldError(INVALID, field, "must be a list", ports))
        return
    for i, port in enumerate(ports):
        if not isinstance(port, dict):
            errors.append(FieldError(INVALID, f"{field}[{i}]", "must be an object", port))
            continue
        number = port.get("containerPort")
        if not _is_int(number) or not 1 <= number <= 65535:
            errors.append(
                FieldError(INVALID, f"{field}[{i}].containerPort", "must be between 1 and 65535, inclusive", number)
            )
        name = port.get("name")
        if name is not None and not isinstance(name, str):
            errors.append(FieldError(INVALID, f"{field}[{i}].name", "must be a string", name))


def _validate_run_policy(run_policy: Any, errors: list[FieldError]) -> None:
    field = f"spec.{api.SPEC_RUN_POLICY}"
    if run_policy is None:
        return
    if not isinstance(run_policy, dict):
        errors.append(FieldError(INVALID, field, "must be an object", run_policy))
        return
    clean = run_policy.get(api.RUN_CLEAN_POD_POLICY)
    if clean not in (None, "") and clean not in api.CLEAN_POD_POLICIES:
        errors.append(_not_supported(f"{field}.{api.RUN_CLEAN_POD_POLICY}", clean, api.CLEAN_POD_POLICIES))
    for key in (api.RUN_TTL_SECONDS_AFTER_FINISHED, api.RUN_ACTIVE_DEADLINE_SECONDS, api.RUN_BACKOFF_LIMIT):
        value = run_policy.get(key)
        if value is None:
            continue
        if not _is_int(value):
            errors.append(FieldError(INVALID, f"{field}.{key}", "must be an integer", value))
        elif value < 0:
            errors.append(FieldError(INVALID, f"{field}.{key}", "must be greater than or equal to 0", value))
    suspend = run_policy.get(api.RUN_SUSPEND)
    if suspend is not None and not isinstance(suspend, bool):
        errors.append(FieldError(INVALID, f"{field}.{api.RUN_SUSPEND}", "must be a boolean", suspend))
    if run_policy.get(api.RUN_MANAGED_BY) is not None:
        managed_by = run_policy[api.RUN_MANAGED_BY]
        if managed_by not in api.MANAGED_BY_ALLOWED:
            errors.append(_not_supported(f"{field}.{api.RUN_MANAGED_BY}", managed_by, api.MANAGED_BY_ALLOWED))
    scheduling = run_policy.get(api.RUN_SCHEDULING_POLICY)
    if scheduling is not None and not isinstance(scheduling, dict):
        errors.append(FieldError(INVALID, f"{field}.{api.RUN_SCHEDULING_POLICY}", "must be an object", scheduling))


_STATUS_TIMES = (api.STATUS_START_TIME, api.STATUS_COMPLETION_TIME, api.STATUS_LAST_RECONCILE_TIME)


def validate_status(status: Any) -> list[FieldError]:
    """What cannot be read in a stored ``status`` (empty list = all of it can). Never raises.

    The controller owns the status, and reads a part it cannot interpret as absent (the next status
    write replaces it), so these are not reasons to fail a job; they say what a status written by
    someone else, or kept by an older or edited CRD, holds that the controller ignores.
    """
    if status is None:
        return []
    if not isinstance(status, dict):
        return [FieldError(INVALID, "status", "must be an object", status)]
    errors: list[FieldError] = []
    conditions = status.get(api.STATUS_CONDITIONS)
    if conditions is not None and not isinstance(conditions, list):
        errors.append(FieldError(INVALID, f"status.{api.STATUS_CONDITIONS}", "must be a list of objects", conditions))
    for i, condition in enumerate(conditions if isinstance(conditions, list) else ()):
        if not isinstance(condition, dict):
            errors.append(FieldError(INVALID, f"status.{api.STATUS_CONDITIONS}[{i}]", "must be an object", condition))
            continue
        for key in (api.CONDITION_TYPE, api.CONDITION_STATUS):
            if not isinstance(condition.get(key), str):
                errors.append(
                    FieldError(
                        INVALID, f"status.{api.STATUS_CONDITIONS}[{i}].{key}", "must be a string", condition.get(key)
                    )
                )
    for key in _STATUS_TIMES:
        value = status.get(key)
        if value is not None and parse_time(value) is None:
            errors.append(FieldError(INVALID, f"status.{key}", "must be an RFC 3339 time", value))
    dynamic = status.get(api.STATUS_DYNAMIC_WORKERS)
    field = f"status.{api.STATUS_DYNAMIC_WORKERS}"
    if dynamic is not None and not isinstance(dynamic, dict):
        errors.append(FieldError(INVALID, field, "must be an object", dynamic))
    members = dynamic.get(api.STATUS_MEMBERS) if isinstance(dynamic, dict) else None
    if members is not None and recorded_members(status) is None:
        errors.append(
            FieldError(
                INVALID,
                f"{field}.{api.STATUS_MEMBERS}",
                "must be an ascending list of distinct worker indices (read as 0..replicas-1)",
                members,
            )
        )
    workers = dynamic.get(api.STATUS_WORKERS) if isinstance(dynamic, dict) else None
    if workers is not None and not isinstance(workers, dict):
        errors.append(
            FieldError(INVALID, f"{field}.{api.STATUS_WORKERS}", "must be a map of worker index to record", workers)
        )
    states = ", ".join(json.dumps(s) for s in WORKER_STATES)
    for key, record in workers.items() if isinstance(workers, dict) else ():
        if parse_index(key) is None:  # what parse_worker_records drops, it reports
            errors.append(
                FieldError(INVALID, f"{field}.{api.STATUS_WORKERS}", "keys must be worker indices (decimal)", key)
            )
        elif WorkerRecord.from_status(record) is None:
            errors.append(
                FieldError(
                    INVALID,
                    f"{field}.{api.STATUS_WORKERS}[{key}]",
                    f"must be an object with a state of {states}",
                    record,
                )
            )
    return errors
