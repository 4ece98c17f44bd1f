"""``tfjob-controller run`` as a separate process, as a Deployment runs it: start it, read its JSON log
lines as they come, signal it, collect its exit code. And ``tfjob-controller sim`` as one (:func:`sim_process`).

Lines are read by a background task into ``lines`` (stderr, decoded JSON where possible), so a test
waits for a log event with :func:`tfjob_sim.testing.waiting.eventually` instead of blocking on a pipe.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

CLI = [sys.executable, "-m", "controller"]


# Ports handed out by this process: two calls never return the same one, though neither is bound in between.
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (what it picks for bind(0) and connect()'s source ports)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback port that is free now, for a process to bind later (a controller's metrics, a TensorFlow task's
    server, seconds later after its imports). It is taken below the ephemeral range: a port from that range could
    meanwhile become the source port of any outgoing connection on the machine, and the later bind would fail."""
    low = _ephemeral_low()
    pool = range(10_000 if low > 10_500 else 1024, low)
    candidates = [p for p in random.sample(pool, min(500, len(pool))) if p not in _handed_out]
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port below the ephemeral range ({pool.start}-{low - 1})")


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any TFJOB_CONTROLLER_* / CUSTOM_CLUSTER_DOMAIN of the caller's."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("TFJOB_CONTROLLER_") and k != "CUSTOM_CLUSTER_DOMAIN"
    }
    return {**env, **(extra or {})}


class ControllerProcess:
    """One ``tfjob-controller --log-format json run ...`` process."""

    def __init__(self, *run_args: str, env: dict[str, str] | None = None) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.argv = [
            *CLI,
            "--log-format",
            "json",
            "run",
            "--metrics-addr",
            f"127.0.0.1:{self.metrics_port}",
            "--health-addr",
            f"127.0.0.1:{self.health_port}",
            *run_args,
        ]
        self.env = clean_env(env)
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> ControllerProcess:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode(errors="replace").rstrip("\n"))

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def events(self) -> list[dict[str, Any]]:
        """The JSON log records so far (other lines skipped)."""
        records = []
        for line in self.lines:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records

    def logged(self, text: str) -> list[dict[str, Any]]:
        """Log records whose event contains ``text``."""
        return [r for r in self.events() if text in str(r.get("event", ""))]

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signum)

    async def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        with anyio.fail_after(timeout):
            rc = await self.proc.wait()
            if self._reader is not None:
                await self._reader
        return rc

    async def stop(self) -> int:
        """SIGTERM and wait (SIGKILL if it does not end in time); returns the exit code."""
        if self.proc is None:
            return 0
        self.signal(signal.SIGTERM)
        try:
            return await self.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError("the controller did not exit within 30 s of SIGTERM") from None

    async def __aenter__(self) -> ControllerProcess:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            await self.stop()


@asynccontextmanager
async def sim_process(kubeconfig: Path, *args: str) -> AsyncIterator[str]:
    """``tfjob-controller sim`` in a subprocess (on a free loopback port, the caller's TFJOB_CONTROLLER_* settings
    left out): yields the URL it prints; SIGTERM must end it with 0."""
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "sim",
        "--port",
        "0",
        "--kubeconfig",
        str(kubeconfig),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(),
    )
    try:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            line = (await proc.stdout.readline()).decode()
        assert "simulated cluster serving at http://127.0.0.1:" in line
        yield line.split("serving at ", 1)[1].split()[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            rc = await proc.wait()
    assert rc == 0


@asynccontextmanager
async def process_sim_to_kill(kubeconfig: Path) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``tfjob-controller sim --runtime process`` (one node; image python:3.11 mapped to this interpreter's
    environment) in a subprocess, for a test that SIGKILLs it: yields the process and its runtime's name prefix once
    it serves; on exit it is SIGKILLed (if the test has not) and reaped."""
    from tfjob_sim.testing.leftovers import prefixes_of

    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "sim",
        "--runtime",
        "process",
        "--image",
        f"python:3.11={sys.prefix}",
        "--nodes",
        "1",
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        with anyio.fail_after(60):
            line = (await proc.stdout.readline()).decode()
        assert "simulated cluster serving at" in line, line
        [prefix] = prefixes_of(proc.pid)
        yield proc, prefix
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
