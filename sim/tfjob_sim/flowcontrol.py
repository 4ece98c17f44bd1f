"""The simulated apiserver's API Priority and Fairness (APF): the bootstrap configuration objects, request
classification, per-level concurrency limits with fair queues, 429 + ``Retry-After``, and the
``apiserver_flowcontrol_*`` metrics.

Why this module exists: a kube-apiserver with APF (on by default since 1.20, GA in 1.29) classifies every
request into a FlowSchema and its priority level, runs at most the level's share of the server's concurrency,
queues the excess fairly per flow and answers 429 when the queues are full or a request waited too long. A
controller measured against a server that never pushes back has been measured against no real server; and
clients read the ``X-Kubernetes-PF-FlowSchema-UID`` / ``-PriorityLevel-UID`` response headers (ours turns its
client-side limit off when it sees them), so the simulator must send them, and omit them like a server
started with ``--enable-priority-and-fairness=false`` (``tfjob-controller sim --no-priority-and-fairness``).

What is simulated, as kube-apiserver does it:

- Configuration: the mandatory and suggested ``flowcontrol.apiserver.k8s.io/v1`` FlowSchemas and
  PriorityLevelConfigurations of a current kube-apiserver, created at start and served (``kubectl get
  flowschemas,prioritylevelconfigurations``); the response headers carry their UIDs.
- Classification: the FlowSchema of lowest ``matchingPrecedence`` (then name) one of whose rules matches
  the requester (user, group, ServiceAccount; ``*`` for any) and the request (verbs, API groups, resources
  with ``res/sub`` for subresources, namespaces with ``*`` and ``clusterScope``; non-resource URLs with a
  trailing ``*`` prefix). The flow is (schema, distinguisher): the user name (``ByUser``), the namespace
  (``ByNamespace``) or none.
- Limits: the server's concurrency limit is ``--max-requests-inflight`` + ``--max-mutating-requests-inflight``
  (400 + 200), divided among the Limited levels by ``nominalConcurrencyShares``:
  ``NominalCL = ceil(ServerCL * NCS / sum NCS)``. An Exempt level runs everything at once.
- Queuing: a request beyond its level's limit waits in its flow's queue; a freed seat goes to the next
  flow in turn (round robin over the flows that wait: fair queuing of equal-cost requests). A flow holds at
  most ``handSize * queueLengthLimit`` waiting requests (shuffle sharding lets one flow fill its whole hand
  of queues) and the level at most ``queues * queueLengthLimit``; beyond that the request is rejected
  (``queue-full``). A request waits at most a quarter of its timeout (its ``timeout`` parameter, else
  ``--request-timeout``, 60 s; at most a minute), then is rejected (``time-out``). A level whose
  limitResponse is ``Reject`` (``catch-all``) rejects at once (``concurrency-limit``).
- Rejection: 429, plain-text body ``Too many requests, please try again later.``, ``Retry-After`` from the
  apiserver's dropped-requests tracker per priority level: 1 s, doubled (up to 32 s) when at least three
  times as many requests as the current value were rejected in that many seconds, decreased by one when
  fewer than that many were.
- Watches take a seat only while they are being set up (until their response headers are sent); other
  long-running requests (pod logs) are not subject to APF and carry no headers. Health probes match the
  ``probes`` FlowSchema (exempt).
- Metrics (:meth:`FlowControl.metrics_text`, served on the simulator's ``/metrics``):
  ``apiserver_flowcontrol_current_inqueue_requests``, ``..._current_executing_requests``,
  ``..._rejected_requests_total{reason}``, ``..._dispatched_requests_total``,
  ``..._request_wait_duration_seconds{execute}`` (all by flow_schema and priority_level) and
  ``..._nominal_limit_seats`` (by priority_level).

Simplifications: seats are not borrowed between levels (``lendablePercent`` is served but each level runs
at its nominal limit, so pushback starts no later than on a real server); every request takes one seat
(kube-apiserver's work estimator gives large LISTs and writes with many watchers more); the configuration
is the bootstrap one for the life of the simulator (changing the served objects does not change
classification); a request that authentication refuses is neither classified nor limited, as the real
chain authenticates first; authorization here comes before the limit, so a 403 names its flow schema but
takes no seat (a real one does, briefly).

Without APF (``--no-priority-and-fairness``) the server applies kube-apiserver's max-in-flight filter
instead: at most ``--max-requests-inflight`` read-only and ``--max-mutating-requests-inflight`` mutating
requests at once, long-running ones excluded, the excess rejected at once with 429 and ``Retry-After: 1``.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tfjob_sim.errors import ApiError

FLOW_SCHEMA_HEADER = "X-Kubernetes-PF-FlowSchema-UID"
PRIORITY_LEVEL_HEADER = "X-Kubernetes-PF-PriorityLevel-UID"
GROUP = "flowcontrol.apiserver.k8s.io"
FLOW_SCHEMAS = f"flowschemas.{GROUP}"
PRIORITY_LEVELS = f"prioritylevelconfigurations.{GROUP}"

ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
AUTHENTICATED = "system:authenticated"
_MUTATING = frozenset({"create", "update", "patch", "delete", "deletecollection"})
_READ_ONLY_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TOO_MANY = "Too many requests, please try again later."
# kube-apiserver's apiserver_flowcontrol_request_wait_duration_seconds buckets
WAIT_BUCKETS = (0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0)
_MAX_RETRY_AFTER = 32
_MAX_WAIT = 60.0

# ------------------------------------------------------------------------------------------------ bootstrap

# name -> (nominalConcurrencyShares, lendablePercent, limitResponse): "exempt" for the Exempt level,
# "reject" for an immediate rejection, else (queues, handSize, queueLengthLimit).
_LEVELS: dict[str, tuple[int, int, Any]] = {
    "exempt": (0, 0, "exempt"),
    "catch-all": (5, 0, "reject"),
    "system": (30, 33, (64, 6, 50)),
    "node-high": (40, 25, (64, 6, 50)),
    "leader-election": (10, 0, (16, 4, 50)),
    "workload-high": (40, 50, (128, 6, 50)),
    "workload-low": (100, 90, (128, 6, 50)),
    "global-default": (20, 50, (128, 6, 50)),
}


def _group(name: str) -> dict:
    return {"kind": "Group", "group": {"name": name}}


def _user(name: str) -> dict:
    return {"kind": "User", "user": {"name": name}}


def _kube_system_sa(name: str = "*") -> dict:
    return {"kind": "ServiceAccount", "serviceAccount": {"namespace": "kube-system", "name": name}}


def _rule(verbs: list[str], groups: list[str], resources: list[str], namespaces: list[str], cluster: bool) -> dict:
    rule: dict[str, Any] = {"verbs": verbs, "apiGroups": groups, "resources": resources, "namespaces": namespaces}
    if cluster:
        rule["clusterScope"] = True
    return rule


_ALL_RESOURCES = [_rule(["*"], ["*"], ["*"], ["*"], True)]
_ALL_NON_RESOURCES = [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
_LEADER_RULES = [
    _rule(["get", "create", "update"], [""], ["endpoints", "configmaps"], ["*"], False),
    _rule(["get", "create", "update"], ["coordination.k8s.io"], ["leases"], ["*"], False),
]

# (name, priority level, matchingPrecedence, distinguisher, subjects, resourceRules, nonResourceRules)
_SCHEMAS: list[tuple[str, str, int, str | None, list[dict], list[dict], list[dict]]] = [
    ("exempt", "exempt", 1, None, [_group("system:masters")], _ALL_RESOURCES, _ALL_NON_RESOURCES),
    (
        "probes",
        "exempt",
        2,
        None,
        [_group(UNAUTHENTICATED), _group(AUTHENTICATED)],
        [],
        [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}],
    ),
    (
        "system-leader-election",
        "leader-election",
        100,
        "ByUser",
        [_user("system:kube-controller-manager"), _user("system:kube-scheduler"), _kube_system_sa()],
        [
            _rule(["get", "create", "update"], [""], ["endpoints", "configmaps"], ["kube-system"], False),
            _rule(["get", "create", "update"], ["coordination.k8s.io"], ["leases"], ["*"], False),
        ],
        [],
    ),
    (
        "endpoint-controller",
        "workload-high",
        150,
        "ByUser",
        [_user("system:kube-controller-manager"), _kube_system_sa("endpoint-controller")],
        [_rule(["get", "create", "update"], [""], ["endpoints"], ["*"], False)],
        [],
    ),
    ("workload-leader-election", "leader-election", 200, "ByUser", [_kube_system_sa()], _LEADER_RULES, []),
    (
        "system-node-high",
        "node-high",
        400,
        "ByUser",
        [_group("system:nodes")],
        [
            _rule(["*"], [""], ["nodes", "nodes/status"], ["*"], True),
            _rule(["*"], ["coordination.k8s.io"], ["leases"], ["*"], False),
        ],
        [],
    ),
    ("system-nodes", "system", 500, "ByUser", [_group("system:nodes")], _ALL_RESOURCES, _ALL_NON_RESOURCES),
    (
        "kube-controller-manager",
        "workload-high",
        800,
        "ByNamespace",
        [_user("system:kube-controller-manager")],
        _ALL_RESOURCES,
        _ALL_NON_RESOURCES,
    ),
    (
        "kube-scheduler",
        "workload-high",
        800,
        "ByNamespace",
        [_user("system:kube-scheduler")],
        _ALL_RESOURCES,
        _ALL_NON_RESOURCES,
    ),
    (
        "kube-system-service-accounts",
        "workload-high",
        900,
        "ByNamespace",
        [_kube_system_sa()],
        _ALL_RESOURCES,
        _ALL_NON_RESOURCES,
    ),
    (
        "service-accounts",
        "workload-low",
        9000,
        "ByUser",
        [_group("system:serviceaccounts")],
        _ALL_RESOURCES,
        _ALL_NON_RESOURCES,
    ),
    (
        "global-default",
        "global-default",
        9900,
        "ByUser",
        [_group(UNAUTHENTICATED), _group(AUTHENTICATED)],
        _ALL_RESOURCES,
        _ALL_NON_RESOURCES,
    ),
    (
        "catch-all",
        "catch-all",
        10000,
        "ByUser",
        [_group(UNAUTHENTICATED), _group(AUTHENTICATED)],
        _ALL_RESOURCES,
        _ALL_NON_RESOURCES,
    ),
]

_AUTO_UPDATE = {"apf.kubernetes.io/autoupdate-spec": "true"}


def priority_level_objects() -> list[dict]:
    """The bootstrap PriorityLevelConfigurations, as kube-apiserver creates them."""
    out = []
    for name, (shares, lendable, response) in _LEVELS.items():
        if response == "exempt":
            spec: dict[str, Any] = {
                "type": "Exempt",
                "exempt": {"nominalConcurrencyShares": shares, "lendablePercent": lendable},
            }
        else:
            limit: dict[str, Any] = {"type": "Reject"}
            if response != "reject":
                queues, hand, length = response
                limit = {"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": length}}
            spec = {
                "type": "Limited",
                "limited": {"nominalConcurrencyShares": shares, "lendablePercent": lendable, "limitResponse": limit},
            }
        out.append(
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "PriorityLevelConfiguration",
                "metadata": {"name": name, "annotations": dict(_AUTO_UPDATE)},
                "spec": spec,
            }
        )
    return out


def flow_schema_objects(now: str) -> list[dict]:
    """The bootstrap FlowSchemas, with the status condition the config controller writes."""
    out = []
    for name, level, precedence, method, subjects, resource_rules, non_resource_rules in _SCHEMAS:
        rule: dict[str, Any] = {"subjects": subjects}
        if resource_rules:
            rule["resourceRules"] = resource_rules
        if non_resource_rules:
            rule["nonResourceRules"] = non_resource_rules
        spec: dict[str, Any] = {
            "priorityLevelConfiguration": {"name": level},
            "matchingPrecedence": precedence,
            "rules": [rule],
        }
        if method is not None:
            spec["distinguisherMethod"] = {"type": method}
        out.append(
            {
                "apiVersion": f"{GROUP}/v1",
                "kind": "FlowSchema",
                "metadata": {"name": name, "annotations": dict(_AUTO_UPDATE)},
                "spec": spec,
                "status": {
                    "conditions": [
                        {
                            "type": "Dangling",
                            "status": "False",
                            "reason": "Found",
                            "message": f'This FlowSchema references the PriorityLevelConfiguration object named "{level}" '
                            "and it exists",
                            "lastTransitionTime": now,
                        }
                    ]
                },
            }
        )
    return out


# ------------------------------------------------------------------------------------------------ matching


@dataclass(frozen=True)
class Requester:
    """Who sends a request, as APF matches it."""

    name: str
    groups: tuple[str, ...]


ANONYMOUS_REQUESTER = Requester(ANONYMOUS, (UNAUTHENTICATED,))


@dataclass(frozen=True)
class RequestInfo:
    """What a request does, as kube-apiserver's RequestInfo describes it for APF."""

    resource_request: bool
    verb: str
    group: str = ""
    resource: str = ""  # "pods", or "pods/status" with a subresource
    namespace: str = ""
    path: str = ""


