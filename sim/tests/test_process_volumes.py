"""Volumes on the simulator's process runtime: every volumeMount is a real mount in the pod's own mount
namespace (emptyDir on disk or tmpfs, ConfigMap/Secret/downward API data laid out as kubelet's atomic
writer does and rewritten when the source changes, hostPath with its type checks, claims through a
resolver), a missing source keeps the pod in ContainerCreating with kubelet's FailedMount event, and
nothing of it (mount, namespace holder, directory) outlives the pod or the simulator.

What a container sees is read as root through ``/proc/<pid>/root`` of its process, which resolves
paths in the container's mount namespace; mount paths are in the test's temporary directory.
"""

from __future__ import annotations

import base64
import errno
import os
import re
import signal
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.process import janitor
from tfjob_sim.process.volumes import (
    ClaimPath,
    PodVolumes,
    StoreClaims,
    VolumeError,
    payload_of,
    resolve_within,
    write_atomically,
)
from tfjob_sim.testing.leftovers import janitors, leftovers, runtime_processes
from tfjob_sim.testing.processes import process_sim_to_kill
from tfjob_sim.testing.waiting import eventually

NS = "default"
PY = sys.executable
# The images the pods name, as local environments: this interpreter's prefix and the system's.
IMAGES = {"python:3.11": sys.prefix, "busybox:1.36": "/usr"}
SLEEP = ["sleep", "1000"]


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, time_scale=0.01, runtime="process", image_map=IMAGES)


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


# ------------------------------------------------------------------------------------------------ secret, downward API, projected


async def test_a_secret_volume_is_kept_in_memory(sim_cluster: SimCluster, tmp_path: Path):
    sim_cluster.store.create("secrets", NS, secret("creds", user="admin", password="s3cr3t"))
    at = tmp_path / "creds"
    volume = {"name": "creds", "secret": {"secretName": "creds", "items": [{"key": "password", "path": "pw"}]}}
    pod = make_pod(
        "p", [volume], {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "creds", "mountPath": str(at)}]}
    )
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p")
    pid = pid_of(sim_cluster, "p")
    assert (seen_by(pid, at / "pw")).read_text() == "s3cr3t"
    assert not seen_by(pid, at / "user").exists()  # items name what is written
    assert stat.S_IMODE(seen_by(pid, at / "pw").stat().st_mode) == 0o644
    fields = mount_line(pid, at)
    assert fields[fields.index("-") + 1] == "tmpfs" and "ro" in fields[5].split(",")
    uid = pod_of(sim_cluster, "p")["metadata"]["uid"]
    on_disk = pod_dir(sim_cluster, uid) / "volumes" / "kubernetes.io~secret" / "creds"
    assert list(on_disk.iterdir()) == []  # never written to the disk

    missing = make_pod(
        "q",
        [{"name": "v", "secret": {"secretName": "nope"}}],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "v", "mountPath": str(tmp_path / "q")}]},
    )
    sim_cluster.store.create("pods", NS, missing)
    await eventually(lambda: events(sim_cluster, "q", "FailedMount"), what="a FailedMount event")
    assert events(sim_cluster, "q", "FailedMount")[0]["message"] == (
        'MountVolume.SetUp failed for volume "v" : secret "nope" not found'
    )


