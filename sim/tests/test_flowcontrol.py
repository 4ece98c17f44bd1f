"""The simulator's API Priority and Fairness (sim/tfjob_sim/flowcontrol.py): the bootstrap FlowSchemas and
PriorityLevelConfigurations served (and listed by the real kubectl), classification as kube-apiserver does
it, the response headers naming the served objects, per-level limits shared by nominalConcurrencyShares,
fair queues, 429 + Retry-After when the queues are full or a request waited too long, and the
apiserver_flowcontrol_* metrics; without APF, no headers and the max-in-flight filter."""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.errors import ApiError
from tfjob_sim.flowcontrol import (
    ANONYMOUS_REQUESTER,
    FLOW_SCHEMA_HEADER,
    FLOW_SCHEMAS,
    PRIORITY_LEVEL_HEADER,
    PRIORITY_LEVELS,
    FlowControl,
    Requester,
    RequestInfo,
    _RetryAfter,
)

CMS = "/api/v1/namespaces/default/configmaps"


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of a /metrics text, by name and label set (parsed as Prometheus would)."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def classified_as(cluster: SimCluster, headers: Any) -> str | None:
    """The served FlowSchema the two headers name (None without them); its priority level must match."""
    pair = (headers.get(FLOW_SCHEMA_HEADER), headers.get(PRIORITY_LEVEL_HEADER))
    if pair == (None, None):
        return None
    [schema] = [fs for fs in cluster.store.list(FLOW_SCHEMAS)[0] if fs["metadata"]["uid"] == pair[0]]
    [level] = [pl for pl in cluster.store.list(PRIORITY_LEVELS)[0] if pl["metadata"]["uid"] == pair[1]]
    assert schema["spec"]["priorityLevelConfiguration"]["name"] == level["metadata"]["name"]
    return schema["metadata"]["name"]


