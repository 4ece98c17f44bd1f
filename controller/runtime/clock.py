"""Time source for the work queue, the rate limiters and the runner.

Why this exists: every time-dependent decision in the controller machinery (backoff delays, token-bucket
refills, delayed adds, queue/work durations in metrics) reads time through a :class:`Clock`, so tests can
replace real time with a :class:`FakeClock` and pin the arithmetic exactly instead of sleeping.

Contract:

- ``now()`` returns monotonic seconds (an arbitrary origin; only differences are meaningful).
- ``await sleep_until(deadline)`` returns once ``now() >= deadline``; it returns immediately (after one
  scheduling checkpoint) when the deadline has already passed, and it is cancellable.

:class:`MonotonicClock` is real time (``time.monotonic``, which is also the asyncio loop's clock).
:class:`FakeClock` only moves when a test calls :meth:`FakeClock.advance`; advancing wakes every sleeper
whose deadline has been reached. It must be used from the event-loop thread.
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
        """Monotonic seconds."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline``; cancellable."""
        ...


class MonotonicClock:
    """Real time: ``time.monotonic`` and anyio sleeps."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, deadline: float) -> None:
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