async def test_a_downward_api_volume_follows_the_pods_labels(sim_cluster: SimCluster, tmp_path: Path):
    at = tmp_path / "info"
    items = [
        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
        {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
        {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}},
        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
        {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}, "mode": 0o600},
        {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
        {
            "path": "mem_mi",
            "resourceFieldRef": {"containerName": "main", "resource": "limits.memory", "divisor": "1Mi"},
        },
        {"path": "cpu", "resourceFieldRef": {"containerName": "main", "resource": "limits.cpu"}},
    ]
    pod = make_pod(
        "p",
        [{"name": "info", "downwardAPI": {"items": items}}],
        {
            "name": "main",
            "command": SLEEP,
            "volumeMounts": [{"name": "info", "mountPath": str(at)}],
            "resources": {"limits": {"memory": "300Mi"}},
        },
    )
    pod["metadata"]["annotations"] = {"note": 'say "hi"'}
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p")
    view = seen_by(pid_of(sim_cluster, "p"), at)
    uid = pod_of(sim_cluster, "p")["metadata"]["uid"]
    files = {p.name: p.read_text() for p in view.iterdir() if not p.name.startswith("..")}
    node = sim_cluster.store.get("nodes", None, pod_of(sim_cluster, "p")["spec"]["nodeName"])
    assert node is not None
    node_cpu = node["status"]["allocatable"]["cpu"]
    assert files == {
        "name": "p",
        "namespace": NS,
        "uid": uid,
        "labels": 'app="t"',
        "app": "t",
        "annotations": 'note="say \\"hi\\""',
        "mem_mi": "300",
        "cpu": str(node_cpu),  # no limit: the node's allocatable
    }
    assert stat.S_IMODE((view / "app").stat().st_mode) == 0o600
    sim_cluster.store.patch("pods", NS, "p", "merge", {"metadata": {"labels": {"app": "u", "tier": "x"}}})
    await eventually(lambda: (view / "labels").read_text() == 'app="u"\ntier="x"', what="the new labels")
    assert (view / "app").read_text() == "u"


async def test_a_projected_volume_combines_its_sources(sim_cluster: SimCluster, tmp_path: Path):
    sim_cluster.store.create("configmaps", NS, config_map("cfg", setting="on"))
    sim_cluster.store.create("secrets", NS, secret("sec", token="abc"))
    at = tmp_path / "all"
    projected = {
        "defaultMode": 0o440,
        "sources": [
            {"configMap": {"name": "cfg"}},
            {"secret": {"name": "sec", "items": [{"key": "token", "path": "auth/token", "mode": 0o400}]}},
            {"downwardAPI": {"items": [{"path": "pod", "fieldRef": {"fieldPath": "metadata.name"}}]}},
        ],
    }
    pod = make_pod(
        "p",
        [{"name": "all", "projected": projected}],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "all", "mountPath": str(at)}]},
    )
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p")
    view = seen_by(pid_of(sim_cluster, "p"), at)
    assert (view / "setting").read_text() == "on" and (view / "pod").read_text() == "p"
    assert (view / "auth" / "token").read_text() == "abc"
    assert stat.S_IMODE((view / "setting").stat().st_mode) == 0o440
    assert stat.S_IMODE((view / "auth" / "token").stat().st_mode) == 0o400
    fields = mount_line(pid_of(sim_cluster, "p"), at)
    assert fields[fields.index("-") + 1] == "tmpfs"
    cm = sim_cluster.store.get("configmaps", NS, "cfg")
    assert cm is not None
    sim_cluster.store.update("configmaps", NS, "cfg", {**cm, "data": {"setting": "off"}})
    await eventually(lambda: (view / "setting").read_text() == "off", what="the configMap's update")


# ------------------------------------------------------------------------------------------------ hostPath


@pytest.mark.parametrize(
    ("type_", "make", "what"),
    [
        ("Directory", None, "is not a directory"),
        ("Directory", "file", "is not a directory"),
        ("File", "dir", "is not a file"),
        ("Socket", "file", "is not a socket file"),
        ("CharDevice", "file", "is not a character device"),
        ("BlockDevice", "dir", "is not a block device"),
    ],
)
async def test_a_failed_host_path_type_check_fails_the_mount(
    sim_cluster: SimCluster, tmp_path: Path, type_: str, make: str | None, what: str
):
    path = tmp_path / "host"
    if make == "file":
        path.write_text("")
    elif make == "dir":
        path.mkdir()
    volume = {"name": "h", "hostPath": {"path": str(path), "type": type_}}
    pod = make_pod(
        "p",
        [volume],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "h", "mountPath": str(tmp_path / "in")}]},
    )
    sim_cluster.store.create("pods", NS, pod)
    await eventually(lambda: events(sim_cluster, "p", "FailedMount"), what="a FailedMount event")
    assert events(sim_cluster, "p", "FailedMount")[0]["message"] == (
        f'MountVolume.SetUp failed for volume "h" : hostPath type check failed: {path} {what}'
    )
    assert waiting(sim_cluster, "p") == {"reason": "ContainerCreating"}


