"""Leader election on a Lease against the simulated apiserver: one leader at a time, loss stops the
leader's work before anyone else can take over, release on shutdown, the racing initial create, the
renew fast path and the per-request timeout.

Durations are scaled down (lease 2 s, renew deadline 1.2 s, retry 0.2 s) where the test is about them, and
long where it is not (so a loaded machine cannot end a leadership the test needs); every wait is a condition
with a generous deadline. A "network partition" of one candidate is simulated by a client whose requests fail
(the simulator's faults would hit every candidate alike)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from controller.runtime.client import ApiClient, RetryPolicy
from controller.runtime.errors import TransportError
from controller.runtime.leaderelection import LeaderElector, LeadershipLost, micro_time
from tfjob_sim.cluster import SimConfig
from tfjob_sim.testing.waiting import eventually, never

NS = "default"
LEASE = "tfjob-controller"
LEASES = "leases.coordination.k8s.io"
TIMING = dict(lease_duration=2.0, renew_deadline=1.2, retry_period=0.2)
# For tests about something else than expiry: renewals as frequent, but a loaded machine that delays one by a
# second or two cannot make the leader give up (renew deadline) or a rival take over (lease duration).
STEADY = dict(lease_duration=30.0, renew_deadline=20.0, retry_period=0.2)
# For the bounds "the leader stops before its lease could expire": the renew deadline as in TIMING, and a lease
# long enough that the margin between them (what the event loop may lag by on a loaded machine) is 2.8 s.
SAFETY = dict(lease_duration=4.0, renew_deadline=1.2, retry_period=0.2)
NO_RETRY = RetryPolicy(max_attempts=1)


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, kubelet=False, gc=False)


async def wait_until(condition, timeout: float = 30.0, what: str = "") -> None:
    await eventually(condition, timeout, interval=0.005, what=what)


class PartitionableClient(ApiClient):
    """An ApiClient whose requests fail while ``partitioned`` (this candidate lost the network)."""

    partitioned = False

    async def request_raw(self, method: str, path: str, **kwargs: Any):
        if self.partitioned:
            raise TransportError(f"{method} {path}: network unreachable (test partition)")
        return await super().request_raw(method, path, **kwargs)


async def client_for(cluster, cls: type[ApiClient] = ApiClient) -> ApiClient:
    return await cls.from_kubeconfig(cluster.kubeconfig_path, retry=NO_RETRY)


class Leader:
    """Callback that records when it started and when it was cancelled (wall and monotonic time)."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self.stopped_wall: float | None = None

    async def __call__(self) -> None:
        self.started_at = time.monotonic()
        self.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.stopped_at = time.monotonic()
            self.stopped_wall = time.time()


async def start_leading(tg: Any, elector: LeaderElector, leader: Leader) -> anyio.CancelScope:
    """Run ``elector`` in ``tg`` until it leads; cancelling the returned scope stops (and releases) it."""
    scope = anyio.CancelScope()

    async def run() -> None:
        with scope:
            await elector.run(leader)

    tg.start_soon(run)
    await wait_until(lambda: leader.started_at is not None, what=f"{elector.identity} leads")
    return scope


def lease_spec(cluster) -> dict[str, Any]:
    lease = cluster.store.get(LEASES, NS, LEASE)
    assert lease is not None, "lease not created"
    return lease["spec"]


