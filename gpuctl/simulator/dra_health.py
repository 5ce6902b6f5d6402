"""The DRA driver's NVML health check on the sim's GPUs: which devices its kubelet plugin taints for the sim's XID
faults (simulator/xid.py FAULT_XID), recorded on the Node for dra.py's publisher to put in the node's slice.

The rules are kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1's (paths in that repository at that tag):
- only with the alpha feature gate NVMLDeviceHealthCheck on (pkg/featuregates/featuregates.go:123-129), which
  the chart hands the plugin as FEATURE_GATES (templates/kubeletplugin.yaml:166-169): the sim reads the plugin
  pod's environment, as the plugin reads its own;
- cmd/gpu-kubelet-plugin/device_health.go:215-272 run: an XID critical error is looked up by (GPU UUID, GPU
  instance, compute instance) among the devices it publishes (getDevicePlacementMap, :330-365): a whole-GPU event
  (instances 0xFFFFFFFF) finds the full GPU only, so with MIG on it finds no device and is ignored; an instance's
  event finds that MIG device (the sim makes compute instance 0 of each GPU instance, the one it names);
- healthEventToTaint (:68-97): key gpu.nvidia.com/xid, value the XID, effect NoSchedule, or None for the XIDs it
  skips (xidsToSkip, :417-439: 13, 31, 43, 45, 68, 109);
- driver.go:496-568 deviceHealthEvents: AddOrUpdateTaint (one taint per key: a later XID replaces the value),
  republish; no path removes a taint, and a new plugin pod starts untainted (publishResources, driver.go:455-492).
  So the record names the plugin pod it belongs to: a new pod starts afresh and taints again only for the faults
  still on the node (the sim's stand-in for an XID that comes back; a reset GPU's fault is taken off the node).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from gpuctl.kube.gpu_nodes import model_of
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.device_taints import NO_SCHEDULE, XID_TAINT, plugin_checks_health
from gpuctl.simulator.dcgm_series import node_devices
from gpuctl.simulator.dra import PLUGIN_SELECTOR, TAINTS_ANNOTATION, gpu_uuid, node_layout, pci_address
from gpuctl.simulator.xid import FAULT_XID, IGNORED_XIDS, XidFault, parse_faults

PLUGIN_CONTAINER = "gpus"  # the chart's kubelet-plugin container that serves GPUs (templates/kubeletplugin.yaml)


def plugin_env(pod: KubeObject) -> dict[str, str]:
    """The literal environment of the plugin pod's GPU container (the chart's FEATURE_GATES is a literal)."""
    for container in pod.spec.get("containers") or []:
        if container.get("name") == PLUGIN_CONTAINER:
            return {e["name"]: str(e.get("value") or "") for e in container.get("env") or [] if "name" in e}
    return {}


def xid_taint(xid: int) -> dict[str, str]:
    """healthEventToTaint for an XID event."""
    return {"key": XID_TAINT, "value": str(xid), "effect": "None" if xid in IGNORED_XIDS else NO_SCHEDULE}


def tainted_devices(node: Mapping[str, Any], faults: Iterable[XidFault]) -> dict[str, dict[str, str]]:
    """Device name -> the taint the plugin adds for `faults` on the node (as JSON); a fault that finds no device
    is ignored, as the plugin ignores an event "for unexpected device"."""
    labels = node["metadata"].get("labels") or {}
    model = model_of(labels)
    count = labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or "0"
    if model is None or not count.isdigit():
        return {}
    try:
        layout = node_layout(labels, model)
    except ValueError:
        return {}
    devices = node_devices(node["metadata"]["name"], model, int(count), labels, layout, gpu_uuid, pci_address)
    found: dict[str, dict[str, str]] = {}
    for fault in faults:
        on_gpu = [d for d in devices if d.index == fault.gpu]
        if all(not d.profile for d in on_gpu):  # MIG off: NVML's event is the whole GPU's
            hit = on_gpu
        elif fault.instance is None:
            hit = []  # MIG on: no full-GPU device to find (device_health.go:258-262)
        else:
            hit = [d for d in on_gpu if d.instance_id == fault.instance]
        for device in hit:
            found[device.dra_name] = xid_taint(fault.xid)  # AddOrUpdateTaint: the later XID wins
    return found


def next_record(node: KubeObject, plugin_uid: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The plugin's taints after this pass: those it made before (same pod), updated by the node's faults."""
    try:
        record = json.loads(node.annotations.get(TAINTS_ANNOTATION) or "{}")
    except ValueError:
        record = {}
    taints = dict(record.get("taints") or {}) if record.get("plugin") == plugin_uid else {}
    if plugin_checks_health(env):
        faults, _ = parse_faults(node.annotations.get(FAULT_XID))
        taints.update(tainted_devices(node, faults))
    return {"plugin": plugin_uid, "taints": dict(sorted(taints.items()))}


def sync_device_taints(kube: Kube, nodes: list[KubeObject], running_pods: list[KubeObject]) -> None:
    """One pass of every running kubelet plugin's health monitor (of the cluster's Running pods): its node's
    taint record made current (a write only where it changed). dra.render_node_slice puts the recorded taints on
    the slice's devices."""
    pods = [p for p in running_pods if p.matches(PLUGIN_SELECTOR) and p.spec.get("nodeName") and not p.deleting]
    by_node: dict[str, KubeObject] = {}
    for pod in pods:
        by_node.setdefault(pod.spec["nodeName"], pod)
    if not by_node:
        return
    for node in nodes:
        if node.name not in by_node:
            continue
        pod = by_node[node.name]
        record = next_record(node, pod.uid, plugin_env(pod))
        text = json.dumps(record, separators=(",", ":")) if record["taints"] else None  # none: no write at all
        if node.annotations.get(TAINTS_ANNOTATION) != text:
            kube.patch("v1", "Node", node.name, {"metadata": {"annotations": {TAINTS_ANNOTATION: text}}})
