"""One back-off (controller.runtime.backoff) behind the client's retries and the informers' relists: the
arithmetic, the cap that holds however long failures last, and the quiet period that starts it over."""

from __future__ import annotations

import anyio
import pytest

from controller.runtime.backoff import Backoff, BackoffTimer
from controller.runtime.clock import FakeClock
from controller.runtime.rest import RetryPolicy


def test_delays_grow_by_the_factor_up_to_the_cap():
    backoff = Backoff(initial=0.5, factor=3.0, cap=10.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(1, 6)] == [0.5, 1.5, 4.5, 10.0, 10.0]


def test_jitter_stretches_each_delay_but_never_past_the_cap():
    backoff = Backoff(initial=1.0, factor=2.0, cap=5.0, jitter=1.0)
    firsts = [backoff.delay(1) for _ in range(200)]
    assert all(1.0 <= d < 2.0 for d in firsts)
    assert len(set(firsts)) > 1  # it is random, not a fixed factor
    assert all(4.0 <= backoff.delay(3) <= 5.0 for _ in range(200))  # 4 s jittered, capped at 5 s
    assert all(backoff.delay(4) == 5.0 for _ in range(50))


def test_an_unbounded_failure_count_stays_at_the_cap():
    # A reflector facing a dead apiserver for days counts thousands of failures: no OverflowError.
    backoff = Backoff(initial=0.8, factor=2.0, cap=30.0, jitter=0.0)
    assert backoff.delay(5000) == 30.0
    assert Backoff(initial=0.0, factor=2.0, cap=30.0).delay(5000) == 0.0


def test_invalid_parameters_are_refused():
    with pytest.raises(ValueError):
        Backoff(factor=0.5)
    with pytest.raises(ValueError):
        Backoff(initial=-1.0)
    with pytest.raises(ValueError):
        Backoff().delay(0)


def test_the_timer_starts_over_only_after_a_quiet_period_measured_from_the_end_of_the_last_delay():
    clock = FakeClock()
    timer = BackoffTimer(Backoff(initial=1.0, factor=2.0, cap=8.0, jitter=0.0, reset_after=10.0), clock)
    assert [timer.next_delay() for _ in range(3)] == [1.0, 2.0, 4.0]  # back to back: keeps growing
    clock.advance(4.0 + 10.0)  # the last delay ended at 4 s; exactly 10 s quiet is not more than 10 s
    assert timer.next_delay() == 8.0
    clock.advance(8.0 + 10.5)
    assert timer.next_delay() == 1.0


async def test_the_timer_sleeps_its_delay_on_the_clock(eventually):
    clock = FakeClock()
    timer = BackoffTimer(Backoff(initial=2.0, jitter=0.0), clock)
    slept: list[float] = []

    async def sleeper() -> None:
        slept.append(await timer.sleep())

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper)
        await eventually(lambda: clock.sleeper_deadlines == [2.0], what="the timer sleeps until 2 s")
        assert slept == []
        clock.advance(2.0)
    assert slept == [2.0]


def test_the_client_retry_policy_is_this_backoff_with_its_own_numbers():
    policy = RetryPolicy(base_delay=0.2, max_delay=1.0, jitter=0.0, max_retry_after=5.0)
    assert policy.backoff == Backoff(initial=0.2, factor=2.0, cap=1.0, jitter=0.0)
    assert [policy.delay(n, None) for n in (1, 2, 3, 4, 5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.delay(3, 2.5) == 2.5  # the server's Retry-After wins over the back-off
    assert policy.delay(3, 60.0) == 5.0  # but is capped at max_retry_after
    assert RetryPolicy().backoff == Backoff(initial=0.2, factor=2.0, cap=10.0, jitter=0.5)
