"""examples/dynamic-workers/ as `kubectl apply -k` applies it: the claim, the program's ConfigMap and a TFJob
whose pods run that program and whose workers keep their checkpoints on that claim."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tfjob_sim.testing.kubectl import kubectl_binary

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dynamic-workers"


def rendered() -> dict[str, dict[str, Any]]:
    result = subprocess.run([kubectl_binary(), "kustomize", str(EXAMPLE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout)}


def test_the_workers_checkpoint_to_the_claim_and_every_pod_runs_the_generated_program() -> None:
    objects = rendered()
    assert sorted(objects) == ["ConfigMap", "PersistentVolumeClaim", "TFJob"]
    claim, program, job = objects["PersistentVolumeClaim"], objects["ConfigMap"], objects["TFJob"]
    # Every worker pod mounts the claim and worker 0 may land on any node: only ReadWriteMany serves them all.
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and "storageClassName" not in claim["spec"]
    assert program["data"] == {"train.py": (EXAMPLE / "train.py").read_text()}

    for replica_type, spec in job["spec"]["tfReplicaSpecs"].items():
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert container["image"] == "tensorflow/tensorflow:2.21.0"
        assert container["command"] == ["python", f"{mounts['program']}/train.py"], replica_type
        assert volumes["program"]["configMap"]["name"] == program["metadata"]["name"]
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        if replica_type == "Worker":
            claimed = volumes["checkpoints"]["persistentVolumeClaim"]["claimName"]
            assert claimed == claim["metadata"]["name"]
            assert env["CHECKPOINT_DIR"] == mounts["checkpoints"]
            assert int(env["CHECKPOINT_EVERY_STEPS"]) > 0
        else:
            # The PS never reads or writes a checkpoint (worker 0 does all of its I/O).
            assert "checkpoints" not in volumes and "CHECKPOINT_DIR" not in env, replica_type
