"""`gpuctl status`: one row per GPU node, the facts a platform team asks first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl import labels as L
from gpuctl.gpu_nodes import gpu_nodes, gpu_resources, nodegroup_of
from gpuctl.kube.client import api_error

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpuctl.stack.existing import Operator

COLUMNS = ("node", "nodegroup", "product", "gpus", "sharing", "replicas", "mig_config", "mig_state",
           "device_plugin", "allocatable", "taints")
PLUGIN_SELECTOR = f"app={L.DEVICE_PLUGIN_APP}"  # the operator's device-plugin pods


def plugin_state(pod: Any | None) -> str:
    """`ready`, `missing`, or why the node's device-plugin pod is not serving (e.g. CrashLoopBackOff: <error>)."""
    if pod is None:
        return "missing"
    for status in pod.status.container_statuses or []:
        waiting = status.state.waiting if status.state else None
        if waiting is not None:
            return f"{waiting.reason}: {waiting.message}" if waiting.message else str(waiting.reason)
        if not status.ready:
            return "not ready"
    return "ready" if pod.status.phase == "Running" else str(pod.status.phase).lower()


def gpu_status(client: ApiClient, nodegroup: str | None = None) -> list[dict[str, Any]]:
    from kubernetes.client import CoreV1Api

    v1 = CoreV1Api(client)
    try:
        pods = {p.spec.node_name: p for p in v1.list_pod_for_all_namespaces(label_selector=PLUGIN_SELECTOR).items}
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "listing device-plugin pods") from None
    operator = gpu_operator(client)
    rows = []
    for node in gpu_nodes(v1, nodegroup):
        labels = node.metadata.labels or {}
        rows.append({
            "node": node.metadata.name,
            "nodegroup": nodegroup_of(node),
            "product": labels.get(L.GPU_PRODUCT),
            "gpus": int(labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or 0),
            "sharing": labels.get("nvidia.com/gpu.sharing-strategy", "none"),
            "replicas": int(labels.get("nvidia.com/gpu.replicas", "1")),
            "mig_config": labels.get(L.MIG_CONFIG),
            "mig_state": labels.get(L.MIG_STATE),
            "device_plugin": plugin_state(pods.get(node.metadata.name)),
            "allocatable": gpu_resources(node),
            "taints": [f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"
                       for t in node.spec.taints or []],
            "gpu_operator": operator.as_dict() if operator else None,
        })
    return rows


def gpu_operator(client: ApiClient) -> Operator | None:
    """The GPU Operator serving the nodes (the one with a ClusterPolicy first), whoever installed it."""
    from gpuctl.stack.existing import read_operators

    operators = sorted(read_operators(client), key=lambda o: o.policy is None)
    return operators[0] if operators else None
