"""The process runtime of the simulated kubelet: every container is a real process on this machine.

Why: a training program can only be proven against dynamic workers by running it. With
``KubeletConfig(runtime="process")`` the kubelet (sim/tfjob_sim/kubelet.py) keeps scheduling,
statuses, events, back-off and faults, and asks this module to do what containerd and runc do:
give each pod a network sandbox (tfjob_sim.process.network), start each container's command with
its environment, credentials, working directory and memory cgroup, capture its output, report its
exit, signal it, and clean everything up.

Contract:
- :func:`check_available` raises :class:`RuntimeUnavailable` (one line) when this process cannot
  run containers (not root, not Linux).
- :class:`ProcessRuntime`: ``await start()`` before use (sweeps what dead simulators left, starts
  the network, then creates the state directory and the cgroup subtree), ``await stop()``
  after (kills every process, removes every sandbox, cgroup and file; idempotent). Everything is
  named with :attr:`ProcessRuntime.prefix` (``tfsim<pid>-<n>``).
- Sandboxes: :meth:`~ProcessRuntime.sandbox` starts creating a pod's sandbox and returns its state
  (pending / ready / failed): its volumes' directories and mount namespace
  (tfjob_sim.process.volumes), then its network; :meth:`~ProcessRuntime.release_sandbox` removes it
  (the volumes once the pod's processes are gone). :meth:`~ProcessRuntime.volumes` gives the pod's
  :class:`~tfjob_sim.process.volumes.PodVolumes` for the kubelet to set up and to compute mounts. The runtime calls
  ``notify(uid)`` whenever something about a pod changed (sandbox ready or failed, a process
  confirmed its exec or exited): the kubelet then syncs that pod.
- Processes: :meth:`~ProcessRuntime.spawn` starts one container instance through the exec helper
  (tfjob_sim.process.launch) and returns an :class:`Instance`; its ``started``/``start_error``/
  ``exit_status`` fill in as the helper reports. A container's volume mounts come in its
  :class:`LaunchSpec`; a ``mountPath`` missing in this machine's tree is created (and removed with the
  last pod that uses it: :class:`~tfjob_sim.process.volumes.MountPoints`). :meth:`Instance.signal`
  signals the process group;
  :meth:`~ProcessRuntime.finish` (after the exit) kills what is left in the instance's cgroup and
  removes it; :meth:`~ProcessRuntime.forget` kills and releases everything of a pod.
- Leaks: container processes and mount namespace holders die with the simulator (PR_SET_PDEATHSIG);
  the kernel then dismantles the pods' mount namespaces and every mount in them. What a process
  cannot take with it (cgroups, the state directory, created mount points) is removed by the pod network's janitor
  process (tfjob_sim.process.janitor: one per simulator, for the network and the runtime) when its
  pipe from the simulator closes, and by the sweeps at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from tfjob_sim.process import cgroup as cgroups_mod
from tfjob_sim.process.janitor import pid_alive, remove_state_dir
from tfjob_sim.process.logfile import ProcessLog
from tfjob_sim.process.network import PodNetwork
from tfjob_sim.process.volumes import ClaimResolver, Mount, MountPoints, PodVolumes

log = structlog.get_logger(__name__)

LAUNCH = str(Path(__file__).with_name("launch.py"))
PREFIX_STEM = "tfsim"
# The PATH a container gets when its env does not set one (an image's usual default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Reads of one pipe per wake-up (64 KiB each), and how long a container's cgroup may stay busy after
# its processes were SIGKILLed before the runtime gives up removing it (the stop sweeps it again).
DRAIN_READS = 16
CGROUP_REMOVE_SECONDS = 10.0
# How long a pod's killed processes may take to exit before its volumes are removed anyway.
REAP_SECONDS = 10.0


class RuntimeUnavailable(RuntimeError):
    """This process cannot run containers as processes (the message is one line)."""


def check_available() -> None:
    if not sys.platform.startswith("linux"):
        raise RuntimeUnavailable("the process runtime needs Linux (network namespaces, cgroups)")
    if os.geteuid() != 0:
        raise RuntimeUnavailable(
            "the process runtime needs root (network namespaces, veth links, mounts, cgroups); "
            "run as root or use --runtime annotations"
        )


def sweep_state_dirs(parent: str) -> list[str]:
    """Remove state directories of simulators (``tfsim<pid>-<n>``) whose pid is dead, and the mount
    points they recorded there."""
    removed = []
    pattern = re.compile(PREFIX_STEM + r"(\d+)-\d+$")
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            match = pattern.match(entry.name)
            if match and entry.is_dir(follow_symlinks=False) and not pid_alive(int(match.group(1))):
                for error in remove_state_dir(entry.path):
                    log.warning("could not remove all a dead simulator left", error=error)
                removed.append(entry.path)
    return removed


# --------------------------------------------------------------------------------------------
# Sandboxes


@dataclass
class SandboxState:
    uid: str
    sandbox: Any = None  # tfjob_sim.process.network.Sandbox once created
    error: str | None = None
    volumes: PodVolumes | None = None  # the pod's volumes, their mount namespace created with the sandbox

    @property
    def ready(self) -> bool:
        return self.sandbox is not None

    @property
    def pending(self) -> bool:
        return self.sandbox is None and self.error is None


# --------------------------------------------------------------------------------------------
# Container instances


@dataclass(frozen=True)
class LaunchSpec:
    """Everything the exec helper needs besides the environment."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    hostname: str | None = None
    memory_limit: int | None = None
    mounts: tuple[Mount, ...] = ()  # volume mounts, parents first


