"""``tfjob-controller sim``: serve a simulated cluster until SIGINT/SIGTERM, for people and scripts.

It writes a kubeconfig whose current context points at the server, so ``kubectl --kubeconfig PATH``
works at once, prints the URL on stdout (scripts wait for that line), and exits 0 on the signal.
"""

from __future__ import annotations

import gc
import signal
import sys

import anyio

from controller.sim.cluster import SimCluster, SimConfig


# The cyclic collector's default young generation (700 allocations) makes a burst of writes run a young
# collection every few requests and, as the store grows, full collections over every stored object:
# about a fifth of the simulator's CPU in the 1,000-job burst (docs/benchmarks/profiles/README.md).
# The store's objects are JSON trees that cannot form cycles; the little cyclic garbage a server makes
# (tasks, tracebacks) waits a little longer instead.
COLLECTOR_THRESHOLDS = (50_000, 20, 10)


async def serve_sim(port: int, kubeconfig: str, nodes: int, time_scale: float, secure: bool = False,
                    podgroup_crds: tuple[str, ...] = (), priority_and_fairness: bool = True) -> int:
    config = SimConfig(port=port, nodes=nodes, time_scale=time_scale, kubeconfig_path=kubeconfig, secure=secure,
                       podgroup_crds=podgroup_crds, priority_and_fairness=priority_and_fairness)
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with SimCluster(config) as cluster:
            print(f"simulated cluster serving at {cluster.url} (kubeconfig: {cluster.kubeconfig_path})", flush=True)
            async for signum in signals:
                print(f"received {signal.Signals(signum).name}, shutting down", file=sys.stderr, flush=True)
                break
    return 0
