"""Label keys and resource names gpuctl reads or writes, in one place."""

from __future__ import annotations

from collections.abc import Mapping

MANAGED_BY = "app.kubernetes.io/managed-by"
APP_NAME = "app.kubernetes.io/name"
MANAGER = "gpuctl"
NODEGROUP = "gpuctl.dev/nodegroup"
GPU_MODEL = "gpuctl.dev/gpu"  # catalog name, e.g. a100-40gb
GPUS_PER_NODE = "gpuctl.dev/gpus-per-node"  # physical GPUs (capacity changes with sharing and MIG)

# Written by NVIDIA GPU Feature Discovery / the GPU Operator on real nodes.
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_MEMORY = "nvidia.com/gpu.memory"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_FAMILY = "nvidia.com/gpu.family"
COMPUTE_MAJOR = "nvidia.com/gpu.compute.major"
COMPUTE_MINOR = "nvidia.com/gpu.compute.minor"
DRIVER_VERSION = "nvidia.com/cuda.driver-version.full"
DRIVER_MAJOR = "nvidia.com/cuda.driver-version.major"
CUDA_RUNTIME = "nvidia.com/cuda.runtime-version.full"
MIG_CAPABLE = "nvidia.com/mig.capable"
MPS_CAPABLE = "nvidia.com/mps.capable"
# The MIG manager's config choice and its answer.
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
MIG_STRATEGY = "nvidia.com/mig.strategy"  # GPU Feature Discovery's: the strategy the device plugin runs with
# The GPU Operator's per-operand deploy labels on GPU nodes (nvidia.com/gpu.deploy.device-plugin=true ...); the MIG
# manager sets those of the operands that hold GPUs to this value while it changes the MIG layout, then restores them.
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
PAUSED_FOR_MIG = "paused-for-mig-change"
# The operand label that stops the GPU Operator's device plugin on one node: its DaemonSet selects
# DEPLOY_DEVICE_PLUGIN=true, and the operator keeps a value someone set (gpu-operator v26.7.0
# controllers/state_manager.go addGPUStateLabels: "If a required state label already exists on the node with a
# non-empty value, honor it").
DEPLOY_DEVICE_PLUGIN = DEPLOY_PREFIX + "device-plugin"
# gpuctl's mark of a node whose node group DRA serves while the cluster's other groups keep the device plugin
# (a group's `dra: true`): the DRA driver's kubelet plugin selects it (values kubeletPlugin.nodeSelector).
DRA_GROUP = "gpuctl.dev/dra"
# Annotation on a node: the labels (keys) and taints (key:effect) its group's configure-nodes last set there, as
# kubectl apply's last-applied-configuration: what the group no longer asks for is taken off, others' are kept.
APPLIED = "gpuctl.dev/applied"
# The `app` label (and name) of the GPU Operator's device-plugin DaemonSet and pods.
DEVICE_PLUGIN_APP = "nvidia-device-plugin-daemonset"
# Written by Node Feature Discovery for NVIDIA's PCI vendor id.
NFD_NVIDIA_PCI = "feature.node.kubernetes.io/pci-10de.present"

GPU_RESOURCE = "nvidia.com/gpu"
# Set by the API server on every namespace: its name (what a namespaceSelector matches one namespace by).
NAMESPACE_NAME = "kubernetes.io/metadata.name"
# Kubernetes' own node taints (not-ready, unreachable, ...); the DefaultTolerationSeconds admission plugin gives
# every pod tolerations of some of them.
KUBERNETES_TAINTS = "node.kubernetes.io/"
# Karpenter puts it on every node it launches: the NodePool's name.
KARPENTER_NODEPOOL = "karpenter.sh/nodepool"


def managed_by_gpuctl(labels: Mapping[str, str] | None) -> bool:
    """Whether an object's labels mark it as gpuctl's (managed-by gpuctl): gpuctl changes or deletes only those.
    kube/objects.py is_managed asks it of an object as JSON."""
    return (labels or {}).get(MANAGED_BY) == MANAGER
