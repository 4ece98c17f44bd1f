"""In-memory defaulting of a TFJob, exactly as training-operator's ``SetDefaults_TFJob`` does it.

Why in memory: upstream has no mutating webhook. The operator defaults its private copy of the
object at the start of every reconcile and never writes the defaults back (only the CRD's
structural default ``runPolicy.suspend: false`` is persisted by the API server). Existing TFJobs
therefore look undefaulted in the API, and a drop-in replacement must keep it that way.

Contract: :func:`defaulted` returns a defaulted deep copy and never mutates its argument;
:func:`set_defaults` defaults in place. Both tolerate malformed input (wrong types are left alone
for validation to report) and never raise. Order of operations (upstream's):

1. ``runPolicy.cleanPodPolicy`` unset -> ``None``;
2. ``successPolicy`` unset -> ``""``;
3. replica-type keys normalised case-insensitively (``WORKER`` -> ``Worker``, ``ps`` -> ``PS``);
4. per replica spec: ``replicas`` unset -> 1; ``restartPolicy`` unset/"" -> ``Never``; the
   ``tensorflow`` container (else container 0) gets port ``tfjob-port:2222`` appended unless it
   already has a port of that name. A template without containers is skipped (upstream panics).
"""

from __future__ import annotations

from typing import Any

from . import api
from .jsoncopy import json_copy

_CANONICAL_TYPES = {t.lower(): t for t in api.REPLICA_TYPES}


def canonical_replica_type(key: object) -> str | None:
    """The canonical spelling of a replica-type key (case-insensitive), or None if unknown."""
    if not isinstance(key, str):
        return None
    return _CANONICAL_TYPES.get(key.lower())


def defaulted(job: dict[str, Any]) -> dict[str, Any]:
    """A defaulted deep copy of ``job``; the argument is not modified."""
    copied = json_copy(job)
    set_defaults(copied)
    return copied


def set_defaults(job: dict[str, Any]) -> None:
    """Default ``job`` in place (see the module docstring for the rules)."""
    if not isinstance(job, dict):
        return
    spec = job.get("spec")
    if not isinstance(spec, dict):
        return
    run_policy = spec.get(api.SPEC_RUN_POLICY)
    if run_policy is None:
        run_policy = spec[api.SPEC_RUN_POLICY] = {}
    if isinstance(run_policy, dict) and run_policy.get(api.RUN_CLEAN_POD_POLICY) in (None, ""):
        # Upstream only defaults nil; we also treat "" (documented as "undefined") as unset so
        # that it means None rather than upstream's accidental "delete everything".
        run_policy[api.RUN_CLEAN_POD_POLICY] = api.DEFAULT_CLEAN_POD_POLICY
    if spec.get(api.SPEC_SUCCESS_POLICY) is None:
        spec[api.SPEC_SUCCESS_POLICY] = api.SUCCESS_DEFAULT
    replica_specs = spec.get(api.SPEC_REPLICA_SPECS)
    if not isinstance(replica_specs, dict):
        return
    _normalise_type_names(replica_specs)
    for replica_spec in replica_specs.values():
        if isinstance(replica_spec, dict):
            _default_replica_spec(replica_spec)


def _normalise_type_names(replica_specs: dict[str, Any]) -> None:
    # Rebuild the mapping so that key order is stable (canonical keys keep the original order of
    # appearance). Validation rejects two keys that normalise to the same type; if it was skipped,
    # the first spelling wins rather than an arbitrary one.
    normalised: dict[str, Any] = {}
    for key, value in replica_specs.items():
        canonical = canonical_replica_type(key) or key
        if canonical not in normalised:
            normalised[canonical] = value
    replica_specs.clear()
    replica_specs.update(normalised)


def _default_replica_spec(replica_spec: dict[str, Any]) -> None:
    if replica_spec.get(api.REPLICA_REPLICAS) is None:
        replica_spec[api.REPLICA_REPLICAS] = api.DEFAULT_REPLICAS
    if replica_spec.get(api.REPLICA_RESTART_POLICY) in (None, ""):
        replica_spec[api.REPLICA_RESTART_POLICY] = api.DEFAULT_RESTART_POLICY
    template = replica_spec.get(api.REPLICA_TEMPLATE)
    if not isinstance(template, dict):
        return
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        return
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return  # upstream panics here; validation reports the missing containers
    container = next(
        (c for c in containers if isinstance(c, dict) and c.get("name") == api.DEFAULT_CONTAINER_NAME),
        containers[0],
    )
    if not isinstance(container, dict):
        return
    ports = container.get("ports")
    if ports is None:
        ports = container["ports"] = []
    if not isinstance(ports, list):
        return
    if not any(isinstance(p, dict) and p.get("name") == api.DEFAULT_PORT_NAME for p in ports):
        ports.append({"name": api.DEFAULT_PORT_NAME, "containerPort": api.DEFAULT_PORT})
