"""Gang scheduling: the PodGroup a TFJob needs, and what its pods must carry to be scheduled as a gang.

Why a module of its own: with ``--gang-scheduler-name`` upstream's training-operator keeps one PodGroup
per job (Volcano's ``scheduling.volcano.sh/v1beta1`` or scheduler-plugins' ``scheduling.x-k8s.io/v1alpha1``)
and holds the job's pods back while Volcano has not admitted it (its phase is still empty or ``Pending``).
What the group
says is decided here, purely, so every rule is a table test; when the pass writes it is
controller/tfjob/decision/podgroup.py.

Every function takes the *defaulted* job; a dynamic job's gang is described on :func:`min_member`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from . import api

VOLCANO: Final = "volcano"
SCHEDULER_PLUGINS: Final = "scheduler-plugins"
# The names `--gang-scheduler-name` accepts. Upstream takes any name other than volcano as the
# scheduler-plugins scheduler's name; we accept the two spellings in use (upstream's documented
# value and the name scheduler-plugins' Helm chart gives its scheduler) and reject typos.
SCHEDULER_NAMES: Final = (VOLCANO, SCHEDULER_PLUGINS, "scheduler-plugins-scheduler")

VOLCANO_GROUP: Final = "scheduling.volcano.sh"
VOLCANO_VERSION: Final = "v1beta1"
SCHEDULER_PLUGINS_GROUP: Final = "scheduling.x-k8s.io"
SCHEDULER_PLUGINS_VERSION: Final = "v1alpha1"
PLURAL: Final = "podgroups"
KIND: Final = "PodGroup"

# Pod membership (Volcano apis scheduling/v1beta1 and batch/v1alpha1 labels.go; scheduler-plugins types.go).
VOLCANO_GROUP_NAME_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_TASK_SPEC_ANNOTATION: Final = "volcano.sh/task-spec"
SCHEDULER_PLUGINS_POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"

VOLCANO_DEFAULT_QUEUE: Final = "default"
# Volcano phases that hold pod creation back (as upstream; ``Inqueue``, ``Running``, ``Unknown`` and
# ``Completed`` let pods be created): a new group has none yet.
VOLCANO_WAITING_PHASES: Final = ("", "Pending")

# The spec fields the controller owns; anything else another party put there is left alone.
# PodGroup spec fields (both APIs spell them alike; Volcano alone has queue and priorityClassName,
# scheduler-plugins alone scheduleTimeoutSeconds).
MIN_MEMBER: Final = "minMember"
MIN_RESOURCES: Final = "minResources"
QUEUE: Final = "queue"
PRIORITY_CLASS_NAME: Final = "priorityClassName"
SCHEDULE_TIMEOUT_SECONDS: Final = "scheduleTimeoutSeconds"
OWNED_SPEC_FIELDS: Final = (MIN_MEMBER, MIN_RESOURCES, QUEUE, PRIORITY_CLASS_NAME, SCHEDULE_TIMEOUT_SECONDS)

# Order of replica types when choosing whose pods make up minResources (highest priority first, then
# this order for equal priorities). Upstream sorts by PriorityClass value with random ties (its
# PriorityClass lister is never started, so every priority is 0); we break ties with what training
# cannot start without first.
GANG_TYPE_ORDER: Final = (api.CHIEF, api.MASTER, api.PS, api.EVALUATOR, api.WORKER)


@dataclass(frozen=True)
class Gang:
    """The gang scheduler the controller runs with: ``name`` as given to ``--gang-scheduler-name``."""

    name: str

    @property
    def volcano(self) -> bool:
        """Whether the gang scheduler is Volcano (else scheduler-plugins)."""
        return self.name == VOLCANO

    @property
    def group(self) -> str:
        """The API group of this scheduler's PodGroups."""
        return VOLCANO_GROUP if self.volcano else SCHEDULER_PLUGINS_GROUP

    @property
    def version(self) -> str:
        """The API version (without group) of this scheduler's PodGroups."""
        return VOLCANO_VERSION if self.volcano else SCHEDULER_PLUGINS_VERSION

    @property
    def api_version(self) -> str:
        """``group/version`` of this scheduler's PodGroups."""
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        """The name of this scheduler's PodGroup CRD."""
        return f"{PLURAL}.{self.group}"

    @property
    def scheduler_name(self) -> str:
        """The schedulerName pods get (upstream: ``volcano``, else the flag's value)."""
        return self.name


