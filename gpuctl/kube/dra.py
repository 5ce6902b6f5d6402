"""Whether a cluster is in DRA mode, and the ResourceSlices its GPU driver publishes (model/dra.py: the names
NVIDIA's DRA driver serves, and which slices count)."""

from __future__ import annotations

from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.dra import API_VERSION, DRIVER, GPU_CLASS


def dra_mode(kube: Kube) -> bool:
    """True when the cluster serves GPUs through DRA: the driver's DeviceClass gpu.nvidia.com exists."""
    try:
        kube.get(API_VERSION, "DeviceClass", GPU_CLASS)
    except KubeNotFound:  # no such DeviceClass, or (before 1.34) no resource.k8s.io/v1 at all
        return False
    return True


def list_slices(kube: Kube) -> list[KubeObject]:
    """The GPU driver's ResourceSlices (as JSON), every generation: model/dra.py current_slices keeps those the
    scheduler allocates from. KubeNotFound where the cluster serves no resource.k8s.io/v1."""
    return kube.list(API_VERSION, "ResourceSlice", fields=f"spec.driver={DRIVER}", what="listing ResourceSlices")


def list_claims(kube: Kube) -> list[KubeObject]:
    """Every ResourceClaim (as JSON). KubeNotFound where the cluster serves no resource.k8s.io/v1."""
    return kube.list(API_VERSION, "ResourceClaim", what="listing ResourceClaims")
