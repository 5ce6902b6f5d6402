"""The Python API of gpuctl; the CLI is a thin layer over these functions."""

from __future__ import annotations

from pathlib import Path

from gpuctl.kubeconfig import check_kubeconfig, remove_context
from gpuctl.plan import PlannedStep, plan_platform
from gpuctl.platform import GroupPlan, PlatformResult, PlatformSpec, apply_platform
from gpuctl.render import render
from gpuctl.mig_apply import apply_mig
from gpuctl.specfile import export_spec, load_spec, to_platform
from gpuctl.status import gpu_status
from gpuctl.tenants import Tenant, ensure_tenant, list_tenants, remove_tenant
from gpuctl.validate import validate_cluster
from gpuctl.providers import get_provider
from gpuctl.providers.base import Change, ClusterInfo, NodeGroupInfo, Provider
from gpuctl.providers.options import CloudOptions
from gpuctl.spec import NodeGroupSpec

__all__ = ["CloudOptions", "GroupPlan", "PlannedStep", "PlatformResult", "PlatformSpec", "Tenant", "add_node_group",
           "apply_mig", "apply_platform", "delete_cluster", "delete_node_group", "ensure_tenant", "export_spec",
           "get_node_group", "gpu_status", "list_clusters", "list_node_groups", "list_tenants", "load_spec",
           "plan_platform", "remove_tenant", "render", "scale_node_group", "to_platform", "validate_cluster"]


def _provider(cloud: str, options: CloudOptions | None) -> Provider:
    provider = get_provider(cloud, options)
    provider.check_credentials()
    return provider


def delete_cluster(cloud: str, name: str, kubeconfig: Path | None = None,
                   options: CloudOptions | None = None, context: str | None = None) -> Change:
    """Delete the cluster and remove its context (`context`, else the provider's name) from the
    kubeconfig it was merged into; a context of that name pointing elsewhere is left alone."""
    check_kubeconfig(kubeconfig)
    provider = _provider(cloud, options)
    change = provider.delete_cluster(name)
    entry = provider.context_name(name)
    remove_context(context or entry, kubeconfig, cluster=entry)
    return change


def list_clusters(cloud: str, options: CloudOptions | None = None) -> list[ClusterInfo]:
    return _provider(cloud, options).list_clusters()


def add_node_group(cloud: str, cluster: str, spec: NodeGroupSpec, options: CloudOptions | None = None) -> Change:
    provider = get_provider(cloud, options)
    provider.check_node_group(spec)
    provider.check_credentials()
    return provider.ensure_node_group(cluster, spec)


def scale_node_group(cloud: str, cluster: str, name: str, nodes: int, options: CloudOptions | None = None) -> Change:
    return _provider(cloud, options).scale_node_group(cluster, name, nodes)


def delete_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None) -> Change:
    return _provider(cloud, options).delete_node_group(cluster, name)


def get_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None) -> NodeGroupInfo | None:
    return _provider(cloud, options).get_node_group(cluster, name)


def list_node_groups(cloud: str, cluster: str, options: CloudOptions | None = None) -> list[NodeGroupInfo]:
    return _provider(cloud, options).list_node_groups(cluster)
