"""Shared fixtures: a running simulated cluster, and the real kubectl pointed at it.

- ``sim_config``: the :class:`~tfjob_sim.cluster.SimConfig` used by ``sim_cluster``. Override it
  in a test module (define a fixture of the same name) to change nodes, time scale, history
  limits, bookmark period, or to disable the kubelet/GC.
- ``sim_cluster`` (async): a started :class:`~tfjob_sim.cluster.SimCluster` with ``.url``,
  ``.kubeconfig_path`` (a temp file), ``.store``, ``.faults``; stopped after the test (a failure
  of its background tasks — kubelet, GC — fails the test at teardown). With ``runtime="process"``
  the test also fails if, once the cluster stopped, any process, network namespace, link or cgroup
  of it is left (tests/sim/process_leftovers.py).
- ``kubectl``: runs the real kubectl binary with ``--kubeconfig`` and a per-test ``--cache-dir``
  (kubectl caches discovery for hours; a shared cache would hide CRDs created by a test).
  ``await kubectl("get", "pods")`` returns ``(rc, stdout, stderr)``; ``kubectl.spawn(...)`` starts
  a long-running one (``get -w``) and returns the process. kubectl runs as an asyncio
  subprocess because the server runs on the same event loop. A missing kubectl fails the test.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.sim.process_leftovers import leftovers
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.watch import WatchConfig

# The checkout's sources, not installed copies, also in every process a test starts (the controller,
# the simulator, benchmarks): pyproject.toml's pytest `pythonpath` does it for this process.
_CHECKOUT = Path(__file__).resolve().parents[1]
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(_CHECKOUT), str(_CHECKOUT / "sim"), *filter(None, [os.environ.get("PYTHONPATH")])]
)


@pytest.fixture
def sim_config() -> SimConfig:
    # Fast simulated time: pods start in ~10 ms, exit ~2 ms after SIGTERM, and a 30 s grace period
    # (a process ignoring SIGTERM) lasts 0.3 s.
    return SimConfig(nodes=3, time_scale=0.01, watch=WatchConfig())


@pytest.fixture
async def sim_cluster(sim_config: SimConfig, tmp_path: Path) -> AsyncIterator[SimCluster]:
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


def _kubectl_binary() -> str:
    found = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.access("/usr/bin/kubectl", os.X_OK) else None)
    if found is None:
        pytest.fail(
            "kubectl is required for this test but was not found on PATH or at /usr/bin/kubectl; "
            "install the kubectl binary (https://kubernetes.io/docs/tasks/tools/)",
            pytrace=False,
        )
    return found


class Kubectl:
    """The real kubectl against one simulated cluster."""

    def __init__(self, binary: str, kubeconfig: str, cache_dir: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig
        self.cache_dir = cache_dir
        env = dict(os.environ)
        env["HOME"] = str(cache_dir.parent)  # never touch the user's ~/.kube
        env.pop("KUBECONFIG", None)
        self.env = env

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--kubeconfig", self.kubeconfig, "--cache-dir", str(self.cache_dir), *args]

    async def __call__(
        self, *args: str, input: str | bytes | None = None, timeout: float = 30.0
    ) -> tuple[int, str, str]:
        data = input.encode() if isinstance(input, str) else input
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.PIPE if data is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        try:
            with anyio.fail_after(timeout):
                out, err = await proc.communicate(data)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise AssertionError(f"kubectl {' '.join(args)} did not finish within {timeout} s") from None
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def ok(self, *args: str, input: str | bytes | None = None, timeout: float = 30.0) -> str:
        """kubectl's stdout; a non-zero exit fails the test with the command and kubectl's stderr."""
        rc, out, err = await self(*args, input=input, timeout=timeout)
        assert rc == 0, f"kubectl {' '.join(args)} failed ({rc}): {err}"
        return out

    async def spawn(self, *args: str) -> asyncio.subprocess.Process:
        """Start a long-running kubectl (e.g. ``get -w``); the caller reads and terminates it."""
        return await asyncio.create_subprocess_exec(
            *self.argv(*args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )


@pytest.fixture
def kubectl(sim_cluster: SimCluster, tmp_path: Path) -> Kubectl:
    binary = _kubectl_binary()
    assert sim_cluster.kubeconfig_path is not None
    cache = tmp_path / "kube-cache"
    cache.mkdir()
    return Kubectl(binary, sim_cluster.kubeconfig_path, cache)
