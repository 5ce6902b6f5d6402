"""ResourceSlices of the sim's GPU nodes, as NVIDIA's DRA driver would publish them.

On a real node the kubelet plugin of kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 (cmd/gpu-kubelet-plugin)
enumerates the GPUs with NVML and publishes one ResourceSlice; the kube-scheduler allocates ResourceClaims
from it. A sim node has no GPU and no kubelet, so gpuctl publishes the slice the plugin would: the
scheduler's allocation is real, only the publisher is imitated. Citations are paths in that repository at
tag v0.4.1, where not said otherwise:
- one slice per node, pool = node name, every device of the node in it, DynamicMIG off (its default,
  pkg/featuregates/featuregates.go:116-122): cmd/gpu-kubelet-plugin/driver.go:473-486 publishResources;
- what the slice object looks like: the ResourceSlice controller the plugin publishes through,
  vendor/k8s.io/dynamic-resource-allocation/resourceslice/resourceslicecontroller.go:763-887 and
  kubeletplugin/draplugin.go:900-913 (the Node is the owner);
- a full GPU: deviceinfo.go:106-108 (name), 152-207 (attributes, capacity), partitions.go:34-43 (memory);
- MIG devices instead of their GPU when MIG is on (static MIG, made by the MIG manager): nvlib.go:291-331;
  each one: deviceinfo.go:209-232, mig.go:111-114 (name), 118-135 (capacity), 139-185 (attributes);
- NVML values as go-nvlib v0.11.0 turns them into strings (vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/
  device/device.go:74-212) and the driver's semver parse (Masterminds/semver v3.5.0, CoerceNewVersion).

When the slices exist is the kubelet plugin's life on the node (sync_plugin_slices, run by the sim operator):
- the plugin publishes its node's slice once it starts: NewDriver enumerates the GPUs (NewDeviceState) and
  ends with publishResources (cmd/gpu-kubelet-plugin/driver.go:70-179, 455-492). With DynamicMIG off it
  watches nothing after that (it republishes only on NVML health events and, with PassthroughSupport,
  after a prepare: driver.go:404-410, 442-449, 496-566), so on a real node a new MIG layout reaches the slice
  when the plugin restarts. The sim follows the applied layout at once, as after that restart;
- its slices go when the plugin goes: the kubelet deletes the driver's slices of the node once no plugin
  of the driver is registered (Kubernetes v1.36.3 pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go:208-260
  wipeResourceSlices, 476-511 sync), 30 s later (pkg/kubelet/cm/dra/manager.go:72 defaultWipingDelay) so
  that a restarting plugin keeps them. The sim has no registration to wait for: it deletes them at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpuctl.kube.errors import requesting
from gpuctl.kube.gpu_nodes import model_of
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.nodes import WORKERS
from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel, nvml_name
from gpuctl.model.change import Change
from gpuctl.model.dra import API_VERSION, DRIVER, PLUGIN_COMPONENT, PLUGIN_COMPONENT_LABEL
from gpuctl.model.mig import MigLayout, Placement, layout_of_config_name, place
from gpuctl.simulator.nodes import CUDA_VERSION, DRIVER_VERSION
from gpuctl.util.errors import ClusterError

log = logging.getLogger("gpuctl.sim.dra")

# NVML_BRAND_NVIDIA as go-nvlib device.go:142-143 spells it; the brand go-nvml's mock data-centre GPUs report
# (pkg/nvml/mock/gpus/a100.go:28 and the others)
BRAND = "Nvidia"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"  # vendor/k8s.io/dynamic-resource-allocation/deviceattribute/
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"  # attribute.go:32,39
_UUIDS = uuid.UUID("6f1c3c1e-5d3a-4f43-9a43-6d2b1f7a0c11")  # namespace of the sim's GPU and MIG UUIDs
# On a Node: the uid of the kubelet-plugin pod registered there (the sim's record of the kubelet's plugin
# registration; a node without it never had a plugin, and sync_plugin_slices leaves its slices alone).
PLUGIN_ANNOTATION = "sim.gpuctl.dev/dra-kubelet-plugin"
PLUGIN_SELECTOR = f"{PLUGIN_COMPONENT_LABEL}={PLUGIN_COMPONENT}"
# On a Node: the taints its kubelet plugin's health monitor put on its devices, JSON {"plugin": <pod uid>,
# "taints": {<device>: <taint>}} (dra_health.py); render_node_slice publishes them on the devices.
TAINTS_ANNOTATION = "sim.gpuctl.dev/dra-device-taints"


@dataclass(frozen=True)
class GiProfile:
    """The nvml.GpuInstanceProfileInfo fields the driver publishes for a MIG device (mig.go:118-135)."""

    id: int  # the profile ID NVML reports (nvidia-smi mig -lgip), part of the device name
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int


# Per catalog model, one row per MIG profile in the catalog's order: (SMs, copy engines, decoders, encoders,
# JPEG, OFA, memory MiB). The H100 and H200 rows are NVML's own (nvmlDeviceGetGpuInstanceProfileInfo on a real
# H100 80GB HBM3 and H200, driver 580.159.04: tests/readings/nvidia-smi-*.txt, which a unit test compares).
# The others are from the mock GPUs of github.com/NVIDIA/go-nvml (pkg/nvml/mock/gpus/{a100,a30,b200}.go at
# 2f9e261); the B200 mock's figures are approximations (see shared/reference/gpu-facts.md). Those mocks
# number profiles by NVML's profile index (GPU_INSTANCE_PROFILE_*); the IDs a real GPU reports are NVIDIA's
# MIG user guide's (`nvidia-smi mig -lgip`), as in the driver's own examples gpu-1-mig-2g47gb-14-0 and
# gpu-2-mig-1g24gb-19-0 (device_state.go:523, partitions.go:142), and as the readings show.
_EIGHT_SLOT_IDS = (19, 20, 15, 14, 9, 5, 0)  # 1g, 1g+me, 1g double memory, 2g, 3g, 4g, 7g
_A30_IDS = (14, 21, 5, 6, 0)  # 1g.6gb, 1g.6gb+me, 2g.12gb, 2g.12gb+me, 4g.24gb
_GI_ROWS: dict[str, tuple[tuple[int, ...], tuple[tuple[int, int, int, int, int, int, int], ...]]] = {
    "a100-40gb": (_EIGHT_SLOT_IDS, ((14, 1, 0, 0, 0, 0, 4864), (14, 1, 1, 0, 1, 1, 4864), (14, 1, 1, 0, 0, 0, 9856),
                                    (28, 2, 1, 0, 0, 0, 9856), (42, 3, 2, 0, 0, 0, 19968),
                                    (56, 4, 2, 0, 0, 0, 19968), (98, 7, 5, 0, 1, 1, 40192))),
    "a100-80gb": (_EIGHT_SLOT_IDS, ((14, 1, 1, 0, 0, 0, 9856), (14, 1, 1, 0, 1, 1, 9856), (14, 1, 1, 0, 0, 0, 19968),
                                    (28, 2, 1, 0, 0, 0, 19968), (42, 3, 2, 0, 0, 0, 40192),
                                    (56, 4, 2, 0, 0, 0, 40192), (98, 7, 5, 0, 1, 1, 80384))),
    "a30": (_A30_IDS, ((14, 1, 0, 0, 0, 0, 5836), (14, 1, 1, 0, 1, 1, 5836), (28, 2, 2, 0, 0, 0, 11672),
                       (28, 2, 2, 0, 1, 1, 11672), (56, 4, 4, 0, 1, 1, 23344))),
    "h100-80gb": (_EIGHT_SLOT_IDS, ((16, 1, 1, 0, 1, 0, 9984), (16, 1, 1, 0, 1, 1, 9984), (26, 1, 1, 0, 1, 0, 20096),
                                    (32, 2, 2, 0, 2, 0, 20096), (60, 3, 3, 0, 3, 0, 40448),
                                    (64, 4, 4, 0, 4, 0, 40448), (132, 8, 7, 0, 7, 1, 81152))),
    "h200": (_EIGHT_SLOT_IDS, ((16, 1, 1, 0, 1, 0, 16384), (16, 1, 1, 0, 1, 1, 16384), (26, 1, 1, 0, 1, 0, 33280),
                               (32, 2, 2, 0, 2, 0, 33280), (60, 3, 3, 0, 3, 0, 71424),
                               (64, 4, 4, 0, 4, 0, 71424), (132, 8, 7, 0, 7, 1, 143360))),
    "b200": (_EIGHT_SLOT_IDS, ((18, 1, 1, 0, 0, 0, 23552), (18, 1, 1, 1, 1, 1, 23552), (18, 1, 1, 0, 0, 0, 46080),
                               (36, 2, 2, 1, 1, 1, 46080), (54, 3, 3, 2, 2, 2, 92160),
                               (72, 4, 4, 2, 2, 2, 92160), (126, 7, 7, 4, 4, 4, 184320))),
}
# The API server's names.SimpleNameGenerator: generateName cut to 58 characters, then 5 random ones.
_NAME_BASE_MAX = 58
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def gi_profile(model: GpuModel, profile: str) -> GiProfile:
    """NVML's GPU instance profile info of `profile` on `model`; KeyError for a profile it does not have."""
    ids, rows = _GI_ROWS[model.name]
    names = [p.name for p in model.mig.profiles] if model.mig else []
    if profile not in names:
        raise KeyError(f"{model.name} has no MIG profile {profile}")
    index = names.index(profile)
    return GiProfile(ids[index], *rows[index])


