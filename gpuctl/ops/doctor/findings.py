"""What `gpuctl doctor` finds wrong with a running GPU platform: each check a function over the cluster's objects as
JSON (a Snapshot, read with one LIST per kind by doctor.py), returning Findings: the check, its severity, the
object, the evidence (label values, image tags, counts), the cause in one line, the upstream issue or bulletin,
and the command that repairs it ("gpuctl doctor --fix" where it is one of the safe repairs).

Upstream facts relied on:
- NVIDIA/gpu-operator #2833 (open): the MIG manager wedges with nvidia.com/mig.config.state=pending and the
  operand deploy labels (nvidia.com/gpu.deploy.*) left at `paused-for-mig-change`; NVIDIA/mig-parted #484 (MIG
  manager v0.15.1): it ends in `failed` with the labels restored. Either way the node lacks the layout.
- NVIDIA/k8s-device-plugin #1645 (open): the config label set, the plugin pod running, and nvidia.com/gpu 0
  until the plugin pod restarts.
- A failed GPU: k8s-device-plugin v0.20.0 internal/rm/health.go marks a device Unhealthy on an XID critical error
  (not the application XIDs 13, 31, 43, 45, 68, 109, nor those DP_DISABLE_HEALTHCHECKS names), and
  internal/plugin/server.go never marks it healthy again until the plugin restarts; the kubelet keeps it in
  capacity and not in allocatable (pkg/kubelet/cm/devicemanager/manager.go GetCapacity), which is the record
  read here (gpuctl.kube.gpu_nodes.unhealthy_gpus); dcgm-exporter's DCGM_FI_DEV_XID_ERRORS names the XID, whose
  meaning and repair come from NVIDIA's XID catalogue (gpuctl.model.xid).
- gpuctl's own: a node group's taints (recorded in gpuctl-node-groups) are what the GPU Operator's operands and
  the tenants' GPU tolerations tolerate; a tenant namespace is fenced and tolerated by two cluster-scoped
  admission policies, each with its binding (ops/tenancy/fence.py, tolerations.py).
- gpuctl's own: the stack record (gpuctl-stack) says gpuctl set up a GPU Operator, which runs as long as its
  ClusterPolicy and its Deployment exist; each node group's record (gpuctl-node-groups) says how many nodes of its
  own gpuctl gave it. The kubelet marks every device of a plugin that went unhealthy at once and drops the resource
  after 5 minutes (Kubernetes pkg/kubelet/cm/devicemanager manager.go PluginDisconnected, GetCapacity).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuctl.kube.gpu_nodes import gpu_resources, nodegroup_of, unhealthy_gpus
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import count
from gpuctl.model import labels as L
from gpuctl.model.security import POLICY_SECTIONS, broken_floors, component_of, parse_version, version_text
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.model.spec import GroupPlan, all_taints
from gpuctl.model.taints import DEFAULT_GPU_TAINTS, TRANSIENT_TAINTS, Taint, node_taint
from gpuctl.model.xid import APPLICATION, XID_CATALOGUE, XIDS, needs_replacement, xid_meaning
from gpuctl.ops.devices import RACE_GRACE_S, plugin_state  # a plugin just started has not registered yet
from gpuctl.ops.doctor.mig_repair import describe, plan_mig_repair
from gpuctl.ops.tenancy import fence, tolerations
from gpuctl.stack.existing import OUR_OPERATOR, HelmRelease, Operator, find_operators, is_device_plugin

FIX = "gpuctl doctor --fix"
GPU_OPERATOR_ISSUE_2833 = "https://github.com/NVIDIA/gpu-operator/issues/2833"
MIG_PARTED_ISSUE_484 = "https://github.com/NVIDIA/mig-parted/issues/484"
DEVICE_PLUGIN_ISSUE_1645 = "https://github.com/NVIDIA/k8s-device-plugin/issues/1645"
ADMISSION_API = "admissionregistration.k8s.io/v1"
FENCE_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
TOLERATION_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
# On a node gpuctl cordoned for a failed GPU (doctor --fix), why: only a cordon gpuctl made is undone by gpuctl.
CORDONED = "gpuctl.dev/cordoned"


@dataclass(frozen=True)
class Finding:
    """One thing wrong, as a user reads it; `action` is what --fix does (empty: not one of the safe repairs)."""

    check: str
    severity: str  # error | warning
    object: str  # "node gpu-0", "DaemonSet gpu-operator/nvidia-device-plugin-daemonset", ...
    evidence: dict[str, Any]
    cause: str
    repair: str
    reference: str | None = None
    node: str | None = None
    gpu: int | None = None  # the GPU's index on the node, where known
    action: tuple[str, ...] = field(default=(), compare=False)

    @property
    def fixable(self) -> bool:
        return bool(self.action)

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.check, "severity": self.severity, "object": self.object, "node": self.node,
                "gpu": self.gpu, "evidence": self.evidence, "cause": self.cause, "reference": self.reference,
                "repair": self.repair, "fixable": self.fixable}


@dataclass(frozen=True)
class GpuXid:
    """One GPU (or MIG instance) with a non-zero DCGM_FI_DEV_XID_ERRORS: its last XID."""

    gpu: int
    uuid: str
    xid: int
    instance: str | None = None  # GPU_I_ID of a MIG instance


@dataclass(frozen=True)
class Snapshot:
    """The cluster as the checks read it, each kind listed once."""

    nodes: list[KubeObject]  # the GPU nodes in scope (--nodegroup, --node)
    plugin_pods: dict[str, KubeObject]  # node -> its device-plugin pod
    daemon_sets: list[KubeObject]
    deployments: list[KubeObject]  # the GPU Operator's
    policies: list[KubeObject]  # ClusterPolicies
    plans: dict[str, GroupPlan]  # the recorded node groups
    tenants: list[str]  # tenant namespaces
    admission: dict[str, set[str]]  # kind -> names of its objects; a kind the server does not serve is absent
    now: datetime
    namespace: str = "gpu-operator"  # the GPU Operator's, where its operands run
    releases: tuple[HelmRelease, ...] = ()  # deployed Helm releases
    stack_recorded: bool = False  # gpuctl's stack record (gpuctl-stack) is there: gpuctl set up a GPU Operator
    sizes: dict[str, int] = field(default_factory=dict)  # node group -> nodes of its own recorded (none with --node)
    xids: dict[str, list[GpuXid]] = field(default_factory=dict)  # node -> its GPUs' last XIDs (DCGM), read where
    xids_read: bool = False  # the DCGM exporter's series were reachable (read only where a GPU is unhealthy)
    dra: bool = False  # DRA mode: the DRA driver's DeviceClass gpu.nvidia.com exists (model/dra.py)
    slices: list[KubeObject] = field(default_factory=list)  # the DRA driver's ResourceSlices (DRA mode)
    taint_rules: list[KubeObject] = field(default_factory=list)  # gpuctl's DeviceTaintRules (dra_findings.py)


# -- a. the security floor of the running stack --------------------------------------------------------------


def _seen_versions(snap: Snapshot) -> dict[str, list[tuple[tuple[int, ...], str, str]]]:
    """component -> (version, where, image or field value) for each running image and ClusterPolicy version."""
    seen: dict[str, list[tuple[tuple[int, ...], str, str]]] = {}
    workloads = [("DaemonSet", d) for d in snap.daemon_sets] + [("Deployment", d) for d in snap.deployments]
    for kind, obj in workloads:
        for container in obj.at("spec", "template", "spec", "containers", default=[]):
            image = str(container.get("image") or "")
            found = component_of(image)
            if found is None or (found[0] == "k8s-device-plugin" and not is_device_plugin(obj.name)):
                continue  # GPU Feature Discovery runs the device plugin's image: the plugin's own DaemonSet says it
            version = parse_version(*found)
            if version is not None:
                seen.setdefault(found[0], []).append((version, f"{kind} {obj.namespace}/{obj.name}", image))
    for policy in snap.policies:
        for section, component in POLICY_SECTIONS.items():
            text = str((policy.spec.get(section) or {}).get("version") or "")
            version = parse_version(component, text) if text else None
            if version is not None:
                seen.setdefault(component, []).append(
                    (version, f"ClusterPolicy {policy.name} spec.{section}.version", text))
    return seen


def _upgrade(component: str, fixed: str, snap: Snapshot) -> str:
    section = next((s for s, c in POLICY_SECTIONS.items() if c == component), None)
    if section is not None and snap.policies:
        body = json.dumps({"spec": {section: {"version": f"v{fixed}"}}}, separators=(",", ":"))
        return f"kubectl patch clusterpolicy {snap.policies[0].name} --type merge -p '{body}'"
    if component == "gpu-operator":
        return f"upgrade the GPU Operator's Helm release to v{fixed} or later (gpuctl apply installs v26.7.0)"
    return f"upgrade {component} to {fixed} or later"


def check_security_floor(snap: Snapshot) -> list[Finding]:
    """Each component of the stack that runs (or whose ClusterPolicy asks for) a version below its floor."""
    found = []
    for component, versions in sorted(_seen_versions(snap).items()):
        version, where, value = min(versions)
        floors = broken_floors(component, version)
        if not floors:
            continue
        fixed = floors[0].fixed_text
        advisories = [f.advisory for f in floors]
        found.append(Finding(
            "security-floor", "error", where,
            {"component": component, "image": value, "version": version_text(version), "fixedVersion": fixed,
             "advisories": advisories, "seenAt": sorted({w for _, w, _ in versions})},
            f"{component} {version_text(version)} is below {fixed}, the first release without "
            f"{', '.join(advisories)}",
            _upgrade(component, fixed, snap), floors[0].source))
    return found


# -- b. a MIG change not finishing -----------------------------------------------------------------------------


def check_mig_changes(snap: Snapshot) -> list[Finding]:
    """Nodes whose MIG change failed, or is pending with the operands paused for it (the MIG manager wedged); --fix
    finishes a wedged one and rolls back or re-applies a failed one where the group's record holds a layout
    (mig_repair.py)."""
    found = []
    for node in snap.nodes:
        labels = node.labels
        state = labels.get(L.MIG_STATE)
        paused = {k: v for k, v in sorted(labels.items()) if k.startswith(L.DEPLOY_PREFIX) and v == L.PAUSED_FOR_MIG}
        evidence: dict[str, Any] = {L.MIG_CONFIG: labels.get(L.MIG_CONFIG), L.MIG_STATE: state}
        plan = snap.plans.get(nodegroup_of(node) or "")
        group = nodegroup_of(node)
        again = f"gpuctl mig apply {plan.mig.name} --nodegroup {group}" if plan is not None and plan.mig and group \
            else f"kubectl label node {node.name} {L.MIG_CONFIG}={labels.get(L.MIG_CONFIG, 'all-disabled')} --overwrite"
        repair = plan_mig_repair(node, plan)
        fix = f"{FIX} ({describe(repair, labels.get(L.MIG_CONFIG))})" if repair is not None else ""
        action = repair.action() if repair is not None else ()
        if state == "failed":
            found.append(Finding(
                "mig-change-failed", "error", f"node {node.name}", evidence,
                "the MIG manager could not apply the node's MIG config: the node lacks its layout",
                fix or f"read 'kubectl logs -n {snap.namespace} -l app=nvidia-mig-manager', then {again}",
                MIG_PARTED_ISSUE_484, node.name, action=action))
        elif state == "pending" and paused:
            restore = " ".join(f"{k}=true" for k in paused)
            found.append(Finding(
                "mig-change-wedged", "error", f"node {node.name}", {**evidence, "paused": paused},
                "the MIG change is pending with the GPU operands paused for it: the MIG manager has wedged",
                fix or f"kubectl label node {node.name} {restore} --overwrite; then {again}",
                GPU_OPERATOR_ISSUE_2833, node.name, action=action))
    return found


# -- c. a device plugin serving nothing ---------------------------------------------------------------------


def _age(pod: KubeObject, now: datetime) -> float | None:
    started = pod.status.get("startTime")
    if not started:
        return None
    return (now - datetime.fromisoformat(str(started).replace("Z", "+00:00"))).total_seconds()


def check_plugins_serving(snap: Snapshot) -> list[Finding]:
    """GPU nodes whose device-plugin config label is set and whose plugin pod has run for a while, ready, yet
    which advertise no nvidia.com/gpu nor MIG resource. A node whose plugin registered devices that are all
    unhealthy (capacity kept, allocatable 0: a single-GPU node after an XID) is check_failed_gpus's: restarting
    its plugin would list the failed GPU healthy again (the new pod's health check starts afresh)."""
    found = []
    for node in snap.nodes:
        pod = snap.plugin_pods.get(node.name)
        key = node.labels.get(CONFIG_LABEL)
        if not key or pod is None or gpu_resources(node) or unhealthy_gpus(node) \
                or node.labels.get(L.MIG_STATE) == "pending":
            continue
        age = _age(pod, snap.now)
        if plugin_state(pod) != "ready" or age is None or age < RACE_GRACE_S:
            continue
        allocatable = {k: count(v) for k, v in sorted((node.status.get("allocatable") or {}).items())
                       if k == L.GPU_RESOURCE or k.startswith("nvidia.com/mig-")}
        found.append(Finding(
            "plugin-serves-nothing", "error", f"node {node.name}",
            {CONFIG_LABEL: key, "allocatable": allocatable or {L.GPU_RESOURCE: 0},
             "pod": f"{pod.namespace}/{pod.name}", "podSeconds": int(age)},
            "the device plugin runs but registered no GPU after its config changed; it does once restarted",
            f"{FIX} (kubectl -n {pod.namespace} delete pod {pod.name})", DEVICE_PLUGIN_ISSUE_1645, node.name,
            action=("restart-plugin", node.name, pod.namespace or "", pod.name)))
    return found


# -- d. GPU taints --------------------------------------------------------------------------------------------


def _taints(node: KubeObject) -> list[Taint]:
    return [node_taint(t) for t in node.spec.get("taints") or [] if not str(t["key"]).startswith(TRANSIENT_TAINTS)]


def check_taints(snap: Snapshot) -> list[Finding]:
    """GPU nodes lacking their group's taints (in no recorded group: with no NoSchedule or NoExecute taint at all),
    and, where node groups are recorded, GPU nodes with a taint no node group declares."""
    found = []
    declared_anywhere = set(all_taints(tuple(snap.plans.values())))
    for node in snap.nodes:
        taints = _taints(node)
        group = nodegroup_of(node)
        plan = snap.plans.get(group or "")
        have = {"taints": [str(t) for t in taints], "nodegroup": group}
        if plan is not None:
            declared, missing = set(plan.spec.taints), [t for t in plan.spec.taints if t not in taints]
        else:
            declared = declared_anywhere
            blocked = any(t.effect in ("NoSchedule", "NoExecute") for t in taints)
            missing = [] if blocked else sorted(declared_anywhere) or list(DEFAULT_GPU_TAINTS)
        if missing:
            found.append(Finding(
                "gpu-taint-missing", "warning", f"node {node.name}",
                {**have, "missing": [str(t) for t in missing]},
                "the GPU node lacks its group's taint: pods that asked for no GPU can land on it",
                f"kubectl taint node {node.name} {' '.join(map(str, missing))}", None, node.name))
        stray = [t for t in taints if t not in declared] if snap.plans else []
        if stray:
            found.append(Finding(
                "gpu-taint-undeclared", "warning", f"node {node.name}",
                {**have, "undeclared": [str(t) for t in stray], "declared": sorted(map(str, declared))},
                "no node group declares this taint: the GPU operands and the tenants' GPU pods do not tolerate it",
                f"kubectl taint node {node.name} {' '.join(f'{t.key}:{t.effect}-' for t in stray)}", None, node.name))
    return found


# -- e. the tenants' admission policies -----------------------------------------------------------------------


def check_tenant_policies(snap: Snapshot) -> list[Finding]:
    """With tenant namespaces: the GPU fence and the GPU tolerations, each a policy and its binding, in place
    (the tolerations only where the server serves MutatingAdmissionPolicy)."""
    if not snap.tenants:
        return []
    found = []
    for check, name, kinds, action, does in (
            ("tenant-fence-missing", fence.NAME, FENCE_KINDS, "ensure-fence",
             "the API server no longer refuses a tenant pod that reaches GPUs without requesting them"),
            ("tenant-tolerations-missing", tolerations.NAME, TOLERATION_KINDS, "ensure-tolerations",
             "tenant GPU pods are no longer given the GPU nodes' tolerations, and stay Pending")):
        if any(kind not in snap.admission for kind in kinds):
            continue  # not served (MutatingAdmissionPolicy before Kubernetes 1.36): teams add tolerations by hand
        missing = [f"{kind} {name}" for kind in kinds if name not in snap.admission[kind]]
        if missing:
            found.append(Finding(
                check, "error", missing[-1], {"missing": missing, "tenants": snap.tenants},
                f"{' and '.join(missing)} deleted: {does}",
                FIX, None,
                action=(action,)))
    return found


# -- f. failed GPUs -------------------------------------------------------------------------------------------

def cordoned_by_gpuctl(node: KubeObject) -> bool:
    return CORDONED in node.annotations


def _repair(node: str, xid: int | None, gpu: int | None, cordoned: bool, namespace: str) -> str:
    which = f"GPU {gpu}" if gpu is not None else "the GPU"
    reset = f"reset {which} (nvidia-smi -r -i {gpu if gpu is not None else '<index>'}, or reboot the node)"
    if needs_replacement(xid):
        reset += ", or replace it (or the node) where the XID comes back"
    drain = "" if cordoned else f"{FIX} --grace 300 (cordons {node}, evicts its GPU pods through the Eviction API); "
    then = "then " if drain else ""
    return (f"{drain}{then}{reset}; then {FIX} (restarts the node's device plugin in {namespace}, which never "
            f"marks a device healthy again on its own, and uncordons {node} once its GPUs are healthy)")


def check_failed_gpus(snap: Snapshot) -> list[Finding]:
    """A finding per failed GPU of each node whose kubelet lists unhealthy devices (per node where the DCGM
    exporter's series do not say which GPU)."""
    found = []
    for node in snap.nodes:
        unhealthy = unhealthy_gpus(node)
        pod = snap.plugin_pods.get(node.name)
        if not unhealthy or pod is None or plugin_state(pod) != "ready":
            # no plugin serving there now: the kubelet marks every device of a plugin that went unhealthy at once
            # (devicemanager manager.go PluginDisconnected), which is no GPU failure (a restart, a removed stack)
            continue
        cordoned = cordoned_by_gpuctl(node)
        state = "cordoned by gpuctl" if cordoned else "cordoned" if node.spec.get("unschedulable") else "in service"
        base: dict[str, Any] = {"unhealthy": unhealthy, "node": state}
        failed = [x for x in snap.xids.get(node.name, []) if x.xid not in XIDS or XIDS[x.xid].action != APPLICATION]
        action = ("drain-gpus", node.name)
        if not failed:
            source = "no XID series for its GPUs" if snap.xids_read else "DCGM metrics not reachable"
            found.append(Finding(
                "gpu-failed", "error", f"node {node.name}", {**base, "xid": f"unknown ({source})"},
                f"the device plugin marked {_count(unhealthy)} unhealthy (an XID error): the node's other GPUs "
                "keep taking pods", _repair(node.name, None, None, cordoned, snap.namespace), XID_CATALOGUE,
                node.name, action=action))
            continue
        for x in sorted(failed, key=lambda x: (x.gpu, x.instance or "")):
            gpu = f"GPU {x.gpu}" + (f" (MIG instance {x.instance})" if x.instance is not None else "")
            evidence = {**base, "gpu": x.gpu, "uuid": x.uuid, "xid": x.xid, "meaning": xid_meaning(x.xid)}
            if x.instance is not None:
                evidence["gpuInstance"] = x.instance
            found.append(Finding(
                "gpu-failed", "error", f"node {node.name}", evidence,
                f"{gpu} reported XID {x.xid}, {xid_meaning(x.xid)}: the device plugin marked it unhealthy",
                _repair(node.name, x.xid, x.gpu, cordoned, snap.namespace), XID_CATALOGUE, node.name, x.gpu,
                action=action))
    return found


def check_gpuctl_cordons(snap: Snapshot) -> list[Finding]:
    """Nodes gpuctl cordoned for a failed GPU whose GPUs are all healthy again: --fix uncordons them."""
    return [Finding(
        "gpu-node-cordoned", "warning", f"node {node.name}",
        {CORDONED: node.annotations[CORDONED], "unschedulable": bool(node.spec.get("unschedulable"))},
        "gpuctl cordoned the node for a failed GPU; its GPUs are all healthy again",
        f"{FIX} (uncordons it: kubectl uncordon {node.name})", None, node.name,
        action=("uncordon", node.name))
        for node in snap.nodes if cordoned_by_gpuctl(node) and not unhealthy_gpus(node)]


def _count(unhealthy: dict[str, int]) -> str:
    return ", ".join(f"{n} {resource}" for resource, n in sorted(unhealthy.items()))



# -- g. the GPU stack and the node groups removed by hand ------------------------------------------------------


def _running(operator: Operator, snap: Snapshot) -> dict[str, Any]:
    """What runs of `operator`: its ClusterPolicy and its Deployment (None where gone)."""
    deployment = next((f"{d.namespace}/{d.name}" for d in snap.deployments if d.namespace == operator.namespace), None)
    return {"clusterPolicy": operator.policy, "operatorDeployment": deployment}


def check_stack_running(snap: Snapshot) -> list[Finding]:
    """A GPU Operator that gpuctl's stack record, a Helm release or a ClusterPolicy says should run, and that has
    no ClusterPolicy or no operator Deployment (its release uninstalled, or parts deleted by hand)."""
    operators = list(find_operators(list(snap.releases), snap.policies, snap.deployments))
    if not operators and snap.stack_recorded:
        release, namespace = OUR_OPERATOR
        operators = [Operator(release, namespace, namespace, None)]
    found = []
    for operator in operators:
        running = _running(operator, snap)
        if all(running.values()):
            continue
        gone = " and ".join(what for what, key in (("no ClusterPolicy", "clusterPolicy"),
                                                     ("no operator Deployment", "operatorDeployment"))
                            if running[key] is None)
        evidence = {"release": operator.release, "namespace": operator.release_namespace, **running,
                    "recordedBy": "gpuctl" if snap.stack_recorded else None}
        repair = ("re-run the 'gpuctl apply -f SPEC' (or 'gpuctl cluster create ...') that made this platform: it "
                  f"reinstalls release {operator.release} in {operator.release_namespace}") if operator.ours else \
            (f"reinstall {operator.describe()} as it was installed (helm upgrade --install), then re-run "
             "'gpuctl apply -f SPEC'")
        found.append(Finding(
            "stack-missing", "error", f"GPU Operator {operator.describe()}", evidence,
            f"the GPU Operator should run and has {gone} (uninstalled or deleted by hand): nothing runs the device "
            "plugin, and the kubelets stop offering the GPUs of a plugin that went", repair))
    return found


def check_node_groups_whole(snap: Snapshot) -> list[Finding]:
    """Node groups with fewer nodes of their own (not Karpenter's) than their record says: a node deleted by hand
    (or one that has not registered)."""
    have: dict[str, list[str]] = {}
    for node in snap.nodes:
        if L.KARPENTER_NODEPOOL not in node.labels and (group := nodegroup_of(node)):
            have.setdefault(group, []).append(node.name)
    found = []
    for group, size in sorted(snap.sizes.items()):
        present = sorted(have.get(group, []))
        if len(present) >= size:
            continue
        missing = size - len(present)
        found.append(Finding(
            "node-missing", "error", f"node group {group}",
            {"nodegroup": group, "recordedNodes": size, "nodes": len(present), "present": present},
            f"node group {group} has {len(present)} of its {size} nodes: {missing} deleted by hand or not "
            "registered, its GPUs lost to the platform",
            f"re-run the 'gpuctl apply -f SPEC' (or 'gpuctl nodegroup scale {group} --nodes {size}') that made it: "
            "the cloud makes the node again; where its instance still runs, restarting its kubelet registers it"))
    return found


CHECKS = (check_stack_running, check_node_groups_whole,
          check_security_floor, check_mig_changes, check_plugins_serving, check_failed_gpus, check_gpuctl_cordons,
          check_taints, check_tenant_policies)


def diagnose(snap: Snapshot) -> list[Finding]:
    """Every check's findings, in the checks' order."""
    return [finding for check in CHECKS for finding in check(snap)]
