"""Volumes on the simulator's process runtime: every volumeMount is a real mount in the pod's own mount
namespace (emptyDir on disk or tmpfs, ConfigMap/Secret/downward API data laid out as kubelet's atomic
writer does and rewritten when the source changes, hostPath with its type checks, claims through a
resolver), a missing source keeps the pod in ContainerCreating with kubelet's FailedMount event, and
nothing of it (mount, namespace holder, directory) outlives the pod or the simulator.

What a container sees is read as root through ``/proc/<pid>/root`` of its process, which resolves
paths in the container's mount namespace; mount paths are in the test's temporary directory.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, config

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.process import janitor
from tfjob_sim.process.volumes import (
    ClaimPath,
    StoreClaims,
    VolumeError,
    payload_of,
    resolve_within,
    write_atomically,
)
from tfjob_sim.testing.leftovers import janitors, leftovers, prefixes_of, runtime_processes
from tfjob_sim.testing.processes import CLI
from tfjob_sim.testing.waiting import eventually

NS = "default"
PY = sys.executable
SLEEP = ["sleep", "1000"]


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, time_scale=0.01, runtime="process")


def make_pod(name: str, volumes: list[dict], *containers: dict, restart: str = "Never", **spec: Any) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "t"}},
        "spec": {
            "restartPolicy": restart,
            "volumes": volumes,
            "containers": [{"image": "python:3.11", **c} for c in containers],
            **spec,
        },
    }


def config_map(name: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def secret(name: str, **data: str) -> dict:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}


def pod_of(cluster: SimCluster, name: str) -> dict:
    pod = cluster.store.get("pods", NS, name)
    assert pod is not None
    return pod


def statuses(cluster: SimCluster, name: str) -> dict[str, dict]:
    pod = cluster.store.get("pods", NS, name) or {}
    return {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses") or []}


def running(cluster: SimCluster, name: str, container: str = "main") -> bool:
    return "running" in (statuses(cluster, name).get(container, {}).get("state") or {})


def waiting(cluster: SimCluster, name: str, container: str = "main") -> dict:
    return (statuses(cluster, name).get(container, {}).get("state") or {}).get("waiting") or {}


def pid_of(cluster: SimCluster, name: str, container: str = "main") -> int:
    uid = pod_of(cluster, name)["metadata"]["uid"]
    [instance] = [i for i in cluster.kubelet.runtime.instances(uid) if i.alive and i.container == container]
    return instance.pid


async def started(cluster: SimCluster, name: str, *containers: str) -> None:
    for container in containers or ("main",):
        await eventually(lambda c=container: running(cluster, name, c), what=f"{name}/{container} running")


def seen_by(pid: int, path: Path | str) -> Path:
    """``path`` as the process ``pid`` sees it (in its mount namespace)."""
    return Path(f"/proc/{pid}/root{path}")


def mount_line(pid: int, target: Path | str) -> list[str]:
    """The process's mountinfo line for the mount at ``target`` (the last one: the visible mount)."""
    lines = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
    found = [fields for fields in lines if fields[4] == str(target)]
    assert found, f"no mount at {target}"
    return found[-1]


def events(cluster: SimCluster, name: str, reason: str) -> list[dict]:
    items, _ = cluster.store.list("events", NS)
    return [e for e in items if e["involvedObject"].get("name") == name and e["reason"] == reason]


async def deleted(cluster: SimCluster, name: str) -> None:
    cluster.store.delete("pods", NS, name, {"gracePeriodSeconds": 0})
    await eventually(lambda: cluster.store.get("pods", NS, name) is None, what=f"{name} deleted")


def pod_dir(cluster: SimCluster, uid: str) -> Path:
    return Path(cluster.kubelet.runtime.state_dir) / "pods" / uid


