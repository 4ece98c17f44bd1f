"""``tfjob-controller sim``: serve a simulated cluster until SIGINT/SIGTERM, for people and scripts.

It writes a kubeconfig whose current context points at the server, so ``kubectl --kubeconfig PATH``
works at once, prints the URL on stdout (scripts wait for that line), and exits 0 on the signal.
"""

from __future__ import annotations

import signal
import sys

import anyio

from controller.ops.collector import tune_collector
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.store import StoreConfig
from tfjob_sim.versions import DEFAULT_MINOR


async def serve_sim(
    port: int,
    kubeconfig: str,
    nodes: int,
    time_scale: float,
    secure: bool = False,
    podgroup_crds: tuple[str, ...] = (),
    priority_and_fairness: bool = True,
    max_requests_inflight: int = 400,
    max_mutating_requests_inflight: int = 200,
    request_timeout: float = 60.0,
    runtime: str = "annotations",
    kubernetes_minor: int = DEFAULT_MINOR,
    image_map: dict[str, str] | None = None,
) -> int:
    config = SimConfig(
        port=port,
        nodes=nodes,
        time_scale=time_scale,
        kubeconfig_path=kubeconfig,
        secure=secure,
        podgroup_crds=podgroup_crds,
        priority_and_fairness=priority_and_fairness,
        max_requests_inflight=max_requests_inflight,
        max_mutating_requests_inflight=max_mutating_requests_inflight,
        request_timeout=request_timeout,
        runtime=runtime,
        image_map=dict(image_map or {}),
        store=StoreConfig(kubernetes_minor=kubernetes_minor),
    )
    tune_collector()
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with SimCluster(config) as cluster:
            print(f"simulated cluster serving at {cluster.url} (kubeconfig: {cluster.kubeconfig_path})", flush=True)
            async for signum in signals:
                print(f"received {signal.Signals(signum).name}, shutting down", file=sys.stderr, flush=True)
                break
    return 0
