"""`gpuctl sim install`: the local tools behind the sim provider."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import typer

from gpuctl.cli.settings import settings
from gpuctl.util.output import emit, info

if TYPE_CHECKING:
    from gpuctl import api as gpuctl
else:
    import gpuctl  # the public API: gpuctl.api loads at the first gpuctl.<name> (see gpuctl/cli/__init__.py)

app = typer.Typer(help="""The local simulated GPU cluster's tools.

Examples:
  gpuctl sim install
""", no_args_is_help=True)


@app.command()
def install(ctx: typer.Context) -> None:
    """Install pinned helm, kwok, kwokctl, etcd and Kubernetes binaries into the user cache.

    Examples:
      gpuctl sim install
      gpuctl sim install -o json
    """
    installed, where = gpuctl.install_sim_tools(progress=info)
    info(f"all {len(installed)} tools ready in {where}")
    emit([{**asdict(t), "path": str(t.path)} for t in installed], settings(ctx).output,
         ("name", "version", "source", "path"))
