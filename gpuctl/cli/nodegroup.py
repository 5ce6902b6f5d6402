"""`gpuctl nodegroup add|scale|delete|list`: the same verbs and flags for every provider."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer

from gpuctl.cli.options import (
    AmiType,
    Cloud,
    ClusterName,
    Flavor,
    Gpu,
    GpusPerNode,
    InstanceType,
    Keypair,
    MaxNodes,
    MinNodes,
    NodeRole,
    Nodes,
    OsCloud,
    Profile,
    Region,
    Subnets,
    Taints,
    Yes,
    cloud_options,
)
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.util.output import emit, info

app = typer.Typer(help="Add, scale, delete and list GPU node groups.", no_args_is_help=True)

Name = Annotated[str, typer.Option("--name", help="Node group name.")]
COLUMNS = ("name", "cluster", "gpu", "nodes", "ready_nodes", "gpus_per_node")


def _checked(cloud: str, cluster: str) -> str:
    """The cloud in its one spelling (--cloud SIM is sim), once it and the cluster's name are judged."""
    from gpuctl import api
    from gpuctl.model.naming import check_name

    cloud = api.check_cloud(cloud)
    check_name(cluster, "--cluster")
    return cloud


@app.command()
def add(ctx: typer.Context, cluster: ClusterName, name: Name, gpu: Gpu, nodes: Nodes = 1,
        gpus_per_node: GpusPerNode = None, cloud: Cloud = "sim", region: Region = None, os_cloud: OsCloud = None,
        profile: Profile = None, flavor: Flavor = None, keypair: Keypair = None, instance_type: InstanceType = None,
        ami_type: AmiType = None, node_role: NodeRole = None, subnet: Subnets = None, min_nodes: MinNodes = None,
        max_nodes: MaxNodes = None, taint: Taints = None) -> None:
    """Add a GPU node group (or converge an existing one to these values)."""
    from gpuctl import api
    from gpuctl.cli.documents import cluster_document
    from gpuctl.model.specfile import node_group_spec

    # The same document and validators as `cluster create` and spec files; errors name these flags.
    raw, flags = cluster_document(
        cluster, cloud,
        group={"name": name, "gpu": gpu, "nodes": nodes, "gpusPerNode": gpus_per_node, "minNodes": min_nodes,
               "maxNodes": max_nodes, "flavor": flavor, "instanceType": instance_type, "taints": taint},
        provider={"region": region, "os_cloud": os_cloud, "profile": profile, "keypair": keypair,
                  "ami_type": ami_type, "node_role": node_role, "subnets": subnet},
        operator={}, karpenter=False, group_name_flag="--name", name_flag="--cluster")
    doc, [group] = api.load_document(raw, flags)
    spec, options, cloud = node_group_spec(group), doc.options, doc.cloud
    opts = settings(ctx)
    change = api.add_node_group(cloud, cluster, spec, options, opts.kubeconfig, opts.context)
    info(f"node group {name!r}: {change.value}")
    _show(ctx, cloud, cluster, name, options)


@app.command()
def scale(ctx: typer.Context, cluster: ClusterName, name: Name, nodes: Nodes, cloud: Cloud = "sim",
          region: Region = None, os_cloud: OsCloud = None, profile: Profile = None) -> None:
    """Change the number of nodes of a node group."""
    from gpuctl import api
    from gpuctl.model.naming import check_count, check_name

    cloud = _checked(cloud, cluster)
    check_name(name, "--name")
    check_count(nodes, "--nodes")
    options = cloud_options(region, os_cloud, profile)
    opts = settings(ctx)
    change = api.scale_node_group(cloud, cluster, name, nodes, options, opts.kubeconfig, opts.context)
    info(f"node group {name!r}: {change.value}")
    _show(ctx, cloud, cluster, name, options)


@app.command()
def delete(ctx: typer.Context, cluster: ClusterName, name: Name, cloud: Cloud = "sim", yes: Yes = False,
           region: Region = None, os_cloud: OsCloud = None, profile: Profile = None) -> None:
    """Delete a node group and its nodes."""
    from gpuctl import api
    from gpuctl.model.naming import check_name

    cloud = _checked(cloud, cluster)
    check_name(name, "--name")
    confirm_or_refuse(yes, f"Delete node group {name!r} of cluster {cluster!r}?")
    opts = settings(ctx)
    change = api.delete_node_group(cloud, cluster, name, cloud_options(region, os_cloud, profile), opts.kubeconfig,
                                   opts.context)
    info(f"node group {name!r}: {change.value}")


@app.command("list")
def list_(ctx: typer.Context, cluster: ClusterName, cloud: Cloud = "sim", region: Region = None,
          os_cloud: OsCloud = None, profile: Profile = None) -> None:
    """List the GPU node groups of a cluster."""
    from gpuctl import api

    cloud = _checked(cloud, cluster)
    rows = [asdict(g) for g in api.list_node_groups(cloud, cluster, cloud_options(region, os_cloud, profile))]
    emit(rows, settings(ctx).output, COLUMNS)


def _show(ctx: typer.Context, cloud: str, cluster: str, name: str, options: object) -> None:
    from gpuctl import api

    group = api.get_node_group(cloud, cluster, name, options)  # type: ignore[arg-type]
    emit([asdict(group)] if group else [], settings(ctx).output, COLUMNS)
