"""The simulated kubelet's process runtime (``SimConfig(runtime="process")``): containers are real
processes. Exit codes and signals become terminated states, restarts follow the restart policy with
CrashLoopBackOff, deletion sends SIGTERM then SIGKILL after the grace period, the memory limit is
enforced by a cgroup (OOMKilled), env and the downward API reach the process, ``kubectl logs`` reads
its output, eviction kills it, and nothing outlives the simulator, not even a SIGKILLed one.

No TensorFlow here: the commands are ``sh`` and this interpreter. Every test cluster is checked for
leftovers after it stopped.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, config

from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.kubelet import EVICT
from tfjob_sim.process.runtime import Instance
from tfjob_sim.testing.leftovers import janitors, leftovers, runtime_processes
from tfjob_sim.testing.processes import process_sim_to_kill
from tfjob_sim.testing.waiting import eventually, never

NS = "default"
PY = sys.executable
# The images the pods name, as local environments: this interpreter's prefix and the system's.
IMAGES = {"python:3.11": sys.prefix, "busybox:1.36": "/usr"}


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=1, time_scale=0.01, runtime="process", image_map=IMAGES)


@pytest.fixture
async def sim_cluster(sim_config: SimConfig, tmp_path: Path) -> AsyncIterator[SimCluster]:
    sim_config.kubeconfig_path = str(tmp_path / "kubeconfig")
    cluster = SimCluster(sim_config)
    await cluster.start()
    runtime = cluster.kubelet.runtime
    try:
        yield cluster
    finally:
        await cluster.stop()
        assert leftovers(runtime.prefix) == []


def make_pod(
    name: str,
    command: list[str] | None,
    restart: str = "Never",
    grace: int | None = None,
    **container: Any,
) -> dict:
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "containers": [
            {"name": "main", "image": "python:3.11", **({"command": command} if command else {}), **container}
        ],
    }
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "t"}}, "spec": spec}


def status_of(cluster: SimCluster, name: str) -> dict:
    pod = cluster.store.get("pods", NS, name)
    return (pod or {}).get("status") or {}


def container(cluster: SimCluster, name: str) -> dict:
    statuses = status_of(cluster, name).get("containerStatuses") or [{}]
    return statuses[0]


def terminated(cluster: SimCluster, name: str) -> dict | None:
    return (container(cluster, name).get("state") or {}).get("terminated")


def running(cluster: SimCluster, name: str) -> bool:
    return "running" in (container(cluster, name).get("state") or {})


def log_text(cluster: SimCluster, name: str) -> str:
    """The current instance's captured output so far (what pods/log serves)."""
    pod = cluster.store.get("pods", NS, name)
    if pod is None:
        return ""
    cid = container(cluster, name).get("containerID")
    source = cluster.kubelet.log_source(pod["metadata"]["uid"], cid) if cid else None
    return "\n".join(source.read(0, source.printed(time.time()))) if source else ""


def process_pid(cluster: SimCluster, name: str) -> int:
    pod = cluster.store.get("pods", NS, name)
    assert pod is not None
    live = [i for i in cluster.kubelet.runtime.instances(pod["metadata"]["uid"]) if i.alive]
    assert len(live) == 1, live
    return live[0].pid


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# A Python program that says it is ready once its SIGTERM disposition is set, then waits.
TRAPS = "import signal,sys,time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\nprint('ready', flush=True)\ntime.sleep(1000)"
IGNORES = (
    "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(1000)"
)
DEFAULT = "import time\nprint('ready', flush=True)\ntime.sleep(1000)"


@pytest.mark.parametrize(("code", "phase", "reason"), [(0, "Succeeded", "Completed"), (1, "Failed", "Error")])
async def test_the_exit_code_becomes_the_terminated_state(sim_cluster: SimCluster, code: int, phase: str, reason: str):
    sim_cluster.store.create("pods", NS, make_pod("p", ["sh", "-c", f"echo out; echo err >&2; exit {code}"]))
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == phase, what=f"phase {phase}")
    state = terminated(sim_cluster, "p")
    assert state is not None
    assert (state["exitCode"], state["reason"]) == (code, reason)
    assert state["containerID"] == container(sim_cluster, "p")["containerID"]
    assert log_text(sim_cluster, "p").split() == ["out", "err"]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGKILL, 137), (signal.SIGTERM, 143)])