def holders(prefix: str, uid: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(a.endswith(b"mountns.py") for a in argv) and prefix.encode() in argv and uid.encode() in argv:
                found.append(int(entry))
    return found


# ------------------------------------------------------------------------------------------------ emptyDir


async def test_an_empty_dir_is_shared_by_the_pods_containers_and_goes_with_the_pod(
    sim_cluster: SimCluster, tmp_path: Path
):
    writer_at, reader_at = tmp_path / "w" / "shared", tmp_path / "r"
    pod = make_pod(
        "p",
        [{"name": "scratch", "emptyDir": {}}],
        {
            "name": "writer",
            "command": ["sh", "-c", f"echo hello > {writer_at}/note && exec sleep 1000"],
            "volumeMounts": [{"name": "scratch", "mountPath": str(writer_at)}],
        },
        {"name": "reader", "command": SLEEP, "volumeMounts": [{"name": "scratch", "mountPath": str(reader_at)}]},
    )
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p", "writer", "reader")
    reader = pid_of(sim_cluster, "p", "reader")
    note = seen_by(reader, reader_at / "note")
    await eventually(note.exists, what="the writer's file seen by the reader")
    assert note.read_text() == "hello\n"
    # Outside the pod the mount points are plain (created) directories: nothing mounted there.
    assert writer_at.is_dir() and list(writer_at.iterdir()) == []
    assert not (reader_at / "note").exists()
    uid = pod_of(sim_cluster, "p")["metadata"]["uid"]
    volume = pod_dir(sim_cluster, uid) / "volumes" / "kubernetes.io~empty-dir" / "scratch"
    assert (volume / "note").read_text() == "hello\n"  # on disk in the runtime's state directory
    assert stat.S_IMODE(volume.stat().st_mode) == 0o777
    assert len(holders(sim_cluster.kubelet.runtime.prefix, uid)) == 1

    await deleted(sim_cluster, "p")
    runtime = sim_cluster.kubelet.runtime

    def gone() -> list[str]:
        left = [str(p) for p in (writer_at, writer_at.parent, reader_at, pod_dir(sim_cluster, uid)) if p.exists()]
        return left + [f"holder {pid}" for pid in holders(runtime.prefix, uid)]

    await eventually(lambda: gone() == [], what="the pod's directories, mount points and holder removed")
    assert janitor.read_mount_points(runtime.state_dir) == []


async def test_a_memory_empty_dir_is_a_tmpfs_of_its_size_limit(sim_cluster: SimCluster, tmp_path: Path):
    at = tmp_path / "mem"
    fill = (
        "import errno, sys\n"
        "try:\n"
        f"    with open({str(at / 'big')!r}, 'wb') as f:\n"
        "        for _ in range(4):\n"
        "            f.write(b'x' * (1 << 20)); f.flush()\n"
        "    print('written')\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
    )
    pod = make_pod(
        "p",
        [{"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "2Mi"}}],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "mem", "mountPath": str(at)}]},
        {"name": "filler", "command": [PY, "-c", fill], "volumeMounts": [{"name": "mem", "mountPath": str(at)}]},
    )
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p")
    fields = mount_line(pid_of(sim_cluster, "p"), at)
    assert fields[fields.index("-") + 1] == "tmpfs"
    assert "size=2048k" in fields[-1]

    def filler_done() -> dict | None:
        return (statuses(sim_cluster, "p").get("filler", {}).get("state") or {}).get("terminated")

    await eventually(filler_done, what="the filler exited")
    pod_obj = pod_of(sim_cluster, "p")
    log = sim_cluster.kubelet.log_source(
        pod_obj["metadata"]["uid"], statuses(sim_cluster, "p")["filler"]["containerID"]
    )
    assert log is not None
    assert log.read(0, log.printed(time.time())) == ["ENOSPC"]
    # The other container sees the same tmpfs, filled to its limit; the host's tree saw nothing.
    big = seen_by(pid_of(sim_cluster, "p"), at / "big")
    assert 1 << 20 <= big.stat().st_size <= 2 << 20
    uid = pod_obj["metadata"]["uid"]
    assert list((pod_dir(sim_cluster, uid) / "volumes" / "kubernetes.io~empty-dir" / "mem").iterdir()) == []


async def test_a_read_only_mount_refuses_writes(sim_cluster: SimCluster, tmp_path: Path):
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    pod = make_pod(
        "p",
        [{"name": "v", "emptyDir": {}}],
        {
            "name": "main",
            "command": SLEEP,
            "volumeMounts": [
                {"name": "v", "mountPath": str(rw)},
                {"name": "v", "mountPath": str(ro), "readOnly": True},
            ],
        },
    )
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p")
    pid = pid_of(sim_cluster, "p")
    seen_by(pid, rw / "f").write_text("through the writable mount")
    assert seen_by(pid, ro / "f").read_text() == "through the writable mount"
    with pytest.raises(OSError) as caught:
        seen_by(pid, ro / "g").write_text("no")
    assert caught.value.errno == errno.EROFS
    assert "ro" in mount_line(pid, ro)[5].split(",")


# ------------------------------------------------------------------------------------------------ configMap


async def test_config_map_items_modes_optional_and_an_update_through_the_data_swap(
    sim_cluster: SimCluster, tmp_path: Path
):
    sim_cluster.store.create("configmaps", NS, config_map("cfg", a="1", b="2", c="3"))
    at, empty_at = tmp_path / "cfg", tmp_path / "none"
    volumes = [
        {
            "name": "cfg",
            "configMap": {
                "name": "cfg",
                "defaultMode": 0o640,
                "items": [{"key": "a", "path": "dir/a.txt", "mode": 0o600}, {"key": "b", "path": "b.txt"}],
            },
        },
        {"name": "none", "configMap": {"name": "absent", "optional": True}},
    ]
    mounts = [{"name": "cfg", "mountPath": str(at)}, {"name": "none", "mountPath": str(empty_at)}]
    sim_cluster.store.create(
        "pods", NS, make_pod("p", volumes, {"name": "main", "command": SLEEP, "volumeMounts": mounts})
    )
    await started(sim_cluster, "p")
    pid = pid_of(sim_cluster, "p")
    view = seen_by(pid, at)
    assert sorted(p.name for p in view.iterdir() if not p.name.startswith("..")) == ["b.txt", "dir"]
    assert os.readlink(view / "b.txt") == "..data/b.txt" and os.readlink(view / "dir") == "..data/dir"
    first = os.readlink(view / "..data")
    assert re.fullmatch(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d{9}", first), first
    assert (view / "dir" / "a.txt").read_text() == "1" and (view / "b.txt").read_text() == "2"
    assert stat.S_IMODE((view / "dir" / "a.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((view / "b.txt").stat().st_mode) == 0o640
    assert "ro" in mount_line(pid, at)[5].split(",")  # API data is always mounted read-only
    empty = seen_by(pid, empty_at)
    assert sorted(p.name for p in empty.iterdir()) == [os.readlink(empty / "..data"), "..data"]  # no files

    cm = sim_cluster.store.get("configmaps", NS, "cfg")
    assert cm is not None
    sim_cluster.store.update("configmaps", NS, "cfg", {**cm, "data": {"a": "1", "b": "two", "c": "3"}})
    await eventually(lambda: (view / "b.txt").read_text() == "two", what="the update seen through ..data")
    assert os.readlink(view / "..data") != first
    assert [p.name for p in view.iterdir() if p.name.startswith("..2")] == [os.readlink(view / "..data")]
    assert (view / "dir" / "a.txt").read_text() == "1"


async def test_a_missing_config_map_fails_the_mount_until_it_is_created(sim_cluster: SimCluster, tmp_path: Path):
    at = tmp_path / "cfg"
    pod = make_pod(
        "p",
        [{"name": "settings", "configMap": {"name": "later"}}],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "settings", "mountPath": str(at)}]},
    )
    sim_cluster.store.create("pods", NS, pod)
    message = 'MountVolume.SetUp failed for volume "settings" : configmap "later" not found'
    await eventually(lambda: events(sim_cluster, "p", "FailedMount"), what="a FailedMount event")
    [event] = events(sim_cluster, "p", "FailedMount")
    assert (event["type"], event["message"], event["source"]["component"]) == ("Warning", message, "kubelet")
    await eventually(lambda: event_count(sim_cluster, "p") >= 2, what="the mount tried again")
    status = pod_of(sim_cluster, "p")["status"]
    assert status["phase"] == "Pending" and "podIP" not in status
    assert waiting(sim_cluster, "p") == {"reason": "ContainerCreating"}
    assert not at.exists()

    sim_cluster.store.create("configmaps", NS, config_map("later", greeting="hi"))
    await started(sim_cluster, "p")
    assert seen_by(pid_of(sim_cluster, "p"), at / "greeting").read_text() == "hi"


def event_count(cluster: SimCluster, name: str) -> int:
    return sum(e.get("count", 1) for e in events(cluster, name, "FailedMount"))


async def test_a_missing_key_named_in_items_fails_the_mount(sim_cluster: SimCluster, tmp_path: Path):
    sim_cluster.store.create("configmaps", NS, config_map("cfg", a="1"))
    volume = {"name": "v", "configMap": {"name": "cfg", "items": [{"key": "zz", "path": "zz"}]}}
    pod = make_pod(
        "p",
        [volume],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "v", "mountPath": str(tmp_path / "v")}]},
    )
    sim_cluster.store.create("pods", NS, pod)
    await eventually(lambda: events(sim_cluster, "p", "FailedMount"), what="a FailedMount event")
    assert events(sim_cluster, "p", "FailedMount")[0]["message"] == (
        'MountVolume.SetUp failed for volume "v" : configmap references non-existent config key: zz'
    )


