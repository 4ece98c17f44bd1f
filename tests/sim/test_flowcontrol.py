"""The simulator's API Priority and Fairness headers (sim/tfjob_sim/flowcontrol.py): on every classified
response while APF is on, as kube-apiserver sends them (watches and 429s included); on none with
``priority_and_fairness=False`` (kube-apiserver's ``--enable-priority-and-fairness=false``), an injected
429 included; the flow schema follows the requester."""

from __future__ import annotations

import ssl
import uuid
from typing import Any

import aiohttp
import pytest

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.flowcontrol import CLASSES, FLOW_SCHEMA_HEADER, PRIORITY_LEVEL_HEADER

CMS = "/api/v1/namespaces/default/configmaps"


def classified_as(headers: Any) -> str | None:
    """The flow schema the two headers name (None without them); both or neither must be there."""
    pair = (headers.get(FLOW_SCHEMA_HEADER), headers.get(PRIORITY_LEVEL_HEADER))
    if pair == (None, None):
        return None
    [name] = [
        name
        for name, sent in CLASSES.items()
        if sent == ((FLOW_SCHEMA_HEADER, pair[0]), (PRIORITY_LEVEL_HEADER, pair[1]))
    ]
    return name


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
        await headers_of(sim_cluster, "/api/v1/namespaces/default/secrets"),  # the injected APF 429
        await headers_of(sim_cluster, CMS + "?watch=true&timeoutSeconds=1"),  # a watch: sent before any event
    ]
    assert [code for code, _ in answers] == [200, 200, 404, 429, 200]
    # No authentication: every client is anonymous, which the default FlowSchemas put in global-default.
    assert [classified_as(headers) for _, headers in answers] == ["global-default"] * 5
    assert classified_as((await headers_of(sim_cluster, "/readyz"))[1]) == "probes"


def test_uids_are_stable_and_distinct() -> None:
    flow_schemas = [headers[0][1] for headers in CLASSES.values()]
    assert len(set(flow_schemas)) == len(CLASSES)
    # probes and exempt share the exempt priority level, as in kube-apiserver's defaults
    assert CLASSES["probes"][1] == CLASSES["exempt"][1] != CLASSES["global-default"][1]
    # name-based (UUIDv5): the same UIDs in every simulator process, as for the life of a real cluster
    assert all(uuid.UUID(value).version == 5 for headers in CLASSES.values() for _, value in headers)


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
    assert [classified_as(headers) for _, headers in answers] == [None] * 4


@pytest.mark.parametrize("sim_config", [SimConfig(nodes=1, time_scale=0.01, secure=True)], ids=["secure"])
async def test_the_flow_schema_follows_the_requester(sim_cluster: SimCluster) -> None:
    assert sim_cluster.secure is not None and sim_cluster.server.auth is not None
    context = ssl.create_default_context(cadata=sim_cluster.secure.ca_cert.decode())
    sim_cluster.store.create("serviceaccounts", "default", {"metadata": {"name": "robot"}})
    robot = sim_cluster.server.auth.token_for("default", "robot", 3600)
    admin = sim_cluster.secure.admin_token
    code, headers = await headers_of(sim_cluster, CMS, token=admin, ssl_context=context)
    assert (code, classified_as(headers)) == (200, "exempt")  # system:masters
    code, headers = await headers_of(sim_cluster, "/version", token=robot, ssl_context=context)
    assert (code, classified_as(headers)) == (200, "service-accounts")
    code, headers = await headers_of(sim_cluster, CMS, ssl_context=context)
    assert (code, classified_as(headers)) == (401, None)  # authentication comes first
