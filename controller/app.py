"""``tfjob-controller run``: compose the program — client, TFJob controller, leader election, endpoints.

The process serves ``/metrics`` and ``/healthz``/``/readyz`` from the start (a standby replica is
alive and observable too), and runs the controller only while it holds the leader lease. Losing the
lease stops every worker before the lease can expire for the next leader; the process then exits
non-zero so the Deployment restarts it as a fresh candidate (controller-runtime does the same).
SIGINT/SIGTERM cancel everything, the lease is released, and the process exits 0.

Start-up failures are one-line :class:`StartupError` exceptions (exit 1 from the CLI): a kubeconfig that cannot
be loaded, an API server that cannot be reached within ``startup_timeout`` (a cluster that is briefly
unavailable while the pod starts is waited for; one that stays unreachable is reported, not retried for
ever), credentials it rejects. Every request carries the replica's leader-election identity in its
User-Agent, so an apiserver's audit log tells the replicas apart.
"""

from __future__ import annotations

import math
import signal
import socket
import uuid
from dataclasses import dataclass, field
from typing import TypedDict

import anyio
import structlog
import yaml
from kubernetes_asyncio.config.config_exception import ConfigException
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from controller.ops.build_info import register_build_info
from controller.ops.http import HealthChecks, serve_health, serve_metrics
from controller.runtime.client import USER_AGENT, ApiClient, RetryPolicy
from controller.runtime.errors import ApiError, ResponseDecodeError, TransportError, Unauthorized
from controller.runtime.leaderelection import LeaderElector, LeadershipLost
from controller.tfjob.controller import MissingPodGroupCRD, TFJobController, check_pod_group_crd
from controller.tfjob.decide import DecideConfig
from controller.tfjob.gang import gang_of
from controller.version import version

LEASE_NAME = "tfjob-controller"
ONE_ATTEMPT = RetryPolicy(max_attempts=1)

# The client-side request limit (--kube-api-qps / --kube-api-burst), argued with its measurements and sources
# in docs/benchmarks/profiles/README.md. By default ("auto") none when the apiserver runs API Priority and
# Fairness, which protects it by priority level and answers overload with 429 + Retry-After (honoured by the
# client): a second, blind bucket in the client only delays the controller -- on a quiet machine the old
# 500/s bucket was what bounded a 1,000-job burst. The first response's APF headers lift the fallback
# bucket; without them (APF disabled, a proxy that drops them) that 500/s bucket stays: under load it was
# never reached, and it still caps a runaway loop. An explicit number is always honoured; 0: no limit.
AUTO = "auto"
DEFAULT_KUBE_API_QPS = AUTO
DEFAULT_KUBE_API_BURST = AUTO
FALLBACK_KUBE_API_QPS = 500.0
FALLBACK_KUBE_API_BURST = 1000
# Leader election has a client (and connection pool) of its own with this fixed bucket, whatever the mode:
# it makes ~1 request per retry period, and a renewal must never queue behind a burst of the controller's.
LEASE_CLIENT_QPS = 5.0
LEASE_CLIENT_BURST = 10


class ClientLimit(TypedDict):
    """The rate-limit keyword arguments of :class:`ApiClient`."""

    qps: float
    burst: int
    auto_limit: bool


def client_limit(qps: float | str, burst: int | str) -> ClientLimit:
    """The ApiClient settings (``qps``, ``burst``, ``auto_limit``) of --kube-api-qps / --kube-api-burst.

    ``auto`` QPS: the fallback bucket (burst: the flag's, else the fallback's), lifted when APF is seen.
    An explicit QPS: that bucket for good; an ``auto`` burst is then twice the QPS (the fallback's ratio).
    """
    if qps == AUTO:
        return {
            "qps": FALLBACK_KUBE_API_QPS,
            "burst": FALLBACK_KUBE_API_BURST if burst == AUTO else int(burst),
            "auto_limit": True,
        }
    rate = float(qps)
    if rate <= 0:
        return {"qps": 0.0, "burst": 1, "auto_limit": False}
    return {"qps": rate, "burst": max(1, math.ceil(2 * rate)) if burst == AUTO else int(burst), "auto_limit": False}


@dataclass
class RunOptions:
    kubeconfig: str | None = None
    namespaces: list[str] = field(default_factory=list)
    workers: int = 16
    metrics_addr: tuple[str, int] = ("0.0.0.0", 8080)
    health_addr: tuple[str, int] = ("0.0.0.0", 8081)
    leader_elect: bool = True
    leader_election_namespace: str | None = None
    # The Lease's name. Shards of a cluster split by --namespace each hold their own (docs/scaling.md).
    leader_election_id: str = LEASE_NAME
    cluster_domain: str = ""
    max_pods_per_job: int = DecideConfig.max_pods_per_job
    # (base, cap) seconds of the dynamic-worker failover back-off
    failover_backoff: tuple[float, float] = (DecideConfig.failover_backoff_base, DecideConfig.failover_backoff_cap)
    kube_api_qps: float | str = DEFAULT_KUBE_API_QPS  # a number, or "auto"
    kube_api_burst: int | str = DEFAULT_KUBE_API_BURST
    startup_timeout: float = 30.0
    # --gang-scheduler-name: "" (off), "volcano" or a scheduler-plugins scheduler's name (controller.tfjob.gang)
    gang_scheduler_name: str = ""


class StartupError(ValueError):
    """The controller cannot start; the message says why, in one line."""


