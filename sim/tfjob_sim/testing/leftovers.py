"""What a process-runtime simulator with a given prefix left behind, for tests to assert it is nothing.

``leftovers(prefix)`` lists, one line each: named network namespaces and /etc/netns dirs whose name
starts with ``<prefix>-``, links of the host's network namespace whose name contains the prefix, and
live processes that are inside one of the prefix's namespaces or carry the prefix in their command
line (the janitor child, the pods' mount namespace holders, anything started with the prefix as an
argument), and mounts of this process's mount namespace (/proc/self/mountinfo) whose mount point or
root names the prefix (a pod's volume that escaped its mount namespace; the named network namespaces'
own mounts are the netns lines). Empty means clean.

The process runtime's part: processes in the prefix's cgroups (the containers' processes and
whatever they forked, even in another session), the prefix's cgroup directories (under this
process's own cgroups, where a simulator it starts creates them) and its state directory (logs) in
the temp directory. ``runtime_processes(prefix)`` lists the pids in its cgroups, ``janitors(prefix)``
the pids of its janitor processes.

``host_network_snapshot()`` is the host namespace's links, addresses and routes as `ip` prints them,
to compare before and after: the simulator must never change them.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
NETNS_DIR = "/run/netns"
ETC_NETNS_DIR = "/etc/netns"


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def _owned(name: str, prefix: str) -> bool:
    return name.startswith(prefix + "-")


def _mentions(text: str, prefix: str) -> bool:
    """Whether ``text`` contains ``prefix`` as a whole name part (tfsim1-1 is not in tfsim1-10)."""
    return re.search(rf"(?<![0-9A-Za-z]){re.escape(prefix)}(?![0-9A-Za-z])", text) is not None


def _netns_identities(prefix: str) -> dict[tuple[int, int], str]:
    identities = {}
    for name in _listdir(NETNS_DIR):
        if _owned(name, prefix):
            try:
                st = os.stat(os.path.join(NETNS_DIR, name))
            except OSError:
                continue
            identities[(st.st_dev, st.st_ino)] = name
    return identities


def _processes(prefix: str) -> list[str]:
    identities = _netns_identities(prefix)
    found = []
    for entry in _listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue  # exited meanwhile, or a kernel thread
        if state == "Z":
            continue  # a zombie holds no resource but its pid; its parent reaps it
        netns = identities.get((st.st_dev, st.st_ino))
        if netns is not None:
            found.append(f"process {entry} in netns {netns}: {' '.join(argv)}")
        elif any(_mentions(arg, prefix) for arg in argv):
            found.append(f"process {entry}: {' '.join(argv)}")
    return found


def _mounts(prefix: str) -> list[str]:
    """Mounts of this mount namespace whose mount point or root names the prefix (not /run/netns's)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        root, point = (re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f) for f in fields[3:5])
        if point.startswith(NETNS_DIR + "/"):
            continue
        if _mentions(point, prefix) or _mentions(root, prefix):
            found.append(f"mount {point} (root {root})")
    return found


def leftovers(prefix: str) -> list[str]:
    """Everything still present that the simulator with ``prefix`` created (see the module docstring)."""
    if not prefix.startswith("tfsim"):
        raise ValueError(f"not a simulator prefix: {prefix!r}")
    found = [f"netns {name}" for name in _listdir(NETNS_DIR) if _owned(name, prefix)]
    found += [f"{ETC_NETNS_DIR}/{name}" for name in _listdir(ETC_NETNS_DIR) if _owned(name, prefix)]
    found += [f"host link {name}" for name in _listdir("/sys/class/net") if _mentions(name, prefix)]
    found += _processes(prefix)
    found += _mounts(prefix)
    found += [f"process {pid} in a cgroup of {prefix}" for pid in runtime_processes(prefix)]
    found += [f"cgroup {base / prefix}" for base in _own_cgroup_dirs() if (base / prefix).exists()]
    state = Path(tempfile.gettempdir()) / prefix
    if state.exists():
        found.append(f"state directory {state}")
    return sorted(set(found))


def _own_cgroup_dirs() -> list[Path]:
    """This process's cgroup directories (v1 hierarchies and v2)."""
    out = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else ["unified", ""]:
            base = (CGROUP_ROOT / controller if controller else CGROUP_ROOT) / path.lstrip("/")
            if base.is_dir():
                out.append(base)
    return out


def runtime_processes(prefix: str) -> list[int]:
    """Live processes in the cgroups of ``prefix``."""
    pids = []
    for entry in _listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/cgroup").read_text()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(f"/{prefix}/" in line or line.endswith(f"/{prefix}") for line in text.splitlines()):
            pids.append(int(entry))
    return pids


def janitors(prefix: str) -> list[int]:
    """The janitor process of ``prefix`` (one per simulator, started by its pod network)."""
    found = []
    for entry in _listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "janitor.py" in argv and _mentions(argv, prefix):
                found.append(int(entry))
    return found


def host_network_snapshot() -> str:
    """The host namespace's links, IPv4/IPv6 addresses and routes (all tables), as `ip` prints them."""
    parts = []
    for args in (
        ["-o", "link"],
        ["-o", "addr"],
        ["route", "show", "table", "all"],
        ["-6", "route", "show", "table", "all"],
    ):
        done = subprocess.run(["ip", *args], capture_output=True, text=True, check=True)
        # Lifetimes of DHCP/SLAAC addresses and routes count down by themselves: not a change.
        stable = re.sub(r"(valid_lft|preferred_lft|expires) \S+", r"\1 -", done.stdout)
        parts.append(f"$ ip {' '.join(args)}\n{stable}")
    return "\n".join(parts)


def prefixes_of(pid: int) -> list[str]:
    """The prefixes a process-runtime simulator with this pid uses (from its cgroup directories)."""
    pattern = re.compile(rf"tfsim{pid}-\d+$")
    return sorted({p.name for base in _own_cgroup_dirs() for p in base.iterdir() if pattern.match(p.name)})
