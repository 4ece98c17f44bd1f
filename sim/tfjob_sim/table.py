"""Server-side printing: ``meta.k8s.io/v1`` Table responses, as ``kubectl get`` asks for them.

Why: kubectl's human-readable output comes from the server (Accept ``as=Table``). Without it,
kubectl falls back to NAME/AGE for every type and never shows a CRD's additionalPrinterColumns.

Contract: :func:`to_table` turns stored objects into one Table dict (one row per object) for a
:class:`~tfjob_sim.resources.ResourceType`. Columns: the kubectl printers' for the common
built-ins (pods, namespaces, nodes, services, configmaps, secrets, leases, events), a CRD's
``additionalPrinterColumns`` (with the implicit Name first, Age when none are declared), and the
default Name / Created At for everything else. ``include_object`` is ``None`` | ``Metadata`` |
``Object`` like the real ``includeObject`` parameter.
"""

from __future__ import annotations

import datetime as _dt
import logging
import time
from collections.abc import Callable
from typing import Any

from tfjob_sim import errors
from tfjob_sim.resources import ResourceType
from tfjob_sim.selectors import label_selector_from_dict
from tfjob_sim.storagetypes import DEFAULT_CLASS_ANNOTATION, access_modes_text, pv_row_values

log = logging.getLogger(__name__)

_NAME_COL = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "priority": 0,
}
_AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. "
    "It is not guaranteed to be set in happens-before order across separate operations. Clients may "
    "not set this value. It is represented in RFC3339 form and is in UTC."
)


def _col(name: str, type_: str = "string", priority: int = 0, fmt: str = "", description: str = "") -> dict:
    return {"name": name, "type": type_, "format": fmt, "description": description or name, "priority": priority}


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()
    except ValueError:
        return None


def _age(obj: dict, now: float) -> str:
    from tfjob_sim.jsonpath import human_duration

    created = _parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    if created is None:
        return "<unknown>"
    return human_duration(now - created)


def _since(text: str | None, now: float) -> str:
    from tfjob_sim.jsonpath import human_duration

    when = _parse_time(text)
    return "<unknown>" if when is None else human_duration(now - when)


# ------------------------------------------------------------------------------ printers


def _pod_row(pod: dict, now: float) -> list:
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = 0
    last_restart: str | None = None
    reason = status.get("reason") or status.get("phase") or "Pending"
    init_statuses = status.get("initContainerStatuses") or []
    initializing = False
    for i, s in enumerate(init_statuses):
        restarts += int(s.get("restartCount") or 0)
        state = s.get("state") or {}
        term = state.get("terminated")
        if term and term.get("exitCode") == 0:
            continue
        if term:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{term.get('exitCode')}")
        elif (state.get("waiting") or {}).get("reason") and state["waiting"]["reason"] != "PodInitializing":
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        initializing = True
        break
    if not initializing:
        has_running = False
        for s in reversed(statuses):
            restarts += int(s.get("restartCount") or 0)
            finished = ((s.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
            if finished and (last_restart is None or finished > last_restart):
                last_restart = finished
            state = s.get("state") or {}
            if (state.get("waiting") or {}).get("reason"):
                reason = state["waiting"]["reason"]
            elif state.get("terminated"):
                term = state["terminated"]
                reason = term.get("reason") or (
                    f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode')}"
                )
            elif state.get("running") and s.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restart_text = str(restarts)
    if restarts and last_restart:
        restart_text = f"{restarts} ({_since(last_restart, now)} ago)"
    pod_ip = status.get("podIP") or "<none>"
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(containers)}",
        reason,
        restart_text,
        _age(pod, now),
        pod_ip,
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        _readiness_gates(pod),
    ]


def _readiness_gates(pod: dict) -> str:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    conditions = {c.get("type"): c.get("status") for c in (pod.get("status") or {}).get("conditions") or []}
    ready = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
    return f"{ready}/{len(gates)}"


