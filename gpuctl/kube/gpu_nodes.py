"""Which nodes are GPU nodes, which node group they belong to, and what they were configured for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.nodes import list_nodes_json
from gpuctl.kube.objects import count
from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS, GpuModel
from gpuctl.util.errors import UsageError

# Node-group labels set by each provider (sim, EKS managed node groups, Magnum).
NODEGROUP_LABELS = (L.NODEGROUP, "eks.amazonaws.com/nodegroup", "magnum.openstack.org/nodegroup")
GPU_NODE_SELECTOR = f"{L.NFD_NVIDIA_PCI}=true"


def nodegroup_of(node: KubeObject) -> str | None:
    return nodegroup_in(node.labels)


def nodegroup_in(labels: Mapping[str, str]) -> str | None:
    """The node group a node's labels name."""
    return next((labels[k] for k in NODEGROUP_LABELS if k in labels), None)


def gpu_nodes(kube: Kube, nodegroup: str | None = None, selector: str | None = None) -> list[KubeObject]:
    """GPU nodes (NFD's NVIDIA PCI label) as JSON, in one LIST, narrowed to a node group or a label selector."""
    wanted = ",".join(s for s in (GPU_NODE_SELECTOR, selector) if s)
    nodes = list_nodes_json(kube, wanted)
    if nodegroup is not None:
        nodes = [n for n in nodes if nodegroup_of(n) == nodegroup]
        if not nodes:
            raise UsageError("--nodegroup", f"no GPU nodes in node group {nodegroup!r}",
                             "see 'gpuctl status' for the node groups")
    return nodes


def gpu_resources(node: Mapping[str, Any], kind: str = "allocatable") -> dict[str, int]:
    """nvidia.com/gpu and nvidia.com/mig-* quantities of a node (as JSON), non-zero only; `kind`: allocatable
    or capacity."""
    values: dict[str, Any] = (node.get("status") or {}).get(kind) or {}
    counts = {k: count(v) for k, v in sorted(values.items()) if k.startswith("nvidia.com/")}
    return {k: n for k, n in counts.items() if n > 0}


def model_of(labels: Mapping[str, str]) -> GpuModel | None:
    """The catalog GPU of a node: gpuctl's own label, else GFD's product (with -SHARED/-MIG-... suffixes)."""
    product = labels.get(L.GPU_PRODUCT, "")
    return GPUS.get(labels.get(L.GPU_MODEL, "")) or next(
        (m for m in GPUS.values() if product == m.product or product.startswith(m.product + "-")), None)


def unhealthy_gpus(node: Mapping[str, Any]) -> dict[str, int]:
    """Unhealthy devices per GPU resource of a node (as JSON): capacity minus allocatable, non-zero only.

    The kubelet's own record: its device manager counts every device a plugin lists in capacity and only the
    Healthy ones in allocatable (Kubernetes pkg/kubelet/cm/devicemanager/manager.go, GetCapacity:
    capacity = len(devices), allocatable = len(healthyDevices)). A plugin marks a device Unhealthy on a
    critical XID (k8s-device-plugin internal/rm/health.go), so an unhealthy GPU shared N ways is N here and
    an unhealthy MIG device is 1 of its profile's resource. The one rule status, top, advise and doctor read."""
    capacity = gpu_resources(node, "capacity")
    allocatable = gpu_resources(node, "allocatable")
    missing = {k: n - allocatable.get(k, 0) for k, n in capacity.items()}
    return {k: n for k, n in missing.items() if n > 0}


def unhealthy_devices(resource: str, n: int, replicas: int, mig_config: str | None) -> int:
    """The devices behind `n` unhealthy units of `resource` (unhealthy_gpus' counts): a whole GPU shared N ways
    (nvidia.com/gpu without MIG; the device plugin marks every replica of a failed GPU) is N units; a MIG device
    (nvidia.com/mig-*, or nvidia.com/gpu under MIG's single strategy) is one."""
    whole = resource == L.GPU_RESOURCE and mig_config in (None, "all-disabled")
    return -(-n // max(replicas, 1)) if whole else n


def unhealthy_whole_gpus(unhealthy: Mapping[str, int], replicas: int, mig_config: str | None) -> int:
    """The whole GPUs among a node's unhealthy devices (unhealthy_gpus): none where it runs MIG, whose devices
    are MIG devices."""
    if mig_config not in (None, "all-disabled"):
        return 0
    return unhealthy_devices(L.GPU_RESOURCE, unhealthy.get(L.GPU_RESOURCE, 0), replicas, mig_config)