async def test_death_by_a_signal_is_128_plus_the_signal(sim_cluster: SimCluster, sig: int, code: int):
    sim_cluster.store.create("pods", NS, make_pod("p", [PY, "-c", f"import os\nos.kill(os.getpid(), {int(sig)})"]))
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Failed", what="Failed")
    state = terminated(sim_cluster, "p")
    assert state is not None and (state["exitCode"], state["reason"]) == (code, "Error")


async def test_a_missing_command_is_a_create_container_error(sim_cluster: SimCluster):
    sim_cluster.store.create("pods", NS, make_pod("p", None))
    await eventually(
        lambda: (
            (container(sim_cluster, "p").get("state") or {}).get("waiting", {}).get("reason") == "CreateContainerError"
        ),
        what="CreateContainerError",
    )
    waiting = container(sim_cluster, "p")["state"]["waiting"]
    assert "no command specified" in waiting["message"]
    assert status_of(sim_cluster, "p")["phase"] == "Pending"


async def test_an_unknown_executable_is_a_start_error(sim_cluster: SimCluster):
    sim_cluster.store.create("pods", NS, make_pod("p", ["no-such-program-here"]))
    await eventually(lambda: terminated(sim_cluster, "p"), what="terminated")
    state = terminated(sim_cluster, "p")
    assert (state["exitCode"], state["reason"]) == (128, "StartError")
    assert 'exec: "no-such-program-here": executable file not found in $PATH' in state["message"]


async def test_on_failure_restarts_in_place_with_crash_loop_back_off(sim_cluster: SimCluster):
    # time_scale 0.01: the back-off is 0.1 s, 0.2 s, 0.4 s ...
    sim_cluster.store.create("pods", NS, make_pod("p", ["sh", "-c", "echo run; exit 3"], restart="OnFailure"))
    seen: set[str] = set()  # every waiting reason the kubelet wrote

    def record(event_type: str, resource: str, old: dict | None, new: dict | None) -> None:
        for status in ((new or {}).get("status") or {}).get("containerStatuses") or []:
            seen.add((status.get("state") or {}).get("waiting", {}).get("reason", ""))

    unsubscribe = sim_cluster.store.add_listener(record)

    def progressed() -> bool:
        return container(sim_cluster, "p").get("restartCount", 0) >= 3 and "CrashLoopBackOff" in seen

    try:
        await eventually(progressed, what="3 restarts and a CrashLoopBackOff")
    finally:
        unsubscribe()
    status = container(sim_cluster, "p")
    assert status["lastState"]["terminated"]["exitCode"] == 3
    assert status_of(sim_cluster, "p")["phase"] == "Running"
    events = sim_cluster.store.list("events", NS)[0]
    assert any(e["reason"] == "BackOff" for e in events)


def init_container(name: str, script: str) -> dict:
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", script]}


async def test_init_containers_run_one_after_the_other_before_the_containers(sim_cluster: SimCluster):
    marks = sim_cluster.kubelet.runtime.state_dir
    pod = make_pod("p", ["sh", "-c", f"cat {marks}/one {marks}/two"])
    pod["spec"]["initContainers"] = [
        init_container("one", f"echo one > {marks}/one"),
        init_container("two", f"test -e {marks}/one && echo two > {marks}/two"),
    ]
    sim_cluster.store.create("pods", NS, pod)
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Succeeded", what="Succeeded")
    status = status_of(sim_cluster, "p")
    inits = status["initContainerStatuses"]
    assert [(s["name"], s["state"]["terminated"]["reason"], s["ready"]) for s in inits] == [
        ("one", "Completed", True),
        ("two", "Completed", True),
    ]
    assert log_text(sim_cluster, "p").split() == ["one", "two"]
    started = [
        e["involvedObject"]["fieldPath"]
        for e in sorted(sim_cluster.store.list("events", NS)[0], key=lambda e: int(e["metadata"]["resourceVersion"]))
        if e["reason"] == "Started"
    ]
    assert started == ["spec.initContainers{one}", "spec.initContainers{two}", "spec.containers{main}"]
    pulled = [
        (e["involvedObject"]["fieldPath"], e["message"].split(" in ")[0])
        for e in sim_cluster.store.list("events", NS)[0]
        if e["reason"] == "Pulled"
    ]
    assert sorted(pulled) == [
        ("spec.containers{main}", 'Successfully pulled image "python:3.11"'),
        ("spec.initContainers{one}", 'Successfully pulled image "busybox:1.36"'),
        ("spec.initContainers{two}", 'Container image "busybox:1.36" already present on machine'),
    ]