@dataclass(eq=False)
class Instance:
    """One container instance: the process the exec helper became."""

    uid: str
    container: str
    container_id: str
    pid: int
    log: ProcessLog
    cgroup: cgroups_mod.ContainerCgroup | None
    popen: subprocess.Popen
    started_wall: float
    started: bool = False  # the helper exec'd the command
    start_error: str | None = None  # or reported why it could not
    exit_status: int | None = None  # os.waitpid status once it exited
    exited_wall: float | None = None
    finished: bool = False  # finish() ran: cgroup killed and removed, log ended
    oom_kills: int | None = None  # the cgroup's OOM kill count, read before finish() removed it
    status_fd: int | None = None  # the helper's status pipe, until EOF
    status_text: bytearray = field(default_factory=bytearray)  # what the helper wrote there
    pidfd: int | None = None  # readable when the process exits, until the exit is seen
    streams: list[Any] = field(default_factory=list)  # stdout and stderr pipes, until EOF

    @property
    def alive(self) -> bool:
        return self.exit_status is None

    def signal(self, signum: int) -> None:
        """Signal the container's process group (the helper made the process a session leader).

        The process gets the signal once: a second SIGTERM that arrives while a program exits from its
        SIGTERM handler finds the default disposition again (the interpreter restores it on the way
        out) and kills it, so a clean exit 0 would become 143."""
        if self.exit_status is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:  # before the helper's setsid() there is no such group yet
                os.kill(self.pid, signum)
        if signum == signal.SIGKILL and self.cgroup is not None:
            self.cgroup.kill()

    def oom_killed(self) -> bool:
        """The memory cgroup's OOM killer killed a process of this instance (its cgroup is its own)."""
        if self.oom_kills is None and self.cgroup is not None:
            return self.cgroup.oom_kills() > 0
        return bool(self.oom_kills)

    def exit_code(self) -> int:
        """The container's exit code: the process's, or 128 + the signal that killed it."""
        status = self.exit_status
        if status is None:
            raise RuntimeError("the process is still running")
        if os.WIFSIGNALED(status):
            return 128 + os.WTERMSIG(status)
        return os.WEXITSTATUS(status)


