"""Rate limiters for the work queue: how long to wait before retrying an item.

Why: a reconcile that fails must be retried, but neither in a tight loop for one broken object (per-item
exponential back-off) nor as a retry storm across all objects when the apiserver is in trouble (one global
token bucket). The arithmetic is client-go's ``util/workqueue`` rate limiters, reproduced exactly so that
behaviour under failure matches what Kubernetes operators expect. Limiters are used from one event loop
(not thread-safe); items must be hashable. :class:`TokenBucket` is the one token bucket of the runtime: the
work queue's global limiter and the API client's request limit (``controller.runtime.rest``) both use it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Protocol, runtime_checkable

from controller.runtime.clock import Clock, MonotonicClock

__all__ = [
    "TokenBucket",
    "RateLimiter",
    "ItemExponentialFailureRateLimiter",
    "BucketRateLimiter",
    "MaxOfRateLimiter",
    "ItemFastSlowRateLimiter",
    "WithMaxWaitRateLimiter",
    "default_controller_rate_limiter",
]


@runtime_checkable
class RateLimiter(Protocol):
    """client-go's ``RateLimiter``: a per-item failure history and the delay it asks for."""

    def when(self, item: Hashable) -> float:
        """Delay in seconds before ``item`` may be retried; records one failure. Call it once per retry (the
        work queue's ``add_rate_limited`` does)."""
        ...

    def forget(self, item: Hashable) -> None:
        """Clear the failure history of ``item`` (after a success); it does not touch any queue."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """Failures currently recorded for ``item``."""
        ...


def _require_non_negative(name: str, value: float) -> float:
    value = float(value)
    if math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be a non-negative number of seconds, got {value!r}")
    return value


class ItemExponentialFailureRateLimiter:
    """``base_delay * 2**failures`` capped at ``max_delay``, counted per item.

    ``failures`` is the count *before* this call: the defaults (5 ms, 1000 s) give 5, 10, 20, 40 ms, ...,
    655.36 s on the 18th consecutive call and 1000 s from the 19th on.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self.base_delay = _require_non_negative("base_delay", base_delay)
        self.max_delay = _require_non_negative("max_delay", max_delay)
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        """``base_delay * 2**failures`` (failures before this call), at most ``max_delay``; records one."""
        exponent = self._failures.get(item, 0)
        self._failures[item] = exponent + 1
        try:
            # ldexp multiplies by an exact power of two, so 5 ms * 2**n has no accumulated rounding.
            backoff = math.ldexp(self.base_delay, exponent)
        except OverflowError:
            return self.max_delay
        return min(backoff, self.max_delay)

    def forget(self, item: Hashable) -> None:
        """Forget ``item``'s failures: its next delay is ``base_delay`` again."""
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        """Failures recorded for ``item`` since it was last forgotten."""
        return self._failures.get(item, 0)

    def __repr__(self) -> str:
        return f"ItemExponentialFailureRateLimiter(base_delay={self.base_delay!r}, max_delay={self.max_delay!r})"


class TokenBucket:
    """A token bucket with ``golang.org/x/time/rate`` reservation semantics.

    The bucket holds at most ``burst`` tokens, starts full and refills at ``qps`` tokens per second.
    :meth:`reserve` takes one token *now*, even if the bucket is empty: the token count goes negative and
    the returned delay is the time until that reservation is covered, so concurrent callers queue up fairly,
    each ``1/qps`` after the previous one. With 10 qps / burst 100, 100 calls at one instant return 0 and the
    following ones 0.1 s, 0.2 s, 0.3 s, ... Edge cases, as x/time/rate: ``qps=math.inf`` never delays; a
    clock that appears to go backwards counts as "no time passed" (it neither takes tokens back nor moves the
    refill point back); an idle bucket refills to ``burst``, never beyond. ``qps`` must be > 0 (a caller that
    wants no limit uses ``math.inf`` or no bucket) and ``burst`` an integer >= 1.
    """

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        qps = float(qps)
        if math.isnan(qps) or qps <= 0:
            raise ValueError(f"qps must be > 0 (use math.inf for no limit), got {qps!r}")
        if not isinstance(burst, int) or isinstance(burst, bool) or burst < 1:
            raise ValueError(f"burst must be an integer >= 1, got {burst!r}")
        self.qps = qps
        self.burst = burst
        self.clock: Clock = clock if clock is not None else MonotonicClock()
        self._tokens = float(burst)
        self._last = self.clock.now()

    def reserve(self) -> float:
        """Take a token now; the seconds until it may be used (0 when the bucket had one)."""
        if math.isinf(self.qps):
            return 0.0
        now = self.clock.now()
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = max(now, self._last)
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    async def wait(self) -> float:
        """Take a token, sleeping until it is due; the seconds slept."""
        delay = self.reserve()
        if delay > 0:
            await self.clock.sleep_until(self.clock.now() + delay)
        return delay

    def __repr__(self) -> str:
        return f"TokenBucket(qps={self.qps!r}, burst={self.burst!r})"