def _semver(text: str) -> str:
    """semver.MustParse(text).String() with Masterminds' CoerceNewVersion: "570.172.08" -> "570.172.8"."""
    parts = [int(p) for p in text.split(".")] + [0, 0]
    return ".".join(map(str, parts[:3]))


def _quantity(value: int) -> str:
    """resource.NewQuantity(value, resource.BinarySI) in its canonical form: 42949672960 -> "40Gi"."""
    for suffix, shift in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if value and value % (1 << shift) == 0:
            return f"{value >> shift}{suffix}"
    return str(value)


def _rfc1123(name: str) -> str:
    """mig.go:247-260 toRFC1123Compliant."""
    name = re.sub(r"[^a-z0-9-.]", "-", name.lower()).strip("-")
    return name.removesuffix(".")[:253]


def gpu_uuid(node: str, index: int) -> str:
    """A GPU's NVML UUID (GPU-xxxxxxxx-xxxx-...), stable for one node and GPU index."""
    return f"GPU-{uuid.uuid5(_UUIDS, f'{node}/{index}')}"


def mig_uuid(node: str, index: int, profile_id: int, start: int) -> str:
    """A MIG device's NVML UUID (MIG-xxxxxxxx-...), stable for one placement on one GPU."""
    return f"MIG-{uuid.uuid5(_UUIDS, f'{node}/{index}/{profile_id}/{start}')}"