def _in_cluster_namespace() -> str | None:
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace", encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def new_registry() -> CollectorRegistry:
    """The process's registry: process, platform and GC collectors plus the build-info gauge (always 1; its
    labels say which versions run, so a dashboard can show a rollout and a query can join on it)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    register_build_info(registry)
    return registry


async def make_client(options: RunOptions, registry: CollectorRegistry, user_agent: str = USER_AGENT) -> ApiClient:
    limit = client_limit(options.kube_api_qps, options.kube_api_burst)
    try:
        if options.kubeconfig:
            return await ApiClient.from_kubeconfig(
                options.kubeconfig, registry=registry, user_agent=user_agent, **limit
            )
        return await ApiClient.default(registry=registry, user_agent=user_agent, **limit)
    except FileNotFoundError as exc:
        raise StartupError(str(exc)) from None
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError, ConfigException) as exc:
        # kubernetes-asyncio reports a malformed kubeconfig with whatever its parser tripped on.
        where = options.kubeconfig or "the in-cluster configuration / default kubeconfig"
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
            detail = f"not valid YAML: {exc.problem} (line {exc.problem_mark.line + 1})"
        else:
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StartupError(f"cannot load {where}: {detail}") from None


async def wait_for_api_server(client: ApiClient, timeout: float) -> None:
    """Return once ``GET /version`` answers; raise :class:`StartupError` after ``timeout`` seconds of
    failures, or at once when the server rejects our credentials (waiting cannot fix that)."""
    log = structlog.get_logger("controller.app")
    last: Exception | None = None
    with anyio.move_on_after(timeout):
        while True:
            try:
                # One attempt per round: this loop is the retry, and it must see every failure.
                await client.request("GET", "/version", timeout=max(1.0, min(10.0, timeout / 3)), retry=ONE_ATTEMPT)
                return
            except Unauthorized as exc:
                raise StartupError(f"the API server at {client.base_url} rejected the credentials: {exc}") from None
            except (ApiError, TransportError, ResponseDecodeError) as exc:
                if last is None:
                    log.warning(
                        "API server not reachable yet; waiting", server=client.base_url, error=str(exc), timeout=timeout
                    )
                last = exc
            await anyio.sleep(1.0)  # a retry period, not synchronisation
    raise StartupError(f"cannot reach the API server at {client.base_url} within {timeout:g} s: {last}")


async def run(options: RunOptions, registry: CollectorRegistry | None = None) -> int:
    log = structlog.get_logger("controller.app")
    # No `*_created` series: they double the series count and no client-go controller exports them, so
    # dashboards and rules written for those do not expect them.
    disable_created_metrics()
    registry = registry or new_registry()
    identity = f"{socket.gethostname()}_{uuid.uuid4()}"
    client = await make_client(options, registry, user_agent=f"{USER_AGENT} ({identity})")
    try:
        await wait_for_api_server(client, options.startup_timeout)
        gang = gang_of(options.gang_scheduler_name)
        if gang is not None:
            try:
                await check_pod_group_crd(client, gang)
            except MissingPodGroupCRD as exc:
                log.error(str(exc), crd=gang.crd_name)
                raise StartupError(str(exc)) from None
    except BaseException:
        with anyio.CancelScope(shield=True):
            await client.close()
        raise
    tfjobs = TFJobController(
        client,
        registry=registry,
        namespaces=options.namespaces or None,
        workers=options.workers,
        decide_config=DecideConfig(
            cluster_domain=options.cluster_domain,
            max_pods_per_job=options.max_pods_per_job,
            failover_backoff_base=options.failover_backoff[0],
            failover_backoff_cap=options.failover_backoff[1],
            gang_scheduler=options.gang_scheduler_name,
        ),
    )
    informers = tfjobs.informers
    elector: LeaderElector | None = None
    lease_client: ApiClient | None = None
    if options.leader_elect:
        namespace = options.leader_election_namespace or _in_cluster_namespace() or "default"
        lease_client = client.sibling(qps=LEASE_CLIENT_QPS, burst=LEASE_CLIENT_BURST)
        elector = LeaderElector(lease_client, namespace, options.leader_election_id, identity, registry=registry)

    def readiness() -> tuple[bool, str]:
        waiting = [i.name for i in informers if not i.has_synced()]
        if elector is not None and not elector.is_leader:
            return True, "standby (not the leader)"
        if tfjobs.waiting_for_crd:
            return False, "waiting for the TFJob CRD to be installed"
        return (not waiting, "waiting for caches: " + ", ".join(waiting) if waiting else "")

    checks = HealthChecks(liveness={"ping": lambda: (True, "")}, readiness={"informers-synced": readiness})
    exit_code = 0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_metrics, registry, options.metrics_addr, None, name="metrics endpoint")
            tg.start_soon(serve_health, checks, options.health_addr, None, name="health endpoint")

            async def stop_on_signal() -> None:
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        log.info("shutting down", signal=signal.Signals(signum).name)
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(stop_on_signal, name="signal handler")
            log.info(
                "starting",
                version=version(),
                namespaces=options.namespaces or "all",
                workers=options.workers,
                leader_election=options.leader_elect,
                kube_api_qps=options.kube_api_qps,
                kube_api_burst=options.kube_api_burst,
                client_limit=_describe_limit(client),
                gang_scheduler=options.gang_scheduler_name or None,
            )
            if elector is None:
                await tfjobs.run()
            else:
                try:
                    await elector.run(tfjobs.run)
                except LeadershipLost as exc:
                    log.error("leader election lost; exiting so a fresh candidate starts", error=str(exc))
                    exit_code = 1
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            try:
                if lease_client is not None:
                    await lease_client.close()
            finally:  # the main client's connections are closed even if the lease client's close fails
                await client.close()
    return exit_code


def _describe_limit(client: ApiClient) -> str:
    limit = client.limit
    if limit.bucket is None:
        return "off (APF detected)" if limit.lifted_by else "off"
    bucket = f"{limit.bucket.qps:g}/s, burst {limit.bucket.burst}"
    return f"{bucket} until the server shows API Priority and Fairness" if limit.auto else bucket
