"""Draw the two Grafana dashboards from a real run's Prometheus data, for the README.

Runs what tests/ops/test_prometheus.py runs (a simulated cluster, ``tfjob-controller run``, a foreign exporter
with same-named metrics, a real Prometheus scraping both every second, and the scenario: three failovers,
a scale-up and a scale-down, a failing and a succeeding job, two throttled writes), then evaluates every panel's
queries exactly as Grafana would (template variables substituted: this controller's job, all namespaces and
instances) and plots them with matplotlib, one PNG per dashboard, into docs/images/.

    .venv/bin/pip install -e '.[test,docs]'
    .venv/bin/python benchmarks/render_dashboards.py
"""

from __future__ import annotations

import asyncio
import math
import re
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from benchmarks.prometheus_scenario import (  # noqa: E402
    FOREIGN_JOB,
    SCRAPE_JOB,
    ControllerProcess,
    ForeignExporter,
    Prometheus,
    install,
    play_scenario,
    scrape_targets,
    substitute,
)
from controller.runtime.client import ApiClient  # noqa: E402
from generators.dashboards import DASHBOARDS, Dashboard, Panel  # noqa: E402
from tfjob_sim.cluster import SimCluster, SimConfig  # noqa: E402

OUT = REPO / "docs" / "images"
RATE_WINDOW = "10s"  # Grafana's $__rate_interval for a 1 s scrape interval and a short range
AFTERGLOW = 15.0  # seconds of quiet after the scenario, so the graphs show it settle


def legend(template: str, labels: dict[str, str]) -> str:
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template).strip()
    return text or ",".join(f"{k}={v}" for k, v in labels.items() if k != "__name__") or "value"


def _unit_formatter(unit: str) -> FuncFormatter:
    def fmt(value: float, _pos: object = None) -> str:
        if unit == "bytes":
            for suffix in ("B", "KiB", "MiB", "GiB"):
                if abs(value) < 1024:
                    return f"{value:.1f} {suffix}"
                value /= 1024
            return f"{value:.0f} TiB"
        if unit == "s":
            return f"{value:.3g} s"
        if unit in ("ops", "reqps"):
            return f"{value:.3g}/s"
        return f"{value:.3g}"

    return FuncFormatter(fmt)


async def _draw_panel(ax: plt.Axes, prom: Prometheus, panel: Panel, start: float, end: float) -> None:
    range_window = f"{math.ceil(end - start)}s"
    ax.set_title(panel.title, fontsize=9, loc="left", fontweight="bold")
    formatter = _unit_formatter(panel.unit)
    if panel.kind == "timeseries":
        lines = 0
        for query in panel.queries:
            for series in await prom.query_range(substitute(query.expr, RATE_WINDOW, range_window), start, end, 1.0):
                times = [float(t) - start for t, _ in series["values"]]
                points = [float(v) for _, v in series["values"]]
                ax.plot(times, points, linewidth=1.2, label=legend(query.legend, series["metric"]))
                lines += 1
        ax.yaxis.set_major_formatter(formatter)
        ax.set_xlabel("seconds into the run", fontsize=7)
        ax.grid(alpha=0.3)
        if lines:
            ax.legend(fontsize=6, loc="upper left", ncol=2 if lines > 4 else 1)
        else:
            ax.text(0.5, 0.5, "No data", ha="center", va="center", transform=ax.transAxes)
    elif panel.kind == "table":
        # One row per series, the panel's columns being series labels (what Grafana's table shows).
        cells = [
            [series["metric"].get(column, "") for column in panel.columns]
            for query in panel.queries
            for series in await prom.query(substitute(query.expr, RATE_WINDOW, range_window), at=end)
        ]
        ax.axis("off")
        if cells:
            shown = ax.table(cellText=sorted(cells), colLabels=list(panel.columns), loc="upper left", cellLoc="left")
            shown.auto_set_font_size(False)
            shown.set_fontsize(7)
        else:
            ax.text(0.5, 0.5, "No data", ha="center", va="center", transform=ax.transAxes)
    else:
        bars: list[tuple[str, float]] = []
        for query in panel.queries:
            for series in await prom.query(substitute(query.expr, RATE_WINDOW, range_window), at=end):
                bars.append((legend(query.legend, series["metric"]), float(series["value"][1])))
        bars.sort(key=lambda item: item[0])
        names = [name for name, _ in bars]
        heights = [0.0 if math.isnan(v) else v for _, v in bars]
        ax.barh(names, heights, color="#3274d9")
        for y, value in enumerate(heights):
            ax.text(value, y, f" {formatter(value)}", va="center", fontsize=7)
        ax.xaxis.set_major_formatter(formatter)
        ax.tick_params(axis="y", labelsize=7)
        ax.invert_yaxis()
        ax.margins(x=0.25)
    ax.tick_params(axis="both", labelsize=7)
    ax.text(
        0.0,
        {"timeseries": -0.32, "table": 0.0}.get(panel.kind, -0.2),
        "\n".join(textwrap.wrap(panel.description, 75)),
        transform=ax.transAxes,
        fontsize=6,
        va="top",
        color="#555555",
    )


async def render(dashboard: Dashboard, prom: Prometheus, start: float, end: float) -> Path:
    panels = dashboard.panels()
    columns = 3
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(18, 4.3 * rows))
    flat = list(axes.flat)
    for ax, panel in zip(flat[: len(panels)], panels, strict=True):
        await _draw_panel(ax, prom, panel, start, end)
    for ax in flat[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        f"{dashboard.title}  (job={SCRAPE_JOB}, all namespaces; real Prometheus data from "
        f"benchmarks/render_dashboards.py; a foreign {FOREIGN_JOB} exports the same names)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.98), h_pad=4.5)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{Path(dashboard.file).stem}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = SimCluster(SimConfig(nodes=3, time_scale=0.01, kubeconfig_path=str(Path(tmp) / "kubeconfig")))
        await cluster.start()
        client = await ApiClient.from_kubeconfig(str(Path(tmp) / "kubeconfig"))
        await install(client)
        foreign = ForeignExporter()
        controller = ControllerProcess(str(Path(tmp) / "kubeconfig"))
        await controller.start()
        try:
            async with Prometheus(scrape_targets(controller, foreign)) as prom:
                start = time.time()
                await prom.wait_for_targets()
                expected = await play_scenario(cluster, client)
                await asyncio.sleep(AFTERGLOW)  # a script, not a test: let the run settle on the graphs
                end = time.time()
                for dashboard in DASHBOARDS:
                    print(f"wrote {(await render(dashboard, prom, start, end)).relative_to(REPO)}")
                print(
                    f"scenario: {expected.failovers} failovers, {expected.scaled_down} pods scaled down, "
                    f"{len(expected.jobs_by_state)} jobs, {end - start:.0f} s"
                )
        finally:
            await client.close()
            await controller.stop()
            foreign.stop()
            await cluster.stop()


if __name__ == "__main__":
    asyncio.run(main())
