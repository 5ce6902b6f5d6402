"""What the sim's DCGM exporter serves, as pure functions: the GPUs and MIG GPU instances of a node, which pod
sits on which of them, and the series NVIDIA's dcgm-exporter would render for them. No I/O; the process that
lists nodes and pods and serves the result is dcgm_exporter.py. Facts and their sources:
docs/research/dcgm-exporter.md (dcgm-exporter 4.6.0-4.8.3, the image GPU Operator v26.7.0 ships).

Which device a pod's container gets is the kubelet's choice among what the device plugin offers, guided by the
plugin's preferred allocation (k8s-device-plugin v0.19.3 internal/rm/allocate.go): a replica of the time-sliced
or MPS GPU with the fewest replicas already taken (distributedAlloc, L27-72), else the lowest free index; MIG
instances by the resource asked for (nvidia.com/mig-<profile>, or nvidia.com/gpu under the single strategy). An
allocation holds while the pod runs (the kubelet's checkpoint): `assign` keeps every earlier one that still fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.model import labels as L
from gpuctl.model.catalog import GpuModel, nvml_name
from gpuctl.model.dra import DRIVER
from gpuctl.model.mig import MigLayout, place, resource_name
from gpuctl.simulator.dra import device_name, gi_profile

# Sim-only pod annotations: the load a pod puts on each GPU (or MIG instance) it was given. A pod without them
# is idle: 0 % and 0 MiB. Values are numbers; anything else reads as 0.
UTILIZATION_ANNOTATION = "sim.gpuctl.dev/gpu-utilization"  # percent of the device it keeps busy, 0-100
MEMORY_ANNOTATION = "sim.gpuctl.dev/gpu-memory-mib"  # framebuffer MiB its processes hold
REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GPU Feature Discovery's, from the device plugin's sharing config


@dataclass(frozen=True)
class Family:
    """One counter of etc/dcp-metrics-included.csv (DCGM field, Prometheus type, help), the file the GPU Operator
    points the exporter at (assets/state-dcgm-exporter/0800_daemonset.yaml DCGM_EXPORTER_COLLECTORS)."""

    name: str
    help: str
    mig: bool  # DCGM reports it for a MIG GPU instance (the *_UTIL fields it does not: dcgm-exporter #216, #430)
    per_process: bool  # internal/pkg/transformation/process_metrics.go isPerProcessMetric: a pod gets its own value


FAMILIES = (
    Family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", mig=False, per_process=True),
    Family("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", mig=True, per_process=False),
    Family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", mig=True, per_process=False),
    Family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", mig=True, per_process=True),
    Family("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", mig=True,
           per_process=False),
)


@dataclass(frozen=True)
class Device:
    """A GPU, or a MIG GPU instance on one (what DCGM calls a GPU_I entity; dcgm-exporter's flex mode, its default
    `-d f`, watches the instances of a GPU with MIG on and not the GPU itself)."""

    node: str
    index: int  # the GPU's index on its node (label gpu; device nvidia<index>)
    uuid: str  # the GPU's UUID (an instance's series carry its parent's)
    pci_bus_id: str  # DCGM's form, 00000000:BB:00.0
    model_name: str  # NVML's device name
    memory_mib: int  # framebuffer of the GPU or the instance
    resource: str  # the extended resource a container asks for to get it
    replicas: int  # containers it takes at once: the time-slicing/MPS replicas, 1 otherwise
    profile: str = ""  # MIG profile of an instance (label GPU_I_PROFILE)
    instance_id: int = -1  # its GPU instance ID (label GPU_I_ID)
    dra_name: str = ""  # the device the sim's DRA driver publishes for it (a ResourceClaim's allocation names it)
    xid: int = 0  # the last XID of the GPU or instance (simulator/xid.py FAULT_XID); 0: none since its reset

    @property
    def key(self) -> str:
        return self.uuid if not self.profile else f"{self.uuid}/{self.instance_id}"


@dataclass(frozen=True)
class Claim:
    """A running container's request for GPUs of one resource, with its pod's load."""

    uid: str
    namespace: str
    pod: str
    container: str
    resource: str
    count: int
    utilization: float  # UTILIZATION_ANNOTATION, 0-100
    memory_mib: float  # MEMORY_ANNOTATION
    created: str = ""  # the pod's creationTimestamp: earlier pods were allocated first
    mapped: bool = True  # the exporter names the pod on the device's series (not for DRA: see render_samples)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.uid, self.container, self.resource


Slot = tuple[str, int]  # (Device.key, replica): one device ID the plugin advertises ("<uuid>::<replica>" if shared)
Assignment = dict[tuple[str, str, str], tuple[Slot, ...]]


def number(text: str | None, high: float | None = None) -> float:
    """An annotation's value as a number >= 0 (at most `high`); 0 for a missing or unreadable one."""
    try:
        value = float(text or 0)
    except ValueError:
        return 0.0
    if value != value or value < 0:  # NaN
        return 0.0
    return min(value, high) if high is not None else value


