"""Prove the platform works: allocatable matches the configuration, one device plugin, and a
CUDA smoke-test pod passes on the GPU nodes."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuctl import labels as L
from gpuctl.errors import WaitTimeout
from gpuctl.kube.client import api_error, is_not_found
from gpuctl.kube.objects import ensure_namespace
from gpuctl.mig import advertised_resources, layout_from_counts, parse_mig_parted_config
from gpuctl.progress import waiting
from gpuctl.sharing import CONFIG_LABEL, NO_SHARING, parse_plugin_config
from gpuctl.stack.values import DEVICE_PLUGIN_CONFIGMAP, MIG_CONFIGMAP

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, V1Node

SMOKE_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
SMOKE_NAMESPACE = "gpuctl-system"
SMOKE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail}


def expected_resources(node: V1Node, plugin_configs: dict[str, str], mig_configs: dict[str, Any]) -> dict[str, int]:
    """What the device plugin should advertise on `node`, from its labels and the operator's ConfigMaps."""
    labels = node.metadata.labels or {}
    gpus = int(labels.get(L.GPU_COUNT, "0"))
    mig_config = labels.get(L.MIG_CONFIG, "")
    layout = layout_from_counts(mig_config, mig_configs[mig_config]) if mig_config in mig_configs else None
    if layout is not None and layout.enabled:
        strategy = labels.get("nvidia.com/mig.strategy", "single")  # GFD reports the operator's strategy
        return {k: v for k, v in advertised_resources(layout, gpus, strategy).items() if v}
    key = labels.get(CONFIG_LABEL)
    sharing = parse_plugin_config(plugin_configs[key]) if key and key in plugin_configs else NO_SHARING
    return {L.GPU_RESOURCE: gpus * sharing.replicas}


def check_capacity(nodes: list[V1Node], expected: dict[str, dict[str, int]]) -> Check:
    from gpuctl.gpu_nodes import gpu_resources

    wrong = [f"{n.metadata.name} has {gpu_resources(n) or 'none'}, expected {expected[n.metadata.name]}"
             for n in nodes if gpu_resources(n) != expected[n.metadata.name]]
    if wrong:
        return Check("capacity", False, "; ".join(wrong[:5]) + (f" (+{len(wrong) - 5} more)" if len(wrong) > 5 else ""))
    total: dict[str, int] = {}
    for per_node in expected.values():
        for k, v in per_node.items():
            total[k] = total.get(k, 0) + v
    return Check("capacity", True, f"{len(nodes)} nodes advertise what was configured: {total}")


def check_device_plugins(client: ApiClient) -> Check:
    """Exactly one device-plugin DaemonSet (the MPS control daemon is not one), with every pod ready."""
    from gpuctl.stack.owners import is_device_plugin, list_daemon_sets

    plugins = [d for d in list_daemon_sets(client) if is_device_plugin(d.metadata.name)]
    names = [f"{d.metadata.namespace}/{d.metadata.name}" for d in plugins]
    if len(plugins) != 1:
        return Check("device-plugin", False, f"expected exactly one device-plugin DaemonSet, found {len(plugins)}: "
                     f"{', '.join(names) or 'none'}")
    status = plugins[0].status
    desired = (status.desired_number_scheduled or 0) if status else 0
    ready = (status.number_ready or 0) if status else 0
    if desired == 0 or ready < desired:  # none scheduled yet: no node advertises GPUs from this plugin
        return Check("device-plugin", False, f"{names[0]}: {ready} of {desired} pods ready; "
                     f"see 'kubectl logs -n {plugins[0].metadata.namespace} ds/{plugins[0].metadata.name}'")
    return Check("device-plugin", True, f"exactly one device-plugin DaemonSet: {names[0]} ({ready} pods ready)")


def smoke_pod(name: str, image: str, resource: str, node_labels: dict[str, str],
              tolerations: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": SMOKE_NAMESPACE,
                     "labels": {L.MANAGED_BY: L.MANAGER, "app.kubernetes.io/name": "gpuctl-smoke-test"}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"nvidia.com/gpu.present": "true", **node_labels},
            "tolerations": tolerations,
            "containers": [{"name": "cuda-vectoradd", "image": image,
                            "resources": {"limits": {resource: "1"}}}],
        },
    }


def run_smoke_test(client: ApiClient, image: str, resource: str, node_labels: dict[str, str],
                   tolerations: list[dict[str, str]], timeout: float = SMOKE_TIMEOUT_S) -> Check:
    """Run the CUDA sample pod to completion; it passes on phase Succeeded with 'Test PASSED' logged."""
    from kubernetes.client import CoreV1Api

    v1 = CoreV1Api(client)
    ensure_namespace(v1, SMOKE_NAMESPACE)
    _await_default_service_account(v1)
    name = f"gpuctl-smoke-{uuid.uuid4().hex[:6]}"
    try:
        v1.create_namespaced_pod(SMOKE_NAMESPACE, smoke_pod(name, image, resource, node_labels, tolerations),
                                 field_manager=L.MANAGER)
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "creating the smoke-test pod") from None
    try:
        return _await_smoke_test(v1, name, resource, timeout)
    finally:
        try:
            v1.delete_namespaced_pod(name, SMOKE_NAMESPACE, grace_period_seconds=0)
        except Exception as exc:  # noqa: BLE001
            if not is_not_found(exc):
                raise api_error(exc, "deleting the smoke-test pod") from None