# ------------------------------------------------------------------------------------------------ leaks


@pytest.mark.parametrize("kill_janitor", [False, True])
async def test_a_sigkilled_simulator_leaves_no_mount_point_or_volume(tmp_path: Path, kill_janitor: bool):
    """`tfjob-controller sim --runtime process` SIGKILLed with a pod whose volumes are mounted: the
    holder and the container die with it, the janitor removes the mount points the runtime created; if
    the janitor dies too, the next simulator's start does."""
    at = tmp_path / "made" / "data"
    kubeconfig = tmp_path / "kc"
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "sim",
        "--runtime",
        "process",
        "--nodes",
        "1",
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        with anyio.fail_after(60):
            line = (await proc.stdout.readline()).decode()
        assert "simulated cluster serving at" in line, line
        [prefix] = prefixes_of(proc.pid)
        pod = make_pod(
            "p",
            [{"name": "m", "emptyDir": {"medium": "Memory"}}, {"name": "d", "emptyDir": {}}],
            {
                "name": "main",
                "command": ["sh", "-c", f"echo x > {at}/f && exec sleep 1000"],
                "volumeMounts": [{"name": "m", "mountPath": str(at)}, {"name": "d", "mountPath": f"{at}-d"}],
            },
        )
        api = await config.new_client_from_config(str(kubeconfig))
        async with api:
            await client.CoreV1Api(api).create_namespaced_pod(NS, pod)
        await eventually(lambda: runtime_processes(prefix), what="the pod's process", timeout=60)
        pid = runtime_processes(prefix)[0]
        await eventually(lambda: seen_by(pid, at / "f").exists(), what="the volume written", timeout=60)
        assert at.is_dir() and list(at.iterdir()) == []  # a mount point made here, the tmpfs only in the pod
        if kill_janitor:
            for janitor_pid in janitors(prefix):
                os.kill(janitor_pid, signal.SIGKILL)
    finally:
        proc.kill()
        await proc.wait()
    if kill_janitor:
        await eventually(lambda: not runtime_processes(prefix), what="the pod's process died")
        assert at.exists()  # nobody removed it yet
        cluster = SimCluster(SimConfig(nodes=1, runtime="process"))
        await cluster.start()
        await cluster.stop()
    await eventually(lambda: leftovers(prefix) == [] and not at.parent.exists(), what=f"nothing left of {prefix}")


