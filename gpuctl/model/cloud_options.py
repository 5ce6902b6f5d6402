"""Cloud-wide choices a command line or spec may give; each provider reads the ones it knows.

A node group's own shape (flavor, instance type, autoscaler bounds, taints) is in NodeGroupSpec."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from gpuctl.util.choices import Choice
from gpuctl.util.errors import UsageError

CLOUDS = ("sim", "openstack", "eks")
# The one reading of a cloud's name, for --cloud and spec.provider.cloud alike (any case; near misses and the
# names users reach for first answered with the one meant).
CLOUD = Choice("cloud", CLOUDS, {"aws": ("eks",), "amazon": ("eks",), "ec2": ("eks",), "magnum": ("openstack",),
                                 "os": ("openstack",), "kwok": ("sim",), "local": ("sim",)})
# EKS GPU AMI types: AL2023 NVIDIA (current, the default), Bottlerocket NVIDIA, AL2 GPU (legacy). Each ships the
# NVIDIA driver and container toolkit, so the GPU Operator must not install them.
AMI_TYPES = ("AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA", "AL2_x86_64_GPU")


@dataclass(frozen=True)
class Option:
    """How one CloudOptions field is given, and the clouds that use it."""

    flag: str
    key: str | None  # its key under a spec's `spec.provider`; None: said elsewhere (spec.karpenter.enabled)
    clouds: tuple[str, ...]


# The one table of cloud options (CloudOptions field -> Option), in CloudOptions' order; anything given for
# a cloud that does not use it is a usage error. ALLOWED, FLAGS and SPEC_KEYS are views of it.
OPTIONS: dict[str, Option] = {
    "region": Option("--region", "region", ("openstack", "eks")),
    "os_cloud": Option("--os-cloud", "osCloud", ("openstack",)),
    "template": Option("--template", "template", ("openstack",)),
    "keypair": Option("--keypair", "keypair", ("openstack",)),
    "profile": Option("--profile", "profile", ("eks",)),
    "ami_type": Option("--ami-type", "amiType", ("eks",)),
    "node_role": Option("--node-role", "nodeRole", ("eks",)),
    "subnets": Option("--subnet", "subnets", ("eks",)),
    "kubernetes_version": Option("--kubernetes-version", "kubernetesVersion", ("eks",)),
    "karpenter": Option("--karpenter", None, ("eks", "sim")),
    "exec_auth": Option("--exec-auth", "execAuth", ("eks",)),
    "no_node_repair": Option("--no-node-repair", "noNodeRepair", ("eks", "openstack")),
}
ALLOWED: dict[str, frozenset[str]] = {cloud: frozenset(name for name, o in OPTIONS.items() if cloud in o.clouds)
                                      for cloud in CLOUDS}
FLAGS = {name: o.flag for name, o in OPTIONS.items()}
SPEC_KEYS = {o.key: name for name, o in OPTIONS.items() if o.key}  # spec.provider key -> field


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
    karpenter: bool = False  # Karpenter GPU NodePools (EKS: + EC2NodeClass; sim: + Karpenter itself, kwok provider)
    exec_auth: bool = False  # EKS: kubeconfig with the exec plugin instead of a token
    # Off: the cloud's node repair (EKS: the node monitoring agent add-on and node auto repair; Magnum: the
    # auto-healing labels at cluster create), on by default.
    no_node_repair: bool = False


def is_given(value: object) -> bool:
    """Whether an option was given: None, False and an empty list are what is left unset."""
    return value not in (None, False, [], ())


def unused_options(cloud: str, options: CloudOptions) -> list[str]:
    """The fields of `options` given but not used by `cloud`, in CloudOptions' order."""
    return [f.name for f in fields(options) if is_given(getattr(options, f.name)) and f.name not in ALLOWED[cloud]]


def check_options(cloud: str, options: CloudOptions) -> CloudOptions:
    """Refuse options the chosen cloud does not understand, naming the flag."""
    unused = unused_options(cloud, options)
    if unused:
        raise UsageError(FLAGS[unused[0]], f"not used by --cloud {cloud}", "drop it or choose the cloud it belongs to")
    return options
