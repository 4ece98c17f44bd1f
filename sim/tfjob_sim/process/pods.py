"""The kubelet's pod lifecycle when containers are real processes (``KubeletConfig(runtime="process")``).

Why a module of its own: in the annotation runtime every container of a pod follows the same
annotations, so the kubelet keeps one state per pod. Real processes exit on their own, one by one:
this module keeps a state per container and does what the kubelet's pod workers do with a real
runtime, reusing the kubelet's scheduling, events, back-off constants and status writing.

Contract (called by :class:`tfjob_sim.kubelet.Kubelet` only, from its worker; what this module uses
of the kubelet is :class:`KubeletPart`, its pod state and rules come from :mod:`tfjob_sim.podstate`):
- :meth:`ProcessPods.sync` replaces the annotation state machine for a pod bound to a Ready node:
  admission, sandbox, container starts, exits, restarts with CrashLoopBackOff, the eviction
  annotation, graceful deletion; it writes the status and returns when to look again (process
  events wake the kubelet through the runtime's ``notify``).
- :meth:`ProcessPods.render_containers` gives the phase, readiness and container statuses that
  ``Kubelet._render`` writes.
- :meth:`ProcessPods.forget` when the pod object is gone: its processes are killed, its sandbox,
  volumes, cgroups and logs removed.

Images: before a container is created, the kubelet's ``ensure_image`` reports its image present or pulled
(the local environment mapped to it comes first on PATH) or keeps the container waiting (ErrImagePull,
ImagePullBackOff, ...; tfjob_sim.images).

Volumes (tfjob_sim.process.volumes) are set up once the sandbox (with the pod's mount namespace) is
ready and before any container starts: a volume that cannot be (a missing ConfigMap, a failed hostPath
type check, an unbound claim) keeps the pod in ContainerCreating with kubelet's ``FailedMount`` event,
tried again with kubelet's back-off (0.5 s doubling to 2 min 2 s, simulated). While the pod runs, the
ConfigMap, Secret and downward API volumes are rewritten when their sources change: looked at on every
sync and at least once per kubelet sync period (60 simulated seconds). Claims are resolved by the runtime's
:class:`~tfjob_sim.process.volumes.ClaimResolver` (``ProcessRuntime.claims``), by default from the store.

Time: the kubelet's own timers (restart back-off, config-error retries) are simulated seconds,
multiplied by ``time_scale``; what a real process experiences is real: the grace period between
SIGTERM and SIGKILL (at least 2 s) and preStop ``sleep`` hooks are wall seconds, never scaled, so
a program that shuts down correctly is never SIGKILLed because the simulation runs fast.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from tfjob_sim.events import object_reference
from tfjob_sim.logs import Source
from tfjob_sim.podstate import (
    BACKOFF_INITIAL_SECONDS,
    BACKOFF_MAX_SECONDS,
    BOUND,
    CREATING,
    EVICT,
    EVICTED,
    EXITED,
    KILLED,
    KUBELET,
    MINIMUM_GRACE_SECONDS,
    RETRY_AFTER_ERROR_SECONDS,
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
from tfjob_sim.process import env as env_mod
from tfjob_sim.process.runtime import Instance, LaunchSpec, ProcessRuntime
from tfjob_sim.process.volumes import ClaimResolver, StoreClaims
from tfjob_sim.store import rfc3339

if TYPE_CHECKING:
    from tfjob_sim.events import EventRecorder
    from tfjob_sim.images import ImageCheck
    from tfjob_sim.process.env import StoreReader
    from tfjob_sim.process.volumes import PodVolumes


class KubeletPart(Protocol):
    """What this module uses of :class:`tfjob_sim.kubelet.Kubelet` (which passes itself): its store,
    nodes and images, its events, and its status and deletion writes. Typed here so that this module
    does not import the kubelet that imports it."""

    events: EventRecorder
    _nodes: dict[str, _Node]

    @property
    def _store(self) -> StoreReader: ...
    @property
    def config(self) -> Any: ...  # a KubeletConfig: its time_scale
    def _pull_images(self, pod: dict, rec: _PodRecord) -> None: ...
    def ensure_image(self, pod: dict, rec: _PodRecord, path: str, container: dict, now: float) -> ImageCheck: ...
    def _container_event(
        self, pod: dict, rec: _PodRecord, field_path: str, type_: str, reason: str, message: str
    ) -> None: ...
    def back_off_event(self, pod: dict, rec: _PodRecord, path: str, name: str) -> None: ...
    def evicted_event(self, pod: dict, rec: _PodRecord) -> None: ...
    def _container_id(self, rec: _PodRecord, name: str, instance: int) -> str: ...
    def _terminated(self, rec: _PodRecord, name: str, term: _Termination) -> dict[str, Any]: ...
    def _render(self, pod: dict, rec: _PodRecord, node: _Node) -> dict[str, Any]: ...
    def _write_status(self, pod: dict, desired: dict[str, Any]) -> dict: ...
    def _delete_now(self, pod: dict) -> None: ...


# How often a container whose configuration could not be resolved (a missing ConfigMap, ...) is
# tried again (simulated seconds; the kubelet retries on its pod sync period).
CONFIG_RETRY_SECONDS = 10.0
# kubelet's volume operation back-off (initial, doubling to the maximum) and its pod sync period, when
# API-data volumes are rewritten at the latest (simulated seconds).
MOUNT_RETRY_INITIAL_SECONDS = 0.5
MOUNT_RETRY_MAX_SECONDS = 122.0
VOLUME_RESYNC_SECONDS = 60.0
NO_COMMAND = (
    'failed to generate container "{name}" spec: failed to generate spec: no command specified '
    "(the simulator's process runtime runs no image entrypoint, so a container needs a command)"
)


@dataclass
class _Container:
    name: str
    init: bool = False
    restart_count: int = 0
    instance: Instance | None = None  # the live (or exited, not yet processed) instance
    last_instance: Instance | None = None  # the instance whose termination is `current`
    older_instance: Instance | None = None  # the instance whose termination is `previous`
    running_since: str | None = None
    current: _Termination | None = None  # state.terminated of the latest instance
    previous: _Termination | None = None  # lastState.terminated
    waiting: tuple[str, str | None] = ("ContainerCreating", None)
    restart_due: float | None = None  # CrashLoopBackOff (or a config retry) until then
    backoff: float | None = None
    backoff_updated: float = 0.0
    done: bool = False  # will not run again
    warned: str | None = None  # the last waiting error reported by an event

    @property
    def path(self) -> str:
        """The container's fieldPath in events."""
        return f"spec.{'initContainers' if self.init else 'containers'}{{{self.name}}}"