@pytest.mark.parametrize(("restart", "phase"), [("Never", "Failed"), ("OnFailure", "Pending")])
async def test_a_failing_init_container_fails_the_pod_or_is_retried(sim_cluster: SimCluster, restart: str, phase: str):
    pod = make_pod("p", ["sh", "-c", "echo main ran"], restart=restart)
    pod["spec"]["initContainers"] = [init_container("setup", "exit 4")]
    sim_cluster.store.create("pods", NS, pod)

    def init_status() -> dict:
        return (status_of(sim_cluster, "p").get("initContainerStatuses") or [{}])[0]

    if restart == "Never":
        await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Failed", what="Failed")
        assert init_status()["state"]["terminated"]["exitCode"] == 4
    else:
        await eventually(lambda: init_status().get("restartCount", 0) >= 2, what="the init container retried")
        assert init_status()["lastState"]["terminated"]["exitCode"] == 4
    status = status_of(sim_cluster, "p")
    assert status["phase"] == phase
    assert container(sim_cluster, "p")["state"]["waiting"]["reason"] == "PodInitializing"
    assert next(c for c in status["conditions"] if c["type"] == "Initialized")["status"] == "False"


async def test_a_default_handler_dies_of_sigterm_on_deletion(sim_cluster: SimCluster):
    sim_cluster.store.create("pods", NS, make_pod("p", [PY, "-c", DEFAULT], restart="Always"))
    await eventually(lambda: "ready" in log_text(sim_cluster, "p"), what="ready")
    final: dict = {}
    unsubscribe = sim_cluster.store.add_listener(
        lambda t, r, old, new: final.update(new or {}) if r == "pods" and new else None
    )
    try:
        sim_cluster.store.delete("pods", NS, "p")
        await eventually(lambda: sim_cluster.store.get("pods", NS, "p") is None, what="pod removed")
    finally:
        unsubscribe()
    state = final["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (143, "Error")
    assert final["status"]["phase"] == "Failed"


async def watch_deletion(cluster: SimCluster, name: str) -> tuple[dict, float]:
    """Delete the pod; return its last stored version and the wall seconds the deletion took."""
    final: dict = {}
    unsubscribe = cluster.store.add_listener(
        lambda t, r, old, new: final.update(new) if r == "pods" and new and new["metadata"]["name"] == name else None
    )
    try:
        started = time.monotonic()
        cluster.store.delete("pods", NS, name)
        await eventually(lambda: cluster.store.get("pods", NS, name) is None, what="pod removed")
        return final, time.monotonic() - started
    finally:
        unsubscribe()


async def test_a_process_that_traps_sigterm_exits_cleanly_within_the_grace_period(sim_cluster: SimCluster):
    sim_cluster.store.create("pods", NS, make_pod("p", [PY, "-c", TRAPS], restart="Always", grace=30))
    await eventually(lambda: "ready" in log_text(sim_cluster, "p"), what="ready")
    final, took = await watch_deletion(sim_cluster, "p")
    state = final["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    assert final["status"]["phase"] == "Succeeded"
    assert took < 20  # far from the 30 s grace period: it exited on SIGTERM


@pytest.mark.parametrize("group_exists", [True, False])
def test_a_signal_reaches_the_process_once(monkeypatch: pytest.MonkeyPatch, group_exists: bool):
    # A program exiting from its SIGTERM handler has the default disposition back on its way out: a
    # second SIGTERM a millisecond later (the simulator preempted between two sends) killed it with 143.
    sent: list[tuple[str, int, int]] = []

    def killpg(pid: int, signum: int) -> None:
        if not group_exists:  # the helper has not called setsid() yet
            raise ProcessLookupError
        sent.append(("group", pid, signum))

    monkeypatch.setattr(os, "killpg", killpg)
    monkeypatch.setattr(os, "kill", lambda pid, signum: sent.append(("process", pid, signum)))
    instance = Instance("uid", "main", "containerd://x", 4242, None, None, None, 0.0)  # type: ignore[arg-type]
    instance.signal(signal.SIGTERM)
    assert sent == [("group" if group_exists else "process", 4242, signal.SIGTERM)]


async def test_a_process_that_ignores_sigterm_is_killed_when_the_grace_period_ends(sim_cluster: SimCluster):
    # The grace period is real seconds in this runtime (time_scale does not shorten it).
    sim_cluster.store.create("pods", NS, make_pod("p", [PY, "-c", IGNORES], restart="Always", grace=3))
    await eventually(lambda: "ready" in log_text(sim_cluster, "p"), what="ready")
    pid = process_pid(sim_cluster, "p")
    final, took = await watch_deletion(sim_cluster, "p")
    state = final["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (state["exitCode"], state["reason"]) == (137, "Error")
    assert took >= 3
    assert not pid_alive(pid)


async def test_over_the_memory_limit_the_process_is_oom_killed(sim_cluster: SimCluster):
    hog = "x = bytearray(200 * 1024 * 1024)\nprint('survived', flush=True)"
    sim_cluster.store.create("pods", NS, make_pod("p", [PY, "-c", hog], resources={"limits": {"memory": "64Mi"}}))
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Failed", what="Failed")
    state = terminated(sim_cluster, "p")
    assert (state["exitCode"], state["reason"]) == (137, "OOMKilled")
    # The same program without the limit survives: it was the limit that killed it.
    sim_cluster.store.create("pods", NS, make_pod("q", [PY, "-c", hog]))
    await eventually(lambda: status_of(sim_cluster, "q").get("phase") == "Succeeded", what="Succeeded")
    assert "survived" in log_text(sim_cluster, "q")


async def test_env_and_the_downward_api_reach_the_process(sim_cluster: SimCluster):
    env = [
        {"name": "PLAIN", "value": "v1"},
        {"name": "EXPANDED", "value": "$(PLAIN)-x"},
        *(
            {"name": key, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for key, path in [
                ("NAME", "metadata.name"),
                ("NAMESPACE", "metadata.namespace"),
                ("UID", "metadata.uid"),
                ("LABEL", "metadata.labels['app']"),
                ("ANNOTATION", "metadata.annotations['note']"),
                ("NODE", "spec.nodeName"),
                ("SA", "spec.serviceAccountName"),
                ("POD_IP", "status.podIP"),
                ("HOST_IP", "status.hostIP"),
            ]
        ),
    ]
    keys = "PLAIN EXPANDED NAME NAMESPACE UID LABEL ANNOTATION NODE SA POD_IP HOST_IP".split()
    script = "; ".join(f"echo {k}=${k}" for k in keys) + "; pwd"
    pod = make_pod("p", ["sh", "-c", script], env=env, workingDir="/tmp")
    pod["metadata"]["annotations"] = {"note": "hello"}
    created = sim_cluster.store.create("pods", NS, pod)
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Succeeded", what="Succeeded")
    status = status_of(sim_cluster, "p")
    lines = log_text(sim_cluster, "p").splitlines()
    assert lines[:-1] == [
        "PLAIN=v1",
        "EXPANDED=v1-x",
        "NAME=p",
        f"NAMESPACE={NS}",
        f"UID={created['metadata']['uid']}",
        "LABEL=t",
        "ANNOTATION=hello",
        "NODE=sim-node-0",
        "SA=default",
        f"POD_IP={status['podIP']}",
        f"HOST_IP={status['hostIP']}",
    ]
    assert lines[-1] == "/tmp"
    assert status["podIPs"] == [{"ip": status["podIP"]}]


async def test_a_missing_config_map_waits_until_it_exists(sim_cluster: SimCluster):
    env = [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}}]
    sim_cluster.store.create("pods", NS, make_pod("p", ["sh", "-c", "echo $GREETING"], env=env))
    await eventually(
        lambda: (
            (container(sim_cluster, "p").get("state") or {}).get("waiting", {}).get("reason")
            == "CreateContainerConfigError"
        ),
        what="CreateContainerConfigError",
    )
    assert container(sim_cluster, "p")["state"]["waiting"]["message"] == 'configMap "cfg" not found'
    sim_cluster.store.create(
        "configmaps",
        NS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"greeting": "hi"}},
    )
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Succeeded", what="Succeeded")
    assert log_text(sim_cluster, "p") == "hi"


