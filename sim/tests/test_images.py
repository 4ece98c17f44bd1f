"""Images on the process runtime (tfjob_sim.images, the kubelet's ``ensure_image``): a pod's image runs as the
local environment mapped to it (its ``bin`` first on PATH), matched as the container runtime normalises
references; an image nobody mapped fails as kubelet reports an image in no registry (ErrImagePull, then
ImagePullBackOff with a doubling back-off, with kubelet's events), unless the command is an absolute path.
"""

from __future__ import annotations

import asyncio
import stat
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.images import ImageMap, InvalidReference, normalize, parse_mapping
from tfjob_sim.kubelet import NodeAgent
from tfjob_sim.nodestate import KubeletConfig, NodeState
from tfjob_sim.podstate import _PodRecord
from tfjob_sim.store import Store
from tfjob_sim.testing.leftovers import leftovers
from tfjob_sim.testing.processes import CLI
from tfjob_sim.testing.waiting import eventually

NS = "default"
PATH = "spec.containers{main}"

# ------------------------------------------------------------------------------------------------ references


@pytest.mark.parametrize(
    ("written", "normalised"),
    [
        ("tensorflow/tensorflow:2.21.0", "docker.io/tensorflow/tensorflow:2.21.0"),
        ("docker.io/tensorflow/tensorflow:2.21.0", "docker.io/tensorflow/tensorflow:2.21.0"),
        ("index.docker.io/tensorflow/tensorflow:2.21.0", "docker.io/tensorflow/tensorflow:2.21.0"),
        ("python", "docker.io/library/python:latest"),
        ("python:latest", "docker.io/library/python:latest"),
        ("docker.io/library/python", "docker.io/library/python:latest"),
        ("localhost:5000/team/trainer", "localhost:5000/team/trainer:latest"),
        ("ghcr.io/org/img:v1", "ghcr.io/org/img:v1"),
        ("ghcr.io/org/img@sha256:" + "a" * 64, "ghcr.io/org/img@sha256:" + "a" * 64),
    ],
)
def test_references_are_normalised_as_the_container_runtime_does(written: str, normalised: str) -> None:
    assert normalize(written) == normalised


@pytest.mark.parametrize(
    ("written", "error"),
    [
        ("", "repository name must have at least one component"),
        ("Python:3", "invalid reference format: repository name (library/Python) must be lowercase"),
        ("python:", "invalid reference format"),
        ("two words", "invalid reference format"),
    ],
)
def test_a_reference_that_does_not_parse_says_why(written: str, error: str) -> None:
    with pytest.raises(InvalidReference) as caught:
        normalize(written)
    assert str(caught.value) == error


