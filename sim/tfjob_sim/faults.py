"""Fault injection and the request log: what tests use to make the simulated apiserver misbehave
exactly like a real one under stress, and to assert what a client did.

Why: a controller is only trustworthy if it was tested against throttling, errors, stalls,
compaction and restarts. Every fault here produces what a real kube-apiserver (or the network in
front of it) produces: APF-style plain-text 429 with Retry-After, Status bodies for 500/503/504/409,
dropped connections, added latency; watch-level faults live in the watch hub and the cluster.

Contract:
- :class:`Faults` is owned by a :class:`~tfjob_sim.cluster.SimCluster`; the HTTP server calls
  :meth:`Faults.check` before handling a request and :meth:`Faults.record` after. The cluster-level faults
  (watches, compaction, a server restart, pausing the kubelet or the GC, node readiness) are the owner's
  :class:`ClusterHooks`: callbacks, so this module knows nothing of the cluster's parts.
- Verbs are the apiserver's audit verbs: get, list, watch, create, update, patch, delete,
  deletecollection. A request's *resource key* is the qualified plural, plus ``/subresource`` for
  subresources (``"pods/status"``). A rule's resource ``"*"`` matches everything, ``"pods"``
  matches ``pods`` and all its subresources, ``"pods/status"`` only that subresource.
- A rule with ``user_agent`` only hits requests whose User-Agent contains it, as API Priority and
  Fairness throttles one client's flow while others proceed (a soak faults the controller while its
  observer keeps reading).
- Request-log counters: :meth:`mark` returns a position; :meth:`count` / :meth:`counts` /
  :meth:`writes` count what happened after it ("between these two points this client made zero
  writes / exactly one LIST").
"""

from __future__ import annotations

import itertools
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tfjob_sim import errors
from tfjob_sim.errors import ApiError

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
VERBS = frozenset({"get", "list", "watch"}) | WRITE_VERBS


@dataclass
class RequestRecord:
    seq: int
    time: float
    method: str
    path: str
    verb: str  # "" for non-resource requests (discovery, health, openapi)
    resource: str  # resource key, "" for non-resource requests
    namespace: str | None
    name: str | None
    code: int = 0
    user_agent: str = ""
    fault: str | None = None  # what was injected, if anything

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "time": self.time,
            "method": self.method,
            "path": self.path,
            "verb": self.verb,
            "resource": self.resource,
            "namespace": self.namespace,
            "name": self.name,
            "code": self.code,
            "userAgent": self.user_agent,
            "fault": self.fault,
        }


@dataclass
class FaultRule:
    """One injected behaviour. ``code`` 0 with ``drop`` = drop the connection without a response."""

    id: int
    verb: str = "*"
    resource: str = "*"
    code: int = 500
    rate: float = 1.0
    remaining: int | None = None  # one-shot budget; None = until removed
    retry_after: int | None = None
    message: str | None = None
    latency: float = 0.0  # seconds added before handling (latency-only rules have code 0)
    drop: bool = False
    user_agent: str | None = None  # only requests whose User-Agent contains this; None = every client
    hits: int = 0

    def matches(self, verb: str, resource: str, user_agent: str = "") -> bool:
        if self.verb != "*" and self.verb != verb:
            return False
        if self.user_agent is not None and self.user_agent not in user_agent:
            return False
        if self.resource == "*":
            return True
        return resource == self.resource or resource.startswith(self.resource + "/")

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "verb": self.verb,
            "resource": self.resource,
            "code": self.code,
            "rate": self.rate,
            "remaining": self.remaining,
            "retryAfter": self.retry_after,
            "message": self.message,
            "latency": self.latency,
            "drop": self.drop,
            "userAgent": self.user_agent,
            "hits": self.hits,
        }


@dataclass
class Decision:
    """What :meth:`Faults.check` decided for one request."""

    latency: float = 0.0
    error: ApiError | None = None
    drop: bool = False
    rule: FaultRule | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def injected_error(
    code: int, resource: str, name: str | None, message: str | None = None, retry_after: int | None = None
) -> tuple[ApiError, dict[str, str]]:
    """The exact error a real apiserver (or its APF filter) answers with ``code``."""
    base, _, _sub = resource.partition("/")
    plural, _, group = base.partition(".")
    headers: dict[str, str] = {}
    if code == 429:
        err = ApiError(
            429,
            "",
            message or "Too many requests, please try again later.",
            plain_text=True,
            retry_after=retry_after if retry_after is not None else 1,
        )
        # Its X-Kubernetes-PF-* headers are the server's, on every response while APF is on
        # (sim/tfjob_sim/flowcontrol.py); with APF off this is max-in-flight's 429, which has none.
        return err, headers
    if code == 500:
        err = errors.internal(message or "injected fault")
    elif code == 503:
        err = ApiError(503, "ServiceUnavailable", message or "apiserver is shutting down")
    elif code == 504:
        err = ApiError(
            504,
            "Timeout",
            message or "Timeout: request did not complete within the allotted timeout",
            {
                "causes": [
                    {
                        "reason": "UnexpectedServerResponse",
                        "message": "request did not complete within the allotted timeout",
                    }
                ]
            },
        )
    elif code == 409:
        err = errors.conflict(plural or "resources", name or "", group, message)
    else:
        err = ApiError(code, _REASONS.get(code, ""), message or f"injected fault (HTTP {code})")
    if retry_after is not None:
        err.retry_after = retry_after
    return err, headers


