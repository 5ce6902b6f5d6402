"""`gpuctl status`: the GPU nodes and what they offer."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Optional

import typer

from gpuctl import api
from gpuctl.cli.settings import settings
from gpuctl.util.output import TABLE_WIDTH, emit, is_table, section
from gpuctl.util.words import plural

# 80 columns for the common case; -o wide adds the rest. DRA mode: the driver's devices instead of the device
# plugin's sharing and allocatable. Where the DRA driver serves some node groups and the device plugin the others
# (a group's `dra: true`), both: each row fills its own agent's cells, `-` in the other's.
COLUMNS = ("node", "nodegroup", "gpu", "gpus", "sharing", "replicas", "allocatable")
WIDE = ("product", "mig_config", "mig_state", "device_plugin", "taints")
DRA_COLUMNS = ("node", "nodegroup", "gpu", "gpus", "devices", "allocated", "free", "kubelet_plugin")
DRA_WIDE = ("product", "mig_config", "mig_state", "taints")
MIXED_COLUMNS = ("node", "nodegroup", "gpus", "served_by", "allocatable", "devices", "free")
MIXED_WIDE = ("gpu", "allocated", "device_plugin", "kubelet_plugin", "sharing", "replicas", "product", "mig_config",
              "mig_state", "taints")


def status(
    ctx: typer.Context,
    nodegroup: Annotated[Optional[str], typer.Option("--nodegroup", metavar="NAME", help="Show this node group only.")] = None,
) -> None:
    """Show the GPU nodes: node group, product, sharing, MIG config and state, allocatable GPUs and taints.

    GPUs the device plugin reports unhealthy are marked `!` (GPUS `3/4!`: 3 of 4 healthy) and listed below the
    table; in -o json, `unhealthy` per resource.

    In DRA mode: the DRA driver's devices per node, allocated and free, instead of sharing and allocatable. Where
    it serves some node groups only (a group's dra: true), column SERVED_BY says which agent serves each node and
    the row shows that agent's figures; a line below the table counts both.

    Examples:
      gpuctl status
      gpuctl status --nodegroup gpu -o yaml
      gpuctl --context demo status
    """
    opts = settings(ctx)
    rows = api.gpu_status(nodegroup, opts.target)
    operator = next((r["gpu_operator"] for r in rows if r.get("gpu_operator")), None)
    nodes = [{k: v for k, v in r.items() if k != "gpu_operator"} for r in rows]  # the operator once, not per node
    summary = api.status_summary(nodes)
    kind = "mixed" if summary["dra"]["nodes"] and summary["device_plugin"]["nodes"] else \
        "dra" if summary["dra"]["nodes"] else "device-plugin"
    columns, wide = {"mixed": (MIXED_COLUMNS, MIXED_WIDE), "dra": (DRA_COLUMNS, DRA_WIDE)}.get(kind, (COLUMNS, WIDE))
    emit({"gpuOperator": operator, "nodes": nodes, "summary": summary}, opts.output, columns, wide,
         rows=table_rows(nodes, kind == "mixed"))
    if is_table(opts.output) and (unhealthy := unhealthy_section(nodes)) is not None:
        section(unhealthy)
    if is_table(opts.output) and kind == "mixed":
        section(summary_line(summary))
    if operator is not None and is_table(opts.output):
        section(operator["summary"])


def table_rows(nodes: Sequence[Mapping[str, Any]], mixed: bool) -> list[dict[str, Any]]:
    """The table's cells: the GPUS mark; in a mixed cluster a DRA row's device-plugin cells `-` (the device plugin
    is off there by design: not missing)."""
    rows = [{**r, "gpus": gpus_cell(r)} for r in nodes]
    return [{**r, "allocatable": None, "device_plugin": None} if mixed and r.get("served_by") == "dra" else r
            for r in rows]


def summary_line(summary: Mapping[str, Any]) -> str:
    """Both kinds counted, wrapped to the table's width: `served: 1 node by the device plugin (2 nvidia.com/gpu
    allocatable), 2 nodes by DRA (4 devices: 2 allocated, 2 free)`."""
    plugin, dra = summary["device_plugin"], summary["dra"]
    allocatable = ", ".join(f"{n} {k}" for k, n in plugin["allocatable"].items()) or "no GPU"
    line = (f"served: {plural(plugin['nodes'], 'node')} by the device plugin ({allocatable} allocatable), "
            f"{plural(dra['nodes'], 'node')} by DRA ({plural(dra['devices'], 'device')}: {dra['allocated']} "
            f"allocated, {dra['free']} free)")
    return "\n".join(textwrap.wrap(line, TABLE_WIDTH, subsequent_indent="  "))


def gpus_cell(row: Mapping[str, Any]) -> str:
    """The GPUS cell: `4`; `3/4!` (healthy of all) where whole GPUs are unhealthy; `4!` where only MIG devices are
    (a MIG device is not a whole GPU). As wide as the header up to 9 GPUs: the mark costs the table no column."""
    if not row.get("unhealthy"):
        return str(row["gpus"])
    broken = row.get("unhealthy_gpus") or 0
    return f"{max(row['gpus'] - broken, 0)}/{row['gpus']}!" if broken else f"{row['gpus']}!"


def unhealthy_section(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The nodes with unhealthy devices, one line each (None: none has any): how many of each resource, as the
    kubelet counts them (its capacity less its allocatable), and the whole GPUs among them."""
    lines = [f"  {r['node']}: " + ", ".join(f"{n} of {r['allocatable'].get(k, 0) + n} {k}"
                                            for k, n in r["unhealthy"].items())
             + (f" ({plural(r['unhealthy_gpus'], 'GPU')})" if r.get("unhealthy_gpus") else "")
             # the kubelet marks every device of a plugin that went away unhealthy: not a GPU that failed
             + ("; no ready device plugin: the kubelet marks all of a departed plugin's devices"
                if r.get("device_plugin") not in (None, "ready") else "")
             for r in rows if r.get("unhealthy")]
    if not lines:
        return None
    heading = ("! unhealthy: the device plugin reports them failed, the kubelet keeps them in capacity, not in "
               "allocatable; 'gpuctl doctor' says why")
    return "\n".join([*textwrap.wrap(heading, TABLE_WIDTH, subsequent_indent="  "),
                      *(w for line in lines for w in textwrap.wrap(line, TABLE_WIDTH, initial_indent="",
                                                                   subsequent_indent="    "))])
