"""`gpuctl advise`: what the GPU metrics of a window call for; changes nothing."""

from __future__ import annotations

import typer

from gpuctl import api
from gpuctl.cli.options import Prometheus, Since
from gpuctl.cli.settings import settings
from gpuctl.util.output import emit, is_table, out


def advise(ctx: typer.Context, prometheus: Prometheus = None, since: Since = "1h") -> None:
    """Recommend changes from the window's GPU metrics and the cluster's configuration; changes nothing.

    Each recommendation comes with the figures behind it and the command that applies it: share idle whole GPUs,
    ease saturated time-slicing, a MIG layout for the demand, lower unused tenant quotas.

    Examples:
      gpuctl advise
      gpuctl advise --since 7d -o yaml
    """
    opts = settings(ctx)
    result = api.advise(prometheus, since, opts.target)
    if is_table(opts.output):
        out(api.advice_text(result) + "\n")
    else:
        emit(result, opts.output)
