"""`gpuctl cluster create|list|delete`."""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.documents import cluster_document, labels_document, sharing_document, unstated
from gpuctl.cli.help import one_of
from gpuctl.cli.options import (
    AmiType,
    Cloud,
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
    Template,
    Yes,
    cloud_options,
)
from gpuctl.cli.results import print_step, show_result
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.cli.types import seconds
from gpuctl.model.change import Change
from gpuctl.model.stack_spec import MIG_STRATEGY, NFD_OWNER
from gpuctl.util.errors import GpuctlError
from gpuctl.util.output import emit, emit_manifests, info, is_table

if TYPE_CHECKING:
    from gpuctl.model.target import ClusterTarget

app = typer.Typer(help="""Create, list and delete GPU clusters.

Examples:
  gpuctl cluster create --gpu t4 --slices 4
  gpuctl cluster list
  gpuctl cluster delete --name gpuctl --yes
""", no_args_is_help=True)

Name = Annotated[str, typer.Option("--name", metavar="NAME", help="Cluster name.")]


@app.command()
def create(
    ctx: typer.Context,
    gpu: Gpu,
    cloud: Cloud = "sim",
    name: Name = "gpuctl",
    nodes: Nodes = 1,
    gpus_per_node: GpusPerNode = None,
    nodegroup_name: Annotated[str, typer.Option("--nodegroup-name", metavar="NAME", rich_help_panel="Node group", help="Name of the GPU node group.")] = "gpu",
    slices: Slices = None,
    sharing: SharingMode = None,
    mig_layout: MigLayoutOption = None,
    label: Labels = None,
    taint: Taints = None,
    nfd: Annotated[Optional[str], typer.Option("--nfd", metavar=one_of(NFD_OWNER.names), rich_help_panel="GPU stack", help="Who deploys Node Feature Discovery: gpuctl on its own, or the GPU Operator (default: standalone).")] = None,
    charts: Annotated[Optional[str], typer.Option("--charts", metavar="upstream|bundled|DIR|oci://PREFIX", rich_help_panel="GPU stack", help="Where the charts come from: their upstream repositories, the copies bundled with gpuctl, a directory of charts, or an OCI mirror (default: per cloud).")] = None,
    mig_strategy: Annotated[Optional[str], typer.Option("--mig-strategy", metavar=one_of(MIG_STRATEGY.names), rich_help_panel="Sharing and MIG", help="GPU Operator MIG strategy (default: mixed; single with MPS).")] = None,
    smoke_image: Annotated[Optional[str], typer.Option("--smoke-image", metavar="IMAGE", rich_help_panel="GPU stack", help="CUDA smoke-test image.")] = None,
    validate: Annotated[bool, typer.Option("--validate/--no-validate", rich_help_panel="GPU stack", help="Run the CUDA smoke test at the end.")] = True,
    region: Region = None,
    os_cloud: OsCloud = None,
    profile: Profile = None,
    template: Template = None,
    flavor: Flavor = None,
    keypair: Keypair = None,
    instance_type: InstanceType = None,
    ami_type: AmiType = None,
    node_role: NodeRole = None,
    subnet: Subnets = None,
    no_node_repair: NoNodeRepair = False,
    min_nodes: MinNodes = None,
    max_nodes: MaxNodes = None,
    kubernetes_version: Annotated[Optional[str], typer.Option("--kubernetes-version", metavar="VERSION", rich_help_panel="EKS", help="Kubernetes version of a new cluster.")] = None,
    karpenter: Annotated[bool, typer.Option("--karpenter", rich_help_panel="Autoscaling", help="Karpenter GPU NodePools (EKS: and their EC2NodeClass; sim: and Karpenter itself), a NodeOverlay per sharing group.")] = False,
    exec_auth: Annotated[bool, typer.Option("--exec-auth", rich_help_panel="EKS", help="A kubeconfig with the aws exec plugin instead of a token.")] = False,
    kueue: Annotated[bool, typer.Option("--kueue", rich_help_panel="GPU stack", help="Install Kueue (pinned chart; --charts applies), so tenants get queues with borrowing.")] = False,
    dra: Annotated[bool, typer.Option("--dra", rich_help_panel="GPU stack", help="GPUs by ResourceClaim: install NVIDIA's DRA driver (pinned chart; --charts applies) and turn the operator's device plugin off.")] = False,
    dra_alpha_sharing: Annotated[bool, typer.Option("--dra-alpha-sharing", rich_help_panel="GPU stack", help="With --dra: allow time-slicing and MPS through the DRA driver's ALPHA feature gates.")] = False,
    export_spec: Annotated[bool, typer.Option("--export-spec", help="Print the GpuCluster spec of this command line and stop.")] = False,
    timeout: Annotated[Optional[float], typer.Option("--timeout", parser=seconds, help="Seconds any one wait (capacity, MIG) may take; without it a wait gives up when nothing converges for 120 s.")] = None,
) -> None:
    """Create (or converge) a GPU cluster: its node group, GPU stack and sharing, validated at the end.

    A re-run with the same name converges the cluster to the command line; what it leaves out of the node
    group (labels, taints, sharing) stays as recorded.

    Examples:
      # A local simulated cluster with two T4 nodes, each GPU shared 4 ways
      gpuctl cluster create --gpu t4 --nodes 2 --slices 4
      # A100 nodes split by MIG, and Kueue for the tenants' queues
      gpuctl cluster create --gpu a100-40gb --mig-layout 3g.20gb-2x2g.10gb --kueue
      # EKS, with Karpenter launching up to 4 A10G nodes
      gpuctl cluster create --cloud eks --region us-west-2 --name demo --gpu a10g --karpenter --max-nodes 4
      # The spec of a command line, for 'gpuctl apply -f'
      gpuctl cluster create --gpu t4 --slices 4 --export-spec > gpu-platform.yaml
    """
    opts = settings(ctx)
    # The command line is a GpuCluster document: every input is checked before anything is started.
    raw, flags = cluster_document(
        name, cloud,
        group={"name": nodegroup_name, "gpu": gpu, "nodes": nodes, "gpusPerNode": gpus_per_node,
               "minNodes": min_nodes, "maxNodes": max_nodes, "flavor": flavor, "instanceType": instance_type,
               "taints": taint, "labels": labels_document(label),
               "sharing": sharing_document(slices, sharing, mig_layout)},
        provider={"region": region, "os_cloud": os_cloud, "profile": profile, "template": template,
                  "keypair": keypair, "ami_type": ami_type, "node_role": node_role, "subnets": subnet,
                  "kubernetes_version": kubernetes_version, "exec_auth": exec_auth,
                  "no_node_repair": no_node_repair},
        operator={"charts": charts, "nfd": nfd, "migStrategy": mig_strategy, "smokeImage": smoke_image,
                  "validate": validate},
        karpenter=karpenter, kueue=kueue, dra=dra, dra_alpha_sharing=dra_alpha_sharing)
    spec = api.to_platform(*api.load_document(raw, flags))
    # What it leaves unsaid of a group the cluster has recorded (a re-run) stays as recorded; a spec file is exact.
    spec = replace(spec, unstated=unstated({"labels": label, "taints": taint, "sharing": (slices, sharing, mig_layout),
                                            "migStrategy": mig_strategy}))
    cloud = spec.cloud  # as the document reads it: --cloud SIM is sim
    if export_spec:  # the spec a file would hold, as YAML (table, wide, yaml) or JSON: keys as the spec spells them
        emit_manifests(api.export_spec(spec), opts.output)
        return

    result = api.apply_platform(spec, opts.target, report=print_step, write_context=opts.context, timeout=timeout)
    changed = any(s.outcome not in (Change.NO_CHANGE, Change.PASSED) for s in result.steps)
    info(f"cluster {name!r} is ready" + ("" if changed else " (no change)") + f"; kubeconfig: {result.kubeconfig}")
    show_result(spec, result, changed, opts.output, opts.context)
    if is_table(opts.output) and not _has_tenants(opts.target):
        info(NEXT_STEP)


