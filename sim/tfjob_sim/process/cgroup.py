"""Container cgroups of the process runtime: memory limits, OOM detection, and killing a container whole.

Why: ``resources.limits.memory`` is only real if the kernel enforces it, and "the container stopped"
only holds if every process it forked stopped too. A cgroup per container instance gives both: the
memory controller kills a process that exceeds the limit (the kubelet then reports ``OOMKilled``),
and the cgroup's member list finds every process of the container, even one that left its process
group.

Contract:
- :meth:`Cgroups.detect` finds what the machine offers: cgroup v1 with a ``memory`` hierarchy
  (``/sys/fs/cgroup/memory``), else cgroup v2 (``/sys/fs/cgroup/unified`` or ``/sys/fs/cgroup``)
  whose memory controller can be enabled below this process's cgroup, else nothing (no limits, no
  membership: :attr:`Cgroups.enforced` says which, and the runtime then kills process groups only).
- Every cgroup lives under ``<this process's own cgroup>/<prefix>``, where the prefix names the
  simulator and its pid (``tfsim<pid>``): nothing global, nothing with a fixed name. Removing that
  directory removes everything; :func:`sweep` removes the directories of prefixes whose pid is dead
  (a simulator that was SIGKILLed), killing what is still inside.
- One :class:`ContainerCgroup` per container instance: :meth:`~ContainerCgroup.procs_files` for the
  exec helper to join, :meth:`~ContainerCgroup.oom_kills` (the kernel's counter), :meth:`~ContainerCgroup.kill`
  (SIGKILL to every member until none is left), :meth:`~ContainerCgroup.remove`.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path

import structlog

from tfjob_sim.process import janitor
from tfjob_sim.process.janitor import pid_alive

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
# How long a blocking removal waits for killed members to leave (at stop and sweep only).
REMOVE_WAIT_SECONDS = 2.0


def _own_cgroup(hierarchy: str) -> str | None:
    """This process's cgroup path in a v1 hierarchy (``"memory"``) or in v2 (``""``)."""
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if (hierarchy == "" and controllers == "") or hierarchy in controllers.split(","):
            return path
    return None


def _is_cgroup2(path: Path) -> bool:
    return (path / "cgroup.controllers").exists()


@dataclass(frozen=True)
class ContainerCgroup:
    path: Path
    v2: bool

    def procs_files(self) -> list[str]:
        return [str(self.path / "cgroup.procs")]

    def members(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def oom_kills(self) -> int:
        """How many processes of this cgroup the kernel's OOM killer has killed."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            text = (self.path / name).read_text()
        except FileNotFoundError:
            return 0
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        return int(match.group(1)) if match else 0

    def kill(self) -> bool:
        """SIGKILL every member until none is left; False if members keep appearing."""
        return _kill_members(self.path)

    def remove(self, wait: bool = True) -> bool:
        """Kill what is left and remove the directory; False if the kernel still holds it (then retry
        later). ``wait``: retry for a while first (blocking)."""
        return _remove_tree(self.path, wait)


class Cgroups:
    """This simulator's cgroup subtree (see the module docstring)."""

    def __init__(self, base: Path | None, v2: bool, prefix: str) -> None:
        self.base = base  # <own cgroup> of the hierarchy used, or None: no cgroups
        self.v2 = v2
        self.prefix = prefix
        self.root = base / prefix if base is not None else None

    @property
    def enforced(self) -> bool:
        return self.root is not None

    @property
    def description(self) -> str:
        if self.root is None:
            return "no usable memory cgroup: memory limits are not enforced"
        return f"cgroup {'v2' if self.v2 else 'v1'} memory controller at {self.root}"

    @classmethod
    def detect(cls, prefix: str, root: Path = CGROUP_ROOT) -> Cgroups:
        memory = root / "memory"
        own = _own_cgroup("memory")
        if (memory / "memory.limit_in_bytes").exists() and own is not None:
            return cls(memory / own.lstrip("/"), False, prefix)
        own2 = _own_cgroup("")
        for mount in (root / "unified", root):
            if own2 is not None and _is_cgroup2(mount):
                base = mount / own2.lstrip("/")
                try:
                    available = (base / "cgroup.controllers").read_text().split()
                except OSError:
                    continue
                if "memory" in available:
                    return cls(base, True, prefix)
        return cls(None, False, prefix)

    def start(self) -> None:
        """Create this simulator's directory (and, on v2, delegate the memory controller to it)."""
        if self.root is None:
            return
        self.root.mkdir(exist_ok=True)
        if self.v2:
            # A v2 cgroup gives a controller to its children only through cgroup.subtree_control.
            for directory in (self.base, self.root):
                assert directory is not None
                try:
                    (directory / "cgroup.subtree_control").write_text("+memory")
                except OSError as exc:
                    log.warning("cannot delegate the memory controller; limits not enforced", error=str(exc))
                    self._disable()
                    return

    def _disable(self) -> None:
        if self.root is not None:
            _remove_tree(self.root)
        self.root = None

    def create(self, name: str, memory_limit: int | None) -> ContainerCgroup | None:
        """A fresh cgroup for one container instance, with its memory limit (bytes) if any."""
        if self.root is None:
            return None
        path = self.root / name
        if path.exists():
            _remove_tree(path)
        path.mkdir()
        group = ContainerCgroup(path, self.v2)
        if memory_limit is not None:
            try:
                if self.v2:
                    (path / "memory.max").write_text(str(memory_limit))
                    with contextlib.suppress(FileNotFoundError):  # no swap accounting: nothing to cap
                        (path / "memory.swap.max").write_text("0")
                else:
                    (path / "memory.limit_in_bytes").write_text(str(memory_limit))
                    # Memory+swap at the same value: the limit cannot be escaped by swapping.
                    with contextlib.suppress(FileNotFoundError):
                        (path / "memory.memsw.limit_in_bytes").write_text(str(memory_limit))
            except OSError:
                _remove_tree(path)
                raise
        return group

    def stop(self) -> bool:
        """Kill every process in this simulator's cgroups and remove them all."""
        if self.root is None:
            return True
        return _remove_tree(self.root)

    def sweep(self, stem: str) -> list[str]:
        """Remove the cgroup trees of simulators named ``<stem><pid>-<n>`` whose pid is dead."""
        if self.base is None:
            return []
        return sweep(self.base, stem)


def sweep(base: Path, stem: str) -> list[str]:
    removed = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return []
    pattern = re.compile(re.escape(stem) + r"(\d+)-\d+$")
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or not entry.is_dir() or pid_alive(int(match.group(1))):
            continue
        if _remove_tree(entry):
            removed.append(str(entry))
    return removed


def _kill_members(path: Path) -> bool:
    return janitor.kill_cgroup_members(str(path))


def _remove_tree(path: Path, wait: bool = True) -> bool:
    """Kill the members of ``path`` and its descendants, then rmdir bottom-up; with ``wait``, retry
    for up to 2 s while the kernel still holds a killed process's cgroup."""
    return janitor.remove_cgroup_tree(
        str(path),
        REMOVE_WAIT_SECONDS if wait else 0.0,
        lambda where, exc: log.warning("cannot remove cgroup", path=where, error=str(exc)),
    )
