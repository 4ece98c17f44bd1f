"""The simulated kubelet, and the worker that drives the simulated cluster's node components.

Why this module exists: a real cluster does not only store pods, it *runs* them. Controllers under
test depend on what happens after a pod is created: it gets a node, turns Running with a podIP and
container statuses, exits and is restarted with back-off, is evicted, or hangs in Terminating on a
dead node. Four components write those changes, each in its own module: the scheduler
(tfjob_sim.scheduler), the kubelet (:class:`NodeAgent`, here), the node lifecycle controller
(tfjob_sim.nodelifecycle) and pod GC (tfjob_sim.podgc). :class:`Kubelet`, the name the cluster knows
them by, owns the one worker that runs them and the store listener that feeds them.

By default nothing really runs, KWOK-style (tfjob_sim.annotationpods): pod annotations steer a pod so
tests and ``kubectl annotate`` can drive it:

===================================== ====================================================
``sim.tfjob.dev/start-seconds``       Pending -> Running delay (default ``default_start_seconds``)
``sim.tfjob.dev/run-seconds``         each container instance runs this long, then exits
``sim.tfjob.dev/exit-code``           the exit code (default 0); on a running pod without
                                      run-seconds a *new* value makes the containers exit now
``sim.tfjob.dev/reason``              terminated reason (default Completed / OOMKilled(137) / Error)
``sim.tfjob.dev/evict``               ``"true"``: node-pressure eviction now (phase Failed, Evicted)
``sim.tfjob.dev/unschedulable``       ``"true"``: the scheduler finds no node (stays Pending)
``sim.tfjob.dev/sigterm-seconds``     on deletion, the process exits this long after SIGTERM
                                      (default ``default_sigterm_seconds``, 0.2 s)
``sim.tfjob.dev/sigterm-exit-code``   its exit code then (default 143: killed by SIGTERM; 0 for
                                      a process that traps SIGTERM and exits cleanly)
``sim.tfjob.dev/ignore-sigterm``      ``"true"``: SIGTERM is ignored, SIGKILL (137) comes when the
                                      grace period ends
===================================== ====================================================

Contract:
- All writes go through the :class:`~tfjob_sim.store.Store` API, so they have exactly the
  semantics of API writes (RV bumps, watch events, no-op suppression, graceful deletion). Status is
  written through the ``status`` subresource; the scheduler binds through ``Store.bind`` (one
  write: ``spec.nodeName`` once plus PodScheduled=True).
- Level-triggered: a pod is reconciled from the stored object plus the per-uid memory of the
  components (:class:`~tfjob_sim.nodestate.NodeState`: when its container instance started, what
  annotation values were already acted on). The store listener only marks pods dirty; one worker owned
  by :meth:`Kubelet.run` does the writes, never from inside a listener callback, handing each pod to
  the component whose turn it is: the scheduler while it has no node, pod GC while its node is gone,
  the node lifecycle controller while its node is not Ready, else its node's kubelet. A status write
  of the components' own does not mark its pod dirty: the sync that made it already acted on
  everything that write contains (a real kubelet's status manager does not resync a pod for its own
  update either).
- Time: every simulated duration is multiplied by ``KubeletConfig.time_scale``; timers live in one
  heap (:class:`~tfjob_sim.nodestate.NodeState`), not one task per pod.
- ``pause()`` stops every transition (scheduling, starts, exits, deletion confirmation, evictions);
  ``resume()`` reconciles every known pod, so overdue timers fire at once.
- A node whose ``Ready`` condition is not ``True`` is treated as unreachable: its kubelet does
  nothing (pods keep their last state, terminating pods stay terminating); the node lifecycle
  controller marks its pods not ready and, after the pod's NoExecute toleration (default
  ``node_eviction_seconds``), the taint manager deletes them gracefully. Pods bound to a node that
  no longer exists are force-deleted by pod GC after ``pod_gc_orphan_seconds``.
- Every container of a pod follows the same annotations, so they start, exit and restart together.
- ``KubeletConfig(runtime="process")``: containers are real processes instead (sim/tfjob_sim/process/,
  the pod lifecycle in process/pods.py); of the annotations above only ``evict`` and ``unschedulable``
  apply then. Scheduling, node lifecycle, pod GC, events and status writing are the same either way.
  The images are the kubelet's too (:meth:`NodeAgent.ensure_image`): ``KubeletConfig.image_map`` names the
  local environment standing for each image (tfjob_sim.images); another image fails to pull.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import anyio
import structlog

from tfjob_sim.annotationpods import (
    EXIT_CODE,
    IGNORE_SIGTERM,
    REASON,
    RUN_SECONDS,
    SIGTERM_DEFAULT_EXIT_CODE,
    SIGTERM_EXIT_CODE,
    SIGTERM_SECONDS,
    START_SECONDS,
    AnnotationPods,
    end_logs,
)
from tfjob_sim.errors import ApiError
from tfjob_sim.events import object_reference
from tfjob_sim.gang.common import GANG_RESOURCES
from tfjob_sim.images import ImageCheck, ImageMap, InvalidReference, normalize
from tfjob_sim.logs import Source
from tfjob_sim.nodelifecycle import NodeLifecycle
from tfjob_sim.nodestate import DEFAULT_SCHEDULER, KubeletConfig, NodeState, StoreLike
from tfjob_sim.podgc import PodGC
from tfjob_sim.podstate import (
    BACKOFF_INITIAL_SECONDS,
    BACKOFF_MAX_SECONDS,
    BACKOFF_RESET_SECONDS,
    EVICT,
    KUBELET,
    RETRY_AFTER_ERROR_SECONDS,
    _containers,
    _Node,
    _PodRecord,
    _Termination,
    go_duration_precise,
    image_size,
)
from tfjob_sim.podstatus import ContainersView, container_id, eviction_message, render_status, terminated
from tfjob_sim.scheduler import UNSCHEDULABLE, Scheduler
from tfjob_sim.storagetypes import PVCS, STORAGE_CLASSES

# The annotations steering a pod, and the configuration, importable from here as they always were.
__all__ = [
    "DEFAULT_SCHEDULER",
    "EVICT",
    "EXIT_CODE",
    "IGNORE_SIGTERM",
    "REASON",
    "RUN_SECONDS",
    "SIGTERM_DEFAULT_EXIT_CODE",
    "SIGTERM_EXIT_CODE",
    "SIGTERM_SECONDS",
    "START_SECONDS",
    "UNSCHEDULABLE",
    "Kubelet",
    "KubeletConfig",
    "NodeAgent",
]

log = structlog.get_logger(__name__)

# After a write conflict the pod is reconciled again this soon (wall seconds; other failures wait
# RETRY_AFTER_ERROR_SECONDS).
RETRY_AFTER_CONFLICT_SECONDS = 0.05
# Pods reconciled between checkpoints, so a burst of events never starves the API server.
BATCH_CHECKPOINT = 256
# What may let a pod held by its claims be scheduled (the scheduler's side of tfjob_sim.persistentvolumes).
STORAGE_RESOURCES = (PVCS, STORAGE_CLASSES)
# How soon a container whose image is invalid or not allowed to be pulled is tried again (simulated
# seconds: the pod worker's back-off after a failed sync).
IMAGE_RETRY_SECONDS = 10.0
# What the container runtime answers for an image that is in no registry; the simulator's registry is
# the image map (tfjob_sim.images), so the message says how to add to it.
PULL_NOT_FOUND = (
    'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to resolve reference '
    '"{ref}": {ref}: not found (the simulator runs an image only when it is mapped to a local environment: '
    "tfjob-controller sim --image IMAGE=DIR)"
)


class _PullBackOff:
    """One entry of kubelet's image pull back-off (flowcontrol.Backoff keyed by pod uid and image): the
    current back-off (simulated seconds), when it was last updated, and the error of that pull."""

    __slots__ = ("backoff", "error", "updated")

    def __init__(self, updated: float, error: str) -> None:
        self.backoff = BACKOFF_INITIAL_SECONDS
        self.updated = updated
        self.error = error


class _IPAllocator:
    """Unique pod IPs from 10.244.0.0/14; an IP is reused only after its pod is gone."""

    def __init__(self) -> None:
        self._next = (10 << 24) | (244 << 16) | 2
        self._last = (10 << 24) | (247 << 16) | (255 << 8) | 254
        self._free: list[int] = []
        self._free_head = 0

    def allocate(self) -> str:
        if self._free_head < len(self._free):
            value = self._free[self._free_head]
            self._free_head += 1
            if self._free_head > 4096 and self._free_head * 2 > len(self._free):
                del self._free[: self._free_head]
                self._free_head = 0
        else:
            while self._next & 0xFF in (0, 255):
                self._next += 1
            if self._next > self._last:
                raise RuntimeError("simulated pod network 10.244.0.0/14 is exhausted")
            value = self._next
            self._next += 1
        return ".".join(str((value >> s) & 0xFF) for s in (24, 16, 8, 0))

    def release(self, ip: str) -> None:
        a, b, c, d = (int(x) for x in ip.split("."))
        self._free.append((a << 24) | (b << 16) | (c << 8) | d)


class PodLifecycle(Protocol):
    """A container runtime's pod lifecycle: tfjob_sim.annotationpods.AnnotationPods or
    tfjob_sim.process.pods.ProcessPods."""

    def sync(self, pod: dict, rec: _PodRecord, node: _Node, now: float) -> float | None: ...
    def render_containers(self, pod: dict, rec: _PodRecord) -> ContainersView: ...


class NodeAgent:
    """The kubelet of every simulated node: runs the pods bound to a Ready node through the configured
    container runtime's pod lifecycle, and gives both runtimes what is the kubelet's whatever runs the
    containers: pod IPs, the images on each node and their pull events, container events, the pod
    status and the final DELETE (the :class:`~tfjob_sim.process.pods.KubeletPart` and
    :class:`~tfjob_sim.annotationpods.AgentPart` of the runtimes)."""

    def __init__(self, state: NodeState, wake: Callable[[], None]) -> None:
        """``wake``: the worker's, called when the process runtime reports a change of a pod's processes."""
        self._state = state
        self.config = state.config
        self.events = state.events
        self._nodes = state.nodes
        self._images: dict[str, set[str]] = {}  # node -> images present on it
        self._image_map = ImageMap(self.config.image_map)
        self._pull_backoff: dict[str, dict[str, _PullBackOff]] = {}  # pod uid -> image -> its back-off
        self._ips = _IPAllocator()
        self._wake = wake
        self.runtime: Any = None  # tfjob_sim.process.runtime.ProcessRuntime with runtime="process"
        self._processes: Any = None  # tfjob_sim.process.pods.ProcessPods, its pod lifecycle
        self._lifecycle: PodLifecycle
        if self.config.runtime == "process":
            self._processes = self._init_process_runtime()
            self._lifecycle = self._processes
        else:
            self._lifecycle = AnnotationPods(self)

    def _init_process_runtime(self) -> Any:
        """The process runtime (started later, by ``Kubelet.run``) and its pod lifecycle, which is returned."""
        from tfjob_sim.process.network import PodNetwork
        from tfjob_sim.process.pods import ProcessPods
        from tfjob_sim.process.runtime import ProcessRuntime, check_available

        check_available()
        self.runtime = ProcessRuntime(notify=self._pod_changed, network=PodNetwork(store=self._state.store))
        return ProcessPods(self, self.runtime)

    def _pod_changed(self, uid: str) -> None:
        """The runtime saw something happen to a pod's processes or sandbox: sync it."""
        if uid in self._state.pods:
            self._state.dirty[uid] = None
            self._wake()

    @property
    def _store(self) -> StoreLike:
        return self._state.store

    # ---------------------------------------------------------------- the worker's side

    def sync(self, pod: dict, rec: _PodRecord, node: _Node) -> float | None:
        """Run a pod bound to the Ready ``node`` one step and write its status; returns when to look again."""
        return self._lifecycle.sync(pod, rec, node, anyio.current_time())

    def forget(self, rec: _PodRecord) -> None:
        """The pod object is gone: its output stops, its processes (if any) are killed, its IP is free."""
        end_logs(rec, anyio.current_time())
        if self._processes is not None:
            self._processes.forget(rec)
        if rec.pod_ip and rec.ip_owned:
            self._ips.release(rec.pod_ip)
        self._pull_backoff.pop(rec.uid, None)

    def log_source(self, uid: str, container_id: str) -> Source | None:
        """The output of a container instance this kubelet still keeps (current or previous), or None."""
        rec = self._state.pods.get(uid)
        if rec is None or rec.logs is None:
            return None
        return rec.logs.get(container_id)

    # ---------------------------------------------------------------- what the runtimes use

    def allocate_ip(self, rec: _PodRecord) -> None:
        """Give the pod an IP of its own unless it has one."""
        if rec.pod_ip is None:
            rec.pod_ip, rec.ip_owned = self._ips.allocate(), True

    def _needs_pull(self, node: str | None, container: dict) -> bool:
        policy = container.get("imagePullPolicy") or "IfNotPresent"
        if policy == "Never":
            return False
        return policy == "Always" or container.get("image", "") not in self._images.get(node or "", ())

    def _pull_images(self, pod: dict, rec: _PodRecord) -> None:
        """Admission: the kubelet pulls the first container's image if the node lacks it (or always,
        under imagePullPolicy Always); the pull lasts the start delay."""
        first = next(iter(_containers(pod, init=True)), None)
        rec.pulling = None
        if first is not None and self._needs_pull(rec.node, first[1]):
            rec.pulling = first[0]
            self._container_event(
                pod, rec, first[0], "Normal", "Pulling", f'Pulling image "{first[1].get("image", "")}"'
            )

    def pulled_event(self, pod: dict, rec: _PodRecord, path: str, image: str, seconds: float | None) -> None:
        """The Pulled event of a container about to be created: the pull took ``seconds`` (the image is on
        the node from now on), or the image was there already (None)."""
        if seconds is None:
            message = f'Container image "{image}" already present on machine'
        else:
            self._images.setdefault(rec.node or "", set()).add(image)
            took = go_duration_precise(seconds)
            message = (
                f'Successfully pulled image "{image}" in {took} ({took} including waiting). '
                f"Image size: {image_size(image)} bytes."
            )
        self._container_event(pod, rec, path, "Normal", "Pulled", message)

    def ensure_image(self, pod: dict, rec: _PodRecord, path: str, container: dict, now: float) -> ImageCheck:
        """kubelet's EnsureImageExists before the process runtime creates a container: the image is present
        or pulled (Pulling/Pulled; the admission's pull, :meth:`_pull_images`, ends here) and the local
        environment mapped to it is returned; or the container cannot be created and waits, with the
        kubelet's reason and events: InvalidImageName, ErrImageNeverPull, ErrImagePull (an image no
        environment is mapped to), then ImagePullBackOff until the back-off (10 s doubling to 300 s,
        simulated) lets it be pulled again. A container whose command is an absolute path needs no image:
        it runs this machine's program, whatever its image."""
        image = container.get("image") or ""
        command = container.get("command") or []
        on_host = bool(command) and str(command[0]).startswith("/")
        try:
            directory = self._image_map.lookup(image)
        except InvalidReference as exc:
            if not on_host:
                message = f'Failed to apply default image tag "{image}": couldn\'t parse image name "{image}": {exc}'
                self._container_event(pod, rec, path, "Warning", "InspectFailed", message)
                return self._cannot_create(pod, rec, path, "InvalidImageName", message, now, IMAGE_RETRY_SECONDS)
            directory = None
        if directory is None and not on_host:
            return self._pull_fails(pod, rec, path, container, normalize(image), now)
        seconds: float | None = None
        if path == rec.pulling:  # the pull the admission started ends now
            rec.pulling = None
            seconds = max(0.0, now - (rec.creating_since or now))
        elif self._needs_pull(rec.node, container):  # later pulls are instant
            self._container_event(pod, rec, path, "Normal", "Pulling", f'Pulling image "{image}"')
            seconds = 0.0
        self.pulled_event(pod, rec, path, image, seconds)
        return ImageCheck(directory=str(directory) if directory is not None else None)

    def _pull_fails(self, pod: dict, rec: _PodRecord, path: str, container: dict, ref: str, now: float) -> ImageCheck:
        """An image that is nowhere to be pulled from: ErrImageNeverPull under imagePullPolicy Never, else
        ErrImagePull and its back-off (the waiting message then carries the last pull's error, as kubelet
        1.32 and later do). A failed pull is looked at again half-way through its back-off (showing
        ImagePullBackOff) and when it ends (pulling again)."""
        image = container.get("image") or ""
        scale = self.config.time_scale
        if container.get("imagePullPolicy") == "Never":
            message = f'Container image "{image}" is not present with pull policy of Never'
            self._container_event(pod, rec, path, "Warning", "ErrImageNeverPull", message)
            return self._cannot_create(pod, rec, path, "ErrImageNeverPull", message, now, IMAGE_RETRY_SECONDS)
        entries = self._pull_backoff.setdefault(rec.uid, {})
        entry = entries.get(image)
        if entry is not None and now - entry.updated > BACKOFF_RESET_SECONDS * scale:
            entry = None  # flowcontrol.Backoff: an entry not updated for twice the cap has expired
        if entry is not None and now - entry.updated < entry.backoff * scale:
            message = f'Back-off pulling image "{image}"'
            self._container_event(pod, rec, path, "Normal", "BackOff", message)
            remaining = (entry.updated + entry.backoff * scale - now) / scale
            return self._cannot_create(pod, rec, path, "ImagePullBackOff", f"{message}: {entry.error}", now, remaining)
        if path == rec.pulling:
            rec.pulling = None  # the admission reported this pull's start
        else:
            self._container_event(pod, rec, path, "Normal", "Pulling", f'Pulling image "{image}"')
        error = PULL_NOT_FOUND.format(ref=ref)
        self._container_event(pod, rec, path, "Warning", "Failed", f'Failed to pull image "{image}": {error}')
        if entry is None:
            entry = entries[image] = _PullBackOff(now, f"ErrImagePull: {error}")
        else:
            entry.backoff = min(entry.backoff * 2, BACKOFF_MAX_SECONDS)
            entry.updated, entry.error = now, f"ErrImagePull: {error}"
        return self._cannot_create(pod, rec, path, "ErrImagePull", error, now, entry.backoff / 2)

    def _cannot_create(
        self, pod: dict, rec: _PodRecord, path: str, reason: str, message: str, now: float, retry_seconds: float
    ) -> ImageCheck:
        """The container waits with ``reason``; kubelet's startContainer reports it as ``Error: <reason>``."""
        self._container_event(pod, rec, path, "Warning", "Failed", f"Error: {reason}")
        return ImageCheck(waiting=(reason, message), retry_at=now + retry_seconds * self.config.time_scale)

    def _container_event(
        self, pod: dict, rec: _PodRecord, field_path: str, type_: str, reason: str, message: str
    ) -> None:
        self.events.record(
            object_reference(pod, field_path), type_, reason, message, component=KUBELET, host=rec.node or ""
        )

    def back_off_event(self, pod: dict, rec: _PodRecord, path: str, name: str) -> None:
        """A container waits in CrashLoopBackOff."""
        meta = pod.get("metadata") or {}
        self._container_event(
            pod,
            rec,
            path,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container {name} in pod {meta.get('name')}_{meta.get('namespace')}({rec.uid})",
        )

    def evicted_event(self, pod: dict, rec: _PodRecord) -> None:
        """The pod was evicted for node pressure."""
        spec = pod.get("spec") or {}
        self.events.record(
            object_reference(pod),
            "Warning",
            "Evicted",
            eviction_message([c for c in spec.get("containers") or [] if isinstance(c, dict)]),
            component=KUBELET,
            host=rec.node or "",
        )

    def _container_id(self, rec: _PodRecord, name: str, instance: int) -> str:
        return container_id(rec, name, instance)

    def _terminated(self, rec: _PodRecord, name: str, term: _Termination) -> dict[str, Any]:
        return terminated(rec, name, term)

    def _render(self, pod: dict, rec: _PodRecord, node: _Node) -> dict[str, Any]:
        """The kubelet-owned part of the pod status, with the runtime's view of the containers."""
        return render_status(pod, rec, node, self._lifecycle.render_containers(pod, rec))

    def _write_status(self, pod: dict, desired: dict[str, Any]) -> dict:
        return self._state.write_status(pod, desired)

    def _delete_now(self, pod: dict) -> None:
        self._state.delete_now(pod)


