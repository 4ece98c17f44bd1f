"""Removes what a simulator's process runtime left behind: network namespaces, /etc/netns dirs, cgroups
(killing their processes first) and its state directory.

Why a separate, standard-library-only module: the same code runs in the simulator and in a janitor
child. ``PodNetwork.stop()`` calls :func:`cleanup` last, so a half-built sandbox cannot survive it;
``PodNetwork.start()`` calls :func:`sweep_stale` for simulators that died without stopping (their pid is
gone), and the cgroup module kills and removes cgroups with :func:`remove_cgroup_tree`. The *janitor*
is this file run as a script (``python -I -S janitor.py PREFIX [--cgroup DIR] [--dir DIR]``, no
package import, so it starts fast and needs no PYTHONPATH), one per simulator, started by
``PodNetwork.start()`` in a session of its own: when its stdin, a pipe from the simulator, reaches end
of file (the simulator exited, even by SIGKILL, which runs no code of its own) it kills and removes
the ``--cgroup`` trees, removes the ``--dir`` directories and calls :func:`cleanup`. A named network
namespace is a bind mount under /run/netns; it keeps the namespace, its veth pairs and its addresses
alive after every process in it is gone, so someone must unmount it; a cgroup and a directory outlive
every process too.

Names: every namespace and /etc/netns dir of one PodNetwork starts with its prefix
``tfsim<pid>-<n>-`` (pid of the simulator, n counts PodNetworks in that process), which is how the
sweep knows whose they are and whether their owner still lives.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable

NETNS_DIR = "/run/netns"  # where `ip netns add` puts its bind mounts
ETC_NETNS_DIR = "/etc/netns"  # per-namespace files `ip netns exec` mounts over /etc (resolv.conf, hosts)
PREFIX_RE = re.compile(r"^tfsim(\d+)-\d+$")
_OWNED_RE = re.compile(r"^(tfsim\d+-\d+)-")
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
            shutil.rmtree(path, ignore_errors=True)
    errors += cleanup(argv[1])
    for error in errors:
        try:
            print(f"tfsim janitor: {error}", file=sys.stderr)
        except OSError:
            break  # nobody reads our stderr any more
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
