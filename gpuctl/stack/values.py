"""Helm values gpuctl computes for NFD and the GPU Operator (pure; see gpu-facts.md)."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from gpuctl.model.sharing import DEFAULT_CONFIG_KEY
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import Taint, tolerations

NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_CONFIGMAP = "gpuctl-device-plugin-config"
MIG_CONFIGMAP = "gpuctl-mig-parted-config"
STACK_CONFIGMAP = "gpuctl-stack"  # how gpuctl installed the stack, so later commands can upgrade it
# NVIDIA's hardening against unrequested GPU access (gpu-facts.md "Tenant isolation"): the toolkit ignores
# NVIDIA_VISIBLE_DEVICES from unprivileged containers and takes the device list only as volume mounts,
# which is how the device plugin then hands it over. The tenant fence (templates/fences) refuses the rest.
TOOLKIT_HARDENING = [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"},
                     {"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"}]
DEVICE_PLUGIN_HARDENING = [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]


def operator_values(spec: StackSpec) -> dict[str, Any]:
    """GPU Operator chart values (v26.7 keys). `devicePlugin.config` only where gpuctl wrote configs:
    the config-manager exits on a ConfigMap with no keys."""
    values: dict[str, Any] = {
        "nfd": {"enabled": spec.nfd == "operator"},
        "driver": {"enabled": spec.driver},
        "toolkit": {"enabled": spec.toolkit, "env": TOOLKIT_HARDENING},
        "devicePlugin": {"env": DEVICE_PLUGIN_HARDENING},
        "mig": {"strategy": spec.mig_strategy},
        "migManager": {"enabled": True, "config": {"name": MIG_CONFIGMAP, "default": "all-disabled"}},
        "dcgmExporter": {"enabled": True},
        "daemonsets": {"tolerations": tolerations(spec.taints)},
    }
    if spec.dra:  # the DRA driver serves every GPU; a device plugin beside it would count each one twice
        values["devicePlugin"]["enabled"] = False
    if spec.shares_gpus:
        values["devicePlugin"]["config"] = {"name": DEVICE_PLUGIN_CONFIGMAP, "default": DEFAULT_CONFIG_KEY}
    if spec.nfd == "operator":  # the NFD subchart's worker must reach the tainted GPU nodes too
        values["node-feature-discovery"] = nfd_values(spec)
    return values


def cluster_policy_fields(spec: StackSpec) -> dict[str, Any]:
    """The ClusterPolicy spec fields that carry gpuctl's sharing and MIG settings, for a GPU Operator
    gpuctl did not install: the same values `operator_values` gives these keys, which the chart copies
    into the ClusterPolicy as they are (v26.7.0 templates/clusterpolicy.yaml)."""
    values = operator_values(spec)
    fields: dict[str, Any] = {"mig": values["mig"], "migManager": {"config": values["migManager"]["config"]}}
    plugin = {k: v for k, v in values["devicePlugin"].items() if k in ("enabled", "config")}
    if plugin:
        fields["devicePlugin"] = plugin
    return fields


def nfd_values(spec: StackSpec) -> dict[str, Any]:
    return {"worker": {"tolerations": tolerations(spec.taints)}}


def stack_record(spec: StackSpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)


def stack_from_record(text: str) -> StackSpec:
    doc = json.loads(text)
    doc["taints"] = tuple(Taint(**t) for t in doc["taints"])
    doc["dra_groups"] = tuple(doc.get("dra_groups") or ())
    return StackSpec(**doc)
