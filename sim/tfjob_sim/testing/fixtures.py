"""pytest fixtures of a running simulated cluster and the real kubectl pointed at it.

A test suite's conftest.py imports the fixtures it offers (``from tfjob_sim.testing.fixtures import ...``):

- ``sim_config``: the :class:`~tfjob_sim.cluster.SimConfig` used by ``sim_cluster``. Override it in a test module
  (a fixture of the same name) to change nodes, time scale, history limits, bookmark period, or to disable the
  kubelet/GC.
- ``sim_cluster`` (async): a started :class:`~tfjob_sim.cluster.SimCluster` with ``.url``, ``.kubeconfig_path``
  (a temp file), ``.store``, ``.faults``; stopped after the test (a failure of its background tasks — kubelet,
  GC — fails the test at teardown). With ``runtime="process"`` the test also fails if, once the cluster stopped,
  any process, network namespace, link or cgroup of it is left (:func:`tfjob_sim.testing.leftovers.leftovers`).
- ``kubectl``: a :class:`~tfjob_sim.testing.kubectl.Kubectl` with its own ``--cache-dir`` per test (kubectl caches
  discovery for hours; a shared cache would hide CRDs created by a test).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.kubectl import Kubectl, kubectl_binary
from tfjob_sim.testing.leftovers import leftovers
from tfjob_sim.testing.prerequisites import PROCESS_RUNTIME, require
from tfjob_sim.watch import WatchConfig


def use_checkout_sources(checkout: Path) -> None:
    """Make every process a test starts (the controller, the simulator, benchmarks) import this checkout's
    sources, not installed copies, as pytest's ``pythonpath`` setting does for the test process itself."""
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(checkout), str(checkout / "sim"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )


class FakeClock:
    """A clock the test moves by hand: call it for the time, assign ``now`` to move it."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sim_config() -> SimConfig:
    # Fast simulated time: pods start in ~10 ms, exit ~2 ms after SIGTERM, and a 30 s grace period
    # (a process ignoring SIGTERM) lasts 0.3 s.
    return SimConfig(nodes=3, time_scale=0.01, watch=WatchConfig())


@pytest.fixture
async def sim_cluster(sim_config: SimConfig, tmp_path: Path) -> AsyncIterator[SimCluster]:
    if sim_config.runtime == "process":
        require(*PROCESS_RUNTIME)
    if sim_config.kubeconfig_path is None:
        sim_config.kubeconfig_path = str(tmp_path / "kubeconfig")
    cluster = SimCluster(sim_config)
    await cluster.start()
    runtime = cluster.kubelet.runtime if cluster.kubelet is not None and sim_config.runtime == "process" else None
    try:
        yield cluster
    finally:
        await cluster.stop()
        if runtime is not None:
            assert leftovers(runtime.prefix) == []


@pytest.fixture
def kubectl(sim_cluster: SimCluster, tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    assert sim_cluster.kubeconfig_path is not None
    cache = tmp_path / "kube-cache"
    cache.mkdir()
    return Kubectl(binary, sim_cluster.kubeconfig_path, cache)