async def headers_of(
    cluster: SimCluster,
    path: str,
    *,
    method: str = "GET",
    token: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[int, Any]:
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http:
        async with http.request(method, cluster.url + path, headers=auth, ssl=ssl_context or False) as response:
            return response.status, response.headers


@pytest.mark.parametrize("sim_config", [SimConfig(nodes=1, time_scale=0.01)], ids=["apf"])
async def test_every_kind_of_response_carries_both_headers(sim_cluster: SimCluster) -> None:
    sim_cluster.faults.fail("list", "secrets", 429, retry_after=1)
    answers = [
        await headers_of(sim_cluster, "/version"),
        await headers_of(sim_cluster, CMS),  # a LIST
        await headers_of(sim_cluster, CMS + "/missing"),  # a 404 Status
        await headers_of(sim_cluster, "/api/v1/namespaces/default/secrets"),  # an injected 429
        await headers_of(sim_cluster, CMS + "?watch=true&timeoutSeconds=1"),  # a watch: sent before any event
    ]
    assert [code for code, _ in answers] == [200, 200, 404, 429, 200]
    # No authentication: every client is anonymous, which the default FlowSchemas put in global-default.
    assert [classified_as(sim_cluster, headers) for _, headers in answers] == ["global-default"] * 5
    assert classified_as(sim_cluster, (await headers_of(sim_cluster, "/readyz"))[1]) == "probes"


@pytest.mark.parametrize(
    "sim_config", [SimConfig(nodes=1, time_scale=0.01, priority_and_fairness=False)], ids=["no-apf"]
)
async def test_without_priority_and_fairness_no_response_carries_them(sim_cluster: SimCluster) -> None:
    sim_cluster.faults.fail("list", "secrets", 429, retry_after=1)  # max-in-flight's 429 then
    answers = [
        await headers_of(sim_cluster, "/version"),
        await headers_of(sim_cluster, CMS),
        await headers_of(sim_cluster, "/api/v1/namespaces/default/secrets"),
        await headers_of(sim_cluster, CMS + "?watch=true&timeoutSeconds=1"),
    ]
    assert [code for code, _ in answers] == [200, 200, 429, 200]
    assert [classified_as(sim_cluster, headers) for _, headers in answers] == [None] * 4
    assert sim_cluster.store.list(FLOW_SCHEMAS)[0] == []  # no configuration either


@pytest.mark.parametrize("sim_config", [SimConfig(nodes=1, time_scale=0.01, secure=True)], ids=["secure"])
async def test_the_flow_schema_follows_the_requester(sim_cluster: SimCluster) -> None:
    assert sim_cluster.secure is not None and sim_cluster.server.auth is not None
    context = ssl.create_default_context(cadata=sim_cluster.secure.ca_cert.decode())
    sim_cluster.store.create("serviceaccounts", "default", {"metadata": {"name": "robot"}})
    sim_cluster.store.create("serviceaccounts", "kube-system", {"metadata": {"name": "leader"}})
    robot = sim_cluster.server.auth.token_for("default", "robot", 3600)
    leader = sim_cluster.server.auth.token_for("kube-system", "leader", 3600)
    admin = sim_cluster.secure.admin_token
    lease = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x"

    async def schema(path: str, token: str | None) -> tuple[int, str | None]:
        code, headers = await headers_of(sim_cluster, path, token=token, ssl_context=context)
        return code, classified_as(sim_cluster, headers)

    assert await schema(CMS, admin) == (200, "exempt")  # system:masters
    assert await schema("/version", robot) == (200, "service-accounts")
    assert await schema(lease, robot) == (403, "service-accounts")  # another namespace's SA: workload-low
    assert (await schema(lease, leader))[1] == "system-leader-election"  # kube-system SA, a Lease
    assert (await schema(CMS, leader))[1] == "kube-system-service-accounts"
    assert await schema(CMS, None) == (401, None)  # authentication comes first


def test_classification_follows_the_bootstrap_schemas_by_precedence() -> None:
    fc = FlowControl()
    sa = Requester("system:serviceaccount:kube-system:x", ("system:serviceaccounts", "system:authenticated"))
    node = Requester("system:node:n1", ("system:nodes", "system:authenticated"))
    kcm = Requester("system:kube-controller-manager", ("system:authenticated",))
    cases = [
        (ANONYMOUS_REQUESTER, RequestInfo(False, "get", path="/healthz"), "probes"),
        (ANONYMOUS_REQUESTER, RequestInfo(False, "get", path="/healthz/etcd"), "global-default"),
        (ANONYMOUS_REQUESTER, RequestInfo(True, "list", "", "pods", "default"), "global-default"),
        (sa, RequestInfo(True, "update", "coordination.k8s.io", "leases", "team"), "system-leader-election"),
        (sa, RequestInfo(True, "update", "", "configmaps", "team"), "workload-leader-election"),
        (sa, RequestInfo(True, "delete", "", "configmaps", "team"), "kube-system-service-accounts"),
        (node, RequestInfo(True, "patch", "", "nodes/status", ""), "system-node-high"),
        (node, RequestInfo(True, "get", "", "pods", "default"), "system-nodes"),
        (kcm, RequestInfo(True, "update", "", "endpoints", "default"), "endpoint-controller"),
        (kcm, RequestInfo(True, "create", "", "pods", "default"), "kube-controller-manager"),
    ]
    assert [fc.classify(who, info).name for who, info, _ in cases] == [want for _, _, want in cases]
    # The distinguisher: the user name (ByUser), the namespace (ByNamespace), or none.
    assert fc.distinguisher(fc.classify(sa, cases[5][1]), sa, cases[5][1]) == "team"
    assert fc.distinguisher(fc.classify(node, cases[7][1]), node, cases[7][1]) == "system:node:n1"


def test_the_server_limit_is_shared_by_nominal_concurrency_shares() -> None:
    seats = {name: level.limit for name, level in FlowControl(400, 200).levels.items() if name != "exempt"}
    # ceil(600 * shares / 245): the shares of the eight bootstrap levels sum to 245
    assert seats == {
        "catch-all": 13,
        "system": 74,
        "node-high": 98,
        "leader-election": 25,
        "workload-high": 98,
        "workload-low": 245,
        "global-default": 49,
    }
    assert all(level.limit == 1 for name, level in FlowControl(1, 1).levels.items() if name != "exempt")
    with pytest.raises(ValueError, match="max-requests-inflight"):
        FlowControl(0, 0)


def test_a_request_waits_at_most_a_quarter_of_its_timeout() -> None:
    fc = FlowControl(request_timeout=60)
    assert fc.wait_limit(None) == 15.0  # --request-timeout / 4
    assert fc.wait_limit("8s") == 2.0  # the request's own timeout parameter (a Go duration)
    assert fc.wait_limit("1m30s") == 15.0  # never beyond --request-timeout
    assert fc.wait_limit("500ms") == 0.125
    for unreadable in ("", "5", "abc", "1.2.3s", "0s"):
        assert fc.wait_limit(unreadable) == 15.0, unreadable  # what cannot be read falls back to the server's
    assert FlowControl(request_timeout=600).wait_limit(None) == 60.0  # at most a minute


ANON_LIST = RequestInfo(True, "list", "", "pods", "default")


def anonymous_flow(fc: FlowControl) -> Any:
    return fc.classify(ANONYMOUS_REQUESTER, ANON_LIST)


async def test_waiting_flows_are_served_in_turn_and_time_out_with_a_429() -> None:
    fc = FlowControl(1, 1)  # every level one seat
    schema = fc.classify(ANONYMOUS_REQUESTER, ANON_LIST)
    first = await fc.admit(schema, ANONYMOUS_REQUESTER, ANON_LIST, 30)
    order: list[str] = []

    async def one(user: str) -> None:
        who = Requester(user, ("system:authenticated",))
        seat = await fc.admit(schema, who, ANON_LIST, 30)
        order.append(user)
        seat.release()

    level = fc.levels["global-default"]
    tasks = []
    for user in ("a", "a", "a", "b", "b", "c"):
        tasks.append(asyncio.create_task(one(user)))
        await asyncio.sleep(0)  # let it queue, in this order (scheduling, not a wait for time)
    assert level.waiting == 6 and level.executing == 1
    first.release()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c", "a", "b", "a"]  # round robin over the flows, not arrival order
    assert level.executing == 0 and level.waiting == 0

    held = await fc.admit(schema, ANONYMOUS_REQUESTER, ANON_LIST, 30)
    started = time.monotonic()
    with pytest.raises(ApiError) as rejected:
        await fc.admit(schema, ANONYMOUS_REQUESTER, ANON_LIST, 0.05)
    assert time.monotonic() - started >= 0.05
    assert (rejected.value.code, rejected.value.plain_text, rejected.value.retry_after) == (429, True, 1)
    assert rejected.value.message == "Too many requests, please try again later."
    held.release()
    assert level.executing == 0 and level.waiting == 0 and not level.queues
    text = fc.metrics_text()
    labels = {"flow_schema": "global-default", "priority_level": "global-default"}
    assert sample(text, "apiserver_flowcontrol_rejected_requests_total", reason="time-out", **labels) == 1
    assert sample(text, "apiserver_flowcontrol_dispatched_requests_total", **labels) == 8
    assert sample(text, "apiserver_flowcontrol_current_inqueue_requests", **labels) == 0


async def test_a_full_queue_rejects_at_once_and_a_reject_level_never_queues() -> None:
    fc = FlowControl(1, 1)
    schema = anonymous_flow(fc)
    held = await fc.admit(schema, ANONYMOUS_REQUESTER, ANON_LIST, 30)
    level = fc.levels["global-default"]
    capacity = 6 * 50  # one flow fills its hand of queues: handSize x queueLengthLimit
    waiting = [asyncio.create_task(fc.admit(schema, ANONYMOUS_REQUESTER, ANON_LIST, 30)) for _ in range(capacity)]
    await asyncio.sleep(0)  # one turn of the loop: every task runs up to its queue
    assert level.waiting == capacity
    with pytest.raises(ApiError) as rejected:
        await fc.admit(schema, ANONYMOUS_REQUESTER, ANON_LIST, 30)
    assert rejected.value.code == 429
    other = Requester("someone-else", ("system:authenticated",))
    queued_other = asyncio.create_task(fc.admit(schema, other, ANON_LIST, 30))  # another flow still queues
    await asyncio.sleep(0)
    assert level.waiting == capacity + 1
    for task in waiting:  # a client that goes away leaves its queue
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    assert level.waiting == 1
    held.release()
    (await queued_other).release()
    catch_all = next(s for s in fc.schemas if s.name == "catch-all")
    seat = await fc.admit(catch_all, ANONYMOUS_REQUESTER, ANON_LIST, 30)
    with pytest.raises(ApiError):
        await fc.admit(catch_all, ANONYMOUS_REQUESTER, ANON_LIST, 30)
    seat.release()
    text = fc.metrics_text()
    assert 'reason="queue-full"} 1' in text and 'reason="cancelled"} 300' in text
    assert 'flow_schema="catch-all",priority_level="catch-all",reason="concurrency-limit"} 1' in text


def test_retry_after_doubles_under_sustained_rejections_and_comes_back_down() -> None:
    tracker = _RetryAfter()
    for second in (100, 101):
        for _ in range(5):
            tracker.record(second)
    assert tracker.value == 2  # >= 3 x 1 rejections in the last second: doubled
    tracker.record(102)
    assert tracker.value == 2  # raised at most once per its own value in seconds
    tracker.record(103)
    assert tracker.value == 4  # >= 3 x 2 in the last two seconds
    for second in range(104, 110):
        for _ in range(10):
            tracker.record(second)
    assert tracker.value == 8
    for second in (130, 131, 132, 140, 150, 160, 170, 180, 190):
        tracker.record(second)
    assert tracker.value == 1  # quiet seconds bring it back down by one each


@pytest.mark.parametrize(
    "sim_config", [SimConfig(nodes=1, time_scale=0.01, max_requests_inflight=3, max_mutating_requests_inflight=1)]
)
async def test_kubectl_lists_the_bootstrap_configuration(sim_cluster: SimCluster, kubectl: Any) -> None:
    rc, out, err = await kubectl("get", "flowschemas,prioritylevelconfigurations")
    assert rc == 0, err
    rows = [line.split() for line in out.splitlines() if line.strip()]
    schemas = {
        r[0].removeprefix("flowschema.flowcontrol.apiserver.k8s.io/"): r[1:4] for r in rows if "flowschema." in r[0]
    }
    assert schemas["service-accounts"] == ["workload-low", "9000", "ByUser"]
    assert schemas["exempt"] == ["exempt", "1", "<none>"]
    assert len(schemas) == 13
    levels = {
        r[0].removeprefix("prioritylevelconfiguration.flowcontrol.apiserver.k8s.io/"): r[1:6]
        for r in rows
        if "prioritylevelconfiguration." in r[0]
    }
    assert levels["workload-low"] == ["Limited", "100", "128", "6", "50"]
    assert levels["exempt"][0] == "Exempt" and levels["catch-all"][:2] == ["Limited", "5"]
    assert len(levels) == 8
    rc, out, err = await kubectl("api-resources", "--api-group=flowcontrol.apiserver.k8s.io", "-o", "name")
    assert rc == 0, err
    assert out.split() == [
        "flowschemas.flowcontrol.apiserver.k8s.io",
        "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
    ]
    rc, out, err = await kubectl("get", "--raw", "/metrics")
    assert rc == 0, err
    assert 'apiserver_flowcontrol_nominal_limit_seats{priority_level="workload-low"} 2' in out


FLOOD_CONFIG = SimConfig(
    nodes=1, time_scale=0.01, secure=True, max_requests_inflight=2, max_mutating_requests_inflight=1, request_timeout=8
)


@pytest.mark.parametrize("sim_config", [FLOOD_CONFIG], ids=["tight"])
async def test_a_flood_gets_429s_while_other_flows_and_levels_are_served(sim_cluster: SimCluster) -> None:
    """A ServiceAccount floods configmap LISTs (each holding its seat 0.1 s) against 2+1 seats: its level
    (workload-low: 2 seats) queues and rejects it with 429 + Retry-After, while another ServiceAccount of
    the same level (another flow) is served in turn, a kube-system leader-election Lease (another level)
    and the admin (exempt) at once; the metrics count what happened."""
    assert sim_cluster.secure is not None and sim_cluster.server.auth is not None
    fc = sim_cluster.server.flow_control
    assert fc is not None
    context = ssl.create_default_context(cadata=sim_cluster.secure.ca_cert.decode())
    store = sim_cluster.store
    for namespace, name in (("default", "flood"), ("default", "quiet"), ("kube-system", "leader")):
        store.create("serviceaccounts", namespace, {"metadata": {"name": name}})
    store.create(
        "clusterrolebindings.rbac.authorization.k8s.io",
        None,
        {
            "metadata": {"name": "flood-test"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [
                {"kind": "ServiceAccount", "namespace": ns, "name": n}
                for ns, n in (("default", "flood"), ("kube-system", "leader"))
            ],
        },
    )
    auth = sim_cluster.server.auth
    flood, quiet, leader = (
        auth.token_for(ns, n, 3600) for ns, n in (("default", "flood"), ("default", "quiet"), ("kube-system", "leader"))
    )
    sim_cluster.faults.add_latency(0.1, "list", "configmaps", user_agent="flood")
    level = fc.levels["workload-low"]
    assert level.limit == 2

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, ssl=context)) as http:

        async def call(
            token: str, path: str, agent: str = "probe", method: str = "GET", body: Any = None
        ) -> tuple[int, Any, float]:
            started = time.monotonic()
            headers = {"Authorization": f"Bearer {token}", "User-Agent": agent}
            async with http.request(method, sim_cluster.url + path, headers=headers, json=body) as response:
                await response.read()
                return response.status, response.headers, time.monotonic() - started

        flooding = [asyncio.create_task(call(flood, CMS, "flood")) for _ in range(360)]
        deadline = time.monotonic() + 30
        while level.waiting < 250:
            assert time.monotonic() < deadline, f"the flood never queued ({level.waiting} waiting)"
            await asyncio.sleep(0.01)
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "leader", "namespace": "kube-system"},
            "spec": {"holderIdentity": "me"},
        }
        code, headers, took = await call(
            leader, "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases", method="POST", body=lease
        )
        assert code == 201, code  # a Lease of the leader-election level: its own seats, no queue
        assert took < 1.0, took
        code, _, took = await call(sim_cluster.secure.admin_token, CMS)
        assert code == 200 and took < 1.0  # exempt
        assert level.waiting > 100  # all that while the flood was still queued
        code, _, took = await call(quiet, "/version")  # same level, another flow: served in its turn
        assert code == 200 and took < 1.0, (code, took)
        results = await asyncio.gather(*flooding)

    codes = [code for code, _, _ in results]
    rejected = [headers for code, headers, _ in results if code == 429]
    assert codes.count(200) >= 2 and len(rejected) >= 100, sorted(set(codes))
    assert set(codes) == {200, 429}
    assert all(int(h["Retry-After"]) >= 1 for h in rejected)
    assert all(classified_as(sim_cluster, h) == "service-accounts" for h in rejected)
    text = fc.metrics_text()
    flow = {"flow_schema": "service-accounts", "priority_level": "workload-low"}
    by_reason = {
        dict(labels)["reason"]: value
        for (name, labels), value in samples(text).items()
        if name == "apiserver_flowcontrol_rejected_requests_total" and dict(labels)["flow_schema"] == "service-accounts"
    }
    assert by_reason.get("queue-full", 0) >= 50 and by_reason.get("time-out", 0) >= 50, by_reason
    assert sum(by_reason.values()) == len(rejected)
    assert (sample(text, "apiserver_flowcontrol_dispatched_requests_total", **flow) or 0) >= codes.count(200)
    assert sample(text, "apiserver_flowcontrol_current_inqueue_requests", **flow) == 0
    assert sample(text, "apiserver_flowcontrol_current_executing_requests", **flow) == 0
    waited = sample(text, "apiserver_flowcontrol_request_wait_duration_seconds_count", execute="false", **flow)
    assert waited == len(rejected)