def pci_bus_id(address: str) -> str:
    """DCGM's PCI bus ID (nvmlPciInfo_t.busId: 8-digit domain, upper case) of a "0000:11:00.0" address."""
    domain, _, rest = address.partition(":")
    return f"{int(domain, 16):08X}:{rest.upper()}"


def instance_id(slots: int, start: int, width: int) -> int:
    """The sim's GPU instance ID of a placement: memory slots numbered as a binary tree, whole GPU 0, halves 1-2,
    quarters 3-6, eighths 7-14 on an 8-slot GPU, as `nvidia-smi mig -lgi` numbers an A100's instances (7g 0,
    3g/4g 1-2, 2g 3-5, 1g 7-13). Unique among the instances of one GPU, since their slots never overlap."""
    return slots // width - 1 + start // width


def node_devices(node: str, model: GpuModel, gpus: int, labels: Mapping[str, str], layout: MigLayout | None,
                 uuid_of: Callable[[str, int], str], address_of: Callable[[int], str]) -> list[Device]:
    """The devices of a node with `gpus` x `model`: each GPU, or with `layout` enabled its MIG instances as
    gpuctl.model.mig.place puts them. `uuid_of(node, index)` and `address_of(index)` are the sim's UUIDs and PCI
    addresses (those its DRA driver publishes)."""
    replicas = max(1, int(number(labels.get(REPLICAS_LABEL), 64)))
    single = labels.get(L.MIG_STRATEGY) == "single"
    devices = []
    for index in range(gpus):
        uuid, address = uuid_of(node, index), pci_bus_id(address_of(index))
        if layout is None or not layout.enabled or model.mig is None:
            devices.append(Device(node, index, uuid, address, nvml_name(model), model.memory_mib, L.GPU_RESOURCE,
                                  replicas, dra_name=device_name(model, index)))
            continue
        for p in place(layout.profiles, model):
            devices.append(Device(node, index, uuid, address, nvml_name(model), gi_profile(model, p.profile).memory_mib,
                                  L.GPU_RESOURCE if single else resource_name(p.profile), 1, p.profile,
                                  instance_id(model.mig.memory_slots, p.start, p.width), device_name(model, index, p)))
    return devices


def assign(devices: list[Device], claims: Iterable[Claim], previous: Mapping[tuple[str, str, str], tuple[Slot, ...]]
           ) -> Assignment:
    """The slots each claim holds: its earlier ones where they still exist and fit (the kubelet keeps a running
    pod's devices), then new ones for the others in the order their pods were created. A claim that cannot be
    served in full (more than the node has: the scheduler would not have bound it) gets nothing."""
    by_key = {d.key: d for d in devices}
    taken: dict[str, set[int]] = {d.key: set() for d in devices}
    result: Assignment = {}
    ordered = sorted(claims, key=lambda c: (c.created, c.namespace, c.pod, c.container, c.resource))
    for claim in ordered:
        slots = previous.get(claim.key, ())
        if len(slots) == claim.count and all(
                d in by_key and by_key[d].resource == claim.resource and r < by_key[d].replicas and r not in taken[d]
                for d, r in slots) and len(set(slots)) == len(slots):
            for d, r in slots:
                taken[d].add(r)
            result[claim.key] = slots
    for claim in ordered:
        if claim.key in result:
            continue
        chosen: list[Slot] = []
        for _ in range(claim.count):
            free = [d for d in devices if d.resource == claim.resource and len(taken[d.key]) < d.replicas]
            if not free:
                break
            # distributedAlloc: the GPU with the fewest replicas taken; the lowest index among equals
            device = min(free, key=lambda d: (len(taken[d.key]), devices.index(d)) if d.replicas > 1
                         else (0, devices.index(d)))
            replica = min(set(range(device.replicas)) - taken[device.key])
            taken[device.key].add(replica)
            chosen.append((device.key, replica))
        if len(chosen) == claim.count:
            result[claim.key] = tuple(chosen)
        else:
            for d, r in chosen:
                taken[d].discard(r)
    return result


def pod_load(pod: Mapping[str, Any]) -> tuple[float, float]:
    """The load a pod declares (the sim's annotations): utilisation 0-100, framebuffer MiB."""
    annotations = pod["metadata"].get("annotations") or {}
    return number(annotations.get(UTILIZATION_ANNOTATION), 100.0), number(annotations.get(MEMORY_ANNOTATION))


