"""A perturbing proxy between controller processes and the simulated API server.

Why a proxy: the seeded soak draws faults at random and will not reach the one write after which a crash
matters, nor the one stale list a new leader acts on. Everything a controller does goes through the API,
so a proxy in front of the simulator sees every write and every read and can perturb exactly one of them,
without touching the controller or the simulator.

Each controller process gets its own :class:`Endpoint`: a listener on 127.0.0.1 with a kubeconfig pointing
at it (plain HTTP, the simulator's default mode). Every request is forwarded to the simulator as it came
(watches streamed line by line) and logged, and each endpoint can be told to perturb what it forwards:

* **crash after write k** (:meth:`Endpoint.crash_after`): the controller's *state writes* (POST, PUT, PATCH
  and DELETE, status and eviction subresources included; Leases and Events excepted, see
  :func:`is_state_write`) are counted from the moment the rule is armed; when the k-th has been answered
  by the simulator with a success, i.e. committed, the endpoint is frozen (nothing more is forwarded or
  answered) and the kill callback SIGKILLs the process before it sees that answer. Writes that were
  already in flight on other connections complete at the simulator, as they would on a real server.
* **stale first lists** (:meth:`Endpoint.stale_first_lists`): the endpoint's first LIST of each chosen
  resource is answered with the state of an earlier resourceVersion (a list at that RV with
  ``resourceVersionMatch=Exact``, which the simulator rebuilds from its change history), as a watch
  cache that lags behind serves a ``resourceVersion=0`` read; the controller's watch then starts from
  that older RV and the simulator replays every change since, as kube-apiserver's watch cache does
  within its window (``StoreConfig.history_max_events`` / ``history_max_age``: 50,000 events, 300 s; an
  RV older than that is a 410 and a relist). The replay can be held back for a while, so the controller
  acts on the stale view before it catches up.
* **coalesced watch events** (:meth:`Endpoint.coalesce`): events are gathered for a window and only
  the latest version of each object is passed on (an object created and deleted within one window is
  never seen at all), as a controller that relists instead of watching would see the cluster.
* **410 Gone** (:meth:`Endpoint.expire_watches`, or after write k with :meth:`Endpoint.expire_after`):
  the endpoint's open watches end with an ``ERROR`` event carrying a ``410 Expired`` Status, which forces
  the controller to relist; the events not yet passed on are dropped, so the states between the last
  event it saw and its relist go unobserved.

The proxy is an asyncio server in the caller's event loop; :class:`PerturbingProxy` owns one client
session to the simulator and every endpoint's listener, and closes them all in :meth:`PerturbingProxy.stop`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import yaml
from aiohttp import web

from tfjob_sim.cluster import kubeconfig_document

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Headers that describe one hop, not the message: never forwarded either way.
HOP_HEADERS = frozenset(
    {
        "host",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "content-length",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
        "accept-encoding",
        "content-encoding",
    }
)
# Resources whose writes are not crash points: a Lease renewal comes on a timer and an Event write whenever
# the recorder gets to it, so neither has a place in the order of a controller's decisions, and neither
# changes what the controller decides next.
NOT_STATE = frozenset({"leases", "events"})


@dataclass(frozen=True)
class Target:
    """What a request path names: ``resource`` is the plural (``pods``, ``tfjobs``), ``group`` its API group
    (``""`` for the core group), ``subresource`` e.g. ``status`` or ``eviction``."""

    group: str
    resource: str
    namespace: str | None
    name: str | None
    subresource: str | None

    @property
    def qualified(self) -> str:
        """``pods``, ``tfjobs.kubeflow.org``: the simulator's name of the resource."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def label(self) -> str:
        return self.qualified + (f"/{self.subresource}" if self.subresource else "")


