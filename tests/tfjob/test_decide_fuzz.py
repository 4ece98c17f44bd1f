"""Hostile input, layer (a): :func:`decide` on anything hypothesis can build.

A TFJob can reach the controller without passing the CRD's rules (stored under an older CRD, written
past validation), so ``decide`` must be total: no input makes it raise, and no input makes it ask
for more pods than ``DecideConfig.max_pods_per_job``, whatever the job, its status, or its children
look like. A job over the cap fails validation with a condition and an event that say so.

The runs are derandomized with a bounded number of examples: the same inputs every run, fast.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.tfjob import api
from controller.tfjob.actions import CreatePod, CreateService, DeletePod
from controller.tfjob.decide import DecideConfig, decide

from .builders import NOW, at, make_job, make_pod, make_service, replica
from .hostile import deep, json_values, scalars

FUZZ = settings(
    derandomize=True,
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CAP = 12
# A pass's creation budget counts pods and services: 2 * CAP lets one pass create a whole job at the cap.
CONFIG = DecideConfig(max_pods_per_job=CAP, max_creations=2 * CAP, first_pass_creations=2 * CAP)

replica_counts = st.one_of(st.integers(min_value=0, max_value=40), json_values)


@st.composite
def replica_specs(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)  # not even an object
    spec = replica(
        draw(replica_counts) if draw(st.booleans()) else draw(st.integers(0, 6)),
        draw(st.sampled_from([None, "Never", "OnFailure", "Always", "ExitCode", "Sometimes", ""])),
    )
    if draw(st.integers(0, 4)) == 0:
        spec["template"]["spec"]["containers"][0]["env"] = draw(st.one_of(json_values, st.just([deep(200)])))
    if draw(st.integers(0, 4)) == 0:
        spec["template"]["metadata"] = draw(json_values)
    if draw(st.integers(0, 4)) == 0:
        spec[draw(st.text(max_size=8))] = draw(json_values)
    return spec


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    types = draw(
        st.lists(
            st.sampled_from(["Worker", "PS", "Chief", "Master", "Evaluator", "worker", "Bogus"]),
            max_size=4,
            unique=True,
        )
    )
    job = make_job(
        name=draw(st.one_of(st.just("fuzz"), st.text(max_size=70), st.just("a" * 80))),
        dynamic=draw(st.one_of(st.none(), st.booleans())),
        success_policy=draw(st.one_of(st.none(), st.sampled_from(["", "AllWorkers", "Nope"]))),
        run_policy=draw(
            st.one_of(
                st.none(),
                st.dictionaries(
                    st.sampled_from(
                        [
                            "cleanPodPolicy",
                            "backoffLimit",
                            "activeDeadlineSeconds",
                            "ttlSecondsAfterFinished",
                            "suspend",
                            "managedBy",
                            "schedulingPolicy",
                        ]
                    ),
                    json_values,
                    max_size=4,
                ),
            )
        ),
    )
    job["spec"]["tfReplicaSpecs"] = {t: draw(replica_specs()) for t in types}
    if draw(st.integers(0, 3)) == 0:
        job["status"] = draw(
            st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {
                        "conditions": json_values,
                        "replicaStatuses": json_values,
                        "startTime": json_values,
                        "completionTime": json_values,
                        "dynamicWorkers": json_values,
                    }
                ),
            )
        )
    if draw(st.integers(0, 6)) == 0:
        job["spec"] = draw(json_values)  # past every rule: the spec itself is garbage
    if draw(st.integers(0, 9)) == 0:
        job["metadata"] = draw(json_values)
    return job


@st.composite
def children(draw: st.DrawFn, job: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    """Pods and services owned by the job (some malformed), as a stale or hostile cache may hold."""
    pods: list[Any] = []
    services: list[Any] = []
    if not isinstance(job.get("metadata"), dict) or job["metadata"].get("uid") is None:
        return pods, services
    for _ in range(draw(st.integers(0, 4))):
        replica_type = draw(st.sampled_from(["Worker", "PS", "Chief", "Evaluator"]))
        index = draw(st.integers(0, 50))
        pod = make_pod(job, replica_type, index, draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])))
        if draw(st.integers(0, 3)) == 0:
            pod["status"] = draw(json_values)
        if draw(st.integers(0, 5)) == 0:
            pod["metadata"]["labels"][api.LABEL_REPLICA_INDEX] = draw(st.text(max_size=5))
        pods.append(pod)
        if draw(st.booleans()):
            services.append(make_service(job, replica_type, index))
    if draw(st.integers(0, 5)) == 0:
        pods.append(draw(json_values))
    return pods, services


def pods_asked_for(pods: list[Any], decision: Any) -> int:
    """Pods the job would have once this decision is applied: live ones kept plus creations."""
    created = sum(1 for a in decision.actions if isinstance(a, CreatePod))
    deleted = {a.name for a in decision.actions if isinstance(a, DeletePod)}
    kept = [p for p in pods if isinstance(p, dict) and (p.get("metadata") or {}).get("name") not in deleted]
    return created + len(kept)


@FUZZ
@given(st.data())
def test_decide_never_raises_and_never_exceeds_the_pod_cap(data: st.DataObject) -> None:
    job = data.draw(jobs())
    pods, services = data.draw(children(job))
    before = copy.deepcopy((job, pods, services))
    decision = decide(job, pods, services, NOW, CONFIG)
    assert (job, pods, services) == before, "decide must not mutate its inputs"
    creations = [(a.replica_type, a.index) for a in decision.actions if isinstance(a, CreatePod)]
    assert len(creations) == len(set(creations)), "one creation per (type, index)"
    if creations:
        assert pods_asked_for(pods, decision) <= CAP
    assert len([a for a in decision.actions if isinstance(a, CreateService)]) <= CAP
    assert isinstance(decision.status, dict)
    # Deciding again on the same inputs gives the same answer (no hidden state, no randomness).
    assert decide(job, pods, services, NOW, CONFIG) == decision


@FUZZ
@given(st.data())
def test_departed_pods_are_never_acted_on(data: st.DataObject) -> None:
    """The pods whose deletion the controller saw (any shape, this job's or not) only ever change why a
    failover is recorded: the same actions as without them, and decide stays total and pure."""
    job = data.draw(jobs())
    pods, services = data.draw(children(job))
    departed, _ = data.draw(children(job))
    if departed and data.draw(st.booleans()):
        first = departed[0]
        if isinstance(first, dict) and isinstance(first.get("metadata"), dict):
            first["metadata"]["creationTimestamp"] = data.draw(st.one_of(json_values, st.just("2020-01-01T00:00:09Z")))
    before = copy.deepcopy((job, pods, services, departed))
    decision = decide(job, pods, services, NOW, CONFIG, departed=departed)
    assert (job, pods, services, departed) == before, "decide must not mutate its inputs"
    assert decision.actions == decide(job, pods, services, NOW, CONFIG).actions
    assert decide(job, pods, services, NOW, CONFIG, departed=departed) == decision


@FUZZ
@given(
    workers=st.integers(1, 40),
    ps=st.integers(0, 40),
    chief=st.integers(0, 1),
    evaluator=st.integers(0, 3),
    dynamic=st.booleans(),
)
def test_a_job_over_the_cap_gets_a_condition_and_an_event_and_no_pods(
    workers: int, ps: int, chief: int, evaluator: int, dynamic: bool
) -> None:
    job = make_job(worker=workers, ps=ps, chief=chief or None, evaluator=evaluator or None, dynamic=dynamic)
    total = workers + ps + chief + evaluator
    decision = decide(job, [], [], NOW, CONFIG)
    failed = [c for c in decision.status.get("conditions", []) if c["type"] == api.COND_FAILED]
    if total <= CAP:
        assert not failed and len([a for a in decision.actions if isinstance(a, CreatePod)]) == total
        return
    assert decision.actions == ()
    assert failed and failed[0]["status"] == "True" and failed[0]["reason"] == api.REASON_FAILED_VALIDATION
    message = failed[0]["message"]
    assert f"asks for {total} pods in total" in message and f"limit of {CAP} pods per job" in message
    assert [(e.reason, e.message) for e in decision.events] == [(api.REASON_FAILED_VALIDATION, message)]
    # Converged: deciding on the written status changes nothing and says nothing again.
    job["status"] = decision.status
    again = decide(job, [], [], at(5), CONFIG)
    assert again.actions == () and again.events == () and again.status == decision.status


def test_scaling_a_running_job_past_the_cap_creates_nothing_more() -> None:
    job = make_job(worker=CAP, dynamic=True)
    pods = [make_pod(job, "Worker", i, "Running") for i in range(CAP)]
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = CAP + 1
    decision = decide(job, pods, [], NOW, CONFIG)
    assert not [a for a in decision.actions if isinstance(a, CreatePod)]
    assert [e.reason for e in decision.events] == [api.REASON_FAILED_VALIDATION]


@st.composite
def pod_groups(draw: st.DrawFn, job: dict[str, Any]) -> Any:
    """The job's PodGroup as a cache may hold it: well-formed, with a garbage spec or status, or not even an object."""
    if draw(st.integers(0, 4)) == 0:
        return draw(json_values)
    meta = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
    group: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": "fuzz",
            "namespace": "default",
            "uid": "pg",
            "resourceVersion": "3",
            "ownerReferences": [{"kind": "TFJob", "uid": meta.get("uid"), "controller": True}],
        },
        "spec": draw(
            st.one_of(
                json_values,
                st.fixed_dictionaries({"minMember": json_values, "queue": json_values, "minResources": json_values}),
            )
        ),
        "status": draw(
            st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {"phase": st.one_of(st.sampled_from(["", "Pending", "Inqueue", "Running", "Unknown"]), json_values)}
                ),
            )
        ),
    }
    return group


