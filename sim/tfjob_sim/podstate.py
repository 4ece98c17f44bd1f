"""The kubelet's pod state and pod rules, shared by the kubelet (tfjob_sim.kubelet) and the process
runtime's pod lifecycle (tfjob_sim.process.pods).

Why a module of its own: both runtimes keep the same per-pod record, lifecycle states, restart
back-off, termination records and event wording; here they are one piece that both import, so the
kubelet and the process runtime do not import each other.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from tfjob_sim.logs import Source
from tfjob_sim.store import rfc3339

ANNOTATION_PREFIX = "sim.tfjob.dev/"
# ``"true"``: node-pressure eviction now (both runtimes honour it).
EVICT = ANNOTATION_PREFIX + "evict"
KUBELET = "kubelet"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# killContainer: "always give containers a minimal shutdown window to avoid unnecessary SIGKILLs".
MINIMUM_GRACE_SECONDS = 2.0

# Kubelet container restart back-off (pkg/kubelet: 10 s initial, doubling, 5 min cap; an entry
# older than twice the cap is forgotten, which is the "reset after 10 minutes" rule).
BACKOFF_INITIAL_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
BACKOFF_RESET_SECONDS = 2 * BACKOFF_MAX_SECONDS

# How long an unexpected write failure waits before the pod is reconciled again (wall seconds,
# not scaled: it guards against hot loops, it is not simulated time).
RETRY_AFTER_ERROR_SECONDS = 1.0

# Kubelet-side lifecycle of one pod.
BOUND = "bound"  # on a node, not yet admitted by its kubelet
CREATING = "creating"  # admitted, containers being created (start-seconds)
RUNNING = "running"
BACKOFF = "backoff"  # a container exited and waits to be restarted (CrashLoopBackOff)
EXITED = "exited"  # containers exited for good: phase Succeeded/Failed
EVICTED = "evicted"
KILLED = "killed"  # stopped because the pod is being deleted


def now_timestamp() -> str:
    """metav1.Time: RFC 3339, UTC, whole seconds."""
    return rfc3339(time.time())


def go_duration(seconds: float) -> str:
    """time.Duration.String() for whole seconds: 10s, 1m20s, 5m0s."""
    total = int(round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes}m{secs}s"


def go_duration_precise(seconds: float) -> str:
    """time.Duration.String() to the millisecond: 0s, 523ms, 1.2s, 1m30.5s."""
    millis = int(round(seconds * 1000))
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    minutes, rest = divmod(millis, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if not minutes:
        return secs
    hours, minutes = divmod(minutes, 60)
    return (f"{hours}h" if hours else "") + f"{minutes}m{secs}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _image_id(image: str) -> str:
    """What containerd reports as imageID: the normalised repository plus a digest."""
    repo = image.split("@", 1)[0]
    last = repo.rsplit("/", 1)[-1]
    if ":" in last:
        repo = repo[: len(repo) - len(last)] + last.split(":", 1)[0]
    first = repo.split("/", 1)[0]
    if "/" not in repo:
        repo = "docker.io/library/" + repo
    elif "." not in first and ":" not in first and first != "localhost":
        repo = "docker.io/" + repo
    return f"{repo}@sha256:{_sha256(image)}"


def image_size(image: str) -> int:
    """A stable, plausible compressed image size (tens of MB) for the Pulled message."""
    return 10_000_000 + int(_sha256(image)[:6], 16) * 4


def new_container_status(name: str, image: str, restart_count: int) -> dict[str, Any]:
    """A container status before its state is known: not ready, not started, no image ID or last state
    yet (the caller fills in ``state`` and what it knows)."""
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "restartCount": restart_count,
        "started": False,
        "lastState": {},
    }


def crash_loop_message(pod: dict, uid: str, name: str, backoff: float | None) -> str:
    """The waiting message of a container in CrashLoopBackOff (``backoff``: None means the initial one)."""
    meta = pod.get("metadata") or {}
    return (
        f"back-off {go_duration(backoff or BACKOFF_INITIAL_SECONDS)} restarting failed "
        f"container={name} pod={meta.get('name')}_{meta.get('namespace')}({uid})"
    )


def restarts(pod: dict, code: int) -> bool:
    """Whether the pod's restartPolicy restarts a container that exited with ``code``."""
    policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def backoff_at_exit(
    backoff: float | None, updated: float, now: float, scale: float
) -> tuple[float, float, float | None]:
    """The container restart back-off entry after an exit at ``now``: (back-off, its update time, the
    delay before the restart, None for at once). flowcontrol.Backoff.IsInBackOffSince(finishedAt): no
    entry, or one not updated for twice the cap, means no back-off: restart at once and start (or
    restart) the entry at 10 s."""
    if backoff is None or now - updated > BACKOFF_RESET_SECONDS * scale:
        return BACKOFF_INITIAL_SECONDS, now, None
    return backoff, updated, backoff * scale


