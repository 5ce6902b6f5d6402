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
