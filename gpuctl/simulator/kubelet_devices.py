"""The kubelet's device manager on the sim's kwok nodes: what a node advertises of a device-plugin resource
(nvidia.com/gpu, nvidia.com/mig-*) when no device plugin serves it. kwok runs no kubelet, so without this part
a node kept advertising the GPUs of a device plugin long gone (the GPU Operator's release uninstalled, its
plugin pod evicted), and a node Karpenter launched advertised GPUs before any plugin registered there.

What the kubelet does (Kubernetes pkg/kubelet, read at kubernetes/kubernetes master through the code search;
the same in v1.36.3 as far as these functions go):
- cm/devicemanager/manager.go PluginDisconnected: when a plugin's endpoint goes (its pod deleted, evicted, or
  its DaemonSet removed with the release), markResourceUnhealthy moves every healthy device of its resource to
  the unhealthy set at once, and setStopTime records when.
- manager.go GetCapacity: healthy devices count in capacity and allocatable, unhealthy ones in capacity only;
  an endpoint stopped longer than endpointStopGracePeriod (types.go: 5 minutes) is deleted and its resource
  returned as removed. nodestatus/setters.go MachineInfo then sets a removed resource's capacity to 0 rather
  than deleting it ("to indicate that the resource is managed by device plugin and had been registered
  before"), and allocatable follows capacity: 0 as well.
- kubelet_node_status.go reconcileExtendedResource: a kubelet registering into a Node object that already
  exists, with no device-manager checkpoint (ShouldResetExtendedResourceCapacity: the node is new), zeroes the
  capacity and allocatable of every extended resource until plugins register theirs. Karpenter's kwok provider
  creates its Node with the NodeClaim's GPUs in both (kwok/cloudprovider/cloudprovider.go toNode), as if a
  plugin had registered; a real instance's kubelet would zero them, so the sim does, until the sim's device
  plugin has served the node. Karpenter expects exactly that: pkg/controllers/nodeclaim/lifecycle/
  initialization.go RequestedResourcesRegistered ("kubelet will zero out both the capacity and allocatable for
  an extended resource on startup") waits for allocatable above 0 before it initializes the node, and
  state/statenode.go counts an uninitialized node's zeros at the NodeClaim's figures (in-flight capacity).

A node's own record carries the state, not this process (the sim's operator restarts): `served` is the
annotation the sim's operator writes when a device-plugin pod has loaded its config there (a plugin
registered: the kubelet's checkpoint), and DISCONNECTED the time this part saw the last plugin pod go. A node
that advertises GPUs without ever being served and that Karpenter did not launch is left alone: that is how the
sim shows a device plugin on the host (Bottlerocket; a test patches the node's status), which no pod serves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from gpuctl.kube.errors import KubeConflict, KubeNotFound
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L

GRACE_S = 300.0  # endpointStopGracePeriod (pkg/kubelet/cm/devicemanager/types.go)
DISCONNECTED = "sim.gpuctl.dev/device-plugin-disconnected"  # when the node's last plugin pod went (RFC 3339)
PLUGIN_SELECTOR = f"app={L.DEVICE_PLUGIN_APP}"
DEVICE_RESOURCE = re.compile(r"^nvidia\.com/(gpu|mig-.+)$")


@dataclass(frozen=True)
class DeviceWrite:
    """What the kubelet writes on one node: annotations (None: remove) and status resources (both maps)."""

    annotations: dict[str, str | None]
    capacity: dict[str, str]
    allocatable: dict[str, str]

    @property
    def empty(self) -> bool:
        return not (self.annotations or self.capacity or self.allocatable)


def _stamp(now: datetime) -> str:
    return now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _since(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _devices(resources: dict[str, Any]) -> dict[str, int]:
    out = {}
    for key, value in resources.items():
        if DEVICE_RESOURCE.match(key):
            try:
                out[key] = int(str(value))
            except ValueError:
                continue
    return out


def _zeroed(devices: dict[str, int]) -> dict[str, str]:
    return {k: "0" for k, v in devices.items() if v}


def device_write(node: KubeObject, plugin_running: bool, served_key: str, now: datetime,
                 grace_s: float = GRACE_S) -> DeviceWrite:
    """What the kubelet of `node` writes now, given whether a device-plugin pod runs there (pure)."""
    annotations = node.annotations
    capacity = _devices(node.status.get("capacity") or {})
    allocatable = _devices(node.status.get("allocatable") or {})
    if plugin_running:
        # a plugin registered (again): its devices are the sim's operator's to advertise (operator.py)
        return DeviceWrite({DISCONNECTED: None} if DISCONNECTED in annotations else {}, {}, {})
    if not any(capacity.values()) and not any(allocatable.values()):
        # nothing advertised (the sim's operator zeroed it, or the grace ran out): nothing left to time
        return DeviceWrite({DISCONNECTED: None} if DISCONNECTED in annotations else {}, {}, {})
    if served_key not in annotations:
        if L.KARPENTER_NODEPOOL not in node.labels:
            return DeviceWrite({}, {}, {})  # a host plugin's node, or one never served: as it registered
        # a node Karpenter launched, no plugin registered yet: reconcileExtendedResource's zeroes
        return DeviceWrite({}, _zeroed(capacity), _zeroed(allocatable))
    stopped = _since(annotations.get(DISCONNECTED, ""))
    notes: dict[str, str | None] = {}
    if stopped is None:
        stopped = now
        notes[DISCONNECTED] = _stamp(now)
    # PluginDisconnected: every device unhealthy at once (allocatable 0, capacity kept) ...
    zero_allocatable = _zeroed(allocatable)
    # ... and after endpointStopGracePeriod the resource removed: capacity 0 (setters.go keeps the key)
    expired = (now - stopped).total_seconds() >= grace_s
    zero_capacity = _zeroed(capacity) if expired else {}
    return DeviceWrite(notes, zero_capacity, zero_allocatable)


def sync_device_health(kube: Kube, nodes: list[KubeObject], running_pods: list[KubeObject], served_key: str,
                       now: datetime | None = None, grace_s: float = GRACE_S) -> None:
    """One pass of every GPU node's kubelet device manager over `nodes`, given the cluster's Running pods."""
    now = now or datetime.now(timezone.utc)
    running = {p.spec.get("nodeName") for p in running_pods if p.matches(PLUGIN_SELECTOR) and not p.deleting}
    for node in nodes:
        write = device_write(node, node.name in running, served_key, now, grace_s)
        if write.empty:
            continue
        if write.allocatable and served_key in node.annotations and _plugin_runs_now(kube, node.name):
            continue  # the pod list is a moment old: a replacement plugin pod already runs there
        try:
            _write(kube, node, write)
        except (KubeConflict, KubeNotFound):
            continue  # changed or gone since it was read: the next pass looks again


def _plugin_runs_now(kube: Kube, node: str) -> bool:
    pods = kube.list("v1", "Pod", labels=PLUGIN_SELECTOR, fields=f"spec.nodeName={node}")
    return any(p.status.get("phase") == "Running" and not p.deleting for p in pods)


def _write(kube: Kube, node: KubeObject, write: DeviceWrite) -> None:
    """The write, conditional on the node as read (a node changed since is looked at again next pass)."""
    version = node.resource_version
    if write.annotations:
        version = kube.patch("v1", "Node", node.name, {"metadata": {"resourceVersion": version,
                                                                    "annotations": write.annotations}}
                             ).resource_version
    if write.capacity or write.allocatable:
        status: dict[str, Any] = {}
        if write.capacity:
            status["capacity"] = write.capacity
        if write.allocatable:
            status["allocatable"] = write.allocatable
        kube.patch("v1", "Node", node.name, {"metadata": {"resourceVersion": version}, "status": status},
                   subresource="status")
