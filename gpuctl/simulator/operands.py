"""What the GPU Operator makes of a ClusterPolicy: its settings, the node labels it writes, and the
DaemonSets ("operands") it creates, as NVIDIA/gpu-operator v26.7.0 does it:
- DaemonSet names, labels and node selectors: assets/state-*/…daemonset.yaml;
- which ClusterPolicy field enables each (an unset `enabled` means on, except nodeStatusExporter):
  controllers/state_manager.go isStateEnabled and api/nvidia/v1/clusterpolicy_types.go IsEnabled;
- `spec.daemonsets.tolerations` replaces the asset's toleration: object_controls.go applyCommonDaemonsetConfig;
- deploy labels on GPU nodes (present values are kept): state_manager.go gpuStateLabels, addGPUStateLabels;
- MIG_STRATEGY and the config-manager's DEFAULT_CONFIG / FALLBACK_STRATEGIES=empty on the device
  plugin: object_controls.go applyMIGConfiguration, handleDevicePluginConfig; its image from the
  ClusterPolicy (api/nvidia/v1 imagePath) and devicePlugin.env on it: TransformDevicePlugin.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from gpuctl.kube.kube import Kube
from gpuctl.model import labels as L
from gpuctl.simulator.nodes import DEVICES_PENDING
from gpuctl.stack.existing import OPERATOR_SELECTOR
from gpuctl.stack.values import NAMESPACE

CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")  # apiVersion, kind
GPU_PRESENT = "nvidia.com/gpu.present"
DEPLOY = "nvidia.com/gpu.deploy."
HASH_ANNOTATION = "nvidia.com/last-applied-hash"
# NFD labels that make a node a GPU node (state_manager.go gpuNodeLabels).
GPU_NODE_LABELS = ("feature.node.kubernetes.io/pci-10de.present", "feature.node.kubernetes.io/pci-0302_10de.present",
                   "feature.node.kubernetes.io/pci-0300_10de.present")
# Written on every GPU node for the `container` workload config; mig-manager only where MIG is possible.
DEPLOY_COMPONENTS = ("driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm",
                     "dcgm-exporter", "node-status-exporter", "operator-validator", "client")


@dataclass(frozen=True)
class Operand:
    name: str  # DaemonSet name
    field: str | None  # ClusterPolicy spec field whose `enabled` turns it on; None: always
    deploy: str  # nvidia.com/gpu.deploy.<deploy>=true selects its nodes
    default_on: bool = True
    labels: dict[str, str] = dataclasses.field(default_factory=dict)  # beyond app=<name>
    selector: dict[str, str] = dataclasses.field(default_factory=dict)  # beyond the deploy label


OPERANDS = (
    Operand("nvidia-driver-daemonset", "driver", "driver", labels={"app.kubernetes.io/component": "nvidia-driver"}),
    Operand("nvidia-container-toolkit-daemonset", "toolkit", "container-toolkit"),
    Operand("nvidia-operator-validator", None, "operator-validator",
            labels={"app.kubernetes.io/part-of": "gpu-operator"}),
    Operand(L.DEVICE_PLUGIN_APP, "devicePlugin", "device-plugin"),
    Operand("nvidia-device-plugin-mps-control-daemon", "devicePlugin", "device-plugin",
            selector={L.MPS_CAPABLE: "true"}),
    Operand("nvidia-dcgm", "dcgm", "dcgm"),
    Operand("nvidia-dcgm-exporter", "dcgmExporter", "dcgm-exporter"),
    Operand("gpu-feature-discovery", "gfd", "gpu-feature-discovery",
            labels={"app.kubernetes.io/part-of": "nvidia-gpu"}),
    Operand("nvidia-mig-manager", "migManager", "mig-manager"),
    Operand("nvidia-node-status-exporter", "nodeStatusExporter", "node-status-exporter", default_on=False),
)
MIG_MANAGER = next(o for o in OPERANDS if o.name == "nvidia-mig-manager")
DEFAULT_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@dataclass(frozen=True)
class Policy:
    """The ClusterPolicy fields the simulated operator and its operands act on."""

    name: str
    uid: str
    spec: dict[str, Any]

    def section(self, key: str) -> dict[str, Any]:
        return self.spec.get(key) or {}

    def enabled(self, operand: Operand) -> bool:
        if operand.field is None:
            return True
        flag = self.section(operand.field).get("enabled")
        return operand.default_on if flag is None else bool(flag)

    @property
    def plugin_config(self) -> tuple[str, str]:
        """(ConfigMap name, default key); name "" means no config-manager at all."""
        config = self.section("devicePlugin").get("config") or {}
        return config.get("name") or "", config.get("default") or ""

    @property
    def mig_strategy(self) -> str:
        """The device plugin's MIG_STRATEGY; unset in the ClusterPolicy, the plugin's own default."""
        return self.section("mig").get("strategy") or "none"

    @property
    def mig_config(self) -> tuple[str, str]:
        config = self.section("migManager").get("config") or {}
        return config.get("name") or "", config.get("default") or ""

    @property
    def tolerations(self) -> list[dict[str, Any]]:
        return self.section("daemonsets").get("tolerations") or DEFAULT_TOLERATIONS


def operator_namespace(kube: Kube) -> str:
    """The real operator's OPERATOR_NAMESPACE: the namespace of its own Deployment (the first made where there
    are several), whatever the release is called; gpuctl's (NAMESPACE) where there is none."""
    items = kube.list("apps/v1", "Deployment", labels=OPERATOR_SELECTOR)
    if not items:
        return NAMESPACE
    return str(min(items, key=lambda d: d.at("metadata", "creationTimestamp", default="")).namespace)


