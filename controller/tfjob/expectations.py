"""Expectations: what this controller has written but its informer caches have not yet shown.

Reconciles decide from caches, and caches lag the API server. Without a guard, a reconcile that
runs between "we created pod X" and "the informer saw pod X" would think X is missing and act
again — for a dynamic job that is worse than a harmless 409: it would count a phantom failover.
So the executor records every create (by object name) and delete (by uid) it issues, and a job is
only decided on while nothing is pending. Keyed by job key (``namespace/name``); single-threaded
(event loop) by design.

An expectation must never outlive reality, or the job freezes (until the expectation's five-minute
expiry, a job whose object was created and deleted unseen would ignore every change). It is settled by whichever comes first:

- **the cache shows the write**: the informer handlers report an object of that name present (added,
  or replaced under the same name by a new uid) or the deleted uid terminating, gone, or replaced;
- **a list that began after the server acknowledged the write** (:meth:`relisted`). A watch can miss
  an object's whole life — created and force-deleted while the watch was stalled — and then no event
  will ever name it. But a list is a consistent read: once one begun after the acknowledgement has
  replaced the cache, the cache reflects the write, whatever became of the object since. Only
  acknowledged entries qualify: a list racing a create still in flight may not contain it, and the
  watch that follows that list delivers it. The executor marks acknowledgements with
  :meth:`create_acknowledged` / :meth:`delete_acknowledged`, stamping the informer's list generation
  (``generation(kind, namespace)``) at that moment;
- **the write failed** (nothing will ever be observed): the executor lowers the expectation at once;
- **expiry** (5 minutes, as in kube-controller-manager): the last resort for a watch that loses an event
  without ever relisting, which a correct apiserver does not do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

EXPECTATIONS_TIMEOUT = 300.0

Generation = Callable[[str, str], int]
"""``generation(kind, namespace)``: how many lists the informer of ``kind`` has begun for ``namespace``."""


@dataclass
class _Entry:
    kind: str
    expiry: float  # monotonic seconds
    listed_after: int | None = None  # the list generation at acknowledgement; None until acknowledged


@dataclass
class _Pending:
    creates: dict[str, _Entry] = field(default_factory=dict)  # "kind/name" -> entry
    deletes: dict[str, _Entry] = field(default_factory=dict)  # uid -> entry


def _namespace(job_key: str) -> str:
    return job_key.partition("/")[0]


class Expectations:
    """Pending creates and deletes per job. ``clock`` returns monotonic seconds; ``generation`` reports the
    informers' list generations (without it, only observations, failures and expiry settle entries)."""

    def __init__(
        self, clock: Callable[[], float], timeout: float = EXPECTATIONS_TIMEOUT, generation: Generation | None = None
    ) -> None:
        self._clock = clock
        self._timeout = timeout
        self._generation = generation
        self._jobs: dict[str, _Pending] = {}

    def expect_create(self, job_key: str, kind: str, name: str) -> None:
        """Expect the creation of ``kind``/``name`` for ``job_key`` to show in the cache (until the timeout)."""
        entry = _Entry(kind, self._clock() + self._timeout)
        self._jobs.setdefault(job_key, _Pending()).creates[f"{kind}/{name}"] = entry

    def expect_delete(self, job_key: str, uid: str, kind: str) -> None:
        """Expect the deletion of the object ``uid`` of ``kind`` for ``job_key`` to show in the cache."""
        entry = _Entry(kind, self._clock() + self._timeout)
        self._jobs.setdefault(job_key, _Pending()).deletes[uid] = entry

    def create_acknowledged(self, job_key: str, kind: str, name: str) -> None:
        """The server stored the object: from the next list on, the cache reflects it."""
        pending = self._jobs.get(job_key)
        entry = pending.creates.get(f"{kind}/{name}") if pending is not None else None
        if entry is not None:
            entry.listed_after = self._current_generation(kind, job_key)

    def delete_acknowledged(self, job_key: str, uid: str) -> None:
        """The server accepted the deletion: from the next list on, the cache reflects it."""
        pending = self._jobs.get(job_key)
        entry = pending.deletes.get(uid) if pending is not None else None
        if entry is not None:
            entry.listed_after = self._current_generation(entry.kind, job_key)

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

    def relisted(self, kind: str, namespace: str | None, generation: int) -> list[str]:
        """A list of ``kind`` numbered ``generation`` replaced the cache of ``namespace`` (None: all).

        Settles every acknowledged entry of that kind it reflects; returns the keys of the jobs that had
        any, so the caller can requeue them (their pending reconcile was waiting for an event)."""
        settled: list[str] = []
        for job_key, pending in list(self._jobs.items()):
            if namespace is not None and _namespace(job_key) != namespace:
                continue
            found = False
            for table in (pending.creates, pending.deletes):
                for key in [
                    k
                    for k, entry in table.items()
                    if entry.kind == kind and entry.listed_after is not None and entry.listed_after < generation
                ]:
                    del table[key]
                    found = True
            if found:
                self._drop_if_empty(job_key, pending)
                settled.append(job_key)
        return settled

    def pending_until(self, job_key: str) -> float | None:
        """None when the job may be decided on; else the monotonic time the earliest entry expires."""
        pending = self._jobs.get(job_key)
        if pending is None:
            return None
        now = self._clock()
        for table in (pending.creates, pending.deletes):
            for key in [k for k, entry in table.items() if entry.expiry <= now]:
                del table[key]
        if self._drop_if_empty(job_key, pending):
            return None
        return min(entry.expiry for table in (pending.creates, pending.deletes) for entry in table.values())

    def forget(self, job_key: str) -> None:
        """The job is gone: nothing it expected matters any more."""
        self._jobs.pop(job_key, None)

    def _current_generation(self, kind: str, job_key: str) -> int | None:
        if self._generation is None:
            return None
        return self._generation(kind, _namespace(job_key))

    def _drop_if_empty(self, job_key: str, pending: _Pending) -> bool:
        if not pending.creates and not pending.deletes:
            self._jobs.pop(job_key, None)
            return True
        return False
