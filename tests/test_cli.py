"""The command line as users run it: subprocesses, real signals, real ports."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp
import anyio
import pytest
import yaml

from controller.runtime.client import LEASES, PODS, ApiClient
from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import CRD_PATH, CRDS, eventually, tfjob
from tfjob_sim.cluster import SimCluster
from tfjob_sim.testing.kubectl import Kubectl, kubectl_binary
from tfjob_sim.testing.processes import CLI, ControllerProcess, clean_env, free_port, sim_process


async def run_cli(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *CLI, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=clean_env(env)
    )
    with anyio.fail_after(timeout):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def only_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{stderr}"
    return lines[0]


def last_line(stderr: str) -> str:
    """The CLI's own message: the last line (structured log lines may precede it)."""
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


async def test_bad_arguments_get_one_line_and_exit_2():
    rc, out, err = await run_cli("run", "--workers", "zero")
    assert rc == 2
    assert only_line(err) == (
        "tfjob-controller run: error: argument --workers: expected a whole number, got 'zero' "
        "(see tfjob-controller run --help)"
    )
    rc, _, err = await run_cli("run", "--metrics-addr", "8080")
    assert rc == 2 and "invalid address '8080'" in only_line(err)
    rc, _, err = await run_cli("run", "--no-such-flag")
    assert rc == 2
    assert (
        only_line(err)
        == "tfjob-controller: error: unrecognized arguments: --no-such-flag (see tfjob-controller --help)"
    )
    rc, _, err = await run_cli("run", "--cluster-domain", "not a domain")
    assert rc == 2 and "argument --cluster-domain: not a DNS domain" in only_line(err)
    rc, _, err = await run_cli("run", "--failover-backoff", "30", "10")
    assert rc == 2 and only_line(err) == (
        "tfjob-controller run: error: --failover-backoff: BASE must not exceed CAP (see tfjob-controller run --help)"
    )
    rc, _, err = await run_cli("run", "--max-pods-per-job", "0")
    assert rc == 2 and "argument --max-pods-per-job: must be at least 1, got 0" in only_line(err)
    rc, _, err = await run_cli("run", "--leader-election-id", "Shard_A")
    assert rc == 2 and "argument --leader-election-id: 'Shard_A' is not a valid object name" in only_line(err)


async def test_a_bad_environment_variable_gets_one_line_naming_it_and_exit_2():
    rc, _, err = await run_cli("run", env={"TFJOB_CONTROLLER_WORKERS": "many"})
    assert rc == 2
    assert only_line(err) == (
        "tfjob-controller run: error: environment variable TFJOB_CONTROLLER_WORKERS: expected a whole number, "
        "got 'many' (see tfjob-controller run --help)"
    )
    rc, _, err = await run_cli("run", env={"TFJOB_CONTROLLER_LEADER_ELECT": "maybe"})
    assert rc == 2 and "TFJOB_CONTROLLER_LEADER_ELECT: expected true or false, got 'maybe'" in only_line(err)
    rc, _, err = await run_cli("run", env={"TFJOB_CONTROLLER_LOG_LEVEL": "loud"})
    assert rc == 2 and only_line(err).startswith(
        "tfjob-controller: error: environment variable TFJOB_CONTROLLER_LOG_LEVEL"
    )


async def test_bad_api_limits_get_one_line_whether_flag_or_environment():
    rc, _, err = await run_cli("run", "--kube-api-qps", "-5")
    assert rc == 2 and "argument --kube-api-qps: must be 'auto' or a finite number >= 0" in only_line(err)
    rc, _, err = await run_cli("run", "--kube-api-burst", "0")
    assert rc == 2 and "argument --kube-api-burst: must be 'auto' or at least 1" in only_line(err)
    rc, _, err = await run_cli("run", "--kube-api-burst", "lots")
    assert rc == 2 and "argument --kube-api-burst: expected 'auto' or a whole number, got 'lots'" in only_line(err)
    rc, _, err = await run_cli("run", env={"TFJOB_CONTROLLER_KUBE_API_QPS": "fast"})
    assert rc == 2 and only_line(err) == (
        "tfjob-controller run: error: environment variable TFJOB_CONTROLLER_KUBE_API_QPS: expected 'auto' or a "
        "number of requests per second, got 'fast' (see tfjob-controller run --help)"
    )