class ProcessRuntime:
    """See the module docstring."""

    def __init__(
        self,
        *,
        notify: Callable[[str], None],
        network: PodNetwork,
        state_parent: str | None = None,
        python: str = sys.executable,
    ) -> None:
        # One name for everything of this simulator: the pod network's prefix.
        self.prefix = network.prefix
        self._notify = notify
        self.network = network
        self._state_parent = state_parent or tempfile.gettempdir()
        self.state_dir = os.path.join(self._state_parent, self.prefix)
        self._python = python
        self.cgroups = cgroups_mod.Cgroups.detect(self.prefix)
        self.mount_points = MountPoints(self.state_dir)
        # Where a persistentVolumeClaim's data lives: None resolves claims from the store (PVC -> bound
        # PV -> its hostPath or local directory, tfjob_sim.process.volumes.StoreClaims).
        self.claims: ClaimResolver | None = None
        self._sandboxes: dict[str, SandboxState] = {}
        self._instances: dict[str, list[Instance]] = {}  # pod uid -> its live or unfinished instances
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._stopped = False

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        check_available()
        if self._started:
            raise RuntimeError("ProcessRuntime.start() may only be called once")
        self._started = True
        self._loop = asyncio.get_running_loop()
        swept = sweep_state_dirs(self._state_parent) + self.cgroups.sweep(PREFIX_STEM)
        if swept:
            log.info("removed what dead simulators left behind", paths=swept)
        # The pod network's janitor removes the cgroups and the state directory too if this process dies
        # without stopping: it is started before they exist.
        root = [str(self.cgroups.root)] if self.cgroups.root is not None else []
        await self.network.start(cgroups_on_exit=root, dirs_on_exit=[self.state_dir])
        try:
            os.makedirs(self.state_dir, mode=0o711)
            self.cgroups.start()
        except BaseException:
            await self.stop()
            raise
        log.info("process runtime started", prefix=self.prefix, cgroups=self.cgroups.description)

    async def stop(self) -> None:
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        try:
            for uid in list(self._instances):
                self._kill_pod(uid)
            # Sandbox creations and removals under way finish: cancelled halfway they would leave
            # namespaces behind (the network's stop waits for them too).
            while self._tasks:
                for result in await asyncio.gather(*list(self._tasks), return_exceptions=True):
                    if isinstance(result, BaseException):
                        log.error("a process runtime task failed", error=repr(result))
            states = list(self._sandboxes.values())
            self._sandboxes.clear()
            for uid in list(self._instances):
                await self._reap_pod(uid)
            for state in states:
                if state.volumes is not None:
                    await state.volumes.remove()
        finally:
            try:
                self.cgroups.stop()
                errors = self.mount_points.release_all() + remove_state_dir(self.state_dir)
                for error in errors:
                    log.warning("the process runtime could not remove everything", error=error)
            finally:
                await self.network.stop()  # removes every sandbox, and ends the janitor

    # ---------------------------------------------------------------- sandboxes

    def sandbox(self, pod: dict) -> SandboxState:
        """The pod's sandbox state; the first call starts creating it."""
        meta = pod.get("metadata") or {}
        uid = meta["uid"]
        state = self._sandboxes.get(uid)
        if state is not None:
            return state
        state = SandboxState(uid)
        self._sandboxes[uid] = state
        spec = pod.get("spec") or {}
        self._spawn_task(
            self._create_sandbox(
                state,
                PodVolumes(pod, os.path.join(self.state_dir, "pods", uid)),
                meta.get("namespace") or "",
                meta.get("name", ""),
                spec.get("hostname") or None,
                spec.get("subdomain") or None,
            )
        )
        return state

    async def _create_sandbox(
        self,
        state: SandboxState,
        volumes: PodVolumes,
        namespace: str,
        name: str,
        hostname: str | None,
        subdomain: str | None,
    ) -> None:
        created = False
        try:
            await volumes.create(python=self._python, prefix=self.prefix)
            created = True
            sandbox = await self.network.create_sandbox(namespace, name, state.uid, hostname, subdomain)
        except Exception as exc:
            log.warning("pod sandbox creation failed", pod=f"{namespace}/{name}", error=str(exc))
            state.error = str(exc) or type(exc).__name__
            if created:
                await volumes.remove()
        else:
            if self._sandboxes.get(state.uid) is state:
                state.volumes = volumes
                state.sandbox = sandbox
            else:  # the pod went away meanwhile
                await self._remove_sandbox(sandbox)
                await volumes.remove()
        self._notify(state.uid)

    def retry_sandbox(self, uid: str) -> None:
        """Forget a failed sandbox so that the next :meth:`sandbox` call creates it again."""
        state = self._sandboxes.get(uid)
        if state is not None and state.error is not None:
            del self._sandboxes[uid]

    def release_sandbox(self, uid: str) -> None:
        """Remove the pod's sandbox (its network namespace and address) in the background."""
        state = self._sandboxes.pop(uid, None)
        if state is None or self._stopped:
            return
        # A creation under way is not cancelled (halfway it could leave a namespace behind): it
        # finishes, finds the pod gone and removes what it made.
        if state.sandbox is not None:
            self._spawn_task(self._remove_sandbox(state.sandbox))
        if state.volumes is not None:
            self._spawn_task(self._remove_volumes(uid, state.volumes))

    async def _remove_volumes(self, uid: str, volumes: PodVolumes) -> None:
        """Once the pod's processes are gone: end its mount namespace, remove its volumes' directories
        and the mount points only it used."""
        deadline = time.monotonic() + REAP_SECONDS
        while time.monotonic() < deadline:
            if all(i.exit_status is not None for i in self._instances.get(uid, ())):
                break
            await asyncio.sleep(0.005)  # the exits arrive through the event loop (pidfd readers)
        try:
            await volumes.remove()
        finally:
            for error in self.mount_points.release(uid):
                log.warning("a mount point of a removed pod stays", pod_uid=uid, error=error)

    def volumes(self, uid: str) -> PodVolumes | None:
        """The pod's volumes, once its sandbox is ready."""
        state = self._sandboxes.get(uid)
        return state.volumes if state is not None else None

    async def _remove_sandbox(self, sandbox: Any) -> None:
        try:
            await self.network.remove_sandbox(sandbox)
        except Exception:
            log.exception("pod sandbox removal failed", sandbox=getattr(sandbox, "name", None))

    def _spawn_task(self, coro: Any) -> asyncio.Task:
        loop = self._loop or asyncio.get_running_loop()
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---------------------------------------------------------------- processes

    def spawn(self, uid: str, container: str, container_id: str, spec: LaunchSpec, sandbox: Any) -> Instance:
        """Start one container instance; raises OSError when not even the helper could start."""
        if not self._started or self._stopped:
            raise RuntimeError("the process runtime is not running")
        loop = self._loop
        assert loop is not None
        number = container_id.rsplit("/", 1)[-1][:12]
        state = self._sandboxes.get(uid)
        mount_ns = state.volumes.mount_ns if state is not None and state.volumes is not None else None
        targets = [m.target for m in spec.mounts]
        for mount in spec.mounts:
            # A mountPath inside another mount of the container is made by the helper, in that volume.
            if not any(mount.target.startswith(t.rstrip("/") + "/") for t in targets if t != mount.target):
                self.mount_points.acquire(uid, mount.target, mount.is_file)
        cgroup = self.cgroups.create(f"{uid}_{container}_{number}", spec.memory_limit)
        log_path = os.path.join(self.state_dir, f"{uid}_{container}_{number}.log")
        status_r, status_w = os.pipe2(os.O_CLOEXEC)
        launch = {
            "argv": spec.argv,
            "status_fd": status_w,
            "parent": os.getpid(),
            "netns": getattr(sandbox, "netns", None),
            "mntns_fd": mount_ns.fd if mount_ns is not None else None,
            "mounts": [m.to_json() for m in spec.mounts],
            "etc_dir": getattr(sandbox, "etc_dir", None),
            "hostname": spec.hostname,
            "cgroups": cgroup.procs_files() if cgroup is not None else [],
            "uid": spec.uid,
            "gid": spec.gid,
            "groups": list(spec.groups),
            "cwd": spec.cwd,
        }
        try:
            popen = subprocess.Popen(
                [self._python, "-I", "-S", LAUNCH, json.dumps(launch)],
                env=spec.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w,) if mount_ns is None else (status_w, mount_ns.fd),
                cwd="/",
            )
        except BaseException:
            os.close(status_r)
            if cgroup is not None:
                cgroup.remove()
            raise
        finally:
            os.close(status_w)
        assert popen.stdout is not None and popen.stderr is not None
        instance = Instance(
            uid=uid,
            container=container,
            container_id=container_id,
            pid=popen.pid,
            log=ProcessLog(container_id, log_path),
            cgroup=cgroup,
            popen=popen,
            started_wall=time.time(),
        )
        self._instances.setdefault(uid, []).append(instance)
        instance.status_fd = status_r
        instance.pidfd = os.pidfd_open(popen.pid)
        instance.streams = [popen.stdout, popen.stderr]
        os.set_blocking(status_r, False)
        loop.add_reader(status_r, self._on_status, instance)
        for stream in instance.streams:
            os.set_blocking(stream.fileno(), False)
            loop.add_reader(stream.fileno(), self._drain, instance, stream)
        loop.add_reader(instance.pidfd, self._on_exit, instance)
        return instance

    def _on_status(self, instance: Instance) -> None:
        fd = instance.status_fd
        if fd is None:
            return
        try:
            data = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            instance.status_text += data
            return
        self._unwatch(fd)
        os.close(fd)
        instance.status_fd = None
        if instance.status_text:  # the helper said why it could not exec (and exits 128)
            instance.start_error = instance.status_text.decode(errors="replace").strip()
        else:  # EOF without a word: the exec closed the pipe (or the helper was killed first)
            instance.started = True
        self._notify(instance.uid)

    def _drain(self, instance: Instance, stream: Any) -> None:
        """Read what the pipe holds into the log; at EOF close it."""
        if stream not in instance.streams:
            return
        fd = stream.fileno()
        for _ in range(DRAIN_READS):  # a writer that never pauses must not starve the event loop
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._unwatch(fd)
                stream.close()
                instance.streams.remove(stream)
                return
            instance.log.append(data)

    def _on_exit(self, instance: Instance) -> None:
        if instance.pidfd is None:
            return
        try:
            pid, status = os.waitpid(instance.pid, os.WNOHANG)
        except ChildProcessError:
            pid, status = instance.pid, 0x7F00  # reaped elsewhere: report it as exited 127
        if pid == 0:
            return  # not yet (spurious wake-up)
        self._unwatch(instance.pidfd)
        os.close(instance.pidfd)
        instance.pidfd = None
        instance.exit_status = status
        instance.exited_wall = time.time()
        # Popen must not wait for (or reap) this pid again.
        instance.popen.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self._notify(instance.uid)

    def _unwatch(self, fd: int) -> None:
        if self._loop is not None:
            self._loop.remove_reader(fd)

    def finish(self, instance: Instance) -> None:
        """After the exit: kill what the container left running, take the rest of its output, end
        its log, remove its cgroup (the log stays readable until :meth:`drop_log`)."""
        if instance.finished:
            return
        instance.finished = True
        if instance.cgroup is not None:
            instance.oom_kills = instance.cgroup.oom_kills()
            instance.cgroup.kill()
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(instance.pid, signal.SIGKILL)
        for stream in list(instance.streams):
            self._drain(instance, stream)  # what the pipe holds now
            if stream in instance.streams:  # still open: something kept it; stop reading it
                self._unwatch(stream.fileno())
                stream.close()
                instance.streams.remove(stream)
        if instance.status_fd is not None:
            self._on_status(instance)
        instance.log.end(instance.exited_wall)
        if instance.cgroup is not None and not instance.cgroup.remove(wait=False):
            self._spawn_task(self._remove_cgroup(instance.cgroup))

    async def _remove_cgroup(self, group: cgroups_mod.ContainerCgroup) -> None:
        """Killed processes leave their cgroup once the kernel has finished them: retry briefly."""
        deadline = time.monotonic() + CGROUP_REMOVE_SECONDS
        while not group.remove(wait=False):
            if time.monotonic() > deadline:
                log.warning(
                    "a container cgroup stays busy; it is removed when the simulator stops", path=str(group.path)
                )
                return
            await asyncio.sleep(0.01)

    def drop_log(self, instance: Instance) -> None:
        """Forget an instance for good (its log file too); it must have exited."""
        self.finish(instance)
        instance.log.close()
        instances = self._instances.get(instance.uid)
        if instances is not None and instance in instances:
            instances.remove(instance)
            if not instances:
                del self._instances[instance.uid]

    def _kill_pod(self, uid: str) -> None:
        for instance in self._instances.get(uid, ()):
            instance.signal(signal.SIGKILL)

    def forget(self, uid: str) -> None:
        """The pod is gone: kill its processes, drop its logs and cgroups, remove its sandbox."""
        self._kill_pod(uid)
        self.release_sandbox(uid)
        if self._instances.get(uid):
            self._spawn_task(self._reap_pod(uid))

    async def _reap_pod(self, uid: str) -> None:
        """Wait (briefly) for SIGKILLed processes to be reaped, then release them."""
        deadline = time.monotonic() + 10.0
        for instance in list(self._instances.get(uid, ())):
            while instance.exit_status is None and time.monotonic() < deadline:
                self._on_exit(instance)
                if instance.exit_status is None:
                    await asyncio.sleep(0.005)
            if instance.exit_status is None:
                log.warning("a killed container process did not exit", pid=instance.pid)
                continue
            self.drop_log(instance)

    def instances(self, uid: str) -> list[Instance]:
        return list(self._instances.get(uid, ()))