def test_a_map_matches_every_spelling_of_an_image_and_refuses_a_directory_without_bin(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    images = ImageMap({"docker.io/tensorflow/tensorflow:2.21.0": str(tmp_path), "python": str(tmp_path)})
    assert images.lookup("tensorflow/tensorflow:2.21.0") == tmp_path
    assert images.lookup("docker.io/library/python:latest") == tmp_path
    assert images.lookup("python:3.11") is None  # another tag is another image
    assert images.lookup("tensorflow/tensorflow") is None
    with pytest.raises(ValueError, match="has no bin directory"):
        ImageMap({"x": str(tmp_path / "bin")})
    with pytest.raises(ValueError, match="is not a directory"):
        ImageMap({"x": str(tmp_path / "missing")})
    with pytest.raises(ValueError, match="must be lowercase"):
        ImageMap({"X": str(tmp_path)})
    assert parse_mapping("a/b:1=/srv/env") == ("a/b:1", "/srv/env")
    with pytest.raises(ValueError, match="expected IMAGE=DIR"):
        parse_mapping("a/b:1")
    with pytest.raises(ValueError, match="only the process runtime"):
        KubeletConfig(image_map={"python": str(tmp_path)})


# ------------------------------------------------------------------------------------------------ the kubelet


async def test_an_image_in_no_registry_backs_off_doubling_between_pulls() -> None:
    """kubelet's image manager on its own clock: ErrImagePull, ImagePullBackOff half-way through the back-off
    (whose waiting message carries the last pull's error), a new pull when it ends; 10 s doubling."""
    store = Store()
    agent = NodeAgent(NodeState(store, KubeletConfig(nodes=1)), lambda: None)
    pod = store.create("pods", NS, make_pod("p", "example/missing:1", ["train"]))
    rec = _PodRecord(uid=pod["metadata"]["uid"], namespace=NS, name="p", node="sim-node-0")
    container = {"name": "main", "image": "example/missing:1", "command": ["train"]}
    seen = []
    now = 0.0
    for _ in range(8):
        check = agent.ensure_image(pod, rec, PATH, container, now)
        assert check.waiting is not None and check.retry_at is not None
        seen.append((now, check.waiting[0]))
        now = check.retry_at
    assert seen == [
        (0.0, "ErrImagePull"),
        (5.0, "ImagePullBackOff"),
        (10.0, "ErrImagePull"),
        (20.0, "ImagePullBackOff"),
        (30.0, "ErrImagePull"),
        (50.0, "ImagePullBackOff"),
        (70.0, "ErrImagePull"),
        (110.0, "ImagePullBackOff"),
    ]
    error = (
        'rpc error: code = NotFound desc = failed to pull and unpack image "docker.io/example/missing:1": '
        'failed to resolve reference "docker.io/example/missing:1": docker.io/example/missing:1: not found'
    )
    check = agent.ensure_image(pod, rec, PATH, container, 111.0)
    assert check.waiting is not None
    reason, message = check.waiting
    assert reason == "ImagePullBackOff"
    assert message.startswith(f'Back-off pulling image "example/missing:1": ErrImagePull: {error}')
    agent.forget(rec)  # the pod is gone: so is its back-off
    assert agent.ensure_image(pod, rec, PATH, container, 112.0).waiting[0] == "ErrImagePull"  # type: ignore[index]


def test_an_absolute_command_needs_no_image_and_never_pull_fails_without_one() -> None:
    store = Store()
    agent = NodeAgent(NodeState(store, KubeletConfig(nodes=1)), lambda: None)
    pod = store.create("pods", NS, make_pod("p", "example/missing:1", ["train"]))
    rec = _PodRecord(uid=pod["metadata"]["uid"], namespace=NS, name="p", node="sim-node-0")
    on_host = {"name": "main", "image": "example/missing:1", "command": [sys.executable]}
    assert agent.ensure_image(pod, rec, PATH, on_host, 0.0).waiting is None
    never = {"name": "main", "image": "example/missing:1", "command": ["x"], "imagePullPolicy": "Never"}
    assert agent.ensure_image(pod, rec, PATH, never, 0.0).waiting == (
        "ErrImageNeverPull",
        'Container image "example/missing:1" is not present with pull policy of Never',
    )
    invalid = {"name": "main", "image": "Bad:Image", "command": ["x"]}
    assert agent.ensure_image(pod, rec, PATH, invalid, 0.0).waiting == (
        "InvalidImageName",
        'Failed to apply default image tag "Bad:Image": couldn\'t parse image name "Bad:Image": '
        "invalid reference format: repository name (library/Bad) must be lowercase",
    )


# ------------------------------------------------------------------------------------------------ process runtime


def image_dir(root: Path) -> Path:
    """A local environment: ``bin/whereami`` prints its PATH."""
    (root / "bin").mkdir(parents=True)
    program = root / "bin" / "whereami"
    program.write_text('#!/bin/sh\necho "PATH=$PATH"\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root


@pytest.fixture
async def sim_cluster(tmp_path: Path) -> AsyncIterator[SimCluster]:
    image_map = {"docker.io/example/tool:1": str(image_dir(tmp_path / "tool"))}
    cluster = SimCluster(SimConfig(nodes=1, time_scale=0.01, runtime="process", image_map=image_map))
    await cluster.start()
    runtime = cluster.kubelet.runtime
    try:
        yield cluster
    finally:
        await cluster.stop()
        assert leftovers(runtime.prefix) == []


def make_pod(name: str, image: str, command: list[str]) -> dict:
    container = {"name": "main", "image": image, "command": command}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


def state(cluster: SimCluster, name: str) -> dict[str, Any]:
    pod = cluster.store.get("pods", NS, name) or {}
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0].get("state") or {}


def events(cluster: SimCluster, name: str) -> list[tuple[str, str, str]]:
    items, _ = cluster.store.list("events", NS, field_selector=f"involvedObject.name={name}")
    items.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [(e["type"], e["reason"], e["message"]) for e in items]


def log_text(cluster: SimCluster, name: str) -> str:
    """The container's captured output (what pods/log serves), one line per line."""
    pod = cluster.store.get("pods", NS, name)
    assert pod is not None
    cid = pod["status"]["containerStatuses"][0]["containerID"]
    source = cluster.kubelet.log_source(pod["metadata"]["uid"], cid)
    assert source is not None
    return "\n".join(source.read(0, source.printed(time.time())))


@pytest.mark.needs("linux", "root", "ip")
async def test_a_mapped_image_runs_its_programs_first_on_path(sim_cluster: SimCluster, tmp_path: Path) -> None:
    sim_cluster.store.create("pods", NS, make_pod("p", "example/tool:1", ["whereami"]))
    await eventually(lambda: state(sim_cluster, "p").get("terminated"), what="terminated")
    assert state(sim_cluster, "p")["terminated"]["exitCode"] == 0
    assert log_text(sim_cluster, "p").startswith(f"PATH={tmp_path / 'tool' / 'bin'}:")
    pulled = [m for _, reason, m in events(sim_cluster, "p") if reason == "Pulled"]
    assert len(pulled) == 1 and pulled[0].startswith('Successfully pulled image "example/tool:1" in ')


@pytest.mark.needs("linux", "root", "ip")
async def test_an_image_nobody_mapped_fails_to_pull_and_backs_off(sim_cluster: SimCluster) -> None:
    reasons: list[str] = []  # every waiting reason the pod's status was written with, in order

    def on_change(_type: str, resource: str, _old: dict | None, new: dict | None) -> None:
        if resource == "pods" and new is not None and new["metadata"]["name"] == "p":
            statuses = (new.get("status") or {}).get("containerStatuses") or [{}]
            reason = ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason")
            if reason and (not reasons or reasons[-1] != reason):
                reasons.append(reason)

    unsubscribe = sim_cluster.store.add_listener(on_change)
    try:
        sim_cluster.store.create("pods", NS, make_pod("p", "example/other:2", ["whereami"]))
        await eventually(lambda: len(reasons) >= 5, what="two pulls and two back-offs")
    finally:
        unsubscribe()
    assert reasons[:5] == ["ContainerCreating", "ErrImagePull", "ImagePullBackOff", "ErrImagePull", "ImagePullBackOff"]
    waiting = state(sim_cluster, "p")["waiting"]
    assert 'failed to pull and unpack image "docker.io/example/other:2"' in waiting["message"]
    pod = sim_cluster.store.get("pods", NS, "p")
    assert pod["status"]["phase"] == "Pending" and not sim_cluster.kubelet.runtime.instances(pod["metadata"]["uid"])
    seen = {(t, r, m.split(":")[0]) for t, r, m in events(sim_cluster, "p")}
    assert {
        ("Normal", "Pulling", 'Pulling image "example/other'),
        ("Warning", "Failed", 'Failed to pull image "example/other'),
        ("Warning", "Failed", "Error"),
        ("Normal", "BackOff", 'Back-off pulling image "example/other'),
    } <= seen
    failed = {m for _, r, m in events(sim_cluster, "p") if r == "Failed"}
    assert {"Error: ErrImagePull", "Error: ImagePullBackOff"} <= failed


@pytest.mark.needs("linux", "root", "ip")
async def test_an_absolute_command_runs_whatever_its_image(sim_cluster: SimCluster) -> None:
    sim_cluster.store.create("pods", NS, make_pod("p", "example/other:2", ["/bin/sh", "-c", "echo ran"]))
    await eventually(lambda: state(sim_cluster, "p").get("terminated"), what="terminated")
    assert state(sim_cluster, "p")["terminated"]["exitCode"] == 0
    assert log_text(sim_cluster, "p") == "ran"


# ------------------------------------------------------------------------------------------------ command line


async def test_the_command_line_refuses_a_mapping_it_cannot_use(tmp_path: Path) -> None:
    async def sim(*flags: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "sim", "--kubeconfig", str(tmp_path / "kc"), *flags, stderr=asyncio.subprocess.PIPE
        )
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, err.decode()

    code, err = await sim("--image", "python")
    assert code == 2 and "expected IMAGE=DIR, got 'python'" in err
    code, err = await sim("--image", f"python={tmp_path}")
    assert code == 2 and "has no bin directory" in err
    (tmp_path / "bin").mkdir()
    code, err = await sim("--image", f"python={tmp_path}")  # the annotation runtime runs nothing
    assert code == 2 and "--image: only --runtime process runs images" in err
