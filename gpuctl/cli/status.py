"""`gpuctl status`: the GPU nodes and what they offer."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.settings import settings
from gpuctl.util.output import emit, is_table, section

# 80 columns for the common case; -o wide adds the rest. DRA mode: the driver's devices instead of the device
# plugin's sharing and allocatable.
COLUMNS = ("node", "nodegroup", "gpu", "gpus", "sharing", "replicas", "allocatable")
WIDE = ("product", "mig_config", "mig_state", "device_plugin", "taints")
DRA_COLUMNS = ("node", "nodegroup", "gpu", "gpus", "devices", "allocated", "free", "kubelet_plugin")
DRA_WIDE = ("product", "mig_config", "mig_state", "taints")


def status(
    ctx: typer.Context,
    nodegroup: Annotated[Optional[str], typer.Option("--nodegroup", metavar="NAME", help="Show this node group only.")] = None,
) -> None:
    """Show the GPU nodes: node group, product, sharing, MIG config and state, allocatable GPUs and taints.

    In DRA mode: the DRA driver's devices per node, allocated and free, instead of sharing and allocatable.

    Examples:
      gpuctl status
      gpuctl status --nodegroup gpu -o yaml
      gpuctl --context demo status
    """
    opts = settings(ctx)
    rows = api.gpu_status(nodegroup, opts.target)
    operator = next((r["gpu_operator"] for r in rows if r.get("gpu_operator")), None)
    nodes = [{k: v for k, v in r.items() if k != "gpu_operator"} for r in rows]  # the operator once, not per node
    dra = any("devices" in r for r in rows)
    emit({"gpuOperator": operator, "nodes": nodes}, opts.output, DRA_COLUMNS if dra else COLUMNS,
         DRA_WIDE if dra else WIDE, rows=nodes)
    if operator is not None and is_table(opts.output):
        section(operator["summary"])
