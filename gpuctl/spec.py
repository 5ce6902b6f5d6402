"""The typed model of a GPU node group, shared by every provider."""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.catalog import GpuModel, get_gpu
from gpuctl.errors import UsageError
from gpuctl.naming import check_count, check_name
from gpuctl.taints import DEFAULT_GPU_TAINTS, Taint

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


# Node-group shape flags and the one cloud each belongs to.
_CLOUD_OF = {"--flavor": "openstack", "--instance-type": "eks"}


def node_group_from_flags(
    name: str, gpu: str, nodes: int, gpus_per_node: int | None, name_field: str = "--name", *,
    cloud: str = "sim", min_nodes: int | None = None, max_nodes: int | None = None, flavor: str | None = None,
    instance_type: str | None = None, taints: tuple[Taint, ...] = DEFAULT_GPU_TAINTS,
) -> NodeGroupSpec:
    """Validate command-line values (errors name the flag) and fill catalog defaults."""
    check_name(name, name_field)
    model = get_gpu(gpu, "--gpu")
    check_count(nodes, "--nodes")
    per_node = model.default_gpus_per_node if gpus_per_node is None else gpus_per_node
    check_count(per_node, "--gpus-per-node", maximum=MAX_GPUS_PER_NODE)
    for flag, value in (("--flavor", flavor), ("--instance-type", instance_type)):
        if value and cloud != _CLOUD_OF[flag]:
            raise UsageError(flag, f"not used by --cloud {cloud}", "drop it or choose the cloud it belongs to")
    if min_nodes is not None and not 0 <= min_nodes <= nodes:
        raise UsageError("--min-nodes", f"must be between 0 and --nodes ({nodes}), got {min_nodes}",
                         "lower --min-nodes or raise --nodes")
    if max_nodes is not None and max_nodes < nodes:
        raise UsageError("--max-nodes", f"must be at least --nodes ({nodes}), got {max_nodes}", "raise --max-nodes")
    return NodeGroupSpec(name=name, gpu=model, nodes=nodes, gpus_per_node=per_node, min_nodes=min_nodes,
                         max_nodes=max_nodes, flavor=flavor, instance_type=instance_type, taints=taints)
