"""Options shared by the commands of every provider: the same verbs and flags everywhere."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl.cli.help import one_of, one_of_text
from gpuctl.cli.types import count
from gpuctl.model.cloud_options import AMI_TYPES, CLOUD, FLAGS, CloudOptions, is_given
from gpuctl.model.naming import check_text
from gpuctl.model.sharing import STRATEGY

Cloud = Annotated[str, typer.Option("--cloud", metavar=one_of(CLOUD.names), help="Provider: sim is a local simulated GPU cluster, openstack is Magnum, eks is Amazon EKS.")]
ClusterName = Annotated[str, typer.Option("--cluster", metavar="NAME", help="Cluster name.")]
Nodes = Annotated[int, typer.Option("--nodes", parser=count, rich_help_panel="Node group", help="Number of GPU nodes.")]
GpusPerNode = Annotated[
    Optional[int], typer.Option("--gpus-per-node", parser=count, rich_help_panel="Node group", help="GPUs per node (default: from the GPU catalog).")
]
Gpu = Annotated[str, typer.Option("--gpu", metavar="MODEL", help="GPU model, e.g. t4 or a100-40gb ('gpuctl gpus' lists them).")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
# The GPU metrics `top` and `advise` read.
Prometheus = Annotated[Optional[str], typer.Option("--prometheus", metavar="URL", help="Prometheus's base URL (default: $GPUCTL_PROMETHEUS_URL; on a sim cluster, the sim's own).")]
Since = Annotated[str, typer.Option("--since", metavar="DURATION", help="The window averages and peaks are taken over, e.g. 15m, 1h, 7d.")]

# Cloud-specific options, shared by every command that talks to a cloud (see gpuctl.model.cloud_options).
Region = Annotated[Optional[str], typer.Option("--region", metavar="REGION", help="Cloud region (EKS, OpenStack).")]
OsCloud = Annotated[Optional[str], typer.Option("--os-cloud", metavar="NAME", rich_help_panel="OpenStack", help="clouds.yaml entry (else OS_CLOUD or OS_* variables).")]
Profile = Annotated[Optional[str], typer.Option("--profile", metavar="NAME", rich_help_panel="EKS", help="AWS named profile (else the standard credential chain).")]


def cloud_options(region: str | None = None, os_cloud: str | None = None, profile: str | None = None,
                  **more: object) -> CloudOptions:
    """CloudOptions from flags; a flag the cloud does not use is refused when the provider is made."""
    given = {k: v for k, v in dict(more, region=region, os_cloud=os_cloud, profile=profile).items() if is_given(v)}
    if "subnets" in given:
        given["subnets"] = tuple(given["subnets"])  # type: ignore[arg-type]
    for key, value in given.items():
        for text in value if isinstance(value, tuple) else (value,):
            if isinstance(text, str):
                check_text(text, FLAGS[key], maximum=255)
    return CloudOptions(**given)  # type: ignore[arg-type]


Template = Annotated[Optional[str], typer.Option("--template", metavar="NAME", rich_help_panel="OpenStack", help="Magnum cluster template to create from.")]
Flavor = Annotated[Optional[str], typer.Option("--flavor", metavar="NAME", rich_help_panel="OpenStack", help="GPU node flavor (default: site config, then catalog).")]
Keypair = Annotated[Optional[str], typer.Option("--keypair", metavar="NAME", rich_help_panel="OpenStack", help="Nova keypair for the nodes.")]
InstanceType = Annotated[Optional[str], typer.Option("--instance-type", metavar="TYPE", rich_help_panel="EKS", help="GPU instance type (default: from the catalog).")]
AmiType = Annotated[Optional[str], typer.Option("--ami-type", metavar="TYPE", rich_help_panel="EKS", help=f"The nodes' AMI type, {one_of_text(AMI_TYPES)} (default: {AMI_TYPES[0]}).")]
NoNodeRepair = Annotated[bool, typer.Option("--no-node-repair", help="Leave the cloud's node repair off (EKS: the node monitoring agent add-on and node auto repair of the managed node groups; OpenStack: Magnum's auto-healing labels on a new cluster).")]
NodeRole = Annotated[Optional[str], typer.Option("--node-role", metavar="ARN", rich_help_panel="EKS", help="Node IAM role (default: created with the managed policies it needs).")]
Subnets = Annotated[Optional[list[str]], typer.Option("--subnet", metavar="ID", rich_help_panel="EKS", help="Subnet of the nodes (repeatable).")]
MinNodes = Annotated[Optional[int], typer.Option("--min-nodes", parser=count, rich_help_panel="Autoscaling", help="Autoscaler minimum (default: --nodes). A Karpenter node group has none (0).")]
MaxNodes = Annotated[Optional[int], typer.Option("--max-nodes", parser=count, rich_help_panel="Autoscaling", help="Autoscaler maximum (default: --nodes). With Karpenter: the most nodes the group's NodePool may launch.")]
Taints = Annotated[Optional[list[str]], typer.Option("--taint", metavar="KEY=VALUE:EFFECT", rich_help_panel="Node group", help="GPU node taint (repeatable; default nvidia.com/gpu=true:NoSchedule; a re-run without it keeps the group's recorded taints).")]
# A node group's labels, sharing and MIG layout: the spec's `labels` and `sharing` (a re-run without them keeps what
# the group has recorded, as `helm upgrade --reuse-values` would).
Labels = Annotated[Optional[list[str]], typer.Option("--label", metavar="KEY=VALUE", rich_help_panel="Node group", help="Label for the group's nodes (repeatable; spec: labels). A re-run without it keeps the group's recorded labels.")]
Slices = Annotated[Optional[int], typer.Option("--slices", parser=count, rich_help_panel="Sharing and MIG", help="Share each GPU N ways (time-slicing unless --sharing says otherwise). A re-run without --slices/--sharing keeps the group's recorded sharing.")]
SharingMode = Annotated[Optional[str], typer.Option("--sharing", metavar=one_of(STRATEGY.names), rich_help_panel="Sharing and MIG", help="How pods share each GPU (default with --slices: time-slicing).")]
MigLayoutOption = Annotated[Optional[str], typer.Option("--mig-layout", metavar="LAYOUT", rich_help_panel="Sharing and MIG", help="MIG layout of the group's GPUs, e.g. 3g.20gb-2x2g.10gb (spec: sharing.mig.layout; see 'gpuctl mig validate').")]