_POD_COLS = [
    _NAME_COL,
    _col("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
    _col("Status", description="The aggregate status of the containers in this pod."),
    _col(
        "Restarts",
        description="The number of times the containers in this pod have been restarted and "
        "when the last container in this pod has restarted.",
    ),
    _col("Age", description=_AGE_DESCRIPTION),
    _col(
        "IP",
        priority=1,
        description="IP address allocated to the pod. Routable at least within the "
        "cluster. Empty if not yet allocated.",
    ),
    _col("Node", priority=1, description="NodeName is a request to schedule this pod onto a specific node."),
    _col(
        "Nominated Node",
        priority=1,
        description="nominatedNodeName is set only when this pod preempts other pods on the node.",
    ),
    _col(
        "Readiness Gates",
        priority=1,
        description="If specified, all readiness gates will be evaluated for pod readiness.",
    ),
]


def _node_row(node: dict, now: float) -> list:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready")
    status = "Ready" if ready == "True" else "NotReady" if ready in ("False", "Unknown") else "Unknown"
    if (node.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = (node.get("metadata") or {}).get("labels") or {}
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion") or ""
    return [node["metadata"]["name"], status, ",".join(roles) or "<none>", _age(node, now), version]


def _service_row(svc: dict, now: float) -> list:
    spec = svc.get("spec") or {}
    ports = []
    for p in spec.get("ports") or []:
        text = f"{p.get('port')}"
        if p.get("nodePort"):
            text += f":{p['nodePort']}"
        ports.append(f"{text}/{p.get('protocol', 'TCP')}")
    external = ",".join(spec.get("externalIPs") or []) or "<none>"
    return [
        svc["metadata"]["name"],
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or "<none>",
        external,
        ",".join(ports) or "<none>",
        _age(svc, now),
        _selector_text(spec.get("selector")),
    ]


def _selector_text(selector: dict | None) -> str:
    if not selector:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _lease_row(lease: dict, now: float) -> list:
    holder = (lease.get("spec") or {}).get("holderIdentity") or ""
    return [lease["metadata"]["name"], holder, _age(lease, now)]


def _event_row(event: dict, now: float) -> list:
    involved = event.get("involvedObject") or {}
    last = (
        event.get("lastTimestamp") or event.get("eventTime") or (event.get("metadata") or {}).get("creationTimestamp")
    )
    return [
        _since(last, now) if last else "<unknown>",
        event.get("type", ""),
        event.get("reason", ""),
        f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}",
        event.get("message", ""),
    ]


def _template_cells(obj: dict) -> list:
    spec = obj.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    names = ",".join(str(c.get("name", "")) for c in containers if isinstance(c, dict))
    images = ",".join(str(c.get("image", "")) for c in containers if isinstance(c, dict))
    selector = spec.get("selector") or {}
    try:
        text = str(label_selector_from_dict(selector)) if selector else "<none>"
    except ValueError:
        text = "<invalid>"
    return [names, images, text or "<none>"]


def _deployment_row(d: dict, now: float) -> list:
    spec, status = d.get("spec") or {}, d.get("status") or {}
    desired = spec.get("replicas", 0)
    return [
        d["metadata"]["name"],
        f"{status.get('readyReplicas', 0)}/{desired}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        _age(d, now),
        *_template_cells(d),
    ]


def _replicaset_row(rs: dict, now: float) -> list:
    spec, status = rs.get("spec") or {}, rs.get("status") or {}
    return [
        rs["metadata"]["name"],
        spec.get("replicas", 0),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        _age(rs, now),
        *_template_cells(rs),
    ]


def _binding_row(binding: dict, now: float) -> list:
    ref = binding.get("roleRef") or {}
    subjects = [s for s in binding.get("subjects") or () if isinstance(s, dict)]

    def names(kind: str) -> str:
        return ", ".join(
            f"{s.get('namespace', '')}/{s.get('name', '')}" if kind == "ServiceAccount" else str(s.get("name", ""))
            for s in subjects
            if s.get("kind") == kind
        )

    return [
        binding["metadata"]["name"],
        f"{ref.get('kind', '')}/{ref.get('name', '')}",
        _age(binding, now),
        names("User"),
        names("Group"),
        names("ServiceAccount"),
    ]


_BINDING_COLUMNS = [
    _NAME_COL,
    _col("Role"),
    _col("Age", description=_AGE_DESCRIPTION),
    _col("Users", priority=1),
    _col("Groups", priority=1),
    _col("ServiceAccounts", priority=1),
]

_WORKLOAD_WIDE = [_col("Containers", priority=1), _col("Images", priority=1), _col("Selector", priority=1)]


def _flow_schema_row(fs: dict, now: float) -> list:
    spec = fs.get("spec") or {}
    method = (spec.get("distinguisherMethod") or {}).get("type") or "<none>"
    dangling = next(
        (c.get("status", "") for c in (fs.get("status") or {}).get("conditions") or () if c.get("type") == "Dangling"),
        "?",
    )
    return [
        fs["metadata"]["name"],
        (spec.get("priorityLevelConfiguration") or {}).get("name", ""),
        spec.get("matchingPrecedence", 0),
        method,
        _age(fs, now),
        dangling,
    ]


def _priority_level_row(pl: dict, now: float) -> list:
    spec = pl.get("spec") or {}
    limited = spec.get("limited")
    shares: Any = "<none>"
    queues: Any = "<none>"
    hand: Any = "<none>"
    length: Any = "<none>"
    if limited is not None:
        shares = limited.get("nominalConcurrencyShares", 0)
        queuing = (limited.get("limitResponse") or {}).get("queuing")
        if queuing is not None:
            queues, hand, length = queuing.get("queues"), queuing.get("handSize"), queuing.get("queueLengthLimit")
    return [pl["metadata"]["name"], spec.get("type", ""), shares, queues, hand, length, _age(pl, now)]


def _pvc_row(pvc: dict, now: float) -> list:
    spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
    bound = status.get("phase") == "Bound"
    return [
        pvc["metadata"]["name"],
        status.get("phase", ""),
        spec.get("volumeName", ""),
        str((status.get("capacity") or {}).get("storage", "")) if bound else "",
        access_modes_text(status.get("accessModes")) if bound else "",
        spec.get("storageClassName") or "",
        spec.get("volumeAttributesClassName") or "<unset>",
        _age(pvc, now),
        spec.get("volumeMode", ""),
    ]


def _pv_row(pv: dict, now: float) -> list:
    cells = pv_row_values(pv)
    spec = pv.get("spec") or {}
    return [
        pv["metadata"]["name"],
        cells["capacity"],
        cells["access"],
        cells["reclaim"],
        cells["status"],
        cells["claim"],
        cells["class"],
        spec.get("volumeAttributesClassName") or "<unset>",
        cells["reason"],
        _age(pv, now),
        spec.get("volumeMode", ""),
    ]


def _storage_class_row(sc: dict, now: float) -> list:
    name = sc["metadata"]["name"]
    if ((sc["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION)) == "true":
        name += " (default)"
    return [
        name,
        sc.get("provisioner", ""),
        sc.get("reclaimPolicy", ""),
        sc.get("volumeBindingMode", ""),
        bool(sc.get("allowVolumeExpansion", False)),
        _age(sc, now),
    ]


_PRINTERS: dict[tuple[str, str], tuple[list[dict], Callable[[dict, float], list]]] = {
    ("", "PersistentVolumeClaim"): (
        [
            _NAME_COL,
            _col("Status"),
            _col("Volume"),
            _col("Capacity"),
            _col("Access Modes"),
            _col("StorageClass"),
            _col("VolumeAttributesClass"),
            _col("Age", description=_AGE_DESCRIPTION),
            _col("VolumeMode", priority=1),
        ],
        _pvc_row,
    ),
    ("", "PersistentVolume"): (
        [
            _NAME_COL,
            _col("Capacity"),
            _col("Access Modes"),
            _col("Reclaim Policy"),
            _col("Status"),
            _col("Claim"),
            _col("StorageClass"),
            _col("VolumeAttributesClass"),
            _col("Reason"),
            _col("Age", description=_AGE_DESCRIPTION),
            _col("VolumeMode", priority=1),
        ],
        _pv_row,
    ),
    ("storage.k8s.io", "StorageClass"): (
        [
            _NAME_COL,
            _col("Provisioner"),
            _col("ReclaimPolicy"),
            _col("VolumeBindingMode"),
            _col("AllowVolumeExpansion", "boolean"),
            _col("Age", description=_AGE_DESCRIPTION),
        ],
        _storage_class_row,
    ),
    ("rbac.authorization.k8s.io", "RoleBinding"): (_BINDING_COLUMNS, _binding_row),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): (_BINDING_COLUMNS, _binding_row),
    ("apps", "Deployment"): (
        [
            _NAME_COL,
            _col("Ready"),
            _col("Up-to-date", "integer"),
            _col("Available", "integer"),
            _col("Age", description=_AGE_DESCRIPTION),
            *_WORKLOAD_WIDE,
        ],
        _deployment_row,
    ),
    ("apps", "ReplicaSet"): (
        [
            _NAME_COL,
            _col("Desired", "integer"),
            _col("Current", "integer"),
            _col("Ready", "integer"),
            _col("Age", description=_AGE_DESCRIPTION),
            *_WORKLOAD_WIDE,
        ],
        _replicaset_row,
    ),
    ("", "Pod"): (_POD_COLS, _pod_row),
    ("", "Namespace"): (
        [_NAME_COL, _col("Status"), _col("Age", description=_AGE_DESCRIPTION)],
        lambda o, now: [o["metadata"]["name"], (o.get("status") or {}).get("phase", ""), _age(o, now)],
    ),
    ("", "Node"): (
        [_NAME_COL, _col("Status"), _col("Roles"), _col("Age", description=_AGE_DESCRIPTION), _col("Version")],
        _node_row,
    ),
    ("", "Service"): (
        [
            _NAME_COL,
            _col("Type"),
            _col("Cluster-IP"),
            _col("External-IP"),
            _col("Port(s)"),
            _col("Age", description=_AGE_DESCRIPTION),
            _col("Selector", priority=1),
        ],
        _service_row,
    ),
    ("", "ConfigMap"): (
        [_NAME_COL, _col("Data", "integer"), _col("Age", description=_AGE_DESCRIPTION)],
        lambda o, now: [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}), _age(o, now)],
    ),
    ("", "Secret"): (
        [_NAME_COL, _col("Type"), _col("Data", "integer"), _col("Age", description=_AGE_DESCRIPTION)],
        lambda o, now: [o["metadata"]["name"], o.get("type", ""), len(o.get("data") or {}), _age(o, now)],
    ),
    ("", "Event"): ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")], _event_row),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"): (
        [
            _NAME_COL,
            _col("PriorityLevel"),
            _col("MatchingPrecedence", "string"),
            _col("DistinguisherMethod"),
            _col("Age", description=_AGE_DESCRIPTION),
            _col("MissingPL"),
        ],
        _flow_schema_row,
    ),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"): (
        [
            _NAME_COL,
            _col("Type"),
            _col("NominalConcurrencyShares"),
            _col("Queues"),
            _col("HandSize"),
            _col("QueueLengthLimit"),
            _col("Age", description=_AGE_DESCRIPTION),
        ],
        _priority_level_row,
    ),
    ("coordination.k8s.io", "Lease"): (
        [_NAME_COL, _col("Holder"), _col("Age", description=_AGE_DESCRIPTION)],
        _lease_row,
    ),
}