def _subject_matches(subject: dict, who: Requester) -> bool:
    kind = subject.get("kind")
    if kind == "Group":
        name = subject["group"]["name"]
        return name == "*" or name in who.groups
    if kind == "User":
        name = subject["user"]["name"]
        return name == "*" or name == who.name
    if kind == "ServiceAccount":
        sa = subject["serviceAccount"]
        prefix = f"system:serviceaccount:{sa['namespace']}:"
        return who.name.startswith(prefix) and (sa["name"] == "*" or who.name[len(prefix) :] == sa["name"])
    return False


def _resource_rule_matches(rule: dict, info: RequestInfo) -> bool:
    if not _listed(info.verb, rule["verbs"]) or not _listed(info.group, rule["apiGroups"]):
        return False
    if not _listed(info.resource, rule["resources"]):
        return False
    if not info.namespace:
        return bool(rule.get("clusterScope"))
    return _listed(info.namespace, rule.get("namespaces") or ())


def _non_resource_rule_matches(rule: dict, info: RequestInfo) -> bool:
    if not _listed(info.verb, rule["verbs"]):
        return False
    for url in rule["nonResourceURLs"]:
        if url == "*" or url == info.path or (url.endswith("*") and info.path.startswith(url[:-1])):
            return True
    return False


def _listed(value: str, allowed: Iterable[str]) -> bool:
    return any(a == "*" or a == value for a in allowed)


