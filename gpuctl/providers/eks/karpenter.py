"""Karpenter on EKS: the EC2NodeClass gpuctl's NodePools (stack/karpenter.py) launch from."""

from __future__ import annotations

from typing import Any

import yaml

from gpuctl.kube.objects import MANAGED
from gpuctl.providers.eks.aws import MANAGED_TAGS
from gpuctl.stack.karpenter import NodeClass
from gpuctl.util.templating import render_template

EC2_NODE_CLASS = NodeClass("karpenter.k8s.aws", "EC2NodeClass")
# EKS AMI type -> Karpenter AMI alias; for GPU instance types each alias resolves to its NVIDIA variant.
AMI_ALIASES = {"AL2023_x86_64_NVIDIA": "al2023@latest", "BOTTLEROCKET_x86_64_NVIDIA": "bottlerocket@latest",
               "AL2_x86_64_GPU": "al2@latest"}


def render_ec2nodeclass(cluster: str, role: str, ami_type: str) -> dict[str, Any]:
    """The EC2NodeClass: `role` is the node IAM role's name, as Karpenter v1 wants it."""
    return yaml.safe_load(render_template("ec2nodeclass.yaml.j2", directory="nodepools",
                                          resource_name=EC2_NODE_CLASS.name, managed_labels=MANAGED,
                                          cluster=cluster, role=role, ami_alias=AMI_ALIASES[ami_type],
                                          instance_tags=MANAGED_TAGS))