async def test_host_paths_of_each_type_are_mounted_once_their_check_passes(sim_cluster: SimCluster, tmp_path: Path):
    later, made_dir, made_file = tmp_path / "later", tmp_path / "made" / "dir", tmp_path / "made-file"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "sock"))
    try:
        volumes = [
            {"name": "later", "hostPath": {"path": str(later), "type": "Directory"}},
            {"name": "dir", "hostPath": {"path": str(made_dir), "type": "DirectoryOrCreate"}},
            {"name": "file", "hostPath": {"path": str(made_file), "type": "FileOrCreate"}},
            {"name": "sock", "hostPath": {"path": str(tmp_path / "sock"), "type": "Socket"}},
            {"name": "null", "hostPath": {"path": "/dev/null", "type": "CharDevice"}},
        ]
        mounts = [{"name": v["name"], "mountPath": str(tmp_path / "in" / v["name"])} for v in volumes]
        pod = make_pod("p", volumes, {"name": "main", "command": SLEEP, "volumeMounts": mounts})
        sim_cluster.store.create("pods", NS, pod)
        await eventually(lambda: events(sim_cluster, "p", "FailedMount"), what="a FailedMount event")
        assert made_dir.is_dir() and made_file.is_file()  # the ...OrCreate types made theirs
        later.mkdir()
        (later / "from-host").write_text("host data")
        await started(sim_cluster, "p")
        pid = pid_of(sim_cluster, "p")
        inside = seen_by(pid, tmp_path / "in")
        assert (inside / "later" / "from-host").read_text() == "host data"
        (inside / "dir" / "from-pod").write_text("pod data")
        assert (made_dir / "from-pod").read_text() == "pod data"  # a hostPath is this machine's directory
        assert stat.S_ISSOCK((inside / "sock").stat().st_mode) and (inside / "file").is_file()
        assert stat.S_ISCHR((inside / "null").stat().st_mode)
        await deleted(sim_cluster, "p")
        runtime = sim_cluster.kubelet.runtime
        await eventually(lambda: not (tmp_path / "in").exists(), what="the created mount points removed")
        assert janitor.read_mount_points(runtime.state_dir) == []
        assert (made_dir / "from-pod").exists()  # what the pod wrote to the host stays, as on a node
    finally:
        sock.close()


# ------------------------------------------------------------------------------------------------ subPath


