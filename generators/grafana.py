"""Grafana dashboard JSON from :mod:`generators.dashboards`, built with the Grafana Foundation SDK's typed builders.

Why the SDK and not hand-assembled dicts: every option, enum and unit is typed after Grafana's own dashboard
schema, so mypy rejects a misspelt option or a value Grafana does not know, and the JSON has Grafana's shape
(the SDK's serialisation) instead of one guessed from exported dashboards. What the SDK leaves implicit and
Grafana would fill in differently (thresholds, a panel's legend and tooltip, the variables' refresh and sort)
is set here explicitly.

Layout: each row is followed by its panels, all 8 grid units high and as wide as the panel asks, placed left to
right by the SDK and wrapped when a line of 24 is full. An open row's panels follow it at the top level: a row
holds panels of its own only when collapsed (Grafana's rule; panels inside an open row are not shown).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions, VizTooltipOptions
from grafana_foundation_sdk.builders.dashboard import Dashboard as DashboardBuilder
from grafana_foundation_sdk.builders.dashboard import DatasourceVariable, QueryVariable, ThresholdsConfig
from grafana_foundation_sdk.builders.dashboard import Row as RowBuilder
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    GraphDrawStyle,
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    TooltipDisplayMode,
    VisibilityMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    DataTransformerConfig,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from generators.dashboards import VARIABLES, Dashboard, Panel, Variable
from generators.promql import SCRAPE_JOB

# Every panel and variable queries the Prometheus chosen in the dashboard's data source variable.
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
PANEL_HEIGHT = 8
GRID_WIDTH = 24

PanelBuilder = timeseries.Panel | stat.Panel | bargauge.Panel | table.Panel


def _query(panel: Panel, index: int) -> Dataquery:
    query = panel.queries[index]
    target = Dataquery().ref_id(chr(ord("A") + index)).expr(query.expr)
    if query.legend:
        target = target.legend_format(query.legend)
    if panel.kind == "table":
        target = target.format(PromQueryFormat.TABLE)
    return target.instant() if panel.instant else target.range()


def _thresholds(panel: Panel) -> ThresholdsConfig:
    return (
        ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=step.value, color=step.color) for step in panel.thresholds])
    )


def _reduce_to_last() -> ReduceDataOptions:
    return ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)


def _table_columns(columns: tuple[str, ...]) -> list[DataTransformerConfig]:
    """Keep only ``columns`` of an instant table query (its time, value and the other labels go), in that order."""
    return [
        DataTransformerConfig(id_val="filterFieldsByName", options={"include": {"names": list(columns)}}),
        DataTransformerConfig(
            id_val="organize",
            options={
                "indexByName": {name: i for i, name in enumerate(columns)},
                "excludeByName": {},
                "renameByName": {},
            },
        ),
    ]


def _panel(panel: Panel, panel_id: int) -> PanelBuilder:
    builder: PanelBuilder
    if panel.kind == "timeseries":
        builder = (
            timeseries.Panel()
            .legend(
                VizLegendOptions()
                .show_legend(True)
                .display_mode(LegendDisplayMode.TABLE)
                .placement(LegendPlacement.BOTTOM)
                .calcs(["max", "lastNotNull"])
            )
            .tooltip(VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING))
            .draw_style(GraphDrawStyle.LINE)
            .line_width(1)
            .fill_opacity(10)
            .show_points(VisibilityMode.NEVER)
        )
    elif panel.kind == "stat":
        builder = stat.Panel().reduce_options(_reduce_to_last()).orientation(VizOrientation.HORIZONTAL)
    elif panel.kind == "bargauge":
        builder = bargauge.Panel().reduce_options(_reduce_to_last()).orientation(VizOrientation.HORIZONTAL)
    else:
        if not panel.columns:
            raise ValueError(f"table panel {panel.title!r} names no columns")
        builder = table.Panel().show_header(True).transformations(_table_columns(panel.columns))
    builder = (
        builder.id(panel_id)
        .title(panel.title)
        .description(panel.description)
        .datasource(DATASOURCE)
        .height(PANEL_HEIGHT)
        .span(panel.width)
        .unit(panel.unit)
        .thresholds(_thresholds(panel))
    )
    for index in range(len(panel.queries)):
        builder = builder.with_target(_query(panel, index))
    return builder


def _variable(variable: Variable) -> QueryVariable:
    builder = (
        QueryVariable(variable.name)
        .label(variable.label)
        .description(variable.description)
        .datasource(DATASOURCE)
        .query({"query": variable.query, "refId": variable.name})
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .regex("")
        .options([])
        .multi(variable.multi)
        .include_all(variable.multi)
    )
    if variable.multi:
        # ".*" also matches a missing label (a plain Prometheus attaches no `namespace`).
        return builder.all_value(".*").current(VariableOption(selected=True, text=["All"], value=["$__all"]))
    return builder.current(VariableOption(selected=True, text=SCRAPE_JOB, value=SCRAPE_JOB))


def dashboard_builder(dashboard: Dashboard) -> DashboardBuilder:
    builder = (
        DashboardBuilder(dashboard.title)
        .uid(dashboard.uid)
        .description(dashboard.description)
        .tags(list(dashboard.tags))
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("")
        .version(1)
        .with_variable(DatasourceVariable("datasource").label("Data source").type("prometheus"))
    )
    for name in dashboard.variables:
        builder = builder.with_variable(_variable(VARIABLES[name]))
    next_id = 1
    for row in dashboard.rows:
        builder = builder.with_row(RowBuilder(row.title).id(next_id).collapsed(False))
        next_id += 1
        for panel in row.panels:
            builder = builder.with_panel(_panel(panel, next_id))
            next_id += 1
    return builder


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana imports it. Raises ValueError if a panel would stick out of the grid (the SDK
    wraps a line only once it is full, so widths that do not add up to 24 would overflow silently)."""
    document: dict[str, Any] = json.loads(JSONEncoder().encode(dashboard_builder(dashboard).build()))
    for panel in document["panels"]:
        grid = panel["gridPos"]
        if grid["x"] + grid["w"] > GRID_WIDTH:
            raise ValueError(f"{dashboard.uid}: panel {panel['title']!r} sticks out of the grid: {grid}")
    return document


def dashboard_text(dashboard: Dashboard) -> str:
    """The committed file's content."""
    return json.dumps(dashboard_json(dashboard), indent=2) + "\n"
