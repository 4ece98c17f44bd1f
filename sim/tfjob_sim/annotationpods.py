"""The kubelet's pod lifecycle when containers are simulated and steered by annotations (the default
``KubeletConfig(runtime="annotations")``).

Why a module of its own: nothing really runs, KWOK-style; what a container does is read from the pod's
annotations (the table in tfjob_sim.kubelet), so tests and ``kubectl annotate`` can steer it. Every
container of a pod follows the same annotations, so one state per pod (:class:`~tfjob_sim.podstate._PodRecord`)
is enough. It is the counterpart of the process runtime's pod lifecycle (tfjob_sim.process.pods) and
uses the same parts of the kubelet (:class:`AgentPart`).

Contract (called by :class:`tfjob_sim.kubelet.NodeAgent` only, from the worker):
- :meth:`AnnotationPods.sync` runs a pod bound to a Ready node one step: admission (image pull, the
  start delay), starts, exits, restarts with CrashLoopBackOff, the eviction annotation, graceful
  deletion (preStop sleep, SIGTERM, SIGKILL at the end of the grace period); it writes the status and
  returns when to look again.
- :meth:`AnnotationPods.render_containers` gives the phase, readiness and container statuses that the
  kubelet's status carries.
- Bad annotation values are logged once per value and ignored.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import structlog

from tfjob_sim.events import EventRecorder
from tfjob_sim.logs import LOG_INTERVAL_SECONDS, LogSource, Source, render_lines
from tfjob_sim.podstate import (
    ANNOTATION_PREFIX,
    BACKOFF,
    BACKOFF_INITIAL_SECONDS,
    BACKOFF_MAX_SECONDS,
    BOUND,
    CREATING,
    EVICT,
    EVICTED,
    EXITED,
    KILLED,
    MINIMUM_GRACE_SECONDS,
    RUNNING,
    TERMINAL_PHASES,
    _containers,
    _image_id,
    _Node,
    _PodRecord,
    _Termination,
    _unknown_termination,
    backoff_at_exit,
    crash_loop_message,
    new_container_status,
    now_timestamp,
    prestop_sleep_seconds,
    restarts,
)
from tfjob_sim.podstatus import container_id, terminated

log = structlog.get_logger(__name__)

START_SECONDS = ANNOTATION_PREFIX + "start-seconds"
RUN_SECONDS = ANNOTATION_PREFIX + "run-seconds"
EXIT_CODE = ANNOTATION_PREFIX + "exit-code"
REASON = ANNOTATION_PREFIX + "reason"
SIGTERM_SECONDS = ANNOTATION_PREFIX + "sigterm-seconds"
SIGTERM_EXIT_CODE = ANNOTATION_PREFIX + "sigterm-exit-code"
IGNORE_SIGTERM = ANNOTATION_PREFIX + "ignore-sigterm"

# A process killed by SIGTERM's default action: 128 + 15 (Python's default handler is SIG_DFL).
SIGTERM_DEFAULT_EXIT_CODE = 143

# Transitions due at once that one sync runs (e.g. run-seconds=0 restarts at once).
MAX_STEPS_PER_SYNC = 16


class AgentPart(Protocol):
    """What this module uses of :class:`tfjob_sim.kubelet.NodeAgent` (which passes itself): its
    configuration, images and events, IP allocation, and its status and deletion writes. Typed here so
    that this module does not import the kubelet that imports it."""

    events: EventRecorder

    @property
    def config(self) -> Any: ...  # a KubeletConfig: time_scale and the default durations
    def allocate_ip(self, rec: _PodRecord) -> None: ...
    def _pull_images(self, pod: dict, rec: _PodRecord) -> None: ...
    def _needs_pull(self, node: str | None, container: dict) -> bool: ...
    def pulled_event(self, pod: dict, rec: _PodRecord, path: str, image: str, seconds: float | None) -> None: ...
    def _container_event(
        self, pod: dict, rec: _PodRecord, field_path: str, type_: str, reason: str, message: str
    ) -> None: ...
    def back_off_event(self, pod: dict, rec: _PodRecord, path: str, name: str) -> None: ...
    def evicted_event(self, pod: dict, rec: _PodRecord) -> None: ...
    def _render(self, pod: dict, rec: _PodRecord, node: _Node) -> dict[str, Any]: ...
    def _write_status(self, pod: dict, desired: dict[str, Any]) -> dict: ...
    def _delete_now(self, pod: dict) -> None: ...


class _AnnotationError(ValueError):
    pass


def parse_seconds(raw: str | None, name: str) -> float | None:
    """A duration annotation: None when absent; raises ValueError unless a finite number >= 0."""
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise _AnnotationError(f"{name}: {raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise _AnnotationError(f"{name}: {raw!r} must be a finite number >= 0")
    return value


def parse_exit_code(raw: str | None, name: str = EXIT_CODE) -> int | None:
    """An exit-code annotation: None when absent; raises ValueError unless an integer in 0..255."""
    if raw is None:
        return None
    try:
        code = int(raw.strip())
    except ValueError:
        raise _AnnotationError(f"{name}: {raw!r} is not an integer") from None
    if not 0 <= code <= 255:
        raise _AnnotationError(f"{name}: {raw!r} must be between 0 and 255")
    return code


def default_reason(code: int) -> str:
    """The terminated reason of an exit without a reason annotation."""
    if code == 0:
        return "Completed"
    if code == 137:
        return "OOMKilled"
    return "Error"


def _wall(monotonic: float) -> float:
    """Wall-clock time of a moment on the event loop's (monotonic) clock."""
    return time.time() - (anyio.current_time() - monotonic)