@dataclass
class _PodProcesses:
    containers: dict[str, _Container] = field(default_factory=dict)
    inits: list[_Container] = field(default_factory=list)  # run one after the other, before the containers
    init_index: int = 0  # the init container running (or restarting) now; len(inits) when all succeeded
    init_failed: bool = False  # one failed under restartPolicy Never: the pod failed
    sandbox_error: str | None = None
    mount_backoff: float | None = None  # the FailedMount retry delay (simulated seconds), doubling
    volumes_due: float | None = None  # when the API-data volumes are looked at again at the latest
    volumes_meta: Any = None  # the labels and annotations they were last written from
    stop_started: float | None = None
    sigterm_due: float | None = None
    sigterm_sent: bool = False
    kill_due: float | None = None
    kill_sent: bool = False

    @property
    def initializing(self) -> bool:
        return self.init_index < len(self.inits) and not self.init_failed

    def all(self) -> list[_Container]:
        return [*self.inits, *self.containers.values()]

    def active(self) -> list[_Container]:
        """The containers that run now: the current init container, or (after them) the containers."""
        if self.init_failed:
            return []
        return [self.inits[self.init_index]] if self.initializing else list(self.containers.values())


@dataclass(frozen=True)
class Rendered:
    phase: str
    ready: bool  # every container ready
    statuses: list[dict]
    init_statuses: list[dict]
    initialized: bool  # every init container succeeded


def _specs(pod: dict) -> dict[tuple[bool, str], dict]:
    """The pod's container specs by (is an init container, name)."""
    spec = pod.get("spec") or {}
    return {
        (init, c.get("name", "")): c
        for init, key in ((True, "initContainers"), (False, "containers"))
        for c in spec.get(key) or []
        if isinstance(c, dict)
    }


