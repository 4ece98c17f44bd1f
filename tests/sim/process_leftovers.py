"""What a process-runtime simulator with a given prefix left behind, for tests to assert it is nothing.

``leftovers(prefix)`` lists, one line each: named network namespaces and /etc/netns dirs whose name
starts with ``<prefix>-``, links of the host's network namespace whose name contains the prefix, and
live processes that are inside one of the prefix's namespaces or carry the prefix in their command
line (the janitor child, anything started with the prefix as an argument). Empty means clean.

``host_network_snapshot()`` is the host namespace's links, addresses and routes as `ip` prints them,
to compare before and after: the simulator must never change them.
"""

from __future__ import annotations

import os
import re
import subprocess

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


def leftovers(prefix: str) -> list[str]:
    """Everything still present that the simulator with ``prefix`` created (see the module docstring)."""
    if not prefix.startswith("tfsim"):
        raise ValueError(f"not a simulator prefix: {prefix!r}")
    found = [f"netns {name}" for name in _listdir(NETNS_DIR) if _owned(name, prefix)]
    found += [f"{ETC_NETNS_DIR}/{name}" for name in _listdir(ETC_NETNS_DIR) if _owned(name, prefix)]
    found += [f"host link {name}" for name in _listdir("/sys/class/net") if _mentions(name, prefix)]
    found += _processes(prefix)
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
