"""docs/operations.md, run: every command of the guide, in order, against the simulated cluster.

Each ``bash`` block runs through a shell with the real kubectl, line by line, in the guide's order; a block the
simulated cluster cannot run must say why in a ``<!-- not run: ... -->`` comment just above it, so a command added to
the guide is run by this test unless it says otherwise. A ``yaml`` block whose first line is ``# FILE`` is saved as
``FILE`` where the commands run, as the guide tells its reader to.

The simulated cluster's Deployment pods execute nothing, so the controller runs as a local ``tfjob-controller run``
process with the Deployment's args, its Lease in the namespace ``tfjob-controller``: one started when the install
is applied (the release installed), a second one when the upgrade is applied (the next release), which takes the
Lease over when the first is stopped as a rolling update stops it, and which stops when the uninstall deletes the
namespace. The upgrade's commands run in a copy of ``manifests/`` standing for the next release: another image tag
and a changed CRD.

Between the blocks the test checks what the guide promises: the CRD established and the Lease held by the running
process, the smoke-test job Running and then gone with its pod, ``/readyz`` of each replica; a backup without the
fields the API server sets, which the API server takes back; after the upgrade the new CRD with ``v1`` its only
stored version, the new image rolled out, the same pods (uids) for a running job, the new process leading; after
the first uninstall the TFJob and its pods still there and the controller's objects gone, after the second nothing
left.
"""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from controller.runtime.client import LEASES, PODS, ApiClient, Resource
from controller.runtime.errors import NotFound
from controller.tfjob.executor import TFJOBS
from tests.deployment import manifest_run_args
from tests.e2e.conftest import CRDS, eventually, is_true, running_pods, tfjob
from tests.e2e.guides import blocks, shell
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.kubectl import Kubectl
from tfjob_sim.testing.processes import ControllerProcess

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operations.md"
NAMESPACE = "tfjob-controller"
DEPLOYMENTS = Resource("apps", "v1", "deployments")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", namespaced=False)
NEXT_TAG = "0.2.0"  # the image tag of the release the upgrade goes to
NEXT_LABEL = ("app.kubernetes.io/version", NEXT_TAG)  # what the next release's CRD adds

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def sim_config() -> SimConfig:
    # The guide is run as a cluster admin; RBAC of the controller is tests/e2e/test_rbac_secure.py's.
    return SimConfig(nodes=3, time_scale=0.01)


def test_every_block_of_the_guide_is_run_or_says_why_not() -> None:
    found = blocks(GUIDE.read_text())
    assert {b.language for b in found} == {"bash", "yaml"}
    sections = [b.section for b in found]
    for number, name in enumerate(("Install", "Back up", "Upgrade", "Uninstall", "Restore"), start=1):
        assert any(s.startswith(f"{number}. {name}") for s in sections), f"no section {number}. {name}"
    for block in found:
        assert block.not_run is None or block.language == "bash", block
        if block.not_run is not None:
            assert len(block.not_run) > 20, f"say why this block is not run: {block.body}"
        if block.language == "yaml":
            assert re.fullmatch(r"# [\w.-]+\.yaml", block.body.splitlines()[0]), "a yaml block names its file"
    assert sum(len(b.commands()) for b in found if b.language == "bash" and b.not_run is None) >= 20


def next_release(into: Path) -> Path:
    """A copy of manifests/ as the next release would ship it: its image tag, and a CRD that changed."""
    manifests = into / "manifests"
    shutil.copytree(ROOT / "manifests", manifests)
    deployment = manifests / "deployment" / "deployment.yaml"
    text = deployment.read_text()
    image = re.search(r"image: (ghcr\.io/tfjob-controller/tfjob-controller):(\S+)\n", text)
    assert image and image.group(2) != NEXT_TAG
    deployment.write_text(text.replace(image.group(0), f"image: {image.group(1)}:{NEXT_TAG}\n"))
    crd_path = manifests / "crd" / "kubeflow.org_tfjobs.yaml"
    crd = yaml.safe_load(crd_path.read_text())
    crd["metadata"].setdefault("labels", {})[NEXT_LABEL[0]] = NEXT_LABEL[1]
    crd_path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return into