async def test_sub_paths_and_sub_path_expressions(sim_cluster: SimCluster, tmp_path: Path):
    sim_cluster.store.create("configmaps", NS, config_map("cfg", key="v1"))
    whole, part, named, key_file, key_dir = (tmp_path / n for n in ("whole", "part", "named", "key.txt", "keys"))
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    mounts = [
        {"name": "scratch", "mountPath": str(whole)},
        {"name": "scratch", "mountPath": str(part), "subPath": "a/b"},
        {"name": "scratch", "mountPath": str(named), "subPathExpr": "pods/$(POD_NAME)"},
        {"name": "cfg", "mountPath": str(key_file), "subPath": "key"},
        {"name": "cfg", "mountPath": str(key_dir)},
    ]
    pod = make_pod(
        "p",
        [{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "cfg"}}],
        {"name": "main", "command": SLEEP, "volumeMounts": mounts, "env": env},
    )
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p")
    pid = pid_of(sim_cluster, "p")
    (seen_by(pid, part) / "f").write_text("in a/b")
    (seen_by(pid, named) / "g").write_text("in pods/p")
    assert (seen_by(pid, whole) / "a" / "b" / "f").read_text() == "in a/b"
    assert (seen_by(pid, whole) / "pods" / "p" / "g").read_text() == "in pods/p"
    assert stat.S_IMODE((seen_by(pid, whole) / "a").stat().st_mode) == 0o777  # the volume's own mode
    assert seen_by(pid, key_file).read_text() == "v1"
    assert key_file.is_file() and key_file.stat().st_size == 0  # its mount point: an empty file

    cm = sim_cluster.store.get("configmaps", NS, "cfg")
    assert cm is not None
    sim_cluster.store.update("configmaps", NS, "cfg", {**cm, "data": {"key": "v2"}})
    await eventually(lambda: (seen_by(pid, key_dir) / "key").read_text() == "v2", what="the update")
    assert seen_by(pid, key_file).read_text() == "v1"  # a subPath mount does not get updates (kubelet's)


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ({"subPathExpr": "$(NOPE)/x"}, "missing value for NOPE"),
        ({"subPath": "escape/passwd"}, 'failed to prepare subPath for volumeMount "h" of container "main"'),
    ],
)
async def test_a_sub_path_that_cannot_be_prepared_is_a_config_error(
    sim_cluster: SimCluster, tmp_path: Path, mount: dict, message: str
):
    host = tmp_path / "host"
    host.mkdir()
    (host / "escape").symlink_to("/etc")
    volume = {"name": "h", "hostPath": {"path": str(host)}}
    spec = {"name": "h", "mountPath": str(tmp_path / "in"), **mount}
    sim_cluster.store.create(
        "pods", NS, make_pod("p", [volume], {"name": "main", "command": SLEEP, "volumeMounts": [spec]})
    )
    await eventually(lambda: waiting(sim_cluster, "p").get("reason") == "CreateContainerConfigError", what="the error")
    assert waiting(sim_cluster, "p")["message"] == message
    assert not (tmp_path / "in").exists()


async def test_a_mount_inside_another_mount_is_made_in_that_volume(sim_cluster: SimCluster, tmp_path: Path):
    sim_cluster.store.create("configmaps", NS, config_map("cfg", k="v"))
    outer = tmp_path / "outer"
    mounts = [{"name": "cfg", "mountPath": str(outer / "deep" / "cfg")}, {"name": "scratch", "mountPath": str(outer)}]
    pod = make_pod(
        "p",
        [{"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "cfg"}}],
        {"name": "main", "command": SLEEP, "volumeMounts": mounts},
    )
    sim_cluster.store.create("pods", NS, pod)
    await started(sim_cluster, "p")
    pid = pid_of(sim_cluster, "p")
    assert (seen_by(pid, outer) / "deep" / "cfg" / "k").read_text() == "v"
    assert list(outer.iterdir()) == []  # the inner mount point was made in the emptyDir, not here
    uid = pod_of(sim_cluster, "p")["metadata"]["uid"]
    assert (pod_dir(sim_cluster, uid) / "volumes" / "kubernetes.io~empty-dir" / "scratch" / "deep" / "cfg").is_dir()


# ------------------------------------------------------------------------------------------------ claims


async def test_a_claim_provisioned_by_the_cluster_outlives_its_pods(sim_cluster: SimCluster, tmp_path: Path):
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    sim_cluster.store.create("persistentvolumeclaims", NS, claim)
    at = tmp_path / "ckpt"
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    writer = make_pod(
        "writer",
        volumes,
        {
            "name": "main",
            "command": ["sh", "-c", f"echo step-42 > {at}/latest"],
            "volumeMounts": [{"name": "data", "mountPath": str(at)}],
        },
    )
    sim_cluster.store.create("pods", NS, writer)
    await eventually(lambda: pod_of(sim_cluster, "writer")["status"].get("phase") == "Succeeded", what="written")
    pvc = sim_cluster.store.get("persistentvolumeclaims", NS, "ckpt")
    assert pvc is not None
    pv = sim_cluster.store.get("persistentvolumes", None, pvc["spec"]["volumeName"])
    assert pv is not None
    assert (Path(pv["spec"]["hostPath"]["path"]) / "latest").read_text() == "step-42\n"
    await deleted(sim_cluster, "writer")
    reader = make_pod(
        "reader",
        [{"name": "data", "persistentVolumeClaim": {"claimName": "ckpt", "readOnly": True}}],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "data", "mountPath": str(at)}]},
    )
    sim_cluster.store.create("pods", NS, reader)
    await started(sim_cluster, "reader")
    pid = pid_of(sim_cluster, "reader")
    assert seen_by(pid, at / "latest").read_text() == "step-42\n"
    with pytest.raises(OSError) as caught:
        seen_by(pid, at / "other").write_text("no")
    assert caught.value.errno == errno.EROFS


