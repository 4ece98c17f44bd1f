"""Time source for the work queue, the rate limiters, the back-off and the runner.

Why: every time-dependent decision in the controller machinery (back-off delays, token-bucket refills,
delayed adds, queue/work durations in metrics) reads time through a :class:`Clock`, so tests can replace real
time with a :class:`FakeClock` and pin the arithmetic exactly instead of sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel


@runtime_checkable
class Clock(Protocol):
    """Monotonic time plus the ability to sleep until a point in that time."""

    def now(self) -> float:
        """Monotonic seconds from an arbitrary origin (only differences are meaningful)."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (after one scheduling checkpoint if it already is); cancellable."""
        ...


class MonotonicClock:
    """Real time: ``time.monotonic`` and anyio sleeps."""

    def now(self) -> float:
        """``time.monotonic()``, the asyncio loop's own clock."""
        return time.monotonic()

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until ``deadline`` on ``time.monotonic``; a past deadline still yields once. Cancellable."""
        # anyio.sleep(0) is still a checkpoint, so a past deadline yields once like FakeClock does.
        await anyio.sleep(max(0.0, deadline - time.monotonic()))

    def __repr__(self) -> str:
        return "MonotonicClock()"


class FakeClock:
    """A clock that moves only when told to; for deterministic tests.

    ``advance(seconds)`` moves time forward and wakes every sleeper whose deadline is now reached. Woken
    sleepers resume at their next scheduling opportunity, so a test that advances the clock must then wait
    (with a deadline) for the effect it expects rather than assume it has already happened.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        # (deadline, event) pairs; small in practice (a queue's timer loop, a few test tasks), so a list.
        self._sleepers: list[tuple[float, anyio.Event]] = []

    def now(self) -> float:
        """The fake time: ``start`` plus every :meth:`advance` so far."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0) and wake the sleepers that are due."""
        if seconds < 0:
            raise ValueError(f"FakeClock cannot go backwards (advance({seconds!r}))")
        self._now += seconds
        due = [entry for entry in self._sleepers if entry[0] <= self._now]
        self._sleepers = [entry for entry in self._sleepers if entry[0] > self._now]
        for _, event in due:
            event.set()

    async def sleep_until(self, deadline: float) -> None:
        """Wait until an :meth:`advance` reaches ``deadline`` (one checkpoint if it already has); cancellable.
        Use from the event-loop thread only."""
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        entry = (deadline, anyio.Event())
        self._sleepers.append(entry)
        try:
            await entry[1].wait()
        finally:
            # On cancellation the entry is still registered; drop it so advance() does not touch it.
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    @property
    def sleeper_deadlines(self) -> list[float]:
        """Deadlines of the tasks currently sleeping on this clock, sorted (a test synchronisation point)."""
        return sorted(deadline for deadline, _ in self._sleepers)

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r}, sleepers={len(self._sleepers)})"
