"""Run a training program in this process and, once a file named after this pod's UID appears in a directory,
allocate memory without bound: how ``tfjob-controller demo --tensorflow`` and the TensorFlow end-to-end tests have
the memory cgroup of one chosen pod (process runtime) OOM-kill it.

    python oom_on_demand.py TRIGGER_DIR PROGRAM [ARG...]      (env POD_UID: the pod's metadata.uid)

The allocation happens in the program's own process, so it is the process the kernel kills (exit 137,
OOMKilled). A replacement pod has a new UID and is never triggered. It lives in a directory of its own because a
script's directory comes first on its sys.path: next to the simulator's modules, ``selectors.py`` would shadow the
standard library's.
"""

import os
import runpy
import sys
import threading
import time

trigger_dir, program, *arguments = sys.argv[1:]
trigger = os.path.join(trigger_dir, os.environ["POD_UID"])


def allocate_when_triggered() -> None:
    while not os.path.exists(trigger):
        time.sleep(0.2)
    print("event=allocating-until-oom-killed", flush=True)
    hoard = []
    while True:
        chunk = bytearray(64 << 20)
        chunk[::4096] = b"\x01" * len(range(0, len(chunk), 4096))  # touch every page: resident, charged
        hoard.append(chunk)


threading.Thread(target=allocate_when_triggered, daemon=True).start()
sys.argv = [program, *arguments]
runpy.run_path(program, run_name="__main__")
