"""Device taints in DRA mode (KEP-5055; DRADeviceTaints and DRADeviceTaintRules GA in Kubernetes 1.37,
k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go): the taints NVIDIA's DRA driver puts on a failing device
in its ResourceSlice, and gpuctl's own DeviceTaintRule that keeps a failed GPU out of scheduling.

The driver's half, kubernetes-sigs/dra-driver-nvidia-gpu at tag v0.4.1, with its alpha feature gate
NVMLDeviceHealthCheck on (pkg/featuregates/featuregates.go:123-129, default off; gpuctl's DRA values turn it on):
- cmd/gpu-kubelet-plugin/device_health.go:35-39, 68-97 healthEventToTaint: an XID critical error of a device taints
  it `gpu.nvidia.com/xid=<XID>` with effect NoSchedule, or None for the XIDs it skips (the application XIDs 13, 31,
  43, 45, 68, 109 and its additionalXidsToIgnore: xidsToSkip, IsEventNonFatal, :417-449); a lost GPU
  `gpu.nvidia.com/gpu-lost` NoSchedule; a GPU it cannot watch `gpu.nvidia.com/unmonitored` None.
- driver.go:496-568 deviceHealthEvents: the taint is added (AddOrUpdateTaint) and the slice republished; nothing
  removes it, and a restarted plugin publishes its devices untainted (driver.go:455-492 publishResources): the
  driver's taint lives as long as its plugin pod.

gpuctl's half: a DeviceTaintRule "adds one taint to all devices which match the selector ... the same effect as if
the taint was specified directly in the ResourceSlice by the DRA driver" (k8s.io/api v0.37.2 resource/v1
types.go:1026-1160), kept until `gpuctl doctor --fix` sees the GPU healthy again, whatever the plugin does meanwhile.
NoSchedule keeps new claims off it; NoExecute also makes kube-controller-manager's device-taint-eviction controller
delete the pods using it at once, without the Eviction API (pkg/controller/devicetainteviction
device_taint_eviction.go addConditionAndDeletePod: no PodDisruptionBudget is consulted).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from gpuctl.model import labels as L
from gpuctl.model.dra import API_VERSION, DRIVER
from gpuctl.util.errors import UsageError

HEALTH_GATE = "NVMLDeviceHealthCheck"  # the driver's feature gate that makes it taint failing devices
FEATURE_GATES_ENV = "FEATURE_GATES"  # how the chart hands its featureGates to the plugin (templates/kubeletplugin.yaml)
XID_TAINT = f"{DRIVER}/xid"
GPU_LOST_TAINT = f"{DRIVER}/gpu-lost"
UNMONITORED_TAINT = f"{DRIVER}/unmonitored"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
EFFECTS = (NO_SCHEDULE, NO_EXECUTE)  # gpuctl's rule's effects (None would keep the device in use)
RULE_KIND = "DeviceTaintRule"
RULE_TAINT = "gpuctl.dev/gpu-failed"  # the key of gpuctl's rule's taint; its value is the XID, where known
RULE_REASON = "gpuctl.dev/gpu-failed"  # annotation on gpuctl's rule: why it was made
RULE_CONDITION = "EvictionInProgress"  # types.go:1158-1159 DeviceTaintConditionEvictionInProgress
_NAME_MAX = 253  # metadata.name: a DNS subdomain (pkg/apis/resource/validation/validation.go:1875)
_GPU = re.compile(r"^gpu-(\d+)(?:$|-mig-)")  # deviceinfo.go:200-232 CanonicalName: gpu-<i>, gpu-<i>-mig-...


def check_effect(effect: str, field: str = "--taint-effect") -> str:
    if effect not in EFFECTS:
        raise UsageError(field, f"{effect!r} is no effect gpuctl's DeviceTaintRule takes",
                         f"use {NO_SCHEDULE} (the default: no new claim gets the GPU; --fix evicts its pods through "
                         f"the Eviction API) or {NO_EXECUTE} (kube-controller-manager deletes its pods at once)")
    return effect


def failing_taint(device: Mapping[str, Any]) -> dict[str, Any] | None:
    """The driver's taint of a published device (as JSON) that says its GPU failed: an XID it does not skip
    (effect NoSchedule) or a lost GPU; None for a healthy device, a skipped XID (effect None), an unmonitored one."""
    for taint in device.get("taints") or []:
        if taint.get("key") == XID_TAINT and taint.get("effect") in EFFECTS:
            return dict(taint)
        if taint.get("key") == GPU_LOST_TAINT and taint.get("effect") in EFFECTS:
            return dict(taint)
    return None


def taint_text(taint: Mapping[str, Any]) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint.get('key')}{value}:{taint.get('effect')}"


def gpu_index(device: str) -> int | None:
    """The GPU index in a device's name (gpu-3, gpu-3-mig-1g5gb-19-0 -> 3); None for another name."""
    found = _GPU.match(device)
    return int(found[1]) if found else None


def rule_name(node: str, device: str) -> str:
    """gpuctl's DeviceTaintRule for `device` of `node`'s pool: gpuctl-<node>-<device>, cut and given a hash of
    both where that is over a DNS subdomain's 253 characters (a node name may take 253 alone)."""
    name = f"gpuctl-{node}-{device}"
    if len(name) <= _NAME_MAX:
        return name
    digest = hashlib.sha256(f"{node}/{device}".encode()).hexdigest()[:10]
    return f"{name[:_NAME_MAX - 11].rstrip('.-')}-{digest}"


def render_rule(node: str, device: str, effect: str, xid: str | None, why: str) -> dict[str, Any]:
    """gpuctl's DeviceTaintRule for one device: selected by driver, pool (the node, as the driver names its
    pools: driver.go:482-486) and device name; labelled as gpuctl's."""
    taint: dict[str, Any] = {"key": RULE_TAINT, "effect": check_effect(effect)}
    if xid:
        taint["value"] = xid
    return {"apiVersion": API_VERSION, "kind": RULE_KIND,
            "metadata": {"name": rule_name(node, device), "labels": {L.MANAGED_BY: L.MANAGER},
                         "annotations": {RULE_REASON: why}},
            "spec": {"deviceSelector": {"driver": DRIVER, "pool": node, "device": device}, "taint": taint}}


def rule_device(rule: Mapping[str, Any]) -> tuple[str, str] | None:
    """(node, device) a gpuctl rule selects; None for a rule of another driver or without pool and device."""
    selector = (rule.get("spec") or {}).get("deviceSelector") or {}
    if selector.get("driver") != DRIVER or not selector.get("pool") or not selector.get("device"):
        return None
    return str(selector["pool"]), str(selector["device"])


def rule_condition(rule: Mapping[str, Any]) -> dict[str, Any] | None:
    """The rule's EvictionInProgress condition once kube-controller-manager has seen its current spec (its
    observedGeneration is the rule's generation: device_taint_eviction.go:586-593); None before."""
    generation = (rule.get("metadata") or {}).get("generation")
    for condition in (rule.get("status") or {}).get("conditions") or []:
        if condition.get("type") == RULE_CONDITION and condition.get("observedGeneration") == generation:
            return dict(condition)
    return None


def plugin_checks_health(env: Mapping[str, str]) -> bool:
    """Whether a kubelet-plugin container's environment turns the driver's health check on (FEATURE_GATES
    `A=true,B=false,` as the chart writes it; featuregate's Set parses `name=bool` pairs)."""
    for part in env.get(FEATURE_GATES_ENV, "").split(","):
        name, _, value = part.strip().partition("=")
        if name == HEALTH_GATE:
            return value.strip().lower() == "true"
    return False
