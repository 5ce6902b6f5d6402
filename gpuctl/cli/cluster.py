"""`gpuctl cluster create|list|delete`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

import typer

from gpuctl.cli.nodegroup import COLUMNS as NODEGROUP_COLUMNS
from gpuctl.cli.options import Cloud, Gpu, GpusPerNode, Nodes, Yes
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.output import emit, info
from gpuctl.steps import StepResult

app = typer.Typer(help="Create, list and delete GPU clusters.", no_args_is_help=True)

Name = Annotated[str, typer.Option("--name", help="Cluster name.")]


def print_step(result: StepResult) -> None:
    info(f"{result.name:<32} {result.outcome.value:<10} {result.seconds:6.1f}s")


@app.command()
def create(
    ctx: typer.Context,
    gpu: Gpu,
    cloud: Cloud = "sim",
    name: Name = "gpuctl",
    nodes: Nodes = 1,
    gpus_per_node: GpusPerNode = None,
    nodegroup_name: Annotated[str, typer.Option("--nodegroup-name", help="Name of the GPU node group.")] = "gpu",
    slices: Annotated[Optional[int], typer.Option("--slices", help="Share each GPU N ways (time-slicing unless --sharing says otherwise).")] = None,
    sharing: Annotated[Optional[str], typer.Option("--sharing", help="time-slicing, mps or none.")] = None,
    taint: Annotated[Optional[list[str]], typer.Option("--taint", help="GPU node taint key=value:Effect (repeatable; default nvidia.com/gpu=true:NoSchedule).")] = None,
    nfd: Annotated[str, typer.Option("--nfd", help="Who deploys Node Feature Discovery: standalone or operator.")] = "standalone",
    charts: Annotated[Optional[str], typer.Option("--charts", help="Chart source: upstream, bundled, a directory, or an oci:// mirror (default: per cloud).")] = None,
    mig_strategy: Annotated[str, typer.Option("--mig-strategy", help="GPU Operator MIG strategy: mixed or single.")] = "mixed",
    smoke_image: Annotated[Optional[str], typer.Option("--smoke-image", help="CUDA smoke-test image.")] = None,
    validate: Annotated[bool, typer.Option("--validate/--no-validate", help="Run the CUDA smoke test at the end.")] = True,
) -> None:
    """Create (or converge) a GPU cluster: node group, GPU stack, sharing, validation."""
    from gpuctl import api
    from gpuctl.naming import check_name
    from gpuctl.providers import check_cloud, get_provider
    from gpuctl.providers.base import Change
    from gpuctl.sharing import sharing_from_flags
    from gpuctl.spec import ClusterSpec, node_group_from_flags
    from gpuctl.stack.charts import GPU_OPERATOR, chart_ref
    from gpuctl.stack.values import StackSpec, check_stack
    from gpuctl.taints import DEFAULT_GPU_TAINTS, parse_taint
    from gpuctl.validate import SMOKE_IMAGE

    opts = settings(ctx)
    # Every input is checked before anything is started.
    check_cloud(cloud)
    check_name(name, "--name")
    group = node_group_from_flags(nodegroup_name, gpu, nodes, gpus_per_node, name_field="--nodegroup-name")
    share = sharing_from_flags(slices, sharing)
    taints = tuple(parse_taint(t) for t in taint) if taint else DEFAULT_GPU_TAINTS
    provider = get_provider(cloud)
    stack = check_stack(StackSpec(charts=charts or provider.default_charts, nfd=nfd, driver=not provider.ships_driver,
                                  toolkit=not provider.ships_driver, mig_strategy=mig_strategy, taints=taints))
    chart_ref(GPU_OPERATOR, stack.charts)
    spec = api.PlatformSpec(ClusterSpec(name=name, cloud=cloud, node_groups=(group,)), stack, share,
                        smoke_image=smoke_image or SMOKE_IMAGE, validate=validate)

    result = api.apply_platform(spec, opts.kubeconfig, report=print_step)
    changed = any(s.outcome not in (Change.NO_CHANGE, Change.PASSED) for s in result.steps)
    info(f"cluster {name!r} is ready" + ("" if changed else " (no change)") + f"; kubeconfig: {result.kubeconfig}")
    groups = [asdict(g) for g in api.list_node_groups(cloud, name)]
    if opts.output == "table":
        emit(groups, opts.output, NODEGROUP_COLUMNS)
    else:
        emit({"cluster": name, "cloud": cloud, "changed": changed, "kubeconfig": str(result.kubeconfig),
              "steps": [s.as_dict() for s in result.steps], "checks": [c.as_dict() for c in result.checks],
              "nodeGroups": groups}, opts.output)


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
