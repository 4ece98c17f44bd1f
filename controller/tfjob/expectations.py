"""Expectations: what this controller has written but its informer caches have not yet shown.

Reconciles decide from caches, and caches lag the API server. Without a guard, a reconcile that
runs between "we created pod X" and "the informer saw pod X" would think X is missing and act
again — for a dynamic job that is worse than a harmless 409: it would count a phantom failover.
So the executor records every create (by object name) and delete (by uid) it issues, the
informer handlers mark them observed, and a job is only decided on while nothing is pending.
Entries expire (5 minutes, as in kube-controller-manager) so a lost watch event cannot wedge a
job forever. Keyed by job key (``namespace/name``); single-threaded (event loop) by design.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

EXPECTATIONS_TIMEOUT = 300.0


@dataclass
class _Pending:
    creates: dict[str, float] = field(default_factory=dict)  # "kind/name" -> expiry (monotonic seconds)
    deletes: dict[str, float] = field(default_factory=dict)  # uid -> expiry


class Expectations:
    """Pending creates and deletes per job. ``clock`` returns monotonic seconds."""

    def __init__(self, clock: Callable[[], float], timeout: float = EXPECTATIONS_TIMEOUT) -> None:
        self._clock = clock
        self._timeout = timeout
        self._jobs: dict[str, _Pending] = {}

    def expect_create(self, job_key: str, kind: str, name: str) -> None:
        self._jobs.setdefault(job_key, _Pending()).creates[f"{kind}/{name}"] = self._clock() + self._timeout

    def expect_delete(self, job_key: str, uid: str) -> None:
        self._jobs.setdefault(job_key, _Pending()).deletes[uid] = self._clock() + self._timeout

    def creation_observed(self, job_key: str, kind: str, name: str) -> None:
        """The informer saw the object (or the create failed: nothing will ever be observed)."""
        pending = self._jobs.get(job_key)
        if pending is not None:
            pending.creates.pop(f"{kind}/{name}", None)
            self._drop_if_empty(job_key, pending)

    def deletion_observed(self, job_key: str, uid: str) -> None:
        """The informer saw the object terminating or gone (or the delete failed / found nothing)."""
        pending = self._jobs.get(job_key)
        if pending is not None:
            pending.deletes.pop(uid, None)
            self._drop_if_empty(job_key, pending)

    def pending_until(self, job_key: str) -> float | None:
        """None when the job may be decided on; else the monotonic time the earliest entry expires."""
        pending = self._jobs.get(job_key)
        if pending is None:
            return None
        now = self._clock()
        for table in (pending.creates, pending.deletes):
            for key in [k for k, expiry in table.items() if expiry <= now]:
                del table[key]
        if self._drop_if_empty(job_key, pending):
            return None
        return min([*pending.creates.values(), *pending.deletes.values()])

    def forget(self, job_key: str) -> None:
        """The job is gone: nothing it expected matters any more."""
        self._jobs.pop(job_key, None)

    def _drop_if_empty(self, job_key: str, pending: _Pending) -> bool:
        if not pending.creates and not pending.deletes:
            self._jobs.pop(job_key, None)
            return True
        return False
