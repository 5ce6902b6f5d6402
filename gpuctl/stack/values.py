"""Helm values gpuctl computes for NFD and the GPU Operator (pure; see gpu-facts.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from gpuctl.util.errors import UsageError
from gpuctl.model.sharing import DEFAULT_CONFIG_KEY
from gpuctl.model.taints import Taint, tolerations

NAMESPACE = "gpu-operator"
DEVICE_PLUGIN_CONFIGMAP = "gpuctl-device-plugin-config"
MIG_CONFIGMAP = "gpuctl-mig-parted-config"
STACK_CONFIGMAP = "gpuctl-stack"  # how gpuctl installed the stack, so later commands can upgrade it
NFD_OWNERS = ("standalone", "operator")
MIG_STRATEGIES = ("mixed", "single")


@dataclass(frozen=True)
class StackSpec:
    charts: str  # upstream | bundled | DIR | oci://...
    nfd: str = "standalone"  # who deploys NFD: its own release, or the operator; never both
    driver: bool = False  # False where the node image ships the driver (sim, NVIDIA AMIs)
    toolkit: bool = False
    mig_strategy: str = "mixed"
    taints: tuple[Taint, ...] = ()
    shares_gpus: bool = False  # some node group shares its GPUs: point the plugin at gpuctl's configs
    dra: bool = False  # GPUs by claim: NVIDIA's DRA driver serves them, the operator's device plugin is off
    dra_alpha_sharing: bool = False  # the DRA driver's alpha time-slicing and MPS gates on


@dataclass(frozen=True)
class GroupSharing:
    """What one node group asks of the device plugin, for the cluster-wide MIG strategy."""

    name: str
    strategy: str  # none | time-slicing | mps
    mig_profiles: tuple[str, ...] = ()  # the group's MIG layout, one entry per instance; () without MIG


def choose_mig_strategy(requested: str | None, groups: list[GroupSharing], field: str) -> str:
    """The operator's one mig.strategy for every node group, or a UsageError naming `field` and the groups.

    The device plugin refuses MPS under `mixed` (k8s-device-plugin cmd/nvidia-device-plugin/main.go,
    validateFlags), and `single` needs one MIG profile per GPU; default: `mixed` unless MPS is in use.
    """
    mps = [g.name for g in groups if g.strategy == "mps"]
    mixed_only = [g.name for g in groups if len(set(g.mig_profiles)) > 1]
    if requested is not None and requested not in MIG_STRATEGIES:
        raise UsageError(field, f"unknown strategy {requested!r}", "use mixed or single")
    if mps and mixed_only:
        raise UsageError(field, f"node group {mps[0]!r} uses MPS, which the device plugin refuses under the "
                         f"mixed MIG strategy that node group {mixed_only[0]!r} needs for its several MIG profiles",
                         f"give {mixed_only[0]!r} a layout of one profile, or use time-slicing on {mps[0]!r}")
    if requested == "mixed" and mps:
        raise UsageError(field, f"node group {mps[0]!r} uses MPS, which the device plugin refuses under the "
                         "mixed MIG strategy", "use the single MIG strategy, or time-slicing")
    if requested == "single" and mixed_only:
        raise UsageError(field, f"node group {mixed_only[0]!r} has several MIG profiles per GPU, which the "
                         "single MIG strategy cannot advertise", "use the mixed MIG strategy")
    return requested or ("single" if mps else "mixed")


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
    return StackSpec(**doc)
