"""A failed GPU in DRA mode: the sim's DRA kubelet plugin taints the failing device as NVIDIA's DRA driver v0.4.1 does
(with its NVMLDeviceHealthCheck gate on), doctor finds it from that taint (gpu-failed: node, GPU, UUID, XID) and
names gpuctl's DeviceTaintRule of a device healthy again; the rule's name, shape and effect."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.device_taints import (
    failing_taint,
    gpu_index,
    plugin_checks_health,
    render_rule,
    rule_condition,
    rule_device,
    rule_name,
)
from gpuctl.ops.doctor.dra_findings import diagnose_dra
from gpuctl.ops.doctor.dra_repair import check_effect_applies
from gpuctl.ops.doctor.findings import Snapshot
from gpuctl.simulator.dra import TAINTS_ANNOTATION, gpu_uuid, render_node_slice
from gpuctl.simulator.dra_health import next_record, tainted_devices
from gpuctl.simulator.xid import FAULT_XID, parse_faults
from gpuctl.util.errors import UsageError

GATE_ON = {"FEATURE_GATES": "NVMLDeviceHealthCheck=true,"}  # as the chart writes featureGates


def node_json(name: str = "gpu-0", gpus: int = 2, annotations: dict[str, str] | None = None,
              labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}", "annotations": annotations or {},
                         "labels": {L.NFD_NVIDIA_PCI: "true", L.NODEGROUP: "gpu", L.GPU_MODEL: "a100-40gb",
                                    L.GPUS_PER_NODE: str(gpus), **(labels or {})}}}


def faults(text: str) -> Any:
    return parse_faults(text)[0]


# -- the driver's half, played by the sim ---------------------------------------------------------------------

def test_a_critical_xid_taints_the_full_gpu_no_schedule_an_application_xid_with_effect_none() -> None:
    assert tainted_devices(node_json(), faults("1:79")) == {
        "gpu-1": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}}
    assert tainted_devices(node_json(), faults("0:13")) == {
        "gpu-0": {"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}}
    assert tainted_devices(node_json(), faults("7:79")) == {}  # no such GPU: "unexpected device", ignored


def test_with_mig_on_a_whole_gpu_event_finds_no_device_an_instance_event_finds_its_own() -> None:
    mig = node_json(gpus=1, labels={L.MIG_CONFIG: "all-3g.20gb", L.MIG_STATE: "success"})
    assert tainted_devices(mig, faults("0:79")) == {}  # device_health.go: placement (uuid, 0xFFFFFFFF, ...) only
    hit = tainted_devices(mig, faults("0/2:48"))
    assert list(hit) == ["gpu-0-mig-3g20gb-9-4"] and hit["gpu-0-mig-3g20gb-9-4"]["value"] == "48"


def test_the_plugin_keeps_its_taints_until_it_restarts_and_needs_its_gate() -> None:
    faulted = KubeObject(node_json(annotations={FAULT_XID: "1:79"}))
    record = next_record(faulted, "pod-a", GATE_ON)
    assert record == {"plugin": "pod-a", "taints": {
        "gpu-1": {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}}}
    cleared = KubeObject(node_json(annotations={TAINTS_ANNOTATION: json.dumps(record)}))
    assert next_record(cleared, "pod-a", GATE_ON) == record  # no path removes a taint (driver.go)
    assert next_record(cleared, "pod-b", GATE_ON) == {"plugin": "pod-b", "taints": {}}  # a new pod starts afresh
    assert next_record(faulted, "pod-a", {}) == {"plugin": "pod-a", "taints": {}}  # gate off (its default)
    assert plugin_checks_health({"FEATURE_GATES": "MPSSupport=true,NVMLDeviceHealthCheck=false,"}) is False


def test_the_slice_publishes_the_recorded_taint_on_its_device() -> None:
    taint = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    record = {"plugin": "pod-a", "taints": {"gpu-1": taint}}
    body = render_node_slice(node_json(annotations={TAINTS_ANNOTATION: json.dumps(record)}))
    assert body is not None
    devices = {d["name"]: d for d in body["spec"]["devices"]}
    assert devices["gpu-1"]["taints"] == [taint] and "taints" not in devices["gpu-0"]


# -- gpuctl's rule ---------------------------------------------------------------------------------------------

def test_the_rule_is_named_for_node_and_device_within_a_dns_subdomain() -> None:
    assert rule_name("gpu-0", "gpu-1") == "gpuctl-gpu-0-gpu-1"
    long = rule_name("n" * 253, "gpu-1")
    assert len(long) <= 253 and long.startswith("gpuctl-nnn") and long != rule_name("n" * 252, "gpu-1")
    rule = render_rule("gpu-0", "gpu-1", "NoSchedule", "79", "gpu-failed: device gpu-1 XID 79")
    assert rule["spec"] == {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-0", "device": "gpu-1"},
                            "taint": {"key": "gpuctl.dev/gpu-failed", "value": "79", "effect": "NoSchedule"}}
    assert rule["metadata"]["labels"] == {L.MANAGED_BY: L.MANAGER} and rule_device(rule) == ("gpu-0", "gpu-1")
    with pytest.raises(UsageError, match="--taint-effect"):
        render_rule("gpu-0", "gpu-1", "None", None, "")


def test_the_rule_is_in_force_once_the_controller_saw_its_generation() -> None:
    condition = {"type": "EvictionInProgress", "status": "False", "observedGeneration": 1,
                 "reason": "EffectNoSchedule"}
    assert rule_condition({"metadata": {"generation": 2}, "status": {"conditions": [condition]}}) is None
    assert rule_condition({"metadata": {"generation": 1}, "status": {"conditions": [condition]}}) == condition


def test_the_gpu_index_of_full_and_mig_devices() -> None:
    assert (gpu_index("gpu-3"), gpu_index("gpu-3-mig-3g20gb-9-4"), gpu_index("vfio-3")) == (3, 3, None)
    assert failing_taint({"taints": [{"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}]}) is None
    assert failing_taint({"taints": [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}]}) is not None


# -- doctor ----------------------------------------------------------------------------------------------------

def snapshot(nodes: list[dict[str, Any]], rules: list[dict[str, Any]] | None = None, dra: bool = True) -> Snapshot:
    slices = [KubeObject(s) for n in nodes if (s := render_node_slice(n)) is not None]
    return Snapshot(nodes=[KubeObject(n) for n in nodes], plugin_pods={}, daemon_sets=[], deployments=[],
                    policies=[], plans={}, tenants=[], admission={}, now=datetime.now(timezone.utc), dra=dra,
                    slices=slices, taint_rules=[KubeObject(r) for r in rules or []])


def tainted(name: str = "gpu-0", device: str = "gpu-1", xid: str = "79", effect: str = "NoSchedule"
            ) -> dict[str, Any]:
    record = {"plugin": "p", "taints": {device: {"key": "gpu.nvidia.com/xid", "value": xid, "effect": effect}}}
    return node_json(name, annotations={TAINTS_ANNOTATION: json.dumps(record)})


def test_doctor_names_the_failed_gpu_from_the_drivers_taint() -> None:
    [finding] = diagnose_dra(snapshot([tainted(), node_json("gpu-9")]))
    assert (finding.check, finding.node, finding.gpu, finding.fixable) == ("gpu-failed", "gpu-0", 1, True)
    assert finding.evidence["uuid"] == gpu_uuid("gpu-0", 1) and finding.evidence["xid"] == 79
    assert finding.evidence["taint"] == "gpu.nvidia.com/xid=79:NoSchedule" and finding.evidence["rule"] is None
    assert "GPU 1 reported XID 79" in finding.cause and "DeviceTaintRule gpuctl-gpu-0-gpu-1" in finding.repair
    assert finding.action == ("taint-device", "gpu-0", "gpu-1", "79")
    assert diagnose_dra(snapshot([tainted(xid="13", effect="None")])) == []  # an application XID: not failed
    assert diagnose_dra(snapshot([tainted()], dra=False)) == []  # device-plugin mode: findings.py's checks


def test_doctor_says_gpuctls_rule_holds_a_failed_device_and_names_one_left_over() -> None:
    rule = render_rule("gpu-0", "gpu-1", "NoExecute", "79", "")
    [held] = diagnose_dra(snapshot([tainted()], [rule]))
    assert held.evidence["rule"] == "gpuctl-gpu-0-gpu-1" and held.evidence["ruleEffect"] == "NoExecute"
    assert "keeps it out" in held.cause and "deletes gpuctl's DeviceTaintRule" in held.repair
    [left] = diagnose_dra(snapshot([node_json()], [rule]))  # the driver publishes gpu-1 untainted again
    assert (left.check, left.object, left.gpu) == ("gpu-device-tainted", "DeviceTaintRule gpuctl-gpu-0-gpu-1", 1)
    assert left.action == ("remove-taint-rule", "gpuctl-gpu-0-gpu-1", "gpu-0", "gpu-1")
    assert diagnose_dra(snapshot([node_json("gpu-9")], [rule])) == []  # its node not in scope or not publishing


class NoDeviceClass:
    """A cluster in device-plugin mode, as check_effect_applies reads it."""

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        assert (api_version, kind, name) == ("resource.k8s.io/v1", "DeviceClass", "gpu.nvidia.com")
        raise KubeNotFound("deviceclasses.resource.k8s.io \"gpu.nvidia.com\" not found", status=404)


def test_no_execute_is_refused_outside_dra_mode_before_any_write() -> None:
    check_effect_applies(NoDeviceClass(), "NoSchedule")  # type: ignore[arg-type]  # the default: fine anywhere
    with pytest.raises(UsageError, match="not in DRA mode") as refused:
        check_effect_applies(NoDeviceClass(), "NoExecute")  # type: ignore[arg-type]
    assert refused.value.field == "--taint-effect"
