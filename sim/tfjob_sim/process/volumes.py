"""Pod volumes of the process runtime: what kubelet's volume manager and runc's mounts do, with real
directories, tmpfs and bind mounts in the pod's own mount namespace.

Why: a program that reads its configuration from a ConfigMap volume, shares files with a sidecar
through an ``emptyDir`` or writes a checkpoint to a claimed volume can only be tried by giving it
those files. There is no container root filesystem here (a container sees this machine's tree), so
a ``mountPath`` is a path of this machine's tree *as seen from the pod's mount namespace*: a mount there
is invisible to everything else.

Layout (as kubelet's ``/var/lib/kubelet/pods/<uid>/volumes/<plugin>/<name>``): each volume the runtime
fills has a directory ``<state dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>``.

- :class:`PodVolumes` is one pod's volumes. :meth:`~PodVolumes.create` makes their directories and
  the pod's mount namespace (:class:`MountNamespace`: a holder process, tfjob_sim.process.mountns,
  which mounts a tmpfs for each memory-backed volume); :meth:`~PodVolumes.set_up` does what
  ``MountVolume.SetUp`` does for each volume (writes ConfigMap, Secret and downward API data, checks
  hostPath types, resolves claims) and returns the ``FailedMount`` messages of the volumes that are not
  ready; called again later it writes what changed (the ``..data`` swap);
  :meth:`~PodVolumes.container_mounts` gives a container's mounts (``subPath`` and ``subPathExpr``
  resolved inside their volume) for the exec helper, which binds them in a mount namespace of the
  container's own, a child of the pod's; :meth:`~PodVolumes.remove` ends the namespace and removes
  the directories.
- :class:`MountPoints` creates the ``mountPath`` directories (or empty files) that do not exist in this
  machine's tree, records them in the state directory before creating them, and removes them when no pod
  uses them any more (tfjob_sim.process.janitor removes them if the simulator dies without stopping).
- :class:`StoreClaims` resolves a ``persistentVolumeClaim`` to a directory from the cluster's state
  (PVC ``spec.volumeName`` -> PV ``spec.hostPath.path`` or ``spec.local.path``); any callable with its
  signature can stand in (:class:`ClaimResolver`).

Messages are kubelet's: ``MountVolume.SetUp failed for volume "<v>" : configmap "<name>" not found``
for a FailedMount event, ``failed to prepare subPath for volumeMount ...`` for a container that cannot
be configured (CreateContainerConfigError).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import os
import random
import re
import shutil
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

import structlog

from tfjob_sim.gotext import go_quote
from tfjob_sim.process import janitor
from tfjob_sim.process.env import ConfigError, StoreReader
from tfjob_sim.quantity import parse_quantity

log = structlog.get_logger(__name__)

MOUNTNS = str(Path(__file__).with_name("mountns.py"))
# How long the mount namespace holder may take to say it is ready, and to exit once told to.
HOLDER_START_SECONDS = 30.0
HOLDER_STOP_SECONDS = 5.0
DEFAULT_MODE = 0o644
# kubelet's plugin directory names.
PLUGINS = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}
KINDS = (*PLUGINS, "hostPath", "persistentVolumeClaim")
# Volumes whose data kubelet writes (and rewrites when their source changes); always mounted read-only.
API_DATA = ("configMap", "secret", "downwardAPI", "projected")
DATA_LINK = "..data"
MAX_SYMLINKS = 40

Payload = dict[str, tuple[int, bytes]]  # relative path -> (mode, contents)


class VolumeError(Exception):
    """A volume cannot be set up now (the message is kubelet's error, without the FailedMount prefix)."""


# --------------------------------------------------------------------------------------------
# Claims


@dataclass(frozen=True)
class ClaimPath:
    """Where a claim's data lives on this machine, or why it cannot be mounted (yet)."""

    path: str | None = None
    reason: str | None = None


class ClaimResolver(Protocol):
    def __call__(self, namespace: str, claim: str) -> ClaimPath: ...


class StoreClaims:
    """Resolves a claim from the store: the PVC's bound PV and its ``hostPath``/``local`` directory."""

    def __init__(self, store: StoreReader) -> None:
        self._store = store

    def _get(self, resource: str, namespace: str | None, name: str) -> dict | None:
        from tfjob_sim.errors import ApiError

        try:
            return self._store.get(resource, namespace, name)
        except ApiError as exc:  # the store does not serve this resource at all
            raise VolumeError(f"failed to fetch {resource} from API server: {exc}") from None

    def __call__(self, namespace: str, claim: str) -> ClaimPath:
        try:
            pvc = self._get("persistentvolumeclaims", namespace, claim)
            if pvc is None:
                return ClaimPath(
                    reason=f'failed to fetch PVC from API server: persistentvolumeclaims "{claim}" not found'
                )
            volume_name = (pvc.get("spec") or {}).get("volumeName")
            if not volume_name or (pvc.get("status") or {}).get("phase", "Bound") != "Bound":
                return ClaimPath(reason="PVC is not bound")
            pv = self._get("persistentvolumes", None, volume_name)
        except VolumeError as exc:
            return ClaimPath(reason=str(exc))
        if pv is None:
            return ClaimPath(
                reason=f'failed to fetch PV {volume_name} from API server: persistentvolumes "{volume_name}" not found'
            )
        spec = pv.get("spec") or {}
        for kind in ("hostPath", "local"):
            path = (spec.get(kind) or {}).get("path")
            if path:
                return ClaimPath(path=path)
        return ClaimPath(
            reason=f"PV {volume_name} has neither hostPath nor local: the simulator's process runtime mounts only those"
        )


# --------------------------------------------------------------------------------------------
# Payloads: what kubelet's configMap, secret, downwardAPI and projected plugins write


def _mode(item: dict, default: int) -> int:
    mode = item.get("mode")
    return int(mode) & 0o7777 if isinstance(mode, int) else default


def _default_mode(source: dict) -> int:
    mode = source.get("defaultMode")
    return int(mode) & 0o7777 if isinstance(mode, int) else DEFAULT_MODE


def _config_map_data(obj: dict) -> dict[str, bytes]:
    data = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
    for key, value in (obj.get("binaryData") or {}).items():
        data[key] = base64.b64decode(value)
    return data


def _secret_data(obj: dict) -> dict[str, bytes]:
    data = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    for key, value in (obj.get("stringData") or {}).items():  # what the API server folds into data
        data[key] = str(value).encode()
    return data


def _keyed_payload(
    store: StoreReader, namespace: str, source: dict, kind: str, default_mode: int
) -> tuple[Payload, VolumeError | None]:
    """A configMap or secret source: its keys (or ``items``) as files; the error of a missing source/key."""
    resource, label = ("configmaps", "configmap") if kind == "configMap" else ("secrets", "secret")
    name = source.get("name", "") if kind == "configMap" else source.get("secretName", source.get("name", ""))
    optional = bool(source.get("optional"))
    obj = store.get(resource, namespace, name)
    if obj is None:
        if optional:
            return {}, None
        return {}, VolumeError(f'{label} "{name}" not found')
    data = _config_map_data(obj) if kind == "configMap" else _secret_data(obj)
    items = [i for i in source.get("items") or [] if isinstance(i, dict)]
    if not items:
        return {key: (default_mode, value) for key, value in data.items()}, None
    payload: Payload = {}
    for item in items:
        key = item.get("key", "")
        if key not in data:
            if optional:
                continue
            if kind == "configMap":
                return {}, VolumeError(f"configmap references non-existent config key: {key}")
            return {}, VolumeError(f"references non-existent secret key: {key}")
        payload[str(item.get("path", key))] = (_mode(item, default_mode), data[key])
    return payload, None


def _format_map(values: Mapping[str, Any]) -> str:
    """kubelet's fieldpath.FormatMap: ``key="value"`` lines, sorted, no newline at the end."""
    return "\n".join(f"{k}={go_quote(str(values[k]))}" for k in sorted(values))


def _field_path(pod: dict, path: str) -> str:
    """fieldpath.ExtractFieldPathAsString: the metadata fields a downward API volume may show."""
    meta = pod.get("metadata") or {}
    for kind in ("labels", "annotations"):
        if path == f"metadata.{kind}":
            return _format_map(meta.get(kind) or {})
        prefix = f"metadata.{kind}['"
        if path.startswith(prefix) and path.endswith("']"):
            return str((meta.get(kind) or {}).get(path[len(prefix) : -2], ""))
    if path in ("metadata.name", "metadata.namespace", "metadata.uid"):
        return str(meta.get(path.split(".", 1)[1], ""))
    raise VolumeError(f"unsupported fieldPath: {path}")


def _resource_value(pod: dict, ref: dict, allocatable: Mapping[str, Decimal]) -> str:
    """resource.ExtractResourceValueByContainerNameAndNodeAllocatable: a container's request or limit
    (a missing limit is the node's allocatable), divided by the divisor and rounded up."""
    spec = pod.get("spec") or {}
    name = ref.get("containerName", "")
    containers = [c for key in ("containers", "initContainers") for c in spec.get(key) or [] if isinstance(c, dict)]
    container = next((c for c in containers if c.get("name") == name), None)
    if container is None:
        raise VolumeError(f"container {name} not found")
    resource = ref.get("resource", "")
    kind, _, what = resource.partition(".")
    if kind not in ("limits", "requests") or what not in ("cpu", "memory", "ephemeral-storage"):
        raise VolumeError(f"unsupported container resource : {resource}")
    resources = container.get("resources") or {}
    value = (resources.get(kind) or {}).get(what)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(what)  # the API server's defaulting: requests = limits
    try:
        if value is not None:
            amount = parse_quantity(value)
        elif kind == "limits" and what in allocatable:
            amount = allocatable[what]
        elif kind == "requests":
            amount = Decimal(0)
        else:
            raise VolumeError(f'resourceFieldRef "{resource}" has no value (the node allocatable is unknown)')
        divisor = parse_quantity(ref.get("divisor") or "1")
    except ValueError as exc:
        raise VolumeError(f"resourceFieldRef {resource}: {exc}") from None
    if divisor <= 0:
        raise VolumeError(f"resourceFieldRef {resource}: divisor must be positive")
    return str(math.ceil(amount / divisor))


def _downward_payload(pod: dict, items: list, default_mode: int, allocatable: Mapping[str, Decimal]) -> Payload:
    payload: Payload = {}
    errors = []
    for item in items:
        if not isinstance(item, dict):
            continue
        try:
            if item.get("fieldRef"):
                text = _field_path(pod, (item["fieldRef"] or {}).get("fieldPath", ""))
            elif item.get("resourceFieldRef"):
                text = _resource_value(pod, item["resourceFieldRef"] or {}, allocatable)
            else:
                continue
        except VolumeError as exc:
            errors.append(str(exc))
            continue
        payload[item.get("path", "")] = (_mode(item, default_mode), text.encode())
    if errors:
        raise VolumeError(_aggregate(errors))
    return payload


def _aggregate(errors: list[str]) -> str:
    """utilerrors.NewAggregate's message: one error as itself, several in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def payload_of(kind: str, source: dict, store: StoreReader, pod: dict, allocatable: Mapping[str, Decimal]) -> Payload:
    """The files of an API-data volume (configMap, secret, downwardAPI, projected); VolumeError when
    its source is missing."""
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    default_mode = _default_mode(source)
    if kind in ("configMap", "secret"):
        payload, error = _keyed_payload(store, namespace, source, kind, default_mode)
        if error is not None:
            raise error
        return payload
    if kind == "downwardAPI":
        return _downward_payload(pod, source.get("items") or [], default_mode, allocatable)
    # projected: the sources' files together; a source's error does not stop the others being read.
    payload = {}
    errors = []
    for projection in source.get("sources") or []:
        if not isinstance(projection, dict):
            continue
        try:
            if projection.get("configMap") is not None or projection.get("secret") is not None:
                sub = "configMap" if projection.get("configMap") is not None else "secret"
                part, error = _keyed_payload(store, namespace, projection[sub] or {}, sub, default_mode)
                if error is not None:
                    raise error
            elif projection.get("downwardAPI") is not None:
                items = (projection["downwardAPI"] or {}).get("items") or []
                part = _downward_payload(pod, items, default_mode, allocatable)
            else:
                continue  # serviceAccountToken, clusterTrustBundle, podCertificate: not written here
        except VolumeError as exc:
            errors.append(str(exc))
            continue
        payload.update(part)
    if errors:
        raise VolumeError(_aggregate(errors))
    return payload


def _check_payload_path(path: str) -> None:
    """kubelet's atomic writer validatePath."""
    if not path or len(path) > 4096:
        raise VolumeError(f"invalid path: {path!r}: must be 1 to 4096 characters")
    if os.path.isabs(path):
        raise VolumeError(f"invalid path: {path!r}: must be relative path")
    parts = path.split("/")
    if any(len(part) > 255 for part in parts):
        raise VolumeError(f"invalid path: {path!r}: a path element is longer than 255 characters")
    if any(part == ".." for part in parts):
        raise VolumeError(f"invalid path: {path!r}: must not contain '..'")
    if path.startswith(".."):
        raise VolumeError(f"invalid path: {path!r}: must not start with '..'")


def _timestamped_dir(target: str) -> str:
    """A new ``..YYYY_MM_DD_hh_mm_ss.NNNNNNNNN`` directory in ``target`` (mode 0755); its name."""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    while True:
        name = f"{stamp}{random.randrange(10**9):09d}"
        try:
            os.mkdir(os.path.join(target, name), 0o755)
        except FileExistsError:
            continue
        os.chmod(os.path.join(target, name), 0o755)
        return name


def write_atomically(target: str, payload: Payload) -> None:
    """kubelet's AtomicWriter.Write: the payload in a new timestamped directory, ``..data`` renamed
    over to point to it in one step, a ``key -> ..data/key`` symlink per top-level entry, then the old
    directory and the entries that left the payload removed. A reader of ``target/key`` sees the old
    files or the new ones, never a mixture."""
    for path in payload:
        _check_payload_path(path)
    data_link = os.path.join(target, DATA_LINK)
    old = os.readlink(data_link) if os.path.islink(data_link) else None
    new = _timestamped_dir(target)
    try:
        for path, (mode, contents) in sorted(payload.items()):
            full = os.path.join(target, new, path)
            os.makedirs(os.path.dirname(full), mode=0o755, exist_ok=True)
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(contents)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        temporary = os.path.join(target, DATA_LINK + "_tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        os.symlink(new, temporary)
        os.rename(temporary, data_link)
    except BaseException:
        shutil.rmtree(os.path.join(target, new), ignore_errors=True)
        raise
    tops = {path.split("/", 1)[0] for path in payload}
    for top in sorted(tops):
        link = os.path.join(target, top)
        if os.path.islink(link):
            if os.readlink(link) == f"{DATA_LINK}/{top}":
                continue
            os.unlink(link)
        elif os.path.lexists(link):
            continue  # not one of the writer's links (a directory a subPath mount created): left alone
        os.symlink(f"{DATA_LINK}/{top}", link)
    if old is not None and old != new and old.startswith("..") and "/" not in old:
        shutil.rmtree(os.path.join(target, old), ignore_errors=True)
    for entry in os.listdir(target):
        link = os.path.join(target, entry)
        if entry.startswith("..") or entry in tops or not os.path.islink(link):
            continue
        if os.readlink(link) == f"{DATA_LINK}/{entry}":
            os.unlink(link)


# --------------------------------------------------------------------------------------------
# hostPath


def check_host_path(path: str, type_: str) -> None:
    """kubelet's hostPath type check (creating the directory or file for the ...OrCreate types)."""
    if any(part == ".." for part in path.split("/")):
        raise VolumeError(f"invalid HostPath `{path}`: must not contain '..'")
    if not type_:
        return
    try:
        st: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise VolumeError(f"hostPath type check failed: {path}: {exc.strerror}") from None
    if type_ == "DirectoryOrCreate" and st is None:
        try:
            os.makedirs(path, mode=0o755)
        except OSError as exc:
            raise VolumeError(f"mkdir {path}: {exc.strerror}") from None
        return
    if type_ == "FileOrCreate" and st is None:
        try:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        except OSError as exc:
            raise VolumeError(f"open {path}: {(exc.strerror or '').lower()}") from None
        return
    checks: dict[str, tuple[Callable[[int], bool], str]] = {
        "DirectoryOrCreate": (stat.S_ISDIR, "a directory"),
        "Directory": (stat.S_ISDIR, "a directory"),
        "FileOrCreate": (stat.S_ISREG, "a file"),
        "File": (stat.S_ISREG, "a file"),
        "Socket": (stat.S_ISSOCK, "a socket file"),
        "CharDevice": (stat.S_ISCHR, "a character device"),
        "BlockDevice": (stat.S_ISBLK, "a block device"),
    }
    if type_ not in checks:
        raise VolumeError(f"hostPath type check failed: unknown type {type_}")
    test, what = checks[type_]
    if st is None or not test(st.st_mode):
        raise VolumeError(f"hostPath type check failed: {path} is not {what}")


# --------------------------------------------------------------------------------------------
# The pod's mount namespace


class MountNamespace:
    """A running holder (tfjob_sim.process.mountns) and an open descriptor of its mount namespace."""

    def __init__(self, process: asyncio.subprocess.Process, fd: int) -> None:
        self._process = process
        self.fd = fd  # for setns(2): the exec helper inherits it

    @property
    def pid(self) -> int:
        return self._process.pid

    @classmethod
    async def start(cls, *, python: str, prefix: str, uid: str, tmpfs: list[dict]) -> MountNamespace:
        spec = {"parent": os.getpid(), "tmpfs": tmpfs}
        process = await asyncio.create_subprocess_exec(
            python,
            "-I",
            "-S",
            MOUNTNS,
            prefix,
            uid,
            json.dumps(spec),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # signals to the simulator's process group are not for it
        )
        assert process.stdout is not None
        try:
            try:
                line = await asyncio.wait_for(process.stdout.readline(), HOLDER_START_SECONDS)
            except TimeoutError:
                line = b"did not answer in time"
            text = line.decode(errors="replace").strip()
            if text != "ready":
                raise OSError(f"cannot create the pod's mount namespace: {text or 'the holder exited'}")
            fd = os.open(f"/proc/{process.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            if process.returncode is not None:  # the pid could have been another process's by now
                os.close(fd)
                raise OSError("the pod's mount namespace holder exited at once")
        except BaseException:
            await _end(process)
            raise
        return cls(process, fd)

    def view(self, path: str) -> str:
        """``path`` as the pod's mount namespace sees it, reachable from this process."""
        return f"/proc/{self._process.pid}/root{path}"

    async def stop(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        await _end(self._process)


async def _end(process: asyncio.subprocess.Process) -> None:
    """Close the holder's stdin (it exits), SIGKILL it if it does not, and reap it."""
    if process.stdin is not None:
        process.stdin.close()
    try:
        await asyncio.wait_for(process.wait(), HOLDER_STOP_SECONDS)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


# --------------------------------------------------------------------------------------------
# Mounts of a container


@dataclass(frozen=True)
class Mount:
    """One bind mount the exec helper makes: ``source`` (a path in the pod's mount namespace) on
    ``target`` (the ``mountPath``)."""

    source: str
    target: str
    read_only: bool
    is_file: bool  # the source is not a directory: the mount point is a file

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "read_only": self.read_only, "is_file": self.is_file}


def expand_sub_path(expression: str, env: Mapping[str, str]) -> str:
    """kubelet's ExpandContainerVolumeMounts: ``$(VAR)`` from the container's env; a variable that is
    missing or empty is an error."""
    missing: set[str] = set()

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        if not env.get(name):
            missing.add(name)
            return ""
        return env[name]

    expanded = re.sub(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)", one, expression)
    if missing:
        raise ConfigError(f"missing value for {', '.join(sorted(missing))}")
    return expanded


def resolve_within(view_root: str, root: str, sub: str) -> str | None:
    """The path ``sub`` names inside the volume at ``root`` (seen from here at ``view_root``), every
    symlink followed, relative to the root; None when it leaves the volume. A missing part ends the walk
    (what is left is taken as written)."""
    resolved: list[str] = []
    pending = [p for p in sub.split("/") if p not in ("", ".")]
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if not resolved:
                return None
            resolved.pop()
            continue
        here = os.path.join(view_root, *resolved, part)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return "/".join([*resolved, part, *pending])
        if not stat.S_ISLNK(st.st_mode):
            resolved.append(part)
            continue
        links += 1
        if links > MAX_SYMLINKS:
            return None
        target = os.readlink(here)
        if target.startswith("/"):
            if target != root and not target.startswith(root.rstrip("/") + "/"):
                return None
            resolved = []
            target = target[len(root) :]
        pending = [p for p in target.split("/") if p not in ("", ".")] + pending
    return "/".join(resolved)


# --------------------------------------------------------------------------------------------
# One pod's volumes


@dataclass
class Volume:
    name: str
    kind: str  # one of KINDS, or the unsupported kind's key
    source: dict
    directory: str | None = None  # for the kinds the runtime fills: its directory in the state dir
    tmpfs_size: int | None = None
    tmpfs: bool = False
    path: str | None = None  # what mounts bind from (in the pod's mount namespace), once set up
    read_only: bool = False  # every mount of it is read-only
    written: Payload | None = None  # the payload last written (API-data volumes)


def _kind(volume: dict) -> str:
    for kind in KINDS:
        if volume.get(kind) is not None:
            return kind
    others = sorted(k for k in volume if k != "name")
    return others[0] if others else "emptyDir"


def _memory_limits_sum(pod: dict) -> int | None:
    """The sum of the containers' memory limits, if every container has one (kubelet sizes a memory
    emptyDir without sizeLimit so)."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        if limit is None:
            return None
        try:
            total += int(parse_quantity(limit))
        except ValueError:
            return None
    return total or None


class PodVolumes:
    """See the module docstring."""

    def __init__(self, pod: dict, root: str) -> None:
        meta = pod.get("metadata") or {}
        self.uid: str = meta["uid"]
        self.root = root  # <state dir>/pods/<uid>
        self.namespace = meta.get("namespace") or "default"
        self.volumes: dict[str, Volume] = {}
        self.mount_ns: MountNamespace | None = None
        for spec in (pod.get("spec") or {}).get("volumes") or []:
            if not isinstance(spec, dict) or not spec.get("name"):
                continue
            kind = _kind(spec)
            given = spec.get(kind)
            source: dict = given if isinstance(given, dict) else {}
            volume = Volume(spec["name"], kind, source)
            if kind in PLUGINS:
                volume.directory = os.path.join(root, "volumes", PLUGINS[kind], volume.name)
                volume.read_only = kind in API_DATA
            if kind == "emptyDir" and source.get("medium") == "Memory":
                volume.tmpfs = True
                limit = source.get("sizeLimit")
                try:
                    volume.tmpfs_size = int(parse_quantity(limit)) if limit is not None else _memory_limits_sum(pod)
                except ValueError:
                    volume.tmpfs_size = None
            if kind in ("secret", "projected"):
                volume.tmpfs = True  # kubelet keeps them in memory, never on disk
            if kind == "persistentVolumeClaim":
                volume.read_only = bool(source.get("readOnly"))
            self.volumes[volume.name] = volume

    @property
    def updatable(self) -> bool:
        """Whether :meth:`set_up` has something to refresh later (API-data volumes)."""
        return any(v.kind in API_DATA for v in self.volumes.values())

    def view(self, path: str) -> str:
        assert self.mount_ns is not None
        return self.mount_ns.view(path)

    async def create(self, *, python: str, prefix: str) -> None:
        """The volumes' directories and the pod's mount namespace (with its tmpfs mounts). A pod without
        volumes has nothing to share: its containers' mount namespaces are copies of this machine's."""
        if not self.volumes:
            return
        tmpfs = []
        try:
            for volume in self.volumes.values():
                if volume.directory is None:
                    continue
                os.makedirs(volume.directory, mode=0o750, exist_ok=True)
                os.chmod(volume.directory, 0o777)  # kubelet's emptyDir mode: any container user may write
                if volume.tmpfs:
                    tmpfs.append({"path": volume.directory, "size": volume.tmpfs_size})
                if volume.kind == "emptyDir":
                    volume.path = volume.directory
            self.mount_ns = await MountNamespace.start(python=python, prefix=prefix, uid=self.uid, tmpfs=tmpfs)
        except BaseException:
            await self.remove()
            raise

    def set_up(
        self, store: StoreReader, pod: dict, claims: ClaimResolver, allocatable: Mapping[str, Decimal]
    ) -> list[str]:
        """MountVolume.SetUp of every volume not set up yet, and a rewrite of the API-data volumes whose
        contents changed; the FailedMount messages (empty: every volume is ready)."""
        failures = []
        for volume in self.volumes.values():
            try:
                self._set_up(volume, store, pod, claims, allocatable)
            except VolumeError as exc:
                failures.append(self._message(volume, str(exc)))
            except OSError as exc:
                failures.append(self._message(volume, str(exc)))
        return failures

    @property
    def ready(self) -> bool:
        return all(v.path is not None for v in self.volumes.values())

    def _message(self, volume: Volume, error: str) -> str:
        if volume.kind == "persistentVolumeClaim":
            name = volume.name
            return (
                f"Unable to attach or mount volumes: unmounted volumes=[{name}], unattached volumes=[{name}], "
                f"failed to process volumes=[{name}]: error processing PVC {self.namespace}/"
                f"{volume.source.get('claimName', '')}: {error}"
            )
        return f'MountVolume.SetUp failed for volume "{volume.name}" : {error}'

    def _set_up(
        self,
        volume: Volume,
        store: StoreReader,
        pod: dict,
        claims: ClaimResolver,
        allocatable: Mapping[str, Decimal],
    ) -> None:
        if volume.kind == "emptyDir":
            return
        if volume.kind in API_DATA:
            assert volume.directory is not None
            payload = payload_of(volume.kind, volume.source, store, pod, allocatable)
            if payload != volume.written:
                write_atomically(self.view(volume.directory), payload)
                volume.written = payload
            volume.path = volume.directory
            return
        if volume.path is not None:
            return  # hostPath checked, claim resolved: kubelet does not mount them again
        if volume.kind == "hostPath":
            path = volume.source.get("path", "")
            check_host_path(path, volume.source.get("type") or "")
            volume.path = path
            return
        if volume.kind == "persistentVolumeClaim":
            found = claims(self.namespace, volume.source.get("claimName", ""))
            if found.path is None:
                raise VolumeError(found.reason or "not ready")
            volume.path = found.path
            return
        raise VolumeError(f"{volume.kind} volumes are not supported by the simulator's process runtime")

    def container_mounts(self, container: dict, env: Mapping[str, str]) -> list[Mount]:
        """The container's ``volumeMounts`` as bind mounts, parents before what is mounted inside them.
        ConfigError (CreateContainerConfigError) when one cannot be prepared."""
        name = container.get("name", "")
        mounts = []
        for spec in container.get("volumeMounts") or []:
            if not isinstance(spec, dict):
                continue
            volume = self.volumes.get(spec.get("name", ""))
            if volume is None:
                raise ConfigError(f'cannot find volume "{spec.get("name", "")}" to mount into container "{name}"')
            if volume.path is None:
                raise ConfigError(f'volume "{volume.name}" is not mounted')
            sub = spec.get("subPath") or ""
            if spec.get("subPathExpr"):
                sub = expand_sub_path(spec["subPathExpr"], env)
            source = volume.path
            if sub:
                source = self._sub_path(volume, sub, spec.get("name", ""), name)
            is_file = not os.path.isdir(self.view(source))
            target = os.path.normpath("/" + str(spec.get("mountPath", "")).lstrip("/"))
            read_only = volume.read_only or bool(spec.get("readOnly"))
            mounts.append(Mount(source, target, read_only, is_file))
        return sorted(mounts, key=lambda m: (m.target.rstrip("/").count("/"), m.target))

    def _sub_path(self, volume: Volume, sub: str, mount_name: str, container: str) -> str:
        assert volume.path is not None
        if sub.startswith("/"):
            raise ConfigError(f"error SubPath `{sub}` must not be an absolute path")
        if any(part == ".." for part in sub.split("/")):
            raise ConfigError(f"unable to provision SubPath `{sub}`: must not contain '..'")
        prepare = f'failed to prepare subPath for volumeMount "{mount_name}" of container "{container}"'
        view_root = self.view(volume.path)
        resolved = resolve_within(view_root, volume.path, sub)
        if resolved is None:
            raise ConfigError(prepare)
        full = os.path.join(view_root, resolved) if resolved else view_root
        if not os.path.lexists(full):
            # kubelet creates a missing subPath as directories with the volume's own mode.
            try:
                mode = stat.S_IMODE(os.stat(view_root).st_mode)
                here = view_root
                for part in resolved.split("/"):
                    here = os.path.join(here, part)
                    if not os.path.lexists(here):
                        os.mkdir(here, mode)
                        os.chmod(here, mode)  # not the umask's
            except OSError:
                raise ConfigError(
                    f'failed to create subPath directory for volumeMount "{mount_name}" of container "{container}"'
                ) from None
            again = resolve_within(view_root, volume.path, sub)
            if again != resolved:
                raise ConfigError(prepare)
        return os.path.join(volume.path, resolved) if resolved else volume.path

    async def remove(self) -> None:
        """End the mount namespace and remove the volumes' directories (the containers are gone)."""
        if self.mount_ns is not None:
            mount_ns, self.mount_ns = self.mount_ns, None
            await mount_ns.stop()
        errors = await asyncio.to_thread(janitor.remove_tree, self.root)
        for error in errors:
            log.warning("a pod's volume directory was not removed completely", pod_uid=self.uid, error=error)


# --------------------------------------------------------------------------------------------
# Mount points created in this machine's tree


@dataclass
class MountPoints:
    """The ``mountPath`` directories (and files) the runtime created, and the pods that use them."""

    state_dir: str
    _kinds: dict[str, str] = field(default_factory=dict)  # path -> "dir" | "file", in creation order
    _users: dict[str, set[str]] = field(default_factory=dict)

    def acquire(self, uid: str, target: str, is_file: bool) -> None:
        """Make sure ``target`` exists, creating what is missing (recorded first); raises OSError."""
        parts = [p for p in target.split("/") if p]
        for i in range(1, len(parts) + 1):
            path = "/" + "/".join(parts[:i])
            if path in self._kinds:
                self._users[path].add(uid)
                continue
            if os.path.lexists(path):
                continue
            kind = "file" if is_file and i == len(parts) else "dir"
            self._kinds[path] = kind
            self._users[path] = {uid}
            self._save()
            try:
                if kind == "dir":
                    os.mkdir(path, 0o755)
                else:
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
            except OSError:
                del self._kinds[path], self._users[path]
                self._save()
                raise

    def release(self, uid: str) -> list[str]:
        """The pod is gone: remove what no other pod uses; the errors."""
        errors = []
        for path in reversed(list(self._kinds)):
            users = self._users[path]
            users.discard(uid)
            if not users:
                error = janitor.remove_created(path, self._kinds[path])
                if error:
                    errors.append(error)
                del self._kinds[path], self._users[path]
        self._save()
        return errors

    def release_all(self) -> list[str]:
        errors = []
        for path in reversed(list(self._kinds)):
            error = janitor.remove_created(path, self._kinds[path])
            if error:
                errors.append(error)
        self._kinds.clear()
        self._users.clear()
        self._save()
        return errors

    def _save(self) -> None:
        """Replace the record in one step (a reader never sees half of it)."""
        records = [{"path": p, "kind": k} for p, k in self._kinds.items()]
        final = os.path.join(self.state_dir, janitor.MOUNT_POINTS_FILE)
        temporary = final + ".tmp"
        with open(temporary, "w") as f:
            json.dump(records, f)
        os.replace(temporary, final)


__all__ = [
    "ClaimPath",
    "ClaimResolver",
    "Mount",
    "MountNamespace",
    "MountPoints",
    "PodVolumes",
    "StoreClaims",
    "VolumeError",
    "check_host_path",
    "payload_of",
    "write_atomically",
]
