"""doctor's failed-GPU checks in DRA mode, over the Snapshot: a GPU is failed where NVIDIA's DRA driver tainted its
device in its ResourceSlice (gpu.nvidia.com/xid=<XID>:NoSchedule, or gpu-lost: gpuctl.model.device_taints, with
the driver's citations), and gpuctl's own DeviceTaintRule for a device the driver publishes untainted again is
left over (--fix deletes it, as it uncordons only its own cordon in device-plugin mode).

In DRA mode there is no device plugin, so check_failed_gpus (findings.py) finds nothing there; the findings here
have its shape (check gpu-failed, the node, the GPU's index, UUID and XID) and the action `taint-device`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuctl.kube.kube_object import KubeObject
from gpuctl.model.device_taints import (
    NO_EXECUTE,
    NO_SCHEDULE,
    XID_TAINT,
    failing_taint,
    gpu_index,
    rule_device,
    rule_name,
    taint_text,
)
from gpuctl.model.dra import slice_devices
from gpuctl.model.xid import XID_CATALOGUE, needs_replacement, xid_meaning
from gpuctl.ops.doctor.findings import FIX, Finding, Snapshot


def own_rules(rules: list[KubeObject]) -> dict[tuple[str, str], KubeObject]:
    """(node, device) -> gpuctl's DeviceTaintRule for it."""
    found = {}
    for rule in rules:
        if (key := rule_device(rule)) is not None:
            found[key] = rule
    return found


def _uuid(device: Mapping[str, Any]) -> str:
    return str(((device.get("attributes") or {}).get("uuid") or {}).get("string") or "")


def _xid(taint: Mapping[str, Any]) -> int | None:
    value = str(taint.get("value") or "")
    return int(value) if taint.get("key") == XID_TAINT and value.isdigit() else None


def _repair(node: str, device: str, gpu: int | None, xid: int | None, rule: KubeObject | None) -> str:
    which = f"GPU {gpu}" if gpu is not None else "the GPU"
    reset = f"reset {which} (nvidia-smi -r -i {gpu if gpu is not None else '<index>'}, or reboot the node)"
    if needs_replacement(xid):
        reset += ", or replace it (or the node) where the XID comes back"
    taint = "" if rule is not None else (
        f"{FIX} --grace 300 (DeviceTaintRule {rule_name(node, device)}, effect {NO_SCHEDULE}: no claim is allocated "
        f"the device; evicts the pods using it through the Eviction API; --taint-effect {NO_EXECUTE} has "
        "kube-controller-manager delete them at once); then ")
    return (f"{taint}{reset}; then {FIX} (restarts the node's DRA kubelet plugin, whose taint stays until it "
            f"restarts, and deletes gpuctl's DeviceTaintRule once the device is published healthy)")


def check_failed_devices(snap: Snapshot) -> list[Finding]:
    """A finding per device of the GPU nodes in scope that the DRA driver tainted as failed."""
    if not snap.dra:
        return []
    rules = own_rules(snap.taint_rules)
    devices = slice_devices(snap.slices)
    found = []
    for node in snap.nodes:
        for device in sorted(devices.get(node.name, []), key=lambda d: str(d.get("name"))):
            taint = failing_taint(device)
            if taint is None:
                continue
            name = str(device["name"])
            gpu, xid, rule = gpu_index(name), _xid(taint), rules.get((node.name, name))
            meaning = xid_meaning(xid) if xid is not None else "the GPU is lost (NVML: GPU_IS_LOST)"
            evidence: dict[str, Any] = {
                "device": name, "gpu": gpu, "uuid": _uuid(device), "xid": xid if xid is not None else "unknown",
                "meaning": meaning, "taint": taint_text(taint),
                "rule": None if rule is None else rule.name,
                "ruleEffect": None if rule is None else rule.at("spec", "taint", "effect", default=None)}
            what = f"GPU {gpu}" if gpu is not None else f"device {name}"
            reported = f"reported XID {xid}, {meaning}" if xid is not None else f"is lost ({meaning})"
            held = "" if rule is None else f"; gpuctl's DeviceTaintRule {rule.name} keeps it out"
            found.append(Finding(
                "gpu-failed", "error", f"node {node.name}", evidence,
                f"{what} {reported}: the DRA driver tainted its device {name} ({taint_text(taint)}){held}",
                _repair(node.name, name, gpu, xid, rule), XID_CATALOGUE, node.name, gpu,
                action=("taint-device", node.name, name, "" if xid is None else str(xid))))
    return found


def check_own_taint_rules(snap: Snapshot) -> list[Finding]:
    """gpuctl's DeviceTaintRules of the nodes in scope whose device the driver publishes untainted again."""
    if not snap.dra:
        return []
    devices = {(n, str(d.get("name"))): d for n, ds in slice_devices(snap.slices).items() for d in ds}
    names = {n.name for n in snap.nodes}
    found = []
    for (node, device), rule in sorted(own_rules(snap.taint_rules).items()):
        published = devices.get((node, device))
        if node not in names or published is None or failing_taint(published) is not None:
            continue  # not published (its plugin is not running): not known healthy
        found.append(Finding(
            "gpu-device-tainted", "warning", f"DeviceTaintRule {rule.name}",
            {"device": device, "uuid": _uuid(published),
             "effect": rule.at("spec", "taint", "effect", default=None),
             "taint": taint_text(rule.at("spec", "taint", default={}))},
            f"gpuctl tainted device {device} of node {node} for a failed GPU; the DRA driver publishes it healthy "
            "again", f"{FIX} (deletes it: kubectl delete devicetaintrule {rule.name})", None, node,
            gpu_index(device), action=("remove-taint-rule", rule.name, node, device)))
    return found


DRA_CHECKS = (check_failed_devices, check_own_taint_rules)


def diagnose_dra(snap: Snapshot) -> list[Finding]:
    return [finding for check in DRA_CHECKS for finding in check(snap)]
