"""`gpuctl cluster create|list|delete`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from gpuctl.cli.nodegroup import COLUMNS as NODEGROUP_COLUMNS
from gpuctl.cli.options import Cloud, Gpu, GpusPerNode, Nodes, Yes
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.output import emit, info
from gpuctl.steps import StepResult

app = typer.Typer(help="Create, list and delete GPU clusters.", no_args_is_help=True)

Name = Annotated[str, typer.Option("--name", help="Cluster name.")]


def print_step(result: StepResult) -> None:
    info(f"{result.name:<28} {result.outcome.value:<10} {result.seconds:6.1f}s")


@app.command()
def create(
    ctx: typer.Context,
    gpu: Gpu,
    cloud: Cloud = "sim",
    name: Name = "gpuctl",
    nodes: Nodes = 1,
    gpus_per_node: GpusPerNode = None,
    nodegroup_name: Annotated[str, typer.Option("--nodegroup-name", help="Name of the GPU node group.")] = "gpu",
) -> None:
    """Create (or converge) a cluster with a GPU node group and write its kubeconfig."""
    from gpuctl import api
    from gpuctl.naming import check_name
    from gpuctl.providers import check_cloud
    from gpuctl.providers.base import Change
    from gpuctl.spec import ClusterSpec, node_group_from_flags

    opts = settings(ctx)
    check_cloud(cloud)
    check_name(name, "--name")
    group = node_group_from_flags(nodegroup_name, gpu, nodes, gpus_per_node, name_field="--nodegroup-name")
    spec = ClusterSpec(name=name, cloud=cloud, node_groups=(group,))

    steps, kubeconfig = api.create_cluster(spec, opts.kubeconfig, report=print_step)
    changed = any(s.outcome is not Change.NO_CHANGE for s in steps)
    info(f"cluster {name!r} is ready" + ("" if changed else " (no change)") + f"; kubeconfig: {kubeconfig}")
    groups = [asdict(g) for g in api.list_node_groups(cloud, name)]
    if opts.output == "table":
        emit(groups, opts.output, NODEGROUP_COLUMNS)
    else:
        emit({"cluster": name, "cloud": cloud, "changed": changed, "kubeconfig": str(kubeconfig),
              "steps": [s.as_dict() for s in steps], "nodeGroups": groups}, opts.output)


@app.command("list")
def list_(ctx: typer.Context, cloud: Cloud = "sim") -> None:
    """List clusters of a provider."""
    from gpuctl import api
    from gpuctl.providers import check_cloud

    check_cloud(cloud)
    rows = [asdict(c) for c in api.list_clusters(cloud)]
    emit(rows, settings(ctx).output, ("name", "cloud", "status", "endpoint", "kubernetes_version"))


@app.command()
def delete(ctx: typer.Context, name: Name, cloud: Cloud = "sim", yes: Yes = False) -> None:
    """Delete a cluster and everything gpuctl made for it, and drop its kubeconfig context."""
    from gpuctl import api
    from gpuctl.providers import check_cloud

    check_cloud(cloud)
    confirm_or_refuse(yes, f"Delete {cloud} cluster {name!r}?")
    change = api.delete_cluster(cloud, name, settings(ctx).kubeconfig)
    info(f"cluster {name!r} {change.value}")