@pytest.mark.parametrize(
    ("qps", "burst", "settings"),
    [
        # auto: the 500/1000 fallback bucket, lifted when the server shows API Priority and Fairness
        (None, None, {"qps": 500.0, "burst": 1000, "auto_limit": True}),
        ("AUTO", "auto", {"qps": 500.0, "burst": 1000, "auto_limit": True}),
        ("auto", "7", {"qps": 500.0, "burst": 7, "auto_limit": True}),
        # a number is a bucket for good; an auto burst is then twice the QPS
        ("50", None, {"qps": 50.0, "burst": 100, "auto_limit": False}),
        ("0.2", None, {"qps": 0.2, "burst": 1, "auto_limit": False}),
        ("50", "3", {"qps": 50.0, "burst": 3, "auto_limit": False}),
        # 0: no limit at all, whatever the burst
        ("0", "3", {"qps": 0.0, "burst": 1, "auto_limit": False}),
    ],
)
def test_api_limit_flags_become_the_clients_settings(qps, burst, settings):
    from controller.app import client_limit
    from controller.cli import parse_args, run_options

    argv = ["run", *(["--kube-api-qps", qps] if qps else []), *(["--kube-api-burst", burst] if burst else [])]
    options = run_options(parse_args(argv, {}))
    assert client_limit(options.kube_api_qps, options.kube_api_burst) == settings


async def test_run_with_a_missing_kubeconfig_fails_with_one_line(tmp_path: Path):
    rc, _, err = await run_cli("run", "--kubeconfig", str(tmp_path / "nope"))
    assert rc == 1
    assert only_line(err) == f"tfjob-controller run: kubeconfig not found: {tmp_path / 'nope'}"


async def test_run_with_an_unreadable_kubeconfig_fails_with_one_line(tmp_path: Path):
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n")
    rc, _, err = await run_cli("run", "--kubeconfig", str(broken))
    assert rc == 1
    assert only_line(err).startswith(f"tfjob-controller run: cannot load {broken}: not valid YAML:")
    incomplete = tmp_path / "incomplete"
    incomplete.write_text("apiVersion: v1\nkind: Config\n")
    rc, _, err = await run_cli("run", "--kubeconfig", str(incomplete))
    assert rc == 1
    assert only_line(err) == (
        f"tfjob-controller run: cannot load {incomplete}: Invalid kube-config file. Expected key current-context in "
        f"{incomplete}"
    )


async def test_an_unreachable_cluster_is_waited_for_then_reported_in_one_line(tmp_path: Path):
    port = free_port()  # nothing listens there
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{port}")
    started = anyio.current_time()
    rc, _, err = await run_cli(
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--metrics-addr",
        f"127.0.0.1:{free_port()}",
        "--health-addr",
        f"127.0.0.1:{free_port()}",
        env={"TFJOB_CONTROLLER_STARTUP_TIMEOUT": "2"},
    )
    assert rc == 1
    assert last_line(err).startswith(
        f"tfjob-controller run: cannot reach the API server at http://127.0.0.1:{port} within 2 s: "
        f"GET http://127.0.0.1:{port}/version: cannot connect:"
    )
    # The wait is bounded by the timeout, not by the client's retries (generous: the machine is shared).
    assert anyio.current_time() - started < 30


def test_every_run_flag_has_an_environment_variable_documented_in_help_and_readme():
    from controller.cli import GLOBAL_OPTIONS, RUN_OPTIONS, build_parser

    run_parser = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    flags = {flag for action in run_parser._actions for flag in action.option_strings} - {"-h", "--help"}
    assert flags - {f"--no-{o.flag[2:]}" for o in RUN_OPTIONS} == {o.flag for o in RUN_OPTIONS}
    help_text = " ".join(run_parser.format_help().split())
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for option in GLOBAL_OPTIONS + RUN_OPTIONS:
        assert option.env == "TFJOB_CONTROLLER_" + option.flag[2:].upper().replace("-", "_")
        assert option.env in readme, f"README does not document {option.env}"
        if option in RUN_OPTIONS:
            assert f"env {option.env}" in help_text.replace("- ", "-"), option.flag


