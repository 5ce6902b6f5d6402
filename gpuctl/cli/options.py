"""Options shared by the commands of every provider: the same verbs and flags everywhere."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from gpuctl.cli.types import count

if TYPE_CHECKING:
    from gpuctl.model.cloud_options import CloudOptions

Cloud = Annotated[str, typer.Option("--cloud", help="Provider: sim (a local simulated GPU cluster), openstack (Magnum) or eks.")]
ClusterName = Annotated[str, typer.Option("--cluster", help="Cluster name.")]
Nodes = Annotated[int, typer.Option("--nodes", parser=count, help="Number of GPU nodes.")]
GpusPerNode = Annotated[
    Optional[int], typer.Option("--gpus-per-node", parser=count, help="GPUs per node (default: from the GPU catalog).")
]
Gpu = Annotated[str, typer.Option("--gpu", help="GPU model from 'gpuctl gpus' (t4, a100-40gb, ...).")]
Yes = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
# The GPU metrics `top` and `advise` read.
Prometheus = Annotated[Optional[str], typer.Option("--prometheus", metavar="URL", help="Prometheus's base URL (default: $GPUCTL_PROMETHEUS_URL; on a sim cluster, the sim's own).")]
Since = Annotated[str, typer.Option("--since", metavar="DURATION", help="The window averages and peaks are taken over, e.g. 15m, 1h, 7d.")]

# Cloud-specific options, shared by every command that talks to a cloud (see gpuctl.model.cloud_options).
Region = Annotated[Optional[str], typer.Option("--region", help="Cloud region (EKS, OpenStack).")]
OsCloud = Annotated[Optional[str], typer.Option("--os-cloud", help="OpenStack: clouds.yaml entry (else OS_CLOUD or OS_* variables).")]
Profile = Annotated[Optional[str], typer.Option("--profile", help="AWS: named profile (else the standard credential chain).")]


def cloud_options(region: str | None = None, os_cloud: str | None = None, profile: str | None = None,
                  **more: object) -> CloudOptions:
    """CloudOptions from flags; a flag the cloud does not use is refused when the provider is made."""
    from gpuctl.model.cloud_options import FLAGS, CloudOptions, is_given
    from gpuctl.model.naming import check_text

    given = {k: v for k, v in dict(more, region=region, os_cloud=os_cloud, profile=profile).items() if is_given(v)}
    if "subnets" in given:
        given["subnets"] = tuple(given["subnets"])  # type: ignore[arg-type]
    for key, value in given.items():
        for text in value if isinstance(value, tuple) else (value,):
            if isinstance(text, str):
                check_text(text, FLAGS[key], maximum=255)
    return CloudOptions(**given)  # type: ignore[arg-type]


Template = Annotated[Optional[str], typer.Option("--template", help="OpenStack: Magnum cluster template to create from.")]
Flavor = Annotated[Optional[str], typer.Option("--flavor", help="OpenStack: GPU node flavor (default: site config, then catalog).")]
Keypair = Annotated[Optional[str], typer.Option("--keypair", help="OpenStack: Nova keypair for the nodes.")]
InstanceType = Annotated[Optional[str], typer.Option("--instance-type", help="EKS: GPU instance type (default: from the catalog).")]
AmiType = Annotated[Optional[str], typer.Option("--ami-type", help="EKS: AL2023_x86_64_NVIDIA (default) or BOTTLEROCKET_x86_64_NVIDIA.")]
NodeRole = Annotated[Optional[str], typer.Option("--node-role", help="EKS: node IAM role ARN (default: created with the managed policies it needs).")]
Subnets = Annotated[Optional[list[str]], typer.Option("--subnet", help="EKS: subnet id for the nodes (repeatable).")]
MinNodes = Annotated[Optional[int], typer.Option("--min-nodes", parser=count, help="Autoscaler minimum (default: --nodes). A Karpenter node group has none (0).")]
MaxNodes = Annotated[Optional[int], typer.Option("--max-nodes", parser=count, help="Autoscaler maximum (default: --nodes). With Karpenter: the most nodes the group's NodePool may launch.")]
Taints = Annotated[Optional[list[str]], typer.Option("--taint", help="GPU node taint key=value:Effect (repeatable; default nvidia.com/gpu=true:NoSchedule; a re-run without it keeps the group's recorded taints).")]
# A node group's labels, sharing and MIG layout: the spec's `labels` and `sharing` (a re-run without them keeps what
# the group has recorded, as `helm upgrade --reuse-values` would).
Labels = Annotated[Optional[list[str]], typer.Option("--label", metavar="KEY=VALUE", help="Label for the group's nodes (repeatable; spec: labels). A re-run without it keeps the group's recorded labels.")]
Slices = Annotated[Optional[int], typer.Option("--slices", parser=count, help="Share each GPU N ways (time-slicing unless --sharing says otherwise). A re-run without --slices/--sharing keeps the group's recorded sharing.")]
SharingMode = Annotated[Optional[str], typer.Option("--sharing", help="time-slicing, mps or none.")]
MigLayoutOption = Annotated[Optional[str], typer.Option("--mig-layout", metavar="LAYOUT", help="MIG layout of the group's GPUs, e.g. 3g.20gb-2x2g.10gb (spec: sharing.mig.layout; see 'gpuctl mig validate').")]
