"""The soak's schedule covers every kind of action by construction, whatever the machine's speed.

The CI soak used to miss a kind on a busy machine: which kinds happened depended on how many draws fit in
the fault phase and on whether a kind was still active when drawn. Now the schedule is a pure function of
the seed that opens with every kind once, and the driver performs every opening step or stops the soak.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.chaos.engine import ACTION_WEIGHTS, TIMED_KINDS, Soak, SoakConfig, SoakError, Step, schedule
from tests.soak.test_soak import CI_SEED, EVERY_KIND


def steps(seed: int, n: int) -> list[Step]:
    return list(itertools.islice(schedule(seed, 0.8), n))


@pytest.mark.parametrize("seed", [CI_SEED, 0, 1, 7, 9, 123456789, *range(100, 140)])
def test_the_schedule_opens_with_every_kind_once(seed: int) -> None:
    opening = steps(seed, len(ACTION_WEIGHTS))
    assert sorted(s.kind for s in opening) == sorted(ACTION_WEIGHTS)
    assert all(s.opening for s in opening)
    assert [s.index for s in opening] == list(range(len(ACTION_WEIGHTS)))
    assert not any(s.opening for s in steps(seed, 200)[len(ACTION_WEIGHTS) :])


def test_the_schedule_is_fixed_by_the_seed_alone() -> None:
    assert steps(CI_SEED, 300) == steps(CI_SEED, 300)
    openings = {tuple(s.kind for s in steps(seed, len(ACTION_WEIGHTS))) for seed in range(20)}
    assert len(openings) == 20  # the order is drawn, not fixed
    assert all(0 <= s.pause <= 5.0 for s in steps(CI_SEED, 300))
    assert len({s.seed for s in steps(CI_SEED, 300)}) == 300  # each step its own RNG


def test_after_the_opening_kinds_are_drawn_by_weight() -> None:
    drawn = Counter(s.kind for s in steps(CI_SEED, 20_000)[len(ACTION_WEIGHTS) :])
    total = sum(drawn.values())
    weights = sum(ACTION_WEIGHTS.values())
    for kind, weight in ACTION_WEIGHTS.items():
        assert abs(drawn[kind] / total - weight / weights) < 0.01, (kind, drawn[kind] / total)


def test_the_ci_soak_asks_for_every_kind_the_schedule_has() -> None:
    # The population creates jobs; every other kind comes from the schedule.
    assert EVERY_KIND == set(ACTION_WEIGHTS) | {"job-create"}
    assert TIMED_KINDS <= set(ACTION_WEIGHTS)


async def test_an_opening_step_waits_for_a_target_then_stops_the_soak_rather_than_lose_its_kind(
    tmp_path: Path,
) -> None:
    soak = Soak(SoakConfig(seed=CI_SEED, fault_seconds=1, workdir=tmp_path, target_wait_seconds=30))
    found: list[bool] = [False, False, True]

    async def act(kind: str, rng: random.Random) -> bool:
        return found.pop(0)

    soak.act = act  # type: ignore[method-assign]
    step = Step(3, "oom", 1, 0.5, opening=True)
    rng = random.Random(step.seed)
    assert await soak.attempt(step, rng, soak.now()) is False  # nothing to act on yet: try again
    assert await soak.attempt(step, rng, soak.now()) is False
    assert await soak.attempt(step, rng, soak.now()) is True
    assert soak.result.faults == Counter({"oom": 1}) and soak.result.opening == ["oom"]

    found[:] = [False]
    with pytest.raises(SoakError, match=r"opening step 3 \(oom\) found nothing to act on for 30s"):
        await soak.attempt(step, rng, soak.now() - 30)


async def test_a_later_step_with_nothing_to_act_on_is_dropped(tmp_path: Path) -> None:
    soak = Soak(SoakConfig(seed=CI_SEED, fault_seconds=1, workdir=tmp_path, target_wait_seconds=0))

    async def act(kind: str, rng: random.Random) -> bool:
        return False

    soak.act = act  # type: ignore[method-assign]
    assert await soak.attempt(Step(40, "oom", 1, 0.5, opening=False), random.Random(1), soak.now()) is True
    assert soak.result.faults == Counter() and soak.result.opening == []
