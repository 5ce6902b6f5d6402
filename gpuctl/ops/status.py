"""`gpuctl status`: one row per GPU node, the facts a platform team asks first.

Each row says which agent serves its node (`served_by`: `dra` or `device-plugin`), decided per node
(ops.devices.DraServing, model.dra.dra_served): where gpuctl's DRA driver serves only the node groups marked
`dra: true` the others keep the device plugin. On a node the DRA driver serves, its GPUs are the devices the
driver's kubelet plugin publishes in the node's ResourceSlice, and what is in use is what the scheduler
allocated to ResourceClaims; the row then also says `kubelet_plugin`, `devices`, `allocated` and `free` (read
by ops.devices). status_summary counts both kinds.

Unhealthy devices are the kubelet's record (gpuctl.kube.gpu_nodes.unhealthy_gpus): a device the device plugin
reports Unhealthy stays in the node's capacity and leaves its allocatable (Kubernetes
pkg/kubelet/cm/devicemanager/manager.go, GetCapacity). `unhealthy` counts them by resource as allocatable does
(a GPU shared N ways is N), `unhealthy_gpus` the whole GPUs among them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuctl.kube.gpu_nodes import gpu_nodes, gpu_resources, nodegroup_of, unhealthy_gpus, unhealthy_whole_gpus
from gpuctl.kube.kube import Kube
from gpuctl.model import labels as L
from gpuctl.model.taints import node_taint
from gpuctl.ops.devices import (
    DRA_PLUGIN_SELECTOR,
    PLUGIN_SELECTOR,
    gpu_operator,
    plugin_state,
    pods_by_node,
    read_dra_serving,
)

COLUMNS = ("node", "nodegroup", "product", "gpus", "sharing", "replicas", "mig_config", "mig_state",
           "device_plugin", "allocatable", "taints")
# DRA mode: sharing and allocatable are the device plugin's; the driver's devices and claims instead
DRA_COLUMNS = ("node", "nodegroup", "product", "gpus", "mig_config", "mig_state", "kubelet_plugin", "devices",
               "allocated", "free", "taints")
# Some nodes on each: each row fills its own agent's columns (a device-plugin row has no devices, a DRA row no
# allocatable GPUs)
MIXED_COLUMNS = ("node", "nodegroup", "product", "gpus", "served_by", "device_plugin", "allocatable",
                 "kubelet_plugin", "devices", "allocated", "free", "taints")
DRA, DEVICE_PLUGIN = "dra", "device-plugin"


def gpu_status(kube: Kube, nodegroup: str | None = None) -> list[dict[str, Any]]:
    pods = pods_by_node(kube, PLUGIN_SELECTOR, "device-plugin")
    serving = read_dra_serving(kube)
    kubelet_plugins = pods_by_node(kube, DRA_PLUGIN_SELECTOR, "DRA kubelet-plugin") if serving.driver else {}
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
            "served_by": DRA if serving.serves(node) else DEVICE_PLUGIN,
        }
        if row["served_by"] == DRA:
            mine = serving.of(node.name)
            row.update({"kubelet_plugin": plugin_state(kubelet_plugins.get(node.name)),
                        "devices": len(mine.devices), "allocated": mine.in_use, "free": mine.free})
        rows.append(row)
    return rows


def status_columns(rows: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The table's columns: DRA_COLUMNS where the DRA driver serves every row's node, MIXED_COLUMNS where it serves
    some, else COLUMNS."""
    dra = sum(r.get("served_by") == DRA for r in rows)
    return COLUMNS if not dra else DRA_COLUMNS if dra == len(rows) else MIXED_COLUMNS


def status_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Both kinds counted: the nodes the device plugin serves and the GPU resources they advertise as
    allocatable (the kubelet's count: a GPU shared N ways is N), the nodes the DRA driver serves and their
    devices, allocated and free."""
    plugin = [r for r in rows if r.get("served_by") != DRA]
    dra = [r for r in rows if r.get("served_by") == DRA]
    allocatable: dict[str, int] = {}
    for r in plugin:
        for resource, n in (r.get("allocatable") or {}).items():
            allocatable[resource] = allocatable.get(resource, 0) + n
    return {"device_plugin": {"nodes": len(plugin), "gpus": sum(r["gpus"] for r in plugin),
                              "allocatable": dict(sorted(allocatable.items()))},
            "dra": {"nodes": len(dra), "gpus": sum(r["gpus"] for r in dra),
                    **{k: sum(r[k] for r in dra) for k in ("devices", "allocated", "free")}}}
