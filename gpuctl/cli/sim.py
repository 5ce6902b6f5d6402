"""`gpuctl sim install`: the local tools behind the sim provider."""

from __future__ import annotations

from dataclasses import asdict

import typer

from gpuctl import api
from gpuctl.cli.settings import settings
from gpuctl.util.output import emit, info

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
    installed, where = api.install_sim_tools(progress=info)
    info(f"all {len(installed)} tools ready in {where}")
    emit([{**asdict(t), "path": str(t.path)} for t in installed], settings(ctx).output,
         ("name", "version", "source", "path"))
