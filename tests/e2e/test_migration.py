"""docs/migration.md, run: every command of the guide, in order, against a simulated Kubeflow cluster.

The cluster is set up as Kubeflow's manifests leave it with training-operator v1.8.1 (its Deployment in namespace
``kubeflow``, its ValidatingWebhookConfiguration, its TFJob CRD) running a dynamic and a static TFJob
(tests/e2e/training_operator.py). Then each ``bash`` block of the guide runs through a shell with the real kubectl,
in the guide's order; a block the simulated cluster cannot run must say why in a ``<!-- not run: ... -->`` comment
just above it, so a command added to the guide is run by this test unless it says otherwise. The guide's
Deployment ``tfjob-controller`` runs nothing in the simulated cluster: the controller runs in this process from the
install step until the rollback scales the Deployment to 0.

Between the blocks the test checks what the guide promises: training-operator's args and webhook entries, the CRD
replaced (and restored), the jobs adopted with nothing replaced and their dynamic-worker record, no
``ForeignWriter`` event, and after the rollback what training-operator's first status write makes of a job this
controller ran. The guide's kustomize overlay must say what its live commands do.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.runtime.client import ApiClient, Resource
from controller.runtime.errors import NotFound
from tests.e2e import training_operator as to
from tests.e2e.conftest import CRD_PATH, CRDS, Operator, eventually, is_true, start_operator, tfjob
from tests.e2e.guides import blocks, shell
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.testing.kubectl import Kubectl, kubectl_binary

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migration.md"
DEPLOYMENTS = Resource("apps", "v1", "deployments")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False)
WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", namespaced=False)

pytestmark = pytest.mark.timeout(300)


def test_every_block_of_the_guide_is_run_or_says_why_not() -> None:
    found = blocks(GUIDE.read_text())
    assert {b.language for b in found} == {"bash", "yaml"}
    assert sum(1 for b in found if b.language == "bash" and b.not_run is None) >= 10
    for block in found:
        assert block.not_run is None or block.language == "bash", block
        if block.not_run is not None:
            assert len(block.not_run) > 20, f"say why this block is not run: {block.body}"


def _json_patch(command: str) -> list[dict[str, Any]]:
    [argument] = [a for a in shlex.split(command) if a.startswith("-p=")]
    return json.loads(argument.removeprefix("-p="))


def test_the_kustomize_overlay_builds_what_the_live_commands_leave(tmp_path: Path) -> None:
    """``kubectl kustomize`` of the guide's overlay over stand-ins for Kubeflow's training-operator overlay."""
    [overlay] = [b.body for b in blocks(GUIDE.read_text()) if b.language == "yaml"]
    kubeflow, ours = tmp_path / "kubeflow", tmp_path / "without-tfjob"
    kubeflow.mkdir()
    ours.mkdir()
    objects = {
        "deployment.yaml": to.deployment(),
        "webhooks.yaml": to.webhook_configuration(),
        "crd.yaml": to.crd(yaml.safe_load(CRD_PATH.read_text())),
    }
    for name, obj in objects.items():
        (kubeflow / name).write_text(yaml.safe_dump(obj))
    kustomization = {"namespace": to.NAMESPACE, "resources": sorted(objects)}
    (kubeflow / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    (ours / "kustomization.yaml").write_text(overlay)
    built = subprocess.run([kubectl_binary(), "kustomize", str(ours)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    result = {d["kind"]: d for d in yaml.safe_load_all(built.stdout)}
    assert set(result) == {"Deployment", "ValidatingWebhookConfiguration"}, "the CRD is left out"
    assert result["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        f"--enable-scheme={kind}" for kind in ("pytorchjob", "xgboostjob", "mpijob", "paddlejob")
    ]
    names = [w["name"] for w in result["ValidatingWebhookConfiguration"]["webhooks"]]
    assert names == [f"validator.{k}.training-operator.kubeflow.org" for k in to.WEBHOOK_KINDS if k != "tfjob"]


def test_the_kustomize_overlay_makes_the_live_changes() -> None:
    found = blocks(GUIDE.read_text())
    [overlay] = [yaml.safe_load(b.body) for b in found if b.language == "yaml"]
    commands = [c for b in found if b.language == "bash" for c in b.commands()]
    patches = {p["target"]["kind"]: p["patch"] for p in overlay["patches"]}
    [args] = [c for c in commands if "--enable-scheme=" in c and "training-operator" in c]
    assert yaml.safe_load(patches["Deployment"]) == _json_patch(args)
    [webhook] = [c for c in commands if "patch validatingwebhookconfiguration" in c]
    assert yaml.safe_load(patches["ValidatingWebhookConfiguration"]) == _json_patch(webhook)
    assert yaml.safe_load(patches["CustomResourceDefinition"])["$patch"] == "delete"
    assert overlay["resources"] == ["../kubeflow"]


# --- the run ---------------------------------------------------------------------------------------------------


@pytest.fixture
def sim_config() -> SimConfig:
    return SimConfig(nodes=3, time_scale=0.01)


async def kubeflow_cluster(admin: ApiClient, to_client: ApiClient) -> dict[str, dict[str, Any]]:
    """training-operator v1.8.1 as Kubeflow's manifests install it, running two TFJobs; their children's uids."""
    await admin.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": to.NAMESPACE}})
    await admin.create(DEPLOYMENTS, to.deployment(), namespace=to.NAMESPACE)
    await admin.create(WEBHOOKS, to.webhook_configuration())
    await admin.create(CRDS, to.crd(yaml.safe_load(CRD_PATH.read_text())))

    async def served() -> bool:
        await admin.list(to.TFJOBS, namespace="default")
        return True

    await eventually(served, what="training-operator's TFJob CRD served")
    children: dict[str, dict[str, Any]] = {}
    for manifest in (tfjob("mnist", workers=3, ps=1, dynamic=True), tfjob("static", workers=2, dynamic=False)):
        _, children[manifest["metadata"]["name"]] = await to.leave_running(admin, to_client, manifest)
    return children


async def test_the_guide_switches_a_kubeflow_cluster_over_and_back(
    sim_cluster: SimCluster, admin: ApiClient, kubectl: Kubectl, tmp_path: Path
) -> None:
    to_client = await to.client(sim_cluster)
    operator: Operator | None = None
    try:
        before = await kubeflow_cluster(admin, to_client)
        work = tmp_path / "work"
        work.mkdir()
        os.symlink(ROOT / "manifests", work / "manifests")

        async def after_install() -> None:
            nonlocal operator
            operator = await start_operator(sim_cluster, install_crd=False)

            async def adopted() -> bool:  # the Deployment ready, as `rollout status` waits for on a real cluster
                job = await admin.get(to.TFJOBS, "mnist", namespace="default")
                return "dynamicWorkers" in job["status"]

            await eventually(adopted, what="the controller's first pass over the jobs")

        async def after_scale_to_zero() -> None:
            nonlocal operator
            assert operator is not None
            await operator.stop()
            operator = None

        hooks: dict[str, Callable[[], Any]] = {
            "kubectl apply -k manifests/": after_install,
            "scale deployment/tfjob-controller --replicas=0": after_scale_to_zero,
        }
        checks = _checks(before)
        ran = []
        for block in blocks(GUIDE.read_text()):
            if block.language != "bash" or block.not_run is not None:
                continue
            for command in block.commands():
                rc, out, err = await shell(command, work, kubectl)
                assert rc == 0, f"{command}\n{out}\n{err}"
                ran.append(command)
                for needle, check in checks.items():
                    if _is_for(needle, command):
                        await check(out, admin)
            for needle, hook in hooks.items():
                if needle in block.body:
                    await hook()
        gone = [n for n in checks if not any(_is_for(n, c) for c in ran)]
        assert not gone, f"checks whose command is no longer in the guide: {gone}"
        await _after_rollback(admin, to_client, kubectl, before)
    finally:
        if operator is not None:
            await operator.stop()
        await to_client.close()


def _is_for(needle: str, command: str) -> bool:
    """A check's key names its command: a part of it, or with a leading ``=`` all of it."""
    return needle[1:] == command if needle.startswith("=") else needle in command


