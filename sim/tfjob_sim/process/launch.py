"""The exec helper of the process runtime: turns itself into one container's process.

Why a separate program: entering a network namespace, unsharing a mount namespace, joining cgroups
and dropping credentials must happen in the child between fork and exec. Doing that in a
``preexec_fn`` of the simulator is unsafe (the simulator has threads), so the runtime starts
``python -I -S launch.py SPEC`` with the container's environment, and this program prepares itself
and execs the container's command in place: the process the runtime waits for *is* the container's
process, its exit status is the container's.

SPEC is one JSON object (argv[1]):

``argv``        the command and its arguments (required, non-empty)
``status_fd``   a pipe inherited from the runtime: nothing is written to it when the exec succeeds
                (it is close-on-exec, so the runtime reads EOF); on a failure one line of text
                saying what failed, and the helper exits with code 128
``parent``      the runtime's pid: if it is gone when the death signal is set, exit at once
``netns``       path of a network namespace to enter (setns), or null: stay in the current one
``etc_dir``     directory whose ``resolv.conf`` and ``hosts`` are bind-mounted over ``/etc`` in a
                private mount namespace (null: no private mounts)
``hostname``    the pod's hostname, set in a private UTS namespace (null: keep the host's)
``cgroups``     ``cgroup.procs`` files this process writes its pid to (the container's cgroups)
``uid``, ``gid``, ``groups``  credentials to take (null: keep root's)
``cwd``         working directory (null: stay where the runtime started the helper)

Order (each step needs the privileges the next one drops): setns -> unshare(mount, UTS) ->
mounts, hostname -> cgroups -> credentials -> PR_SET_PDEATHSIG(SIGKILL) (credential changes clear
it, so it comes after them) -> setsid -> chdir -> exec. Only the standard library is used: this
runs before every container start and must start fast.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import sys
import warnings  # noqa: F401  os.execvpe imports it lazily, perhaps after credentials lost the stdlib

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWNET = 0x40000000
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
PR_SET_PDEATHSIG = 1
# What the kubelet reports for a container whose process could not be started (containerd: StartError).
START_ERROR_EXIT_CODE = 128

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns({path})")
    finally:
        os.close(fd)


def _bind(source: str, target: str) -> None:
    _check(
        _libc.mount(source.encode(), target.encode(), None, ctypes.c_ulong(MS_BIND), None),
        f"bind mount {source} on {target}",
    )


def prepare(spec: dict) -> None:
    """Every step before exec; raises OSError (with what failed) on the first failure."""
    if spec.get("netns"):
        _setns(spec["netns"])
    flags = (CLONE_NEWNS if spec.get("etc_dir") else 0) | (CLONE_NEWUTS if spec.get("hostname") else 0)
    if flags:
        _check(_libc.unshare(flags), "unshare")
    if spec.get("etc_dir"):
        # Stop mount propagation to the host before mounting anything.
        _check(
            _libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None),
            "make / private",
        )
        for name in ("resolv.conf", "hosts"):
            source = os.path.join(spec["etc_dir"], name)
            if os.path.exists(source):
                _bind(source, "/etc/" + name)
    if spec.get("hostname"):
        name = spec["hostname"].encode()
        _check(_libc.sethostname(name, ctypes.c_size_t(len(name))), "sethostname")
    pid = str(os.getpid())
    for procs in spec.get("cgroups") or ():
        try:
            with open(procs, "w") as f:
                f.write(pid)
        except OSError as exc:
            raise OSError(exc.errno, f"joining cgroup {os.path.dirname(procs)}: {exc.strerror}") from None
    uid, gid = spec.get("uid"), spec.get("gid")
    if uid is not None or gid is not None:
        groups = [g for g in spec.get("groups") or () if isinstance(g, int)]
        if gid is not None:
            groups = [gid, *[g for g in groups if g != gid]]
            os.setgroups(groups)
            os.setresgid(gid, gid, gid)
        elif uid is not None:
            os.setgroups(groups)
        if uid is not None:
            os.setresuid(uid, uid, uid)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    parent = spec.get("parent")
    if parent is not None and os.getppid() != parent:
        raise OSError(0, "the simulator exited while the container was starting")
    os.setsid()
    if spec.get("cwd"):
        try:
            os.chdir(spec["cwd"])
        except OSError as exc:
            raise OSError(
                exc.errno, f'chdir to cwd ("{spec["cwd"]}") set in config.json failed: {exc.strerror}'
            ) from None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: launch.py SPEC-JSON", file=sys.stderr)
        return 2
    spec = json.loads(argv[1])
    status_fd = spec.get("status_fd")
    if status_fd is not None:
        os.set_inheritable(status_fd, False)  # closed by a successful exec: the runtime reads EOF
    command = spec["argv"]
    try:
        prepare(spec)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # Python ignores it; programs expect the default
        os.execvpe(command[0], command, os.environ)
    except Exception as exc:  # every failure is reported to the runtime as the container's start error
        if not isinstance(exc, OSError):
            text = f"{type(exc).__name__}: {exc}"
        elif exc.filename is None:
            text = exc.strerror or str(exc)  # a step of prepare() failed; it says which
        elif exc.errno == errno.ENOENT and "/" not in command[0]:
            text = f'exec: "{command[0]}": executable file not found in $PATH'
        else:
            text = f'exec: "{command[0]}": {exc.strerror}'
        message = f"failed to create containerd task: failed to create shim task: OCI runtime create failed: {text}"
        if status_fd is not None:
            try:
                os.write(status_fd, message.encode()[:4000])
            except OSError:
                pass  # the runtime is gone: nobody to tell
        return START_ERROR_EXIT_CODE
    return START_ERROR_EXIT_CODE  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv))
