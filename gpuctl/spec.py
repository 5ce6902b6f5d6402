"""The typed model of a GPU node group, shared by every provider."""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.catalog import GpuModel, get_gpu
from gpuctl.naming import check_count, check_name

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


def node_group_from_flags(
    name: str, gpu: str, nodes: int, gpus_per_node: int | None, name_field: str = "--name"
) -> NodeGroupSpec:
    """Validate command-line values (errors name the flag) and fill catalog defaults."""
    check_name(name, name_field)
    model = get_gpu(gpu, "--gpu")
    check_count(nodes, "--nodes")
    per_node = model.default_gpus_per_node if gpus_per_node is None else gpus_per_node
    check_count(per_node, "--gpus-per-node", maximum=MAX_GPUS_PER_NODE)
    return NodeGroupSpec(name=name, gpu=model, nodes=nodes, gpus_per_node=per_node)
