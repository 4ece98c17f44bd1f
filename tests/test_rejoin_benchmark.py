"""The rejoin-time benchmark's parsing and statistics (benchmarks/rejoin.py), without running TensorFlow: the log
lines it reads are those the simulated kubelet stamps and train.py prints, and its figures are exact on
hand-made records."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest

from benchmarks import rejoin
from tfjob_sim.logs import _stamp

TRAIN = Path(rejoin.EXAMPLE / "train.py").read_text()


def test_a_stamped_log_line_is_read_back_to_the_nanosecond_the_kubelet_wrote() -> None:
    when = 1_796_342_400.123456789
    parsed = rejoin.parse_stamped(f"{_stamp(when)} step=120 worker=1 loss=0.2500\n")
    assert parsed is not None
    assert parsed[0] == pytest.approx(when, abs=1e-6)
    assert parsed[1] == "step=120 worker=1 loss=0.2500"
    assert rejoin.parse_stamped("step=120 worker=1 loss=0.25") is None


def test_the_lines_it_reads_are_the_ones_train_py_prints() -> None:
    # If train.py changes these lines, the benchmark would find no step: this test says so first.
    assert 'log(f"event=joined step={step} {self.label}")' in TRAIN
    assert 'log(f"step={step} {self.label} loss={loss:.4f}")' in TRAIN
    lines = [
        (10.0, "event=probe-started"),
        (10.5, "something TensorFlow prints"),
        (14.0, "event=probe-tensorflow-imported"),
        (16.0, "event=joined step=770 worker=1"),
        (16.2, "step=771 worker=1 loss=0.1234"),
        (17.0, "step=780 worker=1 loss=0.1200"),
    ]
    assert rejoin.milestones(lines) == {
        "started": 10.0,
        "imported": 14.0,
        "joined": 16.0,
        "first_step": 16.2,
        "step": 771,
    }
    assert rejoin.step_of("event=finished step=900 worker=0") is None
    assert rejoin.milestones([])["first_step"] is None
    # The old instance's way out: train.py's SIGTERM line, or oom_on_demand.py's as it starts allocating.
    assert 'log(f"event=stopped step={sess.run(self.read_step)} {self.label} reason=SIGTERM")' in TRAIN
    assert 'print("event=allocating-until-oom-killed", flush=True)' in rejoin.OOM_ON_DEMAND.read_text()
    assert (
        rejoin.last_words([(1.0, "step=10 worker=1 loss=0.1"), (2.0, "event=stopped step=12 worker=1 reason=SIGTERM")])
        == 2.0
    )
    assert rejoin.last_words([(1.0, "event=allocating-until-oom-killed")]) == 1.0
    assert rejoin.last_words([(1.0, "step=10 worker=1 loss=0.1")]) is None


def test_percentiles_are_nearest_rank_values_that_were_measured() -> None:
    values = [float(v) for v in range(20, 0, -1)]
    assert rejoin.percentile(values, 50) == 10.0
    assert rejoin.percentile(values, 99) == 20.0
    assert rejoin.percentile([3.5], 99) == 3.5
    assert rejoin.describe(values) == {"n": 20, "p50": 10.0, "p99": 20.0, "max": 20.0, "min": 1.0, "mean": 10.5}
    assert rejoin.describe([]) is None
    with pytest.raises(ValueError):
        rejoin.percentile([], 50)
    with pytest.raises(ValueError):
        rejoin.percentile([1.0], 0)


def test_the_global_step_series_merges_workers_and_rates_use_observed_points_only() -> None:
    points = [(2.0, 20), (1.0, 10), (2.5, 15), (3.0, 30), (4.0, 40)]  # a late line of a slower worker: 15
    series = rejoin.global_steps(points)
    assert series == [(1.0, 10), (2.0, 20), (3.0, 30), (4.0, 40)]
    assert rejoin.rate(series, 1.0, 4.0) == pytest.approx(10.0)
    assert rejoin.rate(series, 1.5, 2.5) is None  # one point inside
    assert rejoin.step_before(series, 3.0) == 20
    assert rejoin.step_before(series, 1.0) is None


def raw_record() -> dict:
    """One delete and one OOM kill of a job stepping 10/s, 5/s while a worker is away, and a scale-up."""
    steps = [[t / 10, t] for t in range(0, 1001)]  # 10 steps/s until t=100
    steps += [[100 + t / 5, 1000 + t] for t in range(1, 101)]  # 5 steps/s from t=100 to t=120
    steps += [[120 + t / 10, 1100 + t] for t in range(1, 801)]  # 10 steps/s again until t=200
    delete = {
        "kind": "delete", "index": 1, "shared_before": 1000, "fault": 100.0, "old_last_words": 100.2, "old_exited": 100.5,
        "gone": 101.0, "created": 101.3,
        "running": 102.0, "started": 102.5, "imported": 110.0, "joined": 118.0, "first_step": 120.0, "step": 1100,
        "shared_at_first_step": 1096,
    }  # fmt: skip
    oom = {
        "kind": "oom", "index": 2, "shared_before": 1500, "fault": 150.0, "gone": 151.0, "created": 151.5,
        "running": 152.0, "started": None, "imported": None, "joined": 160.0, "first_step": 161.0, "step": 12,
    }  # fmt: skip
    scale_up = {
        "kind": "scale-up", "index": 3, "shared_before": 1600, "fault": 170.0, "created": 170.2, "running": 171.0,
        "started": 171.5, "imported": 178.0, "joined": 180.0, "first_step": 181.0, "step": 1710,
    }  # fmt: skip
    oom_again = {
        **oom,
        "fault": 190.0,
        "gone": 191.0,
        "created": 191.9,
        "running": None,
        "joined": None,
        "first_step": None,
    }
    return {"settings": {"settle": 8.0}, "steps": steps, "events": [delete, oom, scale_up, oom_again]}


def test_the_summary_gives_each_segment_the_throughput_and_flags_a_worker_that_started_over() -> None:
    summary = rejoin.summarize(raw_record())
    delete = summary["delete"]
    assert delete["count"] == 1 and delete["rejoined_at_shared_step"] == 1
    segments = {label: stats["p50"] for label, stats in delete["segments"].items()}
    assert segments["fault -> old said stopping"] == pytest.approx(0.2)
    assert segments["old said stopping -> old exited"] == pytest.approx(0.3)
    assert segments["old exited -> gone"] == pytest.approx(0.5)
    assert segments["fault -> gone"] == pytest.approx(1.0)
    assert delete["first_step_minus_job_step"]["max"] == 4
    assert segments["gone -> created"] == pytest.approx(0.3)
    assert segments["created -> Running"] == pytest.approx(0.7)
    assert segments["python started -> TF imported"] == pytest.approx(7.5)
    assert segments["Running -> first step"] == pytest.approx(18.0)
    assert segments["gone -> first step"] == pytest.approx(19.0)
    assert delete["throughput"]["before"]["p50"] == pytest.approx(10.0)
    assert delete["throughput"]["during"]["p50"] == pytest.approx(5.0)
    assert delete["throughput"]["after"]["p50"] == pytest.approx(10.0)

    oom = summary["oom"]
    assert oom["rejoined_at_shared_step"] == 0  # the first's first step (12) is below the step before the fault
    # ... and the second has none (its replacement never trained)
    assert oom["not_at_shared_step"] == [{"index": 2, "fault": 150.0}, {"index": 2, "fault": 190.0}]
    streaks = oom["gone -> created by OOM kill of the index"]
    assert streaks["an index's first"]["max"] == pytest.approx(0.5)
    assert streaks["a repeated"]["max"] == pytest.approx(0.9)
    assert oom["segments"]["python started -> TF imported"] is None  # not observed: no figure made up

    scale_up = summary["scale-up"]
    assert "gone -> created" not in scale_up["segments"]
    assert scale_up["segments"]["raised -> first step"]["max"] == pytest.approx(11.0)
    assert "evict" not in summary  # no event of that kind, no table

    table = rejoin.render_markdown(summary)
    assert "| gone -> created | 1 | 0.30 | 0.30 | 0.30 |" in table
    assert "first step at the shared global step: 0 of 2" in table
    assert "| gone -> created, a repeated OOM kill | 1 | 0.90 | 0.90 | 0.90 |" in table
    assert "first step minus the job's last logged step before it: p50 4, max 4" in table
    assert "| python started -> TF imported | 0 | – | – | – |" in table
    assert "| during | 1 | 5.0 | 5.0 | 5.0 |" in table


def test_the_kinds_are_interleaved_so_a_run_cut_short_has_as_many_of_each() -> None:
    assert rejoin.plan(2, 1) == ["delete", "evict", "oom", "scale-up", "delete", "evict", "oom"]
    assert rejoin.plan(0, 0) == []


def test_the_controllers_own_failover_metric_is_read_per_reason() -> None:
    metrics = {
        "tfjob_worker_failover_seconds_count{job_namespace=default,reason=Deleted}": 4.0,
        "tfjob_worker_failover_seconds_sum{job_namespace=default,reason=Deleted}": 2.0,
        "tfjob_worker_failover_seconds_bucket{job_namespace=default,le=1.0,reason=Deleted}": 4.0,
        "tfjob_worker_failover_seconds_count{job_namespace=default,reason=OOMKilled}": 1.0,
        "tfjob_worker_failover_seconds_sum{job_namespace=default,reason=OOMKilled}": 1.5,
        "controller_runtime_reconcile_time_seconds_sum{controller=tfjob-controller}": 9.0,
    }
    assert rejoin.controller_failovers(metrics) == {
        "Deleted": {"count": 4.0, "mean": 0.5},
        "OOMKilled": {"count": 1.0, "mean": 1.5},
    }
    raw = {
        "probes": {"python": [["start", 0.05, 0.04], ["end", 0.03, 0.04]], "tensorflow_import": [["start", 4.0, 3.5]]},
        "controller_metrics": metrics,
        "load": [[0.0, 1.5, 1.0, 1.0], [10.0, 2.5, 1.2, 1.0]],
        "job_not_running_polls": [],
    }
    text = rejoin.render_context(raw)
    assert "| python -c 'import tensorflow' | 1 | 4.00 | 4.00 | 3.50 |" in text
    assert "| reason=Deleted | 4 | 0.50 |" in text
    assert "min 1.50, p50 1.50, max 2.50 (2 samples" in text
    assert "not Running once it ran: 0." in text
    assert "reconciles during the run" not in text  # no reconcile count in this record: no line at all
    metrics["controller_runtime_reconcile_time_seconds_count{controller=tfjob-controller}"] = 20.0
    assert "The controller's reconciles during the run: 20, 450.0 ms each on average." in rejoin.render_context(raw)


def test_stop_at_is_the_next_such_utc_time_and_bad_input_is_a_clear_error() -> None:
    now = time.time()
    for text in ("00:00", "12:30", "23:59"):
        when = rejoin._utc_time(text)
        assert now < when <= now + 86400
        assert time.strftime("%H:%M", time.gmtime(when)) == text
    with pytest.raises(argparse.ArgumentTypeError, match="expected HH:MM"):
        rejoin._utc_time("2 am")


def test_every_kind_of_failover_hits_every_worker_in_turn() -> None:
    hits = {(kind, rejoin.failover_index(n)) for n, kind in enumerate(rejoin.plan(3, 0))}
    assert hits == {(kind, index) for kind in rejoin.FAILOVER_KINDS for index in range(rejoin.WORKERS)}
