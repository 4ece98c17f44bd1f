"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's algorithm: optimistic
concurrency on the Lease's resourceVersion).

Why: two replicas of the controller must never reconcile at the same time (they would fight over pods),
and a crashed leader must be replaced within seconds. kubernetes-asyncio's own module has no renew fast
path, no ``leaseTransitions``, local-time timestamps, no per-request timeout and no release on shutdown,
so the small algorithm is implemented here.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import anyio
import structlog

from controller.runtime.client import LEASES, ApiClient
from controller.runtime.client_metrics import LeaderElectionMetrics
from controller.runtime.clock import Clock, MonotonicClock
from controller.runtime.errors import AlreadyExists, Conflict, Forbidden, KubeClientError, NotFound

__all__ = ["LeaderElector", "LeadershipLost", "micro_time"]

log = structlog.get_logger(__name__)

JITTER_FACTOR = 1.2


class LeadershipLost(Exception):
    """The lease could not be renewed in time; the leading callback has been cancelled."""


def micro_time(when: datetime | None = None) -> str:
    """``metav1.MicroTime`` rendering: UTC with exactly 6 fractional digits."""
    when = when or datetime.now(UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Signal:
    """A level that a waiter consumes: ``set()`` wakes the next (or the current) ``wait()`` once."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def set(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = anyio.Event()


class LeaderElector:
    """One candidate for the lease ``namespace/name``.

    Needs ``lease_duration > renew_deadline > 1.2 * retry_period``, all > 0 (client-go's validation;
    ValueError otherwise). Every API call (with the client's retries) is bounded by ``request_timeout``
    (default ``max(renew_deadline / 2, 1)``) so one hung request cannot outlive the renew deadline.
    ``leader_election_master_status{name}`` is 1 exactly while leading.
    """

    def __init__(
        self,
        client: ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        registry: Any = None,
        request_timeout: float | None = None,
        release_on_cancel: bool = True,
        watch_release: bool = True,
    ) -> None:
        if not identity:
            raise ValueError("leader election identity must not be empty")
        if not (retry_period > 0 and renew_deadline > JITTER_FACTOR * retry_period and lease_duration > renew_deadline):
            raise ValueError(
                "leader election needs lease_duration > renew_deadline > 1.2 * retry_period > 0, got "
                f"{lease_duration} / {renew_deadline} / {retry_period}"
            )
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.request_timeout = request_timeout if request_timeout is not None else max(renew_deadline / 2, 1.0)
        self.release_on_cancel = release_on_cancel
        self.watch_release = watch_release
        self.clock = clock or MonotonicClock()
        self._metrics = LeaderElectionMetrics.for_registry(registry, name)
        self._lease: dict[str, Any] | None = None  # last lease object seen or written (with its RV)
        self._observed_spec: dict[str, Any] | None = None
        self._observed_time = 0.0
        self._leading = False
        self._last_attempt_start = 0.0
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    @property
    def is_leader(self) -> bool:
        """True while this candidate holds the lease and runs the callback of :meth:`run`."""
        return self._leading

    @property
    def observed_holder(self) -> str | None:
        """``holderIdentity`` of the last lease state this elector saw (``None`` before the first)."""
        return (self._observed_spec or {}).get("holderIdentity")

    # -- main loop ------------------------------------------------------------------------------------

    async def run(self, on_started_leading: Callable[[], Awaitable[None]]) -> None:
        """Acquire the lease, run ``on_started_leading`` while renewing it, and release it when the callback
        returns, fails or is cancelled (shutdown). Raises :class:`LeadershipLost` once the callback and all its
        tasks were cancelled because no renewal succeeded within ``renew_deadline``.

        Acquiring retries every ``retry_period`` × [1, 2.2); with ``watch_release`` the candidate also watches
        the Lease, so a holder's release wakes it at once (only a shortcut: every decision is made by
        tryAcquireOrRenew on a fresh GET). ``renew_deadline`` runs from the *start* of the last successful
        renewal, and because it is below ``lease_duration`` the old leader has stopped before any follower
        considers the lease expired (followers judge expiry by *their* observation time on their own
        monotonic clock, never by comparing timestamps across machines). The release (``holderIdentity=""``,
        ``leaseDurationSeconds=1``) lets a follower take over at its next retry; it is shielded from
        cancellation and bounded by the request timeout.
        """
        try:
            await self._acquire()
            lost = False
            async with anyio.create_task_group() as tg:

                async def renew_then_stop() -> None:
                    nonlocal lost
                    await self._renew_until_lost()
                    lost = True
                    self._set_leading(False)
                    tg.cancel_scope.cancel()

                async def lead() -> None:
                    await on_started_leading()
                    tg.cancel_scope.cancel()

                tg.start_soon(renew_then_stop, name=f"lease renewal {self.name}")
                tg.start_soon(lead, name=f"leading {self.name}")
            if lost:
                raise LeadershipLost(
                    f"lost lease {self.namespace}/{self.name}: no renewal succeeded within {self.renew_deadline} s"
                )
        finally:
            if self._leading:
                self._set_leading(False)
                if self.release_on_cancel:
                    await self._release()

    async def _acquire(self) -> None:
        self._log.info("waiting to acquire lease")
        if await self._attempt():
            self._acquired()
            return
        changed = _Signal()
        async with anyio.create_task_group() as tg:
            if self.watch_release:
                tg.start_soon(self._watch_lease, changed, name=f"lease watch {self.name}")
            while True:
                wait = self.retry_period * (1.0 + random.random() * JITTER_FACTOR)
                with anyio.move_on_after(wait):  # a poll period, cut short when the Lease is released
                    await changed.wait()
                if await self._attempt():
                    self._acquired()
                    tg.cancel_scope.cancel()
                    return

    def _acquired(self) -> None:
        self._set_leading(True)
        self._log.info("acquired lease")

    async def _watch_lease(self, changed: _Signal) -> None:
        """Wake the acquire loop when the holder releases the Lease (``holderIdentity`` empty)."""
        selector = f"metadata.name={self.name}"
        resource_version = (self._lease or {}).get("metadata", {}).get("resourceVersion")
        while True:
            try:
                async with self.client.watch(
                    LEASES,
                    namespace=self.namespace,
                    field_selector=selector,
                    resource_version=resource_version,
                    timeout_seconds=300,
                    allow_watch_bookmarks=False,
                ) as stream:
                    async for event in stream:
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":  # e.g. 410 Expired: watch again from now
                            resource_version = None
                            break
                        resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                        if event.get("type") == "DELETED" or not (obj.get("spec") or {}).get("holderIdentity"):
                            changed.set()
            except KubeClientError as exc:
                # Only an optimisation: polling goes on. A 403 says which permission is missing.
                report = self._log.warning if isinstance(exc, Forbidden) else self._log.debug
                report("lease watch failed; polling only until it is re-established", error=str(exc))
            await self.clock.sleep_until(self.clock.now() + self.retry_period)

    async def _renew_until_lost(self) -> None:
        """Renew every retry_period; return once renewal has failed for renew_deadline."""
        last_success = self._last_attempt_start
        while True:
            await self.clock.sleep_until(last_success + self.retry_period)
            while True:
                deadline = last_success + self.renew_deadline
                remaining = deadline - self.clock.now()
                if remaining <= 0:
                    self._log.warning("failed to renew lease in time; stopping", renew_deadline=self.renew_deadline)
                    return
                if await self._attempt(timeout=min(self.request_timeout, remaining)):
                    last_success = self._last_attempt_start
                    break
                await self.clock.sleep_until(min(deadline, self.clock.now() + self.retry_period))

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._metrics.leading(leading)

    # -- one tryAcquireOrRenew --------------------------------------------------------------------------

    async def _attempt(self, timeout: float | None = None) -> bool:
        """tryAcquireOrRenew with a deadline; any API/transport failure or timeout counts as False."""
        self._last_attempt_start = self.clock.now()
        try:
            with anyio.fail_after(timeout if timeout is not None else self.request_timeout):
                return await self._try_acquire_or_renew()
        except TimeoutError:
            self._log.info("lease request timed out")
            return False
        except KubeClientError as exc:
            # A 403 will not heal by itself: say so at error level (the message names the permission).
            report = self._log.error if isinstance(exc, Forbidden) else self._log.info
            report("lease request failed", error=str(exc), error_type=type(exc).__name__)
            return False

    async def _try_acquire_or_renew(self) -> bool:
        now = self.clock.now()
        now_micro = micro_time()
        # 1. Fast path: we lead, the lease we last saw is ours and still valid → PUT the renewal directly.
        if (
            self._leading
            and self._lease is not None
            and self.observed_holder == self.identity
            and self._observed_time + self.lease_duration > now
        ):
            lease = copy.deepcopy(self._lease)
            lease["spec"]["renewTime"] = now_micro
            try:
                self._observe(await self.client.replace(LEASES, lease, namespace=self.namespace, name=self.name))
                return True
            except KubeClientError as exc:
                self._log.info("lease renewal fast path failed; re-reading", error=str(exc))
        # 2. Read; create when absent.
        try:
            lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
        except NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now_micro, acquire_time=now_micro, transitions=0),
            }
            try:
                self._observe(await self.client.create(LEASES, body, namespace=self.namespace))
            except AlreadyExists:
                return False  # another candidate created it first
            return True
        # 3. Note when the record last changed, by our clock.
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._lease = lease
            self._observed_spec = copy.deepcopy(spec)
            self._observed_time = now
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds") or 0
        # 4. Someone else holds an unexpired lease.
        if holder and holder != self.identity and self._observed_time + duration > now:
            return False
        # 5. Take or keep it.
        if holder == self.identity:
            new_spec = self._spec(now_micro, spec.get("acquireTime") or now_micro, spec.get("leaseTransitions") or 0)
        else:
            new_spec = self._spec(now_micro, now_micro, (spec.get("leaseTransitions") or 0) + 1)
        updated = dict(lease)
        updated["spec"] = new_spec
        try:
            self._observe(await self.client.replace(LEASES, updated, namespace=self.namespace, name=self.name))
        except Conflict:
            return False  # someone wrote the lease since our GET
        return True

    def _spec(self, now_micro: str, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(round(self.lease_duration)) or 1,
            "acquireTime": acquire_time,
            "renewTime": now_micro,
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> None:
        self._lease = lease
        self._observed_spec = copy.deepcopy(lease.get("spec") or {})
        self._observed_time = self.clock.now()

    # -- release --------------------------------------------------------------------------------------

    async def _release(self) -> None:
        """Hand the lease back (best effort, shielded, bounded by request_timeout)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.request_timeout) as scope:
            for _ in range(3):
                lease = self._lease
                if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                    return
                now_micro = micro_time()
                released = copy.deepcopy(lease)
                spec = released.setdefault("spec", {})
                spec.update(holderIdentity="", leaseDurationSeconds=1, acquireTime=now_micro, renewTime=now_micro)
                try:
                    self._observe(await self.client.replace(LEASES, released, namespace=self.namespace, name=self.name))
                    self._log.info("released lease")
                    return
                except Conflict:
                    try:
                        self._observe(await self.client.get(LEASES, self.name, namespace=self.namespace))
                    except KubeClientError as exc:
                        self._log.warning("could not re-read lease to release it", error=str(exc))
                        return
                except KubeClientError as exc:
                    self._log.warning("could not release lease", error=str(exc))
                    return
        if scope.cancelled_caught:
            self._log.warning("releasing the lease timed out", timeout=self.request_timeout)
