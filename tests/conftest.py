"""Shared fixtures of the product's tests: a running simulated cluster and the real kubectl pointed at it
(defined in :mod:`tfjob_sim.testing.fixtures`, which the simulator's own tests use too)."""

from __future__ import annotations

from pathlib import Path

from tfjob_sim.testing.fixtures import kubectl, sim_cluster, sim_config, use_checkout_sources  # noqa: F401 (fixtures)
from tfjob_sim.testing.prerequisites import pytest_runtest_setup  # noqa: F401 (the `needs` marker)

use_checkout_sources(Path(__file__).resolve().parents[1])