def _pci(index: int) -> tuple[str, str]:
    """(PCI bus ID, PCIe root complex) of GPU `index`: two GPUs behind each root, as on 8-GPU servers."""
    root = 0x10 * (index // 2 + 1)
    return f"0000:{root + 1 + index % 2:02x}:00.0", f"pci0000:{root:02x}"


def pci_address(index: int) -> str:
    """GPU `index`'s PCI address as the DRA driver publishes it (the sim's DCGM exporter reports the same GPU)."""
    return _pci(index)[0]


def _common_attributes(model: GpuModel, index: int) -> dict[str, dict[str, str]]:
    """What a GPU and its MIG devices share: deviceinfo.go:152-189, mig.go:139-182. addressingMode is left
    out, as the driver leaves it out where NVML gives no mode (nvlib.go:519-530, go-nvlib device.go:153-166):
    the sim plays PCIe GPUs in x86 servers, not coherent (ATS) Grace systems."""
    major, minor = model.compute_capability
    bus_id, root = _pci(index)
    return {
        "productName": {"string": nvml_name(model)},
        "brand": {"string": BRAND},
        "architecture": {"string": model.family.replace("-", " ").title()},  # ada-lovelace -> "Ada Lovelace"
        "cudaComputeCapability": {"version": _semver(f"{major}.{minor}")},
        "driverVersion": {"version": _semver(DRIVER_VERSION)},
        "cudaDriverVersion": {"version": _semver(".".join(map(str, CUDA_VERSION)))},
        PCI_BUS_ID: {"string": bus_id},
        PCIE_ROOT: {"string": root},
    }


def device_name(model: GpuModel, index: int, placement: Placement | None = None) -> str:
    """The name the driver publishes GPU `index` under (deviceinfo.go:200-207 CanonicalName), or a MIG device
    at `placement` on it (deviceinfo.go:209-232): what a ResourceClaim's allocation names."""
    if placement is None:
        return f"gpu-{index}"
    info = gi_profile(model, placement.profile)
    return f"gpu-{index}-mig-{_rfc1123(placement.profile.replace('.', ''))}-{info.id}-{placement.start}"


def render_gpu_device(node: str, model: GpuModel, index: int) -> dict[str, Any]:
    """A full GPU: deviceinfo.go:200-207 GetDevice. The minor number is the index, as /dev/nvidia<N>."""
    return {
        "name": device_name(model, index),
        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid(node, index)},
                       **_common_attributes(model, index)},
        "capacity": {"memory": {"value": _quantity(model.memory_mib << 20)}},
    }


