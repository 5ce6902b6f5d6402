"""Whether a cluster is in DRA mode, and the ResourceSlices its GPU driver publishes (model/dra.py: the names
NVIDIA's DRA driver serves, and which slices count)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.listing import list_items
from gpuctl.model.dra import DRIVER, GPU_CLASS

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def dra_mode(client: ApiClient) -> bool:
    """True when the cluster serves GPUs through DRA: the driver's DeviceClass gpu.nvidia.com exists."""
    from kubernetes.client import ResourceV1Api

    try:
        with requesting(f"reading DeviceClass {GPU_CLASS}"):
            ResourceV1Api(client).read_device_class(GPU_CLASS, _preload_content=False).drain_conn()
    except KubeNotFound:  # no such DeviceClass, or (before 1.34) no resource.k8s.io/v1 at all
        return False
    return True


def list_slices(client: ApiClient) -> list[dict[str, Any]]:
    """The GPU driver's ResourceSlices (as JSON), every generation: model/dra.py current_slices keeps those the
    scheduler allocates from. KubeNotFound where the cluster serves no resource.k8s.io/v1."""
    return list_items(client, "/apis/resource.k8s.io/v1/resourceslices", "listing ResourceSlices",
                      fieldSelector=f"spec.driver={DRIVER}")


def list_claims(client: ApiClient) -> list[dict[str, Any]]:
    """Every ResourceClaim (as JSON). KubeNotFound where the cluster serves no resource.k8s.io/v1."""
    return list_items(client, "/apis/resource.k8s.io/v1/resourceclaims", "listing ResourceClaims")
