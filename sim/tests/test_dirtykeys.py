"""The work loop of the simulator's level-triggered controllers: a key marked twice before its sync runs once,
keys run oldest first, a retry comes back after its delay, and nothing runs without a mark."""

from __future__ import annotations

import anyio

from tfjob_sim.dirtykeys import DirtyKeys
from tfjob_sim.testing.waiting import eventually, never


async def test_marks_coalesce_run_oldest_first_and_retries_come_back() -> None:
    keys = DirtyKeys[str]()
    synced: list[str] = []
    failed_once: set[str] = set()

    def sync(key: str) -> None:
        synced.append(key)
        if key == "flaky" and key not in failed_once:
            failed_once.add(key)
            keys.retry_later(key, 0.05)

    async with anyio.create_task_group() as tg:
        tg.start_soon(keys.serve, sync)
        keys.mark("a")
        keys.mark("b")
        keys.mark("a")
        await eventually(lambda: synced == ["a", "b"], what="a and b synced once each, oldest first")
        await never(lambda: len(synced) > 2, 0.1, what="a sync with no mark")
        keys.mark("flaky")
        await eventually(lambda: synced == ["a", "b", "flaky", "flaky"], what="the retry after its delay")
        tg.cancel_scope.cancel()