def _checks(before: dict[str, dict[str, Any]]) -> dict[str, Callable[[str, ApiClient], Any]]:
    """What the guide says each command shows, keyed by a part of the command (see :func:`_is_for`)."""

    async def args(out: str, admin: ApiClient) -> None:
        assert json.loads(out) == [
            "--enable-scheme=pytorchjob",
            "--enable-scheme=xgboostjob",
            "--enable-scheme=mpijob",
            "--enable-scheme=paddlejob",
        ]

    # The same command shows ours after the replacement, then training-operator's after the rollback.
    subresources_shown = [yaml.safe_load(CRD_PATH.read_text())["spec"]["versions"][0]["subresources"], {"status": {}}]

    async def subresources(out: str, admin: ApiClient) -> None:
        assert subresources_shown, f"the subresources shown a third time: {out}"
        assert json.loads(out) == subresources_shown.pop(0), out
        crd = await admin.get(CRDS, "tfjobs.kubeflow.org")
        assert crd["spec"]["versions"][0]["subresources"] == json.loads(out)

    async def webhooks(out: str, admin: ApiClient) -> None:
        assert out.split() == [
            f"validator.{k}.training-operator.kubeflow.org" for k in to.WEBHOOK_KINDS if k != "tfjob"
        ]

    async def jobs(out: str, admin: ApiClient) -> None:
        rows = {line.split()[1]: line.split()[2] for line in out.splitlines()[1:]}
        assert rows == {"mnist": "Running", "static": "Running"}, out
        for name, children in before.items():
            assert to.uids(await to.children(admin, name)) == to.uids(children), f"{name}: something was replaced"

    async def columns(out: str, admin: ApiClient) -> None:
        lines = {line.split()[1]: line for line in out.splitlines()[1:]}
        assert lines["mnist"].split()[2] == "Running" and "workers:map[]" in lines["mnist"], out
        assert "members:[0 1 2]" in lines["mnist"], out
        assert lines["static"].split()[2] == "Running" and lines["static"].split()[4] == "<none>", out
        for name in before:
            job = await admin.get(to.TFJOBS, name, namespace="default")
            assert lines[name].split()[3] == job["status"]["startTime"]

    async def no_foreign_writer(out: str, admin: ApiClient) -> None:
        assert out == "", out

    return {
        "jsonpath='{.spec.template.spec.containers[0].args}": args,
        "jsonpath='{.spec.versions[0].subresources}": subresources,
        "jsonpath='{.webhooks[*].name}": webhooks,
        "=kubectl get tfjobs -A": jobs,
        "custom-columns=": columns,
        "reason=ForeignWriter": no_foreign_writer,
    }


