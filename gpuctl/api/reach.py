"""How the API's functions reach what they act on: a cluster through a ClusterTarget (None: the current context of
the default kubeconfig, as kubectl does), a cloud through its provider with its credentials checked."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.kube.kube import Kube
from gpuctl.model.target import DEFAULT_TARGET, ClusterTarget
from gpuctl.providers import get_provider

if TYPE_CHECKING:
    from gpuctl.model.cloud_options import CloudOptions
    from gpuctl.providers.base import Provider


def client(target: ClusterTarget | None) -> Kube:
    target = target or DEFAULT_TARGET
    return Kube.connect(target.kubeconfig, target.context)


def provider(cloud: str, options: CloudOptions | None) -> Provider:
    found = get_provider(cloud, options)
    found.check_credentials()
    return found
