"""`gpuctl status`: one row per GPU node, the facts a platform team asks first.

In DRA mode (gpuctl.kube.dra.dra_mode) a node's GPUs are the devices the DRA driver's kubelet plugin publishes
in the node's ResourceSlice, and what is in use is what the scheduler allocated to ResourceClaims; each
row then also says `kubelet_plugin`, `devices`, `allocated` and `free` (read by ops.devices).

Unhealthy devices are the kubelet's record (gpuctl.kube.gpu_nodes.unhealthy_gpus): a device the device plugin
reports Unhealthy stays in the node's capacity and leaves its allocatable (Kubernetes
pkg/kubelet/cm/devicemanager/manager.go, GetCapacity). `unhealthy` counts them by resource as allocatable does
(a GPU shared N ways is N), `unhealthy_gpus` the whole GPUs among them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuctl.kube.dra import dra_mode
from gpuctl.kube.gpu_nodes import gpu_nodes, gpu_resources, nodegroup_of, unhealthy_gpus, unhealthy_whole_gpus
from gpuctl.kube.kube import Kube
from gpuctl.model import labels as L
from gpuctl.model.taints import node_taint
from gpuctl.ops.devices import (
    DRA_PLUGIN_SELECTOR,
    PLUGIN_SELECTOR,
    NodeDevices,
    gpu_operator,
    plugin_state,
    pods_by_node,
    read_node_devices,
)

COLUMNS = ("node", "nodegroup", "product", "gpus", "sharing", "replicas", "mig_config", "mig_state",
           "device_plugin", "allocatable", "taints")
# DRA mode: sharing and allocatable are the device plugin's; the driver's devices and claims instead
DRA_COLUMNS = ("node", "nodegroup", "product", "gpus", "mig_config", "mig_state", "kubelet_plugin", "devices",
               "allocated", "free", "taints")


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
        replicas = int(labels.get("nvidia.com/gpu.replicas", "1"))
        unhealthy = unhealthy_gpus(node)
        row = {
            "node": node.name,
            "nodegroup": nodegroup_of(node),
            "gpu": labels.get(L.GPU_MODEL),  # the catalog's name, as node groups and `gpuctl gpus` name it
            "product": labels.get(L.GPU_PRODUCT),
            "gpus": int(labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or 0),
            "sharing": labels.get("nvidia.com/gpu.sharing-strategy", "none"),
            "replicas": replicas,
            "mig_config": labels.get(L.MIG_CONFIG),
            "mig_state": labels.get(L.MIG_STATE),
            "device_plugin": plugin_state(pods.get(node.name)),
            "allocatable": gpu_resources(node),
            "unhealthy": unhealthy,
            "unhealthy_gpus": unhealthy_whole_gpus(unhealthy, replicas, labels.get(L.MIG_CONFIG)),
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
