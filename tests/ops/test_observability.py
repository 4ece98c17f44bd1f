"""What SREs see: the metrics a running controller exports, checked by Prometheus' own promtool.

- the alerting rules load in Prometheus (``promtool check rules``);
- the exposition of a controller that has reconciled a job passes ``promtool check metrics``
  (naming and type conventions: counters end in ``_total``, units in names, HELP present);
- every metric the Grafana dashboard and the alerts query is really exported (a dashboard panel
  on a misspelt metric shows "No data" exactly when someone needs it).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import anyio
import pytest
from prometheus_client import generate_latest

from controller.tfjob.executor import TFJOBS
from tests.e2e.conftest import eventually, is_true, start_operator, tfjob
from controller.ops.catalogue import BY_NAME

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is required (Debian package 'prometheus'; .ci/run installs it)", pytrace=False)
    return found


async def _run(*argv: str, stdin: bytes | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    with anyio.fail_after(60):
        out, _ = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_alerting_rules_load_in_prometheus(promtool: str) -> None:
    rc, out = await _run(promtool, "check", "rules", str(ROOT / "grafana" / "alerts.yaml"))
    assert rc == 0, out
    assert "SUCCESS" in out


async def test_exported_metrics_pass_promtool_and_cover_the_dashboard(promtool: str, sim_cluster) -> None:
    operator = await start_operator(sim_cluster)
    try:
        await operator.client.create(TFJOBS, tfjob("observed", workers=2), namespace="default")
        await eventually(lambda: operator.job("observed"), what="job visible")

        async def running() -> bool:
            return is_true(await operator.job("observed"), "Running")

        await eventually(running, what="job Running")
        exposition = generate_latest(operator.registry)
    finally:
        await operator.stop()

    rc, out = await _run(promtool, "check", "metrics", stdin=exposition)
    assert rc == 0, out

    exported = set()
    for line in exposition.decode().splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            exported.add(f"{name}_total" if kind == "counter" and not name.endswith("_total") else name)
    # Leader election, build info and the process collectors belong to `tfjob-controller run` (the
    # Prometheus test checks the catalogue against a live scrape of it).
    app_only = {"leader_election_master_status", "tfjob_controller_build_info"} | {n for n in BY_NAME if n.startswith("process_")}
    missing = set(BY_NAME) - exported - app_only
    assert not missing, f"dashboard/alerts query metrics the controller does not export: {sorted(missing)}"
