"""A watch stream read line by line over plain HTTP, as tests that look at the wire read it."""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import orjson

from tfjob_sim.cluster import SimCluster


class Stream:
    """Reads a watch response line by line, with a deadline on every read.

    The default deadline is for an event that must come: generous, as a loaded machine may starve the server's
    writer for seconds, and it costs nothing when the event comes. A test that expects silence passes its own."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self.resp = resp
        self.buffer = b""
        self.raw_lines: list[bytes] = []

    async def next(self, timeout: float = 30.0) -> dict[str, Any] | None:
        with anyio.fail_after(timeout):
            while b"\n" not in self.buffer:
                chunk = await self.resp.content.readany()
                if not chunk:
                    assert self.buffer == b"", f"stream ended mid-line: {self.buffer[:100]!r}"
                    return None
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.raw_lines.append(line)
        return orjson.loads(line)

    async def collect(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for _ in range(count):
            event = await self.next(timeout)
            assert event is not None, f"EOF after {len(events)} of {count} events: {events}"
            events.append(event)
        return events

    async def expect_eof(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Read until EOF; returns what came before it."""
        seen: list[dict[str, Any]] = []
        while True:
            event = await self.next(timeout)
            if event is None:
                return seen
            seen.append(event)


async def open_watch(
    session: aiohttp.ClientSession, cluster: SimCluster, path: str, headers: dict | None = None
) -> Stream:
    resp = await session.get(cluster.url + path, headers=headers or {})
    assert resp.status == 200, await resp.text()
    return Stream(resp)