class BucketRateLimiter:
    """One global :class:`TokenBucket` shared by all items: ``when`` reserves a token from it.

    ``forget`` and ``num_requeues`` are no-ops (the bucket tracks no items).
    """

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock | None = None) -> None:
        self.bucket = TokenBucket(qps, burst, clock)

    def when(self, item: Hashable) -> float:
        """Reserve a token of the shared bucket: the seconds until it is due, whatever ``item`` is."""
        return self.bucket.reserve()

    def forget(self, item: Hashable) -> None:
        """A no-op: the bucket keeps no per-item history."""
        return None

    def num_requeues(self, item: Hashable) -> int:
        """Always 0: the bucket keeps no per-item history."""
        return 0

    def __repr__(self) -> str:
        return f"BucketRateLimiter(qps={self.bucket.qps!r}, burst={self.bucket.burst!r})"


class MaxOfRateLimiter:
    """The largest delay of several limiters; every limiter records the failure."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters: tuple[RateLimiter, ...] = limiters

    def when(self, item: Hashable) -> float:
        """The largest delay of the limiters; every one of them records the failure."""
        # Call every limiter (no short-circuit): each must record the failure / reserve its token.
        return max([limiter.when(item) for limiter in self.limiters])

    def forget(self, item: Hashable) -> None:
        """Forget ``item`` in every limiter."""
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        """The largest failure count any limiter has recorded for ``item``."""
        return max(limiter.num_requeues(item) for limiter in self.limiters)

    def __repr__(self) -> str:
        return f"MaxOfRateLimiter{self.limiters!r}"


class ItemFastSlowRateLimiter:
    """``fast_delay`` for the first ``max_fast_attempts`` failures of an item, ``slow_delay`` afterwards."""

    def __init__(self, fast_delay: float, slow_delay: float, max_fast_attempts: int) -> None:
        self.fast_delay = _require_non_negative("fast_delay", fast_delay)
        self.slow_delay = _require_non_negative("slow_delay", slow_delay)
        if not isinstance(max_fast_attempts, int) or max_fast_attempts < 0:
            raise ValueError(f"max_fast_attempts must be an integer >= 0, got {max_fast_attempts!r}")
        self.max_fast_attempts = max_fast_attempts
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        """Record one failure; ``fast_delay`` up to the ``max_fast_attempts``-th, ``slow_delay`` after."""
        failures = self._failures.get(item, 0) + 1
        self._failures[item] = failures
        return self.fast_delay if failures <= self.max_fast_attempts else self.slow_delay

    def forget(self, item: Hashable) -> None:
        """Forget ``item``'s failures: it gets ``fast_delay`` again."""
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        """Failures recorded for ``item`` since it was last forgotten."""
        return self._failures.get(item, 0)

    def __repr__(self) -> str:
        return (
            f"ItemFastSlowRateLimiter(fast_delay={self.fast_delay!r}, slow_delay={self.slow_delay!r}, "
            f"max_fast_attempts={self.max_fast_attempts!r})"
        )


class WithMaxWaitRateLimiter:
    """Caps another limiter's delay at ``max_delay`` (the wrapped limiter still records the failure)."""

    def __init__(self, limiter: RateLimiter, max_delay: float) -> None:
        self.limiter = limiter
        self.max_delay = _require_non_negative("max_delay", max_delay)

    def when(self, item: Hashable) -> float:
        """The wrapped limiter's delay (which records the failure), at most ``max_delay``."""
        return min(self.limiter.when(item), self.max_delay)

    def forget(self, item: Hashable) -> None:
        """Forget ``item`` in the wrapped limiter."""
        self.limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        """The wrapped limiter's failure count for ``item``."""
        return self.limiter.num_requeues(item)

    def __repr__(self) -> str:
        return f"WithMaxWaitRateLimiter({self.limiter!r}, max_delay={self.max_delay!r})"


def default_controller_rate_limiter(
    clock: Clock | None = None,
    *,
    base_delay: float = 0.005,
    max_delay: float = 1000.0,
    qps: float = 10.0,
    burst: int = 100,
) -> RateLimiter:
    """client-go's ``DefaultControllerRateLimiter``: max(per-item 5 ms * 2**n <= 1000 s, bucket 10 qps / 100)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base_delay, max_delay),
        BucketRateLimiter(qps, burst, clock),
    )