def prestop_sleep_seconds(spec: dict) -> float:
    """How long the containers' preStop hooks take: ``sleep`` actions last their seconds, exec and
    httpGet hooks (nothing really runs) are instant. Containers stop in parallel, so the longest."""
    longest = 0.0
    for c in spec.get("containers") or []:
        if not isinstance(c, dict):
            continue
        sleep = (((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep") or {}).get("seconds")
        if isinstance(sleep, (int, float)) and not isinstance(sleep, bool) and sleep > longest:
            longest = float(sleep)
    return longest


def _containers(pod: dict, init: bool) -> list[tuple[str, dict]]:
    """(event fieldPath, container) of the pod's containers, init containers first if ``init``."""
    spec = pod.get("spec") or {}
    out = []
    if init:
        out += [
            (f"spec.initContainers{{{c.get('name', '')}}}", c)
            for c in spec.get("initContainers") or []
            if isinstance(c, dict)
        ]
    out += [(f"spec.containers{{{c.get('name', '')}}}", c) for c in spec.get("containers") or [] if isinstance(c, dict)]
    return out


@dataclass(slots=True)
class _Node:
    name: str
    ready: bool
    unschedulable: bool
    taints: list[dict]
    labels: dict
    cpu_m: int
    memory: int
    pods: int
    host_ip: str
    not_ready_since: float | None = None
    used_cpu_m: int = 0
    used_memory: int = 0
    used_pods: int = 0


@dataclass(slots=True)
class _Termination:
    exit_code: int
    reason: str
    started_at: str | None
    finished_at: str | None
    instance: int  # restart count of the instance that terminated (names its containerID)
    message: str | None = None


def _unknown_termination(instance: int) -> _Termination:
    return _Termination(
        exit_code=137,
        reason="ContainerStatusUnknown",
        started_at=None,
        finished_at=None,
        instance=instance,
        message="The container could not be located when the pod was terminated",
    )


@dataclass(slots=True)
class _PodRecord:
    """The kubelet's memory of one pod (by uid): what the stored object cannot tell."""

    uid: str
    namespace: str
    name: str
    requests: tuple[int, int] = (0, 0)
    requests_error: str | None = None
    node: str | None = None  # spec.nodeName as last seen
    accounted: str | None = None  # node whose usage includes this pod's requests
    life: str = BOUND
    admitted_at: str | None = None
    start_due: float | None = None
    start_seen: str | None = None
    instance_started_at: str | None = None
    run_due: float | None = None
    run_seen: str | None = None
    exit_acted: str | None = None
    evict_acted: bool = False
    restart_count: int = 0
    restart_due: float | None = None
    backoff: float | None = None  # current back-off (simulated seconds); None = no entry
    backoff_updated: float = 0.0  # monotonic time of the last back-off update
    current: _Termination | None = None  # the state.terminated of the present instance
    previous: _Termination | None = None  # lastState.terminated
    stop_started: float | None = None  # when the kubelet began stopping the containers (deletion seen)
    sigterm_due: float | None = None  # preStop done, SIGTERM sent
    sigterm_exit_due: float | None = None  # the process exits of SIGTERM (None: ignores it)
    kill_due: float | None = None  # SIGKILL
    delete_sent: bool = False
    pod_ip: str | None = None
    ip_owned: bool = False  # allocated here (not adopted from a pre-existing status)
    orphan_since: float | None = None
    unreachable_marked: bool = False
    taint_evicted: bool = False
    gc_done: bool = False
    timer_due: float | None = None
    timer_token: int = 0
    creating_since: float | None = None  # admitted: images are being pulled
    pulling: str | None = None  # fieldPath of the container whose image is being pulled
    logs: dict[str, Source] | None = None  # containerID -> output of the current and previous instances
    scheduling_attempted: bool = False  # FailedScheduling reported for the present attempt
    bad_annotations: set[str] | None = None  # "key=value" already warned about
    proc: Any = None  # the process runtime's per-container state (tfjob_sim.process.pods)
