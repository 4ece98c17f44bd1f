"""What a user's kubectl shows about simulated pods: the scheduler's and kubelet's events
in ``kubectl describe pod`` and ``kubectl get events``, and ``kubectl logs`` (plain, -c, --previous,
-f, the waiting-to-start error)."""

from __future__ import annotations

import json
import re
from functools import partial

import yaml

from tfjob_sim.cluster import SimCluster
from tfjob_sim.kubelet import EXIT_CODE, RUN_SECONDS, START_SECONDS, UNSCHEDULABLE
from tfjob_sim.logs import LOG, LOG_INTERVAL_SECONDS
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.objects import pod_manifest, pod_yaml
from tfjob_sim.testing.waiting import eventually


def restarts(cluster: SimCluster, name: str) -> int:
    obj = cluster.store.get("pods", "default", name)
    statuses = (obj or {}).get("status", {}).get("containerStatuses") or []
    return statuses[0]["restartCount"] if statuses else 0


def described_events(out: str) -> list[tuple[str, str, str, str, str]]:
    """The rows (type, reason, age, from, message) of the Events table of ``kubectl describe``."""
    lines = out[out.index("\nEvents:") + 1 :].splitlines()
    if lines[0].split() == ["Events:", "<none>"]:
        return []
    assert lines[1].split() == ["Type", "Reason", "Age", "From", "Message"], lines[:3]
    rows = []
    for line in lines[3:]:
        if not line.startswith("  "):
            break
        cells = re.split(r"\s{2,}", line.strip(), maxsplit=4)
        rows.append(tuple(cells))
    return rows


def times(age: str) -> int:
    """The repeat count in an Age cell: "3s (x4 over 10s)" -> 4, "3s" -> 1."""
    match = re.search(r"\(x(\d+) over ", age)
    return int(match.group(1)) if match else 1


async def test_describe_shows_the_life_of_an_oom_killed_and_restarted_pod(
    kubectl: Kubectl, sim_cluster: SimCluster
) -> None:
    await kubectl.ok("apply", "-f", "-", input=pod_yaml("oom", {RUN_SECONDS: "0.5", EXIT_CODE: "137"}))
    await eventually(lambda: restarts(sim_cluster, "oom") >= 2, timeout=30, what="two restarts")
    sim_cluster.faults.pause_kubelet()  # a stable picture: no restart between the pod and its events
    out = await kubectl.ok("describe", "pod", "oom")
    restart_count = restarts(sim_cluster, "oom")
    assert re.search(r"Last State:\s+Terminated\n\s+Reason:\s+OOMKilled\n\s+Exit Code:\s+137", out), out
    node = sim_cluster.store.get("pods", "default", "oom")["spec"]["nodeName"]
    rows = described_events(out)
    by_message = {(r[0], r[1], r[3], r[4]): times(r[2]) for r in rows}
    image_size = next(r[4] for r in rows if r[4].startswith("Successfully pulled")).rsplit(" ", 2)[-2]
    expected = {
        ("Normal", "Scheduled", "default-scheduler", f"Successfully assigned default/oom to {node}"): 1,
        ("Normal", "Pulling", "kubelet", 'Pulling image "python:3.12"'): 1,
        (
            "Normal",
            "Pulled",
            "kubelet",
            'Successfully pulled image "python:3.12" in 500ms (500ms including waiting). '
            f"Image size: {image_size} bytes.",
        ): 1,
        ("Normal", "Pulled", "kubelet", 'Container image "python:3.12" already present on machine'): restart_count,
        ("Normal", "Created", "kubelet", "Created container: main"): restart_count + 1,
        ("Normal", "Started", "kubelet", "Started container main"): restart_count + 1,
    }
    uid = sim_cluster.store.get("pods", "default", "oom")["metadata"]["uid"]
    backoff = ("Warning", "BackOff", "kubelet", f"Back-off restarting failed container main in pod oom_default({uid})")
    # The first exit restarts at once; every later one waits (10 s, 20 s, ...): one BackOff each.
    state = sim_cluster.store.get("pods", "default", "oom")["status"]["containerStatuses"][0]["state"]
    expected[backoff] = restart_count - 1 + (1 if "waiting" in state else 0)
    assert by_message == expected, out
    # Oldest first (kubectl sorts by lastTimestamp; the scheduler's event has none and comes first).
    assert [r[1] for r in rows][:2] == ["Scheduled", "Pulling"], out


