"""The typed model of a GPU node group, shared by every provider."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel
from gpuctl.model.mig import MigLayout
from gpuctl.model.sharing import NO_SHARING, Sharing
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint

MAX_GPUS_PER_NODE = 16


@dataclass(frozen=True)
class NodeGroupSpec:
    name: str
    gpu: GpuModel
    nodes: int
    gpus_per_node: int
    min_nodes: int | None = None  # autoscaler bounds; None: the node count
    max_nodes: int | None = None
    flavor: str | None = None  # OpenStack: overrides site config and catalog
    instance_type: str | None = None  # EKS: overrides the catalog
    # Clouds that taint nodes at registration (EKS, Karpenter) need them; the flow applies them everywhere.
    taints: tuple[Taint, ...] = DEFAULT_GPU_TAINTS

    def bounds(self) -> tuple[int, int]:
        """Autoscaler (min, max); each defaults to the node count."""
        low = self.nodes if self.min_nodes is None else self.min_nodes
        high = self.nodes if self.max_nodes is None else self.max_nodes
        return low, high

    def registration_labels(self) -> dict[str, str]:
        """Kubernetes labels a cloud that labels nodes at registration (EKS, Magnum >= 1.14) puts on them."""
        return {L.GPU_MODEL: self.gpu.name, L.GPUS_PER_NODE: str(self.gpus_per_node)}


@dataclass(frozen=True)
class GroupPlan:
    """A node group (with its taints) and what the platform makes of it: sharing or a MIG layout, labels."""

    spec: NodeGroupSpec
    sharing: Sharing = NO_SHARING
    mig: MigLayout | None = None
    labels: dict[str, str] = field(default_factory=dict)
