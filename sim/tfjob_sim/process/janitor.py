"""Removes what a simulator's process runtime left behind: network namespaces, /etc/netns dirs, cgroups
(killing their processes first), its state directory and the mount points it created for volumes.

Why a separate, standard-library-only module: the same code runs in the simulator and in a janitor
child. ``PodNetwork.stop()`` calls :func:`cleanup` last, so a half-built sandbox cannot survive it;
``PodNetwork.start()`` calls :func:`sweep_stale` for simulators that died without stopping (their pid is
gone), and the cgroup module kills and removes cgroups with :func:`remove_cgroup_tree`. The *janitor*
is this file run as a script (``python -I -S janitor.py PREFIX [--cgroup DIR] [--dir DIR]``, no
package import, so it starts fast and needs no PYTHONPATH), one per simulator, started by
``PodNetwork.start()`` in a session of its own: when its stdin, a pipe from the simulator, reaches end
of file (the simulator exited, even by SIGKILL, which runs no code of its own) it kills and removes
the ``--cgroup`` trees, removes the ``--dir`` directories (:func:`remove_state_dir`: first the mount
points the runtime recorded there, see below) and calls :func:`cleanup`. A named network
namespace is a bind mount under /run/netns; it keeps the namespace, its veth pairs and its addresses
alive after every process in it is gone, so someone must unmount it; a cgroup and a directory outlive
every process too.

Volumes: every mount of a pod's volumes lives in the pod's own mount namespaces, which the kernel
dismantles when their last process exits, so nothing mounted stays behind in this machine's tree. What
the runtime does change there is the directories (or empty files) it creates for a ``mountPath`` that
did not exist: it records them in ``mountpoints.json`` in its state directory before creating them, and
:func:`remove_state_dir` removes those that are still what was created (an empty directory, an empty
regular file; never through a symlink) before the state directory itself, after detaching (lazily) any
mount that is found below the state directory.

Names: every namespace and /etc/netns dir of one PodNetwork starts with its prefix
``tfsim<pid>-<n>-`` (pid of the simulator, n counts PodNetworks in that process), which is how the
sweep knows whose they are and whether their owner still lives.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable

NETNS_DIR = "/run/netns"  # where `ip netns add` puts its bind mounts
ETC_NETNS_DIR = "/etc/netns"  # per-namespace files `ip netns exec` mounts over /etc (resolv.conf, hosts)
PREFIX_RE = re.compile(r"^tfsim(\d+)-\d+$")
_OWNED_RE = re.compile(r"^(tfsim\d+-\d+)-")
# The process runtime's record of the mount points it created (in its state directory).
MOUNT_POINTS_FILE = "mountpoints.json"
MNT_DETACH = 2
# How many rounds of SIGKILL a cgroup gets before it is reported busy (a fork bomb racing the kill).
KILL_ROUNDS = 50


def owned(name: str, prefix: str) -> bool:
    return name.startswith(prefix + "-")


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def _netns_identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_in_netns(path: str) -> list[int]:
    """Processes whose network namespace is the one mounted at ``path`` (what `ip netns pids` reports)."""
    identity = _netns_identity(path)
    if identity is None:
        return []
    found = []
    for entry in _listdir("/proc"):
        if entry.isdigit():
            try:
                st = os.stat(f"/proc/{entry}/ns/net")
            except OSError:
                continue  # exited meanwhile, or a kernel thread
            if (st.st_dev, st.st_ino) == identity:
                found.append(int(entry))
    return found


def kill_netns_processes(path: str) -> list[int]:
    """SIGKILL every process still inside the namespace at ``path``; the pids killed."""
    killed = []
    for pid in pids_in_netns(path):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except ProcessLookupError:
            pass  # exited meanwhile: what we wanted
    return killed


def delete_netns(name: str) -> str | None:
    """`ip netns del NAME`; an error message, or None when it is gone (also when it was already gone)."""
    path = os.path.join(NETNS_DIR, name)
    if not os.path.exists(path):
        return None
    kill_netns_processes(path)
    done = subprocess.run(["ip", "netns", "del", name], capture_output=True, text=True, check=False)
    if done.returncode != 0 and os.path.exists(path):
        return f"ip netns del {name}: {done.stderr.strip()}"
    return None


def cleanup(prefix: str) -> list[str]:
    """Remove every named namespace and /etc/netns dir of ``prefix``; the errors (empty: all gone)."""
    errors = []
    for name in _listdir(NETNS_DIR):
        if owned(name, prefix):
            error = delete_netns(name)
            if error:
                errors.append(error)
    for name in _listdir(ETC_NETNS_DIR):
        if owned(name, prefix):
            try:
                shutil.rmtree(os.path.join(ETC_NETNS_DIR, name))
            except FileNotFoundError:
                pass
            except OSError as exc:
                errors.append(f"rm -r {ETC_NETNS_DIR}/{name}: {exc}")
    return errors


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """cleanup() every prefix whose simulator process is gone; the errors."""
    prefixes = set()
    for directory in (NETNS_DIR, ETC_NETNS_DIR):
        for name in _listdir(directory):
            match = _OWNED_RE.match(name)
            if match:
                prefixes.add(match.group(1))
    errors = []
    for prefix in sorted(prefixes):
        match = PREFIX_RE.match(prefix)
        if match and not pid_alive(int(match.group(1))):
            errors.extend(cleanup(prefix))
    return errors


def kill_cgroup_members(path: str) -> bool:
    """SIGKILL every process of the cgroup at ``path`` until none is left; False if members keep appearing."""
    kill_file = os.path.join(path, "cgroup.kill")  # v2, Linux >= 5.14: the kernel kills every member at once
    if os.path.exists(kill_file):
        try:
            with open(kill_file, "w") as f:
                f.write("1")
        except OSError:
            pass  # the rounds below do it
    for _ in range(KILL_ROUNDS):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            return True
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # exited meanwhile
    return False


def remove_cgroup_tree(path: str, wait: float, on_error: Callable[[str, OSError], None] | None = None) -> bool:
    """Kill the members of the cgroup ``path`` and its descendants, then rmdir bottom-up. A killed process
    leaves its cgroup only once the kernel has finished it: retry for up to ``wait`` seconds. False if
    something stays; ``on_error`` hears of errors other than "busy"."""
    if not os.path.isdir(path):
        return True
    ok = True
    for entry in _listdir(path):
        child = os.path.join(path, entry)
        if os.path.isdir(child) and not os.path.islink(child):
            ok = remove_cgroup_tree(child, wait, on_error) and ok
    deadline = time.monotonic() + wait
    while True:
        kill_cgroup_members(path)
        try:
            os.rmdir(path)
            return ok
        except FileNotFoundError:
            return ok
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                if on_error is not None:
                    on_error(path, exc)
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)


def _unescape(field: str) -> str:
    """A path as /proc/self/mountinfo writes it (space, tab, newline and backslash as octal escapes)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mounts() -> list[tuple[str, str]]:
    """(root within its filesystem, mount point) of every mount of this process's mount namespace."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 5:
            found.append((_unescape(fields[3]), _unescape(fields[4])))
    return found


def mounts_under(directory: str) -> list[str]:
    """Mount points at or below ``directory`` in this mount namespace, deepest first."""
    base = directory.rstrip("/")
    found = {point for _, point in mounts() if point == base or point.startswith(base + "/")}
    return sorted(found, key=lambda p: (-p.count("/"), p))


def unmount_lazily(path: str) -> str | None:
    """umount2(path, MNT_DETACH); an error message, or None when it is unmounted."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(path.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
            return None
        return f"umount {path}: {os.strerror(err)}"
    return None


