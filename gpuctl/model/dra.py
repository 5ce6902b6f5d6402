"""Dynamic Resource Allocation as NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1) serves it:
the names every part of gpuctl that speaks DRA shares (stack, sim, tenants, validate, status).

A cluster is in DRA mode when the driver's DeviceClass `gpu.nvidia.com` exists: the driver's chart creates
it (templates/deviceclass-gpu.yaml), whoever installed the chart. GPUs are then claimed through
ResourceClaims, not counted as the device plugin's extended resource. Where gpuctl's driver serves only the node
groups marked `dra: true` the others keep the device plugin: which one serves a node is decided per node
(dra_served), never per cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel, nvml_name
from gpuctl.model.mig import resource_name
from gpuctl.util.errors import UsageError

API_VERSION = "resource.k8s.io/v1"  # GA since Kubernetes 1.34
MIN_KUBERNETES = (1, 34)
DRIVER = "gpu.nvidia.com"  # cmd/gpu-kubelet-plugin/main.go DriverName; also the attributes' domain
GPU_CLASS = "gpu.nvidia.com"  # full GPUs (device type 'gpu')
MIG_CLASS = "mig.nvidia.com"  # pre-made MIG devices (device type 'mig')
DEVICE_CLASSES = (GPU_CLASS, MIG_CLASS)
# The driver's alpha feature gates that let a DRA claim share a GPU, per sharing strategy.
ALPHA_SHARING_GATES = {"time-slicing": "TimeSlicingSettings", "mps": "MPSSupport"}
# The chart's pod label of the kubelet plugin, the per-node agent that publishes a node's ResourceSlice
# (templates/_helpers.tpl selectorLabels: "<chart name>-component: <component>").
PLUGIN_COMPONENT_LABEL = "dra-driver-nvidia-gpu-component"
PLUGIN_COMPONENT = "kubelet-plugin"
# gpuctl's own DeviceClasses, one per MIG profile (mig_device_class), carry this label beside managed-by.
CLASS_KIND_LABEL = "gpuctl.dev/device-class"
MIG_PROFILE_CLASS = "mig-profile"


def check_dra_kubernetes(version: str | None, field: str) -> None:
    """Refuse a Kubernetes version (e.g. EKS --kubernetes-version) that predates resource.k8s.io/v1."""
    found = re.match(r"^v?(\d+)\.(\d+)", version or "")
    if found and (int(found[1]), int(found[2])) < MIN_KUBERNETES:
        raise UsageError(field, f"Kubernetes {version} serves no {API_VERSION}: DRA is GA from "
                         f"{'.'.join(map(str, MIN_KUBERNETES))}", "use 1.34 or later, or leave DRA mode off")


def dra_served(labels: Mapping[str, str], published: bool, everywhere: bool) -> bool:
    """Whether the DRA driver serves a node's GPUs (else the device plugin does), in a cluster where the driver
    exists: the node's devices are in the driver's current slices (`published`: current_slices), or the node
    carries gpuctl.dev/dra=true (a group moved to DRA: its kubelet plugin runs there, ready or not), or the driver
    serves every node (`everywhere`: its kubelet plugin confined to no label). A node of a group left on the device
    plugin has neither: the scheduler serves `nvidia.com/gpu` there from its allocatable (KEP-5004)."""
    return published or labels.get(L.DRA_GROUP) == "true" or everywhere


DEVICES_QUOTA = ".deviceclass.resource.k8s.io/devices"


def quota_key(device_class: str) -> str:
    """The ResourceQuota key that counts devices claimed from `device_class` (KEP-4381, object count quota)."""
    return f"{device_class}{DEVICES_QUOTA}"


def requested_only(quota: Mapping[str, int]) -> dict[str, int]:
    """A tenant's quota (or use) without the keys that count claimed devices per class: what a table shows. Each
    of gpuctl's classes names the extended resource it serves, and Tenant.hard gives its devices the resource's
    own figure, so a DRA-mode team's keys come in twins (gpu.nvidia.com's devices and nvidia.com/gpu)."""
    return {k: v for k, v in quota.items() if not k.endswith(DEVICES_QUOTA)}


def gpu_selector(model: GpuModel) -> str:
    """A CEL device selector for full GPUs of `model`: its NVML name, the driver's `productName` attribute."""
    return f"device.attributes['{DRIVER}'].productName == '{nvml_name(model)}'"


def mig_selector(model: GpuModel, profile: str) -> str:
    """A CEL device selector for MIG devices of `profile` (e.g. 3g.20gb) on `model`'s GPUs."""
    return f"{gpu_selector(model)} && device.attributes['{DRIVER}'].profile == '{profile}'"


def mig_class(profile: str) -> str:
    """gpuctl's DeviceClass of MIG devices of `profile`: `mig-3g.20gb.gpuctl.dev`, `mig-1g.10gb.me.gpuctl.dev` for
    1g.10gb+me (a DNS subdomain has no '+'; the device plugin's resource name without `nvidia.com/`)."""
    return f"{resource_name(profile).removeprefix('nvidia.com/')}.gpuctl.dev"


