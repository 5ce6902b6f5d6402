"""The Python API of gpuctl; the CLI is a thin layer over these functions."""

from __future__ import annotations

from pathlib import Path

from gpuctl.kubeconfig import remove_context, write_kubeconfig
from gpuctl.providers import get_provider
from gpuctl.providers.base import Change, ClusterInfo, NodeGroupInfo
from gpuctl.spec import ClusterSpec, NodeGroupSpec
from gpuctl.steps import Reporter, StepResult, run_step


def _silent(_: StepResult) -> None:
    pass


def create_cluster(spec: ClusterSpec, kubeconfig: Path | None = None,
                   report: Reporter = _silent) -> tuple[list[StepResult], Path]:
    """Converge the cluster, its node groups and the kubeconfig; return the steps and the file."""
    provider = get_provider(spec.cloud)
    results = [run_step("ensure-cluster", lambda: provider.ensure_cluster(spec.name), report)]
    for group in spec.node_groups:
        results.append(run_step(f"ensure-nodegroup/{group.name}",
                                lambda g=group: provider.ensure_node_group(spec.name, g), report))
    written: list[Path] = []

    def kubeconfig_step() -> Change:
        path, changed = write_kubeconfig(provider.kubeconfig(spec.name), kubeconfig)
        written.append(path)
        return Change.UPDATED if changed else Change.NO_CHANGE

    results.append(run_step("write-kubeconfig", kubeconfig_step, report))
    return results, written[0]


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