def render_mig_devices(node: str, model: GpuModel, index: int, layout: MigLayout) -> list[dict[str, Any]]:
    """The MIG devices of `layout` on GPU `index`, placed as gpuctl.model.mig.place puts them
    (deviceinfo.go:209-232)."""
    devices = []
    for placement in place(layout.profiles, model):
        info = gi_profile(model, placement.profile)
        capacity = {
            "multiprocessors": info.multiprocessors, "copyEngines": info.copy_engines, "decoders": info.decoders,
            "encoders": info.encoders, "jpegEngines": info.jpeg_engines, "ofaEngines": info.ofa_engines,
            "memory": info.memory_mib << 20,
            **{f"memorySlice{s}": 1 for s in range(placement.start, placement.start + placement.width)},
        }
        devices.append({
            "name": device_name(model, index, placement),
            "attributes": {"type": {"string": "mig"},
                           "uuid": {"string": mig_uuid(node, index, info.id, placement.start)},
                           "parentUUID": {"string": gpu_uuid(node, index)}, "profile": {"string": placement.profile},
                           **_common_attributes(model, index)},
            "capacity": {k: {"value": _quantity(v)} for k, v in capacity.items()},
        })
    return devices


def render_devices(node: str, model: GpuModel, gpus: int, layout: MigLayout | None = None) -> list[dict[str, Any]]:
    """Every device of a node with `gpus` x `model`, `layout` on each GPU (None or all-disabled: MIG off).

    With MIG on, a GPU is no device of its own, only its MIG devices are; a GPU with MIG on and no MIG
    device (all-enabled) publishes nothing (nvlib.go:302-324). The driver appends devices in Go map order
    (driver.go:475-480); they are sorted here by GPU, then name, so that a republish changes nothing.
    """
    devices: list[dict[str, Any]] = []
    for index in range(gpus):
        if layout is None or not layout.enabled:
            devices.append(render_gpu_device(node, model, index))
        else:
            devices += sorted(render_mig_devices(node, model, index, layout), key=lambda d: d["name"])
    return devices