class Replica(ControllerProcess):
    """``tfjob-controller run`` with the Deployment's args, its Lease where the Deployment's would be."""

    def __init__(self, cluster: SimCluster) -> None:
        assert cluster.kubeconfig_path
        super().__init__(
            *manifest_run_args(), "--kubeconfig", cluster.kubeconfig_path, "--leader-election-namespace", NAMESPACE
        )

    @property
    def identity(self) -> str | None:
        for record in self.events():
            if record.get("event") == "waiting to acquire lease":
                return str(record.get("identity"))
        return None

    def leads(self) -> bool:
        return bool(self.logged("acquired lease"))

    async def readyz(self) -> tuple[int, str]:
        def get() -> tuple[int, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz?verbose", timeout=10) as answer:
                return answer.status, answer.read().decode()

        return await anyio.to_thread.run_sync(get)


async def pod_uids(admin: ApiClient, job: str) -> dict[str, str]:
    pods = (await admin.list(PODS, namespace="default", label_selector=f"training.kubeflow.org/job-name={job}"))[
        "items"
    ]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


async def gone(read: Callable[[], Awaitable[Any]]) -> bool:
    try:
        await read()
    except NotFound:
        return True
    return False


async def test_the_guide_installs_backs_up_upgrades_and_uninstalls(
    sim_cluster: SimCluster, admin: ApiClient, kubectl: Kubectl, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "manifests").symlink_to(ROOT / "manifests", target_is_directory=True)
    upgrade_dir = next_release(tmp_path / "next")
    replicas: dict[str, Replica] = {}  # the running ones: "old" (the installed release), "new" (the next one)
    identities: dict[str, str] = {}  # their Lease identities, also once stopped
    running: dict[str, Any] = {}  # the job that runs through backup, upgrade and the first uninstall

    # -- what happens where the Deployment's pods would run the controller ----------------------------------------

    async def start(name: str) -> Replica:
        replica = await Replica(sim_cluster).start()
        replicas[name] = replica
        await eventually(lambda: replica.identity, what=f"the {name} replica to try for the Lease")
        assert replica.identity is not None
        identities[name] = replica.identity
        return replica

    async def installed() -> None:
        old = await start("old")
        await eventually(old.leads, what="the installed controller to take the Lease")

    async def upgraded() -> None:
        # The rolling update: a new pod starts (a standby), then the old one gets SIGTERM and releases the Lease.
        new = await start("new")
        assert not new.leads()
        assert await replicas.pop("old").stop() == 0
        await eventually(new.leads, what="the new controller to take the Lease over")
        deployment = await admin.get(DEPLOYMENTS, "tfjob-controller", namespace=NAMESPACE)
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"ghcr.io/tfjob-controller/tfjob-controller:{NEXT_TAG}"
        pods = (await admin.list(PODS, namespace=NAMESPACE))["items"]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == 2 and {p["spec"]["containers"][0]["image"] for p in live} == {container["image"]}

    async def namespace_deleted() -> None:
        # The controller's pods are gone with the namespace: so is the process that stood for them.
        await replicas.pop("new").stop()

    async def before_backup() -> None:
        """A dynamic job running, for the backup, the upgrade and the uninstall to keep."""
        job = tfjob("mnist", workers=2, ps=1, dynamic=True)
        await admin.create(TFJOBS, job, namespace="default")

        async def up() -> bool:
            read = await admin.get(TFJOBS, "mnist", namespace="default")
            pods = (await admin.list(PODS, namespace="default", label_selector="training.kubeflow.org/job-name=mnist"))[
                "items"
            ]
            return is_true(read, "Running") and len(running_pods(pods)) == 3

        await eventually(up, what="mnist Running with its three pods")
        running["spec"] = (await admin.get(TFJOBS, "mnist", namespace="default"))["spec"]
        running["pods"] = await pod_uids(admin, "mnist")

    after_block: dict[tuple[str, str], Callable[[], Awaitable[None]]] = {
        ("1.", "apply --server-side -k manifests/"): installed,
        ("3.", "apply --server-side --force-conflicts -k manifests/"): upgraded,
        ("4.", "delete namespace tfjob-controller"): namespace_deleted,
    }
    before_section: dict[str, Callable[[], Awaitable[None]]] = {"2.": before_backup}

    # -- what the guide says each command shows, keyed by a part of it ------------------------------------------

    async def established(out: str) -> None:
        assert "condition met" in out
        await admin.list(TFJOBS, namespace="default")

    async def holder(out: str) -> None:
        assert out == f"{identities['old']}\n"
        lease = await admin.get(LEASES, "tfjob-controller", namespace=NAMESPACE)
        assert lease["spec"]["holderIdentity"] == replicas["old"].identity

    async def smoke_running(out: str) -> None:
        job = await admin.get(TFJOBS, "tfjob-smoke-test", namespace="default")
        assert is_true(job, "Running")

    async def smoke_pods(out: str) -> None:
        rows = out.splitlines()[1:]
        assert len(rows) == 1 and rows[0].split()[0] == "tfjob-smoke-test-worker-0" and "Running" in rows[0], out

    async def smoke_gone(out: str) -> None:
        assert await gone(lambda: admin.get(TFJOBS, "tfjob-smoke-test", namespace="default"))
        assert await pod_uids(admin, "tfjob-smoke-test") == {}

    async def backed_up(out: str) -> None:
        backup = yaml.safe_load((work / "tfjobs-backup.yaml").read_text())
        [item] = backup["items"]
        assert item["metadata"]["name"] == "mnist" and item["spec"] == running["spec"]
        assert not {"creationTimestamp", "generation", "resourceVersion", "uid"} & item["metadata"].keys()

    async def crd_backed_up(out: str) -> None:
        assert (
            yaml.safe_load((work / "tfjobs-crd-backup.yaml").read_text())["metadata"]["name"] == "tfjobs.kubeflow.org"
        )

    async def holder_noted(out: str) -> None:
        assert (upgrade_dir / "holder-before.txt").read_text() == f"{identities['old']}\n"

    async def stored_versions(out: str) -> None:
        assert json.loads(out) == ["v1"]
        crd = await admin.get(CRDS, "tfjobs.kubeflow.org")
        assert crd["metadata"]["labels"][NEXT_LABEL[0]] == NEXT_LABEL[1], "the next release's CRD is applied"
        assert crd["status"]["storedVersions"] == ["v1"]

    async def new_holder(out: str) -> None:
        assert out == f"{identities['new']}\n" and identities["new"] != identities["old"]

    async def same_pods(out: str) -> None:
        assert out == ""
        assert await pod_uids(admin, "mnist") == running["pods"], "the upgrade replaced a pod"
        assert "mnist-worker-0" in (upgrade_dir / "pods-after.txt").read_text()

    async def jobs_kept(out: str) -> None:
        assert [line.split()[:2] for line in out.splitlines()[1:]] == [["default", "mnist"]], out
        assert await pod_uids(admin, "mnist") == running["pods"], "the uninstall touched the job's pods"
        assert await gone(lambda: admin.get(NAMESPACES, NAMESPACE))
        assert await gone(lambda: admin.get(CLUSTER_ROLES, "tfjob-controller"))
        for kept in ("tfjob-edit", "tfjob-view"):
            await admin.get(CLUSTER_ROLES, kept)
        await admin.get(CRDS, "tfjobs.kubeflow.org")

    async def pods_collected(out: str) -> None:
        assert await gone(lambda: admin.get(TFJOBS, "mnist", namespace="default"))
        assert await pod_uids(admin, "mnist") == {}

    async def everything_removed(out: str) -> None:
        assert await gone(lambda: admin.get(CRDS, "tfjobs.kubeflow.org"))
        for role in ("tfjob-edit", "tfjob-view"):
            assert await gone(lambda role=role: admin.get(CLUSTER_ROLES, role))

    checks: dict[str, Callable[[str], Awaitable[None]]] = {
        "--for=condition=Established": established,
        "=kubectl -n tfjob-controller get lease tfjob-controller -o jsonpath='{.spec.holderIdentity}{\"\\n\"}'": holder,
        "--for=condition=Running": smoke_running,
        "get pods -l training.kubeflow.org/job-name=tfjob-smoke-test": smoke_pods,
        "--for=delete pod -l training.kubeflow.org/job-name=tfjob-smoke-test": smoke_gone,
        "> tfjobs-backup.yaml": backed_up,
        "> tfjobs-crd-backup.yaml": crd_backed_up,
        "> holder-before.txt": holder_noted,
        "storedVersions": stored_versions,
        "grep -v -x -F -f holder-before.txt": new_holder,
        "diff pods-before.txt pods-after.txt": same_pods,
        "=kubectl get tfjobs -A": jobs_kept,
        "--for=delete pods -A": pods_collected,
        "delete -k manifests/": everything_removed,
    }

    # -- the run ---------------------------------------------------------------------------------------------------

    def is_for(needle: str, command: str) -> bool:
        return needle[1:] == command if needle.startswith("=") else needle in command

    ran: list[str] = []
    sections_seen: set[str] = set()
    try:
        for block in blocks(GUIDE.read_text()):
            number = block.section.split()[0]
            cwd = upgrade_dir if number == "3." else work
            if number not in sections_seen:
                sections_seen.add(number)
                if number in before_section:
                    await before_section[number]()
            if block.language == "yaml":
                name = block.body.splitlines()[0].removeprefix("# ")
                (cwd / name).write_text(block.body + "\n")
                continue
            if block.not_run is not None:
                if "/readyz" in block.body:  # what the port-forward would show, from each running replica
                    assert replicas
                    for replica in replicas.values():
                        status, text = await replica.readyz()
                        assert status == 200 and "healthz check passed" in text, text
                continue
            for command in block.commands():
                rc, out, err = await shell(command, cwd, kubectl)
                assert rc == 0, f"{command}\n{out}\n{err}"
                ran.append(command)
                for needle, check in checks.items():
                    if is_for(needle, command):
                        await check(out)
            for (section, needle), hook in after_block.items():
                if number == section and needle in block.body:
                    await hook()
        unused = [n for n in checks if not any(is_for(n, c) for c in ran)]
        assert not unused, f"checks whose command is no longer in the guide: {unused}"
        assert not replicas, "the uninstall stops every controller"
        # The restore (not run by kubectl here): the backup's TFJobs, as saved, are what the API server takes back.
        await admin.create(CRDS, yaml.safe_load((ROOT / "manifests" / "crd" / "kubeflow.org_tfjobs.yaml").read_text()))
        await eventually(lambda: admin.list(TFJOBS, namespace="default"), what="the CRD served again")
        for item in yaml.safe_load((work / "tfjobs-backup.yaml").read_text())["items"]:
            created = await admin.create(TFJOBS, item, namespace=item["metadata"]["namespace"])
            assert created["spec"] == running["spec"]
    finally:
        for replica in replicas.values():
            await replica.stop()
