"""High availability as deployed: two replicas with the Deployment's flags against one cluster.

Each replica is ``tfjob-controller run`` in its own process with the container args of
manifests/deployment/deployment.yaml (only the kubeconfig, the Lease's namespace and the endpoint
ports are the test's: two processes on one machine cannot share ports). Which replica sent a request
is read from the simulator's request log: the controller's User-Agent carries its leader-election
identity, which each replica also logs.

- Exactly one replica acts: the standby's requests are the Lease's get and watch, nothing else.
- SIGKILL of the leader (no release): the standby takes over once the Lease expires — within the lease
  duration of its last renewal plus one retry period — and does the work that piled up meanwhile
  (a scale-up) exactly once.
- SIGTERM of the leader: it releases the Lease, and the new standby (a third process, as the Deployment
  would start) is woken by its watch and starts reconciling within 3 s.
- No duplicate pods across either handover: the existing pods keep their UIDs, and each new worker is
  created exactly once.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest
import yaml

from controller.runtime.client import LEASES, PODS, ApiClient
from controller.runtime.leaderelection import LeaderElector
from controller.tfjob.executor import TFJOBS
from tests.deployment import manifest_run_args
from tests.e2e.conftest import CRD_PATH, CRDS, eventually, tfjob
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.processes import ControllerProcess

LEASE_DURATION = 15.0  # LeaderElector's defaults, which `run` uses
RETRY_PERIOD = 2.0
RETRY_JITTER = 1.2
SIGTERM_HANDOVER = 3.0


# The handovers do not depend on authentication (tests/e2e/test_rbac_secure.py covers RBAC): plain only.
@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=3, time_scale=0.01)


class Replica(ControllerProcess):
    @property
    def identity(self) -> str | None:
        for record in self.events():
            if record.get("event") == "waiting to acquire lease":
                return record.get("identity")
        return None

    def requests(self, cluster: SimCluster, since: int = 0) -> list[Any]:
        identity = self.identity
        assert identity
        return [r for r in cluster.faults.requests(since) if r.user_agent.endswith(f"({identity})")]

    def leads(self) -> bool:
        return bool(self.logged("acquired lease"))


def replica(cluster: SimCluster) -> Replica:
    assert cluster.kubeconfig_path
    assert "--leader-elect" in manifest_run_args() and "--no-leader-elect" not in manifest_run_args()
    return Replica(
        *manifest_run_args(), "--kubeconfig", cluster.kubeconfig_path, "--leader-election-namespace", "default"
    )


def writes(records: list[Any], resource: str | None = None) -> list[Any]:
    return [
        r
        for r in records
        if r.verb in ("create", "update", "patch", "delete")
        and (resource is None or r.resource == resource)
        and 200 <= r.code < 300
    ]


def test_the_timings_are_the_electors() -> None:
    # The bounds below are derived from these; fail loudly if the elector's defaults change.
    elector = LeaderElector(object(), "ns", "lease", "me")  # type: ignore[arg-type]
    assert (elector.lease_duration, elector.retry_period) == (LEASE_DURATION, RETRY_PERIOD)


async def test_two_replicas_one_acts_and_each_handover_is_prompt_and_creates_no_duplicate(
    sim_cluster: SimCluster,
) -> None:
    assert sim_cluster.kubeconfig_path
    faults = sim_cluster.faults
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path, user_agent="ha-test")
    first, second, third = replica(sim_cluster), replica(sim_cluster), replica(sim_cluster)
    try:
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await first.start()
        await second.start()
        await eventually(lambda: first.leads() or second.leads(), timeout=60, what="one replica to lead")
        leader, standby = (first, second) if first.leads() else (second, first)
        await eventually(lambda: standby.identity, timeout=30, what="the standby to wait for the Lease")

        async def worker_pods(count: int) -> dict[str, str] | None:
            items = (await client.list(PODS, namespace="default", label_selector="training.kubeflow.org/job-name=ha"))[
                "items"
            ]
            running = {
                p["metadata"]["name"]: p["metadata"]["uid"]
                for p in items
                if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            }
            return running if len(running) == count == len(items) else None

        await client.create(TFJOBS, tfjob("ha", workers=2), namespace="default")
        before_kill = await eventually(lambda: worker_pods(2), timeout=60, what="the job's two workers")
        # Exactly one acts: the standby only reads and watches the Lease. Started together, both replicas may
        # find no Lease and race to create it (as client-go's electors do): the loser's create is refused (409).
        standby_calls = {
            (r.verb, r.resource)
            for r in standby.requests(sim_cluster)
            if r.verb and not (r.verb == "create" and r.resource == "leases.coordination.k8s.io" and r.code == 409)
        }
        assert standby_calls <= {("get", "leases.coordination.k8s.io"), ("watch", "leases.coordination.k8s.io")}
        assert not standby.leads()
        assert len(writes(leader.requests(sim_cluster), "pods")) == 2

        # 1. SIGKILL: no release; the standby waits out the lease, then does the pending scale-up once.
        mark = faults.mark()
        killed_at = time.time()
        leader.signal(signal.SIGKILL)
        assert await leader.wait() == -signal.SIGKILL
        await client.patch(TFJOBS, "ha", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}}, namespace="default")
        after_kill = await eventually(lambda: worker_pods(3), timeout=90, what="the standby to take over and scale up")
        new_leader = standby
        assert new_leader.leads()
        [created] = writes(new_leader.requests(sim_cluster, mark), "pods")
        took_over = created.time - killed_at
        bound = LEASE_DURATION + RETRY_PERIOD * (1 + RETRY_JITTER)
        # Waiting out the lease twice (a missed expiry) would take 30 s: 10 s of room for a loaded machine still tells.
        assert took_over <= bound + 10.0, f"acted {took_over:.1f} s after the kill (bound {bound:.1f} s + 10 s of load)"
        assert {k: v for k, v in after_kill.items() if k in before_kill} == before_kill, "existing pods untouched"
        assert set(after_kill) - set(before_kill) == {"ha-worker-2"}
        assert not [r for r in writes(faults.requests(mark), "pods") if r.verb == "delete"]
        print(f"SIGKILL handover: the standby created the pending pod {took_over:.2f} s after the kill")

        # 2. SIGTERM: a new standby starts (as the Deployment replaces the killed pod) and watches the Lease.
        await third.start()
        await eventually(
            lambda: third.identity and any(r.verb == "watch" for r in third.requests(sim_cluster)),
            timeout=60,
            what="the new standby to watch the Lease",
        )
        mark = faults.mark()
        terminated_at = time.time()
        new_leader.signal(signal.SIGTERM)
        assert await new_leader.wait() == 0

        def third_lists_tfjobs() -> Any:
            return next(
                (
                    r
                    for r in third.requests(sim_cluster, mark)
                    if r.verb == "list" and r.resource == "tfjobs.kubeflow.org"
                ),
                None,
            )

        started = await eventually(third_lists_tfjobs, timeout=30, what="the third replica to start reconciling")
        # From the release (the stopping leader's last Lease write), not from the signal: how long the old leader
        # takes to stop on a loaded machine is not what the watch wakes the standby up for.
        released = max(r.time for r in writes(new_leader.requests(sim_cluster, mark), LEASES.qualified))
        assert released >= terminated_at
        handover = started.time - released
        assert handover <= SIGTERM_HANDOVER, f"reconciling {handover:.2f} s after the release"
        lease = await client.get(LEASES, "tfjob-controller", namespace="default")
        assert lease["spec"]["holderIdentity"] == third.identity
        await client.patch(TFJOBS, "ha", {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}}}, namespace="default")
        final = await eventually(lambda: worker_pods(4), timeout=60, what="the third replica to scale up")
        assert {k: v for k, v in final.items() if k in after_kill} == after_kill
        assert len(writes(third.requests(sim_cluster, mark), "pods")) == 1
        assert not writes(new_leader.requests(sim_cluster, mark), "pods"), "the stopped leader created nothing"
        print(f"SIGTERM handover: the new leader listed TFJobs {handover:.2f} s after the release")
    finally:
        for process in (first, second, third):
            if process.proc is not None and process.proc.returncode is None:
                await process.stop()
        await client.close()