def parse_target(path: str) -> Target | None:
    """The resource a Kubernetes API path names; None for discovery, ``/version`` and the like."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[:1] == ["watch"]:
        rest = rest[1:]
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    elif len(rest) == 2 and rest[0] == "namespaces":
        return Target(group, "namespaces", None, rest[1], None)
    if not rest:
        return None
    return Target(group, rest[0], namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)


def is_watch(path: str, query: dict[str, str]) -> bool:
    return query.get("watch") in ("true", "1", "True") or "/watch/" in path


def is_state_write(method: str, target: Target | None) -> bool:
    """A write that changes the cluster state a controller decides on: every POST/PUT/PATCH/DELETE of a resource
    (subresources included) except Leases and Events."""
    return method in WRITE_METHODS and target is not None and target.resource not in NOT_STATE


@dataclass
class Record:
    """One request an endpoint forwarded (or held), in the order the simulator answered."""

    seq: int
    endpoint: str
    method: str
    path: str
    query: str
    target: str  # Target.label, "" for non-resource paths
    name: str
    code: int  # 0: never answered to the controller (the endpoint was frozen, or it went away)
    state_write: bool
    committed: bool  # a state write the simulator answered with 2xx
    started: float
    finished: float
    reason: str = ""  # an Event create's reason
    message: str = ""  # an Event create's message
    created: str = ""  # a create's object name (from the body: the path of a POST names the collection)
    note: str = ""  # what the proxy did to it (stale, crash, ...)

    def __str__(self) -> str:
        name = f" {self.name or self.created}" if self.name or self.created else ""
        return f"{self.method} {self.target or self.path}{name} -> {self.code}{' ' + self.note if self.note else ''}"


@dataclass
class CrashRule:
    after: int
    kill: Callable[[], Awaitable[None]]
    match: Callable[[Record], bool] | None = None  # count only the writes it accepts (None: all)
    counted: int = 0
    fired: Record | None = None  # the write after which the process was killed
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once the kill callback has returned


@dataclass
class StaleRule:
    """Serve the first LIST of each resource in ``at_rv`` (qualified resource -> RV) at that RV, then hold the
    events of the watches of those resources until ``hold_seconds`` after that list was served."""

    at_rv: dict[str, int]
    hold_seconds: float
    served: dict[str, int] = field(default_factory=dict)  # resource -> the RV its first list was served at
    hold_until: dict[str, float] = field(default_factory=dict)


@dataclass
class ExpireRule:
    after: int
    counted: int = 0
    fired: bool = False


class _Watch:
    """One open watch through an endpoint: its target and how to end it with a 410."""

    def __init__(self, target: Target | None) -> None:
        self.target = target
        self.expire = asyncio.Event()
        self.flush = asyncio.Event()


class Endpoint:
    """One controller process's way to the simulator. See the module docstring."""

    def __init__(self, proxy: PerturbingProxy, label: str) -> None:
        self.proxy = proxy
        self.label = label
        self.port = 0
        self.url = ""
        self.kubeconfig = Path()
        self._runner: web.AppRunner | None = None
        self.crash: CrashRule | None = None
        self.stale: StaleRule | None = None
        self.expire_rule: ExpireRule | None = None
        self.coalesce_window: float | None = None
        self.frozen = False
        self.watches: set[_Watch] = set()
        self.in_flight = 0  # non-watch requests being forwarded
        self.expired_watches = 0
        self.gathered = 0  # watch events folded into a coalescing window so far

    # --- rules -------------------------------------------------------------------------------------
    def crash_after(
        self, k: int, kill: Callable[[], Awaitable[None]], match: Callable[[Record], bool] | None = None
    ) -> CrashRule:
        """Count state writes from now (those ``match`` accepts, if given); after the k-th is committed, freeze and
        ``kill`` (SIGKILL the process)."""
        if k < 1:
            raise ValueError("k counts from 1")
        self.crash = CrashRule(k, kill, match)
        return self.crash

    def stale_first_lists(self, at_rv: dict[str, int], hold_seconds: float = 0.0) -> StaleRule:
        """Answer the first LIST of each resource of ``at_rv`` at its RV (see the module docstring)."""
        self.stale = StaleRule(dict(at_rv), hold_seconds)
        return self.stale

    def coalesce(self, window: float | None) -> None:
        """Pass on watch events once per ``window`` seconds, only the latest of each object (None: off;
        ``math.inf``: only when :meth:`flush` is called)."""
        self.coalesce_window = window

    def flush(self) -> None:
        """Pass on what the coalescing watches gathered, now."""
        for w in list(self.watches):
            w.flush.set()

    def expire_watches(self, resource: str | None = None) -> int:
        """End the open watches (of ``resource``, a qualified name, or all) with a 410 ERROR event now."""
        count = 0
        for w in list(self.watches):
            if resource is None or (w.target is not None and w.target.qualified == resource):
                w.expire.set()
                count += 1
        self.expired_watches += count
        return count

    def expire_after(self, k: int) -> ExpireRule:
        """After the k-th state write from now is committed, end every open watch with a 410."""
        self.expire_rule = ExpireRule(k)
        return self.expire_rule

    # --- serving -------------------------------------------------------------------------------------
    async def start(self) -> None:
        # handler_cancellation: a request held for a frozen endpoint ends when its (killed) client's connection does.
        server = web.Server(self._handle, handler_cancellation=True)
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        site = web.SockSite(self._runner, sock)
        await site.start()
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = self.proxy.workdir / f"kubeconfig-{self.label}"
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig_document(self.url, name=f"proxy-{self.label}")))

    async def stop(self) -> None:
        self.frozen = True
        for w in list(self.watches):
            w.expire.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if self.frozen:
            await _forever()
        query = dict(request.query)
        target = parse_target(request.path)
        if is_watch(request.path, query):
            return await self._watch(request, query, target)
        self.in_flight += 1
        try:
            return await self._forward(request, query, target)
        finally:
            self.in_flight -= 1

    async def _forward(self, request: web.BaseRequest, query: dict[str, str], target: Target | None) -> web.Response:
        proxy = self.proxy
        body = await request.read() if request.can_read_body else None
        note = ""
        list_target = request.method == "GET" and target is not None and target.name is None and "continue" not in query
        if list_target and target is not None and self.stale is not None:
            rv = self.stale.at_rv.get(target.qualified)
            if rv is not None and target.qualified not in self.stale.served:
                query = {k: v for k, v in query.items() if k not in ("resourceVersion", "resourceVersionMatch")}
                query["resourceVersion"] = str(rv)
                query["resourceVersionMatch"] = "Exact"
                self.stale.served[target.qualified] = rv
                self.stale.hold_until[target.qualified] = time.monotonic() + self.stale.hold_seconds
                note = f"stale list at RV {rv}"
        started = time.monotonic()
        state_write = is_state_write(request.method, target)
        async with proxy.session.request(
            request.method,
            proxy.upstream + request.path + (("?" + urlencode(query)) if query else ""),
            data=body,
            headers=_forwarded_headers(request.headers),
            allow_redirects=False,
        ) as upstream:
            payload = await upstream.read()
            status = upstream.status
            headers = _forwarded_headers(upstream.headers)
        committed = state_write and 200 <= status < 300
        record = proxy._log(
            self,
            request,
            target,
            status,
            state_write,
            committed,
            started,
            note,
            _body_facts(request.method, target, body),
        )
        if self.frozen:
            record.code = 0
            record.note = (record.note + " answer withheld: frozen").strip()
            await _forever()
        if committed:
            await self._after_commit(record)
        return web.Response(status=status, body=payload, headers=headers)

    async def _after_commit(self, record: Record) -> None:
        """The rules that count committed state writes; a crash never returns (the answer is withheld)."""
        rule = self.expire_rule
        if rule is not None and not rule.fired:
            rule.counted += 1
            if rule.counted == rule.after:
                rule.fired = True
                record.note = (record.note + " then every watch 410").strip()
                self.expire_watches()
        crash = self.crash
        if crash is None or crash.fired is not None or (crash.match is not None and not crash.match(record)):
            return
        crash.counted += 1
        if crash.counted != crash.after:
            return
        # Freeze first (no other handler may forward or answer from here on), then kill, and never answer. The kill
        # runs in a task of its own: the process's death closes this request's connection, which cancels this
        # handler, and must not cancel the kill half way.
        self.frozen = True
        crash.fired = record
        record.code = 0
        record.note = (record.note + " crash: SIGKILL before the answer").strip()

        async def kill() -> None:
            try:
                await crash.kill()
            finally:
                crash.done.set()

        task = asyncio.ensure_future(kill())
        self.proxy.tasks.add(task)
        task.add_done_callback(self.proxy.tasks.discard)
        await asyncio.shield(task)
        await _forever()

    async def _watch(
        self, request: web.BaseRequest, query: dict[str, str], target: Target | None
    ) -> web.StreamResponse:
        proxy = self.proxy
        watch = _Watch(target)
        self.watches.add(watch)
        hold_until = 0.0
        if target is not None and self.stale is not None:
            hold_until = self.stale.hold_until.get(target.qualified, 0.0)
        started = time.monotonic()
        proxy._log(self, request, target, 200, False, False, started, "watch")
        try:
            async with proxy.session.request(
                request.method,
                proxy.upstream + request.path + "?" + urlencode(query),
                headers=_forwarded_headers(request.headers),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
            ) as upstream:
                response = web.StreamResponse(status=upstream.status, headers=_forwarded_headers(upstream.headers))
                if upstream.status != 200:
                    body = await upstream.read()
                    return web.Response(status=upstream.status, body=body, headers=response.headers)
                response.enable_chunked_encoding()
                await response.prepare(request)
                lines: asyncio.Queue[bytes | None] = asyncio.Queue()
                reader = asyncio.get_running_loop().create_task(_pump(upstream, lines))
                try:
                    await self._stream(response, lines, watch, hold_until)
                except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                    return response  # the controller went away (stopped, killed) in the middle of a write
                finally:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await reader
                if not self.frozen:
                    with contextlib.suppress(ConnectionResetError):
                        await response.write_eof()
                return response
        finally:
            self.watches.discard(watch)

    async def _stream(
        self, response: web.StreamResponse, lines: asyncio.Queue[bytes | None], watch: _Watch, hold_until: float
    ) -> None:
        """Pass the upstream lines on (held, coalesced, or cut with a 410 as the rules say) until either side ends."""
        if hold_until > time.monotonic():
            await _wait_or_expire(hold_until, watch)  # the replay waits in the queue meanwhile
        pending: dict[str, tuple[int, bytes, str]] = {}  # coalescing: object key -> (rv, line, first type)
        order: list[str] = []
        bookmark: bytes | None = None
        window_end: float | None = None
        expire_task = asyncio.ensure_future(watch.expire.wait())
        flush_task = asyncio.ensure_future(watch.flush.wait())
        try:
            while True:
                now = time.monotonic()
                timeout = None if window_end is None or window_end == math.inf else max(0.0, window_end - now)
                get = asyncio.ensure_future(lines.get())
                done, _ = await asyncio.wait(
                    {get, expire_task, flush_task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if get not in done:
                    get.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await get
                if expire_task in done:
                    if not self.frozen:
                        await response.write(_gone_line())  # what was gathered is dropped: never observed
                    return
                line = get.result() if get in done else None
                if get in done and line is None:
                    return  # the simulator ended the watch
                if self.frozen:
                    await _forever()
                flushing = flush_task in done
                if flushing:
                    watch.flush.clear()
                    flush_task = asyncio.ensure_future(watch.flush.wait())
                if self.coalesce_window is None:
                    if pending or bookmark:  # coalescing was switched off: pass on what it gathered
                        await _flush(response, pending, order, bookmark)
                        pending, order, bookmark, window_end = {}, [], None, None
                    if line is not None:
                        await response.write(line)
                    continue
                if line is not None:
                    if window_end is None:
                        window_end = time.monotonic() + self.coalesce_window
                    bookmark = _gather(pending, order, line) or bookmark
                    self.gathered += 1
                if flushing or (window_end is not None and time.monotonic() >= window_end):
                    await _flush(response, pending, order, bookmark)
                    pending, order, bookmark, window_end = {}, [], None, None
        finally:
            expire_task.cancel()
            flush_task.cancel()


async def _pump(upstream: aiohttp.ClientResponse, lines: asyncio.Queue[bytes | None]) -> None:
    try:
        async for line in upstream.content:
            if line.strip():
                await lines.put(line if line.endswith(b"\n") else line + b"\n")
    except (aiohttp.ClientError, ConnectionError):
        pass  # the simulator went away or closed the watch: the stream ends as it ended
    finally:
        await lines.put(None)


async def _wait_or_expire(until: float, watch: _Watch) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(watch.expire.wait(), max(0.0, until - time.monotonic()))


def _gather(pending: dict[str, tuple[int, bytes, str]], order: list[str], line: bytes) -> bytes | None:
    """Fold one event line into the window; returns the line if it is a bookmark (the latest one is kept)."""
    event = orjson.loads(line)
    kind = event.get("type")
    if kind == "BOOKMARK":
        return line
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    rv = int(meta.get("resourceVersion") or 0)
    if key in pending:
        first = pending[key][2]
        order.remove(key)
    else:
        first = kind
    pending[key] = (rv, line, first)
    order.append(key)
    return None


async def _flush(
    response: web.StreamResponse, pending: dict[str, tuple[int, bytes, str]], order: list[str], bookmark: bytes | None
) -> None:
    """One line per object, the latest version, in RV order: ADDED if the window first saw it added (nothing if it
    was also deleted in the window), DELETED if it ended deleted, else MODIFIED."""
    out: list[tuple[int, bytes]] = []
    for key in order:
        rv, line, first = pending[key]
        event = orjson.loads(line)
        last = event.get("type")
        if first == "ADDED" and last == "DELETED":
            continue  # created and gone within one window: never observed
        kind = "ADDED" if first == "ADDED" else last
        if kind != last:
            line = orjson.dumps({"type": kind, "object": event.get("object")}) + b"\n"
        out.append((rv, line))
    out.sort(key=lambda item: item[0])
    for _, line in out:
        await response.write(line)
    # A bookmark older than an event just passed on would move the watcher's RV back: only a newer one goes.
    if bookmark is not None and (not out or _rv_of(bookmark) >= out[-1][0]):
        await response.write(bookmark)


def _rv_of(line: bytes) -> int:
    meta = (orjson.loads(line).get("object") or {}).get("metadata") or {}
    return int(meta.get("resourceVersion") or 0)


def _gone_line() -> bytes:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old resource version: expired by the perturbing proxy",
        "reason": "Expired",
        "code": 410,
    }
    return orjson.dumps({"type": "ERROR", "object": status}) + b"\n"


async def _forever() -> None:
    """Hold a frozen endpoint's request until its client goes away (the handler is then cancelled)."""
    await asyncio.Event().wait()


def _forwarded_headers(headers: Any) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in HOP_HEADERS}