def end_logs(rec: _PodRecord, stopped: float) -> None:
    """The pod's current instances stopped printing (exit, kill, eviction, or the pod is gone) at the
    (simulated, monotonic) moment ``stopped``, however late the worker got to it."""
    if not rec.logs:
        return
    when = _wall(stopped)
    for source in rec.logs.values():
        if source.finished is None:
            source.end(when)


def _exited_now(rec: _PodRecord, code: int, reason: str) -> _Termination:
    """The terminated state of the record's present instance, exiting now."""
    return _Termination(
        exit_code=code,
        reason=reason,
        started_at=rec.instance_started_at,
        finished_at=now_timestamp(),
        instance=rec.restart_count,
    )


@dataclass(frozen=True)
class Rendered:
    """The annotation runtime's containers as the status reports them (see podstatus.ContainersView)."""

    phase: str
    ready: bool
    statuses: list[dict]
    init_statuses: list[dict]
    initialized: bool


class AnnotationPods:
    """The annotation-driven state machine of the pods of the simulated nodes."""

    def __init__(self, agent: AgentPart) -> None:
        self.agent = agent
        self.config = agent.config
        self._scale = agent.config.time_scale

    # ---------------------------------------------------------------- the pod worker

    def sync(self, pod: dict, rec: _PodRecord, node: _Node, now: float) -> float | None:
        """Run one pod bound to the Ready ``node`` up to ``now``, write its status; returns when to look
        again (the next start, exit or restart), or None."""
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        annotations = meta.get("annotations") or {}
        if meta.get("deletionTimestamp"):
            return self._terminate(pod, rec, node, now)
        if rec.life == BOUND:
            if status.get("phase") in TERMINAL_PHASES:
                return None  # finished before this kubelet knew it (pre-populated store)
            if status.get("phase") == "Running" and self._adopt_running(pod, rec, annotations, now):
                return rec.run_due
            rec.life = CREATING
            rec.admitted_at = now_timestamp()
            rec.creating_since = now
            self.agent._pull_images(pod, rec)
            rec.start_seen = annotations.get(START_SECONDS)
            start = self._annotation_seconds(pod, rec, START_SECONDS)
            rec.start_due = now + (self.config.default_start_seconds if start is None else start) * self._scale

        for _ in range(MAX_STEPS_PER_SYNC):
            if not self._step(pod, rec, annotations, now):
                break
        self.agent._write_status(pod, self.agent._render(pod, rec, node))
        if rec.life == CREATING:
            return rec.start_due
        if rec.life == RUNNING:
            return rec.run_due
        if rec.life == BACKOFF:
            return rec.restart_due
        return None

    def _adopt_running(self, pod: dict, rec: _PodRecord, annotations: dict, now: float) -> bool:
        """Take over a pod some earlier kubelet started (its containers keep running)."""
        status = pod.get("status") or {}
        running = [
            s
            for s in status.get("containerStatuses") or []
            if isinstance(s, dict) and ((s.get("state") or {}).get("running") or {}).get("startedAt")
        ]
        if not running:
            return False
        rec.life = RUNNING
        rec.admitted_at = status.get("startTime") or now_timestamp()
        rec.instance_started_at = running[0]["state"]["running"]["startedAt"]
        rec.restart_count = int(running[0].get("restartCount") or 0)
        rec.pod_ip = status.get("podIP") or None
        self.agent.allocate_ip(rec)
        rec.exit_acted = annotations.get(EXIT_CODE)  # values present before adoption were acted on
        rec.run_seen = annotations.get(RUN_SECONDS)
        run = self._annotation_seconds(pod, rec, RUN_SECONDS)
        rec.run_due = None if run is None else now + run * self._scale
        return True

    def _step(self, pod: dict, rec: _PodRecord, annotations: dict, now: float) -> bool:
        """One due transition of the kubelet's state machine; False when nothing is due."""
        if annotations.get(EVICT) == "true" and not rec.evict_acted and rec.life in (CREATING, RUNNING, BACKOFF):
            rec.evict_acted = True
            self._evict(pod, rec)
            return False
        if rec.life == CREATING:
            raw = annotations.get(START_SECONDS)
            if raw != rec.start_seen:
                rec.start_seen = raw
                start = self._annotation_seconds(pod, rec, START_SECONDS)
                rec.start_due = now + (self.config.default_start_seconds if start is None else start) * self._scale
            if rec.start_due is not None and now >= rec.start_due:
                self._start_instance(pod, rec, annotations, now, restart=False)
                return True
            return False
        if rec.life == RUNNING:
            code = self._exit_due(pod, rec, annotations, now)
            if code is None:
                return False
            self._exit_instance(pod, rec, annotations, code, now)
            return True
        if rec.life == BACKOFF and rec.restart_due is not None and now >= rec.restart_due:
            # flowcontrol.Backoff.Next at restart: double (capped), unless the entry expired.
            rec.backoff = min((rec.backoff or BACKOFF_INITIAL_SECONDS) * 2, BACKOFF_MAX_SECONDS)
            rec.backoff_updated = now
            self._start_instance(pod, rec, annotations, now, restart=True)
            return True
        return False

    def _exit_due(self, pod: dict, rec: _PodRecord, annotations: dict, now: float) -> int | None:
        """The exit code if the running instance exits now (run-seconds elapsed, or a new exit-code
        value on a pod without run-seconds), else None. Records the annotation values acted on."""
        raw_run = annotations.get(RUN_SECONDS)
        if raw_run != rec.run_seen:  # a new value on a live pod counts from now
            rec.run_seen = raw_run
            run = self._annotation_seconds(pod, rec, RUN_SECONDS)
            rec.run_due = None if run is None else now + run * self._scale
        raw_exit = annotations.get(EXIT_CODE)
        if rec.run_due is None:
            if raw_exit is None or raw_exit == rec.exit_acted:
                return None
            rec.exit_acted = raw_exit
            return self._annotation_exit_code(pod, rec)
        if now < rec.run_due:
            return None
        rec.exit_acted = raw_exit
        code = self._annotation_exit_code(pod, rec)
        return 0 if code is None else code

    def _start_instance(self, pod: dict, rec: _PodRecord, annotations: dict, now: float, restart: bool) -> None:
        self._container_start_events(pod, rec, restart)
        if restart:
            rec.previous = rec.current
            rec.restart_count += 1
        rec.current = None
        rec.restart_due = None
        rec.life = RUNNING
        rec.instance_started_at = now_timestamp()
        self._open_logs(pod, rec, restart, now)
        rec.run_seen = annotations.get(RUN_SECONDS)
        run = self._annotation_seconds(pod, rec, RUN_SECONDS)
        rec.run_due = None if run is None else now + run * self._scale
        self.agent.allocate_ip(rec)

    def _exit_instance(self, pod: dict, rec: _PodRecord, annotations: dict, code: int, now: float) -> None:
        reason = annotations.get(REASON) or default_reason(code)
        rec.current = _exited_now(rec, code, reason)
        end_logs(rec, rec.run_due if rec.run_due is not None and rec.run_due <= now else now)
        rec.run_due = None
        if not restarts(pod, code):
            rec.life = EXITED
            return
        rec.backoff, rec.backoff_updated, delay = backoff_at_exit(rec.backoff, rec.backoff_updated, now, self._scale)
        if delay is None:
            self._start_instance(pod, rec, annotations, now, restart=True)
            return
        rec.life = BACKOFF
        rec.restart_due = now + delay
        for path, container in _containers(pod, init=False):
            self.agent.back_off_event(pod, rec, path, container.get("name", ""))

    def _evict(self, pod: dict, rec: _PodRecord) -> None:
        """Node-pressure eviction. The kubelet kills the containers and removes them, so their final
        state is the status manager's "could not be located" default (exit 137)."""
        self.agent.evicted_event(pod, rec)
        if rec.life == RUNNING:
            self._killing_events(pod, rec)
        if rec.life == BACKOFF and rec.current is not None:
            rec.previous = rec.current
        rec.life = EVICTED
        end_logs(rec, anyio.current_time())
        rec.run_due = rec.restart_due = rec.start_due = None
        rec.current = _unknown_termination(rec.restart_count)

    def _terminate(self, pod: dict, rec: _PodRecord, node: _Node, now: float) -> float | None:
        """Graceful deletion as the kubelet's killContainer does it, then the final status and DELETE
        with grace 0 and a uid precondition.

        Stopping starts when the kubelet first sees the deletion: preStop ``sleep`` hooks run inside
        the grace budget, then SIGTERM; the process exits ``sigterm-seconds`` later (143, or
        ``sigterm-exit-code``) unless it exits by itself first or ignores SIGTERM, in which case the
        runtime sends SIGKILL (137) when the remaining grace, at least 2 s, has passed.
        """
        if rec.delete_sent:
            return None
        agent = self.agent
        meta = pod["metadata"]
        grace = max(0, meta.get("deletionGracePeriodSeconds") or 0)
        if rec.life == RUNNING:
            annotations = meta.get("annotations") or {}
            spec = pod.get("spec") or {}
            if rec.stop_started is None:
                rec.stop_started = now
                self._killing_events(pod, rec)
                rec.sigterm_due = now + min(prestop_sleep_seconds(spec), grace) * self._scale
                if annotations.get(IGNORE_SIGTERM) != "true":
                    delay = self._annotation_seconds(pod, rec, SIGTERM_SECONDS)
                    if delay is None:
                        delay = self.config.default_sigterm_seconds
                    rec.sigterm_exit_due = rec.sigterm_due + delay * self._scale
            # A shorter grace period from a second DELETE moves SIGKILL earlier, never later.
            prestop = (rec.sigterm_due - rec.stop_started) / self._scale if rec.sigterm_due is not None else 0.0
            deadline = rec.stop_started + (prestop + max(grace - prestop, MINIMUM_GRACE_SECONDS)) * self._scale
            if rec.kill_due is None or deadline < rec.kill_due:
                rec.kill_due = deadline
            natural = self._exit_due(pod, rec, annotations, now)  # exits by itself during the grace period
            exits = []
            if natural is not None:
                exits.append(
                    (
                        rec.run_due if rec.run_due is not None else now,
                        natural,
                        annotations.get(REASON) or default_reason(natural),
                    )
                )
            if rec.sigterm_exit_due is not None and now >= rec.sigterm_exit_due:
                code = self._sigterm_exit_code(pod, rec)
                exits.append((rec.sigterm_exit_due, code, "Completed" if code == 0 else "Error"))
            if now >= rec.kill_due:
                exits.append((rec.kill_due, 137, "Error"))  # SIGKILL at the end of the grace period
            if not exits:
                agent._write_status(pod, agent._render(pod, rec, node))
                return min(due for due in (rec.kill_due, rec.run_due, rec.sigterm_exit_due) if due is not None)
            when, code, reason = min(exits, key=lambda e: e[0])
            rec.current = _exited_now(rec, code, reason)
            rec.life = KILLED
            end_logs(rec, when)
        elif rec.life in (BOUND, CREATING, BACKOFF):
            if rec.current is None:
                rec.current = _unknown_termination(rec.restart_count)
            rec.life = KILLED
        rec.run_due = rec.restart_due = rec.start_due = None
        if rec.admitted_at is not None:
            pod = agent._write_status(pod, agent._render(pod, rec, node))
        rec.delete_sent = True
        agent._delete_now(pod)
        return None

    def _sigterm_exit_code(self, pod: dict, rec: _PodRecord) -> int:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(SIGTERM_EXIT_CODE)
        try:
            code = parse_exit_code(raw, SIGTERM_EXIT_CODE)
        except _AnnotationError as exc:
            self._warn_annotation(rec, f"{SIGTERM_EXIT_CODE}={raw}", str(exc))
            code = None
        return SIGTERM_DEFAULT_EXIT_CODE if code is None else code

    # ---------------------------------------------------------------- container output

    def _open_logs(self, pod: dict, rec: _PodRecord, restart: bool, started: float) -> None:
        """A new instance starts printing; keep the previous instance's output, forget older ones
        (and a finished init container's, which the kubelet keeps while the pod exists)."""
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name", "")
        interval = (self._annotation_seconds(pod, rec, LOG_INTERVAL_SECONDS) or 0.0) * self._scale
        now = _wall(started)
        old = rec.logs or {}
        logs: dict[str, Source] = {}
        spec = pod.get("spec") or {}
        for c in spec.get("initContainers") or []:
            if not isinstance(c, dict):
                continue
            cid = container_id(rec, "init-" + c.get("name", ""), 0)
            kept = old.get(cid)
            if kept is None:
                kept = LogSource(cid, render_lines(annotations, namespace, name, c.get("name", ""), 0), now, 0.0)
                kept.end(now)
            logs[cid] = kept
        for c in spec.get("containers") or []:
            if not isinstance(c, dict):
                continue
            cname = c.get("name", "")
            if rec.previous is not None:
                previous = old.get(container_id(rec, cname, rec.previous.instance))
                if previous is not None:
                    logs[previous.container_id] = previous
            cid = container_id(rec, cname, rec.restart_count)
            logs[cid] = LogSource(
                cid, render_lines(annotations, namespace, name, cname, rec.restart_count), now, interval
            )
        rec.logs = logs

    # ---------------------------------------------------------------- events

    def _container_start_events(self, pod: dict, rec: _PodRecord, restart: bool) -> None:
        """What the kubelet reports for each container it starts now, in start order (init containers
        first, only on the first start): the image (pulled or present), Created, Started. Only the
        first container's pull takes time (the start delay); later pulls are instant."""
        agent = self.agent
        waited = 0.0
        if not restart and rec.creating_since is not None and rec.start_due is not None:
            waited = max(0.0, rec.start_due - rec.creating_since) / self._scale
        for path, container in _containers(pod, init=not restart):
            image = container.get("image", "")
            name = container.get("name", "")
            seconds = waited if path == rec.pulling else 0.0
            if path != rec.pulling and agent._needs_pull(rec.node, container):
                agent._container_event(pod, rec, path, "Normal", "Pulling", f'Pulling image "{image}"')
                rec.pulling = path
            agent.pulled_event(pod, rec, path, image, seconds if path == rec.pulling else None)
            agent._container_event(pod, rec, path, "Normal", "Created", f"Created container: {name}")
            agent._container_event(pod, rec, path, "Normal", "Started", f"Started container {name}")
        rec.pulling = None

    def _killing_events(self, pod: dict, rec: _PodRecord) -> None:
        for path, container in _containers(pod, init=False):
            self.agent._container_event(
                pod, rec, path, "Normal", "Killing", f"Stopping container {container.get('name', '')}"
            )

    # ---------------------------------------------------------------- annotation parsing

    def _annotation_seconds(self, pod: dict, rec: _PodRecord, key: str) -> float | None:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
        try:
            return parse_seconds(raw, key)
        except _AnnotationError as exc:
            self._warn_annotation(rec, f"{key}={raw}", str(exc))
            return None

    def _annotation_exit_code(self, pod: dict, rec: _PodRecord) -> int | None:
        raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXIT_CODE)
        try:
            return parse_exit_code(raw)
        except _AnnotationError as exc:
            self._warn_annotation(rec, f"{EXIT_CODE}={raw}", str(exc))
            return None

    def _warn_annotation(self, rec: _PodRecord, key: str, message: str) -> None:
        if rec.bad_annotations is None:
            rec.bad_annotations = set()
        if key not in rec.bad_annotations:
            rec.bad_annotations.add(key)
            log.warning("ignoring invalid simulation annotation", pod=f"{rec.namespace}/{rec.name}", error=message)

    # ---------------------------------------------------------------- status

    def render_containers(self, pod: dict, rec: _PodRecord) -> Rendered:
        """Phase, readiness and container statuses: every container follows the pod's one state."""
        spec = pod.get("spec") or {}
        containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
        inits = [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
        life = rec.life
        if life in (EXITED, KILLED):
            phase = "Succeeded" if rec.current is not None and rec.current.exit_code == 0 else "Failed"
        elif life == EVICTED:
            phase = "Failed"
        elif life in (RUNNING, BACKOFF):
            phase = "Running"
        else:
            phase = "Pending"
        return Rendered(
            phase=phase,
            ready=life == RUNNING,
            statuses=sorted((self._container_status(pod, rec, c) for c in containers), key=lambda s: s["name"]),
            init_statuses=[self._init_status(rec, c) for c in inits],
            initialized=life != CREATING or not inits,
        )

    def _container_status(self, pod: dict, rec: _PodRecord, container: dict) -> dict[str, Any]:
        name = container.get("name", "")
        image = container.get("image", "")
        life = rec.life
        out = new_container_status(name, image, rec.restart_count)
        if rec.previous is not None:
            out["lastState"] = {"terminated": terminated(rec, name, rec.previous)}
        if rec.instance_started_at is not None:
            out["imageID"] = _image_id(image)
        if life == RUNNING:
            out.update(
                containerID=container_id(rec, name, rec.restart_count),
                ready=True,
                started=True,
                state={"running": {"startedAt": rec.instance_started_at}},
            )
        elif life == BACKOFF and rec.current is not None:
            message = crash_loop_message(pod, rec.uid, name, rec.backoff)
            out.update(
                containerID=container_id(rec, name, rec.current.instance),
                state={"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                lastState={"terminated": terminated(rec, name, rec.current)},
            )
        elif life in (EXITED, KILLED, EVICTED) and rec.current is not None:
            if rec.current.started_at is not None:
                out["containerID"] = container_id(rec, name, rec.current.instance)
            out["state"] = {"terminated": terminated(rec, name, rec.current)}
        else:
            out["state"] = {"waiting": {"reason": "ContainerCreating"}}
        return out

    def _init_status(self, rec: _PodRecord, container: dict) -> dict[str, Any]:
        name = container.get("name", "")
        image = container.get("image", "")
        out = new_container_status(name, image, 0)
        if rec.life == CREATING:
            out["state"] = {"waiting": {"reason": "PodInitializing"}}
        else:
            out["imageID"] = _image_id(image)
            out["containerID"] = container_id(rec, "init-" + name, 0)
            out["state"] = {
                "terminated": {
                    "containerID": out["containerID"],
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": rec.admitted_at,
                    "finishedAt": rec.admitted_at,
                }
            }
        return out
