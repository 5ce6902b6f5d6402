"""`gpuctl doctor`'s checks on JSON fixtures (objects as the API server sends them): a healthy cluster gives no
finding; each fault gives its finding, with its evidence, cause, reference and repair. And --fix: each safe repair
said before it is done, then the findings read again."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from gpuctl.kube.errors import KubeUnavailable
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.prometheus import Sample
from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS
from gpuctl.model.mig import parse_layout
from gpuctl.model.security import broken_floors, component_of, parse_version
from gpuctl.model.sharing import Sharing
from gpuctl.model.spec import GroupPlan, NodeGroupSpec
from gpuctl.model.taints import Taint
from gpuctl.model.xid import XID_CATALOGUE
from gpuctl.ops.doctor import doctor as doctor_module
from gpuctl.ops.doctor import gpu_repair
from gpuctl.ops.doctor.findings import (
    CORDONED,
    DEVICE_PLUGIN_ISSUE_1645,
    FENCE_KINDS,
    GPU_OPERATOR_ISSUE_2833,
    MIG_PARTED_ISSUE_484,
    TOLERATION_KINDS,
    Finding,
    GpuXid,
    Snapshot,
    diagnose,
)
from gpuctl.util.errors import UsageError, WaitTimeout
from gpuctl.util.output import document
from tests.output_contract import faults

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
NS = "gpu-operator"


def node(name: str = "gpu-0", labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         allocatable: dict[str, str] | None = None) -> KubeObject:
    return KubeObject({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {L.NFD_NVIDIA_PCI: "true", L.NODEGROUP: "gpu", L.GPU_MODEL: "t4",
                                              "nvidia.com/device-plugin.config": "t4-4", **(labels or {})}},
        "spec": {"taints": [TAINT] if taints is None else taints},
        "status": {"allocatable": {"cpu": "4", L.GPU_RESOURCE: "4"} if allocatable is None else allocatable}})


def plugin_pod(on: str = "gpu-0", started: timedelta = timedelta(minutes=5), ready: bool = True) -> KubeObject:
    return KubeObject({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"nvidia-device-plugin-daemonset-{on}", "namespace": NS,
                     "labels": {"app": L.DEVICE_PLUGIN_APP}},
        "spec": {"nodeName": on},
        "status": {"phase": "Running", "startTime": (NOW - started).isoformat().replace("+00:00", "Z"),
                   "containerStatuses": [{"name": "plugin", "ready": ready, "state": {"running": {}}}]}})


def workload(kind: str, name: str, image: str) -> KubeObject:
    return KubeObject({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": NS},
                       "spec": {"template": {"spec": {"containers": [{"name": name, "image": image}]}}}})


HEALTHY_WORKLOADS = [
    workload("DaemonSet", "nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
    workload("DaemonSet", "nvidia-container-toolkit-daemonset", "nvcr.io/nvidia/k8s/container-toolkit:v1.20.0"),
    workload("DaemonSet", "nvidia-dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless"),
    workload("DaemonSet", "nvidia-mig-manager", "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.15.0"),
    workload("DaemonSet", "gpu-feature-discovery", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
    workload("DaemonSet", "nvidia-driver-daemonset", "nvcr.io/nvidia/nvidia-driver-daemonset:sim"),
]
OPERATOR = workload("Deployment", "gpu-operator", "nvcr.io/nvidia/gpu-operator:v26.7.0")
POLICY = KubeObject({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
                     "spec": {"devicePlugin": {"enabled": True}, "toolkit": {"version": "v1.20.0"}}})
GROUP = GroupPlan(NodeGroupSpec("gpu", GPUS["t4"], 0, 1), Sharing("time-slicing", 4))
ADMISSION = {kind: {"gpuctl-gpu-fence"} for kind in FENCE_KINDS} | \
    {kind: {"gpuctl-gpu-tolerations"} for kind in TOLERATION_KINDS}


def snapshot(**changes: Any) -> Snapshot:
    base: dict[str, Any] = {
        "nodes": [node("gpu-0"), node("gpu-1")],
        "plugin_pods": {"gpu-0": plugin_pod("gpu-0"), "gpu-1": plugin_pod("gpu-1")},
        "daemon_sets": list(HEALTHY_WORKLOADS), "deployments": [OPERATOR], "policies": [POLICY],
        "plans": {"gpu": GROUP}, "tenants": ["team-a"], "admission": copy.deepcopy(ADMISSION), "now": NOW}
    return Snapshot(**{**base, **changes})


def only(findings: list[Finding], check: str) -> Finding:
    assert [f.check for f in findings] == [check], [f.as_dict() for f in findings]
    return findings[0]


def test_a_healthy_cluster_has_no_finding() -> None:
    assert diagnose(snapshot()) == []


# -- a. security floor ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("component", "tag", "version"), [
    ("k8s-device-plugin", "v0.17.0", (0, 17, 0)),
    ("container-toolkit", "v1.17.8-ubuntu20.04", (1, 17, 8)),
    ("dcgm-exporter", "4.6.0-4.8.3-distroless", (4, 8, 3)),  # DCGM's version, then the exporter's
    ("dcgm-exporter", "3.3.5-3.4.1-ubuntu22.04", (3, 4, 1)),
    ("gpu-operator", "v26.3", (26, 3, 0)),
    ("k8s-device-plugin", "sim", None),
    ("k8s-device-plugin", "latest", None),
])
def test_a_tag_names_the_components_version(component: str, tag: str, version: tuple[int, ...] | None) -> None:
    assert parse_version(component, tag) == version


def test_an_image_names_its_component_by_its_last_path_part() -> None:
    assert component_of("nvcr.io/nvidia/k8s/container-toolkit:v1.17.0") == ("container-toolkit", "v1.17.0")
    assert component_of("registry:5000/nvidia/k8s-device-plugin") is None  # a port is no tag
    assert component_of("nvcr.io/nvidia/k8s-device-plugin@sha256:abc") is None
    assert component_of("nvcr.io/nvidia/cuda:12.4") is None
    assert [f.advisory for f in broken_floors("container-toolkit", (1, 17, 0))] == ["CVE-2026-24260",
                                                                                      "CVE-2025-23266"]
    assert broken_floors("container-toolkit", (1, 19, 1)) == []


def test_an_old_device_plugin_is_named_with_its_fixed_version() -> None:
    old = workload("DaemonSet", "nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.17.0")
    finding = only(diagnose(snapshot(daemon_sets=[old, *HEALTHY_WORKLOADS[1:]])), "security-floor")
    assert finding.object == f"DaemonSet {NS}/nvidia-device-plugin-daemonset"
    assert finding.evidence["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    assert (finding.evidence["version"], finding.evidence["fixedVersion"]) == ("0.17.0", "0.17.3")
    assert "below 0.17.3" in finding.cause
    assert finding.repair.startswith("kubectl patch clusterpolicy cluster-policy --type merge")
    assert '"devicePlugin":{"version":"v0.17.3"}' in finding.repair and not finding.fixable


def test_an_old_toolkit_in_the_cluster_policy_names_both_cves() -> None:
    policy = KubeObject(copy.deepcopy(dict(POLICY)))
    policy["spec"]["toolkit"]["version"] = "v1.17.0"
    finding = only(diagnose(snapshot(policies=[policy])), "security-floor")
    assert finding.evidence["advisories"] == ["CVE-2026-24260", "CVE-2025-23266"]
    assert finding.object == "ClusterPolicy cluster-policy spec.toolkit.version"
    assert "CVE-2026-24260" in (finding.reference or "") and finding.evidence["fixedVersion"] == "1.19.1"
    # the lowest version seen is named, and where else it runs
    assert finding.evidence["seenAt"] == ["ClusterPolicy cluster-policy spec.toolkit.version",
                                          f"DaemonSet {NS}/nvidia-container-toolkit-daemonset"]


def test_an_old_dcgm_exporter_and_operator_are_named_gfd_is_not() -> None:
    found = diagnose(snapshot(
        daemon_sets=[workload("DaemonSet", "nvidia-dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.1"),
                     workload("DaemonSet", "gpu-feature-discovery", "nvcr.io/nvidia/k8s-device-plugin:v0.14.0")],
        deployments=[workload("Deployment", "gpu-operator", "nvcr.io/nvidia/gpu-operator:v25.10.1")]))
    assert {(f.evidence["component"], f.evidence["version"]) for f in found} == {
        ("dcgm-exporter", "4.1.1"), ("gpu-operator", "25.10.1")}
    assert next(f for f in found if f.evidence["component"] == "dcgm-exporter").evidence["advisories"] == [
        "CVE-2026-47483"]


# -- b. MIG changes -----------------------------------------------------------------------------------------------


def test_a_failed_mig_change_is_named() -> None:
    broken = node("gpu-1", {L.MIG_CONFIG: "all-1g.5gb", L.MIG_STATE: "failed"})
    finding = only(diagnose(snapshot(nodes=[node(), broken])), "mig-change-failed")
    assert (finding.node, finding.reference) == ("gpu-1", MIG_PARTED_ISSUE_484)
    assert finding.evidence == {L.MIG_CONFIG: "all-1g.5gb", L.MIG_STATE: "failed"}
    assert finding.repair.startswith(f"read 'kubectl logs -n {NS} -l app=nvidia-mig-manager', then kubectl label")
    mig_group = GroupPlan(NodeGroupSpec("gpu", GPUS["a100-40gb"], 0, 1), mig=parse_layout("all-balanced",
                                                                                          GPUS["a100-40gb"]))
    assert not finding.fixable  # no group records a layout: nothing known good to go back to
    again = only(diagnose(snapshot(nodes=[broken], plans={"gpu": mig_group})), "mig-change-failed")
    assert again.repair == ("gpuctl doctor --fix (rolls back from all-1g.5gb to all-balanced, its node group's "
                            "recorded layout)"), again.repair
    assert again.action == ("repair-mig", "gpu-1", "rollback", "all-balanced")


def test_a_pending_change_with_operands_paused_is_a_wedge_and_pending_alone_is_not() -> None:
    paused = {L.MIG_STATE: "pending", L.MIG_CONFIG: "all-1g.5gb",
              f"{L.DEPLOY_PREFIX}device-plugin": L.PAUSED_FOR_MIG, f"{L.DEPLOY_PREFIX}dcgm-exporter": L.PAUSED_FOR_MIG,
              f"{L.DEPLOY_PREFIX}driver": "true"}
    finding = only(diagnose(snapshot(nodes=[node("gpu-0", paused)])), "mig-change-wedged")
    assert finding.reference == GPU_OPERATOR_ISSUE_2833
    assert finding.evidence["paused"] == {f"{L.DEPLOY_PREFIX}dcgm-exporter": L.PAUSED_FOR_MIG,
                                          f"{L.DEPLOY_PREFIX}device-plugin": L.PAUSED_FOR_MIG}
    assert finding.repair == ("gpuctl doctor --fix (restores the deploy labels dcgm-exporter, device-plugin to true, "
                              "then finishes the change to all-1g.5gb)")
    assert finding.action == ("repair-mig", "gpu-0", "finish", "all-1g.5gb", f"{L.DEPLOY_PREFIX}dcgm-exporter=true",
                              f"{L.DEPLOY_PREFIX}device-plugin=true")
    assert diagnose(snapshot(nodes=[node("gpu-0", {L.MIG_STATE: "pending", L.MIG_CONFIG: "all-1g.5gb"})])) == []


# -- c. a device plugin serving nothing -------------------------------------------------------------------------


def test_a_running_plugin_that_serves_nothing_is_named_and_fixable() -> None:
    empty = node("gpu-1", allocatable={"cpu": "4", L.GPU_RESOURCE: "0"})
    finding = only(diagnose(snapshot(nodes=[node(), empty])), "plugin-serves-nothing")
    assert finding.reference == DEVICE_PLUGIN_ISSUE_1645 and finding.fixable
    assert finding.evidence["allocatable"] == {L.GPU_RESOURCE: 0}
    assert finding.evidence["pod"] == f"{NS}/nvidia-device-plugin-daemonset-gpu-1"
    assert finding.action == ("restart-plugin", "gpu-1", NS, "nvidia-device-plugin-daemonset-gpu-1")
    assert finding.repair.startswith("gpuctl doctor --fix")


@pytest.mark.parametrize("pod", [plugin_pod("gpu-1", started=timedelta(seconds=2)),  # still registering
                                 plugin_pod("gpu-1", ready=False), None])
def test_a_plugin_that_is_starting_or_not_running_is_not_blamed(pod: KubeObject | None) -> None:
    empty = node("gpu-1", allocatable={"cpu": "4"})
    pods = {"gpu-0": plugin_pod("gpu-0"), **({"gpu-1": pod} if pod else {})}
    assert diagnose(snapshot(nodes=[node(), empty], plugin_pods=pods)) == []


def test_a_node_without_a_config_label_is_not_the_race() -> None:
    bare = node("gpu-1", allocatable={"cpu": "4"})
    del bare["metadata"]["labels"]["nvidia.com/device-plugin.config"]
    assert diagnose(snapshot(nodes=[bare])) == []


def test_a_node_whose_every_gpu_failed_is_a_failed_gpu_not_the_race() -> None:
    # One T4 (g4dn.xlarge) shared 4 ways, XID 79: the plugin lists it unhealthy, the kubelet keeps it in capacity and
    # leaves it out of allocatable. Its plugin is not to be restarted: that would list the GPU healthy again.
    failed = node("gpu-1", allocatable={"cpu": "4", L.GPU_RESOURCE: "0"})
    failed["status"]["capacity"] = {"cpu": "4", L.GPU_RESOURCE: "4"}
    finding = only(diagnose(snapshot(nodes=[node(), failed])), "gpu-failed")
    assert (finding.node, finding.evidence["unhealthy"], finding.action) == (
        "gpu-1", {L.GPU_RESOURCE: 4}, ("drain-gpus", "gpu-1"))


# -- d. taints ----------------------------------------------------------------------------------------------------


def test_a_gpu_node_without_its_groups_taint_is_named() -> None:
    untainted = node("gpu-1", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    finding = only(diagnose(snapshot(nodes=[node(), untainted])), "gpu-taint-missing")
    assert finding.evidence["missing"] == ["nvidia.com/gpu=true:NoSchedule"]
    assert finding.repair == "kubectl taint node gpu-1 nvidia.com/gpu=true:NoSchedule"


def test_a_taint_no_group_declares_is_named_transient_ones_are_not() -> None:
    extra = node("gpu-1", taints=[TAINT, {"key": "nvidia.com/gpu", "value": "l4", "effect": "NoExecute"},
                                  {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}])
    finding = only(diagnose(snapshot(nodes=[node(), extra])), "gpu-taint-undeclared")
    assert finding.evidence["undeclared"] == ["nvidia.com/gpu=l4:NoExecute"]
    assert finding.repair == "kubectl taint node gpu-1 nvidia.com/gpu:NoExecute-"


def test_a_node_of_no_recorded_group_needs_some_taint() -> None:
    other = node("gpu-9", {L.NODEGROUP: "adopted"}, taints=[])
    finding = only(diagnose(snapshot(nodes=[other], plans={})), "gpu-taint-missing")
    assert finding.repair == "kubectl taint node gpu-9 nvidia.com/gpu=true:NoSchedule"
    dedicated = node("gpu-9", {L.NODEGROUP: "adopted"}, taints=[{"key": "team", "value": "x", "effect": "NoSchedule"}])
    assert diagnose(snapshot(nodes=[dedicated], plans={})) == []  # no record: no taint is undeclared
    group = GroupPlan(NodeGroupSpec("gpu", GPUS["t4"], 0, 1, taints=(Taint("dedicated", "gpu", "NoSchedule"),)))
    found = diagnose(snapshot(plans={"gpu": group}))
    assert {f.check for f in found} == {"gpu-taint-missing", "gpu-taint-undeclared"}


# -- e. tenant policies -------------------------------------------------------------------------------------------


def test_a_deleted_fence_binding_is_named_and_fixable() -> None:
    admission = copy.deepcopy(ADMISSION)
    admission["ValidatingAdmissionPolicyBinding"] = set()
    finding = only(diagnose(snapshot(admission=admission)), "tenant-fence-missing")
    assert finding.evidence == {"missing": ["ValidatingAdmissionPolicyBinding gpuctl-gpu-fence"],
                                "tenants": ["team-a"]}
    assert finding.action == ("ensure-fence",) and finding.object == "ValidatingAdmissionPolicyBinding gpuctl-gpu-fence"


def test_tolerations_are_asked_for_only_where_served_and_only_with_tenants() -> None:
    admission = {kind: names for kind, names in ADMISSION.items() if kind in FENCE_KINDS}
    assert diagnose(snapshot(admission=admission)) == []  # no MutatingAdmissionPolicy before 1.36
    gone = {**copy.deepcopy(ADMISSION), "MutatingAdmissionPolicy": set(), "MutatingAdmissionPolicyBinding": set()}
    finding = only(diagnose(snapshot(admission=gone)), "tenant-tolerations-missing")
    assert finding.evidence["missing"] == ["MutatingAdmissionPolicy gpuctl-gpu-tolerations",
                                           "MutatingAdmissionPolicyBinding gpuctl-gpu-tolerations"]
    assert diagnose(snapshot(admission=gone, tenants=[])) == []


# -- output and --fix ---------------------------------------------------------------------------------------------


def test_findings_keep_the_output_contract() -> None:
    admission = {**copy.deepcopy(ADMISSION), "ValidatingAdmissionPolicyBinding": set()}
    found = diagnose(snapshot(
        nodes=[node("gpu-0", {L.MIG_STATE: "failed", L.MIG_CONFIG: "all-1g.5gb"}, taints=[]),
               node("gpu-1", allocatable={L.GPU_RESOURCE: "0"})],
        daemon_sets=[workload("DaemonSet", "nvidia-device-plugin-daemonset", "nvcr.io/nvidia/k8s-device-plugin:v0.17")],
        admission=admission))
    assert len({f.check for f in found}) == 5
    data = document([f.as_dict() for f in found])
    assert faults(data) == [], faults(data)
    assert all({"check", "severity", "object", "evidence", "cause", "reference", "repair", "fixable"} <= set(row)
               for row in data)


def test_fix_says_each_repair_first_does_only_the_safe_ones_then_looks_again(monkeypatch: pytest.MonkeyPatch) -> None:
    admission = {**copy.deepcopy(ADMISSION), "ValidatingAdmissionPolicyBinding": set(),
                 "MutatingAdmissionPolicyBinding": set()}
    found = diagnose(snapshot(nodes=[node("gpu-0", {L.MIG_STATE: "failed"}), node("gpu-1", allocatable={})],
                              admission=admission))
    assert {f.check for f in found} == {"mig-change-failed", "plugin-serves-nothing", "tenant-fence-missing",
                                        "tenant-tolerations-missing"}
    done: list[str] = []

    class FakeKube:
        def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> bool:
            done.append(f"delete {kind} {namespace}/{name}")
            return True

    monkeypatch.setattr(doctor_module, "info", lambda line: done.append(f"said: {line}"))
    monkeypatch.setattr(doctor_module, "ensure_fence", lambda kube: done.append("ensure_fence"))
    monkeypatch.setattr(doctor_module, "wait_fence_in_force", lambda kube, ns: done.append(f"fence in force {ns}"))
    monkeypatch.setattr(doctor_module, "cluster_groups", lambda kube: (GROUP,))
    monkeypatch.setattr(doctor_module, "converge_tolerations",
                        lambda kube, groups, probe, new_namespace: done.append(f"tolerations {probe}"))
    monkeypatch.setattr(doctor_module, "wait_serving", lambda kube, names, timeout: done.append(f"wait {names}"))
    left = [f for f in found if f.check == "mig-change-failed"]
    monkeypatch.setattr(doctor_module, "doctor", lambda kube, nodegroup, node: left)
    assert doctor_module.fix(FakeKube(), found) == left  # type: ignore[arg-type]
    said = [i for i, line in enumerate(done) if line.startswith("said:")]
    assert len(said) == 3 and "mig" not in " ".join(done)  # the MIG failure is named, not touched
    assert done[said[0] + 1] == f"delete Pod {NS}/nvidia-device-plugin-daemonset-gpu-1"  # said, then done
    assert done[said[1] + 1:said[1] + 3] == ["ensure_fence", "fence in force team-a"]
    assert done[said[2] + 1] == "tolerations team-a"
    assert done[-1] == "wait ['gpu-1']"


# -- f. failed GPUs ---------------------------------------------------------------------------------------------

def failed_node(name: str = "gpu-0", allocatable: str = "12", cordoned: str | None = None,
                unschedulable: bool = False) -> KubeObject:
    made = node(name, allocatable={"cpu": "4", L.GPU_RESOURCE: allocatable})
    made["status"]["capacity"] = {"cpu": "4", L.GPU_RESOURCE: "16"}  # 4 GPUs shared 4 ways, one failed
    if cordoned is not None:
        made["metadata"]["annotations"] = {CORDONED: cordoned}
    if unschedulable or cordoned is not None:
        made["spec"]["unschedulable"] = True
    return made


UUID = "GPU-0b7b0bb2-0000-4000-8000-000000000001"


def test_a_failed_gpu_is_named_with_its_xid_meaning_and_a_drain_and_reset_or_replace_repair() -> None:
    xids = {"gpu-0": [GpuXid(1, UUID, 79), GpuXid(2, "GPU-other", 13)]}  # 13: an application's, not a failure
    found = only(diagnose(snapshot(nodes=[failed_node(), node("gpu-1")], xids=xids, xids_read=True)), "gpu-failed")
    assert (found.node, found.gpu, found.severity) == ("gpu-0", 1, "error")
    assert found.evidence == {"unhealthy": {L.GPU_RESOURCE: 4}, "node": "in service", "gpu": 1, "uuid": UUID,
                              "xid": 79, "meaning": "GPU has fallen off the bus"}
    assert "GPU 1 reported XID 79, GPU has fallen off the bus" in found.cause
    assert "gpuctl doctor --fix --grace 300 (cordons gpu-0" in found.repair
    assert "nvidia-smi -r -i 1" in found.repair and "replace it" in found.repair
    assert found.reference == XID_CATALOGUE and found.action == ("drain-gpus", "gpu-0")


def test_a_failed_gpu_without_metrics_is_named_by_the_kubelets_record_alone() -> None:
    found = only(diagnose(snapshot(nodes=[failed_node(), node("gpu-1")])), "gpu-failed")
    assert found.gpu is None and found.evidence["xid"] == "unknown (DCGM metrics not reachable)"
    assert "marked 4 nvidia.com/gpu unhealthy" in found.cause and found.fixable


def test_devices_unhealthy_while_their_plugin_is_gone_or_starting_are_no_failed_gpu() -> None:
    # the kubelet marks all of a disconnected plugin's devices unhealthy (devicemanager PluginDisconnected)
    assert diagnose(snapshot(nodes=[failed_node(allocatable="0"), node("gpu-1")],
                             plugin_pods={"gpu-1": plugin_pod("gpu-1")})) == []
    assert diagnose(snapshot(nodes=[failed_node(), node("gpu-1")],
                             plugin_pods={"gpu-0": plugin_pod("gpu-0", ready=False),
                                          "gpu-1": plugin_pod("gpu-1")})) == []


def test_a_failed_mig_device_counts_one_of_its_profile() -> None:
    made = node("gpu-0", allocatable={"nvidia.com/mig-1g.5gb": "6"})
    made["status"]["capacity"] = {"nvidia.com/mig-1g.5gb": "7"}
    xids = {"gpu-0": [GpuXid(0, UUID, 48, instance="9")]}
    found = only(diagnose(snapshot(nodes=[made, node("gpu-1")], xids=xids, xids_read=True)), "gpu-failed")
    assert found.evidence["unhealthy"] == {"nvidia.com/mig-1g.5gb": 1} and found.evidence["gpuInstance"] == "9"
    assert "GPU 0 (MIG instance 9) reported XID 48, double-bit ECC error (DBE)" in found.cause


def test_a_node_gpuctl_cordoned_is_uncordoned_once_healthy_and_another_cordon_is_left_alone() -> None:
    healthy_again = failed_node("gpu-0", allocatable="16", cordoned="gpu-failed: GPU 1 XID 79")
    cordoned_by_someone = failed_node("gpu-1", allocatable="16", unschedulable=True)
    found = only(diagnose(snapshot(nodes=[healthy_again, cordoned_by_someone])), "gpu-node-cordoned")
    assert found.node == "gpu-0" and found.action == ("uncordon", "gpu-0") and found.severity == "warning"
    still_failed = failed_node("gpu-0", cordoned="gpu-failed: GPU 1 XID 79")
    failed = only(diagnose(snapshot(nodes=[still_failed, node("gpu-1")])), "gpu-failed")
    assert failed.evidence["node"] == "cordoned by gpuctl" and "--grace" not in failed.repair


class FakeDrainKube:
    """The Kube calls --fix's failed-GPU repair makes, recorded; evictions refused (429) `refusals` times."""

    def __init__(self, nodes: list[KubeObject], pods: list[dict[str, Any]], refusals: int = 0) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.pods = pods
        self.refusals = refusals
        self.done: list[str] = []

    def get_or_none(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> KubeObject | None:
        return self.nodes.get(name)

    def patch(self, api_version: str, kind: str, name: str, patch: Any, namespace: str | None = None) -> KubeObject:
        self.done.append(f"patch {kind} {name} {patch}")
        return self.nodes[name]

    def list(self, api_version: str, kind: str, namespace: str | None = None, *, labels: str = "",
             fields: str = "", what: str | None = None) -> list[KubeObject]:
        return [KubeObject(p) for p in self.pods if fields == f"spec.nodeName={p['spec']['nodeName']}"]

    def create(self, obj: dict[str, Any], *, subresource: str | None = None, name: str | None = None) -> KubeObject:
        assert (obj["apiVersion"], obj["kind"], subresource) == ("policy/v1", "Eviction", "eviction")
        if self.refusals:
            self.refusals -= 1
            self.done.append(f"refused {name}")
            raise KubeUnavailable("Cannot evict pod as it would violate the pod's disruption budget.", status=429)
        self.done.append(f"evict {name}")
        self.pods = [p for p in self.pods if p["metadata"]["name"] != name]
        return KubeObject(obj)


def pod(name: str, on: str, limits: dict[str, str] | None = None, owner: str = "ReplicaSet") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "ownerReferences": [{"kind": owner}]},
            "spec": {"nodeName": on, "containers": [{"name": "c", "resources": {"limits": limits or {}}}]},
            "status": {"phase": "Running"}}


