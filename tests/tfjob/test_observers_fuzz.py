"""Hostile input, layer (c): everything that reads TFJobs, pods and services outside ``decide``.

The informer transforms, the controller's event handlers (work-queue mapping, expectations), the
metrics observer's handlers and the metric collectors run on every object a watch delivers, whatever
it holds: a TFJob stored past the CRD's rules (an older or edited CRD keeps any JSON in ``spec`` and
``status``), or a misbehaving server. None of them may raise on any JSON in any field: a handler that
raises is logged with a traceback on every update of that object, and a collector that raises fails
the whole scrape. The objects go through the informer's own event path (JSON lines decoded, transformed,
cached, dispatched), as a watch delivers them. What every object from an API server has is kept:
``metadata`` is an object with a non-empty string ``name`` (the informer keys its cache by it). Then
every cached job is reconciled (the reconcile and the executor read the job beside ``decide``) when its
``uid`` and ``namespace`` are strings, as an API server sets them.

The runs are derandomized with a bounded number of examples: the same inputs every run, fast (and not
shrunk: a failing example is printed as generated).
"""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from controller.tfjob import api
from controller.tfjob.controller import TFJobController

from .hostile import json_values

FUZZ = settings(
    derandomize=True,
    max_examples=150,
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
JOB_UID = "job-uid"
NAMES = ("fuzz", "other")


def sometimes_garbage(draw: st.DrawFn, good: Any, one_in: int = 4) -> Any:
    """``good``, or (one time in ``one_in``) any JSON value instead."""
    return draw(json_values) if draw(st.integers(0, one_in - 1)) == 0 else good


def with_extras(draw: st.DrawFn, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj``, sometimes terminating (a ``deletionTimestamp`` of any JSON), sometimes with an unknown field."""
    if draw(st.integers(0, 5)) == 0:
        obj["metadata"]["deletionTimestamp"] = draw(json_values)
    if draw(st.integers(0, 5)) == 0:
        obj[draw(st.text(max_size=8))] = draw(json_values)
    return obj


@st.composite
def tfjob_objects(draw: st.DrawFn) -> dict[str, Any]:
    worker = {
        "replicas": sometimes_garbage(draw, draw(st.integers(0, 4))),
        "template": {"spec": {"containers": [{"name": "tensorflow", "image": "tf"}]}},
    }
    spec: Any = {"tfReplicaSpecs": sometimes_garbage(draw, {"Worker": worker}), "enableDynamicWorker": True}
    status: Any = {
        "conditions": sometimes_garbage(
            draw, [{"type": draw(st.sampled_from(["Created", "Running", "Succeeded"])), "status": "True"}]
        ),
        "dynamicWorkers": sometimes_garbage(
            draw,
            {
                "workers": {
                    "0": {
                        "state": "Replaced",
                        "failovers": sometimes_garbage(draw, 1),
                        "lastFailoverTime": sometimes_garbage(draw, "2024-01-01T00:00:00Z"),
                        "lastReason": sometimes_garbage(draw, draw(st.sampled_from(["Deleted", "Bogus"]))),
                        "podUID": sometimes_garbage(draw, "old-pod"),
                    }
                }
            },
        ),
        "replicaStatuses": sometimes_garbage(draw, {"Worker": {"active": 1}}),
    }
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {
            "name": draw(st.sampled_from(NAMES)),
            "namespace": sometimes_garbage(draw, "ns", one_in=8),
            "uid": sometimes_garbage(draw, JOB_UID, one_in=8),
            "generation": sometimes_garbage(draw, draw(st.integers(1, 3))),
            "creationTimestamp": sometimes_garbage(draw, "2024-01-01T00:00:00Z"),
        },
        "spec": sometimes_garbage(draw, spec),
        "status": sometimes_garbage(draw, status, one_in=3),
    }
    return with_extras(draw, job)


@st.composite
def child_objects(draw: st.DrawFn) -> dict[str, Any]:
    index = draw(st.integers(0, 3))
    owner: Any = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "fuzz", "uid": JOB_UID, "controller": True}
    owner = {k: sometimes_garbage(draw, v, one_in=10) for k, v in owner.items()}
    labels: Any = {
        api.LABEL_OPERATOR_NAME: api.CONTROLLER_NAME,
        api.LABEL_REPLICA_TYPE: sometimes_garbage(draw, "worker", one_in=8),
        api.LABEL_REPLICA_INDEX: sometimes_garbage(draw, str(index), one_in=8),
    }
    child: dict[str, Any] = {
        "apiVersion": "v1",
        "metadata": {
            "name": f"fuzz-worker-{index}",
            "namespace": sometimes_garbage(draw, "ns", one_in=10),
            "uid": sometimes_garbage(draw, f"pod-{draw(st.integers(0, 2))}", one_in=8),
            "labels": sometimes_garbage(draw, labels, one_in=8),
            "ownerReferences": sometimes_garbage(draw, [owner], one_in=6),
            "creationTimestamp": sometimes_garbage(draw, "2024-01-01T00:00:10Z"),
        },
        "status": sometimes_garbage(
            draw,
            {
                "phase": sometimes_garbage(draw, draw(st.sampled_from(["Pending", "Running", "Failed"]))),
                "reason": sometimes_garbage(draw, "Evicted", one_in=2),
                "conditions": sometimes_garbage(draw, [{"type": "DisruptionTarget", "status": "True"}]),
                "containerStatuses": sometimes_garbage(
                    draw, [{"name": "tensorflow", "restartCount": 0, "state": draw(json_values)}]
                ),
            },
            one_in=3,
        ),
    }
    return with_extras(draw, child)


events = st.lists(
    st.one_of(
        st.tuples(st.just("jobs"), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), tfjob_objects()),
        st.tuples(
            st.sampled_from(["pods", "services"]), st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), child_objects()
        ),
        st.tuples(st.just("scrape"), st.just(""), st.just({})),
    ),
    min_size=1,
    max_size=25,
)


class AcceptingClient:
    """Accepts every write the reconcile makes, as an API server that stores anything would, and answers its
    reads with what the controller's caches hold (a server the caches have caught up with)."""

    def __init__(self) -> None:
        self.uids = itertools.count()
        self.controller: TFJobController | None = None

    async def list(self, resource: Any, *, field_selector: str | None = None, **_: Any) -> dict[str, Any]:
        assert self.controller is not None
        if field_selector is not None:  # the job, by name
            return {"items": self.controller.jobs.list()}
        return {"items": self.controller.pods.list()}

    async def create(self, resource: Any, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {**body, "metadata": {**body["metadata"], "uid": f"created-{next(self.uids)}"}}

    async def replace(self, resource: Any, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        return {**body, "metadata": {**body["metadata"], "resourceVersion": f"written-{next(self.uids)}"}}

    async def delete(self, resource: Any, name: str, **_: Any) -> dict[str, Any]:
        return {}


def api_server_metadata(job: dict[str, Any]) -> bool:
    """Whether the job's metadata is what an API server sends (it sets and validates these fields)."""
    meta = job["metadata"]
    return isinstance(meta.get("uid"), str) and isinstance(meta.get("namespace"), str)


@FUZZ
@given(events)
def test_no_object_breaks_an_informer_handler_a_transform_a_collector_or_a_reconcile(script: list) -> None:
    registry = CollectorRegistry()
    with capture_logs() as logs:
        client = AcceptingClient()
        ctl = TFJobController(client, registry=registry)  # type: ignore[arg-type]
        client.controller = ctl
        for informer in ctl.informers:  # as after the first list: watch events, job gauges reported
            informer._reflectors[0]._synthetic = False
            informer._reflectors[0].synced = True
            informer._reflector_synced()
        versions = itertools.count(1)
        for informer_name, event_type, obj in script:
            if informer_name == "scrape":
                list(registry.collect())
                continue
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(next(versions))}}
            informer = {"jobs": ctl.jobs, "pods": ctl.pods, "services": ctl.services}[informer_name]
            line = orjson.dumps({"type": event_type, "object": obj})
            informer._reflectors[0]._apply([line])
        list(registry.collect())
        # The reconcile reads the cached job and its children beside decide(): from the cache, after every
        # transform and handler, on whatever the job's spec and status hold.
        for key in sorted(k for k in ctl.jobs.cache.keys() if api_server_metadata(ctl.jobs.cache.get(k))):
            anyio.run(ctl.reconcile, key)
        list(registry.collect())
    failures = [entry for entry in logs if entry.get("log_level") in ("error", "critical") or "exc_info" in entry]
    assert failures == []
