"""Medians of the raw outputs of run.sh in this directory (or the one given): python3 summarise.py [DIR]."""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def results(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects benchmarks/scale.py printed, one per run, among its other lines."""
    text, decoder, at = path.read_text(), json.JSONDecoder(), 0
    while (start := text.find("\n{\n", at)) >= 0:
        obj, end = decoder.raw_decode(text[start + 1 :])
        at = start + 1 + end
        yield obj


def figures(scenario: str, run: dict[str, Any]) -> dict[str, float]:
    lists = sum(v for k, v in run["request_breakdown"].items() if k.startswith("list"))
    common = {"controller CPU s": run["controller_cpu_s"], "simulator CPU s": run["sim_cpu_s"], "LISTs": lists}
    if scenario == "burst":
        jobs = run["jobs"]
        return {"all Running s": run["all_running_s"], "requests/job": run["requests"] / jobs, **common}
    latency = run["latency"]["disruptions"]
    return {
        "gone->create p50 ms": latency["gone_to_create"]["p50"] * 1000,
        "gone->create p99 ms": latency["gone_to_create"]["p99"] * 1000,
        "action->create p99 ms": latency["disruption_to_create"]["p99"] * 1000,
        "requests": run["requests"],
        "jobs Failed": run["jobs_failed"],
        **common,
    }


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    for scenario in ("burst", "failover"):
        medians = {}
        for side in ("before", "after"):
            runs = [figures(scenario, r) for f in sorted(folder.glob(f"{scenario}-{side}-*.txt")) for r in results(f)]
            medians[side] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"{scenario} {side}: {len(runs)} runs")
        for key, before in medians["before"].items():
            after = medians["after"][key]
            ratio = f"{after / before:.2f}x" if before else "-"
            print(f"  {key:24} before {before:10.2f}  after {after:10.2f}  after/before {ratio}")


if __name__ == "__main__":
    main()