def test_fix_cordons_with_gpuctls_mark_and_evicts_only_the_nodes_gpu_pods_through_the_eviction_api(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [pod("train", "gpu-0", {L.GPU_RESOURCE: "1"}), pod("mig", "gpu-0", {"nvidia.com/mig-1g.5gb": "1"}),
            pod("web", "gpu-0"), pod("gpu-ds", "gpu-0", {L.GPU_RESOURCE: "1"}, owner="DaemonSet"),
            pod("elsewhere", "gpu-1", {L.GPU_RESOURCE: "1"})]
    kube = FakeDrainKube([failed_node(), node("gpu-1")], pods, refusals=1)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        kube.done.append("said")

    monkeypatch.setattr(gpu_repair, "info", say)
    monkeypatch.setattr(gpu_repair.time, "sleep", lambda s: None)
    found = diagnose(snapshot(nodes=[failed_node(), node("gpu-1")], xids={"gpu-0": [GpuXid(1, UUID, 79)]},
                              xids_read=True))
    monkeypatch.setattr(doctor_module, "doctor", lambda kube, nodegroup, node: [])
    assert doctor_module.fix(kube, found, grace=60) == []  # type: ignore[arg-type]
    assert kube.done[0] == "said" and kube.done[1].startswith(f"patch Node gpu-0 {{'metadata': {{'annotations': "
                                                              f"{{'{CORDONED}': 'gpu-failed: GPU 1 XID 79'}}}}")
    assert "'unschedulable': True" in kube.done[1]
    evicted = [line for line in kube.done if line.startswith(("evict", "refused"))]
    assert evicted == ["refused train", "evict mig", "evict train"]  # web, the DaemonSet's and gpu-1's stay
    assert any("refused (Cannot evict pod" in line and "--grace" in line for line in said)
    assert said[-1] == "fix: node gpu-0: its GPU pods are evicted (2)"


def test_fix_names_the_pods_a_pdb_keeps_past_grace_and_keeps_the_cordon(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeDrainKube([failed_node()], [pod("train", "gpu-0", {L.GPU_RESOURCE: "1"})], refusals=10**6)
    monkeypatch.setattr(gpu_repair, "info", lambda line: None)
    times = iter(range(0, 1000, 5))
    with pytest.raises(WaitTimeout, match=r"node gpu-0: 1 GPU pods left after --grace 60s: team-a/train "
                                          r"\(Cannot evict pod"):
        gpu_repair.drain_gpu_pods(kube, "gpu-0", 60, clock=lambda: float(next(times)),  # type: ignore[arg-type]
                                  sleep=lambda s: None)


def test_fix_restarts_the_plugin_of_a_node_gpuctl_cordoned_and_uncordons_it_once_healthy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cordoned = failed_node(cordoned="gpu-failed: GPU 1 XID 79")
    kube = FakeDrainKube([cordoned], [])
    restarted: list[str] = []
    monkeypatch.setattr(gpu_repair, "info", lambda line: None)

    def restart(kube: object, name: str, timeout: float) -> bool:
        restarted.append(name)
        return True

    monkeypatch.setattr(doctor_module, "restart_plugin", restart)
    found = diagnose(snapshot(nodes=[cordoned]))
    assert [f.check for f in found] == ["gpu-failed"]
    after = diagnose(snapshot(nodes=[failed_node(allocatable="16", cordoned="gpu-failed: GPU 1 XID 79")]))
    reads = iter([after, []])
    monkeypatch.setattr(doctor_module, "doctor", lambda kube, nodegroup, node: next(reads))
    assert doctor_module.fix(kube, found) == []  # type: ignore[arg-type]
    assert restarted == ["gpu-0"]
    assert not any("unschedulable': True" in line for line in kube.done)  # not cordoned again
    assert kube.done[-1] == f"patch Node gpu-0 {{'metadata': {{'annotations': {{'{CORDONED}': None}}}}, " \
                            "'spec': {'unschedulable': None}}"


def test_xids_are_read_from_dcgm_exporters_series_and_doctor_goes_on_without_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    series = [Sample({"hostname": "gpu-0", "gpu": "1", "UUID": UUID}, 79.0),
              Sample({"Hostname": "gpu-1", "gpu": "0", "UUID": "GPU-b", "GPU_I_ID": "9"}, 48.0),
              Sample({"gpu": "2"}, 13.0)]  # no node: not placed

    class FakePrometheus:
        def query(self, expr: str) -> list[Sample]:
            assert "DCGM_FI_DEV_XID_ERRORS" in expr and "> 0" in expr
            return series

    monkeypatch.setattr(gpu_repair, "prometheus_for", lambda kube, url: FakePrometheus())
    found = gpu_repair.read_xids(None)  # type: ignore[arg-type]
    assert found == ({"gpu-0": [GpuXid(1, UUID, 79)], "gpu-1": [GpuXid(0, "GPU-b", 48, "9")]}, True)
    said: list[str] = []

    def no_prometheus(kube: object, url: str | None) -> None:
        raise UsageError("--prometheus", "no Prometheus to read GPU metrics from")

    monkeypatch.setattr(gpu_repair, "prometheus_for", no_prometheus)
    monkeypatch.setattr(gpu_repair, "info", said.append)
    assert gpu_repair.read_xids(None) == ({}, False)  # type: ignore[arg-type]
    assert said == ["doctor: the failed GPUs' XIDs are not named: no Prometheus with dcgm-exporter's series "
                    "(set GPUCTL_PROMETHEUS_URL)"]
