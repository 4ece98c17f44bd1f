"""docs/benchmarks/scale.md is what benchmarks/scale_report.py makes of the raw results kept beside it, and
a figure the raw results lack stops the report instead of leaving a blank or a stale number."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.scale_report import OTHER_SERVER, MissingFigure, render

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "benchmarks" / "scale.md"


def committed() -> tuple[str, str, dict[str, Any]]:
    """(the report's text, the raw file it names, that file's results)."""
    text = REPORT.read_text()
    match = re.search(r"<!-- Written by benchmarks/scale\.py from (raw/[\w.-]+\.json);", text)
    assert match, "docs/benchmarks/scale.md does not name the raw results it was written from"
    link = match.group(1)
    return text, link, orjson.loads((REPORT.parent / link).read_bytes())


def test_the_committed_report_is_exactly_what_its_raw_results_make() -> None:
    text, link, raw = committed()
    assert render(raw, link) == text, (
        "docs/benchmarks/scale.md differs from what its raw results make: regenerate it with "
        f"`benchmarks/scale.py report --raw docs/benchmarks/{link}` instead of editing it"
    )


@pytest.mark.parametrize(
    ("label", "path"),
    [
        ("burst", ("all_running_s",)),
        ("burst (kopf peer)", ("events", "written")),
        ("failover (kopf peer)", ("latency", "disruptions", "gone_to_create", "p99")),
        ("coldstart", ("writes",)),
    ],
)
def test_a_figure_missing_from_the_raw_results_fails_the_report(label: str, path: tuple[str, ...]) -> None:
    _, link, raw = committed()
    broken = copy.deepcopy(raw)
    record = broken["results"][label][-1]
    for key in path[:-1]:
        record = record[key]
    del record[path[-1]]
    with pytest.raises(MissingFigure, match=re.escape(repr(".".join(path)))):
        render(broken, link)


def test_the_header_says_when_the_sides_did_not_do_the_same_work() -> None:
    _, link, raw = committed()
    assert "- **Equal work:** yes" in render(raw, link)
    unequal = copy.deepcopy(raw)
    unequal["settings"]["events"]["peer"] = "kopf"
    unequal["settings"]["collector"]["peer"] = "default"
    for run in unequal["results"]["burst (kopf peer)"]:
        run["peer_settings"] = {"events": "kopf", "gc": "700,10,10"}
    text = render(unequal, link)
    assert "- **Equal work:** **no**: events: the peer posts every event through `kopf.event`" in text
    assert "collector: the peer keeps CPython's default thresholds" in text
    # A peer process that did not run with what the command asked for is reported, not trusted.
    assert "a peer run reported events policy 'kopf', not 'recorder'" in render(
        {**unequal, "settings": raw["settings"]}, link
    )


FAILOVER_LABELS = ("failover", "failover, at the peer's scale", "failover (kopf peer)")


def group(applied: int, p99: float, **counts: int) -> dict[str, Any]:
    """One group of failover actions: its counts and its three latency distributions."""
    latency = {"n": applied, "p50": p99 / 2, "p99": p99, "max": p99 * 1.5}
    base = {"actions": applied, "applied": applied, "skipped": 0, "refused": 0, "repeats": 0, "on_starting": 0}
    return {
        **base,
        "superseded": 0,
        "unreplaced": 0,
        **counts,
        "gone_to_create": latency,
        "disruption_to_create": latency,
        "disruption_to_running": latency,
    }


def with_failover_figures(p99: float = 0.05, failed: int = 0, unreplaced: int = 0, jobs: int = 1000) -> dict[str, Any]:
    """The committed raw results with failover figures of our choosing (random workers, repeats included,
    disruptions and own failures apart), the failover at ``jobs`` jobs and 20/s. The peer's disruptions take
    80 ms at p99 and the per-kind groups 900 ms, so that a report reading the wrong side or group shows it."""
    _, _, raw = committed()
    raw = copy.deepcopy(raw)
    for label in FAILOVER_LABELS:
        side = 0.08 if label.endswith("(kopf peer)") else p99  # the disruptions' p99 of this side
        for run in raw["results"][label]:
            run.update(actions=1200, workers_hit=1043, duration=60.0, plan_seed=11, unsettled=0)
            run["latency"] = {
                "disruptions": group(
                    790, side, repeats=104, on_starting=3, skipped=7, refused=3, superseded=2, unreplaced=unreplaced
                ),
                "disruption_repeats": group(104, side, repeats=104, on_starting=3),
                "own_first": group(380, 0.03),
                "own_repeat": group(16, 10.9, repeats=16),
                "delete": group(395, 0.9),
                "evict": group(395, 0.9),
                "oom": group(396, 10.9),
            }
    run = raw["results"]["failover"][0]
    run.update(jobs=jobs, rate=20.0, jobs_failed=failed)
    return raw


def failover_row(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("| failover | "))


def test_the_failover_row_shows_disruptions_and_own_failures_apart() -> None:
    _, link, _ = committed()
    text = render(with_failover_figures(), link)
    row = failover_row(text)
    assert "1,000 jobs, 1200 actions at 20/s on workers drawn at random, repeats included (1043 workers hit)" in row
    assert (
        "**disruptions** (DELETE, eviction; 104 repeats, 3 of them on a replacement still starting): 790 applied (2 of their "
        "replacements hit again before they ran), 7 skipped (pod already gone), 3 refused (429); gone -> create p50 25 ms, p99 50 ms, max 75 ms (n=790)"
    ) in row
    assert "the repeats alone: gone -> create p50 25 ms, p99 50 ms, max 75 ms (n=104)" in row
    assert (
        "first on a worker: 380 applied (0 of their replacements hit again before they ran), 0 skipped (pod already gone); gone -> create p50 15 ms, p99 30 ms"
        in row
    )
    assert (
        "repeat: 16 applied (0 of their replacements hit again before they ran), 0 skipped (pod already gone); gone -> create p50 5450 ms, p99 10900 ms"
        in row
    )
    assert row.endswith(
        "| random repeating disruptions at 20/s over 1,000 jobs: p99 gone -> create <= 250 ms, 0 Failed | yes |"
    )
    # The peer comparison reads the disruptions, and the method says how the actions are drawn.
    peer_row = next(line for line in text.splitlines() if line.startswith("| failover: ours vs kopf peer | "))
    assert peer_row.endswith("| p99 gone -> create 50 ms vs the peer's 80 ms | lower p99 | yes |")
    assert "drawn at random **with replacement**" in text


def test_raw_results_of_another_format_stop_the_report() -> None:
    _, link, raw = committed()
    with pytest.raises(MissingFigure, match="raw results in format 1, this report reads format 2"):
        render({**raw, "format": 1}, link)


@pytest.mark.parametrize(
    ("raw", "met"),
    [
        # the own failures' repeats (10.9 s, the back-off) are not the target's
        (with_failover_figures(p99=0.25), "yes"),
        (with_failover_figures(p99=0.26), "no"),
        (with_failover_figures(failed=1), "no"),
        (with_failover_figures(unreplaced=1), "no"),
        (with_failover_figures(jobs=300), "-"),
    ],
)
def test_the_failover_target_is_met_from_the_disruption_figures(raw: dict[str, Any], met: str) -> None:
    _, link, _ = committed()
    assert failover_row(render(raw, link)).endswith(f" | {met} |")


@pytest.mark.parametrize(
    "path",
    [
        ("latency", "own_repeat", "gone_to_create", "p99"),
        ("latency", "disruptions", "repeats"),
        ("workers_hit",),
    ],
)
def test_a_failover_figure_missing_from_the_raw_results_fails_the_report(path: tuple[str, ...]) -> None:
    _, link, _ = committed()
    broken = with_failover_figures()
    record = broken["results"]["failover"][0]
    for key in path[:-1]:
        record = record[key]
    del record[path[-1]]
    with pytest.raises(MissingFigure, match=re.escape(repr(".".join(path)))):
        render(broken, link)


def without_pushback(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` as a run that did not measure API Priority and Fairness writes it: no limits in its settings,
    no scenario against another server, no ``apf`` figures on any run (``apf_rejected``, which every run
    records, stays: :func:`with_pushback` reads it as the mark of a run of ours through the server)."""
    out = copy.deepcopy(raw)
    out["settings"].pop("apf", None)
    out["results"] = {label: runs for label, runs in out["results"].items() if label not in OTHER_SERVER}
    for runs in out["results"].values():
        for run in runs:
            run.pop("apf", None)
    return out