@dataclass
class Schema:
    name: str
    level: str
    precedence: int
    distinguisher: str | None
    rules: list[dict]
    uid: str = ""
    headers: tuple[tuple[str, str], tuple[str, str]] = ()  # type: ignore[assignment]

    def matches(self, who: Requester, info: RequestInfo) -> bool:
        for rule in self.rules:
            if not any(_subject_matches(s, who) for s in rule.get("subjects") or ()):
                continue
            if info.resource_request:
                if any(_resource_rule_matches(r, info) for r in rule.get("resourceRules") or ()):
                    return True
            elif any(_non_resource_rule_matches(r, info) for r in rule.get("nonResourceRules") or ()):
                return True
        return False


# ------------------------------------------------------------------------------------------------ metrics


@dataclass
class _FlowMetrics:
    """The series of one (flow_schema, priority_level) pair."""

    inqueue: int = 0
    executing: int = 0
    dispatched: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    # execute -> (bucket counts, sum, count)
    waits: dict[str, list] = field(default_factory=dict)

    def observe_wait(self, seconds: float, executed: bool) -> None:
        key = "true" if executed else "false"
        hist = self.waits.get(key)
        if hist is None:
            hist = self.waits[key] = [[0] * len(WAIT_BUCKETS), 0.0, 0]
        index = bisect.bisect_left(WAIT_BUCKETS, seconds)
        if index < len(WAIT_BUCKETS):
            hist[0][index] += 1
        hist[1] += seconds
        hist[2] += 1


