"""`gpuctl nodegroup add|scale|delete|list`: the same verbs and flags for every provider."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.documents import cluster_document, labels_document, sharing_document, unstated
from gpuctl.cli.options import (
    AmiType,
    Cloud,
    ClusterName,
    Flavor,
    Gpu,
    GpusPerNode,
    InstanceType,
    Keypair,
    Labels,
    MaxNodes,
    MigLayoutOption,
    MinNodes,
    NodeRole,
    Nodes,
    NoNodeRepair,
    OsCloud,
    Profile,
    Region,
    SharingMode,
    Slices,
    Subnets,
    Taints,
    Yes,
    cloud_options,
)
from gpuctl.cli.results import GROUP_COLUMNS, GROUP_WIDE, group_rows, print_substep, table_rows
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.cli.types import count
from gpuctl.util.output import emit, info, is_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuctl.model.cloud_options import CloudOptions
    from gpuctl.model.spec import GroupPlan

app = typer.Typer(help="""Add, scale, delete and list GPU node groups.

Examples:
  gpuctl nodegroup add --cluster gpuctl --name l4 --gpu l4 --nodes 2
  gpuctl nodegroup scale --cluster gpuctl --name l4 --nodes 0
  gpuctl nodegroup list --cluster gpuctl
""", no_args_is_help=True)

Name = Annotated[str, typer.Option("--name", metavar="NAME", help="Node group name.")]
ScaleNodes = Annotated[Optional[int], typer.Option("--nodes", parser=count, help="Nodes the group runs (0 allowed; a minimum above it is lowered unless --min-nodes says otherwise). A Karpenter group keeps no count: the most nodes its NodePool may launch, as --max-nodes.")]
ScaleMin = Annotated[Optional[int], typer.Option("--min-nodes", parser=count, help="Autoscaler minimum (default: kept, lowered to --nodes where above it). A Karpenter group has none: only 0 is taken.")]
ScaleMax = Annotated[Optional[int], typer.Option("--max-nodes", parser=count, help="Autoscaler maximum (default: kept, raised to --nodes where below it). A Karpenter group: its NodePool's limit, the most nodes Karpenter may launch (nodes launched above a lowered limit stay until consolidated).")]


def _checked(cloud: str, cluster: str) -> str:
    """The cloud in its one spelling (--cloud SIM is sim); the cluster's name is judged by gpuctl.api."""
    return api.check_cloud(cloud)


@app.command()
def add(ctx: typer.Context, cluster: ClusterName, name: Name, gpu: Gpu, nodes: Nodes = 1,
        gpus_per_node: GpusPerNode = None, cloud: Cloud = "sim", region: Region = None, os_cloud: OsCloud = None,
        profile: Profile = None, flavor: Flavor = None, keypair: Keypair = None, instance_type: InstanceType = None,
        ami_type: AmiType = None, node_role: NodeRole = None, subnet: Subnets = None, min_nodes: MinNodes = None,
        max_nodes: MaxNodes = None, taint: Taints = None, label: Labels = None, slices: Slices = None,
        sharing: SharingMode = None, mig_layout: MigLayoutOption = None, no_node_repair: NoNodeRepair = False) -> None:
    """Add a GPU node group, or converge an existing one to these values.

    What is not given of an existing group, its labels, taints and sharing, stays as recorded. Where gpuctl set
    up the cluster's GPU stack the group is configured as `apply` configures one: labels, sharing or MIG layout,
    the stack's settings.

    Examples:
      # Two L4 nodes beside the cluster's first group
      gpuctl nodegroup add --cluster gpuctl --name l4 --gpu l4 --nodes 2
      # T4 nodes whose GPUs are shared 8 ways through MPS
      gpuctl nodegroup add --cluster gpuctl --name shared --gpu t4 --slices 8 --sharing mps
      # A100 nodes split by MIG, labelled for one team's workloads
      gpuctl nodegroup add --cluster gpuctl --name mig --gpu a100-40gb --mig-layout all-1g.5gb --label team=ml
    """
    # The same document and validators as `cluster create` and spec files; errors name these flags.
    raw, flags = cluster_document(
        cluster, cloud,
        group={"name": name, "gpu": gpu, "nodes": nodes, "gpusPerNode": gpus_per_node, "minNodes": min_nodes,
               "maxNodes": max_nodes, "flavor": flavor, "instanceType": instance_type, "taints": taint,
               "labels": labels_document(label), "sharing": sharing_document(slices, sharing, mig_layout)},
        provider={"region": region, "os_cloud": os_cloud, "profile": profile, "keypair": keypair,
                  "ami_type": ami_type, "node_role": node_role, "subnets": subnet, "no_node_repair": no_node_repair},
        operator={}, karpenter=False, group_name_flag="--name", name_flag="--cluster")
    platform = api.to_platform(*api.load_document(raw, flags))
    options, cloud = platform.options, platform.cloud
    opts = settings(ctx)
    left = unstated({"labels": label, "taints": taint, "sharing": (slices, sharing, mig_layout)})
    change = api.add_node_group(cloud, cluster, platform.groups[0], options, opts.target,
                               unstated=left - {"migStrategy"}, report=print_substep)
    info(f"node group {name!r}: {change.value}")
    _show(ctx, cloud, cluster, name, options, platform.groups)


