"""Helm values gpuctl computes for NFD and the GPU Operator (pure; see gpu-facts.md)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from gpuctl.errors import UsageError
from gpuctl.taints import Taint, tolerations

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


def check_stack(spec: StackSpec) -> StackSpec:
    if spec.nfd not in NFD_OWNERS:
        raise UsageError("--nfd", f"unknown owner {spec.nfd!r}", f"use one of: {', '.join(NFD_OWNERS)}")
    if spec.mig_strategy not in MIG_STRATEGIES:
        raise UsageError("--mig-strategy", f"unknown strategy {spec.mig_strategy!r}", "use mixed or single")
    return spec


def operator_values(spec: StackSpec) -> dict[str, Any]:
    return {
        "nfd": {"enabled": spec.nfd == "operator"},
        "driver": {"enabled": spec.driver},
        "toolkit": {"enabled": spec.toolkit},
        "devicePlugin": {"config": {"name": DEVICE_PLUGIN_CONFIGMAP, "default": ""}},
        "mig": {"strategy": spec.mig_strategy},
        "migManager": {"enabled": True, "config": {"name": MIG_CONFIGMAP, "default": "all-disabled"}},
        "dcgmExporter": {"enabled": True},
        "daemonsets": {"tolerations": tolerations(spec.taints)},
    }


def nfd_values(spec: StackSpec) -> dict[str, Any]:
    return {"worker": {"tolerations": tolerations(spec.taints)}}


def stack_record(spec: StackSpec) -> str:
    return json.dumps(asdict(spec), sort_keys=True)


def stack_from_record(text: str) -> StackSpec:
    doc = json.loads(text)
    doc["taints"] = tuple(Taint(**t) for t in doc["taints"])
    return StackSpec(**doc)
