"""tests/e2e/tf_programs/ps_checkpoint.py refuses to run on anything but real volumes: its program directory (a
ConfigMap volume), and for the task that checkpoints its checkpoint and scratch directories (a claim and an
emptyDir), must each be a mount point; otherwise it exits 2 with one line, before TensorFlow is imported.
tests/e2e/test_ps_loss_tensorflow.py runs it on real mounts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parents[1] / "e2e" / "tf_programs" / "ps_checkpoint.py"


def run(program: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    tf_config = {"cluster": {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "chief", "index": 0}}
    full = {"PATH": os.environ["PATH"], "TF_CONFIG": json.dumps(tf_config), **env}
    return subprocess.run([sys.executable, str(program)], capture_output=True, text=True, env=full, timeout=60)


def test_a_program_directory_that_is_not_a_volume_is_refused(tmp_path: Path) -> None:
    done = run(PROGRAM, {"PSC_CHECKPOINT_DIR": str(tmp_path), "PSC_SCRATCH_DIR": str(tmp_path)})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"ps_checkpoint.py: the program's directory {PROGRAM.parent} is not a mounted volume"
    ]


@pytest.mark.needs("root")
def test_checkpoint_and_scratch_directories_that_are_not_volumes_are_refused(tmp_path: Path) -> None:
    """The program on a real mount (a tmpfs in a private mount namespace), its data directories not."""
    for missing, refused in (("scratch", "PSC_SCRATCH_DIR"), ("checkpoints", "PSC_CHECKPOINT_DIR")):
        program_dir, checkpoints, scratch = tmp_path / "program", tmp_path / "checkpoints", tmp_path / "scratch"
        for directory in (program_dir, checkpoints, scratch):
            directory.mkdir(exist_ok=True)
        mounts = [f"mount -t tmpfs program {program_dir}", f"cp {PROGRAM} {program_dir}/"]
        mounts += [f"mount -t tmpfs {name} {tmp_path / name}" for name in ("checkpoints", "scratch") if name != missing]
        script = " && ".join([*mounts, f'exec "{sys.executable}" {program_dir / PROGRAM.name}'])
        env = {
            "PATH": os.environ["PATH"],
            "TF_CONFIG": json.dumps(
                {"cluster": {"chief": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "chief", "index": 0}}
            ),
            "PSC_CHECKPOINT_DIR": str(checkpoints),
            "PSC_SCRATCH_DIR": str(scratch),
        }
        unshare = shutil.which("unshare")
        assert unshare, "unshare (util-linux) is part of every Linux the process runtime runs on"
        done = subprocess.run(
            [unshare, "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        target = checkpoints if missing == "checkpoints" else scratch
        assert done.stderr.splitlines() == [f"ps_checkpoint.py: {refused} {target} is not a mounted volume"]
