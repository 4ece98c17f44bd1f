"""Fixtures for the work-queue, rate-limiter and runner tests: a fake clock, a fresh metrics registry, and a
condition poller that replaces sleeps as synchronisation (it fails the test if the condition never holds)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from controller.runtime.clock import FakeClock
from tfjob_sim.testing.waiting import eventually as shared_eventually

Eventually = Callable[..., Awaitable[None]]


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock(start=1000.0)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


async def _eventually(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    """Poll ``condition`` until it is true; fail after ``timeout`` real seconds."""
    await shared_eventually(condition, timeout, interval=0.001, what=what)


@pytest.fixture
def eventually() -> Eventually:
    return _eventually


@pytest.fixture
def metric_value(registry: CollectorRegistry) -> Callable[..., float]:
    """Read one sample from the test's registry, failing clearly when the series is not exported at all."""

    def read(metric: str, /, **labels: str) -> float:
        value = registry.get_sample_value(metric, labels)
        assert value is not None, f"metric {metric}{labels} is not exported"
        return value

    return read