def _check_match(verb: str, rate: float, count: int | None) -> None:
    """ValueError for a rule that could never match as meant: an unknown verb, a rate outside [0, 1], a count < 1."""
    if verb != "*" and verb not in VERBS:
        raise ValueError(f"unknown verb {verb!r}; use one of {sorted(VERBS)} or '*'")
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be within [0, 1], got {rate}")
    if count is not None and count < 1:
        raise ValueError(f"count must be >= 1, got {count}")


@dataclass(frozen=True)
class ClusterHooks:
    """The cluster-level faults, as the cluster that owns a :class:`Faults` carries them out."""

    close_watches: Callable[[str | None], int]  # resource (None: all) -> watches closed
    stall_watches: Callable[[str | None, bool], int]  # resource, include_new -> watches stalled
    unstall_watches: Callable[[], int]
    delay_watch_events: Callable[[float, str | None, str | None], None]  # seconds, resource, user_agent
    compact: Callable[[], int]  # -> the RV compacted at
    restart_server: Callable[[], Awaitable[None]]
    pause_kubelet: Callable[[], None]
    resume_kubelet: Callable[[], None]
    pause_gc: Callable[[], None]
    resume_gc: Callable[[], None]
    set_node_ready: Callable[[str, bool], None]  # name, ready


class Faults:
    """Per verb+resource error rates, one-shot errors, latency; watch faults; the request log."""

    def __init__(self, hooks: ClusterHooks | None = None, seed: int | None = None, log_limit: int = 500_000) -> None:
        self.hooks = hooks
        self._rules: list[FaultRule] = []
        self._ids = itertools.count(1)
        self._rng = random.Random(seed)
        self._log: deque[RequestRecord] = deque(maxlen=log_limit)
        self._seq = 0
        self.totals: Counter[tuple[str, str]] = Counter()

    # ------------------------------------------------------------ request faults

    def fail(
        self,
        verb: str = "*",
        resource: str = "*",
        code: int = 500,
        *,
        rate: float = 1.0,
        count: int | None = None,
        retry_after: int | None = None,
        message: str | None = None,
        user_agent: str | None = None,
    ) -> FaultRule:
        """Answer matching requests with ``code`` (429/500/503/504/409/...), at ``rate``, ``count`` times."""
        _check_match(verb, rate, count)
        if code < 400 or code > 599:
            raise ValueError(f"code must be an HTTP error status (4xx/5xx), got {code}")
        rule = FaultRule(
            next(self._ids), verb, resource, code, rate, count, retry_after, message, user_agent=user_agent
        )
        self._rules.append(rule)
        return rule

    def fail_next(
        self,
        verb: str = "*",
        resource: str = "*",
        code: int = 500,
        *,
        count: int = 1,
        retry_after: int | None = None,
        message: str | None = None,
    ) -> FaultRule:
        """One-shot errors: the next ``count`` matching requests fail."""
        return self.fail(verb, resource, code, count=count, retry_after=retry_after, message=message)

    def drop_connections(
        self,
        verb: str = "*",
        resource: str = "*",
        *,
        rate: float = 1.0,
        count: int | None = None,
        user_agent: str | None = None,
    ) -> FaultRule:
        """Close the connection without answering (the client sees a disconnect)."""
        _check_match(verb, rate, count)
        rule = FaultRule(next(self._ids), verb, resource, 0, rate, count, drop=True, user_agent=user_agent)
        self._rules.append(rule)
        return rule

    def add_latency(
        self, seconds: float, verb: str = "*", resource: str = "*", *, user_agent: str | None = None
    ) -> FaultRule:
        """Delay matching requests by ``seconds`` before they are handled."""
        if seconds < 0:
            raise ValueError(f"latency must be >= 0, got {seconds}")
        _check_match(verb, 1.0, None)
        rule = FaultRule(next(self._ids), verb, resource, 0, 1.0, None, latency=seconds, user_agent=user_agent)
        self._rules.append(rule)
        return rule

    def remove(self, rule: FaultRule | int) -> None:
        rule_id = rule if isinstance(rule, int) else rule.id
        self._rules = [r for r in self._rules if r.id != rule_id]

    def clear(self) -> None:
        """Remove every request fault (watch faults are separate: see unstall_watches)."""
        self._rules.clear()

    @property
    def rules(self) -> list[FaultRule]:
        return list(self._rules)

    def check(self, verb: str, resource: str, name: str | None, user_agent: str = "") -> Decision:
        """Decide latency / error / drop for one request (called by the HTTP server)."""
        decision = Decision()
        if not self._rules:
            return decision
        for rule in list(self._rules):
            if not rule.matches(verb, resource, user_agent):
                continue
            if rule.latency and not rule.drop and rule.code == 0:
                decision.latency += rule.latency
                rule.hits += 1
                continue
            if decision.error is not None or decision.drop:
                continue
            if rule.rate < 1.0 and self._rng.random() >= rule.rate:
                continue
            rule.hits += 1
            if rule.remaining is not None:
                rule.remaining -= 1
                if rule.remaining <= 0:
                    self.remove(rule)
            decision.rule = rule
            if rule.drop:
                decision.drop = True
            else:
                decision.error, decision.extra_headers = injected_error(
                    rule.code, resource, name, rule.message, rule.retry_after
                )
        return decision

    # ------------------------------------------------------------ request log

    def start_record(
        self, method: str, path: str, verb: str, resource: str, namespace: str | None, name: str | None, user_agent: str
    ) -> RequestRecord:
        self._seq += 1
        record = RequestRecord(
            self._seq, time.time(), method, path, verb, resource, namespace, name, user_agent=user_agent
        )
        self._log.append(record)
        if verb:
            self.totals[(verb, resource)] += 1
        return record

    def mark(self) -> int:
        """A position in the request log; pass it as ``since`` to count what came after."""
        return self._seq

    def requests(self, since: int = 0, verb: str | None = None, resource: str | None = None) -> list[RequestRecord]:
        if self._log and since < self._log[0].seq - 1:
            raise ValueError(f"request log no longer holds entries after {since} (oldest is {self._log[0].seq})")
        out = []
        for record in reversed(self._log):
            if record.seq <= since:
                break
            if verb is not None and record.verb != verb:
                continue
            if resource is not None and not (record.resource == resource or record.resource.startswith(resource + "/")):
                continue
            out.append(record)
        out.reverse()
        return out

    def count(self, verb: str | None = None, resource: str | None = None, since: int = 0) -> int:
        """Requests after ``since`` with that verb (and resource, subresources included)."""
        return len(self.requests(since, verb, resource))

    def counts(self, since: int = 0) -> Counter[tuple[str, str]]:
        """(verb, resource key) -> number of requests after ``since``."""
        return Counter((r.verb, r.resource) for r in self.requests(since) if r.verb)

    def counts_by_user_agent(self, since: int = 0) -> dict[str, dict[str, int]]:
        """User-Agent -> "verb resource" -> number of requests after ``since`` (who made which calls)."""
        out: dict[str, dict[str, int]] = {}
        for r in self.requests(since):
            if r.verb:
                per_agent = out.setdefault(r.user_agent, {})
                key = f"{r.verb} {r.resource}"
                per_agent[key] = per_agent.get(key, 0) + 1
        return out

    def writes(self, since: int = 0, resource: str | None = None) -> int:
        """Write requests (create/update/patch/delete/deletecollection) after ``since``."""
        return sum(1 for r in self.requests(since, resource=resource) if r.verb in WRITE_VERBS)

    # ------------------------------------------------------------ cluster-level faults (the owner's hooks)

    @property
    def _cluster(self) -> ClusterHooks:
        if self.hooks is None:
            raise RuntimeError("this fault needs a running SimCluster")
        return self.hooks

    def close_watches(self, resource: str | None = None) -> int:
        return self._cluster.close_watches(resource)

    def stall_watches(self, resource: str | None = None, include_new: bool = False) -> int:
        return self._cluster.stall_watches(resource, include_new)

    def unstall_watches(self) -> int:
        return self._cluster.unstall_watches()

    def delay_watch_events(self, seconds: float, resource: str | None = None, user_agent: str | None = None) -> None:
        """Deliver watch events late to the watchers of ``resource`` whose User-Agent contains ``user_agent``."""
        self._cluster.delay_watch_events(seconds, resource, user_agent)

    def compact(self) -> int:
        """Compact history at the current RV: older watch resumes / continue tokens / exact lists get 410."""
        return self._cluster.compact()

    async def restart_server(self) -> None:
        await self._cluster.restart_server()

    def pause_kubelet(self) -> None:
        self._cluster.pause_kubelet()

    def resume_kubelet(self) -> None:
        self._cluster.resume_kubelet()

    def pause_gc(self) -> None:
        self._cluster.pause_gc()

    def resume_gc(self) -> None:
        self._cluster.resume_gc()

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Mark node ``name`` (Not)Ready, as its kubelet losing or regaining the API server; 404 if absent."""
        self._cluster.set_node_ready(name, ready)
