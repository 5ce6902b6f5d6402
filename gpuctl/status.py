"""`gpuctl status`: one row per GPU node, the facts a platform team asks first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl import labels as L
from gpuctl.gpu_nodes import gpu_nodes, gpu_resources, nodegroup_of

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

COLUMNS = ("node", "nodegroup", "product", "gpus", "sharing", "replicas", "mig_config", "mig_state",
           "allocatable", "taints")


def gpu_status(client: ApiClient, nodegroup: str | None = None) -> list[dict[str, Any]]:
    from kubernetes.client import CoreV1Api

    rows = []
    for node in gpu_nodes(CoreV1Api(client), nodegroup):
        labels = node.metadata.labels or {}
        rows.append({
            "node": node.metadata.name,
            "nodegroup": nodegroup_of(node),
            "product": labels.get(L.GPU_PRODUCT),
            "gpus": int(labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or 0),
            "sharing": labels.get("nvidia.com/gpu.sharing-strategy", "none"),
            "replicas": int(labels.get("nvidia.com/gpu.replicas", "1")),
            "mig_config": labels.get("nvidia.com/mig.config"),
            "mig_state": labels.get("nvidia.com/mig.config.state"),
            "allocatable": gpu_resources(node),
            "taints": [f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                       for t in node.spec.taints or []],
        })
    return rows
