"""Whole clusters of a cloud: list them, delete one (and what create merged into a kubeconfig)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from gpuctl.api.reach import provider
from gpuctl.kube.kubeconfig import check_kubeconfig, remove_cluster
from gpuctl.model.naming import check_name
from gpuctl.model.target import DEFAULT_TARGET
from gpuctl.ops.unfinished import forget_unfinished, unfinished_step
from gpuctl.providers import check_cloud
from gpuctl.util.output import info

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuctl.model.change import Change
    from gpuctl.model.cloud_options import CloudOptions
    from gpuctl.model.target import ClusterTarget
    from gpuctl.providers.base import ClusterInfo


def delete_cluster(cloud: str, name: str, target: ClusterTarget | None = None, options: CloudOptions | None = None,
                   confirm: Callable[[], None] | None = None) -> Change:
    """Delete the cluster and remove from `target`'s kubeconfig (else the default file) what create merged in:
    every context pointing at the cluster entry gpuctl wrote, whatever its name (the provider's, or the
    write_context of the create), that entry and its user; no current-context is left naming a removed context
    (it is unset, as eksctl does). Contexts pointing at other clusters are left alone. `confirm` is called
    once every input is judged, before anything is read or changed (it raises to stop)."""
    kubeconfig = (target or DEFAULT_TARGET).kubeconfig
    cloud = check_cloud(cloud)
    check_name(name, "--name")
    check_kubeconfig(kubeconfig)
    if confirm is not None:
        confirm()
    cloud_provider = provider(cloud, options)
    change = cloud_provider.delete_cluster(name)
    forget_unfinished(cloud, name)
    removed = remove_cluster(cloud_provider.context_name(name), kubeconfig)
    if removed is not None and removed.contexts:
        info(f"removed context {', '.join(removed.contexts)} from {removed.path}" + (
            "; it was the current context: none is current now (pick one with 'kubectl config use-context NAME' "
            "or gpuctl's --context NAME)" if removed.was_current else ""))
    return change


def list_clusters(cloud: str, options: CloudOptions | None = None) -> list[ClusterInfo]:
    """The provider's clusters; `incomplete` where the last create or apply of one on this machine did not
    finish (gpuctl.ops.unfinished), until a run of it completes."""
    return [replace(c, status="incomplete") if unfinished_step(cloud, c.name) is not None else c
            for c in provider(cloud, options).list_clusters()]
