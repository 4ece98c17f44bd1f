"""The route table (tfjob_sim.apiserver.routes): what path parses to which route, which verb a request has,
that every subresource served has its handlers, and the 405s the table gives for the verbs it does not list."""

from __future__ import annotations

import inspect

import aiohttp
import pytest
from yarl import URL

from tfjob_sim.apiserver import routes, subresources
from tfjob_sim.apiserver.common import parse_route, verb_of
from tfjob_sim.cluster import SimCluster
from tfjob_sim.resources import Registry, builtin_types, secure_types
from tfjob_sim.testing.objects import pod


def test_paths_parse_to_their_route() -> None:
    registry = Registry()
    log = parse_route(registry, "/api/v1/namespaces/ns/pods/p/log")
    assert log is not None
    assert (log.rt.plural, log.namespace, log.name, log.subresource, log.key) == ("pods", "ns", "p", "log", "pods/log")
    watch = parse_route(registry, "/api/v1/watch/namespaces/ns/pods")
    assert watch is not None and watch.watch_path and watch.namespace == "ns" and watch.name is None
    namespace_status = parse_route(registry, "/api/v1/namespaces/ns/status")
    assert namespace_status is not None
    assert (namespace_status.rt.plural, namespace_status.name, namespace_status.subresource) == (
        "namespaces",
        "ns",
        "status",
    )
    deployments = parse_route(registry, "/apis/apps/v1/namespaces/ns/deployments/")
    assert deployments is not None and deployments.rt.group == "apps" and deployments.name is None
    for unknown in (
        "/api/v2/pods",
        "/api/v1/namespaces/ns/pods/p/exec",  # not served
        "/api/v1/namespaces/ns/pods/p/log/extra",
        "/api/v1/watch/namespaces/ns/pods/p/log",
        "/api/v1/pods/p",  # a namespaced object needs its namespace
        "/api/v1/namespaces/ns/nodes",  # a cluster-scoped resource has none
        "/api/v1/namespaces//pods",
        "/apis/example.com/v1/widgets",
        "/version",
    ):
        assert parse_route(registry, unknown) is None, unknown


@pytest.mark.parametrize(
    ("method", "path", "verb"),
    [
        ("GET", "/api/v1/namespaces/ns/pods", "list"),
        ("GET", "/api/v1/namespaces/ns/pods?watch=1", "watch"),
        ("GET", "/api/v1/watch/namespaces/ns/pods", "watch"),
        ("GET", "/api/v1/namespaces/ns/pods/p", "get"),
        ("POST", "/api/v1/namespaces/ns/pods", "create"),
        ("PUT", "/api/v1/namespaces/ns/pods/p/status", "update"),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", "patch"),
        ("DELETE", "/api/v1/namespaces/ns/pods/p", "delete"),
        ("DELETE", "/api/v1/namespaces/ns/pods", "deletecollection"),
        ("OPTIONS", "/api/v1/namespaces/ns/pods", "options"),
    ],
)
def test_the_verb_of_a_request(method: str, path: str, verb: str) -> None:
    url = URL(path)
    route = parse_route(Registry(), url.path)
    assert route is not None
    assert verb_of(method, route, url.query) == verb


def test_every_served_subresource_has_its_routes() -> None:
    served = {sub for rt in builtin_types() for sub in rt.subresources} | {"status", "scale"}  # CRDs: status, scale
    auth_answers = {sub for rt in secure_types() for sub in rt.subresources}
    assert auth_answers == {"token"}
    assert served - auth_answers <= set(routes.SUBRESOURCE_ROUTES)
    assert routes.SUBRESOURCE_ROUTES["log"] == {"get": subresources.pod_log}
    handlers = [*routes.RESOURCE_ROUTES.values()]
    handlers += [h for table in routes.SUBRESOURCE_ROUTES.values() for h in table.values()]
    handlers += [h for _, h in routes.NON_RESOURCE_ROUTES]
    assert all(inspect.iscoroutinefunction(h) for h in handlers)


async def test_a_subresource_refuses_the_verbs_its_routes_do_not_list(sim_cluster: SimCluster) -> None:
    base = sim_cluster.url + "/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as session:
        async with session.post(base, json=pod("p")) as response:
            assert response.status == 201
        for method, path in (
            ("DELETE", "/p/log"),
            ("PUT", "/p/eviction"),
            ("POST", "/p/status"),
            ("DELETE", "/p/binding"),
        ):
            async with session.request(method, base + path, json={}) as response:
                body = await response.json()
                assert response.status == 405, (method, path)
                assert body["reason"] == "MethodNotAllowed", (method, path)
