"""`gpuctl status`: one row per GPU node, the facts a platform team asks first.

In DRA mode (gpuctl.kube.dra.dra_mode) a node's GPUs are the devices the DRA driver's kubelet plugin publishes
in the node's ResourceSlice, and what is in use is what the scheduler allocated to ResourceClaims; each
row then also says `kubelet_plugin`, `devices`, `allocated` and `free`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuctl.kube.dra import dra_mode, list_claims, list_slices
from gpuctl.kube.gpu_nodes import gpu_nodes, gpu_resources, nodegroup_of
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.dra import DRIVER, PLUGIN_COMPONENT, PLUGIN_COMPONENT_LABEL, device_type, slice_devices
from gpuctl.model.taints import node_taint

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from gpuctl.stack.existing import Operator

COLUMNS = ("node", "nodegroup", "product", "gpus", "sharing", "replicas", "mig_config", "mig_state",
           "device_plugin", "allocatable", "taints")
# DRA mode: sharing and allocatable are the device plugin's; the driver's devices and claims instead
DRA_COLUMNS = ("node", "nodegroup", "product", "gpus", "mig_config", "mig_state", "kubelet_plugin", "devices",
               "allocated", "free", "taints")
PLUGIN_SELECTOR = f"app={L.DEVICE_PLUGIN_APP}"  # the operator's device-plugin pods
DRA_PLUGIN_SELECTOR = f"{PLUGIN_COMPONENT_LABEL}={PLUGIN_COMPONENT}"  # the DRA driver's kubelet-plugin pods


@dataclass(frozen=True)
class NodeDevices:
    """A node's GPU devices in DRA mode: those its slices publish, and the names of those allocated."""

    devices: tuple[dict[str, Any], ...]
    allocated: frozenset[str]

    @property
    def names(self) -> frozenset[str]:
        return frozenset(d["name"] for d in self.devices)

    @property
    def free(self) -> int:
        return len(self.names - self.allocated)

    @property
    def in_use(self) -> int:
        """Allocated devices that the slices still publish (an allocation can outlive its device)."""
        return len(self.names & self.allocated)

    @property
    def mig_only(self) -> bool:
        """True when every device is a MIG device (the driver's `type` attribute), none a full GPU."""
        return bool(self.devices) and all(device_type(d) == "mig" for d in self.devices)


def claim_allocations(claims: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Pool (the node, for the GPU driver) -> names of the GPU driver's devices allocated to ResourceClaims
    (as JSON). A result with adminAccess holds no device (others can be allocated it too) and is skipped."""
    allocated: dict[str, set[str]] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") == DRIVER and not result.get("adminAccess"):
                allocated.setdefault(result["pool"], set()).add(result["device"])
    return allocated


def read_node_devices(kube: Kube) -> dict[str, NodeDevices]:
    """Node -> its devices and allocations, from one LIST of ResourceSlices and one of ResourceClaims."""
    slices, claims = list_slices(kube), list_claims(kube)
    published, allocated = slice_devices(slices), claim_allocations(claims)
    return {node: NodeDevices(tuple(devices), frozenset(allocated.get(node, ())))
            for node, devices in published.items()}


def plugin_state(pod: KubeObject | None) -> str:
    """`ready`, `missing`, or why the node's device-plugin pod is not serving (e.g. CrashLoopBackOff: <error>)."""
    if pod is None:
        return "missing"
    for status in pod.status.get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting is not None:
            return f"{waiting.get('reason')}: {waiting['message']}" if waiting.get("message") \
                else str(waiting.get("reason"))
        if not status.get("ready"):
            return "not ready"
    phase = pod.status.get("phase")
    return "ready" if phase == "Running" else str(phase).lower()


def pods_by_node(kube: Kube, selector: str, what: str) -> dict[str, KubeObject]:
    """Node name -> the pod matching `selector` there (any namespace)."""
    pods = kube.list("v1", "Pod", labels=selector, what=f"listing {what} pods")
    return {node: p for p in pods if (node := p.spec.get("nodeName"))}


def gpu_status(kube: Kube, nodegroup: str | None = None) -> list[dict[str, Any]]:
    pods = pods_by_node(kube, PLUGIN_SELECTOR, "device-plugin")
    dra = dra_mode(kube)
    if dra:
        kubelet_plugins = pods_by_node(kube, DRA_PLUGIN_SELECTOR, "DRA kubelet-plugin")
        devices = read_node_devices(kube)
    operator = gpu_operator(kube)
    rows = []
    for node in gpu_nodes(kube, nodegroup):
        labels = node.labels
        row = {
            "node": node.name,
            "nodegroup": nodegroup_of(node),
            "gpu": labels.get(L.GPU_MODEL),  # the catalog's name, as node groups and `gpuctl gpus` name it
            "product": labels.get(L.GPU_PRODUCT),
            "gpus": int(labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or 0),
            "sharing": labels.get("nvidia.com/gpu.sharing-strategy", "none"),
            "replicas": int(labels.get("nvidia.com/gpu.replicas", "1")),
            "mig_config": labels.get(L.MIG_CONFIG),
            "mig_state": labels.get(L.MIG_STATE),
            "device_plugin": plugin_state(pods.get(node.name)),
            "allocatable": gpu_resources(node),
            "taints": [str(node_taint(t)) for t in node.spec.get("taints") or []],
            "gpu_operator": operator.as_dict() if operator else None,
        }
        if dra:
            mine = devices.get(node.name, NodeDevices((), frozenset()))
            row.update({"kubelet_plugin": plugin_state(kubelet_plugins.get(node.name)),
                        "devices": len(mine.devices), "allocated": mine.in_use, "free": mine.free})
        rows.append(row)
    return rows


def status_columns(rows: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The table's columns: DRA_COLUMNS where the rows are of a cluster in DRA mode."""
    return DRA_COLUMNS if any("devices" in r for r in rows) else COLUMNS


def gpu_operator(kube: Kube) -> Operator | None:
    """The GPU Operator serving the nodes (the one with a ClusterPolicy first), whoever installed it."""
    from gpuctl.stack.existing import read_operators

    operators = sorted(read_operators(kube), key=lambda o: o.policy is None)
    return operators[0] if operators else None