def _custom_columns(rt: ResourceType) -> tuple[list[dict], Callable[[dict, float], list]]:
    from tfjob_sim import jsonpath

    declared = rt.printer_columns
    if not declared:
        return (
            [_NAME_COL, _col("Age", "date", description=_AGE_DESCRIPTION)],
            lambda o, now: [o["metadata"]["name"], _age(o, now)],
        )
    # CRD validation checks only a path's shape (it must start with "."), so a path the JSONPath
    # parser rejects can be stored. The apiextensions TableConvertor stops building at that column:
    # the Name column and the columns before the bad one are served, that one and all after it are not.
    columns = [_NAME_COL]
    compiled = []
    for c in declared:
        path = c.get("jsonPath", "")
        try:
            compiled.append((jsonpath.compile_path(path), c.get("type", "string"), c.get("format", "")))
        except ValueError as exc:
            log.warning(
                "printer column %r of %s has an unparsable jsonPath %r (%s): it and the columns after "
                "it are not printed",
                c.get("name"),
                rt.qualified,
                path,
                exc,
            )
            break
        columns.append(
            {
                "name": c.get("name", ""),
                "type": c.get("type", "string"),
                "format": c.get("format", ""),
                "description": c.get("description", ""),
                "priority": int(c.get("priority", 0) or 0),
            }
        )

    def row(obj: dict, now: float) -> list:
        current = _dt.datetime.fromtimestamp(now, _dt.UTC)
        cells: list[Any] = [obj["metadata"]["name"]]
        for path, type_, fmt in compiled:
            values = path(obj)  # evaluation errors give [] (an empty cell), like the TableConvertor
            cells.append(jsonpath.format_cell(values, type_, fmt, now=current))
        return cells

    return columns, row


