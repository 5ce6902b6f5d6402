"""The cloud's steps: ensure-cluster, then ensure-nodegroup/<group> for each node group (its observe and its act
through the provider)."""

from __future__ import annotations

from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.spec import NodeGroupSpec
from gpuctl.ops.platform.run import Run
from gpuctl.providers.base import Provider


def cluster_step(provider: Provider, name: str, run: Run) -> Step:
    def observe_cluster() -> Observed:
        run.exists = provider.get_cluster(name) is not None
        return Observed(Change.NO_CHANGE if run.exists else Change.CREATED)

    return Step("ensure-cluster", observe_cluster, lambda: provider.ensure_cluster(name))


def node_group_step(provider: Provider, cluster: str, group: NodeGroupSpec, run: Run) -> Step:
    name = f"ensure-nodegroup/{group.name}"
    if group.nodes == 0:  # only Karpenter launches its nodes (spec passes: 0 needs it): no cloud node group
        launched = Observed(Change.NO_CHANGE, f"0 fixed nodes: Karpenter launches up to {group.bounds()[1]}")
        return Step(name, lambda: launched, lambda: Change.NO_CHANGE)
    return Step(name, lambda: observe_node_group(provider, cluster, group, run),
                lambda: provider.ensure_node_group(cluster, group))


def observe_node_group(provider: Provider, cluster: str, spec: NodeGroupSpec, run: Run) -> Observed:
    """What ensure-nodegroup would do; the nodes it brings go in run.joining (the steps that configure the group's
    nodes say so in plan)."""
    current = provider.get_node_group(cluster, spec.name) if run.exists else None
    run.joining[spec.name] = max(spec.nodes - (current.nodes if current is not None else 0), 0)
    if current is None:
        return Observed(Change.CREATED, f"{spec.nodes} x {spec.gpu.name}")
    if current.nodes != spec.nodes:
        return Observed(Change.UPDATED, f"nodes {current.nodes} -> {spec.nodes}")
    return Observed(Change.NO_CHANGE)