def gang_of(name: str) -> Gang | None:
    """The :class:`Gang` for a ``--gang-scheduler-name`` value ("" = off); ValueError for an unknown one."""
    if not name:
        return None
    normalized = name.lower() if name.lower() == VOLCANO else name  # upstream compares "volcano" case-blind
    if normalized not in SCHEDULER_NAMES:
        raise ValueError(f"unknown gang scheduler {name!r} (choose from {', '.join(SCHEDULER_NAMES)})")
    return Gang(normalized)


# --- reading the job ---------------------------------------------------------------------------------
def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scheduling_policy(job: dict[str, Any]) -> dict[str, Any]:
    """The job's ``runPolicy.schedulingPolicy``, or an empty one when it is absent or not an object."""
    run_policy = job["spec"].get(api.SPEC_RUN_POLICY)
    policy = run_policy.get(api.RUN_SCHEDULING_POLICY) if isinstance(run_policy, dict) else None
    return policy if isinstance(policy, dict) else {}


def total_replicas(job: dict[str, Any]) -> int:
    """The replicas of every type summed (types without an int count are skipped)."""
    return sum(
        spec[api.REPLICA_REPLICAS]
        for spec in job["spec"][api.SPEC_REPLICA_SPECS].values()
        if isinstance(spec, dict) and _int(spec.get(api.REPLICA_REPLICAS)) is not None
    )


def min_member(job: dict[str, Any], existing: dict[str, Any] | None, *, dynamic: bool, running: bool) -> int:
    """``minMember``: upstream's ``minAvailable``, else the total replicas; dynamic-aware for dynamic jobs.

    A dynamic job's gang never asks for more pods than the job has, and once the job runs its default
    gang never grows: workers added by a scale-up schedule as they fit instead of waiting as a gang,
    while a scale-down lowers ``minMember`` to the replicas that remain.

    Dynamic-aware gangs (``enableDynamicWorker``, beyond upstream, docs/tfjob-compatibility.md): a gang is
    what training cannot start without. Until the job runs, ``minMember`` is upstream's (``minAvailable``,
    else every replica); once it runs, scaling Workers up never raises it, scaling down lowers it to the
    replicas that remain, and the group's phase never holds pods back (a failed-over worker's replacement
    is scheduled on its own, like any pod beyond ``minMember`` of an admitted gang).
    """
    total = total_replicas(job)
    min_available = _int(scheduling_policy(job).get(api.SCHEDULING_MIN_AVAILABLE))
    if not dynamic:
        # A negative minAvailable means "no gang" to both schedulers, as 0 does; sent as is it would be
        # refused by scheduler-plugins' CRD since v0.29.7 (minimum 1), leaving the job waiting for ever.
        return max(0, min_available) if min_available is not None else total
    if min_available is not None:
        return max(0, min(min_available, total))
    if running and existing is not None:
        # minMember 0 is omitted when written (omitempty), so an absent one on our group is 0: a job
        # scaled to no workers and back must not turn its scale-up into a gang.
        current = _int(_spec(existing).get(MIN_MEMBER, 0))
        if current is not None and current >= 0:
            return min(current, total)
    return total


def _spec(obj: dict[str, Any] | None) -> dict[str, Any]:
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return spec if isinstance(spec, dict) else {}


# --- minResources ------------------------------------------------------------------------------------
_SUFFIXES: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_BINARY: Final = ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki")
_DECIMAL: Final = ("E", "P", "T", "G", "M", "k", "", "m", "u", "n")