def _body_facts(method: str, target: Target | None, body: bytes | None) -> tuple[str, str, str]:
    """(created object's name, Event reason, Event message) of a POST's body; empty strings otherwise."""
    if method != "POST" or target is None or not body:
        return "", "", ""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", "", ""
    if not isinstance(obj, dict):
        return "", "", ""
    name = str((obj.get("metadata") or {}).get("name") or "")
    if target.resource == "events":
        return name, str(obj.get("reason", "")), str(obj.get("message", ""))
    return name, "", ""


class PerturbingProxy:
    """The proxy: one client session to ``upstream`` (the simulator's URL) and any number of endpoints."""

    def __init__(self, upstream: str, workdir: Path) -> None:
        self.upstream = upstream.rstrip("/")
        self.workdir = workdir
        self.endpoints: dict[str, Endpoint] = {}
        self.records: list[Record] = []
        self.tasks: set[asyncio.Task[None]] = set()  # kills in progress
        self._session: aiohttp.ClientSession | None = None
        self._seq = 0

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "the proxy is not started"
        return self._session

    async def start(self) -> PerturbingProxy:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=120),
            auto_decompress=False,
            read_bufsize=2**22,
        )
        return self

    async def endpoint(self, label: str) -> Endpoint:
        """A new listener for one controller process, with its kubeconfig written."""
        if label in self.endpoints:
            raise ValueError(f"endpoint {label} exists")
        ep = Endpoint(self, label)
        await ep.start()
        self.endpoints[label] = ep
        return ep

    async def stop(self) -> None:
        for task in list(self.tasks):
            await task
        for ep in self.endpoints.values():
            await ep.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> PerturbingProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def mark(self) -> int:
        """A position in the log: :meth:`since` returns what came after it."""
        return len(self.records)

    def since(self, mark: int) -> list[Record]:
        return self.records[mark:]

    def _log(
        self,
        ep: Endpoint,
        request: web.BaseRequest,
        target: Target | None,
        code: int,
        state_write: bool,
        committed: bool,
        started: float,
        note: str,
        facts: tuple[str, str, str] = ("", "", ""),
    ) -> Record:
        self._seq += 1
        record = Record(
            seq=self._seq,
            endpoint=ep.label,
            method=request.method,
            path=request.path,
            query=request.query_string,
            target=target.label if target else "",
            name=(target.name or "") if target else "",
            code=code,
            state_write=state_write,
            committed=committed,
            started=started,
            finished=time.monotonic(),
            created=facts[0],
            reason=facts[1],
            message=facts[2],
            note=note,
        )
        self.records.append(record)
        return record


def state_writes(records: list[Record], *, committed: bool = True) -> list[Record]:
    """The state writes among ``records`` (only those the simulator committed, by default)."""
    return [r for r in records if r.state_write and (r.committed or not committed)]