resources = st.one_of(
    json_values,
    st.dictionaries(
        st.sampled_from(["requests", "limits"]),
        st.one_of(
            json_values,
            st.dictionaries(
                st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                st.one_of(st.sampled_from(["500m", "1Gi", "1.5", "2e3", "-1", "NaN", "Infinity", "1x"]), scalars),
                max_size=3,
            ),
        ),
        max_size=2,
    ),
)


@FUZZ
@given(st.data(), st.sampled_from(["volcano", "scheduler-plugins"]))
def test_decide_with_gang_scheduling_never_raises(data: st.DataObject, scheduler: str) -> None:
    job = data.draw(jobs())
    specs = job["spec"].get("tfReplicaSpecs") if isinstance(job.get("spec"), dict) else None
    for spec in specs.values() if isinstance(specs, dict) else ():
        template = spec.get("template") if isinstance(spec, dict) else None
        pod_spec = template.get("spec") if isinstance(template, dict) else None
        containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
        if isinstance(containers, list) and containers and isinstance(containers[0], dict):
            containers[0]["resources"] = data.draw(resources)
    pods, services = data.draw(children(job))
    pod_group = data.draw(pod_groups(job))
    config = DecideConfig(
        max_pods_per_job=CAP, max_creations=2 * CAP, first_pass_creations=2 * CAP, gang_scheduler=scheduler
    )
    before = copy.deepcopy((job, pods, services, pod_group))
    decision = decide(job, pods, services, NOW, config, pod_group=pod_group, priority_classes={"high": 10})
    assert (job, pods, services, pod_group) == before, "decide must not mutate its inputs"
    assert decide(job, pods, services, NOW, config, pod_group=pod_group, priority_classes={"high": 10}) == decision


def _mutable_parts(value: Any) -> list[int]:
    """The ids of every dict and list in ``value`` (a tuple may be shared, as deepcopy shares one of
    immutables: what it holds is looked into)."""
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _mutable_parts(v))]
    if isinstance(value, list):
        return [id(value), *(i for v in value for i in _mutable_parts(v))]
    if isinstance(value, tuple):
        return [i for v in value for i in _mutable_parts(v)]
    return []


@settings(max_examples=200, derandomize=True, deadline=None)
@given(st.one_of(json_values, st.tuples(json_values, json_values), st.lists(st.tuples(json_values), max_size=3)))
def test_the_copy_decide_makes_of_its_input_is_equal_and_shares_no_mutable_part(value: Any) -> None:
    # decide copies the job (to default it), the old status and each pod template with json_copy instead
    # of copy.deepcopy: the copy must be the same document, and mutating it must never reach the caller's
    # (cached) object.
    from controller.tfjob.jsoncopy import json_copy

    copied = json_copy(value)
    assert repr(copied) == repr(value) and type(copied) is type(value)
    assert not set(_mutable_parts(copied)) & set(_mutable_parts(value))
