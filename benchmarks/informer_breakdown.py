"""Where the informer's CPU goes per watch event, beyond the raw ceiling's work, without the network.

Why: benchmarks/informer_bench.py measures the informer against a raw reader (aiohttp + split + orjson)
over HTTP; this script takes the network out and adds the informer's work to the raw reader one step at a
time, on the same recorded pod stream (the simulator's, with managedFields), fed in 64 KiB chunks in this
process. Each step's figure is CPU time per event (median of ``--runs``), so the difference between two
steps is what that step costs:

1. raw ceiling: split + ``orjson.loads`` per line, the decoded event dropped at once;
2. raw, decoding without managedFields (``watchdecode.loads_without_managed_fields``, what the informer uses);
3. step 2 keeping the latest object per name in a dict (the replaced one freed) — the least any cache does;
   also with the cyclic garbage collector off for the whole step, which separates the collector's share
   (it traverses the kept objects) from freeing each replaced object (allocated thousands of events
   earlier, so no longer in the CPU caches — the raw ceiling frees each object while it still is);
4. the informer itself (``_Reflector._apply_lines``: event handling, transform, indexed cache, one handler).

Usage: ``.venv/bin/python benchmarks/informer_breakdown.py [--events 40000] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CHUNK = 64 * 1024


def split_lines(chunks: list[bytes]):
    pending = b""
    for chunk in chunks:
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        yield lines


def raw(chunks: list[bytes], loads: Callable[[bytes], object] = orjson.loads) -> None:
    for lines in split_lines(chunks):
        for line in lines:
            loads(line)


def raw_keeping_latest(chunks: list[bytes], loads: Callable[[bytes], dict]) -> dict:
    latest: dict[str, dict] = {}
    for lines in split_lines(chunks):
        for line in lines:
            obj = loads(line)["object"]
            meta = obj["metadata"]
            meta.pop("managedFields", None)
            latest[meta["name"]] = obj
    return latest


def without_gc(step: Callable[[], object]) -> object:
    gc.disable()
    try:
        return step()
    finally:
        gc.enable()


def informer(chunks: list[bytes]) -> object:
    from prometheus_client import CollectorRegistry

    from controller.runtime.client import PODS, LineSplitter
    from controller.runtime.informer import Informer

    informer = Informer(None, PODS, namespace="bench", registry=CollectorRegistry())  # type: ignore[arg-type]
    handled = 0

    def on_event(*_: object) -> None:
        nonlocal handled
        handled += 1

    informer.add_handler(on_add=on_event, on_update=on_event, on_delete=on_event)
    reflector = informer._reflectors[0]
    reflector.last_rv, reflector._synthetic = "1", False  # as after the (empty) initial list
    splitter = LineSplitter()
    for chunk in chunks:
        lines = splitter.feed(chunk)
        if lines:
            reflector._apply_lines(lines)
    return informer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=40000)
    parser.add_argument("--updates-per-pod", type=int, default=9)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    import informer_bench

    from controller.runtime.watchdecode import loads_without_managed_fields

    stream = asyncio.run(informer_bench.sim_stream(args.events, args.updates_per_pod))
    chunks = [stream[i : i + CHUNK] for i in range(0, len(stream), CHUNK)]
    steps: dict[str, Callable[[], object]] = {
        "1. raw ceiling (split + orjson, object dropped)": lambda: raw(chunks),
        "2. raw, decoding without managedFields": lambda: raw(chunks, loads_without_managed_fields),
        "3. step 2 + keeping the latest object per name": lambda: raw_keeping_latest(
            chunks, loads_without_managed_fields
        ),
        "3b. step 3, cyclic GC off": lambda: without_gc(
            lambda: raw_keeping_latest(chunks, loads_without_managed_fields)
        ),
        "4. the informer (_apply_lines)": lambda: informer(chunks),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.runs):
        for name, step in steps.items():
            gc.collect()
            start = time.process_time()
            kept = step()
            times[name].append((time.process_time() - start) / args.events * 1e6)
            del kept
    ceiling = statistics.median(times[next(iter(steps))])
    print(f"{args.events:,} events, {len(stream) / args.events:,.0f} bytes/event, median of {args.runs} runs")
    print("| step | CPU us per event | events per CPU-s | of raw ceiling |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        us = statistics.median(values)
        print(f"| {name} | {us:.2f} | {1e6 / us:,.0f} | {ceiling / us:.0%} |")


if __name__ == "__main__":
    main()