def test_the_environment_configures_run_and_the_command_line_wins():
    from controller.cli import parse_args, run_options

    environ = {
        "TFJOB_CONTROLLER_NAMESPACE": "team-a, team-b",
        "TFJOB_CONTROLLER_WORKERS": "8",
        "TFJOB_CONTROLLER_METRICS_ADDR": "127.0.0.1:9090",
        "TFJOB_CONTROLLER_LEADER_ELECT": "false",
        "TFJOB_CONTROLLER_FAILOVER_BACKOFF": "2.5,60",
        "TFJOB_CONTROLLER_LOG_LEVEL": "debug",
    }
    options = run_options(parse_args(["run"], environ))
    assert options.namespaces == ["team-a", "team-b"]
    assert options.workers == 8
    assert options.metrics_addr == ("127.0.0.1", 9090)
    assert options.leader_elect is False
    assert options.failover_backoff == (2.5, 60.0)
    assert parse_args(["run"], environ).log_level == "debug"
    options = run_options(parse_args(["run", "--workers", "2", "--leader-elect", "--namespace", "x"], environ))
    assert (options.workers, options.leader_elect, options.namespaces) == (2, True, ["x"])
    defaults = run_options(parse_args(["run"], {}))
    assert (defaults.workers, defaults.leader_elect, defaults.namespaces, defaults.cluster_domain) == (16, True, [], "")


def test_upstreams_custom_cluster_domain_is_honoured_after_ours():
    from controller.cli import parse_args, run_options

    assert (
        run_options(parse_args(["run"], {"CUSTOM_CLUSTER_DOMAIN": "cluster.local"})).cluster_domain == "cluster.local"
    )
    both = {"CUSTOM_CLUSTER_DOMAIN": "cluster.local", "TFJOB_CONTROLLER_CLUSTER_DOMAIN": "corp.example"}
    assert run_options(parse_args(["run"], both)).cluster_domain == "corp.example"
    assert run_options(parse_args(["run", "--cluster-domain", "x.y"], both)).cluster_domain == "x.y"


async def test_demo_runs_the_story_to_the_end():
    rc, out, err = await run_cli("demo", "--time-scale", "0.02", timeout=120)
    assert rc == 0, out + err
    # the second deletion of worker 1 is replaced at once; the second OOM kill of worker 2 backs off
    assert "was deleted (Deleted): replacing it as soon as it is gone (failover 2)" in out
    assert "was OOM-killed (exit code 137) (OOMKilled): replacing it after a 1s back-off (failover 2)" in out
    assert "tfjob_worker_failovers_total{job_namespace=default,reason=Deleted} 2" in out
    assert (
        "Scaled down to 2 worker(s): removed mnist-worker-1 (pod-deletion-cost -100), mnist-worker-3 (highest index);"
        " workers now 0,2" in out
    )
    assert "members (kubectl get tfjob mnist: MEMBERS): 0,2;" in out
    assert "tfjob_worker_failovers_total{job_namespace=default,reason=OOMKilled} 2" in out
    assert "tfjob_worker_scaled_down_total{chosen_by=deletionCost,job_namespace=default} 1" in out
    assert "tfjob_worker_scaled_down_total{chosen_by=highestIndex,job_namespace=default} 1" in out
    assert "without ever leaving Running" in out


async def test_sim_serves_kubectl_and_exits_cleanly_on_sigterm(tmp_path: Path):
    kubeconfig = tmp_path / "kc"
    async with sim_process(kubeconfig, "--nodes", "2"):
        kubectl = Kubectl(kubectl_binary(), str(kubeconfig), tmp_path / "cache")
        rc, out, err = await kubectl("get", "nodes", "-o", "name")
        assert rc == 0, err
        assert out.split() == ["node/sim-node-0", "node/sim-node-1"]


@pytest.mark.parametrize(
    ("flag", "headers"), [([], True), (["--no-priority-and-fairness"], False)], ids=["apf", "no-apf"]
)
async def test_sim_sends_the_priority_and_fairness_headers_unless_told_not_to(tmp_path: Path, flag, headers):
    async with sim_process(tmp_path / "kc", "--nodes", "1", *flag) as url:
        async with aiohttp.ClientSession() as http, http.get(url + "/api/v1/namespaces") as response:
            assert response.status == 200
            sent = {name for name in response.headers if name.lower().startswith("x-kubernetes-pf-")}
    assert sent == ({"X-Kubernetes-PF-FlowSchema-UID", "X-Kubernetes-PF-PriorityLevel-UID"} if headers else set())


