"""The typed model of a platform: its node groups (shared by every provider), GPU stack and tenants."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.mig import MigLayout
from gpuctl.model.sharing import NO_SHARING, Sharing
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, Taint
from gpuctl.model.tenant import Tenant

MAX_GPUS_PER_NODE = 16
SMOKE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"  # the CUDA smoke test's image


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


@dataclass(frozen=True)
class PlatformSpec:
    name: str
    cloud: str
    groups: tuple[GroupPlan, ...]
    stack: StackSpec  # its taints: every group's, for the operator's tolerations
    smoke_image: str = SMOKE_IMAGE
    validate: bool = True
    options: CloudOptions = field(default_factory=CloudOptions)
    tenants: tuple[Tenant, ...] = ()
    kueue: bool = False  # install Kueue, for the tenants' queues
    # Node groups the cluster has (group_records.py) that this spec does not name: they shape the cluster-wide
    # state in `stack` and the GPU configs, and no step acts on them.
    others: tuple[GroupPlan, ...] = ()
    # What a command line left unsaid of its node groups (UNSTATED names): a group the cluster has recorded keeps
    # its recorded value there (ops.group_records.with_recorded). A spec file states everything: empty.
    unstated: frozenset[str] = frozenset()

    @property
    def every_group(self) -> tuple[GroupPlan, ...]:
        return self.groups + self.others


# A node group's fields a command line may leave unsaid: its labels, taints, sharing (or MIG layout), and the
# cluster's MIG strategy (which the node groups' sharing constrains).
UNSTATED = ("labels", "taints", "sharing", "migStrategy")


def all_taints(groups: tuple[GroupPlan, ...]) -> tuple[Taint, ...]:
    """The union of the groups' taints, in a stable order: what the GPU stack's pods must tolerate."""
    return tuple(sorted({t for g in groups for t in g.spec.taints}, key=str))
