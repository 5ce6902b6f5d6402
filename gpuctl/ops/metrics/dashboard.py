"""The Grafana dashboard of a platform, built with Grafana's own SDK (grafana-foundation-sdk, the Grafana 11.6
schema): every query is one of gpuctl.model.promql's builders, the ones `gpuctl top` and `gpuctl advise` run,
with the window a dashboard variable (`$window`, 1h by default as `--since`).

Rows: all GPUs (exactly top's queries), one per GPU model the node groups use (dcgm-exporter's series name the
GPU model, not the node group: node groups of one model share a row, which names them all), one per tenant
(its namespace, whether the scrape kept `namespace` or renamed it `exported_namespace`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpuctl.model import promql
from gpuctl.model.catalog import nvml_name
from gpuctl.util.errors import ToolError
from gpuctl.util.words import noun, plural

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuctl.model.spec import GroupPlan, PlatformSpec

WINDOW_VARIABLE = "$window"
WINDOWS = ("15m", "1h", "6h", "24h", "7d")
DATASOURCE = "${datasource}"
DEVICE_LEGEND = "{{Hostname}}{{hostname}} GPU {{gpu}} {{GPU_I_PROFILE}}"
FILE = "gpuctl-dashboard.json"

# (title, builder, unit, legend); each device panel and each tenant panel of a row
DEVICE_PANELS: tuple[tuple[str, Callable[[promql.Where], str], str, str], ...] = (
    ("SM activity", promql.sm_active_now, "percent", DEVICE_LEGEND),
    ("GPU utilisation (not for MIG instances)", promql.gpu_util_now, "percent", DEVICE_LEGEND),
    ("Framebuffer used", promql.fb_used_now, "mbytes", DEVICE_LEGEND),
    ("Framebuffer total", promql.fb_total_now, "mbytes", DEVICE_LEGEND),
    ("Last XID error (0: none)", promql.xid_now, "none", DEVICE_LEGEND),
    ("SM activity, average over ${window:text}", promql.sm_active_avg, "percent", DEVICE_LEGEND),
    ("SM activity, peak over ${window:text}", promql.sm_active_peak, "percent", DEVICE_LEGEND),
    ("GPU utilisation, average over ${window:text}", promql.gpu_util_avg, "percent", DEVICE_LEGEND),
    ("GPU utilisation, peak over ${window:text}", promql.gpu_util_peak, "percent", DEVICE_LEGEND),
    ("Framebuffer used, peak over ${window:text}", promql.fb_used_peak, "mbytes", DEVICE_LEGEND),
    ("Share of ${window:text} with GPU series", promql.coverage, "percentunit", "coverage"),
)
POD_PANELS: tuple[tuple[str, Callable[[promql.Where], str]], ...] = (
    ("Pods on each GPU now (several: the figures are the GPU's, not a pod's)", promql.pods_now),
    ("Pods on each GPU over ${window:text}", promql.pods_over),
)
TENANT_PANELS: tuple[tuple[str, Callable[[promql.Where], str], str, str], ...] = (
    ("GPUs held, average over ${window:text}", promql.tenant_allocated_avg, "none", "{{namespace}} {{GPU_I_PROFILE}}"),
    ("GPUs held, peak over ${window:text}", promql.tenant_allocated_peak, "none", "{{namespace}} {{GPU_I_PROFILE}}"),
    ("Busy GPU-equivalents, average over ${window:text}", promql.tenant_busy_avg, "none", "{{namespace}}"),
)


def _sdk() -> Any:
    """grafana-foundation-sdk's modules (Python 3.11 on), or a clear error."""
    try:
        from grafana_foundation_sdk.builders import common, dashboard, prometheus, table, timeseries
        from grafana_foundation_sdk.cog.encoder import JSONEncoder
        from grafana_foundation_sdk.models import common as common_model
        from grafana_foundation_sdk.models import dashboard as model
        from grafana_foundation_sdk.models import prometheus as prometheus_model
    except ImportError:
        raise ToolError("the Grafana dashboard needs grafana-foundation-sdk, which needs Python 3.11 or later",
                        "run gpuctl on Python 3.11+") from None
    import types

    return types.SimpleNamespace(common=common, dashboard=dashboard, prometheus=prometheus, table=table,
                                 timeseries=timeseries, JSONEncoder=JSONEncoder, model=model, common_model=common_model,
                                 table_format=prometheus_model.PromQueryFormat.TABLE)


