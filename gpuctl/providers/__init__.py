"""Providers behind one Protocol; each is imported only when chosen (cloud SDKs are heavy)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from gpuctl.model.cloud_options import CloudOptions, check_options
from gpuctl.util.errors import UsageError

if TYPE_CHECKING:
    from gpuctl.model.capabilities import Capabilities
    from gpuctl.providers.base import Provider

# cloud name -> "module:class"; only clouds that work are listed.
PROVIDERS: dict[str, str] = {
    "sim": "gpuctl.providers.sim.provider:SimProvider",
    "openstack": "gpuctl.providers.openstack.provider:MagnumProvider",
    "eks": "gpuctl.providers.eks.provider:EksProvider",
}


def check_cloud(cloud: str, field: str = "--cloud") -> str:
    """Return `cloud` if a provider exists for it, else raise a UsageError naming `field`."""
    if cloud not in PROVIDERS:
        raise UsageError(field, f"unknown cloud {cloud!r}", f"use one of: {', '.join(PROVIDERS)}")
    return cloud


def capabilities_of(cloud: str) -> Capabilities:
    """What the provider of `cloud` offers, read from its package without loading the provider (or its SDK)."""
    return import_module(PROVIDERS[check_cloud(cloud)].split(":")[0].rpartition(".")[0]).CAPABILITIES


def get_provider(cloud: str, options: CloudOptions | None = None, field: str = "--cloud") -> Provider:
    """Instantiate the provider for `cloud` (importing its SDK only now) with its options."""
    module, cls = PROVIDERS[check_cloud(cloud, field)].split(":")
    return getattr(import_module(module), cls)(check_options(cloud, options or CloudOptions()))
