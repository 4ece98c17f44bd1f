"""The process runtime's janitor: cleans up after a simulator however it ends.

Why: container processes die with the simulator (PR_SET_PDEATHSIG), but a SIGKILLed simulator
cannot remove its cgroups or its state directory, and a process that left its container's process
group would survive it. The runtime starts this program in its own session with the read end of a
pipe whose only write end the simulator holds; when the simulator exits for any reason the read
returns EOF, and this program kills every process still in the simulator's cgroups, removes them
and the state directory, and exits. After a clean stop there is nothing left to do.

argv[1] is a JSON object: ``fd`` (the pipe), ``cgroup`` (the simulator's cgroup directory or null),
``state_dir``. Only the standard library: it must start fast and depend on nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time


def _kill_members(path: str) -> None:
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(x) for x in f.read().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # exited meanwhile


def remove_cgroup_tree(path: str) -> None:
    if not os.path.isdir(path):
        return
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            remove_cgroup_tree(entry.path)
    deadline = time.monotonic() + 5.0
    while True:
        _kill_members(path)
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                print(f"janitor: cannot remove {path}", file=sys.stderr)
                return
            time.sleep(0.01)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the simulator is not for us
    while os.read(spec["fd"], 4096):
        pass  # the simulator never writes; EOF means it is gone
    if spec.get("cgroup"):
        remove_cgroup_tree(spec["cgroup"])
    if spec.get("state_dir"):
        shutil.rmtree(spec["state_dir"], ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
