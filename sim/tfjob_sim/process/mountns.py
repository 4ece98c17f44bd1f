"""The holder of a pod's mount namespace: a process that creates it, mounts the pod's memory-backed
volumes in it, and keeps it alive for the pod's containers to join.

Why a process: a mount namespace lives as long as a process (or an open descriptor) refers to it, and
only a single-threaded process may create or enter one (the simulator has threads). The runtime starts
``python -I -S mountns.py PREFIX UID SPEC`` (the prefix and the pod uid in the command line name it
for ``ps`` and for the leftovers check), and this program:

1. sets ``PR_SET_PDEATHSIG(SIGKILL)``: it dies with the simulator, even a SIGKILLed one;
2. ``unshare(CLONE_NEWNS)`` and makes every mount private, so that nothing mounted here propagates to
   this machine's tree (and nothing mounted there later shows up here);
3. mounts a tmpfs on each directory of ``SPEC["tmpfs"]`` (``{"path": ..., "size": bytes or null}``):
   ``emptyDir`` with ``medium: Memory``, and the secret and projected volumes kubelet also keeps in memory;
4. writes ``ready`` and a newline to stdout (or one line saying what failed, and exits 1);
5. waits for end of file on stdin, the pipe from the runtime: it comes when the runtime removes the pod's
   volumes, or when the simulator exits in any way. Then it exits, and once the pod's containers are
   gone too the kernel dismantles the namespace and every mount in it.

``SPEC["parent"]`` is the runtime's pid: if the runtime is already gone when the death signal is set,
it exits at once. Only the standard library is used (``-I -S``: no site, no package imports).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

CLONE_NEWNS = 0x00020000
MS_NOSUID = 2
MS_NODEV = 4
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def prepare(spec: dict) -> None:
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    parent = spec.get("parent")
    if parent is not None and os.getppid() != parent:
        raise OSError(0, "the simulator exited while the mount namespace was being created")
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _check(_libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "make / private")
    for tmpfs in spec.get("tmpfs") or ():
        path = tmpfs["path"]
        options = f"size={int(tmpfs['size'])}" if tmpfs.get("size") is not None else ""
        _check(
            _libc.mount(b"tmpfs", path.encode(), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), options.encode()),
            f"mount tmpfs on {path}" + (f" ({options})" if options else ""),
        )


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: mountns.py PREFIX UID SPEC-JSON", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the simulator is not for us
    try:
        prepare(json.loads(argv[3]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
        try:
            sys.stdout.write(f"{text}\n")
            sys.stdout.flush()
        except OSError:
            pass  # the runtime is gone: nobody to tell
        return 1
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while sys.stdin.buffer.read(4096):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
