"""`gpuctl top`: the GPUs at work, from Prometheus."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.options import Prometheus, Since
from gpuctl.cli.settings import settings
from gpuctl.util.output import emit, is_table, out


def top(
    ctx: typer.Context,
    prometheus: Prometheus = None,
    since: Since = "1h",
    nodegroup: Annotated[Optional[str], typer.Option("--nodegroup", metavar="NAME", help="Show this node group's GPUs only.")] = None,
    tenant: Annotated[Optional[str], typer.Option("--tenant", metavar="NAME", help="Show this tenant and the GPUs its pods use only.")] = None,
) -> None:
    """Show the GPUs at work, from Prometheus: per GPU and per tenant.

    Per node and GPU (and MIG instance): SM activity, utilisation, memory and the pods on it; per tenant: GPUs held
    against its quota, and how busy they were over --since. A GPU several pods share shows the GPU's figures, marked.

    Examples:
      gpuctl top
      gpuctl top --since 15m --nodegroup gpu
      gpuctl top --tenant team-a --prometheus http://localhost:9090 -o json
    """
    opts = settings(ctx)
    view = api.top(prometheus, since, nodegroup, tenant, opts.target)
    if is_table(opts.output):
        out(api.top_table(view) + "\n")
    else:
        emit(view, opts.output)