def slice_name(node: str) -> str:
    """The slice's name: the ResourceSlice controller's generateName `<index>-<driver>-<node>-`
    (resourceslicecontroller.go:864-871, index as 5 hex digits: :76, :1101-1132) and, in place of the API
    server's 5 random characters, 5 derived from the node name, so that gpuctl can apply it by name."""
    base = f"{0:05x}-{DRIVER}-{node}-"[:_NAME_BASE_MAX]
    digest = int.from_bytes(hashlib.sha256(node.encode()).digest()[:8], "big")
    suffix = ""
    for _ in range(5):
        digest, rest = divmod(digest, len(_NAME_ALPHABET))
        suffix += _NAME_ALPHABET[rest]
    return base + suffix


def render_slice(node: str, node_uid: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    """The ResourceSlice of a node's pool: owned by the Node (it goes with it), generation 1 as the
    controller leaves a one-slice pool (resourceslicecontroller.go:795-810, 852-887)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node),
            "labels": {L.MANAGED_BY: L.MANAGER},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                                 "controller": True}],
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def node_layout(labels: Mapping[str, str], model: GpuModel) -> MigLayout | None:
    """The MIG layout the MIG manager has applied to the node's GPUs: its nvidia.com/mig.config once
    nvidia.com/mig.config.state is success; None otherwise (MIG off). ValueError for a config name that
    is no layout of `model` (a hashed name over the label limit cannot be read back)."""
    name = labels.get(L.MIG_CONFIG)
    if not name or labels.get(L.MIG_STATE) != "success" or model.mig is None:
        return None
    return layout_of_config_name(name, model)


def render_node_slice(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ResourceSlice of a Node (as JSON) from its labels: GPU model (gpuctl.dev/gpu, else GFD's
    product), physical GPUs (gpuctl.dev/gpus-per-node, else nvidia.com/gpu.count), applied MIG layout.
    None for a node without GPUs. ValueError for an unreadable MIG config label."""
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    model = model_of(labels)
    count = labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or "0"
    if model is None or not count.isdigit() or int(count) == 0:
        return None
    devices = render_devices(meta["name"], model, int(count), node_layout(labels, model))
    taints = _recorded_taints(meta.get("annotations") or {})
    for device in devices:
        if device["name"] in taints:
            device["taints"] = [taints[device["name"]]]  # driver.go:522-533: dev.Taints() on the published device
    return render_slice(meta["name"], meta["uid"], devices)


def _recorded_taints(annotations: Mapping[str, str]) -> dict[str, dict[str, str]]:
    try:
        record = json.loads(annotations.get(TAINTS_ANNOTATION) or "{}")
    except ValueError:
        return {}
    taints = record.get("taints") if isinstance(record, dict) else None
    return taints if isinstance(taints, dict) else {}


def _taints_of(slice_: Mapping[str, Any]) -> dict[str, list[tuple[str, str, str]]]:
    """Device -> its taints (key, value, effect): what _covers cannot see go (the server adds timeAdded)."""
    return {d["name"]: [(t.get("key"), t.get("value", ""), t.get("effect")) for t in d.get("taints") or []]
            for d in (slice_.get("spec") or {}).get("devices") or []}


def _covers(observed: Any, desired: Any) -> bool:
    """True when `observed` (as the server returns it) holds everything `desired` sets."""
    if isinstance(desired, dict):
        return isinstance(observed, dict) and all(k in observed and _covers(observed[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(observed, list) and len(observed) == len(desired) and all(
            _covers(o, d) for o, d in zip(observed, desired, strict=True))
    return bool(observed == desired)


def publish_slices(kube: Kube, nodes: Iterable[Mapping[str, Any]] | None = None) -> Change:
    """Make the slices of `nodes` (Nodes as JSON; None: every node, and slices of nodes that are gone
    are removed too) what the driver would publish: server-side apply (field manager gpuctl) where a
    slice differs or is missing, delete where a node has no GPUs (any more). One LIST, then one write
    per slice that differs: a converged cluster costs no write."""
    every = nodes is None
    node_list = kube.list("v1", "Node", what="listing nodes") if nodes is None else list(nodes)
    existing = {s.name: s for s in kube.list(API_VERSION, "ResourceSlice", labels=f"{L.MANAGED_BY}={L.MANAGER}",
                                             fields=f"spec.driver={DRIVER}", what="listing ResourceSlices")}
    desired: dict[str, dict[str, Any]] = {}
    touched: set[str] = set()
    for node in node_list:
        name = node["metadata"]["name"]
        touched.add(name)
        try:
            body = render_node_slice(node)
        except ValueError as exc:
            raise ClusterError(f"node {name}: {exc}", "set a MIG layout gpuctl wrote (gpuctl mig apply)") from None
        if body is not None:
            desired[body["metadata"]["name"]] = body
    # (items of a LIST carry no apiVersion and kind: compare what the slice says)
    applies = [b for n, b in desired.items()
               if n not in existing or not _covers(existing[n], {k: b[k] for k in ("metadata", "spec")})
               or _taints_of(existing[n]) != _taints_of(b)]
    deletes = sorted(n for n, s in existing.items() if n not in desired
                     and (every or s["spec"].get("nodeName") in touched))

    def apply(body: dict[str, Any]) -> None:
        kube.apply(body)

    def delete(name: str) -> None:
        kube.delete(API_VERSION, "ResourceSlice", name)  # (gone already: the garbage collector took it with its Node)

    with requesting("publishing ResourceSlices"), ThreadPoolExecutor(max_workers=WORKERS) as pool:
        list(pool.map(apply, applies))
        list(pool.map(delete, deletes))
    if not applies and not deletes:
        return Change.NO_CHANGE
    if not deletes and all(b["metadata"]["name"] not in existing for b in applies):
        return Change.CREATED
    return Change.DELETED if not applies else Change.UPDATED


def running_plugins(pods: Iterable[KubeObject]) -> dict[str, str]:
    """Node name -> uid of the kubelet-plugin pod Running there (Pods of the chart's kubelet-plugin
    DaemonSet, any namespace); a pod being deleted is shutting its plugin down and does not count."""
    running: dict[str, str] = {}
    for pod in pods:
        node = pod.spec.get("nodeName")
        if node and pod.status.get("phase") == "Running" and not pod.deleting:
            running.setdefault(node, pod.uid)
    return running


def sync_plugin_slices(kube: Kube, nodes: list[KubeObject], running_pods: list[KubeObject]) -> Change:
    """The DRA driver's kubelet plugin on each of `nodes`, played from the cluster's Running pods: where a pod of
    its DaemonSet runs (any namespace, PLUGIN_SELECTOR), the node's slice is published (publish_slices); where
    one ran and none runs any more, the driver's slices of that node are deleted as the kubelet wipes them.
    Nodes where no plugin ever ran are left alone. A converged cluster costs one LIST (the slices), no write."""
    running = running_plugins(p for p in running_pods if p.matches(PLUGIN_SELECTOR))
    served, gone = [], []
    for node in nodes:
        registered = node.annotations.get(PLUGIN_ANNOTATION)
        if node.name in running:
            try:
                render_node_slice(node)
            except ValueError as exc:  # the real plugin enumerates the hardware; the sim cannot read the label
                log.warning("node %s: %s; its slice is left as it is", node.name, exc)
                continue
            served.append(node)
            if registered != running[node.name]:
                kube.patch("v1", "Node", node.name,
                           {"metadata": {"annotations": {PLUGIN_ANNOTATION: running[node.name]}}})
        elif registered is not None:
            gone.append(node.name)
    change = publish_slices(kube, served) if served else Change.NO_CHANGE
    for name in gone:
        with requesting(f"deleting the ResourceSlices of node {name}"):
            kube.delete_all(API_VERSION, "ResourceSlice", fields=f"spec.nodeName={name},spec.driver={DRIVER}")
        kube.patch("v1", "Node", name, {"metadata": {"annotations": {PLUGIN_ANNOTATION: None}}})
        change = Change.DELETED if change is Change.NO_CHANGE else Change.UPDATED
    return change
