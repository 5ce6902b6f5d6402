"""Whether a cluster is in DRA mode (model/dra.py: the names NVIDIA's DRA driver serves)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuctl.kube.client import api_error, is_not_found
from gpuctl.model.dra import GPU_CLASS

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def dra_mode(client: ApiClient) -> bool:
    """True when the cluster serves GPUs through DRA: the driver's DeviceClass gpu.nvidia.com exists."""
    from kubernetes.client import ResourceV1Api

    try:
        ResourceV1Api(client).read_device_class(GPU_CLASS, _preload_content=False).drain_conn()
    except Exception as exc:  # noqa: BLE001
        if is_not_found(exc):  # no such DeviceClass, or (before 1.34) no resource.k8s.io/v1 at all
            return False
        raise api_error(exc, f"reading DeviceClass {GPU_CLASS}") from None
    return True
