"""A second client of the API server, run by benchmarks/scale.py beside the controller: a steady light load
whose latency shows whether the controller leaves room for others on the same server.

It GETs one object at a fixed rate, open loop (each request is sent at its scheduled time whether or not
the previous one has answered, so a slow server cannot slow the load down and hide its own slowness), as
its own process with its own event loop (the benchmark's loop, busy polling the simulator, would add its
lag to every figure). Each answer is one JSON line in --output: the wall-clock time the request was sent,
its latency in seconds up to the complete body, and its HTTP status (0: no response). SIGINT or SIGTERM
ends it after the requests in flight have answered.

Usage: python benchmarks/neighbour.py URL --token-file F --ca-file F --output F [--rate 5]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys
import time
from pathlib import Path
from typing import BinaryIO

import aiohttp
import orjson

AGENT = "scale-bench-neighbour"


async def one(session: aiohttp.ClientSession, url: str, out: BinaryIO) -> None:
    sent, t0 = time.time(), time.perf_counter()
    try:
        async with session.get(url) as resp:
            await resp.read()
            status = resp.status
    except aiohttp.ClientError:
        status = 0
    line = {"t": sent, "latency": time.perf_counter() - t0, "status": status}
    out.write(orjson.dumps(line) + b"\n")
    out.flush()


async def run(url: str, token: str, ca: str, rate: float, out: BinaryIO) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    context = ssl.create_default_context(cadata=ca) if url.startswith("https:") else None
    headers = {"Authorization": f"Bearer {token}", "User-Agent": AGENT, "Accept": "application/json"}
    connector = aiohttp.TCPConnector(ssl=context) if context else aiohttp.TCPConnector()
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, headers=headers, timeout=timeout) as session:
        tasks: set[asyncio.Task] = set()
        start = time.monotonic()
        for k in range(sys.maxsize):
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, start + k / rate - time.monotonic()))
                break
            except TimeoutError:
                pass
            task = asyncio.create_task(one(session, url, out))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the object to GET, e.g. https://127.0.0.1:PORT/api/v1/namespaces/ns/configmaps/x")
    parser.add_argument("--token-file", required=True, help="a file holding the bearer token")
    parser.add_argument("--ca-file", required=True, help="a file holding the server's CA certificate (PEM)")
    parser.add_argument("--output", required=True, help="the file to write one JSON line per answer to")
    parser.add_argument("--rate", type=float, default=5.0, help="requests per second (default 5)")
    args = parser.parse_args()
    if args.rate <= 0:
        parser.error("--rate must be positive")
    try:
        token, ca = Path(args.token_file).read_text().strip(), Path(args.ca_file).read_text()
    except OSError as exc:
        parser.error(str(exc))
    with open(args.output, "ab") as out:
        asyncio.run(run(args.url, token, ca, args.rate, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