# What a new user does next (the README's quick start): GPU work belongs in a team's namespace, where the
# admission policies give GPU pods their tolerations and the quota counts them.
NEXT_STEP = """next: give a team GPUs and run a GPU job in its namespace:
  gpuctl tenant add team-a --gpus 4
  kubectl -n team-a apply -f examples/gpu-job.yaml    # examples/ of gpuctl's repository
  kubectl -n team-a wait --for=condition=complete job/cuda-vectoradd --timeout=60s"""


def _has_tenants(target: ClusterTarget) -> bool:
    """True when the cluster has a tenant (or cannot be asked: then the hint would only guess)."""
    try:
        return bool(api.list_tenants(target))
    except GpuctlError:
        return True


@app.command("list")
def list_(ctx: typer.Context, cloud: Cloud = "sim", region: Region = None, os_cloud: OsCloud = None,
          profile: Profile = None) -> None:
    """List the clusters of a provider.

    Examples:
      gpuctl cluster list
      gpuctl cluster list --cloud eks --region us-west-2 -o json
    """
    cloud = api.check_cloud(cloud)
    rows = [asdict(c) for c in api.list_clusters(cloud, cloud_options(region, os_cloud, profile))]
    emit(rows, settings(ctx).output, ("name", "cloud", "status", "endpoint", "kubernetes_version"))


@app.command()
def delete(ctx: typer.Context, name: Name, cloud: Cloud = "sim", yes: Yes = False, region: Region = None,
           os_cloud: OsCloud = None, profile: Profile = None) -> None:
    """Delete a cluster and everything gpuctl made for it, and drop its kubeconfig context.

    Examples:
      gpuctl cluster delete --name gpuctl --yes
      gpuctl cluster delete --cloud openstack --os-cloud mycloud --name demo
    """
    cloud = api.check_cloud(cloud)  # its one spelling, as printed
    options = cloud_options(region, os_cloud, profile)
    opts = settings(ctx)
    change = api.delete_cluster(cloud, name, opts.target, options,
                               confirm=lambda: confirm_or_refuse(yes, f"Delete {cloud} cluster {name!r}?"))
    info(f"cluster {name!r} {change.value}")
    if not is_table(opts.output):
        emit({"cluster": name, "cloud": cloud, "change": change.value}, opts.output)
