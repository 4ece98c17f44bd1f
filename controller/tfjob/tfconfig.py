"""TF_CONFIG: the cluster description TensorFlow reads from each pod's environment.

Why byte-exactness matters: TF_CONFIG is the one interface between the controller and the user's
training code. Dense TF_CONFIG (the default) must be byte-for-byte what training-operator
generates -- same key order, no whitespace, same addresses -- so that nothing changes for existing
jobs. Sparse TF_CONFIG (``enableDynamicWorker: true``) fixes upstream quirk Q8.

What a task's TF_CONFIG holds is on :func:`tf_config`.
"""

from __future__ import annotations

import json
from typing import Any

from . import api

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _go_json(value: Any) -> str:
    """JSON as Go's encoding/json writes it: compact, HTML-escaped, insertion-ordered objects."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _GO_ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


def replica_specs(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``spec.tfReplicaSpecs`` of a validated job."""
    specs: dict[str, dict[str, Any]] = job["spec"][api.SPEC_REPLICA_SPECS]  # a validated job's shape
    return specs


def replicas_of(job: dict[str, Any], replica_type: str) -> int:
    """Desired replicas of ``replica_type`` (0 if the type is not in the spec)."""
    replica_spec = replica_specs(job).get(replica_type)
    if replica_spec is None:
        return 0
    replicas: int = replica_spec.get(api.REPLICA_REPLICAS, api.DEFAULT_REPLICAS)
    return replicas


def is_distributed(job: dict[str, Any]) -> bool:
    """A dynamic-worker job always; any other job when it has more (or fewer) than exactly one replica
    in total over the known types (upstream's rule)."""
    if job["spec"].get(api.SPEC_ENABLE_DYNAMIC_WORKER) is True:
        return True
    specs = replica_specs(job)
    total = 0
    for replica_type in api.REPLICA_TYPES:
        if replica_type in specs:
            replicas = specs[replica_type].get(api.REPLICA_REPLICAS)
            total += 1 if replicas is None else replicas
    return total != 1


def tensorflow_container(pod_spec: dict[str, Any]) -> dict[str, Any] | None:
    """The first container named ``tensorflow`` in a pod spec, or None."""
    containers: list[dict[str, Any]] = pod_spec.get("containers") or []
    for container in containers:
        if container.get("name") == api.DEFAULT_CONTAINER_NAME:
            return container
    return None


def replica_port(job: dict[str, Any], replica_type: str) -> int:
    """The ``tfjob-port`` containerPort of the type's ``tensorflow`` container (default 2222)."""
    template = replica_specs(job)[replica_type].get(api.REPLICA_TEMPLATE) or {}
    container = tensorflow_container(template.get("spec") or {})
    if container is not None:
        for port in container.get("ports") or []:
            if port.get("name") == api.DEFAULT_PORT_NAME:
                number: int = port["containerPort"]
                return number
    return api.DEFAULT_PORT


def general_name(job_name: str, replica_type: str, index: int) -> str:
    """``<job>-<rt>-<index>``, the name of a replica's pod and service ('/' replaced by '-')."""
    return f"{job_name}-{replica_type.lower()}-{index}".replace("/", "-")


def address(job: dict[str, Any], replica_type: str, index: int, cluster_domain: str = "") -> str:
    """``<name>.<namespace>.svc[.<cluster_domain>]:<port>`` of replica ``index`` of ``replica_type``."""
    metadata = job["metadata"]
    host = f"{general_name(metadata['name'], replica_type, index)}.{metadata['namespace']}.svc"
    if cluster_domain:
        host += f".{cluster_domain}"
    return f"{host}:{replica_port(job, replica_type)}"


def _addresses(job: dict[str, Any], replica_type: str, cluster_domain: str) -> list[str]:
    return [address(job, replica_type, i, cluster_domain) for i in range(replicas_of(job, replica_type))]


def dense_cluster(job: dict[str, Any], cluster_domain: str = "") -> dict[str, list[str]]:
    """Every known type in the spec -> its addresses, keys sorted (as Go marshals a map)."""
    specs = replica_specs(job)
    types = sorted((t for t in api.REPLICA_TYPES if t in specs), key=str.lower)
    return {t.lower(): _addresses(job, t, cluster_domain) for t in types}


