"""docs/benchmarks/scale.md is what benchmarks/scale_report.py makes of the raw results kept beside it, and
a figure the raw results lack stops the report instead of leaving a blank or a stale number."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.scale_report import MissingFigure, render

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
        ("failover (kopf peer)", ("latency", "all", "gone_to_create", "p99")),
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