async def test_run_as_user_and_group(sim_cluster: SimCluster):
    pod = make_pod("p", ["sh", "-c", "id -u; id -g"], securityContext={"runAsUser": 1234})
    pod["spec"]["securityContext"] = {"runAsUser": 1, "runAsGroup": 4321}
    sim_cluster.store.create("pods", NS, pod)
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Succeeded", what="Succeeded")
    assert log_text(sim_cluster, "p").split() == ["1234", "4321"]


async def test_kubectl_logs_follow_previous_and_tail(sim_cluster: SimCluster, kubectl: Any):
    # Each instance prints its number of earlier runs (a file in a private directory counts them).
    counter = Path(sim_cluster.kubelet.runtime.state_dir) / "runs"
    script = f"n=$(cat {counter} 2>/dev/null || echo 0); echo $((n+1)) > {counter}; for i in 1 2 3; do echo run$n line$i; done"
    pod = make_pod("p", ["sh", "-c", script + "; exit 1"], restart="OnFailure")
    sim_cluster.store.create("pods", NS, pod)
    await eventually(lambda: container(sim_cluster, "p").get("restartCount", 0) >= 1, what="a restart")
    rc, out, err = await kubectl("logs", "p", "--previous")
    assert rc == 0, err
    assert out.splitlines()[0].endswith("line1") and len(out.splitlines()) == 3
    rc, out, err = await kubectl("logs", "p", "--previous", "--tail=1")
    assert rc == 0 and len(out.splitlines()) == 1 and out.endswith("line3\n")

    # follow: streams what a running process prints and ends when it exits.
    script = f"echo first; while [ ! -e {counter}.go ]; do sleep 0.05; done; echo second"
    sim_cluster.store.create("pods", NS, make_pod("f", ["sh", "-c", script]))
    await eventually(lambda: running(sim_cluster, "f"), what="f running")
    follower = await kubectl.spawn("logs", "-f", "f")
    assert follower.stdout is not None
    with anyio.fail_after(30):
        assert await follower.stdout.readline() == b"first\n"
    await anyio.Path(f"{counter}.go").touch()
    with anyio.fail_after(30):
        assert await follower.stdout.readline() == b"second\n"
        assert await follower.wait() == 0