def parse_micro(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def test_micro_time_format():
    text = micro_time()
    assert len(text) == 27 and text.endswith("Z") and text[19] == "."
    assert abs(parse_micro(text.replace("Z", "+0000")) - time.time()) < 5


def test_timing_validation():
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaderElector(None, NS, LEASE, "me", lease_duration=10, renew_deadline=10, retry_period=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1.2 \\* retry_period"):
        LeaderElector(None, NS, LEASE, "me", lease_duration=15, renew_deadline=2, retry_period=2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="identity"):
        LeaderElector(None, NS, LEASE, "")  # type: ignore[arg-type]


async def test_acquire_lead_and_release_when_callback_returns(sim_cluster):
    registry = CollectorRegistry()
    async with await client_for(sim_cluster) as client:
        elector = LeaderElector(client, NS, LEASE, "a", registry=registry, **TIMING)
        statuses = []

        async def lead() -> None:
            statuses.append(registry.get_sample_value("leader_election_master_status", {"name": LEASE}))
            spec = lease_spec(sim_cluster)
            assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 2
            assert spec["leaseTransitions"] == 0 and spec["acquireTime"] == spec["renewTime"]

        with anyio.fail_after(30):
            await elector.run(lead)
    assert statuses == [1.0]
    assert registry.get_sample_value("leader_election_master_status", {"name": LEASE}) == 0.0
    spec = lease_spec(sim_cluster)
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1


async def test_renewals_use_the_fast_path(sim_cluster):
    async with await client_for(sim_cluster) as client:
        elector = LeaderElector(client, NS, LEASE, "a", **STEADY)
        leader = Leader()
        async with anyio.create_task_group() as tg:
            tg.start_soon(elector.run, leader)
            await wait_until(lambda: leader.started_at is not None)
            mark = sim_cluster.faults.mark()
            renewed = lease_spec(sim_cluster)["renewTime"]
            await wait_until(lambda: sim_cluster.faults.count("update", LEASES, since=mark) >= 4)
            assert sim_cluster.faults.count("get", LEASES, since=mark) == 0  # PUT of the cached lease only
            assert lease_spec(sim_cluster)["renewTime"] > renewed
            assert lease_spec(sim_cluster)["leaseTransitions"] == 0
            tg.cancel_scope.cancel()


async def test_two_candidates_one_leader_and_takeover_after_release(sim_cluster):
    async with await client_for(sim_cluster) as client_a, await client_for(sim_cluster) as client_b:
        a = LeaderElector(client_a, NS, LEASE, "a", **TIMING)
        b = LeaderElector(client_b, NS, LEASE, "b", **TIMING)
        leader_a, leader_b = Leader(), Leader()
        async with anyio.create_task_group() as tg:
            a_scope = await start_leading(tg, a, leader_a)
            tg.start_soon(b.run, leader_b)
            # b keeps trying for longer than a lease duration, and never leads while a renews.
            await wait_until(lambda: b.observed_holder == "a")
            mark = sim_cluster.faults.mark()
            await wait_until(
                lambda: sim_cluster.faults.count("get", LEASES, since=mark) >= 12,
                what="b retried for > 2 lease durations",
            )
            assert leader_b.started_at is None and not b.is_leader and a.is_leader
            # Shutdown of a: cancellation releases the lease, b takes over at its next retry.
            released_at = time.monotonic()
            a_scope.cancel()
            await wait_until(lambda: leader_b.started_at is not None, what="b leads after a released")
            assert leader_a.stopped_at is not None and leader_a.stopped_at <= leader_b.started_at
            assert leader_b.started_at - released_at < TIMING["lease_duration"]  # no waiting out the lease
            spec = lease_spec(sim_cluster)
            assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("watch_release", [True, False])
async def test_a_waiting_candidate_is_woken_by_the_release(sim_cluster, watch_release: bool):
    # A retry period far longer than the test's deadline: only the watch can make b take over in time.
    slow = dict(lease_duration=120.0, renew_deadline=90.0, retry_period=60.0)
    async with await client_for(sim_cluster) as client_a, await client_for(sim_cluster) as client_b:
        a = LeaderElector(client_a, NS, LEASE, "a", **slow)
        b = LeaderElector(client_b, NS, LEASE, "b", watch_release=watch_release, **slow)
        leader_a, leader_b = Leader(), Leader()
        async with anyio.create_task_group() as tg:
            a_scope = await start_leading(tg, a, leader_a)
            mark = sim_cluster.faults.mark()
            tg.start_soon(b.run, leader_b)
            await wait_until(lambda: b.observed_holder == "a")
            if watch_release:
                await wait_until(lambda: sim_cluster.faults.count("watch", LEASES, since=mark) == 1, what="b watches")
            a_scope.cancel()
            if watch_release:
                await wait_until(lambda: leader_b.started_at is not None, what="b leads, woken by the release")
                assert lease_spec(sim_cluster)["holderIdentity"] == "b"
            else:
                await wait_until(lambda: lease_spec(sim_cluster)["holderIdentity"] == "", what="a released")
                # Without the watch b only polls: nothing within 2 s (its next attempt is >= 60 s away).
                await never(lambda: leader_b.started_at is not None, within=2, what="b leading without the watch")
                assert sim_cluster.faults.count("watch", LEASES, since=mark) == 0
            tg.cancel_scope.cancel()


async def test_partitioned_leader_stops_before_anyone_takes_over(sim_cluster):
    async with (
        await client_for(sim_cluster, PartitionableClient) as client_a,
        await client_for(sim_cluster) as client_b,
    ):
        a = LeaderElector(client_a, NS, LEASE, "a", **SAFETY)
        b = LeaderElector(client_b, NS, LEASE, "b", **SAFETY)
        leader_a, leader_b = Leader(), Leader()
        outcome: list[BaseException] = []

        async def run_a() -> None:
            try:
                await a.run(leader_a)
            except LeadershipLost as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_a)
            await wait_until(lambda: leader_a.started_at is not None)
            tg.start_soon(b.run, leader_b)
            await wait_until(lambda: b.observed_holder == "a")
            client_a.partitioned = True  # type: ignore[attr-defined]
            await wait_until(lambda: bool(outcome), what="a gives up leadership")
            last_renew = parse_micro(lease_spec(sim_cluster)["renewTime"].replace("Z", "+0000"))
            assert leader_a.stopped_wall is not None
            # a stopped working within the renew deadline of its last successful renewal (+ scheduling slack) ...
            assert leader_a.stopped_wall - last_renew < SAFETY["lease_duration"]
            await wait_until(lambda: leader_b.started_at is not None, what="b takes over")
            # ... and b only started after a had stopped.
            assert leader_a.stopped_at is not None and leader_a.stopped_at < leader_b.started_at
            assert not a.is_leader
            spec = lease_spec(sim_cluster)
            assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
            tg.cancel_scope.cancel()


async def test_stolen_lease_is_lost_within_the_renew_deadline(sim_cluster):
    async with await client_for(sim_cluster) as client:
        a = LeaderElector(client, NS, LEASE, "a", **SAFETY)
        leader = Leader()
        outcome: list[BaseException] = []

        async def run_a() -> None:
            try:
                await a.run(leader)
            except LeadershipLost as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_a)
            await wait_until(lambda: leader.started_at is not None)
            lease = sim_cluster.store.get(LEASES, NS, LEASE)
            stolen = dict(
                lease,
                spec=dict(lease["spec"], holderIdentity="intruder", leaseDurationSeconds=3600, renewTime=micro_time()),
            )
            sim_cluster.store.update(LEASES, NS, LEASE, stolen)
            stolen_at = time.monotonic()
            await wait_until(lambda: bool(outcome), what="a notices it no longer holds the lease")
            assert leader.stopped_at is not None and leader.stopped_at - stolen_at < SAFETY["lease_duration"]
            assert not a.is_leader
            assert lease_spec(sim_cluster)["holderIdentity"] == "intruder"  # nothing released on top of it