def columns_for(rt: ResourceType) -> tuple[list[dict], Callable[[dict, float], list]]:
    if rt.custom:
        return _custom_columns(rt)
    printer = _PRINTERS.get((rt.group, rt.kind))
    if printer is not None:
        return printer
    return (
        [_NAME_COL, _col("Created At", "date", description=_AGE_DESCRIPTION)],
        lambda o, now: [o["metadata"]["name"], (o.get("metadata") or {}).get("creationTimestamp")],
    )


def _row_object(obj: dict, include_object: str) -> dict | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def to_table(
    rt: ResourceType,
    objects: list[dict],
    include_object: str = "Metadata",
    list_meta: dict | None = None,
    with_columns: bool = True,
    now: float | None = None,
) -> dict:
    """A ``meta.k8s.io/v1`` Table for ``objects``; raises 400 for a bad ``include_object``."""
    if include_object not in ("None", "Metadata", "Object"):
        raise errors.bad_request(
            f'includeObject: Unsupported value: "{include_object}": supported values: "Metadata", "None", "Object"'
        )
    now = time.time() if now is None else now
    columns, row_fn = columns_for(rt)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": row_fn(obj, now)}
        ref = _row_object(obj, include_object)
        if ref is not None:
            row["object"] = ref
        rows.append(row)
    table: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta or {}}
    table["columnDefinitions"] = columns if with_columns else None
    table["rows"] = rows
    return table