async def test_read_namespaced_pod_log_of_kubernetes_asyncio(sim_cluster: SimCluster):
    sim_cluster.store.create("pods", NS, make_pod("p", ["sh", "-c", "echo a; echo b; echo c"]))
    await eventually(lambda: status_of(sim_cluster, "p").get("phase") == "Succeeded", what="Succeeded")
    api = await config.new_client_from_config(sim_cluster.kubeconfig_path)
    async with api:
        core = client.CoreV1Api(api)
        assert await core.read_namespaced_pod_log("p", NS) == "a\nb\nc\n"
        assert await core.read_namespaced_pod_log("p", NS, tail_lines=1, timestamps=True) != "c\n"
        assert await core.read_namespaced_pod_log("p", NS, limit_bytes=3) == "a\nb"


SERVER = """
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 2222))
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(socket.gethostname().encode() + b"\\n")
    c.close()
"""
CLIENT = """
import socket, sys, time
deadline = time.monotonic() + 60
while True:
    try:
        c = socket.create_connection((sys.argv[1], 2222), timeout=5)
        break
    except OSError as exc:
        if time.monotonic() > deadline:
            raise
        print("retry:", exc, flush=True)
        time.sleep(0.2)
print("answer:", c.recv(100).decode().strip(), flush=True)
"""