def is_gpu_node(labels: dict[str, str]) -> bool:
    return any(labels.get(key) == "true" for key in GPU_NODE_LABELS)


def node_labels(policy: Policy, labels: dict[str, str], mig_capable: bool) -> dict[str, str]:
    """The labels the operator adds to a GPU node (existing non-empty values are kept)."""
    wanted = {GPU_PRESENT: "true"}
    components = DEPLOY_COMPONENTS + (("mig-manager",) if mig_capable else ())
    wanted.update({DEPLOY + c: "true" for c in components if not labels.get(DEPLOY + c)})
    mig_name, mig_default = policy.mig_config
    if mig_capable and policy.enabled(MIG_MANAGER) and not labels.get(L.MIG_CONFIG) and mig_default == "all-disabled":
        wanted[L.MIG_CONFIG] = "all-disabled"  # nodelabeling_controller.go: the MIG manager's starting point
    return {k: v for k, v in wanted.items() if labels.get(k) != v}


def _image(operand: Operand, policy: Policy) -> str:
    """The operand's image from its ClusterPolicy section (api/nvidia/v1 imagePath: repository/image:version,
    @ for a sha256 digest); a placeholder where the section names none (the real operator then takes it
    from its own environment, e.g. DEVICE_PLUGIN_IMAGE)."""
    section = policy.section(operand.field) if operand.field else {}
    repository, image, version = (str(section.get(k) or "") for k in ("repository", "image", "version"))
    if repository and image and version:
        return f"{repository}/{image}{'@' if version.startswith('sha256:') else ':'}{version}"
    return f"nvcr.io/nvidia/{operand.name}:sim"


def _container(operand: Operand, policy: Policy) -> dict[str, Any]:
    container: dict[str, Any] = {"name": operand.name, "image": _image(operand, policy)}
    if operand.field == "devicePlugin":
        env = [{"name": "MIG_STRATEGY", "value": policy.mig_strategy}]
        name, default = policy.plugin_config
        if name:
            env += [{"name": "CONFIG_FILE", "value": "/config/config.yaml"},
                    {"name": "DEFAULT_CONFIG", "value": default}, {"name": "FALLBACK_STRATEGIES", "value": "empty"}]
        # TransformDevicePlugin: each devicePlugin.env entry on the main container (setContainerEnv)
        given = [{"name": e["name"], "value": str(e.get("value") or "")}
                 for e in policy.section("devicePlugin").get("env") or [] if e.get("name")]
        container["env"] = [e for e in env if e["name"] not in {g["name"] for g in given}] + given
    return container


def render_daemon_set(operand: Operand, policy: Policy, namespace: str = NAMESPACE) -> dict[str, Any]:
    """The DaemonSet the operator creates for `operand` in its own `namespace`, owned by the ClusterPolicy."""
    labels = {"app": operand.name, **operand.labels}
    body: dict[str, Any] = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": operand.name, "namespace": namespace, "labels": labels,
                     "ownerReferences": [{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": policy.name,
                                          "uid": policy.uid, "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "selector": {"matchLabels": {"app": operand.name}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"nodeSelector": {DEPLOY + operand.deploy: "true", **operand.selector},
                         # and the sim's startup taint, which waits for these very pods (nodes.py)
                         "tolerations": [*policy.tolerations, DEVICES_PENDING.toleration()],
                         "priorityClassName": "system-node-critical",
                         "containers": [_container(operand, policy)]},
            },
        },
    }
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]
    body["metadata"]["annotations"] = {HASH_ANNOTATION: digest}
    return body