def parse_quantity(value: Any) -> tuple[Decimal, bool] | None:
    """(value, binary suffix) of a resource.Quantity, or None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = Decimal(str(value))
        return (number, False) if number.is_finite() else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if suffix and text.endswith(suffix):
            digits, multiplier = text[: -len(suffix)], _SUFFIXES[suffix]
            binary = suffix.endswith("i")
            break
    else:
        digits, multiplier, binary = text, Decimal(1), False
    try:
        parsed = Decimal(digits)
    except InvalidOperation:
        return None
    if not parsed.is_finite() or digits.strip() != digits or not digits:
        return None
    return parsed * multiplier, binary


def format_quantity(value: Decimal, binary: bool) -> str:
    """The canonical text of a quantity: the largest suffix that keeps it a whole number (binary suffixes
    for a sum of binary quantities that allows one, as resource.Quantity prints them), nano-rounded up."""
    nanos = (value / _SUFFIXES["n"]).to_integral_value(rounding="ROUND_CEILING")
    value = nanos * _SUFFIXES["n"]
    if value == 0:
        return "0"
    if binary and value == value.to_integral_value():
        for suffix in _BINARY:
            scaled = value / _SUFFIXES[suffix]
            if scaled == scaled.to_integral_value():
                return f"{int(scaled)}{suffix}"
        return str(int(value))
    for suffix in _DECIMAL:
        scaled = value / _SUFFIXES[suffix]
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    return f"{int(nanos)}n"  # unreachable: value is a whole number of nanos


def _container_resources(container: Any) -> dict[str, Any]:
    """A container's requests, or its limits when it has no requests (upstream's rule)."""
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return {}
    requests = resources.get("requests")
    if requests is not None:
        return requests if isinstance(requests, dict) else {}
    limits = resources.get("limits")
    return limits if isinstance(limits, dict) else {}


def type_priority(job: dict[str, Any], replica_type: str, priority_classes: Mapping[str, int]) -> int:
    """The PriorityClass value of the type's pod template (0 when it names none or an unknown one).

    The controller passes no PriorityClasses today (upstream's lister is never started either, so all
    are 0 there too); the rule stays here, tested, so that honouring them (which upstream's gang does not do either) is an
    informer and RBAC away rather than a change to how the gang's minResources is chosen."""
    template = job["spec"][api.SPEC_REPLICA_SPECS][replica_type].get(api.REPLICA_TEMPLATE)
    spec = template.get("spec") if isinstance(template, dict) else None
    name = spec.get("priorityClassName") if isinstance(spec, dict) else None
    value = _int(priority_classes.get(name)) if isinstance(name, str) else None
    return 0 if value is None else value


def min_resources(job: dict[str, Any], members: int, priority_classes: Mapping[str, int]) -> dict[str, str]:
    """The summed container requests (limits where a container has no requests; no init containers, no
    overhead) of the first ``members`` pods, taking replica types by PriorityClass value, highest first."""
    specs = job["spec"][api.SPEC_REPLICA_SPECS]
    present = [t for t in GANG_TYPE_ORDER if t in specs]
    order = sorted(present, key=lambda t: -type_priority(job, t, priority_classes))  # stable: ties keep GANG_TYPE_ORDER
    sums: dict[str, Decimal] = {}
    binary: dict[str, bool] = {}
    left = members
    for replica_type in order:
        if left <= 0:
            break
        replicas = _int(specs[replica_type].get(api.REPLICA_REPLICAS)) or 0
        pods = min(replicas, left)
        left -= pods
        template = specs[replica_type].get(api.REPLICA_TEMPLATE)
        pod_spec = template.get("spec") if isinstance(template, dict) else None
        containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
        for container in containers if isinstance(containers, list) else ():
            for resource, quantity in _container_resources(container).items():
                parsed = parse_quantity(quantity)
                if not isinstance(resource, str) or parsed is None:
                    continue
                amount, is_binary = parsed
                sums[resource] = sums.get(resource, Decimal(0)) + amount * pods
                binary[resource] = binary.get(resource, True) and is_binary
    return {resource: format_quantity(sums[resource], binary[resource]) for resource in sorted(sums)}


# --- the PodGroup ------------------------------------------------------------------------------------
def desired_spec(
    gang: Gang,
    job: dict[str, Any],
    existing: dict[str, Any] | None,
    *,
    dynamic: bool,
    running: bool,
    priority_classes: Mapping[str, int],
) -> dict[str, Any]:
    """The PodGroup spec for ``job`` as upstream fills it, our fields only."""
    policy = scheduling_policy(job)
    members = min_member(job, existing, dynamic=dynamic, running=running)
    spec: dict[str, Any] = {}
    if members:
        spec[MIN_MEMBER] = members  # 0 is omitted (omitempty in both APIs)
    given = policy.get(api.SCHEDULING_MIN_RESOURCES)
    if isinstance(given, dict):
        resources = copy.deepcopy(given)
    else:
        resources = min_resources(job, members, priority_classes)
    if gang.volcano:
        spec[MIN_RESOURCES] = resources  # never nil in Volcano's: {} when nothing is requested
        queue = _spec(existing).get(QUEUE) if existing is not None else None
        if not (isinstance(queue, str) and queue):
            wanted = policy.get(api.SCHEDULING_QUEUE)
            queue = wanted if isinstance(wanted, str) and wanted else VOLCANO_DEFAULT_QUEUE
        spec[QUEUE] = queue
        priority_class = policy.get(api.SCHEDULING_PRIORITY_CLASS)
        if isinstance(priority_class, str) and priority_class:
            spec[PRIORITY_CLASS_NAME] = priority_class
    else:
        if resources:
            spec[MIN_RESOURCES] = resources
        timeout = _int(policy.get(api.SCHEDULING_SCHEDULE_TIMEOUT_SECONDS))
        if timeout is not None:
            spec[SCHEDULE_TIMEOUT_SECONDS] = timeout
    return spec


def new_pod_group(
    gang: Gang, job: dict[str, Any], owner_reference: dict[str, Any], spec: dict[str, Any]
) -> dict[str, Any]:
    """The PodGroup to create: named like the job, controlled by it, the job's annotations copied (upstream
    copies them at create only), no labels."""
    meta = job["metadata"]
    metadata: dict[str, Any] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "ownerReferences": [owner_reference],
    }
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": gang.api_version, "kind": KIND, "metadata": metadata, "spec": copy.deepcopy(spec)}