def remove_created(path: str, kind: str) -> str | None:
    """Remove ``path`` if it is still what the runtime created (kind "dir": an empty directory, "file": an
    empty regular file), never following a symlink; an error message when it stays for another reason."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    try:
        if kind == "dir" and stat.S_ISDIR(st.st_mode):
            os.rmdir(path)
        elif kind == "file" and stat.S_ISREG(st.st_mode) and st.st_size == 0:
            os.unlink(path)
        else:
            return f"{path} was created as a mount point but is now something else: left in place"
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENOTEMPTY:
            return f"{path} was created as a mount point but is not empty now: left in place"
        return f"{path}: {exc.strerror}"
    return None


def read_mount_points(state_dir: str) -> list[tuple[str, str]]:
    """The (path, kind) records of ``mountpoints.json`` in ``state_dir``, in the order they were created."""
    try:
        with open(os.path.join(state_dir, MOUNT_POINTS_FILE)) as f:
            records = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return []  # a torn file cannot be: it is replaced by rename; unreadable: nothing to go by
    return [
        (r["path"], r["kind"])
        for r in records
        if isinstance(r, dict) and isinstance(r.get("path"), str) and r.get("kind") in ("dir", "file")
    ]


def remove_tree(path: str) -> list[str]:
    """Remove a directory the runtime made: any mount below it detached (lazily) first, never descending
    into a filesystem still mounted there, never following a symlink (shutil.rmtree works on descriptors
    on Linux); the errors (empty: all gone)."""
    errors = []
    for point in mounts_under(path):
        error = unmount_lazily(point)
        if error:
            errors.append(error)
    if mounts_under(path):
        return [*errors, f"{path} still has mounts below it: not removed"]

    def failed(_function: object, where: str, exc_info: tuple) -> None:
        if os.path.lexists(where):
            errors.append(f"rm -r {where}: {exc_info[1]}")

    shutil.rmtree(path, onerror=failed)
    return errors


def remove_state_dir(path: str) -> list[str]:
    """Remove a runtime's state directory: the mount points it recorded (children before parents), then
    the directory itself (:func:`remove_tree`). The errors (empty: all gone)."""
    if not os.path.isdir(path) or os.path.islink(path):
        return []
    errors = []
    for created, kind in reversed(read_mount_points(path)):
        error = remove_created(created, kind)
        if error:
            errors.append(error)
    return errors + remove_tree(path)


def main(argv: list[str]) -> int:
    """Janitor: wait for end of file on stdin (the simulator is gone or stopped), then clean up."""
    usage = f"usage: {argv[0]} tfsim<pid>-<n> [--cgroup DIR] [--dir DIR]"
    if len(argv) < 2 or not PREFIX_RE.match(argv[1]) or len(argv) % 2:
        print(usage, file=sys.stderr)
        return 2
    paths = list(zip(argv[2::2], argv[3::2], strict=True))
    if any(kind not in ("--cgroup", "--dir") for kind, _ in paths):
        print(usage, file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the simulator is not for us
    while sys.stdin.buffer.read(4096):
        pass
    errors = []
    for kind, path in paths:  # cgroups first: what runs in them dies before its namespace goes
        if kind == "--cgroup" and not remove_cgroup_tree(path, 5.0):
            errors.append(f"cannot remove cgroup {path}")
        elif kind == "--dir":
            errors += remove_state_dir(path)
    errors += cleanup(argv[1])
    for error in errors:
        try:
            print(f"tfsim janitor: {error}", file=sys.stderr)
        except OSError:
            break  # nobody reads our stderr any more
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
