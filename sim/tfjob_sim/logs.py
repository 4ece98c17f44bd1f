"""Container logs of the simulated cluster: ``GET /api/v1/namespaces/{ns}/pods/{name}/log``.

Why: ``kubectl logs -f`` is the first thing a user types when a worker misbehaves, and every client
library that shows a training job's output reads this endpoint. Nothing runs in the simulator, so
each container instance prints a deterministic text that annotations steer, at times derived from
the instance's start, and the endpoint serves it with kube-apiserver's and the kubelet's rules.

Annotations (read when the instance starts; ``{pod}``, ``{namespace}``, ``{container}`` and
``{instance}`` in the text are replaced):

======================================= ============================================================
``sim.tfjob.dev/log``                   lines every container prints (default: one line saying
                                        which instance started)
``sim.tfjob.dev/log.<container>``       lines that container prints (wins over ``log``)
``sim.tfjob.dev/log-interval-seconds``  simulated seconds between lines (default 0: all at start);
                                        an instance that stops earlier never prints the rest
======================================= ============================================================

Contract:
- :class:`LogSource` is one container instance's output; the kubelet creates it when the instance
  starts, ends it when the instance stops, and keeps the current and the previous instance of each
  container (what ``--previous`` can reach), looked up by containerID.
- :func:`serve_pod_log` answers the request: the apiserver's checks (options: 422 ``PodLogOptions``;
  container name: 400; unbound pod: 204), then the kubelet's, from the pod status the kubelet wrote
  (waiting/previous/not available: 400), then ``text/plain``; ``follow`` streams until the instance
  stops (a restart is not followed into the next instance).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from tfjob_sim import errors
from tfjob_sim.query import int_param, parse_bool
from tfjob_sim.resources import forbidden, invalid_value

if TYPE_CHECKING:
    from tfjob_sim.store import Store

LOG = "sim.tfjob.dev/log"
LOG_INTERVAL_SECONDS = "sim.tfjob.dev/log-interval-seconds"
DEFAULT_LOG = "sim: container {container} of pod {namespace}/{pod} started (instance {instance})"

_WAITING_MESSAGES = {"ErrImagePull": "image can't be pulled", "ImagePullBackOff": "trying and failing to pull image"}


@dataclass(eq=False)
class LogSource:
    """What one container instance printed: line i at ``started + i * interval`` (wall seconds), up to
    when the instance stopped."""

    container_id: str
    lines: tuple[str, ...]
    started: float
    interval: float  # wall seconds between lines (already scaled)
    finished: float | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def line_time(self, index: int) -> float:
        return self.started + index * self.interval

    def printed(self, now: float) -> int:
        """How many lines exist at ``now`` (no more once the instance stopped)."""
        limit = now if self.finished is None else min(now, self.finished)
        if limit < self.started:
            return 0
        if self.interval <= 0:
            return len(self.lines)
        return min(len(self.lines), int((limit - self.started) / self.interval) + 1)

    def end(self, when: float) -> None:
        if self.finished is None:
            self.finished = when
        self.ended.set()

    def read(self, start: int, stop: int) -> list[str]:
        """Lines ``start`` to ``stop`` (exclusive), without their newlines."""
        return list(self.lines[start:stop])

    async def wait(self, sent: int) -> None:
        """Return when line ``sent`` is due or the instance stopped, whichever comes first."""
        if sent >= len(self.lines):
            await self.ended.wait()  # everything printed: the stream ends when the container stops
            return
        delay = max(0.0, self.line_time(sent) - time.time())
        try:
            await asyncio.wait_for(self.ended.wait(), delay)
        except TimeoutError:
            pass  # the next line is due


def render_lines(annotations: dict, namespace: str, pod: str, container: str, instance: int) -> tuple[str, ...]:
    """The text an instance prints, from the annotations at its start (see the module docstring)."""
    text = annotations.get(f"{LOG}.{container}")
    if text is None:
        text = annotations.get(LOG)
    if text is None:
        text = DEFAULT_LOG
    for key, value in (
        ("{pod}", pod),
        ("{namespace}", namespace),
        ("{container}", container),
        ("{instance}", str(instance)),
    ):
        text = text.replace(key, value)
    return tuple(text.splitlines())


# --------------------------------------------------------------------------------------------
# Options (PodLogOptions from the query string)


@dataclass
class LogOptions:
    container: str | None = None
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    since_seconds: int | None = None
    since_time: float | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None


def parse_options(query: Any, pod_name: str) -> LogOptions:
    """The query's PodLogOptions, validated as the pod log REST storage does (422 PodLogOptions)."""
    opts = LogOptions(
        container=query.get("container") or None,
        follow=parse_bool(query.get("follow")),
        previous=parse_bool(query.get("previous")),
        timestamps=parse_bool(query.get("timestamps")),
        since_seconds=int_param(query, "sinceSeconds"),
        tail_lines=int_param(query, "tailLines"),
        limit_bytes=int_param(query, "limitBytes"),
    )
    raw_since_time = query.get("sinceTime")
    if raw_since_time:
        try:
            opts.since_time = datetime.fromisoformat(raw_since_time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise errors.bad_request(
                f'parsing time "{raw_since_time}" as "2006-01-02T15:04:05Z07:00": cannot parse '
                f'"{raw_since_time}" as "2006"'
            ) from None
    causes = []
    if opts.tail_lines is not None and opts.tail_lines < 0:
        causes.append(invalid_value("tailLines", opts.tail_lines, "must be greater than or equal to 0"))
    if opts.limit_bytes is not None and opts.limit_bytes < 1:
        causes.append(invalid_value("limitBytes", opts.limit_bytes, "must be greater than 0"))
    if opts.since_seconds is not None and opts.since_time is not None:
        causes.append(forbidden("", "at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif opts.since_seconds is not None and opts.since_seconds < 1:
        causes.append(invalid_value("sinceSeconds", opts.since_seconds, "must be greater than 0"))
    if causes:
        raise errors.invalid("PodLogOptions", pod_name, causes)
    return opts


# --------------------------------------------------------------------------------------------
# Which container, which instance


def _container_names(spec: dict) -> list[tuple[str, str]]:
    """(name, kind) in the apiserver's VisitContainers order: init, regular, ephemeral."""
    out = []
    for key, kind in (("initContainers", "init"), ("containers", "regular"), ("ephemeralContainers", "ephemeral")):
        out += [(c.get("name", ""), kind) for c in spec.get(key) or [] if isinstance(c, dict)]
    return out


def choose_container(pod: dict, requested: str | None) -> str:
    """The apiserver's container validation (pod strategy LogLocation)."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    all_names = _container_names(spec)
    if not requested:
        regular = [n for n, kind in all_names if kind == "regular"]
        if len(regular) == 1:
            return regular[0]
        if not all_names:
            raise errors.bad_request(f"a container name must be specified for pod {name}")
        raise errors.bad_request(
            f"a container name must be specified for pod {name}, choose one of: [{' '.join(n for n, _ in all_names)}]"
        )
    if requested not in {n for n, _ in all_names}:
        raise errors.bad_request(f"container {requested} is not valid for pod {name}")
    return requested


def container_id_to_read(pod: dict, container: str, previous: bool) -> str:
    """The kubelet's validateContainerLogStatus: the containerID whose log is read, or the 400."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    pod_name = meta.get("name", "")
    found = None
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        found = next((s for s in status.get(key) or [] if isinstance(s, dict) and s.get("name") == container), None)
        if found is not None:
            break
    if found is None:
        raise errors.bad_request(f'container "{container}" in pod "{pod_name}" is not available')
    state = found.get("state") or {}
    last_terminated = (found.get("lastState") or {}).get("terminated") or {}
    if previous:
        if last_terminated.get("containerID"):
            return last_terminated["containerID"]
        raise errors.bad_request(f'previous terminated container "{container}" in pod "{pod_name}" not found')
    if (state.get("running") or {}) and found.get("containerID"):
        return found["containerID"]
    terminated = state.get("terminated")
    if terminated is not None:
        if terminated.get("containerID"):
            return terminated["containerID"]
        if last_terminated.get("containerID"):
            return last_terminated["containerID"]
        raise errors.bad_request(f'container "{container}" in pod "{pod_name}" is terminated')
    if last_terminated.get("containerID"):
        return last_terminated["containerID"]  # e.g. CrashLoopBackOff: the last run's log
    waiting = state.get("waiting")
    if waiting is not None:
        reason = waiting.get("reason") or ""
        detail = _WAITING_MESSAGES.get(reason, reason)
        raise errors.bad_request(f'container "{container}" in pod "{pod_name}" is waiting to start: {detail}')
    raise errors.bad_request(f'container "{container}" in pod "{pod_name}" is waiting to start - no logs yet')


# --------------------------------------------------------------------------------------------
# Serving


def _stamp(ts: float) -> str:
    """RFC3339Nano with a fixed 9-digit fraction, as the kubelet prefixes lines."""
    whole = int(ts)
    nanos = int(round((ts - whole) * 1e9))
    if nanos >= 1_000_000_000:
        whole, nanos = whole + 1, nanos - 1_000_000_000
    return datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


class Source(Protocol):
    """What serve_pod_log reads: a container instance's lines (LogSource, or the process runtime's
    captured output), each with the wall time it was printed."""

    container_id: str
    finished: float | None

    def end(self, when: float) -> None: ...

    def printed(self, now: float) -> int: ...

    def line_time(self, index: int) -> float: ...

    def read(self, start: int, stop: int) -> list[str]: ...

    async def wait(self, sent: int) -> None: ...


class _Writer:
    """Formats lines and enforces limitBytes (which may cut a line)."""

    def __init__(self, source: Source, opts: LogOptions) -> None:
        self.source = source
        self.opts = opts
        self.left = opts.limit_bytes

    def render(self, start: int, stop: int) -> bytes:
        out = []
        for i, text in enumerate(self.source.read(start, stop), start):
            line = text + "\n"
            if self.opts.timestamps:
                line = _stamp(self.source.line_time(i)) + " " + line
            out.append(line)
        data = "".join(out).encode()
        if self.left is not None:
            data = data[: self.left]
            self.left -= len(data)
        return data

    @property
    def exhausted(self) -> bool:
        return self.left is not None and self.left <= 0


def _first_line(source: Source, opts: LogOptions, printed: int, now: float) -> int:
    first = 0
    since = (
        opts.since_time
        if opts.since_time is not None
        else (now - opts.since_seconds if opts.since_seconds is not None else None)
    )
    if since is not None:
        while first < printed and source.line_time(first) < since:
            first += 1
    if opts.tail_lines is not None:
        first = max(first, printed - opts.tail_lines)
    return first


async def serve_pod_log(
    request: web.BaseRequest, store: Store, kubelet: Any, namespace: str, name: str
) -> web.StreamResponse:
    pod = store.get_or_404("pods", namespace, name)
    opts = parse_options(request.query, name)
    container = choose_container(pod, opts.container)
    if not (pod.get("spec") or {}).get("nodeName"):
        return web.Response(status=204)  # not bound: no kubelet to ask, nothing to read
    if kubelet is None:
        raise errors.internal("the simulated cluster runs without a kubelet: no container logs")
    container_id = container_id_to_read(pod, container, opts.previous)
    source = kubelet.log_source((pod.get("metadata") or {}).get("uid", ""), container_id)
    headers = {"Content-Type": "text/plain"}
    if source is None:  # the kubelet no longer has that container (e.g. a pod it adopted): nothing to read
        return web.Response(body=b"", headers=headers)
    now = time.time()
    printed = source.printed(now)
    writer = _Writer(source, opts)
    first = _first_line(source, opts, printed, now)
    if not opts.follow:
        return web.Response(body=writer.render(first, printed), headers=headers)

    response = web.StreamResponse(status=200, headers=headers)
    response.enable_chunked_encoding()
    await response.prepare(request)
    sent = first
    while True:
        finished = source.finished is not None  # before counting: lines printed until then are all sent
        printed = source.printed(time.time())
        if printed > sent:
            await response.write(writer.render(sent, printed))
            sent = printed
        if writer.exhausted or finished:
            break
        await source.wait(sent)
    await response.write_eof()
    return response