def with_pushback(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` as a run that measured API Priority and Fairness writes it: the limits in its settings, the
    server's and the controller's 429s on every run of ours, and a burst against tight limits with the
    neighbour beside it."""
    out = without_pushback(raw)
    out["settings"]["apf"] = {
        "burst_sim_args": ["--max-requests-inflight=4", "--max-mutating-requests-inflight=2", "--request-timeout=0.4"],
        "failover_sim_args": ["--max-requests-inflight=4", "--max-mutating-requests-inflight=2"],
        "write_latency": 0.01,
        "neighbour_rate": 5.0,
        "neighbour_idle_s": 5.0,
    }
    for label, runs in out["results"].items():
        for run in runs:
            if "apf_rejected" in run and not label.endswith("(kopf peer)"):
                run["apf"] = {
                    "rejected": {"global-default": {}},
                    "controller_429": {"seen": 0.0, "retried": 0.0},
                    "jobs_failed": 0,
                    "jobs_running": run["jobs"],
                    "neighbour": None,
                }
    tight = copy.deepcopy(out["results"]["burst"][0])
    tight["scenario"] = "burst, API server pushing back"

    def window(p50: float, top: float, rejected: int) -> dict[str, Any]:
        return {"n": 25, "p50": p50, "p99": top, "max": top, "rejected": rejected, "other": 0, "seconds": 5.0}

    tight["apf"] = {
        "rejected": {"workload-low": {"time-out": 181, "cancelled": 3}, "global-default": {"queue-full": 2}},
        "controller_429": {"seen": 181.0, "retried": 180.0},
        "jobs_failed": 0,
        "jobs_running": tight["jobs"],
        "neighbour": {"rate": 5.0, "idle": window(0.001, 0.007, 0), "during": window(0.010, 0.277, 1)},
    }
    out["results"]["burst, API server pushing back"] = [tight]
    return out


def apf_row(text: str, label: str) -> str:
    section = text.split("## Against an API server that pushes back", 1)[1].split("## How it measures", 1)[0]
    return next(line for line in section.splitlines() if line.startswith(f"| {label} |"))


def test_the_pushback_section_shows_each_runs_429s_on_both_sides_and_the_neighbours_latency() -> None:
    _, link, raw = committed()
    assert "## Against an API server that pushes back" not in render(without_pushback(raw), link)
    text = render(with_pushback(raw), link)
    jobs = f"{raw['results']['burst'][0]['jobs']:,}"
    assert "`--max-requests-inflight=4 --max-mutating-requests-inflight=2 --request-timeout=0.4`" in text
    tight = apf_row(text, "burst, API server pushing back")
    # requests given up while queued got no 429: not counted; the level and reason of each 429 are named
    assert "| 183 (global-default queue-full 2, workload-low time-out 181) | 181 / 180 |" in tight
    assert f"| 0 Failed, {jobs} of {jobs} Running |" in tight
    assert (
        "| p50 1 ms, p99 7 ms, max 7 ms (n=25); 0 x 429 | p50 10 ms, p99 277 ms, max 277 ms (n=25); 1 x 429 |" in tight
    )
    # the default-limit rows show their 429s, 0 included, per run
    runs = len(raw["results"]["burst"])
    per_run = " / ".join(["0"] * runs)
    assert apf_row(text, "burst").startswith(f"| burst | {per_run} | {per_run} / {per_run} | 0 Failed")
    assert apf_row(text, "failover").startswith("| failover | 0 | 0 / 0 | 0 Failed")


def test_the_targets_of_the_default_server_are_not_applied_to_the_pushback_scenarios() -> None:
    from benchmarks.scale import SCENARIOS

    assert set(OTHER_SERVER) <= {scenario.label for scenario in SCENARIOS.values()}
    _, link, raw = committed()
    pushback = with_pushback(raw)
    run = pushback["results"]["burst, API server pushing back"][0]
    run["jobs"] = 1000
    results = render(pushback, link).split("## Results", 1)[1]
    row = next(line for line in results.splitlines() if line.startswith("| burst, API server pushing back |"))
    assert row.endswith("| - (the target is for the default server) | - |")
    run["scenario"] = "burst"
    pushback["results"] = {"burst": [run]}
    assert "| all Running <= 30 s | yes |" in render(pushback, link)


def test_a_server_without_priority_and_fairness_is_said_so_not_counted_as_no_429s() -> None:
    _, link, raw = committed()
    pushback = with_pushback(raw)
    pushback["results"]["failover"][0]["apf"]["rejected"] = None
    assert "| failover | - (the server ran without API Priority and Fairness) |" in render(pushback, link)


@pytest.mark.parametrize(
    "path",
    [("apf",), ("apf", "rejected"), ("apf", "controller_429", "retried"), ("apf", "neighbour", "during", "rejected")],
)
def test_a_pushback_figure_missing_from_the_raw_results_fails_the_report(path: tuple[str, ...]) -> None:
    _, link, raw = committed()
    broken = with_pushback(raw)
    record = broken["results"]["burst, API server pushing back"][0]
    for key in path[:-1]:
        record = record[key]
    del record[path[-1]]
    with pytest.raises(MissingFigure, match=re.escape(repr(".".join(path)))):
        render(broken, link)
