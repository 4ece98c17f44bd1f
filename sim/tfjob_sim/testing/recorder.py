"""A recorder of every change a simulated store commits, for tests that drive the store directly (the kubelet's,
the garbage collector's): the changes with their time, and a wait for a condition that wakes on each change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from tfjob_sim.store import Store


class Recorder:
    """Records every store change with its time and lets a test wait for a condition."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.events: list[tuple[float, str, str, dict | None, dict | None]] = []
        self._changed = anyio.Event()
        store.add_listener(self._on_change)

    def _on_change(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        self.events.append((anyio.current_time(), event_type, resource, old, new))
        self._changed.set()

    async def until(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        """The first truthy ``predicate()``, checked now and after every change; fails after ``timeout``."""
        with anyio.fail_after(timeout):
            while True:
                result = predicate()
                if result:
                    return result
                await self._changed.wait()
                self._changed = anyio.Event()

    def deleted_at(self, name: str, resource: str = "pods") -> float | None:
        """When ``name`` (a pod, unless ``resource`` says otherwise) was deleted, or None."""
        return next(
            (
                when
                for when, event_type, kind, old, _new in self.events
                if event_type == "DELETED" and kind == resource and old is not None and old["metadata"]["name"] == name
            ),
            None,
        )

    def pod_states(self, name: str) -> list[tuple[float, str, dict]]:
        """(time, event type, object) of every change of pod ``name``."""
        out = []
        for when, event_type, resource, old, new in self.events:
            obj = new if new is not None else old
            if resource == "pods" and obj is not None and obj["metadata"]["name"] == name:
                out.append((when, event_type, obj))
        return out
