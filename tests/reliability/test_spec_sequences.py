"""Spec sequences against the oracle, on the simulated cluster with a controller process: hypothesis draws what a
user does to a dynamic TFJob (scaling with and without ``spec.workersToDelete``, deletion-cost annotations,
several spec changes at once, worker and PS disruptions, suspend and resume, other runPolicy fields) and after
each step, once the controller has settled, the cluster must be what benchmarks/chaos/oracle.py says: the
members and holes, exactly their pods and services, the pods kept or replaced, the failover records, the
conditions. A failing story is shrunk to a minimal one by hypothesis's stateful testing.

Deterministic in CI (``derandomize``); the seeded stories of the full sweep are ``benchmarks/sweep.py``.

The machine's steps are synchronous; the cluster, the proxy and the controller process live in an event loop of
their own thread for the whole module (one controller process for every example; each example its own job).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from benchmarks.chaos.oracle import Create, DeleteJob, Disrupt, SetCost, SetSpec, Spec
from benchmarks.chaos.specs import STORIES, OracleMismatch, SpecRunner
from benchmarks.chaos.systematic import Controller, World

MAX_WORKERS = 4


class Cluster:
    """A World and its controller, running in a loop on a thread of their own."""

    def __init__(self, workdir: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="reliability-cluster", daemon=True)
        self.thread.start()
        self.world = World(STORIES, workdir)
        self.run(self.world.__aenter__())
        self.controller: Controller = self.run(self.world.start_controller("a", "--no-leader-elect"))
        self.names = itertools.count()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 180.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        try:
            self.run(self.world.__aexit__(None, None, None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(30)
            self.loop.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("spec-sequences"))
    try:
        yield c
    finally:
        c.close()


def test_a_story_the_oracle_disagrees_with_fails(cluster: Cluster) -> None:
    """The judge can fail: a runner told to expect a hole where there is none times out with the difference."""
    runner = SpecRunner(cluster.world, cluster.controller, f"wrong-{next(cluster.names)}", settle_seconds=3.0)
    cluster.run(runner.step(Create(Spec(workers=2))))
    wrong = runner.state.copy()
    wrong.members = (0,)
    try:
        with pytest.raises(OracleMismatch, match=r"members \(0, 1\), expected \(0,\)"):
            cluster.run(runner._settle([wrong], runner.state))
    finally:
        cluster.run(runner.step(DeleteJob()))


class Stories(RuleBasedStateMachine):
    """One job per example; each rule is one step (or one batch of spec changes at once)."""

    cluster: Cluster

    def __init__(self) -> None:
        super().__init__()
        self.runner: SpecRunner | None = None

    @property
    def spec(self) -> Spec:
        assert self.runner is not None
        return self.runner.state.spec

    def _step(self, step: Any) -> None:
        assert self.runner is not None
        self.cluster.run(self.runner.step(step))

    @initialize(workers=st.integers(1, MAX_WORKERS), ps=st.integers(0, 1))
    def create(self, workers: int, ps: int) -> None:
        # A step settles within a few seconds; a shorter deadline than a seeded story's keeps shrinking affordable.
        self.runner = SpecRunner(
            self.cluster.world, self.cluster.controller, f"story-{next(self.cluster.names)}", settle_seconds=15.0
        )
        self._step(Create(Spec(workers=workers, ps=ps)))

    def _scaled(self, data: st.DataObject, base: Spec) -> Spec:
        workers = data.draw(st.integers(1, MAX_WORKERS + 1), label="workers")
        listed = data.draw(st.lists(st.integers(0, MAX_WORKERS + 1), max_size=2, unique=True), label="workersToDelete")
        return Spec(workers, base.ps, tuple(listed), base.suspend, base.run_policy)

    @rule(data=st.data())
    def scale(self, data: st.DataObject) -> None:
        self._step(SetSpec(self._scaled(data, self.spec)))

    @rule(data=st.data(), count=st.integers(2, 3))
    def scale_at_once(self, data: st.DataObject, count: int) -> None:
        assert self.runner is not None
        changes, spec = [], self.spec
        for _ in range(count):
            spec = self._scaled(data, spec)
            changes.append(SetSpec(spec))
        self.cluster.run(self.runner.batch(changes))

    # Indices are drawn from a fixed range, not from the members the cluster reached (which of the outcomes a
    # batch allows it reached is timing): the same draws make the same story on any machine. A step naming an
    # index that is not a member does nothing (SpecRunner skips it, the oracle ignores it).
    @precondition(lambda self: self.runner is not None and not self.spec.suspend)
    @rule(index=st.integers(0, MAX_WORKERS), cost=st.sampled_from(["-100", "-1", "0", "7", "x", "99999999999", None]))
    def annotate_cost(self, index: int, cost: str | None) -> None:
        self._step(SetCost(index, cost))

    @precondition(lambda self: self.runner is not None and not self.spec.suspend)
    @rule(index=st.integers(0, MAX_WORKERS), kind=st.sampled_from(["delete", "evict", "oom"]))
    def disrupt_worker(self, index: int, kind: str) -> None:
        self._step(Disrupt("Worker", index, kind))

    @precondition(lambda self: self.runner is not None and self.spec.ps and not self.spec.suspend)
    @rule(kind=st.sampled_from(["delete", "evict"]))
    def disrupt_ps(self, kind: str) -> None:
        self._step(Disrupt("PS", 0, kind))

    @precondition(lambda self: self.runner is not None)
    @rule()
    def suspend_or_resume(self) -> None:
        s = self.spec
        self._step(SetSpec(Spec(s.workers, s.ps, s.workers_to_delete, not s.suspend, s.run_policy)))

    @rule(
        change=st.sampled_from(
            [
                ("cleanPodPolicy", "All"),
                ("backoffLimit", 2),
                ("activeDeadlineSeconds", 86400),
                ("ttlSecondsAfterFinished", 60),
            ]
        )
    )
    def other_run_policy(self, change: tuple[str, object]) -> None:
        s = self.spec
        policy = tuple(sorted({**dict(s.run_policy), change[0]: change[1]}.items()))
        self._step(SetSpec(Spec(s.workers, s.ps, s.workers_to_delete, s.suspend, policy)))

    @invariant()
    def settled_as_the_oracle_says(self) -> None:
        # Every step waits for the cluster to match the oracle (SpecRunner._settle raises otherwise): here only
        # the bookkeeping of the machine itself is checked.
        assert self.runner is None or self.runner.state.exists

    def teardown(self) -> None:
        if self.runner is not None:
            self.cluster.run(self.runner.step(DeleteJob()))


@pytest.mark.timeout(420)
def test_stories_of_spec_changes_and_disruptions_end_as_the_oracle_says(cluster: Cluster) -> None:
    Stories.cluster = cluster
    run_state_machine_as_test(
        Stories,
        settings=settings(
            max_examples=4,
            stateful_step_count=6,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
            print_blob=True,
        ),
    )


@pytest.mark.timeout(120)
def test_suspension_clears_the_parameter_servers_failover_records(cluster: Cluster) -> None:
    """B4 (docs/reliability.md): suspension clears every failover record, the parameter servers' included, so a
    resumed job's next PS disruption starts a new streak. Found by a story, shrunk to these three steps."""
    runner = SpecRunner(cluster.world, cluster.controller, f"psrec-{next(cluster.names)}", settle_seconds=8.0)
    try:
        cluster.run(runner.step(Create(Spec(workers=1, ps=1))))
        cluster.run(runner.step(Disrupt("PS", 0, "evict")))
        cluster.run(runner.step(SetSpec(Spec(workers=1, ps=1, suspend=True))))
    finally:
        cluster.run(runner.step(DeleteJob()))
