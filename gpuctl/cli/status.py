"""`gpuctl status`: the GPU nodes and what they offer."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl.cli.settings import settings
from gpuctl.util.output import emit


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
    from gpuctl import api
    from gpuctl.model.naming import check_name
    from gpuctl.util.output import info

    if nodegroup is not None:
        check_name(nodegroup, "--nodegroup")
    opts = settings(ctx)
    rows = api.gpu_status(nodegroup, opts.kubeconfig, opts.context)
    emit(rows, opts.output, api.status_columns(rows))
    operator = next((r["gpu_operator"] for r in rows if r["gpu_operator"]), None)
    if operator is not None and opts.output == "table":  # in JSON and YAML: each row's gpu_operator
        info(operator["summary"])