def _await_default_service_account(v1: Any, timeout: float = 30.0) -> None:
    """A new namespace's `default` ServiceAccount comes from kube-controller-manager a moment later;
    until then the ServiceAccount admission plugin refuses every pod in it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v1.read_namespaced_service_account("default", SMOKE_NAMESPACE)
            return
        except Exception as exc:  # noqa: BLE001
            if not is_not_found(exc):
                raise api_error(exc, f"reading {SMOKE_NAMESPACE}/default") from None
        if time.monotonic() > deadline:
            raise WaitTimeout(f"namespace {SMOKE_NAMESPACE} got no default ServiceAccount in {timeout:g}s",
                              "check that kube-controller-manager runs")
        time.sleep(0.2)


def _await_smoke_test(v1: Any, name: str, resource: str, timeout: float) -> Check:
    deadline = time.monotonic() + timeout
    pod = v1.read_namespaced_pod(name, SMOKE_NAMESPACE)
    with waiting(f"smoke-test pod {SMOKE_NAMESPACE}/{name} to finish", timeout) as wait:
        while pod.status.phase not in ("Succeeded", "Failed") and time.monotonic() < deadline:
            wait.update(f"{pod.status.phase}" + (f" on {pod.spec.node_name}" if pod.spec.node_name else ""))
            time.sleep(0.5)
            pod = v1.read_namespaced_pod(name, SMOKE_NAMESPACE)
    phase = pod.status.phase
    where = f"on {pod.spec.node_name}" if pod.spec.node_name else "unscheduled"
    if phase not in ("Succeeded", "Failed"):
        return Check("smoke-test", False, f"pod {name} still {phase} {where} after {timeout:.0f}s; "
                     f"{_diagnostics(v1, pod)}")
    try:
        logs = v1.read_namespaced_pod_log(name, SMOKE_NAMESPACE)
    except Exception as exc:  # noqa: BLE001
        logs = f"(no log: {getattr(exc, 'reason', exc)})"
    if phase == "Succeeded" and "Test PASSED" in logs:
        return Check("smoke-test", True, f"CUDA vectoradd passed {where} with 1 x {resource}")
    last = (logs.strip().splitlines() or ["(empty log)"])[-1]
    return Check("smoke-test", False, f"pod {name} {phase} {where}: {last}; {_diagnostics(v1, pod)}")


def _diagnostics(v1: Any, pod: Any) -> str:
    parts = []
    for status in pod.status.container_statuses or []:
        state = status.state.terminated or status.state.waiting
        if state is not None:
            parts.append(f"container {status.name}: {state.reason or ''} exit {getattr(state, 'exit_code', '-')}")
    events = v1.list_namespaced_event(SMOKE_NAMESPACE, field_selector=f"involvedObject.name={pod.metadata.name}").items
    parts += [f"event {e.reason}: {e.message}" for e in events[-3:]]
    if pod.spec.node_name:
        node = v1.read_node(pod.spec.node_name)
        bad = [f"{c.type}={c.status}" for c in node.status.conditions or []
               if (c.type == "Ready") != (c.status == "True")]
        parts.append(f"node {pod.spec.node_name} conditions: {', '.join(bad) or 'healthy'}")
    return "; ".join(parts) or "no events"


def read_configs(client: ApiClient) -> tuple[dict[str, str], dict[str, Any]]:
    """The operator's device-plugin configs and mig-parted configs (in the namespace of the GPU Operator
    gpuctl configures, which may be another's)."""
    from kubernetes.client import CoreV1Api

    from gpuctl.kube.objects import read_config_map_data
    from gpuctl.stack.existing import config_namespace

    v1 = CoreV1Api(client)
    namespace = config_namespace(client)
    plugin = read_config_map_data(v1, namespace, DEVICE_PLUGIN_CONFIGMAP) or {}
    mig_text = (read_config_map_data(v1, namespace, MIG_CONFIGMAP) or {}).get("config.yaml", "")
    mig = parse_mig_parted_config(mig_text) if mig_text else {}
    return plugin, mig


def smoke_resource(nodes: list[V1Node]) -> str:
    """A MIG resource when the nodes advertise one (mixed strategy), else nvidia.com/gpu."""
    from gpuctl.gpu_nodes import gpu_resources

    for node in nodes:
        mig = sorted(k for k in gpu_resources(node) if k.startswith("nvidia.com/mig-"))
        if mig:
            return mig[0]
    return L.GPU_RESOURCE


def validate_cluster(client: ApiClient, nodegroup: str | None, image: str = SMOKE_IMAGE,
                     timeout: float = SMOKE_TIMEOUT_S) -> list[Check]:
    """Capacity against configuration, exactly one device plugin, and the CUDA smoke test."""
    from kubernetes.client import CoreV1Api

    from gpuctl.gpu_nodes import NODEGROUP_LABELS, gpu_nodes

    nodes = gpu_nodes(CoreV1Api(client), nodegroup)
    if not nodes:
        return [Check("gpu-nodes", False, "no GPU nodes (label feature.node.kubernetes.io/pci-10de.present=true)")]
    plugin, mig = read_configs(client)
    checks = [check_capacity(nodes, {n.metadata.name: expected_resources(n, plugin, mig) for n in nodes}),
              check_device_plugins(client)]
    labels = nodes[0].metadata.labels or {}
    node_labels = {k: nodegroup for k in NODEGROUP_LABELS if nodegroup and labels.get(k) == nodegroup}
    taints = {(t.key, t.value or "", t.effect) for n in nodes for t in n.spec.taints or []}
    tolerations = [{"key": k, "operator": "Equal", "value": v, "effect": e} if v else
                   {"key": k, "operator": "Exists", "effect": e} for k, v, e in sorted(taints)]
    checks.append(run_smoke_test(client, image, smoke_resource(nodes), dict(list(node_labels.items())[:1]),
                                 tolerations, timeout))
    return checks
