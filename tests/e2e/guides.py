"""Running a guide of docs/ as a user would: its fenced blocks, and a shell that runs their commands against the
simulated cluster (tests/e2e/test_migration.py runs docs/migration.md, test_operations.py docs/operations.md)."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

import anyio

from tfjob_sim.testing.kubectl import Kubectl


@dataclass
class Block:
    language: str
    body: str
    heading: str  # the nearest heading above it, of any level
    section: str  # the ``## `` heading it is under
    not_run: str | None  # why the simulated cluster cannot run it (``<!-- not run: ... -->`` just above it)

    def commands(self) -> list[str]:
        """Its non-empty lines that are not comments, stripped."""
        return [line.strip() for line in self.body.splitlines() if line.strip() and not line.strip().startswith("#")]


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a guide (indented ones, in a list, too), with their headings and ``not run`` reason."""
    out = []
    heading = section = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
            if line.startswith("## "):
                section = heading
        fence = re.match(r"^(\s*)```(\w+)\s*$", line)
        if fence:
            indent = len(fence.group(1))
            before = lines[i - 1].strip() if i else ""
            reason = re.fullmatch(r"<!-- not run: (.+) -->", before)
            body = []
            i += 1
            while not lines[i].strip().startswith("```"):
                body.append(lines[i][indent:])
                i += 1
            out.append(Block(fence.group(2), "\n".join(body), heading, section, reason.group(1) if reason else None))
        i += 1
    return out


async def shell(command: str, cwd: Path, kubectl: Kubectl, timeout: float = 120) -> tuple[int, str, str]:
    """``bash -o pipefail -c command`` in ``cwd`` with kubectl's environment and its kubeconfig as KUBECONFIG:
    (exit code, stdout, stderr); a command still running after ``timeout`` seconds is killed and fails the test."""
    env = dict(kubectl.env)
    env["KUBECONFIG"] = kubectl.kubeconfig
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-o",
        "pipefail",
        "-c",
        command,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        with anyio.fail_after(timeout):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"{command!r} did not finish within {timeout:g} s") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