def claimed_slots(resource_claims: Sequence[Mapping[str, Any]], pods: Mapping[str, Mapping[str, Any]],
                  devices: list[Device]) -> tuple[list[Claim], Assignment]:
    """The load of pods on the devices ResourceClaims allocated them (driver gpu.nvidia.com, pool = node, device
    = the name the sim's driver publishes), for the running pods a claim is reserved for (`pods` by uid). The
    kubelet hands such a device to the pod as it is: no replica to choose, no pod label on the series
    (Claim.mapped)."""
    by_name = {(d.node, d.dra_name): d for d in devices}
    claims: list[Claim] = []
    assignment: Assignment = {}
    for claim in resource_claims:
        meta, status = claim["metadata"], claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        held = [by_name[key] for r in results if r.get("driver") == DRIVER
                and (key := (r.get("pool", ""), r.get("device", ""))) in by_name]
        for reserved in status.get("reservedFor") or []:
            pod = pods.get(reserved.get("uid", "")) if reserved.get("resource") == "pods" else None
            if pod is None or not held:
                continue
            util, memory = pod_load(pod)
            entry = Claim(pod["metadata"]["uid"], pod["metadata"]["namespace"], pod["metadata"]["name"], "",
                          f"claim:{meta['namespace']}/{meta['name']}", len(held), util, memory,
                          pod["metadata"].get("creationTimestamp") or "", mapped=False)
            claims.append(entry)
            assignment[entry.key] = tuple((d.key, 0) for d in held)
    return claims, assignment


@dataclass(frozen=True)
class Sample:
    family: str
    labels: dict[str, str]
    value: float


def _share(own: float, total: float, cap: float) -> float:
    """A pod's part of a device whose pods ask for `total` together, at most `cap`: its own, scaled down
    with the others' where together they ask for more than the device has."""
    return own if total <= cap or total == 0 else own * cap / total


def render_samples(devices: list[Device], claims: Iterable[Claim], assignment: Assignment,
                   driver_version: str) -> list[Sample]:
    """The series of every device (FAMILIES): dcgm-exporter's labels (internal/pkg/rendermetrics/render_metrics.go
    metricLabels at 4.6.0-4.8.3, with DCGM_FI_DRIVER_VERSION, a `label` counter of the CSV), mapped to pods as its
    pod mapper does with KUBERNETES_VIRTUAL_GPUS=true and DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID=true
    (internal/pkg/transformation/kubernetes.go Process): a device without pods has one series without pod labels;
    a device with pods has, for each family, one series per (pod, container) with the device's value
    (dcgm-exporter #307, #587), except DCGM_FI_DEV_GPU_UTIL and DCGM_FI_DEV_FB_USED, which keep the device's
    series and give each pod series the pod's own value (createPerProcessMetrics, from NVML's per-process
    utilization and memory; #594). A device allocated through a ResourceClaim carries its pods' load but no pod
    labels (Claim.mapped False): the exporter maps DRA devices to pods only with KUBERNETES_ENABLE_DRA, which the
    GPU Operator's ClusterPolicy does not set (v26.7.0 assets/state-dcgm-exporter/0800_daemonset.yaml; its
    ClusterRole, 0210_clusterrole.yaml, does not grant the ResourceSlice reads that mapping needs)."""
    claims_by_key = {c.key: c for c in claims}
    on_device: dict[str, list[tuple[Claim, int]]] = {}
    for key, slots in sorted(assignment.items()):
        for device_key, replica in slots:
            on_device.setdefault(device_key, []).append((claims_by_key[key], replica))
    samples: list[Sample] = []
    for device in devices:
        entries = on_device.get(device.key, [])
        pods = {c.uid: c for c, _ in entries}  # a pod's load counts once per device, whatever its containers
        named = [(c, r) for c, r in entries if c.mapped]
        want_util = sum(c.utilization for c in pods.values())
        want_memory = sum(c.memory_mib for c in pods.values())
        util = min(100.0, want_util)
        used = min(float(device.memory_mib), want_memory)
        values = {"DCGM_FI_DEV_GPU_UTIL": round(util), "DCGM_FI_DEV_XID_ERRORS": device.xid,
                  "DCGM_FI_DEV_FB_FREE": device.memory_mib - round(used), "DCGM_FI_DEV_FB_USED": round(used),
                  "DCGM_FI_PROF_GR_ENGINE_ACTIVE": util / 100}
        base = {"gpu": str(device.index), "UUID": device.uuid, "pci_bus_id": device.pci_bus_id,
                "device": f"nvidia{device.index}", "modelName": device.model_name}
        if device.profile:
            base |= {"GPU_I_PROFILE": device.profile, "GPU_I_ID": str(device.instance_id)}
        base |= {"hostname": device.node, "DCGM_FI_DRIVER_VERSION": driver_version}
        for family in FAMILIES:
            if device.profile and not family.mig:
                continue
            if not named or family.per_process:
                samples.append(Sample(family.name, dict(base), values[family.name]))
            for claim, replica in named:
                value: float = values[family.name]
                if family.name == "DCGM_FI_DEV_GPU_UTIL":
                    value = round(_share(claim.utilization, want_util, 100.0))
                elif family.name == "DCGM_FI_DEV_FB_USED":
                    value = round(_share(claim.memory_mib, want_memory, float(device.memory_mib)))
                pod = {"pod": claim.pod, "namespace": claim.namespace, "container": claim.container,
                       "pod_uid": claim.uid}
                if device.replicas > 1:  # a shared device's ID is <uuid>::<replica> (kubernetes.go getSharedGPU)
                    pod["vgpu"] = str(replica)
                samples.append(Sample(family.name, base | pod, value))
    return samples
