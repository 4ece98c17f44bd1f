"""What the shipped Deployment runs, for tests that start the controller as it would."""

from __future__ import annotations

from pathlib import Path

import yaml

DEPLOYMENT = Path(__file__).resolve().parents[1] / "manifests" / "deployment" / "deployment.yaml"


def manifest_run_args() -> list[str]:
    """The Deployment's container args after ``run``, without the endpoint addresses (processes on one
    machine cannot share ports; :class:`ControllerProcess` gives each free ones)."""
    [container] = yaml.safe_load(DEPLOYMENT.read_text())["spec"]["template"]["spec"]["containers"]
    subcommand, *args = container["args"]
    assert subcommand == "run"
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--metrics-addr", "--health-addr"):
            skip = True
        else:
            kept.append(arg)
    return kept
