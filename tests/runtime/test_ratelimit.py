"""Rate-limiter arithmetic, pinned against client-go's numbers on a controllable clock."""

from __future__ import annotations

import math

import anyio
import pytest

from controller.runtime.clock import FakeClock
from controller.runtime.ratelimit import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    ItemFastSlowRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    TokenBucket,
    WithMaxWaitRateLimiter,
    default_controller_rate_limiter,
)
from tests.runtime.conftest import Eventually


def test_exponential_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter = ItemExponentialFailureRateLimiter()
    delays = [limiter.when("a") for _ in range(25)]
    expected = [0.005 * 2**n for n in range(18)] + [1000.0] * 7
    assert delays == expected
    assert delays[:4] == [0.005, 0.01, 0.02, 0.04]
    assert delays[17] == pytest.approx(655.36)  # the 18th call, the last uncapped one
    assert limiter.num_requeues("a") == 25


def test_exponential_is_per_item_and_forget_resets() -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=60.0)
    assert [limiter.when("a") for _ in range(3)] == [1.0, 2.0, 4.0]
    assert limiter.when("b") == 1.0
    assert (limiter.num_requeues("a"), limiter.num_requeues("b"), limiter.num_requeues("c")) == (3, 1, 0)
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == 1.0
    assert limiter.when("b") == 2.0  # b's history untouched


def test_exponential_never_overflows() -> None:
    limiter = ItemExponentialFailureRateLimiter(base_delay=0.005, max_delay=1000.0)
    for _ in range(1100):  # past 2**1024, where float arithmetic would overflow
        delay = limiter.when("a")
    assert delay == 1000.0


def test_bucket_allows_burst_then_spaces_by_one_over_qps(fake_clock: FakeClock) -> None:
    limiter = BucketRateLimiter(qps=10.0, burst=100, clock=fake_clock)
    burst = [limiter.when(f"item-{i}") for i in range(100)]
    assert burst == [0.0] * 100
    after = [limiter.when(f"late-{i}") for i in range(5)]
    assert after == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_bucket_refills_with_time_up_to_burst(fake_clock: FakeClock) -> None:
    limiter = BucketRateLimiter(qps=10.0, burst=3, clock=fake_clock)
    assert [limiter.when("x") for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])
    # Tokens are -1; 0.35 s refills 3.5 -> 2.5 tokens.
    fake_clock.advance(0.35)
    assert [limiter.when("x") for _ in range(3)] == pytest.approx([0.0, 0.0, 0.05])
    # A long idle period refills only up to the burst.
    fake_clock.advance(3600)
    assert [limiter.when("x") for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])


def test_bucket_reservations_are_honoured_when_waited_for(fake_clock: FakeClock) -> None:
    limiter = BucketRateLimiter(qps=2.0, burst=1, clock=fake_clock)
    assert limiter.when("x") == 0.0
    assert limiter.when("x") == pytest.approx(0.5)
    assert limiter.when("x") == pytest.approx(1.0)
    fake_clock.advance(1.0)  # both reservations are now covered; the bucket is exactly empty
    assert limiter.when("x") == pytest.approx(0.5)


def test_bucket_has_no_per_item_state(fake_clock: FakeClock) -> None:
    limiter = BucketRateLimiter(qps=1.0, burst=1, clock=fake_clock)
    limiter.when("x")
    limiter.when("x")
    assert limiter.num_requeues("x") == 0
    limiter.forget("x")
    assert limiter.when("x") == pytest.approx(2.0)  # forget does not return tokens


def test_bucket_infinite_qps_never_delays(fake_clock: FakeClock) -> None:
    limiter = BucketRateLimiter(qps=math.inf, burst=1, clock=fake_clock)
    assert {limiter.when("x") for _ in range(1000)} == {0.0}


# -- the token bucket's edge cases (the work queue's limiter and the API client's limit share it) ----------


def test_bucket_reservations_queue_up_and_an_idle_bucket_refills_to_burst_only(fake_clock: FakeClock) -> None:
    bucket = TokenBucket(qps=10, burst=3, clock=fake_clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1) and bucket.reserve() == pytest.approx(0.2)  # in debt: queued
    fake_clock.advance(1.0)  # 10 tokens refilled, 2 owed, capped at the burst: 3
    assert [bucket.reserve() for _ in range(4)] == pytest.approx([0.0, 0.0, 0.0, 0.1])


class SteppedClock:
    """A clock a test sets to any time, backwards included (FakeClock only moves forward)."""

    def __init__(self, time: float) -> None:
        self.time = time

    def now(self) -> float:
        return self.time

    async def sleep_until(self, deadline: float) -> None:
        raise AssertionError("reserve() must not sleep")