def model_rows(groups: tuple[GroupPlan, ...]) -> dict[str, list[str]]:
    """dcgm-exporter's modelName -> the node groups of that GPU model, each with its sharing."""
    rows: dict[str, list[str]] = {}
    for group in groups:
        sharing = (f"MIG {group.mig.name}" if group.mig is not None else
                   f"{group.sharing.strategy} x{group.sharing.replicas}" if group.sharing.strategy != "none" else
                   "whole GPUs")
        rows.setdefault(nvml_name(group.spec.gpu), []).append(f"{group.spec.name} ({sharing})")
    return rows


def panel_queries(where: promql.Where) -> list[str]:
    """The queries of one row of device panels, in order (tests compare them with top's)."""
    return [build(where) for _, build, _, _ in DEVICE_PANELS] + [build(where) for _, build in POD_PANELS]


def build_dashboard(spec: PlatformSpec) -> dict[str, Any]:
    """The dashboard of `spec` as Grafana's JSON model."""
    sdk = _sdk()
    ref = sdk.model.DataSourceRef(type_val="prometheus", uid=DATASOURCE)
    board = (sdk.dashboard.Dashboard(f"gpuctl: GPUs of {spec.name}")
             .uid(f"gpuctl-{spec.name}"[:40])
             .tags(["gpuctl", "gpu", "dcgm"])
             .description("GPU activity per node group and tenant, from dcgm-exporter through Prometheus: the "
                          "queries of 'gpuctl top' and 'gpuctl advise' (gpuctl.model.promql)")
             .refresh("1m")
             .time("now-6h", "now")
             .with_variable(sdk.dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
             .with_variable(sdk.dashboard.CustomVariable("window").label("window")
                            .description("The window averages and peaks are taken over, as gpuctl top --since: "
                                         "each value is the subquery range window:step")
                            .values(", ".join(f"{w} : {promql.window_range(w)}" for w in WINDOWS))
                            .current(sdk.model.VariableOption(selected=True, text=promql.DEFAULT_WINDOW,
                                                              value=promql.window_range(promql.DEFAULT_WINDOW)))))
    _device_row(sdk, board, ref, "All GPUs (the queries of gpuctl top)", promql.Where(window=WINDOW_VARIABLE))
    for model, groups in model_rows(spec.every_group).items():
        _device_row(sdk, board, ref, f"{model}: {noun(len(groups), 'node group')} {', '.join(groups)}",
                    promql.Where(window=WINDOW_VARIABLE, model=model))
    for tenant in spec.tenants:
        where = promql.Where(window=WINDOW_VARIABLE, namespace=tenant.name)
        board.with_row(sdk.dashboard.Row(f"tenant {tenant.name} (quota: {plural(tenant.gpus, 'GPU')}"
                                         + "".join(f", {n} x {p}" for p, n in sorted(tenant.mig.items())) + ")"))
        for title, build, unit, legend in TENANT_PANELS:
            board.with_panel(_timeseries(sdk, ref, title, build(where), unit, legend, width=8))
    doc: dict[str, Any] = json.loads(sdk.JSONEncoder(sort_keys=True, indent=2).encode(board.build()))
    for number, panel in enumerate(doc["panels"], 1):  # the SDK numbers none: Grafana keys panels by id
        panel["id"] = number
    return doc


def _device_row(sdk: Any, board: Any, ref: Any, title: str, where: promql.Where) -> None:
    board.with_row(sdk.dashboard.Row(title))
    for title_, build, unit, legend in DEVICE_PANELS:
        board.with_panel(_timeseries(sdk, ref, title_, build(where), unit, legend, width=6))
    for title_, build in POD_PANELS:
        query = sdk.prometheus.Dataquery().expr(build(where)).instant().format(sdk.table_format).ref_id("A")
        board.with_panel(sdk.table.Panel().title(title_).datasource(ref).with_target(query).height(8).span(12))


def _timeseries(sdk: Any, ref: Any, title: str, expr: str, unit: str, legend: str, width: int) -> Any:
    query = sdk.prometheus.Dataquery().expr(expr).legend_format(legend).ref_id("A")
    return (sdk.timeseries.Panel().title(title).datasource(ref).unit(unit).min(0).height(8).span(width)
            .legend(sdk.common.VizLegendOptions().show_legend(True).display_mode(sdk.common_model.LegendDisplayMode.LIST)
                    .placement(sdk.common_model.LegendPlacement.BOTTOM))
            .with_target(query))


def dashboard_text(spec: PlatformSpec) -> str:
    return json.dumps(build_dashboard(spec), indent=2, sort_keys=True) + "\n"
