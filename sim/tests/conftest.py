"""Fixtures of the simulator's store-level tests: a Store on a clock the test moves by hand.

- ``clock``: a :class:`FakeClock` at 2023-11-14T22:13:20Z; assign ``clock.now`` to move time.
- ``store``: a :class:`~tfjob_sim.store.Store` reading that clock (no HTTP, no kubelet, no GC).
"""

from __future__ import annotations

import pytest

from tfjob_sim.store import Store


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> Store:
    return Store(clock=clock)


@pytest.fixture(autouse=True)
def cel_cross_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every CEL rule a simulator test evaluates on the compiled fast path is evaluated by the
    interpreter too, and every result remembered for what a rule reads is checked against a fresh
    evaluation; any difference fails the test (tfjob_sim.celcompile's promises)."""
    from tfjob_sim import cel

    monkeypatch.setattr(cel, "CROSS_CHECK", True)