# The one-sample-per-(flow_schema, priority_level) series of :meth:`FlowControl.metrics_text`.
_PER_FLOW_SERIES: tuple[tuple[str, str, str, Callable[[_FlowMetrics], int]], ...] = (
    (
        "apiserver_flowcontrol_current_inqueue_requests",
        "gauge",
        "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
        lambda m: m.inqueue,
    ),
    (
        "apiserver_flowcontrol_current_executing_requests",
        "gauge",
        "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API "
        "Priority and Fairness subsystem",
        lambda m: m.executing,
    ),
    (
        "apiserver_flowcontrol_dispatched_requests_total",
        "counter",
        "Number of requests executed by API Priority and Fairness subsystem",
        lambda m: m.dispatched,
    ),
)


class _RetryAfter:
    """kube-apiserver's dropped-requests tracker for one priority level: the Retry-After of its 429s."""

    __slots__ = ("history", "current_second", "current_count", "value", "raised_at")

    def __init__(self) -> None:
        self.history: deque[tuple[int, int]] = deque()  # (unix second, rejections) of past seconds
        self.current_second = 0
        self.current_count = 0
        self.value = 1
        self.raised_at = 0

    def record(self, second: int) -> None:
        if second == self.current_second:
            self.current_count += 1
            return
        if self.current_count:
            self.history.append((self.current_second, self.current_count))
        while self.history and self.current_second - self.history[0][0] > _MAX_RETRY_AFTER:
            self.history.popleft()
        self.current_second, self.current_count = second, 1
        # reconsider on entering a new second, from the seconds [second - value, second)
        dropped = sum(n for s, n in self.history if second - s <= self.value and s < second)
        if second - self.raised_at >= self.value and dropped >= 3 * self.value:
            self.value = min(2 * self.value, _MAX_RETRY_AFTER)
            self.raised_at = second
        elif dropped < self.value and self.value > 1:
            self.value -= 1