async def test_pods_reach_each_other_by_service_name_each_on_its_own_ip(sim_cluster: SimCluster):
    """Two servers bind the same port, each in its own network namespace; a client finds one through
    the cluster DNS name of its headless Service, as TF_CONFIG addresses are used."""
    for name in ("server-0", "server-1"):
        pod = make_pod(name, [PY, "-c", SERVER], restart="Always")
        pod["metadata"]["labels"] = {"replica": name}
        sim_cluster.store.create("pods", NS, pod)
        sim_cluster.store.create(
            "services",
            NS,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"clusterIP": "None", "selector": {"replica": name}, "ports": [{"port": 2222}]},
            },
        )
    for name in ("server-0", "server-1"):
        await eventually(lambda n=name: "listening" in log_text(sim_cluster, n), what=f"{name} listening")
    ips = {status_of(sim_cluster, n)["podIP"] for n in ("server-0", "server-1")}
    assert len(ips) == 2
    sim_cluster.store.create("pods", NS, make_pod("client", [PY, "-c", CLIENT, f"server-1.{NS}.svc.cluster.local"]))
    await eventually(lambda: status_of(sim_cluster, "client").get("phase") == "Succeeded", what="client done")
    assert "answer: server-1" in log_text(sim_cluster, "client").splitlines()


@pytest.mark.parametrize("how", ["annotation", "eviction API"])
async def test_eviction_kills_the_process(sim_cluster: SimCluster, how: str):
    sim_cluster.store.create("pods", NS, make_pod("p", ["sleep", "1000"], restart="Always"))
    await eventually(lambda: running(sim_cluster, "p"), what="running")
    pid = process_pid(sim_cluster, "p")
    if how == "annotation":
        sim_cluster.store.patch("pods", NS, "p", "merge", {"metadata": {"annotations": {EVICT: "true"}}})
        await eventually(lambda: status_of(sim_cluster, "p").get("reason") == "Evicted", what="Evicted")
    else:
        sim_cluster.store.evict(NS, "p", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}})
        await eventually(lambda: sim_cluster.store.get("pods", NS, "p") is None, what="pod removed")
    await eventually(lambda: not pid_alive(pid), what="the process killed")


async def test_deleting_the_pod_object_at_once_kills_its_processes(sim_cluster: SimCluster):
    sim_cluster.store.create("pods", NS, make_pod("p", ["sleep", "1000"], restart="Always"))
    await eventually(lambda: running(sim_cluster, "p"), what="running")
    pid = process_pid(sim_cluster, "p")
    sim_cluster.store.delete("pods", NS, "p", {"gracePeriodSeconds": 0})
    await eventually(lambda: not pid_alive(pid), what="the process killed")


@pytest.mark.parametrize("fault", ["kubelet paused", "node NotReady"])
async def test_a_silent_kubelet_reports_an_exit_only_when_it_is_back(sim_cluster: SimCluster, fault: str):
    """The process exits while the kubelet cannot report (paused, or its node unreachable): the pod
    keeps its last status; once the kubelet is back, the exit is reported."""
    go = Path(sim_cluster.kubelet.runtime.state_dir) / "go"
    script = f"while [ ! -e {go} ]; do sleep 0.02; done; exit 7"
    sim_cluster.store.create("pods", NS, make_pod("p", ["sh", "-c", script]))
    await eventually(lambda: running(sim_cluster, "p"), what="running")
    pid = process_pid(sim_cluster, "p")
    kubelet = sim_cluster.kubelet
    node = sim_cluster.store.get("pods", NS, "p")["spec"]["nodeName"]
    if fault == "kubelet paused":
        kubelet.pause()
    else:
        kubelet.set_node_ready(node, False)
    await anyio.Path(go).touch()
    await eventually(lambda: not pid_alive(pid), what="the process exited")
    # A kubelet that acted would report the exit within milliseconds of it.
    await never(lambda: terminated(sim_cluster, "p"), within=0.5, what="the exit reported while silent")
    assert running(sim_cluster, "p")
    if fault == "kubelet paused":
        kubelet.resume()
    else:
        kubelet.set_node_ready(node, True)
    await eventually(lambda: terminated(sim_cluster, "p"), what="the exit reported")
    assert terminated(sim_cluster, "p")["exitCode"] == 7


