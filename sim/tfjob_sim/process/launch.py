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
``mntns_fd``    an inherited descriptor of the pod's mount namespace (tfjob_sim.process.mountns) to
                enter (setns) before the container's own mount namespace is made, as a copy of it;
                closed before exec (null: the copy is made of the current namespace)
``mounts``      the container's volume mounts, parents first: ``{"source", "target", "read_only",
                "is_file"}``, each a recursive bind mount of ``source`` on ``target`` in the container's
                mount namespace (remounted read-only if asked); a missing ``target`` is created (only
                inside a volume mounted above it: the runtime created the others in this machine's tree)
``etc_dir``     directory whose ``resolv.conf`` and ``hosts`` are bind-mounted over ``/etc`` in a
                private mount namespace (null, with no ``mntns_fd`` and no ``mounts``: no private mounts)
``hostname``    the pod's hostname, set in a private UTS namespace (null: keep the host's)
``cgroups``     ``cgroup.procs`` files this process writes its pid to (the container's cgroups)
``uid``, ``gid``, ``groups``  credentials to take (null: keep root's)
``cwd``         working directory (null: stay where the runtime started the helper)

Order (each step needs the privileges the next one drops): setns(network) -> setns(pod's mounts) ->
unshare(mount, UTS) -> volume mounts, /etc mounts, hostname -> cgroups -> credentials -> PR_SET_PDEATHSIG(SIGKILL) (credential changes clear
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
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
# Flags of the source mount that a read-only remount of a bind mount keeps: nosuid, nodev, noexec,
# noatime, nodiratime (statvfs's ST_* of these have the MS_* values), and relatime (ST_RELATIME).
KEPT_FLAGS = 2 | 4 | 8 | 1024 | 2048
ST_RELATIME = 4096
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


def _enter_mounts(fd: int) -> None:
    try:
        _check(_libc.setns(fd, CLONE_NEWNS), "setns(the pod's mount namespace)")
    finally:
        os.close(fd)


def _mount_volume(mount: dict) -> None:
    source, target = mount["source"], mount["target"]
    try:
        if not os.path.lexists(target):
            if mount.get("is_file"):
                os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
            else:
                os.makedirs(target, mode=0o755)
        _check(
            _libc.mount(source.encode(), target.encode(), None, ctypes.c_ulong(MS_BIND | MS_REC), None),
            "mount",
        )
        if mount.get("read_only"):
            current = os.statvfs(target).f_flag
            flags = MS_BIND | MS_REMOUNT | MS_RDONLY | (current & KEPT_FLAGS)
            flags |= MS_RELATIME if current & ST_RELATIME else 0
            _check(_libc.mount(None, target.encode(), None, ctypes.c_ulong(flags), None), "remount read-only")
    except OSError as exc:
        # runc's words for a failed mount.
        raise OSError(exc.errno, f'error mounting "{source}" to rootfs at "{target}": {exc.strerror or exc}') from None


def _bind(source: str, target: str) -> None:
    _check(
        _libc.mount(source.encode(), target.encode(), None, ctypes.c_ulong(MS_BIND), None),
        f"bind mount {source} on {target}",
    )


def prepare(spec: dict) -> None:
    """Every step before exec; raises OSError (with what failed) on the first failure."""
    if spec.get("netns"):
        _setns(spec["netns"])
    if spec.get("mntns_fd") is not None:
        _enter_mounts(spec["mntns_fd"])
    private = bool(spec.get("etc_dir") or spec.get("mounts") or spec.get("mntns_fd") is not None)
    flags = (CLONE_NEWNS if private else 0) | (CLONE_NEWUTS if spec.get("hostname") else 0)
    if flags:
        _check(_libc.unshare(flags), "unshare")
    if private:
        # Stop mount propagation to the host (or the pod) before mounting anything.
        _check(
            _libc.mount(b"none", b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None),
            "make / private",
        )
    for mount in spec.get("mounts") or ():
        _mount_volume(mount)
    if spec.get("etc_dir"):
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
