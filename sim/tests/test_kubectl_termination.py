"""Pod termination as the real kubectl sees it, in real time (time_scale 1): a process that exits on
SIGTERM is gone about a second after ``kubectl delete`` with the default 30 s grace period, and one
that ignores SIGTERM is SIGKILLed (exit 137) when its grace period ends."""

from __future__ import annotations

import time

import pytest

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.kubelet import IGNORE_SIGTERM
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.objects import pod_yaml


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, time_scale=1.0)


def final_states(cluster: SimCluster) -> dict[str, dict]:
    """The last stored state of every pod, deleted ones included (what the kubelet posted last)."""
    last: dict[str, dict] = {}

    def on_change(_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        if resource == "pods":
            obj = new if new is not None else old
            assert obj is not None
            last[obj["metadata"]["name"]] = obj

    cluster.store.add_listener(on_change)
    return last


def terminated(obj: dict) -> tuple[str, int, str]:
    state = obj["status"]["containerStatuses"][0]["state"]["terminated"]
    return obj["status"]["phase"], state["exitCode"], state["reason"]


async def test_delete_with_default_grace_is_over_in_about_a_second(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    last = final_states(sim_cluster)
    await kubectl.ok("apply", "-f", "-", input=pod_yaml("trainer"))
    await kubectl.ok("wait", "--for=condition=Ready", "pod/trainer", "--timeout=30s")
    assert sim_cluster.store.get("pods", "default", "trainer")["spec"]["terminationGracePeriodSeconds"] == 30
    start = time.monotonic()
    assert (await kubectl.ok("delete", "pod", "trainer")).strip() == 'pod "trainer" deleted'
    elapsed = time.monotonic() - start
    # kubectl waits until the pod is gone: the process died of SIGTERM, nobody waited for 30 s.
    assert elapsed < 25, f"deletion took {elapsed:.1f} s: the 30 s grace period was waited out"
    assert sim_cluster.store.get("pods", "default", "trainer") is None
    assert terminated(last["trainer"]) == ("Failed", 143, "Error")


async def test_process_ignoring_sigterm_is_killed_when_its_grace_period_ends(
    kubectl: Kubectl, sim_cluster: SimCluster
) -> None:
    last = final_states(sim_cluster)
    await kubectl.ok(
        "apply",
        "-f",
        "-",
        input=pod_yaml("stubborn", {IGNORE_SIGTERM: "true"}, terminationGracePeriodSeconds=3),
    )
    await kubectl.ok("wait", "--for=condition=Ready", "pod/stubborn", "--timeout=30s")
    start = time.monotonic()
    await kubectl.ok("delete", "pod", "stubborn")
    assert time.monotonic() - start >= 3  # not before the grace period has passed
    phase, code, reason = terminated(last["stubborn"])
    assert (phase, code, reason) == ("Failed", 137, "Error")
