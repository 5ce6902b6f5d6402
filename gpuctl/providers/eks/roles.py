"""The IAM roles gpuctl makes for a cluster: one for the control plane, one for the nodes.

Both are tagged as gpuctl's and carry only AWS managed policies; an existing role of the same
name is used as it is, and deleted later only if it bears gpuctl's tag.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from gpuctl.providers.eks.aws import MANAGED_TAGS, get_or_none, tag_list, translated
from gpuctl.util.output import info

if TYPE_CHECKING:
    from botocore.client import BaseClient

CLUSTER_POLICIES = ("AmazonEKSClusterPolicy",)
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly")


def cluster_role_name(cluster: str) -> str:
    return f"gpuctl-{cluster}-cluster"


def node_role_name(cluster: str) -> str:
    return f"gpuctl-{cluster}-node"


def _trust(service: str) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}]})


def ensure_role(iam: BaseClient, name: str, service: str, policies: tuple[str, ...],
                partition: str) -> tuple[str, bool]:
    """The ARN of role `name` that `service` may assume, created with `policies` if absent;
    and whether it was created now (a new role takes a few seconds to be usable by EKS)."""
    existing = get_or_none(f"reading IAM role {name}", iam.get_role, RoleName=name)
    if existing is not None:
        return existing["Role"]["Arn"], False
    info(f"creating IAM role {name}")
    with translated(f"creating IAM role {name}"):
        arn = iam.create_role(RoleName=name, AssumeRolePolicyDocument=_trust(service),
                              Description="Created by gpuctl", Tags=tag_list(MANAGED_TAGS))["Role"]["Arn"]
        for policy in policies:
            iam.attach_role_policy(RoleName=name, PolicyArn=f"arn:{partition}:iam::aws:policy/{policy}")
    return arn, True


def delete_role(iam: BaseClient, name: str) -> bool:
    """Delete role `name` if gpuctl made it (detaching its policies first); True if deleted."""
    role = get_or_none(f"reading IAM role {name}", iam.get_role, RoleName=name)
    if role is None:
        return False
    tags = {t["Key"]: t["Value"] for t in role["Role"].get("Tags") or []}
    if any(tags.get(k) != v for k, v in MANAGED_TAGS.items()):
        info(f"IAM role {name} was not created by gpuctl: kept")
        return False
    with translated(f"deleting IAM role {name}"):
        for page in iam.get_paginator("list_attached_role_policies").paginate(RoleName=name):
            for policy in page["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=name, PolicyArn=policy["PolicyArn"])
        iam.delete_role(RoleName=name)
    info(f"deleted IAM role {name}")
    return True
