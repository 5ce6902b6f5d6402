"""Cloud-wide choices a command line or spec may give; each provider reads the ones it knows.

A node group's own shape (flavor, instance type, autoscaler bounds, taints) is in NodeGroupSpec."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from gpuctl.util.errors import UsageError

# Which options each cloud understands; anything else given for that cloud is a usage error.
ALLOWED: dict[str, frozenset[str]] = {
    "sim": frozenset(),
    "openstack": frozenset({"os_cloud", "region", "template", "keypair"}),
    "eks": frozenset({"profile", "region", "ami_type", "node_role", "subnets", "kubernetes_version", "karpenter",
                      "exec_auth"}),
}
FLAGS = {"os_cloud": "--os-cloud", "region": "--region", "template": "--template", "keypair": "--keypair",
         "profile": "--profile", "ami_type": "--ami-type", "node_role": "--node-role", "subnets": "--subnet",
         "kubernetes_version": "--kubernetes-version", "karpenter": "--karpenter", "exec_auth": "--exec-auth"}


@dataclass(frozen=True)
class CloudOptions:
    region: str | None = None
    os_cloud: str | None = None  # OpenStack: clouds.yaml entry (else OS_CLOUD / OS_* variables)
    template: str | None = None  # Magnum cluster template (name or id)
    keypair: str | None = None
    profile: str | None = None  # AWS named profile (else the standard credential chain)
    ami_type: str | None = None  # EKS: AL2023_x86_64_NVIDIA (default) or BOTTLEROCKET_x86_64_NVIDIA
    node_role: str | None = None  # EKS: node IAM role ARN (else created)
    subnets: tuple[str, ...] = field(default=())
    kubernetes_version: str | None = None
    karpenter: bool = False  # EKS: also render a Karpenter GPU NodePool + EC2NodeClass
    exec_auth: bool = False  # EKS: kubeconfig with the exec plugin instead of a token


def check_options(cloud: str, options: CloudOptions) -> CloudOptions:
    """Refuse options the chosen cloud does not understand, naming the flag."""
    for f in fields(options):
        value = getattr(options, f.name)
        if value not in (None, False, ()) and f.name not in ALLOWED[cloud]:
            raise UsageError(FLAGS[f.name], f"not used by --cloud {cloud}", "drop it or choose the cloud it belongs to")
    return options
