"""The work loop of the simulator's level-triggered controllers (workloads, storage): a set of dirty keys, each synced
from the store's current state, and retries after a delay.

Why: kube-controller-manager's controllers are level-based: an event only says *which* object to look at again, the
sync reads the current state. Store listeners run inside the store's write path, so they only mark keys; one task
owned by the controller's ``run`` does the syncing. Keys are kept in insertion order, so the oldest runs first and a
key marked twice before its sync runs once.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import anyio

Key = TypeVar("Key", bound=Hashable)


class DirtyKeys(Generic[Key]):
    """Keys to sync, and keys to sync again after a delay. Not thread-safe: one event loop."""

    def __init__(self) -> None:
        self._dirty: dict[Key, None] = {}
        self._retry: list[tuple[float, int, Key]] = []
        self._wake = anyio.Event()
        self._sequence = 0

    def mark(self, key: Key) -> None:
        """Sync ``key`` soon (once, however often it is marked before its sync runs)."""
        self._dirty[key] = None
        self._wake.set()

    def retry_later(self, key: Key, seconds: float) -> None:
        """Mark ``key`` again after ``seconds`` (a failed sync's retry)."""
        self._sequence += 1
        heapq.heappush(self._retry, (time.monotonic() + seconds, self._sequence, key))
        self._wake.set()

    async def serve(self, sync: Callable[[Key], None], batch: int = 64) -> None:
        """Call ``sync`` for every dirty key, oldest first, forever (until cancelled); yields to the event loop every
        ``batch`` syncs so the API server answers requests in between."""
        while True:
            now = time.monotonic()
            while self._retry and self._retry[0][0] <= now:
                self._dirty[heapq.heappop(self._retry)[2]] = None
            processed = 0
            while self._dirty:
                key = next(iter(self._dirty))
                del self._dirty[key]
                sync(key)
                processed += 1
                if processed % batch == 0:
                    await anyio.sleep(0)
            if self._dirty:
                continue
            self._wake = anyio.Event()
            timeout = self._retry[0][0] - time.monotonic() if self._retry else math.inf
            with anyio.move_on_after(max(timeout, 0)):
                await self._wake.wait()
