"""The Python API of gpuctl; the CLI is a thin layer over these functions."""

from __future__ import annotations

from pathlib import Path

from gpuctl.kubeconfig import remove_context
from gpuctl.platform import PlatformResult, PlatformSpec, apply_platform
from gpuctl.providers import get_provider
from gpuctl.providers.base import Change, ClusterInfo, NodeGroupInfo
from gpuctl.spec import NodeGroupSpec

__all__ = ["PlatformResult", "PlatformSpec", "apply_platform", "delete_cluster", "list_clusters", "add_node_group",
           "scale_node_group", "delete_node_group", "get_node_group", "list_node_groups"]


def delete_cluster(cloud: str, name: str, kubeconfig: Path | None = None) -> Change:
    """Delete the cluster and remove its context from the kubeconfig it was merged into."""
    provider = get_provider(cloud)
    context = provider.kubeconfig(name)["current-context"]
    change = provider.delete_cluster(name)
    remove_context(context, kubeconfig)
    return change


def list_clusters(cloud: str) -> list[ClusterInfo]:
    return get_provider(cloud).list_clusters()


def add_node_group(cloud: str, cluster: str, spec: NodeGroupSpec) -> Change:
    return get_provider(cloud).ensure_node_group(cluster, spec)


def scale_node_group(cloud: str, cluster: str, name: str, nodes: int) -> Change:
    return get_provider(cloud).scale_node_group(cluster, name, nodes)


def delete_node_group(cloud: str, cluster: str, name: str) -> Change:
    return get_provider(cloud).delete_node_group(cluster, name)


def get_node_group(cloud: str, cluster: str, name: str) -> NodeGroupInfo | None:
    return get_provider(cloud).get_node_group(cluster, name)


def list_node_groups(cloud: str, cluster: str) -> list[NodeGroupInfo]:
    return get_provider(cloud).list_node_groups(cluster)