def mig_device_class(profile: str) -> dict[str, Any]:
    """The DeviceClass that serves an unmodified pod's `nvidia.com/mig-<profile>` through DRA (KEP-5004,
    DRAExtendedResource: GA in Kubernetes 1.37): the driver's MIG devices of `profile`, with the extended
    resource name the device plugin's mixed strategy gives them (mig.resource_name: `+me` spelled `.me`, as an
    extended resource name must be a qualified name; k8s.io/kubernetes v1.37.2 pkg/apis/resource/validation/
    validation.go validateDeviceClassSpec, IsExtendedResourceName). The scheduler then claims one device of it
    per unit requested (pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go
    createResourceRequestAndMappings: ExactCount, the request's quantity) on a node that does not advertise the
    resource itself. `profile` is a catalog name (digits, g, gb, +me): safe to quote in CEL."""
    kind = f"device.attributes['{DRIVER}']"
    return {"apiVersion": API_VERSION, "kind": "DeviceClass",
            "metadata": {"name": mig_class(profile),
                         "labels": {L.MANAGED_BY: L.MANAGER, CLASS_KIND_LABEL: MIG_PROFILE_CLASS}},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}' && {kind}.type == 'mig' && "
                                                          f"{kind}.profile == '{profile}'"}}],
                     "extendedResourceName": resource_name(profile)}}


def mig_profiles_of(models: Iterable[GpuModel]) -> list[str]:
    """The MIG profiles that `models` (the cluster's GPU models) offer, by name: one gpuctl DeviceClass each."""
    return sorted({p.name for m in models if m.mig is not None for p in m.mig.profiles})


def device_request(name: str, device_class: str, selector: str | None = None, count: int = 1) -> dict[str, Any]:
    """One request of a ResourceClaim spec (resource.k8s.io/v1: `exactly`): `count` devices of `device_class`."""
    exactly: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": exactly}


def dra_resource(device_class: str) -> str:
    """Kueue's logical resource for the devices of `device_class`, as the ResourceQuota names them: the
    extended resource full GPUs are served as (DeviceClass gpu.nvidia.com extendedResourceName), else the
    class's devices."""
    return L.GPU_RESOURCE if device_class == GPU_CLASS else quota_key(device_class)


def current_slices(slices: Iterable[Mapping[str, Any]], driver: str = DRIVER) -> list[Mapping[str, Any]]:
    """The ResourceSlices (as JSON) of `driver` that the scheduler allocates from: per pool, the slices of its
    newest generation, once that generation is complete (as many slices as its resourceSliceCount). Slices of
    an older generation are outdated and a pool still being published is incomplete: the scheduler skips both
    (k8s.io/dynamic-resource-allocation/structured/pools.go
    GatherPools: a pool is its driver and name), and so does every count of gpuctl's."""
    pools: dict[str, dict[int, list[Mapping[str, Any]]]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = spec.get("pool") or {}
        pools.setdefault(str(pool.get("name")), {}).setdefault(int(pool.get("generation") or 0), []).append(s)
    current: list[Mapping[str, Any]] = []
    for generations in pools.values():
        newest = generations[max(generations)]
        if len(newest) == int((newest[0]["spec"].get("pool") or {}).get("resourceSliceCount") or 1):
            current += newest
    return current


def slice_devices(slices: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Node -> the devices the GPU driver publishes for it and the scheduler can allocate (current_slices)."""
    devices: dict[str, list[dict[str, Any]]] = {}
    for s in current_slices(slices):
        if node := s["spec"].get("nodeName"):
            devices.setdefault(node, []).extend(s["spec"].get("devices") or [])
    return devices


def device_type(device: Mapping[str, Any]) -> str | None:
    """The driver's `type` attribute of a device: gpu, mig (or vfio)."""
    return ((device.get("attributes") or {}).get("type") or {}).get("string")


KUEUE_MAX_MAPPINGS = 16  # kueue v0.19.2 pkg/config/validation.go validateDeviceClassMappings


def device_class_mappings(profiles: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Kueue Configuration `resources.deviceClassMappings`: each of the driver's DeviceClasses to its logical
    resource, counted in devices (no `sources`: kueue v0.19.2 apis/config/v1beta2 DeviceClassMapping), and
    gpuctl's class of each of `profiles` (the cluster's: mig_profiles_of) to the profile's extended resource.

    A tenant's `mig-<profile>` template claims from gpuctl's class of the profile, and Kueue never admits a
    workload whose template names an unmapped class (pkg/dra/claims.go
    GetResourceRequestsForResourceClaimTemplates: "is not mapped"). Mapped to `nvidia.com/mig-<profile>`, the
    template's claim is charged as that name, and so is a Job asking for `nvidia.com/mig-<profile>` as written
    (pkg/dra/extended_resources.go resolveQuotaKey: a mapped class's logical name, else the extended resource
    name itself): one resource of the team's queue either way. Kueue takes at most 16 mappings
    (KUEUE_MAX_MAPPINGS), fewer than the catalog's profiles: the profiles past the first 14 by name are left
    out (unmapped_profiles), their templates unadmitted by Kueue."""
    driver = [{"name": dra_resource(c), "deviceClassNames": [c]} for c in DEVICE_CLASSES]
    return driver + [{"name": resource_name(p), "deviceClassNames": [mig_class(p)]}
                     for p in sorted(set(profiles))[:KUEUE_MAX_MAPPINGS - len(driver)]]


def unmapped_profiles(profiles: Iterable[str]) -> list[str]:
    """The profiles of `profiles` that device_class_mappings leaves out (past Kueue's limit)."""
    mapped = {n for m in device_class_mappings(profiles) for n in m["deviceClassNames"]}
    return [p for p in sorted(set(profiles)) if mig_class(p) not in mapped]
