"""Exponential back-off with jitter and a cap: the one rule behind every retry delay of the runtime.

Why one type: the API client's request retries and the informers' relist / re-watch back-off both wait
"double the last delay, add some randomness, never more than a cap" (client-go's ``wait.Backoff`` and its
reflector back-off manager); two copies of that arithmetic drift apart. Each caller keeps its own numbers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from controller.runtime.clock import Clock

__all__ = ["Backoff", "BackoffTimer"]


@dataclass(frozen=True)
class Backoff:
    """Delays that grow by ``factor`` from ``initial`` up to ``cap``, each stretched by a random jitter.

    The n-th consecutive delay is ``min(cap, initial * factor**(n-1))`` times a random factor in
    ``[1, 1 + jitter)``, capped at ``cap``. ``reset_after`` is used by :class:`BackoffTimer`: after that many
    seconds without a failure it starts over from ``initial``. The defaults are the informers'.
    """

    initial: float = 0.8
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 1.0
    reset_after: float = 120.0

    def __post_init__(self) -> None:
        if self.initial < 0 or self.cap < 0 or self.factor < 1 or self.jitter < 0 or self.reset_after < 0:
            raise ValueError(f"invalid Backoff {self}")

    def delay(self, attempt: int) -> float:
        """The jittered delay before retry number ``attempt`` (1 for the first), never above ``cap``.

        Needs ``attempt >= 1`` (ValueError otherwise); any count is safe, however long the failures last.
        """
        if attempt < 1:
            raise ValueError(f"Backoff.delay needs attempt >= 1, got {attempt}")
        if self.initial == 0:
            return 0.0
        try:
            grown = self.initial * self.factor ** (attempt - 1)
        except OverflowError:  # the exponent is far past the point where the cap applies
            grown = self.cap
        return min(self.cap, min(self.cap, grown) * (1.0 + random.random() * self.jitter))


class BackoffTimer:
    """Counts the consecutive failures of one loop and waits the :class:`Backoff` delay for each.

    Why a timer rather than an attempt number: a loop that runs forever (an informer's reflector) has no
    natural attempt count; it starts over once it has been quiet for ``reset_after`` seconds.
    """

    __slots__ = ("_backoff", "_clock", "_failures", "_quiet_since")

    def __init__(self, backoff: Backoff, clock: Clock) -> None:
        self._backoff = backoff
        self._clock = clock
        self._failures = 0
        self._quiet_since: float | None = None

    def next_delay(self) -> float:
        """Record one failure and return the delay to wait for it (from ``initial`` again after a quiet
        period of ``reset_after`` seconds, measured from the end of the previous delay)."""
        now = self._clock.now()
        if self._quiet_since is not None and now - self._quiet_since > self._backoff.reset_after:
            self._failures = 0
        self._failures += 1
        delay = self._backoff.delay(self._failures)
        self._quiet_since = now + delay
        return delay

    async def sleep(self) -> float:
        """Record one failure, sleep its delay on the clock and return the delay slept."""
        delay = self.next_delay()
        await self._clock.sleep_until(self._clock.now() + delay)
        return delay