async def test_pods_deleted_while_their_sandboxes_are_created_leave_nothing(sim_cluster: SimCluster):
    """Deleted at once: a sandbox still being created is removed when it is ready, and no pod
    namespace, /etc/netns directory or container cgroup of theirs remains while the simulator runs."""
    runtime = sim_cluster.kubelet.runtime
    for i in range(5):
        sim_cluster.store.create("pods", NS, make_pod(f"p{i}", ["sleep", "1000"], restart="Always"))
    await eventually(lambda: len(runtime._sandboxes) == 5, what="five sandboxes under way")
    for i in range(5):
        sim_cluster.store.delete("pods", NS, f"p{i}", {"gracePeriodSeconds": 0})

    def pod_leftovers() -> list[str]:
        own = [f"netns {runtime.prefix}-node", f"{runtime.prefix}-node"]
        found = [line for line in leftovers(runtime.prefix) if "netns" in line and not any(o in line for o in own)]
        return found + [str(p) for p in runtime.cgroups.root.iterdir() if p.is_dir()]

    await eventually(lambda: not runtime._tasks and pod_leftovers() == [], what="nothing left of the pods")


async def test_stopping_the_simulator_kills_everything(sim_config: SimConfig, tmp_path: Path):
    cluster = SimCluster(sim_config)
    await cluster.start()
    runtime = cluster.kubelet.runtime
    try:
        # A process that forks a grandchild in another session: only the cgroup still knows it.
        escape = "setsid sleep 1000 & sleep 1000"
        cluster.store.create("pods", NS, make_pod("p", ["sh", "-c", escape], restart="Always"))
        await eventually(lambda: len(runtime_processes(runtime.prefix)) >= 3, what="three processes")
        pids = runtime_processes(runtime.prefix)
    finally:
        await cluster.stop()
    assert [pid for pid in pids if pid_alive(pid)] == []
    assert leftovers(runtime.prefix) == []


@pytest.mark.parametrize("kill_janitor", [False, True])
async def test_a_sigkilled_simulator_leaves_nothing_behind(tmp_path: Path, kill_janitor: bool):
    """`tfjob-controller sim --runtime process` SIGKILLed: the pod's process dies with it, the janitor
    removes its cgroups and files; if the janitor dies too, the next simulator's start sweeps them."""
    kubeconfig = tmp_path / "kc"
    async with process_sim_to_kill(kubeconfig) as (proc, prefix):
        api = await config.new_client_from_config(str(kubeconfig))
        async with api:
            await client.CoreV1Api(api).create_namespaced_pod(NS, make_pod("p", ["sleep", "1000"]))
        await eventually(lambda: runtime_processes(prefix), what="the pod's process", timeout=60)
        pids = runtime_processes(prefix)
        found = janitors(prefix)
        assert len(found) == 1, found  # one janitor serves the pod network and the runtime
        if kill_janitor:
            for pid in found:
                os.kill(pid, signal.SIGKILL)
    await eventually(lambda: not any(pid_alive(pid) for pid in pids), what="the pod's process died")
    if kill_janitor:
        assert leftovers(prefix) != []  # nobody removed its cgroups yet
        cluster = SimCluster(SimConfig(nodes=1, runtime="process"))
        await cluster.start()
        await cluster.stop()
    await eventually(lambda: leftovers(prefix) == [], what=f"nothing left of {prefix}")


async def test_without_root_the_cli_exits_2_with_one_line(tmp_path: Path):
    # Dropping root in a child: the CLI must refuse --runtime process at once. Everything the CLI imports is
    # imported first: the interpreter may live where only root can read (as under /root here).
    code = (
        "import os, sys\n"
        "from controller.cli import main\n"
        "import tfjob_sim.process.runtime, tfjob_sim.serve, controller.ops.logging, celpy, re2\n"
        "os.setgid(65534); os.setuid(65534)\n"
        f"sys.exit(main(['sim', '--runtime', 'process', '--kubeconfig', {str(tmp_path / 'kc')!r}]))"
    )
    proc = await asyncio.create_subprocess_exec(
        PY, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd="/"
    )
    with anyio.fail_after(60):
        out, err = await proc.communicate()
    assert proc.returncode == 2, err
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "tfjob-controller sim: --runtime process: the process runtime needs root"
    )