# ------------------------------------------------------------------------------------------------ levels


class _Waiter:
    __slots__ = ("future", "flow")

    def __init__(self, future: asyncio.Future, flow: tuple[str, str]) -> None:
        self.future = future
        self.flow = flow


class Level:
    """The runtime state of one priority level: its limit, what executes, the flows' queues."""

    def __init__(self, name: str, shares: int, response: Any, limit: int) -> None:
        self.name = name
        self.shares = shares
        self.exempt = response == "exempt"
        self.reject = response == "reject"
        self.limit = limit
        queues, hand, length = response if isinstance(response, tuple) else (0, 0, 0)
        self.flow_capacity = hand * length
        self.level_capacity = queues * length
        self.executing = 0
        self.waiting = 0
        self.queues: OrderedDict[tuple[str, str], deque[_Waiter]] = OrderedDict()  # round robin: first is next
        self.retry_after = _RetryAfter()
        self.uid = ""

    def dispatch(self) -> None:
        """Hand free seats to the waiting flows in turn."""
        queues = self.queues
        while self.executing < self.limit and queues:
            flow, queue = next(iter(queues.items()))
            waiter = queue.popleft()
            if queue:
                queues.move_to_end(flow)
            else:
                del queues[flow]
            self.waiting -= 1
            if not waiter.future.done():
                self.executing += 1
                waiter.future.set_result(None)