async def test_hanging_renewals_are_bounded_by_the_request_timeout(sim_cluster):
    async with await client_for(sim_cluster) as client:
        a = LeaderElector(client, NS, LEASE, "a", request_timeout=0.3, **SAFETY)
        leader = Leader()
        outcome: list[BaseException] = []

        async def run_a() -> None:
            try:
                await a.run(leader)
            except LeadershipLost as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_a)
            await wait_until(lambda: leader.started_at is not None)
            sim_cluster.faults.add_latency(30.0, "update", LEASES)
            sim_cluster.faults.add_latency(30.0, "get", LEASES)
            hang_started = time.monotonic()
            await wait_until(lambda: bool(outcome), what="leadership given up although requests hang")
            assert leader.stopped_at is not None
            assert leader.stopped_at - hang_started < SAFETY["lease_duration"]


async def test_racing_initial_create_one_wins(sim_cluster):
    # Both candidates see "no lease" before either create lands; the apiserver lets one create win.
    sim_cluster.faults.add_latency(0.3, "create", LEASES)
    async with await client_for(sim_cluster) as client_a, await client_for(sim_cluster) as client_b:
        electors = [LeaderElector(c, NS, LEASE, ident, **STEADY) for c, ident in ((client_a, "a"), (client_b, "b"))]
        leaders = [Leader(), Leader()]
        mark = sim_cluster.faults.mark()
        async with anyio.create_task_group() as tg:
            for elector, leader in zip(electors, leaders, strict=True):
                tg.start_soon(elector.run, leader)
            await wait_until(lambda: any(candidate.started_at is not None for candidate in leaders))
            await wait_until(
                lambda: (
                    len(sim_cluster.faults.requests(since=mark, verb="create", resource=LEASES)) == 2
                    and all(r.code for r in sim_cluster.faults.requests(since=mark, verb="create", resource=LEASES))
                ),
                5,
            )
            creates = sim_cluster.faults.requests(since=mark, verb="create", resource=LEASES)
            assert sorted(r.code for r in creates) == [201, 409]

            # Exactly one leads, now and over the following renewals.
            def one_leader_after_renewals() -> bool:
                assert sum(e.is_leader for e in electors) == 1
                return sim_cluster.faults.count("update", LEASES, since=mark) >= 5

            await wait_until(one_leader_after_renewals)
            winner = next(e for e in electors if e.is_leader)
            assert lease_spec(sim_cluster)["holderIdentity"] == winner.identity
            tg.cancel_scope.cancel()