class Kubelet:
    """The simulated cluster's node components (scheduler, kubelet, node lifecycle controller, pod GC)
    and the one worker that drives them.

    Create it with the store, then ``await run()`` inside a task group; cancel the task to stop.
    ``pause``/``resume``/``set_node_ready`` may be called from the event-loop thread at any time.
    """

    def __init__(self, store: StoreLike, config: KubeletConfig | None = None) -> None:
        self.config = config or KubeletConfig()
        self.state = NodeState(store, self.config)
        self.events = self.state.events
        self.scheduler = Scheduler(self.state)
        self.gang = self.scheduler.gang
        self.node_lifecycle = NodeLifecycle(self.state)
        self.pod_gc = PodGC(self.state)
        self.agent = NodeAgent(self.state, self._notify)
        self.runtime: Any = self.agent.runtime  # the process runtime with runtime="process", else None
        # What the listener's guards caught: a failure there silently stops scheduling (a gang, a pod),
        # so tests assert this stays empty rather than trusting a log line.
        self.listener_failures: list[str] = []
        self._paused = False
        self._wake: anyio.Event | None = None  # created in run(): needs the running event loop
        self._started = False

    # ---------------------------------------------------------------- public API

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Freeze every pod transition and deletion confirmation until resume()."""
        self._paused = True

    def resume(self) -> None:
        """Unfreeze; every known pod is reconciled so overdue timers fire at once."""
        if not self._paused:
            return
        self._paused = False
        for uid in self.state.pods:
            self.state.dirty[uid] = None
        self.state.retry_unschedulable = True
        self._notify()

    def set_node_ready(self, name: str, ready: bool) -> None:
        """Fault API: see :meth:`tfjob_sim.nodelifecycle.NodeLifecycle.set_node_ready`."""
        self.node_lifecycle.set_node_ready(name, ready)

    def log_source(self, uid: str, container_id: str) -> Source | None:
        """The output of a container instance its kubelet still keeps (current or previous), or None."""
        return self.agent.log_source(uid, container_id)

    async def run(self) -> None:
        """Create the configured nodes, then schedule and run pods until cancelled."""
        if self._started:
            raise RuntimeError("Kubelet.run() may only be called once")
        self._started = True
        self._wake = anyio.Event()
        unsubscribe = self.state.store.add_listener(self._on_event)
        try:
            if self.runtime is not None:
                await self.runtime.start()
            self.node_lifecycle.register_nodes()
            self._initial_sync()
            await self._loop()
        finally:
            unsubscribe()
            if self.runtime is not None:
                with anyio.CancelScope(shield=True):
                    await self.runtime.stop()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _initial_sync(self) -> None:
        store = self.state.store
        nodes, _ = store.list("nodes")
        for node in nodes:
            self.state.node_event("ADDED", None, node)
        pods, _ = store.list("pods")
        for pod in pods:
            self._on_pod_event("ADDED", None, pod)
        self.gang.initial_sync()

    # ---------------------------------------------------------------- listener (synchronous, no writes)

    def _on_event(self, event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        if resource in STORAGE_RESOURCES:
            obj = new if new is not None else old
            try:
                woken = obj is not None and self.scheduler.storage_event(resource, obj)
            except Exception as exc:  # a listener must never break the store's write path
                log.exception("scheduler storage listener failed", event_type=event_type, resource=resource)
                self.listener_failures.append(f"scheduler {event_type} {resource}: {exc!r}")
                return
            if woken:
                self._notify()
            return
        if resource != "pods" and resource != "nodes":
            if resource not in GANG_RESOURCES:
                return
            try:
                self.gang.on_event(event_type, resource, old, new)
            except Exception as exc:  # a listener must never break the store's write path
                log.exception("gang scheduler listener failed", event_type=event_type, resource=resource)
                self.listener_failures.append(f"gang scheduler {event_type} {resource}: {exc!r}")
                return
            self._notify()
            return
        try:
            if resource == "pods":
                self._on_pod_event(event_type, old, new)
            else:
                self.state.node_event(event_type, old, new)
        except Exception as exc:  # a listener must never break the store's write path
            log.exception("kubelet listener failed", event_type=event_type, resource=resource)
            self.listener_failures.append(f"kubelet {event_type} {resource}: {exc!r}")
            return
        self._notify()

    def _on_pod_event(self, event_type: str, old: dict | None, new: dict | None) -> None:
        gone = self.state.pod_event(event_type, old, new)
        if gone is not None:
            self.scheduler.forget(gone.uid)
            self.agent.forget(gone)
        self.gang.on_pod_event(event_type, old, new)

    # ---------------------------------------------------------------- worker

    async def _loop(self) -> None:
        state = self.state
        while True:
            if not self._paused:
                state.fire_timers(anyio.current_time())
                self.scheduler.retry()
                if state.dirty:
                    batch, state.dirty = state.dirty, {}
                    for count, uid in enumerate(batch, 1):
                        if self._paused:
                            break  # resume() marks every pod dirty again
                        self._process(uid)
                        if count % BATCH_CHECKPOINT == 0:
                            await anyio.sleep(0)
                    await anyio.sleep(0)
                    continue
                if self.gang.has_work:
                    self.gang.process()
                    await anyio.sleep(0)
                    continue
            timeout = math.inf
            due = state.next_timer()
            if not self._paused and due is not None:
                timeout = max(0.0, due - anyio.current_time())
            assert self._wake is not None
            with anyio.move_on_after(timeout):
                await self._wake.wait()
            self._wake = anyio.Event()

    def _process(self, uid: str) -> None:
        rec = self.state.pods.get(uid)
        if rec is None:
            return
        try:
            due = self._sync(rec)
        except ApiError as exc:
            if exc.code == 404:
                return  # gone; its DELETED event drops the record
            if exc.code != 409:
                log.warning(
                    "kubelet write failed; retrying",
                    pod=f"{rec.namespace}/{rec.name}",
                    code=exc.code,
                    error=exc.message,
                )
            due = anyio.current_time() + (
                RETRY_AFTER_CONFLICT_SECONDS if exc.code == 409 else RETRY_AFTER_ERROR_SECONDS
            )
        if uid not in self.state.pods:
            return
        self.state.set_timer(rec, due)

    def _sync(self, rec: _PodRecord) -> float | None:
        """Hand one pod to the component whose turn it is; return when to look at it again."""
        pod = self.state.store.get("pods", rec.namespace, rec.name)
        if pod is None or (pod.get("metadata") or {}).get("uid") != rec.uid:
            return None
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            self.scheduler.schedule(pod, rec)
            return None
        self.scheduler.forget(rec.uid)
        node = self.state.nodes.get(node_name)
        if node is None:
            return self.pod_gc.collect_orphan(pod, rec)
        self.pod_gc.node_back(rec)
        if not node.ready:
            return self.node_lifecycle.unreachable(pod, rec, node)
        self.node_lifecycle.reachable(rec)
        return self.agent.sync(pod, rec, node)