# ------------------------------------------------------------------------------------------------ units


def test_the_atomic_writer_swaps_data_and_removes_what_left(tmp_path: Path):
    write_atomically(str(tmp_path), {"a": (0o644, b"1"), "d/b": (0o600, b"2")})
    first = os.readlink(tmp_path / "..data")
    write_atomically(str(tmp_path), {"a": (0o644, b"one")})
    assert (tmp_path / "a").read_text() == "one"
    assert not os.path.lexists(tmp_path / "d")  # gone from the payload: its link too
    assert not (tmp_path / first).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [os.readlink(tmp_path / "..data"), "..data", "a"]
    with pytest.raises(VolumeError, match="must not contain '..'"):
        write_atomically(str(tmp_path), {"x/../../etc": (0o644, b"")})


def test_a_sub_path_resolves_inside_its_volume_only(tmp_path: Path):
    root = tmp_path / "vol"
    (root / "d").mkdir(parents=True)
    (root / "in").symlink_to("d")
    (root / "abs").symlink_to(str(root / "d"))
    (root / "out").symlink_to("/etc")
    (root / "up").symlink_to("../..")
    assert resolve_within(str(root), str(root), "in/x") == "d/x"
    assert resolve_within(str(root), str(root), "abs") == "d"
    assert resolve_within(str(root), str(root), "out") is None
    assert resolve_within(str(root), str(root), "up/etc") is None


