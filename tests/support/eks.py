"""The EKS provider, for the EKS tests and emulator: its token, node group labels and taints, Karpenter class."""

from __future__ import annotations

from gpuctl.providers.eks.karpenter import AMI_ALIASES, EC2_NODE_CLASS, render_ec2nodeclass
from gpuctl.providers.eks.nodegroups import EKS_EFFECTS, catalog_instance
from gpuctl.providers.eks.provider import NODEGROUP_LABEL
from gpuctl.providers.eks.token import get_token

__all__ = ["AMI_ALIASES", "EC2_NODE_CLASS", "EKS_EFFECTS", "NODEGROUP_LABEL", "catalog_instance", "get_token",
           "render_ec2nodeclass"]
