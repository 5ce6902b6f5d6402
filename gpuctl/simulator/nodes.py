"""Fake GPU nodes for kwok: the labels and capacity a real node has after NFD + GFD."""

from __future__ import annotations

from typing import Any

from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.model.taints import Taint

DRIVER_VERSION = "570.172.08"  # what the simulated node image ships
CUDA_VERSION = (12, 8)  # the newest CUDA that driver runs; newer CUDA images fail on it
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
SYSTEM_NODE = "system-0"
# A real kubelet registers a node without device-plugin resources: they appear once a plugin has registered
# with its device manager (and are zeroed at every kubelet start: Kubernetes v1.36.3
# pkg/kubelet/nodestatus/setters.go, pkg/kubelet/cm/devicemanager). Karpenter's kwok provider creates its nodes
# with the NodeClaim's requests as capacity instead (kwok/cloudprovider/cloudprovider.go toNode), so pods would
# bind to GPUs no plugin serves yet. The sim's NodePools give launched nodes this startup taint (Karpenter treats
# it as temporary, and initializes a node only once it is gone); the simulated operator removes it once the
# node's device plugin serves what it was configured with: from then on the node is what a real one would be.
DEVICES_PENDING = Taint("sim.gpuctl.dev/devices-pending", "", "NoSchedule")


def node_name(group: str, index: int) -> str:
    return f"{group}-{index}"


def gpu_labels(model: GpuModel, gpus_per_node: int) -> dict[str, str]:
    """Labels NFD and GPU Feature Discovery put on a node with `gpus_per_node` x `model`."""
    major, minor = model.compute_capability
    return {
        L.NFD_NVIDIA_PCI: "true",
        L.GPU_PRODUCT: model.product,
        L.GPU_MEMORY: str(model.memory_mib),
        L.GPU_COUNT: str(gpus_per_node),
        L.GPU_FAMILY: model.family,
        L.COMPUTE_MAJOR: str(major),
        L.COMPUTE_MINOR: str(minor),
        L.DRIVER_VERSION: DRIVER_VERSION,
        L.DRIVER_MAJOR: DRIVER_VERSION.split(".")[0],
        L.CUDA_RUNTIME: ".".join(map(str, CUDA_VERSION)),
        L.MIG_CAPABLE: str(model.mig_capable).lower(),
        L.MPS_CAPABLE: "true",
    }


def node_labels(group: NodeGroupSpec, name: str) -> dict[str, str]:
    return {
        # what a kubelet registers its node with, the beta labels included (Kubernetes v1.37.2
        # pkg/kubelet/kubelet_node_status.go initialNode); without them the node lifecycle controller patches
        # every node to add them (pkg/controller/nodelifecycle labelReconcileInfo)
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"sim-{group.gpu.name}-x{group.gpus_per_node}",
        "type": "kwok",
        L.MANAGED_BY: L.MANAGER,
        L.NODEGROUP: group.name,
        L.GPU_MODEL: group.gpu.name,
        L.GPUS_PER_NODE: str(group.gpus_per_node),
        **gpu_labels(group.gpu, group.gpus_per_node),
    }


def node_capacity(group: NodeGroupSpec) -> dict[str, str]:
    # A plausible host per GPU: 8 vCPU and 64 GiB each, like the big GPU instance types. No nvidia.com/gpu:
    # like a node of an NVIDIA AMI (AL2023_x86_64_NVIDIA, Magnum's GPU images), it advertises GPUs once a
    # device plugin runs on it; a node that registers with them has a plugin on its host (Bottlerocket).
    return {
        "cpu": str(8 * group.gpus_per_node),
        "memory": f"{64 * group.gpus_per_node}Gi",
        "ephemeral-storage": "500Gi",
        "pods": "110",
    }


def render_node(group: NodeGroupSpec, index: int) -> dict[str, Any]:
    """The Node object for member `index` of `group`, status included (kept on create)."""
    name = node_name(group.name, index)
    capacity = node_capacity(group)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels(group, name),
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        # A node registers with its group's taints, as EKS node groups and Magnum's node_taints do.
        "spec": {"taints": [t.as_dict() for t in group.taints]},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def render_system_node() -> dict[str, Any]:
    """The sim cluster's CPU node for cluster services; no GPU, no taint."""
    capacity = {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "500Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": SYSTEM_NODE,
            "labels": {"kubernetes.io/hostname": SYSTEM_NODE, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
                       "beta.kubernetes.io/arch": "amd64", "type": "kwok", L.MANAGED_BY: L.MANAGER,
                       "gpuctl.dev/role": "system"},
            "annotations": {KWOK_ANNOTATION: "fake"},
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
