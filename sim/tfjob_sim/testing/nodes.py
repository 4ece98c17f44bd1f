"""A store with the simulated node components running, and the pod helpers their tests share.

Why a module of its own: the tests of the scheduler, the kubelet, the node lifecycle controller and pod
GC (sim/tests/test_scheduler.py, test_kubelet.py, test_nodelifecycle.py, test_podgc.py) drive the same
:class:`~tfjob_sim.kubelet.Kubelet` over a real Store at time_scale :data:`SCALE` (1 simulated second =
10 ms) and read the same pod fields.

Contract: :func:`cluster` yields (store, kubelet, recorder) once the configured nodes exist and every task
is idle; timing assertions use lower bounds (a timer never fires early) and generous upper bounds.
"Nothing happens" is shown with :func:`sentinel`: a later timer of the same kubelet that fired proves
every earlier one was processed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from tfjob_sim.kubelet import RUN_SECONDS, START_SECONDS, Kubelet, KubeletConfig
from tfjob_sim.store import Store
from tfjob_sim.testing.recorder import Recorder

SCALE = 0.01
NS = "default"
# A grace period (simulated seconds) that "exited early" is told from by 30 real seconds: a loaded machine
# cannot blur that, and waiting it out would fail the recorder's deadline anyway.
LONG_GRACE = 3000


@asynccontextmanager
async def cluster(**config: Any) -> AsyncIterator[tuple[Store, Kubelet, Recorder]]:
    """A Store and a running Kubelet with ``KubeletConfig(**config)`` (time_scale :data:`SCALE` unless given)."""
    config.setdefault("time_scale", SCALE)
    store = Store()
    recorder = Recorder(store)
    kubelet = Kubelet(store, KubeletConfig(**config))
    async with anyio.create_task_group() as tg:
        tg.start_soon(kubelet.run)
        expected = kubelet.config.nodes
        await recorder.until(lambda: len(store.list("nodes")[0]) == expected or expected == 0)
        await anyio.wait_all_tasks_blocked()
        yield store, kubelet, recorder
        tg.cancel_scope.cancel()


def make_pod(
    name: str,
    annotations: dict[str, str] | None = None,
    restart: str = "Always",
    containers: tuple[str, ...] = ("main",),
    **spec: Any,
) -> dict:
    """A pod of busybox containers with these annotations and extra spec fields."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": c, "image": "busybox:1.36"} for c in containers],
            **spec,
        },
    }


def get_pod(store: Store, name: str) -> dict | None:
    return store.get("pods", NS, name)


def phase(store: Store, name: str) -> str | None:
    pod = get_pod(store, name)
    return (pod.get("status") or {}).get("phase") if pod else None


def condition(pod: dict, ctype: str) -> dict | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def container(pod: dict, name: str = "main") -> dict:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == name)


def annotate(store: Store, name: str, **values: str | None) -> None:
    store.patch("pods", NS, name, "merge", {"metadata": {"annotations": values}})


def running(store: Store, name: str) -> bool:
    """Whether pod ``name`` is Running with every container running."""
    pod = get_pod(store, name)
    return bool(
        pod
        and pod["status"].get("phase") == "Running"
        and all(s.get("state", {}).get("running") for s in pod["status"].get("containerStatuses", []))
    )


def restart_count(store: Store, name: str) -> int:
    pod = get_pod(store, name)
    return container(pod)["restartCount"] if pod and pod["status"].get("containerStatuses") else -1


async def sentinel(store: Store, recorder: Recorder, seconds: float, name: str = "sentinel") -> None:
    """Run a pod for ``seconds`` simulated seconds to completion: once it has finished, every timer
    of the kubelet due earlier has fired (one worker, timers in due order)."""
    store.create("pods", NS, make_pod(name, {RUN_SECONDS: str(seconds), START_SECONDS: "0"}, restart="Never"))
    await recorder.until(lambda: phase(store, name) == "Succeeded")


def pod_events(store: Store, name: str) -> list[tuple[str, str, str, str, str, int]]:
    """(type, reason, source component, fieldPath, message, count) of the events of object ``name``."""
    items, _ = store.list("events", NS, field_selector=f"involvedObject.name={name}")
    items.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [
        (
            e["type"],
            e["reason"],
            e["source"].get("component") or e["reportingComponent"],
            e["involvedObject"].get("fieldPath", ""),
            e["message"],
            e.get("count", 1),
        )
        for e in items
    ]