def test_bucket_treats_a_clock_going_backwards_as_no_time_passed() -> None:
    clock = SteppedClock(100.0)
    bucket = TokenBucket(qps=1, burst=2, clock=clock)
    assert [bucket.reserve() for _ in range(2)] == [0.0, 0.0]
    clock.time = 95.0  # stepped back
    assert bucket.reserve() == pytest.approx(1.0)  # no token taken back for the "negative" interval
    clock.time = 100.0  # back where it was: still no time passed since the last reservation
    assert bucket.reserve() == pytest.approx(2.0)
    clock.time = 102.0
    assert bucket.reserve() == pytest.approx(1.0)  # refilled from the latest time seen (100), not from 95


async def test_bucket_wait_sleeps_until_the_reservation_is_due(fake_clock: FakeClock, eventually: Eventually) -> None:
    bucket = TokenBucket(qps=4, burst=1, clock=fake_clock)
    assert await bucket.wait() == 0.0 and fake_clock.sleeper_deadlines == []
    started = fake_clock.now()
    slept: list[float] = []

    async def waiter() -> None:
        slept.append(await bucket.wait())

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await eventually(lambda: fake_clock.sleeper_deadlines == [started + 0.25])
        fake_clock.advance(0.25)
    assert slept == [0.25]
    assert bucket.reserve() == pytest.approx(0.25)  # the waited token was used: the next one is 1/qps away


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"qps": 0}, "qps must be > 0"),
        ({"qps": -1}, "qps must be > 0"),
        ({"qps": math.nan}, "qps must be > 0"),
        ({"burst": 0}, "burst must be an integer >= 1"),
        ({"burst": 1.5}, "burst must be an integer >= 1"),
    ],
)
def test_bucket_rejects_bad_configuration(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BucketRateLimiter(**kwargs)
    with pytest.raises(ValueError, match=message):
        TokenBucket(**{"qps": 10.0, "burst": 10, **kwargs})


def test_exponential_rejects_negative_delays() -> None:
    with pytest.raises(ValueError, match="base_delay must be a non-negative"):
        ItemExponentialFailureRateLimiter(base_delay=-1)


def test_max_of_takes_largest_and_every_limiter_records(fake_clock: FakeClock) -> None:
    exponential = ItemExponentialFailureRateLimiter(base_delay=0.005, max_delay=1000.0)
    bucket = BucketRateLimiter(qps=10.0, burst=2, clock=fake_clock)
    limiter = MaxOfRateLimiter(exponential, bucket)
    # Calls 1-2: bucket has tokens, exponential wins (5 ms, 10 ms). Call 3+: bucket debt (100, 200 ms) wins.
    assert [limiter.when("a") for _ in range(4)] == pytest.approx([0.005, 0.01, 0.1, 0.2])
    assert limiter.num_requeues("a") == 4 == exponential.num_requeues("a")
    limiter.forget("a")
    assert exponential.num_requeues("a") == 0
    # The bucket still holds the debt: forget is per item, the bucket is global.
    assert limiter.when("a") == pytest.approx(0.3)


def test_default_controller_rate_limiter(fake_clock: FakeClock) -> None:
    limiter: RateLimiter = default_controller_rate_limiter(fake_clock)
    # One item failing repeatedly: pure exponential while the bucket has tokens.
    assert [limiter.when("a") for _ in range(3)] == [0.005, 0.01, 0.02]
    # 97 other items fail once each: the bucket (burst 100) is now empty.
    assert {limiter.when(f"k{i}") for i in range(97)} == {0.005}
    # The 101st failure overall waits for the bucket: 100 ms, although its own backoff is only 5 ms.
    assert limiter.when("fresh") == pytest.approx(0.1)
    assert limiter.num_requeues("a") == 3


def test_default_controller_rate_limiter_is_configurable(fake_clock: FakeClock) -> None:
    limiter = default_controller_rate_limiter(fake_clock, base_delay=1.0, max_delay=4.0, qps=1.0, burst=1)
    assert [limiter.when("a") for _ in range(4)] == pytest.approx([1.0, 2.0, 4.0, 4.0])
    # Bucket debt is 3 tokens after 4 calls at one instant with qps 1: the next call waits 4 s.
    assert limiter.when("b") == pytest.approx(4.0)


def test_fast_slow() -> None:
    limiter = ItemFastSlowRateLimiter(fast_delay=0.1, slow_delay=10.0, max_fast_attempts=3)
    assert [limiter.when("a") for _ in range(5)] == [0.1, 0.1, 0.1, 10.0, 10.0]
    assert limiter.when("b") == 0.1
    assert limiter.num_requeues("a") == 5
    limiter.forget("a")
    assert limiter.when("a") == 0.1


def test_with_max_wait_caps_but_keeps_counting() -> None:
    limiter = WithMaxWaitRateLimiter(ItemExponentialFailureRateLimiter(base_delay=1.0, max_delay=1000.0), 5.0)
    assert [limiter.when("a") for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert limiter.num_requeues("a") == 5
