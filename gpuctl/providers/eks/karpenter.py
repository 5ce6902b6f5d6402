"""Karpenter on EKS: the EC2NodeClass gpuctl's NodePools (stack/karpenter.py) launch from, and every Karpenter
object apply writes with --karpenter (`gpuctl render` prints the same)."""

from __future__ import annotations

from typing import Any

import yaml

from gpuctl.kube.objects import MANAGED
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.spec import PlatformSpec
from gpuctl.providers.eks.aws import MANAGED_TAGS
from gpuctl.providers.eks.nodegroups import DEFAULT_AMI_TYPE, NODEGROUP_LABEL, check_ami_type
from gpuctl.providers.eks.roles import node_role_name
from gpuctl.stack.karpenter import NodeClass, pool_objects
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


def karpenter_objects(spec: PlatformSpec, options: CloudOptions) -> list[dict[str, Any]]:
    """The EC2NodeClass (for the node role `options` names, else gpuctl's), then each node group's NodePool and
    NodeOverlay; the nodes Karpenter launches join labelled as a managed node group's are."""
    role = (options.node_role or "").rsplit("/", 1)[-1] or node_role_name(spec.name)
    ami_type = check_ami_type(options.ami_type or DEFAULT_AMI_TYPE)
    return [render_ec2nodeclass(spec.name, role, ami_type), *pool_objects(spec, NODEGROUP_LABEL, EC2_NODE_CLASS)]