class Seat:
    """One admitted request's hold on its level; :meth:`release` is idempotent."""

    __slots__ = ("level", "metrics", "released")

    def __init__(self, level: Level | None, metrics: _FlowMetrics | None) -> None:
        self.level = level
        self.metrics = metrics
        self.released = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        level = self.level
        if level is None:
            return
        if self.metrics is not None:
            self.metrics.executing -= 1
        level.executing -= 1
        if level.queues:
            level.dispatch()


class FlowControl:
    """APF for one simulated apiserver (see the module docstring)."""

    def __init__(
        self,
        max_requests_inflight: int = 400,
        max_mutating_requests_inflight: int = 200,
        request_timeout: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if max_requests_inflight < 0 or max_mutating_requests_inflight < 0:
            raise ValueError("max-requests-inflight and max-mutating-requests-inflight must be >= 0")
        if max_requests_inflight + max_mutating_requests_inflight < 1:
            raise ValueError("max-requests-inflight + max-mutating-requests-inflight must be >= 1")
        if request_timeout <= 0:
            raise ValueError("request-timeout must be > 0")
        self.max_requests_inflight = max_requests_inflight
        self.max_mutating_requests_inflight = max_mutating_requests_inflight
        self.request_timeout = request_timeout
        self.clock = clock
        self.wall = wall
        server_limit = max_requests_inflight + max_mutating_requests_inflight
        total_shares = sum(shares for shares, _, _ in _LEVELS.values())
        self.levels = {
            name: Level(name, shares, response, math.ceil(server_limit * shares / total_shares))
            for name, (shares, _, response) in _LEVELS.items()
        }
        self.schemas = sorted(
            (
                Schema(name, level, prec, method, [_rule_of(subjects, rr, nr)])
                for name, level, prec, method, subjects, rr, nr in _SCHEMAS
            ),
            key=lambda s: (s.precedence, s.name),
        )
        self._by_name = {s.name: s for s in self.schemas}
        self._cache: dict[tuple, Schema] = {}
        self._metrics: dict[tuple[str, str], _FlowMetrics] = {}

    # -------------------------------------------------------------- configuration objects

    def install(self, store: Any) -> None:
        """Create the bootstrap objects in ``store`` and take the response headers from their UIDs."""
        from tfjob_sim.store import rfc3339

        for obj in priority_level_objects():
            stored = store.create(
                PRIORITY_LEVELS, None, obj, field_manager="api-priority-and-fairness-config-producer-v1"
            )
            self.levels[obj["metadata"]["name"]].uid = stored["metadata"]["uid"]
        for obj in flow_schema_objects(rfc3339(self.wall())):
            stored = store.create(FLOW_SCHEMAS, None, obj, field_manager="api-priority-and-fairness-config-producer-v1")
            schema = self._by_name[obj["metadata"]["name"]]
            schema.uid = stored["metadata"]["uid"]
        for schema in self.schemas:
            schema.headers = (
                (FLOW_SCHEMA_HEADER, schema.uid),
                (PRIORITY_LEVEL_HEADER, self.levels[schema.level].uid),
            )

    def headers_of(self, flow_schema: str) -> tuple[tuple[str, str], tuple[str, str]]:
        return self._by_name[flow_schema].headers

    # -------------------------------------------------------------- classification

    def classify(self, who: Requester, info: RequestInfo) -> Schema:
        key = (who, info)
        schema = self._cache.get(key)
        if schema is None:
            schema = next((s for s in self.schemas if s.matches(who, info)), self._by_name["catch-all"])
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = schema
        return schema

    @staticmethod
    def distinguisher(schema: Schema, who: Requester, info: RequestInfo) -> str:
        if schema.distinguisher == "ByUser":
            return who.name
        if schema.distinguisher == "ByNamespace":
            return info.namespace
        return ""

    # -------------------------------------------------------------- admission

    def _flow_metrics(self, schema: Schema) -> _FlowMetrics:
        key = (schema.name, schema.level)
        metrics = self._metrics.get(key)
        if metrics is None:
            metrics = self._metrics[key] = _FlowMetrics()
        return metrics

    def wait_limit(self, timeout_param: str | None) -> float:
        """How long a request may wait in a queue: a quarter of its timeout, at most a minute."""
        timeout = self.request_timeout
        if timeout_param:
            parsed = _parse_duration(timeout_param)
            if parsed is not None and parsed > 0:
                timeout = min(parsed, self.request_timeout)
        return min(timeout / 4.0, _MAX_WAIT)

    async def admit(self, schema: Schema, who: Requester, info: RequestInfo, wait_limit: float) -> Seat:
        """A seat for the request, at once or after queuing; raises the 429 :class:`ApiError` otherwise."""
        level = self.levels[schema.level]
        metrics = self._flow_metrics(schema)
        if level.exempt:
            level.executing += 1
            metrics.executing += 1
            metrics.dispatched += 1
            metrics.observe_wait(0.0, True)
            return Seat(level, metrics)
        if level.executing < level.limit and not level.queues:
            level.executing += 1
            metrics.executing += 1
            metrics.dispatched += 1
            metrics.observe_wait(0.0, True)
            return Seat(level, metrics)
        if level.reject:
            raise self._reject(level, metrics, "concurrency-limit", 0.0)
        flow = (schema.name, self.distinguisher(schema, who, info))
        queue = level.queues.get(flow)
        if (queue is not None and len(queue) >= level.flow_capacity) or level.waiting >= level.level_capacity:
            raise self._reject(level, metrics, "queue-full", 0.0)
        if queue is None:
            queue = level.queues[flow] = deque()
        waiter = _Waiter(asyncio.get_running_loop().create_future(), flow)
        queue.append(waiter)
        level.waiting += 1
        metrics.inqueue += 1
        started = self.clock()
        try:
            try:
                async with asyncio.timeout(wait_limit):
                    await asyncio.shield(waiter.future)
            except TimeoutError:
                if not waiter.future.done():
                    self._unqueue(level, waiter)
                    raise self._reject(level, metrics, "time-out", self.clock() - started) from None
            except asyncio.CancelledError:
                if waiter.future.done():  # dispatched as the client went away: give the seat back
                    level.executing -= 1
                    level.dispatch()
                else:
                    self._unqueue(level, waiter)
                metrics.rejected["cancelled"] = metrics.rejected.get("cancelled", 0) + 1
                metrics.observe_wait(self.clock() - started, False)
                raise
        finally:
            metrics.inqueue -= 1
        metrics.executing += 1
        metrics.dispatched += 1
        metrics.observe_wait(self.clock() - started, True)
        return Seat(level, metrics)

    @staticmethod
    def _unqueue(level: Level, waiter: _Waiter) -> None:
        waiter.future.cancel()
        queue = level.queues.get(waiter.flow)
        if queue is not None:
            try:
                queue.remove(waiter)
            except ValueError:
                return
            level.waiting -= 1
            if not queue:
                del level.queues[waiter.flow]

    def _reject(self, level: Level, metrics: _FlowMetrics, reason: str, waited: float) -> ApiError:
        metrics.rejected[reason] = metrics.rejected.get(reason, 0) + 1
        metrics.observe_wait(waited, False)
        tracker = level.retry_after
        tracker.record(int(self.wall()))
        return ApiError(429, "", TOO_MANY, plain_text=True, retry_after=tracker.value)

    # -------------------------------------------------------------- metrics

    def metrics_text(self) -> str:
        """The ``apiserver_flowcontrol_*`` series in the Prometheus text format."""
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        items = sorted(self._metrics.items())
        for name, kind, help_text, value in _PER_FLOW_SERIES:
            family(name, kind, help_text)
            for (fs, pl), m in items:
                lines.append(f'{name}{{flow_schema="{fs}",priority_level="{pl}"}} {value(m)}')
        family(
            "apiserver_flowcontrol_rejected_requests_total",
            "counter",
            "Number of requests rejected by API Priority and Fairness subsystem",
        )
        for (fs, pl), m in items:
            for reason, count in sorted(m.rejected.items()):
                lines.append(
                    f'apiserver_flowcontrol_rejected_requests_total{{flow_schema="{fs}",priority_level="{pl}",'
                    f'reason="{reason}"}} {count}'
                )
        name = "apiserver_flowcontrol_request_wait_duration_seconds"
        family(name, "histogram", "Length of time a request spent waiting in its queue")
        for (fs, pl), m in items:
            for execute, (buckets, total, count) in sorted(m.waits.items()):
                labels = f'execute="{execute}",flow_schema="{fs}",priority_level="{pl}"'
                running = 0
                for bound, n in zip(WAIT_BUCKETS, buckets, strict=True):
                    running += n
                    lines.append(f'{name}_bucket{{{labels},le="{_number(bound)}"}} {running}')
                lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {count}')
                lines.append(f"{name}_sum{{{labels}}} {total!r}")
                lines.append(f"{name}_count{{{labels}}} {count}")
        family(
            "apiserver_flowcontrol_nominal_limit_seats",
            "gauge",
            "Nominal number of execution seats configured for each priority level",
        )
        for level in sorted(self.levels.values(), key=lambda lv: lv.name):
            lines.append(
                f'apiserver_flowcontrol_nominal_limit_seats{{priority_level="{level.name}"}} {0 if level.exempt else level.limit}'
            )
        return "\n".join(lines) + "\n"


def _rule_of(subjects: list[dict], resource_rules: list[dict], non_resource_rules: list[dict]) -> dict:
    return {"subjects": subjects, "resourceRules": resource_rules, "nonResourceRules": non_resource_rules}


def _number(value: float) -> str:
    return repr(float(value))


def _parse_duration(text: str) -> float | None:
    """A Go duration (``30s``, ``1m``, ``1m30s``, ``500ms``), as the ``timeout`` query parameter takes."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total, number, i = 0.0, "", 0
    if not text:
        return None
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = text[i : i + 2] if text[i : i + 2] in units else ch
        if unit not in units or not number:
            return None
        try:
            total += float(number) * units[unit]
        except ValueError:
            return None
        number = ""
        i += len(unit)
    return None if number else total


class MaxInFlight:
    """kube-apiserver's max-in-flight filter, used when APF is off (see the module docstring)."""

    def __init__(self, max_requests_inflight: int = 400, max_mutating_requests_inflight: int = 200) -> None:
        self.limits = {False: max_requests_inflight, True: max_mutating_requests_inflight}
        self.inflight = {False: 0, True: 0}

    def admit(self, mutating: bool) -> Seat | None:
        limit = self.limits[mutating]
        if limit <= 0:  # 0: no limit, as kube-apiserver reads it
            return None
        if self.inflight[mutating] >= limit:
            raise ApiError(429, "", TOO_MANY, plain_text=True, retry_after=1)
        self.inflight[mutating] += 1
        return _InFlightSeat(self, mutating)

    def metrics_text(self) -> str:
        return (
            "# HELP apiserver_current_inflight_requests Maximal number of currently used inflight request limit "
            "of this apiserver per request kind in last second.\n"
            "# TYPE apiserver_current_inflight_requests gauge\n"
            f'apiserver_current_inflight_requests{{request_kind="mutating"}} {self.inflight[True]}\n'
            f'apiserver_current_inflight_requests{{request_kind="readOnly"}} {self.inflight[False]}\n'
        )


class _InFlightSeat(Seat):
    __slots__ = ("owner", "mutating")

    def __init__(self, owner: MaxInFlight, mutating: bool) -> None:
        super().__init__(None, None)
        self.owner = owner
        self.mutating = mutating

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.owner.inflight[self.mutating] -= 1


def is_mutating(verb: str, method: str) -> bool:
    if verb:
        return verb in _MUTATING
    return method not in _READ_ONLY_METHODS
