"""Providers behind one Protocol; each is imported only when chosen (cloud SDKs are heavy)."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from gpuctl.model.cloud_options import CLOUD, CloudOptions, check_options

if TYPE_CHECKING:
    from gpuctl.model.capabilities import Capabilities
    from gpuctl.model.spec import PlatformSpec
    from gpuctl.providers.base import Provider

# cloud name -> "module:class"; only clouds that work are listed.
PROVIDERS: dict[str, str] = {
    "sim": "gpuctl.providers.sim.provider:SimProvider",
    "openstack": "gpuctl.providers.openstack.provider:MagnumProvider",
    "eks": "gpuctl.providers.eks.provider:EksProvider",
}


def check_cloud(cloud: str, field: str = "--cloud") -> str:
    """`cloud` in its canonical spelling (any case: model.cloud_options.CLOUD, as a spec reads it), where a
    provider exists for it; else a UsageError naming `field`, with the cloud meant by a near miss."""
    return CLOUD.check(cloud, field)


def capabilities_of(cloud: str) -> Capabilities:
    """What the provider of `cloud` offers, read from its package without loading the provider (or its SDK)."""
    return import_module(PROVIDERS[check_cloud(cloud)].split(":")[0].rpartition(".")[0]).CAPABILITIES


def get_provider(cloud: str, options: CloudOptions | None = None, field: str = "--cloud") -> Provider:
    """Instantiate the provider for `cloud` (importing its SDK only now) with its options."""
    module, cls = PROVIDERS[check_cloud(cloud, field)].split(":")
    return getattr(import_module(module), cls)(check_options(cloud, options or CloudOptions()))


def karpenter_objects(spec: PlatformSpec) -> list[dict[str, Any]]:
    """The Karpenter objects apply writes for `spec` (its cloud's node class, a NodePool per node group and a
    NodeOverlay per sharing group), from the module its provider's cluster_steps call too; [] without Karpenter.
    Loads neither the provider nor its SDK."""
    if not spec.options.karpenter:
        return []
    # lazy seam: only the chosen cloud's provider package loads (`render` of an eks spec needs no simulator)
    if spec.cloud == "eks":
        from gpuctl.providers.eks.karpenter import karpenter_objects as eks_objects  # lazy seam: see above

        return eks_objects(spec, spec.options)
    from gpuctl.providers.sim.karpenter import karpenter_objects as sim_objects  # lazy seam: check_options: eks/sim

    return sim_objects(spec)