class ProcessPods:
    def __init__(self, kubelet: KubeletPart, runtime: ProcessRuntime) -> None:
        self.kubelet = kubelet
        self.runtime = runtime
        self._store_claims = StoreClaims(kubelet._store)
        self._scale = kubelet.config.time_scale

    @property
    def claims(self) -> ClaimResolver:
        """The runtime's claim resolver if one was given, else the store's."""
        return self.runtime.claims if self.runtime.claims is not None else self._store_claims

    # ---------------------------------------------------------------- the pod worker

    def sync(self, pod: dict, rec: _PodRecord, node: _Node, now: float) -> float | None:
        kubelet = self.kubelet
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            return self._terminate(pod, rec, node, now)
        if rec.life == BOUND:
            if status.get("phase") in TERMINAL_PHASES:
                return None  # finished before this kubelet knew it (pre-populated store)
            rec.life = CREATING
            rec.admitted_at = now_timestamp()
            rec.creating_since = now
            kubelet._pull_images(pod, rec)
            inits = [c for c in (pod.get("spec") or {}).get("initContainers") or [] if isinstance(c, dict)]
            waiting = ("PodInitializing", None) if inits else ("ContainerCreating", None)
            rec.proc = _PodProcesses(
                {
                    c.get("name", ""): _Container(c.get("name", ""), waiting=waiting)
                    for _, c in _containers(pod, init=False)
                },
                [_Container(c.get("name", ""), init=True, waiting=("PodInitializing", None)) for c in inits],
            )
        p: _PodProcesses = rec.proc
        due: float | None = None
        annotations = meta.get("annotations") or {}
        if annotations.get(EVICT) == "true" and not rec.evict_acted and rec.life in (CREATING, RUNNING):
            rec.evict_acted = True
            self._evict(pod, rec)
        if rec.life == CREATING:
            due = self._create_sandbox(pod, rec, p, now)
        if rec.life == RUNNING:
            due = self._step(pod, rec, p, now)
            if rec.life == RUNNING:
                refresh = self._refresh_volumes(pod, rec, p, now)
                due = refresh if due is None else (due if refresh is None else min(due, refresh))
        else:
            self._finish_exited(p)
        kubelet._write_status(pod, kubelet._render(pod, rec, node))
        return due

    def _create_sandbox(self, pod: dict, rec: _PodRecord, p: _PodProcesses, now: float) -> float | None:
        state = self.runtime.sandbox(pod)
        if state.pending:
            return None  # the runtime notifies when it is ready or failed
        if state.error is not None:
            if p.sandbox_error != state.error:
                p.sandbox_error = state.error
                self.kubelet.events.record(
                    object_reference(pod),
                    "Warning",
                    "FailedCreatePodSandBox",
                    f"Failed to create pod sandbox: {state.error}",
                    component=KUBELET,
                    host=rec.node or "",
                )
            self.runtime.retry_sandbox(rec.uid)
            return now + RETRY_AFTER_ERROR_SECONDS
        volumes = self.runtime.volumes(rec.uid)
        if volumes is not None:
            failures = volumes.set_up(self.kubelet._store, pod, self.claims, self._allocatable(rec))
            if failures:
                self._failed_mount(pod, rec, failures)
                p.mount_backoff = min((p.mount_backoff or MOUNT_RETRY_INITIAL_SECONDS / 2) * 2, MOUNT_RETRY_MAX_SECONDS)
                return now + p.mount_backoff * self._scale
            self._volumes_written(pod, p, now)
        rec.pod_ip = state.sandbox.ip
        rec.life = RUNNING
        self._start_active(pod, rec, p, now)
        return None

    # ---------------------------------------------------------------- volumes

    def _allocatable(self, rec: _PodRecord) -> dict[str, Decimal]:
        """The node's allocatable CPU (cores) and memory: a downward API limit the container lacks."""
        node = self.kubelet._nodes.get(rec.node or "")
        if node is None:
            return {}
        return {"cpu": Decimal(node.cpu_m) / 1000, "memory": Decimal(node.memory)}

    def _failed_mount(self, pod: dict, rec: _PodRecord, failures: list[str]) -> None:
        for message in failures:
            self.kubelet.events.record(
                object_reference(pod), "Warning", "FailedMount", message, component=KUBELET, host=rec.node or ""
            )

    def _volumes_written(self, pod: dict, p: _PodProcesses, now: float) -> None:
        meta = pod.get("metadata") or {}
        p.volumes_meta = (meta.get("labels"), meta.get("annotations"))
        p.volumes_due = now + VOLUME_RESYNC_SECONDS * self._scale

    def _refresh_volumes(self, pod: dict, rec: _PodRecord, p: _PodProcesses, now: float) -> float | None:
        """Rewrite the API-data volumes whose sources changed (the pod's labels and annotations at
        once, the rest at least every sync period); when to look again."""
        volumes: PodVolumes | None = self.runtime.volumes(rec.uid)
        if volumes is None or not volumes.updatable:
            return None
        meta = pod.get("metadata") or {}
        if (
            p.volumes_due is not None
            and now < p.volumes_due
            and p.volumes_meta
            == (
                meta.get("labels"),
                meta.get("annotations"),
            )
        ):
            return p.volumes_due
        failures = volumes.set_up(self.kubelet._store, pod, self.claims, self._allocatable(rec))
        self._failed_mount(pod, rec, failures)
        self._volumes_written(pod, p, now)
        return p.volumes_due

    def _start_active(self, pod: dict, rec: _PodRecord, p: _PodProcesses, now: float) -> None:
        """First start of the current init container, or of every container once the inits are done."""
        specs = _specs(pod)
        for c in p.active():
            self._start(pod, rec, c, specs[(c.init, c.name)], now)

    def _step(self, pod: dict, rec: _PodRecord, p: _PodProcesses, now: float) -> float | None:
        """Exits, restarts and retries of the running containers; the earliest timer still pending."""
        specs = _specs(pod)
        due: float | None = None
        stopping = p.stop_started is not None
        for c in p.active():
            instance = c.instance
            if instance is not None and instance.alive and instance.started and c.running_since is None:
                c.running_since = rfc3339(instance.started_wall)
            if instance is not None and not instance.alive:
                self._exited(pod, rec, c, now, restart=not stopping)
                if c.init and c.done and not stopping:
                    if c.current is not None and c.current.exit_code == 0:
                        p.init_index += 1  # the next init container, or the containers, start now
                        self._start_active(pod, rec, p, now)
                        return self._step(pod, rec, p, now)
                    p.init_failed = True  # restartPolicy Never: the pod failed
            if c.instance is not None or c.done or stopping or c.restart_due is None:
                continue
            if now < c.restart_due:
                due = c.restart_due if due is None else min(due, c.restart_due)
                continue
            if c.current is not None:
                # flowcontrol.Backoff.Next at restart: double (capped), unless the entry expired.
                c.backoff = min((c.backoff or BACKOFF_INITIAL_SECONDS) * 2, BACKOFF_MAX_SECONDS)
                c.backoff_updated = now
            self._start(pod, rec, c, specs[(c.init, c.name)], now, restart=c.current is not None)
            if c.restart_due is not None:
                due = c.restart_due if due is None else min(due, c.restart_due)
        if not stopping and (p.init_failed or (p.containers and all(c.done for c in p.containers.values()))):
            rec.life = EXITED
            self.runtime.release_sandbox(rec.uid)
        return due

    # ---------------------------------------------------------------- one container

    def _start(self, pod: dict, rec: _PodRecord, c: _Container, spec: dict, now: float, restart: bool = False) -> None:
        kubelet = self.kubelet
        node = kubelet._nodes.get(rec.node or "")
        c.restart_due = None
        image = kubelet.ensure_image(pod, rec, c.path, spec, now)
        if image.waiting is not None:
            c.waiting, c.restart_due = image.waiting, image.retry_at
            return
        try:
            host_ip = node.host_ip if node else None
            env = env_mod.container_env(kubelet._store, pod, spec, rec.pod_ip, host_ip, image.directory)
            argv = env_mod.command_line(spec, env)
            uid, gid, groups = env_mod.credentials(pod, spec)
            limit = env_mod.memory_limit(spec)
            volumes = self.runtime.volumes(rec.uid)
            mounts = tuple(volumes.container_mounts(spec, env)) if volumes is not None else ()
        except env_mod.ConfigError as exc:
            c.waiting = ("CreateContainerConfigError", str(exc))
            c.restart_due = now + CONFIG_RETRY_SECONDS * self._scale
            self._warn(pod, rec, c, str(exc))
            return
        if argv is None:
            message = NO_COMMAND.format(name=c.name)
            c.waiting = ("CreateContainerError", message)
            self._warn(pod, rec, c, message)
            return  # the spec cannot change: it stays so until the pod is deleted
        if restart:
            c.previous = c.current
            c.older_instance, c.last_instance = c.last_instance, None
            c.restart_count += 1
        self._start_events(pod, rec, c, spec, now)
        c.current = None
        c.waiting = ("ContainerCreating", None)
        container_id = kubelet._container_id(rec, c.name, c.restart_count)
        state = self.runtime.sandbox(pod)
        launch = LaunchSpec(
            argv=argv,
            env=env,
            cwd=spec.get("workingDir") or None,
            uid=uid,
            gid=gid,
            groups=groups,
            hostname=env_mod.pod_hostname(pod),
            memory_limit=limit,
            mounts=mounts,
        )
        try:
            c.instance = self.runtime.spawn(rec.uid, c.name, container_id, launch, state.sandbox)
        except OSError as exc:
            c.current = _Termination(128, "StartError", None, now_timestamp(), c.restart_count, str(exc))
            c.last_instance = None
            self._warn(pod, rec, c, str(exc))
            self._after_exit(pod, rec, c, 128, now, restart=True)
            return
        self._keep_logs(rec)

    def _start_events(self, pod: dict, rec: _PodRecord, c: _Container, spec: dict, now: float) -> None:
        """Created, Started (the image's events came from the kubelet's ensure_image)."""
        kubelet = self.kubelet
        kubelet._container_event(pod, rec, c.path, "Normal", "Created", f"Created container: {c.name}")
        kubelet._container_event(pod, rec, c.path, "Normal", "Started", f"Started container {c.name}")

    def _exited(self, pod: dict, rec: _PodRecord, c: _Container, now: float, restart: bool) -> None:
        instance = c.instance
        assert instance is not None
        self.runtime.finish(instance)
        code = instance.exit_code()
        message = None
        if instance.start_error is not None:
            reason, message = "StartError", instance.start_error
            self._warn(pod, rec, c, instance.start_error)
        elif instance.oom_killed():
            reason = "OOMKilled"
        else:
            reason = "Completed" if code == 0 else "Error"
        c.current = _Termination(
            exit_code=code,
            reason=reason,
            started_at=c.running_since or rfc3339(instance.started_wall),
            finished_at=rfc3339(instance.exited_wall or now),
            instance=c.restart_count,
            message=message,
        )
        c.running_since = None
        c.instance = None
        c.last_instance = instance
        self._after_exit(pod, rec, c, code, now, restart)

    def _after_exit(self, pod: dict, rec: _PodRecord, c: _Container, code: int, now: float, restart: bool) -> None:
        # An init container that succeeded is done whatever the policy; one that failed is retried
        # unless the policy is Never.
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        again = (code != 0 and policy != "Never") if c.init else restarts(pod, code)
        if not restart or not again:
            c.done = True
            return
        c.backoff, c.backoff_updated, delay = backoff_at_exit(c.backoff, c.backoff_updated, now, self._scale)
        c.restart_due = now if delay is None else now + delay
        if delay is not None:
            self.kubelet.back_off_event(pod, rec, c.path, c.name)

    def _keep_logs(self, rec: _PodRecord) -> None:
        """The kubelet keeps the current and the previous instance of each container; older go."""
        p: _PodProcesses = rec.proc
        logs: dict[str, Source] = {}
        for c in p.all():
            for instance in (c.instance, c.last_instance, c.older_instance):
                if instance is not None:
                    logs[instance.container_id] = instance.log
        for old_id, source in list((rec.logs or {}).items()):
            if old_id not in logs:
                for instance in self.runtime.instances(rec.uid):
                    if instance.log is source and not instance.alive:
                        self.runtime.drop_log(instance)
        rec.logs = logs

    def _warn(self, pod: dict, rec: _PodRecord, c: _Container, message: str) -> None:
        if c.warned == message:
            return
        c.warned = message
        self.kubelet._container_event(pod, rec, c.path, "Warning", "Failed", f"Error: {message}")

    def _finish_exited(self, p: _PodProcesses) -> None:
        """Evicted or finished pods: release what exited processes leave (their cgroups)."""
        for c in p.all():
            if c.instance is not None and not c.instance.alive:
                self.runtime.finish(c.instance)

    # ---------------------------------------------------------------- eviction and deletion

    def _evict(self, pod: dict, rec: _PodRecord) -> None:
        """Node-pressure eviction: the kubelet kills the containers at once and removes them, so their
        final state is the status manager's "could not be located" default (exit 137)."""
        kubelet = self.kubelet
        kubelet.evicted_event(pod, rec)
        p: _PodProcesses = rec.proc
        for c in p.all():
            if c.instance is not None and c.instance.alive:
                kubelet._container_event(pod, rec, c.path, "Normal", "Killing", f"Stopping container {c.name}")
                c.instance.signal(signal.SIGKILL)
            if c.restart_due is not None and c.current is not None:
                c.previous = c.current
            c.current = _unknown_termination(c.restart_count)
            c.running_since = None
            c.restart_due = None
            c.done = True
        rec.life = EVICTED
        self.runtime.release_sandbox(rec.uid)

    def _terminate(self, pod: dict, rec: _PodRecord, node: _Node, now: float) -> float | None:
        """Graceful deletion as killContainer does it with a real runtime: preStop sleep, SIGTERM to
        each container's process group, SIGKILL when the grace period (at least 2 s, wall seconds)
        ends; then the final status and the DELETE with grace 0 and a uid precondition."""
        kubelet = self.kubelet
        if rec.delete_sent:
            return None
        p: _PodProcesses | None = rec.proc
        meta = pod["metadata"]
        grace = max(0, meta.get("deletionGracePeriodSeconds") or 0)
        due: float | None = None
        if p is not None:
            alive = [c for c in p.all() if c.instance is not None and c.instance.alive]
            if p.stop_started is None:
                p.stop_started = now
                for c in alive:
                    kubelet._container_event(pod, rec, c.path, "Normal", "Killing", f"Stopping container {c.name}")
                for c in p.all():
                    c.restart_due = None
                prestop = min(prestop_sleep_seconds(pod.get("spec") or {}), grace)
                p.sigterm_due = now + prestop
                p.kill_due = now + prestop + max(grace - prestop, MINIMUM_GRACE_SECONDS)
            else:
                # A shorter grace period from a second DELETE moves SIGKILL earlier, never later.
                assert p.sigterm_due is not None and p.kill_due is not None
                prestop = p.sigterm_due - p.stop_started
                p.kill_due = min(p.kill_due, p.stop_started + prestop + max(grace - prestop, MINIMUM_GRACE_SECONDS))
            if not p.sigterm_sent and now >= p.sigterm_due:
                p.sigterm_sent = True
                for c in alive:
                    c.instance.signal(signal.SIGTERM)  # type: ignore[union-attr]
            if not p.kill_sent and now >= p.kill_due:
                p.kill_sent = True
                for c in alive:
                    c.instance.signal(signal.SIGKILL)  # type: ignore[union-attr]
            if rec.life == RUNNING:
                self._step(pod, rec, p, now)
            else:
                self._finish_exited(p)
            if any(c.instance is not None and c.instance.alive for c in p.all()):
                kubelet._write_status(pod, kubelet._render(pod, rec, node))
                return p.sigterm_due if not p.sigterm_sent else (None if p.kill_sent else p.kill_due)
            for c in p.all():
                if c.current is None:
                    c.current = _unknown_termination(c.restart_count)
                c.running_since = None
        if rec.life in (BOUND, CREATING, RUNNING):
            rec.life = KILLED
        self.runtime.release_sandbox(rec.uid)
        if rec.admitted_at is not None:
            pod = kubelet._write_status(pod, kubelet._render(pod, rec, node))
        rec.delete_sent = True
        kubelet._delete_now(pod)
        return due

    def forget(self, rec: _PodRecord) -> None:
        self.runtime.forget(rec.uid)

    # ---------------------------------------------------------------- status

    def render_containers(self, pod: dict, rec: _PodRecord) -> Rendered:
        """Phase, readiness and container statuses as the kubelet's getPhase computes them."""
        spec = pod.get("spec") or {}
        p: _PodProcesses | None = rec.proc
        inits = {c.name: c for c in p.inits} if p is not None else {}
        init_statuses = []
        for container in spec.get("initContainers") or []:
            if isinstance(container, dict):
                status = self._container_status(pod, rec, container, inits.get(container.get("name", "")))
                terminated = status["state"].get("terminated") or {}
                status["ready"] = terminated.get("exitCode") == 0 and terminated.get("reason") == "Completed"
                init_statuses.append(status)
        statuses = []
        running = waiting = stopped = succeeded = 0
        for container in spec.get("containers") or []:
            if not isinstance(container, dict):
                continue
            name = container.get("name", "")
            c = p.containers.get(name) if p is not None else None
            status = self._container_status(pod, rec, container, c)
            statuses.append(status)
            state = status["state"]
            if "running" in state:
                running += 1
            elif "terminated" in state:
                stopped += 1
                succeeded += state["terminated"]["exitCode"] == 0
            elif status.get("lastState", {}).get("terminated"):
                stopped += 1  # CrashLoopBackOff counts as stopped
            else:
                waiting += 1
        statuses.sort(key=lambda s: s["name"])
        policy = spec.get("restartPolicy") or "Always"
        initializing = p is None or p.initializing
        if rec.life == EVICTED or (p is not None and p.init_failed):
            phase = "Failed"
        elif rec.life in (KILLED, EXITED):
            phase = "Succeeded" if statuses and stopped == succeeded == len(statuses) else "Failed"
        elif rec.life in (BOUND, CREATING) or initializing or waiting > 0:
            phase = "Pending"
        elif running > 0:
            phase = "Running"
        elif policy == "Always" or (policy == "OnFailure" and stopped != succeeded):
            phase = "Running"
        else:
            phase = "Succeeded" if stopped == succeeded else "Failed"
        ready = bool(statuses) and all(s["ready"] for s in statuses)
        initialized = not init_statuses or (p is not None and p.init_index >= len(p.inits))
        return Rendered(phase, ready, statuses, init_statuses, initialized)

    def _container_status(self, pod: dict, rec: _PodRecord, container: dict, c: _Container | None) -> dict[str, Any]:
        kubelet = self.kubelet
        name = container.get("name", "")
        image = container.get("image", "")
        out = new_container_status(name, image, c.restart_count if c else 0)
        if c is None:
            out["state"] = {"waiting": {"reason": "ContainerCreating"}}
            return out
        if c.previous is not None:
            out["lastState"] = {"terminated": kubelet._terminated(rec, name, c.previous)}
        if c.running_since is not None or c.current is not None:
            out["imageID"] = _image_id(image)
        if c.instance is not None and c.running_since is not None:
            out.update(
                containerID=kubelet._container_id(rec, name, c.restart_count),
                ready=True,
                started=True,
                state={"running": {"startedAt": c.running_since}},
            )
        elif c.restart_due is not None and c.current is not None and not c.done:
            message = crash_loop_message(pod, rec.uid, name, c.backoff)
            out.update(
                state={"waiting": {"reason": "CrashLoopBackOff", "message": message}},
                lastState={"terminated": kubelet._terminated(rec, name, c.current)},
            )
            if c.current.started_at is not None:
                out["containerID"] = kubelet._container_id(rec, name, c.current.instance)
        elif c.current is not None and c.instance is None:
            if c.current.started_at is not None:
                out["containerID"] = kubelet._container_id(rec, name, c.current.instance)
            out["state"] = {"terminated": kubelet._terminated(rec, name, c.current)}
        else:
            reason, detail = c.waiting
            out["state"] = {"waiting": {"reason": reason, **({"message": detail} if detail else {})}}
        return out