def updated_pod_group(existing: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any] | None:
    """``existing`` with our spec fields set to ``spec`` (the rest kept), or None if nothing changes."""
    current = _spec(existing)
    if all(current.get(key) == spec.get(key) for key in OWNED_SPEC_FIELDS):
        return None
    new_spec = {k: v for k, v in current.items() if k not in OWNED_SPEC_FIELDS}
    new_spec.update(copy.deepcopy(spec))
    updated = copy.deepcopy(existing)
    updated["spec"] = new_spec
    return updated


def phase(pod_group: dict[str, Any] | None) -> str:
    """The PodGroup's ``status.phase``, "" when there is none (a group nobody admitted yet)."""
    status = pod_group.get("status") if isinstance(pod_group, dict) else None
    value = status.get("phase") if isinstance(status, dict) else None
    return value if isinstance(value, str) else ""


def blocks_pods(gang: Gang, pod_group: dict[str, Any] | None) -> bool:
    """Whether pods must wait for the gang scheduler (Volcano only: until it admitted the group)."""
    if not gang.volcano:
        return False
    return pod_group is None or phase(pod_group) in VOLCANO_WAITING_PHASES


# --- pods ----------------------------------------------------------------------------------------------
def custom_scheduler_set(job: dict[str, Any], gang: Gang) -> bool:
    """Whether any replica template names another scheduler (upstream's isCustomSchedulerSet)."""
    for spec in job["spec"][api.SPEC_REPLICA_SPECS].values():
        template = spec.get(api.REPLICA_TEMPLATE) if isinstance(spec, dict) else None
        pod_spec = template.get("spec") if isinstance(template, dict) else None
        name = pod_spec.get("schedulerName") if isinstance(pod_spec, dict) else None
        if isinstance(name, str) and name and name != gang.scheduler_name:
            return True
    return False


def prepare_pod(gang: Gang, pod: dict[str, Any], job_name: str, replica_type: str) -> None:
    """Make ``pod`` a member of the job's gang (in place)."""
    spec = pod.setdefault("spec", {})
    if not spec.get("schedulerName"):
        spec["schedulerName"] = gang.scheduler_name
    meta = pod["metadata"]
    if gang.volcano:
        annotations = meta.setdefault("annotations", {})
        annotations[VOLCANO_GROUP_NAME_ANNOTATION] = job_name
        annotations[VOLCANO_TASK_SPEC_ANNOTATION] = replica_type.lower()
    else:
        meta.setdefault("labels", {})[SCHEDULER_PLUGINS_POD_GROUP_LABEL] = job_name