async def test_run_reconciles_serves_metrics_and_health_and_releases_the_lease(sim_cluster: SimCluster):
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    metrics_port, health_port = free_port(), free_port()
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        "run",
        "--kubeconfig",
        sim_cluster.kubeconfig_path,
        "--workers",
        "2",
        "--metrics-addr",
        f"127.0.0.1:{metrics_port}",
        "--health-addr",
        f"127.0.0.1:{health_port}",
        "--leader-election-namespace",
        "default",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stderr = b""
    try:
        await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
        await client.create(TFJOBS, tfjob("cli", workers=2), namespace="default")

        async def pods_running() -> bool:
            pods = (await client.list(PODS, namespace="default", label_selector="training.kubeflow.org/job-name=cli"))[
                "items"
            ]
            return len([p for p in pods if p.get("status", {}).get("phase") == "Running"]) == 2

        await eventually(pods_running, timeout=30, what="the controller process to create the job's pods")
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                try:
                    async with http.get(f"http://127.0.0.1:{health_port}/readyz") as r:
                        return r.status == 200
                except aiohttp.ClientError:
                    return False

            await eventually(ready, what="/readyz to report ready")
            created = 'training_operator_jobs_created_total{framework="tensorflow",job_namespace="default"}'

            async def scrape() -> str | None:
                # The series exists at 0 from the moment the job is seen; it moves to 1 once the
                # reconcile's status write is done, not when the pods run.
                async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as r:
                    body = await r.text()
                return body if f"{created} 1.0" in body else None

            text = await eventually(scrape, what="the created-jobs counter to reach 1")
            assert 'leader_election_master_status{name="tfjob-controller"} 1.0' in text
            assert "workqueue_adds_total" in text and "controller_runtime_reconcile_total" in text
        lease = await client.get(LEASES, "tfjob-controller", namespace="default")
        assert lease["spec"]["holderIdentity"]
    finally:
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            _, stderr = await proc.communicate()
    try:
        assert proc.returncode == 0, stderr.decode()[-3000:]
        lease = await client.get(LEASES, "tfjob-controller", namespace="default")
        assert lease["spec"].get("holderIdentity", "") == "", "the lease is released on shutdown"
    finally:
        await client.close()


@pytest.mark.parametrize("module", ["re2", "celpy", "cryptography"])
async def test_sim_without_its_extra_fails_at_once_with_one_line(tmp_path: Path, module: str):
    # The extra's module made unimportable, as in an install without [sim] (cryptography: secure mode).
    secure = ", '--secure'" if module == "cryptography" else ""
    code = (
        f"import sys; sys.modules[{module!r}] = None; from controller.cli import main; "
        f"sys.exit(main(['sim', '--kubeconfig', {str(tmp_path / 'kc')!r}{secure}]))"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    with anyio.fail_after(60):
        out, err = await proc.communicate()
    assert proc.returncode == 1 and out == b""
    lines = err.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tfjob-controller sim: the simulated cluster needs the [sim] extra (cannot import ")
    assert module in lines[0]
    assert lines[0].endswith("install it from a checkout with: pip install -e '.[sim]'")
    assert not (tmp_path / "kc").exists()  # it never started


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["sim", "--kubeconfig", "KC"], 1),
        (["demo"], 1),
        # The flags of a command that is not installed are not read: the missing command is the one error.
        (["sim", "--kubeconfig", "KC", "--podgroup-crds", "volcano"], 1),
        (["--log-level", "debug", "sim", "--kubeconfig", "KC"], 1),
    ],
)
async def test_sim_and_demo_without_the_simulator_installed_say_how_to_install_it(
    tmp_path: Path, command: list[str], code: int
):
    # The simulator package itself missing, as after a plain `pip install .` of the controller.
    args = [str(tmp_path / "kc") if arg == "KC" else arg for arg in command]
    program = f"import sys; sys.modules['tfjob_sim'] = None; from controller.cli import main; sys.exit(main({args!r}))"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", program, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    with anyio.fail_after(60):
        out, err = await proc.communicate()
    lines = err.decode().splitlines()
    assert proc.returncode == code and out == b"" and len(lines) == 1, (proc.returncode, lines)
    assert "the simulated cluster is not installed" in lines[0]
    assert "; install it from a checkout with: pip install -e '.[sim]'" in lines[0], lines[0]
    assert not (tmp_path / "kc").exists()


