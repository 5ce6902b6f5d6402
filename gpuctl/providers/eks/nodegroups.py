"""Pure choices for an EKS managed node group: AMI type, instance type, scaling, taints."""

from __future__ import annotations

from gpuctl.model.catalog import GPUS, GpuModel, InstanceType
from gpuctl.model.cloud_options import AMI_TYPES
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.model.taints import Taint
from gpuctl.util.errors import UsageError

# The label of a managed node group's nodes; Karpenter's nodes of the group get it from their NodePool.
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
DEFAULT_AMI_TYPE = AMI_TYPES[0]
EKS_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}


def check_ami_type(value: str) -> str:
    if value not in AMI_TYPES:
        raise UsageError("--ami-type", f"{value!r} is not an NVIDIA GPU AMI type",
                         f"use one of: {', '.join(AMI_TYPES)}")
    return value


def eks_taint(taint: Taint) -> dict[str, str]:
    """A taint in the EKS API's spelling (effect NO_SCHEDULE, ...)."""
    spelled = {"key": taint.key, "effect": EKS_EFFECTS[taint.effect]}
    return spelled | {"value": taint.value} if taint.value else spelled


def catalog_instance(name: str) -> tuple[GpuModel, InstanceType] | None:
    """The GPU model and count of a catalog instance type, or None for one the catalog does not know."""
    return next(((m, t) for m in GPUS.values() for t in m.instance_types if t.name == name), None)


def choose_instance_type(spec: NodeGroupSpec) -> str:
    """spec.instance_type if it fits the spec, else the smallest catalog type with exactly the GPUs asked for."""
    override = spec.instance_type
    if override is not None:
        known = catalog_instance(override)
        if known and known[0] != spec.gpu:
            raise UsageError("--instance-type", f"{override} has {known[0].name} GPUs, not {spec.gpu.name}",
                             "pick an instance type of that GPU or change --gpu")
        if known and known[1].gpus != spec.gpus_per_node:
            raise UsageError("--gpus-per-node", f"{override} has {known[1].gpus} GPUs per node, not "
                             f"{spec.gpus_per_node}", f"pass --gpus-per-node {known[1].gpus}")
        return override
    if not spec.gpu.instance_types:
        raise UsageError("--gpu", f"{spec.gpu.name} is not offered on EC2", "choose another GPU or --instance-type")
    match = next((t for t in spec.gpu.instance_types if t.gpus == spec.gpus_per_node), None)
    if match is None:
        offered = ", ".join(f"{t.name} ({t.gpus})" for t in spec.gpu.instance_types)
        raise UsageError("--gpus-per-node", f"no {spec.gpu.name} instance type has {spec.gpus_per_node} GPUs",
                         f"choose from {offered}, or pass --instance-type")
    return match.name


def scaling_config(spec: NodeGroupSpec) -> dict[str, int]:
    """EKS scalingConfig; the autoscaler's bounds default to the node count."""
    low, high = spec.bounds()
    return {"minSize": low, "maxSize": high, "desiredSize": spec.nodes}

