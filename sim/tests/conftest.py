"""Fixtures of the simulator's tests.

- ``sim_config``, ``sim_cluster``, ``kubectl``: a running simulated cluster and the real kubectl pointed at it
  (:mod:`tfjob_sim.testing.fixtures`).
- ``clock``: a :class:`FakeClock` at 2023-11-14T22:13:20Z; assign ``clock.now`` to move time.
- ``store``: a :class:`~tfjob_sim.store.Store` reading that clock (no HTTP, no kubelet, no GC).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tfjob_sim.store import Store
from tfjob_sim.testing.fixtures import FakeClock, kubectl, sim_cluster, sim_config, use_checkout_sources  # noqa: F401
from tfjob_sim.testing.prerequisites import pytest_runtest_setup  # noqa: F401 (the `needs` marker)

use_checkout_sources(Path(__file__).resolve().parents[2])


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