@app.command()
def scale(ctx: typer.Context, cluster: ClusterName, name: Name, nodes: ScaleNodes = None, min_nodes: ScaleMin = None,
          max_nodes: ScaleMax = None, cloud: Cloud = "sim", region: Region = None, os_cloud: OsCloud = None,
          profile: Profile = None) -> None:
    """Change the number of nodes of a node group, or its autoscaling bounds.

    0 nodes is taken where the cloud takes it: the sim, Magnum, EKS. A Karpenter group's NodePool limit is the
    most nodes Karpenter may launch for it.

    Examples:
      gpuctl nodegroup scale --cluster gpuctl --name gpu --nodes 3
      # Let the autoscaler run the group between 0 and 4 nodes
      gpuctl nodegroup scale --cluster demo --name gpu --cloud eks --min-nodes 0 --max-nodes 4
    """
    cloud = _checked(cloud, cluster)
    options = cloud_options(region, os_cloud, profile)
    opts = settings(ctx)
    change = api.scale_node_group(cloud, cluster, name, nodes, options, opts.target, min_nodes=min_nodes,
                                 max_nodes=max_nodes)
    info(f"node group {name!r}: {change.value}")
    _show(ctx, cloud, cluster, name, options)


@app.command()
def delete(ctx: typer.Context, cluster: ClusterName, name: Name, cloud: Cloud = "sim", yes: Yes = False,
           region: Region = None, os_cloud: OsCloud = None, profile: Profile = None) -> None:
    """Delete a node group and its nodes.

    Examples:
      gpuctl nodegroup delete --cluster gpuctl --name l4 --yes
      gpuctl nodegroup delete --cluster demo --name gpu --cloud eks --region us-west-2
    """
    cloud = _checked(cloud, cluster)
    opts = settings(ctx)
    change = api.delete_node_group(cloud, cluster, name, cloud_options(region, os_cloud, profile), opts.target,
                                  confirm=lambda: confirm_or_refuse(
                                      yes, f"Delete node group {name!r} of cluster {cluster!r}?"))
    info(f"node group {name!r}: {change.value}")
    if not is_table(opts.output):
        emit({"nodegroup": name, "cluster": cluster, "change": change.value}, opts.output)


@app.command("list")
def list_(ctx: typer.Context, cluster: ClusterName, cloud: Cloud = "sim", region: Region = None,
          os_cloud: OsCloud = None, profile: Profile = None) -> None:
    """List the GPU node groups of a cluster.

    Examples:
      gpuctl nodegroup list --cluster gpuctl
      gpuctl nodegroup list --cluster demo --cloud eks --region us-west-2 -o yaml
    """
    cloud = _checked(cloud, cluster)
    opts = settings(ctx)
    rows = group_rows(api.list_node_groups(cloud, cluster, cloud_options(region, os_cloud, profile), opts.target))
    emit(rows, opts.output, GROUP_COLUMNS, GROUP_WIDE, rows=table_rows(rows))


def _show(ctx: typer.Context, cloud: str, cluster: str, name: str, options: CloudOptions,
          plans: Sequence[GroupPlan] = ()) -> None:
    opts = settings(ctx)
    group = api.get_node_group(cloud, cluster, name, options, opts.target)
    rows = group_rows([group] if group else [], plans)
    emit(rows, opts.output, GROUP_COLUMNS, GROUP_WIDE, rows=table_rows(rows))
