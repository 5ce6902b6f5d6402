"""A cluster's node groups: add (and configure as `apply` would), scale, delete, get, list
(gpuctl.ops.nodegroups)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.api.reach import provider
from gpuctl.kube.kubeconfig import check_kubeconfig
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.naming import MAX_NODES, check_count, check_name
from gpuctl.model.spec import GroupPlan
from gpuctl.model.target import DEFAULT_TARGET
from gpuctl.ops.nodegroups import add_node_group as add
from gpuctl.ops.nodegroups import cluster_client, get_group, list_groups
from gpuctl.ops.nodegroups import delete_node_group as delete
from gpuctl.ops.nodegroups import scale_node_group as scale
from gpuctl.providers import get_provider
from gpuctl.util.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuctl.model.change import Change
    from gpuctl.model.spec import NodeGroupSpec
    from gpuctl.model.target import ClusterTarget
    from gpuctl.ops.platform.results import Reporter
    from gpuctl.providers.base import NodeGroupInfo


def add_node_group(cloud: str, cluster: str, spec: NodeGroupSpec | GroupPlan, options: CloudOptions | None = None,
                   target: ClusterTarget | None = None, unstated: frozenset[str] = frozenset(),
                   report: Reporter | None = None) -> Change:
    """Make or converge the node group, then configure it as `apply` would where gpuctl set up the cluster's GPU
    stack (its record, labels, sharing or MIG layout, the stack's settings, the tenants' tolerations), each
    step told to `report`; `unstated`: what the command left unsaid of it (gpuctl.model.spec.UNSTATED), kept as
    recorded for an existing group. Reached through `target` (its context, else the provider's name), else the
    provider's kubeconfig (gpuctl.ops.nodegroups.add_node_group)."""
    target = target or DEFAULT_TARGET
    check_name(cluster, "--cluster")
    check_kubeconfig(target.kubeconfig)
    plan = spec if isinstance(spec, GroupPlan) else GroupPlan(spec)
    cloud_provider = get_provider(cloud, options)
    cloud_provider.check_node_group(plan.spec)
    cloud_provider.check_credentials()
    return add(cloud_provider, cloud, cluster, plan, target, unstated, report or (lambda _: None),
               options or CloudOptions())


def scale_node_group(cloud: str, cluster: str, name: str, nodes: int | None, options: CloudOptions | None = None,
                     target: ClusterTarget | None = None, min_nodes: int | None = None,
                     max_nodes: int | None = None) -> Change:
    """Scale the node group (0 nodes included, where the cloud takes it), or set its bounds; a Karpenter group's
    NodePool limit (gpuctl.ops.nodegroups.scale_group). Then give its nodes the group's recorded
    configuration (new nodes join without the sharing or MIG layout gpuctl set on their siblings), through
    `target` (its context, else the provider's context name)."""
    target = target or DEFAULT_TARGET
    check_name(cluster, "--cluster")
    check_name(name, "--name")
    for value, flag in ((nodes, "--nodes"), (min_nodes, "--min-nodes"), (max_nodes, "--max-nodes")):
        if value is not None:
            check_count(value, flag, minimum=0, maximum=MAX_NODES)
    if nodes is None and min_nodes is None and max_nodes is None:
        raise UsageError("--nodes", "nothing to change", "pass --nodes N (or --min-nodes / --max-nodes)")
    check_kubeconfig(target.kubeconfig)
    return scale(provider(cloud, options), cluster, name, nodes, min_nodes, max_nodes, target)


def delete_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None,
                      target: ClusterTarget | None = None, confirm: Callable[[], None] | None = None) -> Change:
    """Delete the node group and its record on the cluster (its taints and sharing no longer shape the GPU
    stack's settings), reached through `target` where it can be (gpuctl.ops.nodegroups.delete_node_group).
    `confirm` is called once every input is judged, before anything is changed (it raises to stop)."""
    target = target or DEFAULT_TARGET
    check_name(cluster, "--cluster")
    check_name(name, "--name")
    check_kubeconfig(target.kubeconfig)
    if confirm is not None:
        confirm()
    return delete(provider(cloud, options), cluster, name, target)


def get_node_group(cloud: str, cluster: str, name: str, options: CloudOptions | None = None,
                   target: ClusterTarget | None = None) -> NodeGroupInfo | None:
    """The node group: its cloud node group, its Karpenter NodePool, or both (gpuctl.ops.nodegroups)."""
    check_name(cluster, "--cluster")
    check_name(name, "--name")
    cloud_provider = provider(cloud, options)
    return get_group(cloud_provider, cluster, name,
                     lambda: cluster_client(cloud_provider, cluster, target or DEFAULT_TARGET))


def list_node_groups(cloud: str, cluster: str, options: CloudOptions | None = None,
                     target: ClusterTarget | None = None) -> list[NodeGroupInfo]:
    """Every node group of the cluster, Karpenter's included (`scaling` says which: cloud, karpenter or both)."""
    check_name(cluster, "--cluster")
    cloud_provider = provider(cloud, options)
    return list_groups(cloud_provider, cluster,
                       lambda: cluster_client(cloud_provider, cluster, target or DEFAULT_TARGET))