async def test_describe_shows_why_a_pod_is_pending(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    await kubectl.ok("apply", "-f", "-", input=pod_yaml("stuck", {UNSCHEDULABLE: "true"}))
    greedy = pod_manifest("greedy")
    greedy["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
    await kubectl.ok("apply", "-f", "-", input=yaml.safe_dump(greedy))
    preemption = "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
    messages = {
        "stuck": f"0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector. {preemption}",
        "greedy": "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
        "3 No preemption victims found for incoming pod.",
    }

    async def failed_scheduling(name: str, count: int) -> bool:
        rows = described_events(await kubectl.ok("describe", "pod", name))
        assert [(r[0], r[1], r[3], r[4]) for r in rows] == [
            ("Warning", "FailedScheduling", "default-scheduler", messages[name])
        ], rows
        return times(rows[0][2]) == count

    for name in messages:
        await eventually(
            partial(failed_scheduling, name, 1),
            timeout=30,
            what=f"one FailedScheduling of {name}",
            tolerate=(AssertionError,),
        )
    # Their own status writes were not new attempts; a cluster change (a node joins, not ready) is one:
    # the scheduler's series counts it and keeps the first message.
    sim_cluster.store.create("nodes", None, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "joining"}})
    for name in messages:
        await eventually(partial(failed_scheduling, name, 2), timeout=30, what=f"a second attempt for {name}")


async def test_get_events_by_involved_object_shows_sources_and_killing(
    kubectl: Kubectl, sim_cluster: SimCluster
) -> None:
    await kubectl.ok("apply", "-f", "-", input=pod_yaml("web"))
    await kubectl.ok("wait", "--for=condition=Ready", "pod/web", "--timeout=30s")
    await kubectl.ok("delete", "pod", "web")
    out = await kubectl.ok("get", "events", "--field-selector", "involvedObject.name=web", "-o", "json")
    events = {e["reason"]: e for e in json.loads(out)["items"]}
    assert set(events) == {"Scheduled", "Pulling", "Pulled", "Created", "Started", "Killing"}
    node = events["Started"]["source"]["host"]
    killing = events["Killing"]
    assert killing["message"] == "Stopping container main" and killing["type"] == "Normal"
    assert killing["source"] == {"component": "kubelet", "host": node}
    assert (killing["reportingComponent"], killing["reportingInstance"]) == ("kubelet", node)
    assert killing["involvedObject"]["fieldPath"] == "spec.containers{main}"
    assert killing["count"] == 1 and killing["firstTimestamp"] and killing["lastTimestamp"]
    scheduled = events["Scheduled"]
    assert scheduled["source"] == {} and scheduled["reportingComponent"] == "default-scheduler"
    assert scheduled["action"] == "Binding" and scheduled["eventTime"] and scheduled["lastTimestamp"] is None
    # The table kubectl prints, filtered on the server by reason and source.
    table = await kubectl.ok(
        "get", "events", "--field-selector", "involvedObject.name=web,reason=Killing,source=kubelet"
    )
    assert table.splitlines()[0].split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert len(table.splitlines()) == 2 and "pod/web" in table and "Stopping container main" in table
    scheduler = await kubectl.ok("get", "events", "--field-selector", "source=default-scheduler", "-o", "name")
    assert scheduler.strip() == f"event/{scheduled['metadata']['name']}"


# ------------------------------------------------------------------------------------------- logs