class TFConfigs:
    """The TF_CONFIG values of one job's tasks. The part every task shares (the dense cluster, the
    PS list) is serialised once, so creating n pods costs O(n) rather than O(n^2)."""

    def __init__(self, job: dict[str, Any], cluster_domain: str = "") -> None:
        self.job = job
        self.cluster_domain = cluster_domain
        self.distributed = is_distributed(job)
        self.sparse = job["spec"].get(api.SPEC_ENABLE_DYNAMIC_WORKER) is True
        self._dense_cluster: str | None = None
        self._ps_list: str | None = None

    def for_task(self, replica_type: str, index: int) -> str | None:
        """TF_CONFIG for replica ``index`` of ``replica_type``, or None if the job is not distributed."""
        if not self.distributed:
            return None
        task = _go_json({"type": replica_type.lower(), "index": index})
        if not self.sparse:
            if self._dense_cluster is None:
                self._dense_cluster = _go_json(dense_cluster(self.job, self.cluster_domain))
            return '{"cluster":' + self._dense_cluster + ',"task":' + task + ',"environment":"cloud"}'
        if self._ps_list is None:
            has_ps = api.PS in replica_specs(self.job)
            self._ps_list = _go_json(_addresses(self.job, api.PS, self.cluster_domain) if has_ps else [])
        own = _go_json({str(index): address(self.job, replica_type, index, self.cluster_domain)})
        worker = own if replica_type == api.WORKER else "{}"
        cluster = '{"worker":' + worker + ',"ps":' + self._ps_list
        if replica_type not in (api.WORKER, api.PS):
            cluster += "," + _go_json(replica_type.lower()) + ":" + own
        return '{"cluster":' + cluster + '},"task":' + task + "}"


def dense_tf_config(job: dict[str, Any], replica_type: str, index: int, cluster_domain: str = "") -> str:
    """Dense TF_CONFIG regardless of enableDynamicWorker (the job must be distributed to use it)."""
    return _go_json(
        {
            "cluster": dense_cluster(job, cluster_domain),
            "task": {"type": replica_type.lower(), "index": index},
            "environment": "cloud",
        }
    )


def sparse_tf_config(job: dict[str, Any], replica_type: str, index: int, cluster_domain: str = "") -> str:
    """Sparse TF_CONFIG regardless of enableDynamicWorker."""
    own = {str(index): address(job, replica_type, index, cluster_domain)}
    cluster: dict[str, Any] = {
        "worker": own if replica_type == api.WORKER else {},
        "ps": _addresses(job, api.PS, cluster_domain) if api.PS in replica_specs(job) else [],
    }
    if replica_type not in (api.WORKER, api.PS):
        cluster[replica_type.lower()] = own
    return _go_json({"cluster": cluster, "task": {"type": replica_type.lower(), "index": index}})


def tf_config(job: dict[str, Any], replica_type: str, index: int, cluster_domain: str = "") -> str | None:
    """The TF_CONFIG value for replica ``index`` of ``replica_type``, or None if not distributed.

    All functions take a *defaulted, validated* job and never mutate it.

    * Only distributed jobs get TF_CONFIG (:func:`tf_config` returns None otherwise). A job with
      ``enableDynamicWorker: true`` is always distributed, whatever its replica counts (0 workers
      included): it can be scaled at any moment, so a pod created while it has one replica in total
      (a PS re-created while Worker replicas are 0, a single worker before a scale-up) must already
      know the cluster the later pods will join. Any other job follows upstream: it is distributed
      when the sum of ``replicas`` over the five known types is not 1.
    * The address of replica i of type T is ``<job>-<t>-<i>.<namespace>.svc[.<cluster_domain>]:<port>``
      with ``t`` lower case and ``port`` the ``tfjob-port`` of T's ``tensorflow`` container (2222
      by default; a port under another name is not used).
    * Dense: ``{"cluster":{<every type in the spec, keys sorted>:[addresses]},"task":{"type":t,"index":i},
      "environment":"cloud"}``.
    * Sparse (our definition, documented in docs/tfjob-compatibility.md): every task gets its own
      address under its own type, as a one-entry map from the decimal index, plus the full PS list
      (``[]`` when there is no PS, never null). Key order: ``worker`` (always present, possibly
      ``{}``), ``ps``, then the task's own type when it is not worker/ps. PS tasks get the full PS
      list (which contains their own address at their own index).
      e.g. ``{"cluster":{"worker":{},"ps":["j-ps-0.ns.svc:2222"],"chief":{"0":"j-chief-0.ns.svc:2222"}},
      "task":{"type":"chief","index":0}}``.
    """
    return TFConfigs(job, cluster_domain).for_task(replica_type, index)
