"""The gang schedulers' CRDs in the simulated cluster: absent by default (a controller started with
--gang-scheduler-name must be testable against a cluster without them), served on request with the
names, short names, printer columns, validation and subresources the upstream projects publish, and
installable later with ``kubectl apply -f sim/tfjob_sim/crds/<scheduler>``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller.cli import parse_args
from tfjob_sim.cluster import SimCluster, SimConfig
from tfjob_sim.crds import crd_dir
from tfjob_sim.testing.kubectl import Kubectl, kubectl_binary
from tfjob_sim.testing.processes import sim_process
from tfjob_sim.watch import WatchConfig


def manifest(*docs: dict) -> str:
    return yaml.safe_dump_all(list(docs), sort_keys=False)


VOLCANO_PG = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {"name": "job", "namespace": "default"},
    "spec": {"minMember": 3, "queue": "default", "minResources": {"cpu": "3", "memory": "1Gi"}},
}
SP_PG = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {"name": "job", "namespace": "default"},
    "spec": {"minMember": 2, "scheduleTimeoutSeconds": 10},
}


class TestAbsentByDefault:
    async def test_no_podgroup_resource_is_served(self, kubectl: Kubectl, sim_cluster: SimCluster) -> None:
        rc, _out, err = await kubectl("get", "podgroups")
        assert rc == 1 and 'the server doesn\'t have a resource type "podgroups"' in err
        out = await kubectl.ok("api-resources", "--api-group=scheduling.volcano.sh")
        assert "podgroups" not in out
        assert sim_cluster.store.registry.get("podgroups.scheduling.x-k8s.io") is None

    async def test_kubectl_apply_of_the_crd_directory_installs_it(self, kubectl: Kubectl) -> None:
        out = await kubectl.ok("apply", "-f", str(crd_dir("volcano")))
        assert "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.volcano.sh created" in out
        assert "customresourcedefinition.apiextensions.k8s.io/queues.scheduling.volcano.sh created" in out
        await kubectl.ok("wait", "--for=condition=Established", "crd/podgroups.scheduling.volcano.sh")
        assert "job created" in await kubectl.ok("apply", "-f", "-", input=manifest(VOLCANO_PG))
        out = await kubectl.ok("apply", "-f", str(crd_dir("scheduler-plugins")))
        assert "podgroups.scheduling.x-k8s.io created" in out


class TestServedOnRequest:
    @pytest.fixture
    def sim_config(self) -> SimConfig:
        return SimConfig(nodes=3, time_scale=0.01, watch=WatchConfig(), podgroup_crds="volcano,scheduler-plugins")

    async def test_volcano_podgroup_names_columns_and_no_status_subresource(self, kubectl: Kubectl) -> None:
        await kubectl.ok("apply", "-f", "-", input=manifest(VOLCANO_PG))
        # The simulated vc-scheduler admits it (its minResources fit).
        await kubectl.ok("wait", "podgroups.scheduling.volcano.sh/job", "--for=jsonpath={.status.phase}=Inqueue")
        table = await kubectl.ok("get", "podgroups.scheduling.volcano.sh")
        header, row = table.splitlines()
        assert header.split() == ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE"]
        assert row.split()[:3] == ["job", "Inqueue", "3"] and len(row.split()) == 4
        wide = await kubectl.ok("get", "podgroup-v1beta1", "-o", "wide")
        assert wide.splitlines()[0].split() == ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE", "QUEUE"]
        assert wide.splitlines()[1].split()[-1] == "default"
        resources = await kubectl.ok("api-resources", "--api-group=scheduling.volcano.sh")
        rows = {line.split()[0]: line.split() for line in resources.splitlines()[1:]}
        assert rows["podgroups"] == [
            "podgroups",
            "pg,podgroup-v1beta1",
            "scheduling.volcano.sh/v1beta1",
            "true",
            "PodGroup",
        ]
        assert rows["queues"] == ["queues", "q,queue-v1beta1", "scheduling.volcano.sh/v1beta1", "false", "Queue"]
        # No status subresource (as upstream): status is written with the object, /status does not exist.
        rc, _out, err = await kubectl(
            "patch",
            "podgroups.scheduling.volcano.sh",
            "job",
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"phase":"Completed"}}',
        )
        assert rc == 1 and "NotFound" in err
        await kubectl.ok(
            "patch",
            "podgroups.scheduling.volcano.sh",
            "job",
            "--type=merge",
            "-p",
            '{"status":{"phase":"Completed","running":0}}',
        )
        assert (
            await kubectl.ok("get", "podgroups.scheduling.volcano.sh", "job", "-o", "jsonpath={.status.phase}")
            == "Completed"
        )

    async def test_volcano_schema_rejects_bad_quantities(self, kubectl: Kubectl) -> None:
        bad = yaml.safe_load(yaml.safe_dump(VOLCANO_PG))
        bad["spec"]["minResources"] = {"cpu": "lots"}
        rc, _out, err = await kubectl("apply", "-f", "-", input=manifest(bad))
        assert rc == 1 and "spec.minResources.cpu" in err

    async def test_scheduler_plugins_podgroup_names_columns_validation(self, kubectl: Kubectl) -> None:
        await kubectl.ok("apply", "-f", "-", input=manifest(SP_PG))
        await kubectl.ok("wait", "pgs/job", "--for=jsonpath={.status.phase}=Pending")
        table = await kubectl.ok("get", "pgs")
        header, row = table.splitlines()
        assert header.split() == ["NAME", "PHASE", "MINMEMBER", "RUNNING", "SUCCEEDED", "FAILED", "AGE"]
        # The simulated scheduler-plugins controller marks it Pending; zero counts are omitted
        # (omitempty) and show as empty cells.
        assert row.split()[:3] == ["job", "Pending", "2"] and len(row.split()) == 4
        resources = await kubectl.ok("api-resources", "--api-group=scheduling.x-k8s.io")
        row_of = {line.split()[0]: line.split() for line in resources.splitlines()[1:]}
        assert row_of["podgroups"] == ["podgroups", "pg,pgs", "scheduling.x-k8s.io/v1alpha1", "true", "PodGroup"]
        rc, out, err = await kubectl("get", "pg")  # both claim "pg": kubectl picks Volcano's and says so
        assert (
            rc == 0
            and out == ""
            and 'short name "pg" could also match lower priority resource podgroups.scheduling.x-k8s.io' in err
        )
        zero = yaml.safe_load(yaml.safe_dump(SP_PG))
        zero["metadata"]["name"] = "zero"
        zero["spec"]["minMember"] = 0
        rc, _out, err = await kubectl("apply", "-f", "-", input=manifest(zero))
        assert (
            rc == 1
            and "spec.minMember: Invalid value: 0: spec.minMember in body should be greater than or equal to 1" in err
        )
        # The status subresource is on: a main-resource write ignores status, /status writes it.
        await kubectl.ok(
            "patch",
            "podgroups.scheduling.x-k8s.io",
            "job",
            "--type=merge",
            "-p",
            '{"status":{"phase":"Running"}}',
        )
        assert await kubectl.ok("get", "pgs", "job", "-o", "jsonpath={.status.phase}") == "Pending"
        await kubectl.ok(
            "patch",
            "podgroups.scheduling.x-k8s.io",
            "job",
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status":{"phase":"Finished"}}',
        )
        assert await kubectl.ok("get", "pgs", "job", "-o", "jsonpath={.status.phase}") == "Finished"


async def test_sim_command_serves_the_crds_it_is_asked_for(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc"
    async with sim_process(kubeconfig, "--nodes", "1", "--podgroup-crds", "scheduler-plugins"):
        kubectl = Kubectl(kubectl_binary(), str(kubeconfig), tmp_path / "cache")
        (tmp_path / "cache").mkdir()
        rc, out, err = await kubectl("get", "pgs")
        assert rc == 0 and err.strip() == "No resources found in default namespace."
        rc, _out, err = await kubectl("get", "podgroup-v1beta1")
        assert rc == 1 and 'the server doesn\'t have a resource type "podgroup-v1beta1"' in err


def test_sim_command_flag() -> None:
    args = parse_args(["sim", "--kubeconfig", "k", "--podgroup-crds", "scheduler-plugins,volcano"], environ={})
    assert args.podgroup_crds == ("scheduler-plugins", "volcano")
    assert parse_args(["sim", "--kubeconfig", "k"], environ={}).podgroup_crds == ()
    with pytest.raises(SystemExit):
        parse_args(["sim", "--kubeconfig", "k", "--podgroup-crds", "kueue"], environ={})


def test_unknown_scheduler_in_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown gang scheduler 'kueue'"):
        SimConfig(podgroup_crds=("volcano", "kueue"))