def running(cluster: SimCluster, name: str) -> bool:
    obj = cluster.store.get("pods", "default", name)
    return bool(
        obj
        and obj.get("status", {}).get("phase") == "Running"
        and all("running" in s["state"] for s in obj["status"]["containerStatuses"])
    )


async def test_logs_plain_container_and_previous(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    body = pod_manifest(
        "trainer", {LOG: "step 1 of instance {instance}\nstep 2 of {container}", f"{LOG}.sidecar": "sidecar ready"}
    )
    body["spec"]["containers"].append({"name": "sidecar", "image": "envoy:1.31"})
    await kubectl.ok("apply", "-f", "-", input=yaml.safe_dump(body))
    await eventually(lambda: running(sim_cluster, "trainer"), timeout=30, what="trainer running")
    rc, out, err = await kubectl("logs", "trainer")
    assert (rc, out) == (0, "step 1 of instance 0\nstep 2 of main\n"), err
    assert err.strip() == 'Defaulted container "main" out of: main, sidecar'
    assert await kubectl.ok("logs", "trainer", "-c", "sidecar") == "sidecar ready\n"
    assert await kubectl.ok("logs", "trainer", "--tail=1", "-c", "main") == "step 2 of main\n"
    rc, _out, err = await kubectl("logs", "trainer", "-c", "main", "--previous")
    assert (
        rc == 1
        and err.strip()
        == 'Error from server (BadRequest): previous terminated container "main" in pod "trainer" not found'
    )
    # The process fails once; the first restart is immediate: instance 1 runs, instance 0 is --previous.
    sim_cluster.store.patch("pods", "default", "trainer", "merge", {"metadata": {"annotations": {EXIT_CODE: "1"}}})
    await eventually(
        lambda: restarts(sim_cluster, "trainer") == 1 and running(sim_cluster, "trainer"),
        timeout=30,
        what="one restart",
    )
    assert await kubectl.ok("logs", "trainer", "-c", "main") == "step 1 of instance 1\nstep 2 of main\n"
    assert await kubectl.ok("logs", "trainer", "-c", "main", "--previous") == "step 1 of instance 0\nstep 2 of main\n"
    stamped = await kubectl.ok("logs", "trainer", "-c", "main", "-p", "--timestamps", "--tail=1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z step 2 of main\n", stamped), stamped


async def test_logs_follow_ends_when_the_container_exits(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    # A line every simulated 30 s (0.3 s here); the container runs 100 s (1 s here) and exits.
    await kubectl.ok(
        "apply",
        "-f",
        "-",
        input=pod_yaml(
            "epochs",
            {LOG: "\n".join(f"epoch {i}" for i in range(1, 100)), LOG_INTERVAL_SECONDS: "30", RUN_SECONDS: "100"},
            restartPolicy="Never",
        ),
    )
    await eventually(lambda: running(sim_cluster, "epochs"), timeout=30, what="epochs running")
    rc, out, err = await kubectl("logs", "-f", "epochs", timeout=60)
    assert rc == 0, err
    # Lines at 0, 30, 60 and 90 s: the follower got each as it was printed and stopped at the exit.
    assert out == "epoch 1\nepoch 2\nepoch 3\nepoch 4\n"
    assert sim_cluster.store.get("pods", "default", "epochs")["status"]["phase"] == "Succeeded"


async def test_logs_of_a_container_waiting_to_start(kubectl: Kubectl, sim_cluster: SimCluster) -> None:
    await kubectl.ok("apply", "-f", "-", input=pod_yaml("slow", {START_SECONDS: "100000"}))
    await eventually(
        lambda: (sim_cluster.store.get("pods", "default", "slow").get("status") or {}).get("containerStatuses"),
        timeout=30,
        what="slow admitted",
    )
    rc, out, err = await kubectl("logs", "slow")
    assert (rc, out) == (1, "")
    assert (
        err.strip()
        == 'Error from server (BadRequest): container "main" in pod "slow" is waiting to start: ContainerCreating'
    )
