"""What a GPU node's device plugin and, in DRA mode, its DRA driver offer and serve: the devices each node's
ResourceSlices publish and the ones allocated to ResourceClaims, which of the two serves each node (DraServing:
where the driver serves only some node groups, the others keep the device plugin), the plugin pods' state per
node, the GPU Operator. Read by `gpuctl status` (ops.status), the wait-capacity step (ops.platform.capacity),
`mig apply`, `validate` and `doctor`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuctl.kube.dra import dra_mode, list_claims, list_slices
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.dra import DRIVER, PLUGIN_COMPONENT, PLUGIN_COMPONENT_LABEL, device_type, dra_served, slice_devices
from gpuctl.stack.dra_driver import serves_groups_only
from gpuctl.stack.existing import Operator, read_operators

PLUGIN_SELECTOR = f"app={L.DEVICE_PLUGIN_APP}"  # the operator's device-plugin pods
DRA_PLUGIN_SELECTOR = f"{PLUGIN_COMPONENT_LABEL}={PLUGIN_COMPONENT}"  # the DRA driver's kubelet-plugin pods
RACE_GRACE_S = 10.0  # a device plugin registers its GPUs within seconds of starting


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


@dataclass(frozen=True)
class DraServing:
    """Which GPU nodes the DRA driver serves, the device plugin the others (model.dra.dra_served, per node):
    `driver` (the cluster is in DRA mode: DeviceClass gpu.nvidia.com exists), `everywhere` (its kubelet plugin
    confined to no node label: every GPU node is its), and each node's devices in the driver's current slices."""

    driver: bool
    everywhere: bool
    devices: dict[str, NodeDevices]

    def serves(self, node: KubeObject) -> bool:
        return self.driver and dra_served(node.labels, node.name in self.devices, self.everywhere)

    def of(self, node: str) -> NodeDevices:
        return self.devices.get(node, NodeDevices((), frozenset()))


def read_dra_serving(kube: Kube) -> DraServing:
    """DraServing from the DeviceClass, gpuctl's driver DaemonSets (stack.dra_driver.serves_groups_only) and one
    LIST each of ResourceSlices and ResourceClaims; no LIST of them outside DRA mode."""
    if not dra_mode(kube):
        return DraServing(False, False, {})
    return DraServing(True, not serves_groups_only(kube), read_node_devices(kube))


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


def gpu_operator(kube: Kube) -> Operator | None:
    """The GPU Operator serving the nodes (the one with a ClusterPolicy first), whoever installed it."""
    operators = sorted(read_operators(kube), key=lambda o: o.policy is None)
    return operators[0] if operators else None