async def test_a_claim_that_is_not_ready_fails_the_mount_until_it_is(sim_cluster: SimCluster, tmp_path: Path):
    backing = tmp_path / "backing"
    ready: list[str] = []

    def resolver(namespace: str, claim: str) -> ClaimPath:
        assert (namespace, claim) == (NS, "later")
        return ClaimPath(path=str(backing)) if ready else ClaimPath(reason="PVC is not bound")

    sim_cluster.kubelet.runtime.claims = resolver
    # The claim exists (the scheduler holds a pod whose claim does not); the resolver above stands for it.
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "later"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    sim_cluster.store.create("persistentvolumeclaims", NS, claim)
    at = tmp_path / "in"
    pod = make_pod(
        "p",
        [{"name": "data", "persistentVolumeClaim": {"claimName": "later"}}],
        {"name": "main", "command": SLEEP, "volumeMounts": [{"name": "data", "mountPath": str(at)}]},
    )
    sim_cluster.store.create("pods", NS, pod)
    await eventually(lambda: events(sim_cluster, "p", "FailedMount"), what="a FailedMount event")
    assert events(sim_cluster, "p", "FailedMount")[0]["message"] == (
        "Unable to attach or mount volumes: unmounted volumes=[data], unattached volumes=[data], "
        "failed to process volumes=[data]: error processing PVC default/later: PVC is not bound"
    )
    assert waiting(sim_cluster, "p") == {"reason": "ContainerCreating"}
    backing.mkdir()
    (backing / "x").write_text("claimed")
    ready.append("bound")
    await started(sim_cluster, "p")
    assert seen_by(pid_of(sim_cluster, "p"), at / "x").read_text() == "claimed"


# ------------------------------------------------------------------------------------------------ leaks


@pytest.mark.parametrize("kill_janitor", [False, True])
async def test_a_sigkilled_simulator_leaves_no_mount_point_or_volume(tmp_path: Path, kill_janitor: bool):
    """`tfjob-controller sim --runtime process` SIGKILLed with a pod whose volumes are mounted: the
    holder and the container die with it, the janitor removes the mount points the runtime created; if
    the janitor dies too, the next simulator's start does."""
    at = tmp_path / "made" / "data"
    kubeconfig = tmp_path / "kc"
    async with process_sim_to_kill(kubeconfig) as (proc, prefix):
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


def test_an_unsupported_volume_type_fails_its_mount(tmp_path: Path):
    pod = {
        "metadata": {"uid": "u1", "namespace": NS},
        "spec": {"volumes": [{"name": "share", "nfs": {"server": "nas", "path": "/x"}}]},
    }
    volumes = PodVolumes(pod, str(tmp_path / "pod"))
    assert volumes.set_up(FakeStore(), pod, StoreClaims(FakeStore()), {}) == [
        'MountVolume.SetUp failed for volume "share" : nfs volumes are not supported by the simulator\'s process runtime'
    ]
    assert not volumes.ready


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