async def _after_rollback(
    admin: ApiClient, to_client: ApiClient, kubectl: Kubectl, before: dict[str, dict[str, Any]]
) -> None:
    """training-operator is back: its CRD, its args, its webhook entries; what it makes of a job we ran."""
    deployment = await admin.get(DEPLOYMENTS, "training-operator", namespace=to.NAMESPACE)
    assert "args" not in deployment["spec"]["template"]["spec"]["containers"][0]
    config = await admin.get(WEBHOOKS, to.WEBHOOK_CONFIGURATION)
    assert [w["name"] for w in config["webhooks"]] == [w["name"] for w in to.webhook_configuration()["webhooks"]]

    async def namespace_gone() -> bool:
        try:
            await admin.get(NAMESPACES, "tfjob-controller")
        except NotFound:
            return True
        return False

    await eventually(namespace_gone, what="the tfjob-controller namespace deleted")
    # kubectl scale needs the scale subresource upstream's CRD does not have.
    rc, _, err = await kubectl("scale", "tfjob/mnist", "--replicas=2", "-n", "default")
    assert rc != 0, err
    # training-operator's first status write (its types have no dynamicWorkers) drops our record; the job, its
    # conditions and its pods are as this controller left them.
    job = await admin.get(to.TFJOBS, "mnist", namespace="default")
    assert is_true(job, "Running")
    status = {k: v for k, v in job["status"].items() if k != "dynamicWorkers"}
    written = await to.write_status(to_client, "mnist", "default", status)
    assert "dynamicWorkers" not in written["status"]
    assert written["status"]["conditions"] == job["status"]["conditions"]
    assert to.uids(await to.children(admin, "mnist")) == to.uids(before["mnist"])