async def test_run_as_the_manifests_service_account_over_tls_with_no_403(tmp_path: Path):
    """``tfjob-controller run`` as the shipped Deployment runs it: the ServiceAccount token and RBAC of
    manifests/, the cluster's CA verified, leader election in the controller's own namespace."""
    from tests.e2e.conftest import CONTROLLER_NAMESPACE, controller_kubeconfig
    from tfjob_sim.cluster import SimConfig

    config = SimConfig(nodes=2, time_scale=0.01, secure=True, kubeconfig_path=str(tmp_path / "admin"))
    async with SimCluster(config) as cluster:
        admin = await ApiClient.from_kubeconfig(cluster.kubeconfig_path)
        try:
            await admin.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
            kubeconfig = await controller_kubeconfig(cluster, admin)
            assert "token" in yaml.safe_load(await anyio.Path(kubeconfig).read_text())["users"][0]["user"]
            proc = await asyncio.create_subprocess_exec(
                *CLI,
                "run",
                "--kubeconfig",
                kubeconfig,
                "--workers",
                "2",
                "--metrics-addr",
                f"127.0.0.1:{free_port()}",
                "--health-addr",
                f"127.0.0.1:{free_port()}",
                "--leader-election-namespace",
                CONTROLLER_NAMESPACE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                await admin.create(TFJOBS, tfjob("secure", workers=2), namespace="default")

                async def pods_running() -> bool:
                    pods = (
                        await admin.list(
                            PODS, namespace="default", label_selector="training.kubeflow.org/job-name=secure"
                        )
                    )["items"]
                    return len([p for p in pods if p.get("status", {}).get("phase") == "Running"]) == 2

                await eventually(pods_running, timeout=60, what="the controller process to create the job's pods")
                lease = await admin.get(LEASES, "tfjob-controller", namespace=CONTROLLER_NAMESPACE)
                assert lease["spec"]["holderIdentity"]
            finally:
                proc.send_signal(signal.SIGTERM)
                with anyio.fail_after(30):
                    _, stderr = await proc.communicate()
            assert proc.returncode == 0, stderr.decode()[-3000:]
            lease = await admin.get(LEASES, "tfjob-controller", namespace=CONTROLLER_NAMESPACE)
            assert lease["spec"].get("holderIdentity", "") == "", "the lease is released on shutdown"
            assert list(cluster.server.auth.forbidden_log) == []
        finally:
            await admin.close()


async def test_a_missing_crd_is_reported_once_with_the_fix_and_the_controller_starts_when_it_appears(
    sim_cluster: SimCluster,
):
    assert sim_cluster.kubeconfig_path
    client = await ApiClient.from_kubeconfig(sim_cluster.kubeconfig_path)
    try:
        async with ControllerProcess(
            "--kubeconfig", sim_cluster.kubeconfig_path, "--leader-election-namespace", "default"
        ) as controller:
            missing = "the TFJob CRD (tfjobs.kubeflow.org) is not installed"
            await eventually(lambda: controller.logged(missing), timeout=60, what="the missing CRD to be reported")
            [record] = controller.logged(missing)
            assert record["level"] == "error"
            assert "`kubectl apply -f manifests/crd/kubeflow.org_tfjobs.yaml`" in record["event"]
            assert "`tfjob-controller crd | kubectl apply -f -`" in record["event"]
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{controller.health_port}/readyz?verbose=1") as response:
                    assert response.status != 200  # the leader is not ready without its CRD

            await client.create(CRDS, yaml.safe_load(CRD_PATH.read_text()))
            await client.create(TFJOBS, tfjob("late", workers=2), namespace="default")

            async def pods_running() -> bool:
                pods = (
                    await client.list(PODS, namespace="default", label_selector="training.kubeflow.org/job-name=late")
                )["items"]
                return len([p for p in pods if p.get("status", {}).get("phase") == "Running"]) == 2

            await eventually(pods_running, timeout=60, what="the controller to start once the CRD exists")
            assert controller.logged("the TFJob CRD is installed; starting")
        assert len(controller.logged(missing)) == 1, "reported once, not on every poll"
        assert "404 page not found" not in controller.stderr
    finally:
        await client.close()


async def test_an_unknown_gang_scheduler_gets_one_line_whether_flag_or_environment():
    rc, _, err = await run_cli("run", "--gang-scheduler-name", "volcan")
    assert rc == 2 and only_line(err) == (
        "tfjob-controller run: error: argument --gang-scheduler-name: unknown gang scheduler 'volcan' (choose from "
        "volcano, scheduler-plugins, scheduler-plugins-scheduler) (see tfjob-controller run --help)"
    )
    rc, _, err = await run_cli("run", env={"TFJOB_CONTROLLER_GANG_SCHEDULER_NAME": "None"})  # upstream's quirk value
    assert rc == 2 and "environment variable TFJOB_CONTROLLER_GANG_SCHEDULER_NAME: unknown gang scheduler 'None'" in (
        only_line(err)
    )


def test_the_gang_scheduler_name_reaches_the_decision():
    from controller.cli import parse_args, run_options

    assert run_options(parse_args(["run"], {})).gang_scheduler_name == ""
    assert run_options(parse_args(["run"], {"TFJOB_CONTROLLER_GANG_SCHEDULER_NAME": ""})).gang_scheduler_name == ""
    env = {"TFJOB_CONTROLLER_GANG_SCHEDULER_NAME": "Volcano"}  # upstream compares case-blind
    assert run_options(parse_args(["run"], env)).gang_scheduler_name == "volcano"
    flag = ["run", "--gang-scheduler-name", "scheduler-plugins-scheduler"]
    assert run_options(parse_args(flag, env)).gang_scheduler_name == "scheduler-plugins-scheduler"


@pytest.mark.parametrize(
    "scheduler, crd",
    [("volcano", "podgroups.scheduling.volcano.sh"), ("scheduler-plugins", "podgroups.scheduling.x-k8s.io")],
)
async def test_gang_scheduling_without_the_pod_group_crd_exits_at_once_naming_it(
    sim_cluster: SimCluster, scheduler: str, crd: str
):
    assert sim_cluster.kubeconfig_path
    rc, _, err = await run_cli(
        "--log-format",
        "json",
        "run",
        "--kubeconfig",
        sim_cluster.kubeconfig_path,
        "--gang-scheduler-name",
        scheduler,
        "--metrics-addr",
        f"127.0.0.1:{free_port()}",
        "--health-addr",
        f"127.0.0.1:{free_port()}",
    )
    assert rc == 1
    installer = "Volcano" if scheduler == "volcano" else "scheduler-plugins (its PodGroup CRD)"
    message = f"PodGroup CRD {crd} is not installed: install {installer} or run without --gang-scheduler-name"
    assert last_line(err) == f"tfjob-controller run: {message}"
    logged = [json.loads(line) for line in err.strip().splitlines()[:-1]]
    assert [(r["level"], r["crd"]) for r in logged if r.get("event") == message] == [("error", crd)]


async def test_sim_limits_shrink_the_priority_levels_and_refuse_nonsense(tmp_path: Path):
    async with sim_process(
        tmp_path / "kc",
        "--max-requests-inflight",
        "2",
        "--max-mutating-requests-inflight",
        "1",
        "--request-timeout",
        "4",
    ) as url:
        async with aiohttp.ClientSession() as http:
            async with http.get(url + "/metrics") as response:
                metrics = await response.text()
    # 3 seats shared by nominalConcurrencyShares: ceil(3 x 100 / 245) for workload-low, 1 for the others
    assert 'apiserver_flowcontrol_nominal_limit_seats{priority_level="workload-low"} 2' in metrics
    assert 'apiserver_flowcontrol_nominal_limit_seats{priority_level="global-default"} 1' in metrics
    rc, _, err = await run_cli("sim", "--kubeconfig", str(tmp_path / "kc2"), "--max-requests-inflight", "0")
    assert rc == 2 and "argument --max-requests-inflight: must be at least 1, got 0" in only_line(err)
    rc, _, err = await run_cli("sim", "--kubeconfig", str(tmp_path / "kc2"), "--request-timeout", "-1")
    assert rc == 2 and "argument --request-timeout: must be a finite number > 0" in only_line(err)


def test_version_prints_the_installed_distributions_version():
    import subprocess
    from importlib import metadata

    done = subprocess.run([*CLI, "--version"], capture_output=True, text=True, env=clean_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"tfjob-controller {metadata.version('tfjob-controller')}\n"
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'\nversion = "{metadata.version("tfjob-controller")}"\n' in pyproject


def test_the_simulators_commands_come_from_its_entry_points_and_the_controller_names_none(capsys):
    from controller.cli import build_parser, load_extensions

    extensions = load_extensions()
    assert extensions.broken == {}
    assert set(extensions.commands) == {"sim", "demo"}
    assert build_parser(extensions).parse_args(["demo", "--time-scale", "2"]).time_scale == 2.0
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["demo"])  # without the extensions the parser has no such command
    assert exit_.value.code == 2
    assert "invalid choice: 'demo'" in capsys.readouterr().err