class FakeStore:
    def __init__(self, *objects: tuple[str, str | None, dict]) -> None:
        self.objects = {(r, ns or "", o["metadata"]["name"]): o for r, ns, o in objects}

    def get(self, resource: str, namespace: str | None, name: str) -> dict | None:
        return self.objects.get((resource, namespace or "", name))


def test_claims_resolve_through_the_bound_persistent_volume():
    def pvc(name: str, volume: str | None, phase: str = "Bound") -> tuple[str, str, dict]:
        spec = {"volumeName": volume} if volume else {}
        return ("persistentvolumeclaims", NS, {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}})

    store = FakeStore(
        pvc("host", "pv-host"),
        pvc("local", "pv-local"),
        pvc("pending", None, "Pending"),
        pvc("lost", "pv-gone"),
        pvc("nfs", "pv-nfs"),
        ("persistentvolumes", None, {"metadata": {"name": "pv-host"}, "spec": {"hostPath": {"path": "/srv/a"}}}),
        ("persistentvolumes", None, {"metadata": {"name": "pv-local"}, "spec": {"local": {"path": "/srv/b"}}}),
        ("persistentvolumes", None, {"metadata": {"name": "pv-nfs"}, "spec": {"nfs": {"path": "/x"}}}),
    )
    claims = StoreClaims(store)
    assert claims(NS, "host") == ClaimPath(path="/srv/a")
    assert claims(NS, "local") == ClaimPath(path="/srv/b")
    assert claims(NS, "pending") == ClaimPath(reason="PVC is not bound")
    assert (
        claims(NS, "missing").reason
        == 'failed to fetch PVC from API server: persistentvolumeclaims "missing" not found'
    )
    assert (
        claims(NS, "lost").reason == 'failed to fetch PV pv-gone from API server: persistentvolumes "pv-gone" not found'
    )
    assert "neither hostPath nor local" in (claims(NS, "nfs").reason or "")


def test_payloads_of_secrets_and_projections():
    store = FakeStore(
        ("secrets", NS, secret("s", token="t0p")),
        ("configmaps", NS, config_map("c", k="v")),
    )
    pod = {"metadata": {"name": "p", "namespace": NS, "labels": {"b": "2", "a": 'q"uote'}}, "spec": {}}
    assert payload_of("secret", {"secretName": "s"}, store, pod, {}) == {"token": (0o644, b"t0p")}
    projected = {
        "defaultMode": 0o400,
        "sources": [
            {"configMap": {"name": "c"}},
            {"secret": {"name": "s", "items": [{"key": "token", "path": "auth/token"}]}},
            {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            {"serviceAccountToken": {"path": "sa-token"}},
        ],
    }
    assert payload_of("projected", projected, store, pod, {}) == {
        "k": (0o400, b"v"),
        "auth/token": (0o400, b"t0p"),
        "labels": (0o400, b'a="q\\"uote"\nb="2"'),
    }
    with pytest.raises(VolumeError) as caught:
        payload_of("projected", {"sources": [{"configMap": {"name": "x"}}, {"secret": {"name": "y"}}]}, store, pod, {})
    assert str(caught.value) == '[configmap "x" not found, secret "y" not found]'
