"""Karpenter v1 GPU capacity: a NodePool per GPU node group and the EC2NodeClass they launch from.

Rendered from nodepools/ (strict Jinja, every value through tojson), then applied with server-side
apply only where the cluster's objects differ: a converged cluster gets no write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.kube.client import get_or_none
from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.objects import MANAGED, apply
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed
from gpuctl.model.mig import config_name
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.model.spec import GroupPlan
from gpuctl.providers.eks.aws import MANAGED_TAGS
from gpuctl.util.errors import ClusterError
from gpuctl.util.templating import render_template

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

NODE_CLASS = "gpuctl-gpu"
PLURALS = {"NodePool": "nodepools", "EC2NodeClass": "ec2nodeclasses"}
# EKS AMI type -> Karpenter AMI alias; for GPU instance types each alias resolves to its NVIDIA variant.
AMI_ALIASES = {"AL2023_x86_64_NVIDIA": "al2023@latest", "BOTTLEROCKET_x86_64_NVIDIA": "bottlerocket@latest",
               "AL2_x86_64_GPU": "al2@latest"}
CAPACITY_TYPES = ("on-demand", "spot")
CONSOLIDATE_AFTER = "10m"  # an empty GPU node is expensive, but not worth churning for a short gap
EXPIRE_AFTER = "720h"  # Karpenter's default: nodes are replaced (and re-imaged) monthly


def nodepool_name(group: str) -> str:
    return f"gpuctl-{group}"


def render_ec2nodeclass(cluster: str, role: str, ami_type: str) -> dict[str, Any]:
    """The EC2NodeClass: `role` is the node IAM role's name, as Karpenter v1 wants it."""
    return yaml.safe_load(render_template("ec2nodeclass.yaml.j2", directory="nodepools", resource_name=NODE_CLASS,
                                 managed_labels=MANAGED, cluster=cluster, role=role,
                                 ami_alias=AMI_ALIASES[ami_type], instance_tags=MANAGED_TAGS))


def render_nodepool(plan: GroupPlan, max_nodes: int, group_label: str) -> dict[str, Any]:
    """The NodePool for the node group's GPU, limited to `max_nodes` nodes' worth of GPUs. The nodes it launches
    join as the group's: its `group_label` (what status and validate select on), taints and labels, and its
    device-plugin or MIG config label, so the plugin serves the group's sharing as soon as a node registers."""
    group, taints = plan.spec, plan.spec.taints
    name = nodepool_name(group.name)
    node_labels = {**plan.labels, group_label: group.name, L.NODEGROUP: group.name, L.GPU_MODEL: group.gpu.name,
                   L.GPUS_PER_NODE: str(group.gpus_per_node)}
    if plan.sharing.config_key:
        node_labels[CONFIG_LABEL] = plan.sharing.config_key
    if plan.mig is not None:
        node_labels[L.MIG_CONFIG] = config_name(plan.mig)
    return yaml.safe_load(render_template(
        "gpu-nodepool.yaml.j2", directory="nodepools", resource_name=name, managed_labels=MANAGED,
        node_labels=node_labels,
        node_class=NODE_CLASS, gpu_name=group.gpu.karpenter_name,
        gpu_memory_mib=group.gpu.karpenter_memory_mib, gpus_per_node=group.gpus_per_node,
        capacity_types=list(CAPACITY_TYPES), taints=[t.as_dict() for t in taints], expire_after=EXPIRE_AFTER,
        gpu_limit=max_nodes * group.gpus_per_node, consolidate_after=CONSOLIDATE_AFTER))


def is_subset(want: Any, have: Any) -> bool:
    """Whether `have` holds everything in `want` (the server may add defaults and metadata)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and is_subset(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(is_subset, want, have))
    return want == have


def _with_current(api: Any, objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], tuple[str, ...], Any]]:
    """Each object with its API target and the cluster's copy of it (None where it is missing)."""
    found: list[tuple[dict[str, Any], tuple[str, ...], Any]] = []
    for obj in objects:
        group, version = obj["apiVersion"].split("/")
        kind, name = obj["kind"], obj["metadata"]["name"]
        target = (group, version, PLURALS[kind], name)
        with requesting(f"reading {kind} {name}"):
            found.append((obj, target, get_or_none(api.get_cluster_custom_object, *target)))
    return found


def _outcome(created: list[bool], total: int) -> Change:
    """CREATED where every object was missing, UPDATED where some differed, else NO_CHANGE."""
    if not created:
        return Change.NO_CHANGE
    return Change.CREATED if len(created) == total and all(created) else Change.UPDATED


def observe_objects(client: ApiClient, objects: list[dict[str, Any]]) -> Observed:
    """What ensure_objects would do, without its write."""
    from kubernetes.client import CustomObjectsApi

    pending = [(obj, current is None) for obj, _, current in _with_current(CustomObjectsApi(client), objects)
               if current is None or not is_subset(obj, current)]
    pending.sort(key=lambda p: not p[1])  # the missing ones first
    return Observed(_outcome([missing for _, missing in pending], len(objects)),
                    ", ".join(f"{obj['kind']} {obj['metadata']['name']}" for obj, _ in pending))


def ensure_objects(client: ApiClient, objects: list[dict[str, Any]]) -> Change:
    """Server-side apply each cluster-scoped Karpenter object that is missing or differs."""
    from kubernetes.client import CustomObjectsApi

    api = CustomObjectsApi(client)
    created = []
    for obj, target, current in _with_current(api, objects):
        if current is not None and is_subset(obj, current):
            continue
        kind = obj["kind"]
        try:
            with requesting(f"applying {kind} {target[-1]}"):
                apply(api.patch_cluster_custom_object, *target, obj)
        except KubeNotFound:  # the resource type itself is unknown
            raise ClusterError(f"the cluster has no {kind} resource ({target[0]}/{target[1]}): Karpenter v1 is "
                               "not installed", "install Karpenter (https://karpenter.sh) or drop --karpenter"
                               ) from None
        created.append(current is None)
    return _outcome(created, len(objects))
