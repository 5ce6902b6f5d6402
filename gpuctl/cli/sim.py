"""`gpuctl sim install`: the local tools behind the sim provider."""

from __future__ import annotations

from dataclasses import asdict

import typer

from gpuctl.cli.settings import settings
from gpuctl.util.output import emit, info

app = typer.Typer(help="The local simulated GPU cluster's tools.", no_args_is_help=True)


@app.command()
def install(ctx: typer.Context) -> None:
    """Install pinned helm, kwok, kwokctl, etcd and Kubernetes binaries into the user cache."""
    from gpuctl.tools.installer import ensure_tools, tools_dir
    from gpuctl.tools.pins import SIM_TOOLS

    installed = ensure_tools(SIM_TOOLS, progress=info)
    info(f"all {len(installed)} tools ready in {tools_dir()}")
    emit([{**asdict(t), "path": str(t.path)} for t in installed], settings(ctx).output,
         ("name", "version", "source", "path"))
