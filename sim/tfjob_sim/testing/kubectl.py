"""The real kubectl, pointed at one simulated cluster, as tests drive it."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import anyio

from tfjob_sim.testing.prerequisites import require


def kubectl_binary() -> str:
    """The kubectl binary on PATH (or /usr/bin/kubectl); without one the test is skipped saying how to install it
    (failed in CI: :func:`tfjob_sim.testing.prerequisites.require`)."""
    require("kubectl")
    return shutil.which("kubectl") or "/usr/bin/kubectl"


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
