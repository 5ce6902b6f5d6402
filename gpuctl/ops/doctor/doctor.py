"""`gpuctl doctor`: read the cluster once (one LIST per kind, never one per node), run the checks of findings.py,
and with --fix do the safe repairs: restart a device-plugin pod that serves nothing, re-apply a tenant admission
policy deleted by hand, cordon a node with a failed GPU and evict its GPU pods (gpu_repair.py), restart the
device plugin of a node gpuctl cordoned and uncordon it once its GPUs are healthy, finish a wedged MIG change and
roll back or re-apply a failed one (mig_repair.py); in DRA mode, taint a failed GPU's device with gpuctl's
DeviceTaintRule and evict the pods using it, and delete the rule once the device is healthy (dra_repair.py). Each
repair is said before it is done; the findings are then read again. The DCGM exporter's XIDs are read only where a
GPU is unhealthy."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuctl.kube.dra import dra_mode, list_slices
from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.gpu_nodes import gpu_nodes, gpu_resources, unhealthy_gpus
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import read_config_map_data
from gpuctl.model.device_taints import NO_SCHEDULE
from gpuctl.model.tenant import TENANT_LABEL
from gpuctl.ops.devices import PLUGIN_SELECTOR, pods_by_node
from gpuctl.ops.doctor.dra_findings import diagnose_dra
from gpuctl.ops.doctor.dra_repair import (
    check_effect_applies,
    read_own_rules,
    remove_rule,
    repair_failed_devices,
)
from gpuctl.ops.doctor.findings import (
    ADMISSION_API,
    FENCE_KINDS,
    TOLERATION_KINDS,
    Finding,
    Snapshot,
    cordoned_by_gpuctl,
    diagnose,
)
from gpuctl.ops.doctor.gpu_repair import cordon, drain_gpu_pods, read_xids, restart_plugin, uncordon
from gpuctl.ops.doctor.mig_repair import MigRepair, repair_mig
from gpuctl.ops.group_records import read_group_plans, read_group_sizes
from gpuctl.ops.tenancy.fence import ensure_fence, wait_fence_in_force
from gpuctl.ops.tenancy.tolerations import cluster_groups, converge_tolerations
from gpuctl.stack.existing import (
    config_namespace_of,
    configured_of,
    find_operators,
    read_operator_deployments,
    read_policies,
    read_releases,
)
from gpuctl.stack.values import STACK_CONFIGMAP
from gpuctl.util.errors import UsageError
from gpuctl.util.output import info
from gpuctl.util.waiting import Count, Look, wait_until

FIX_TIMEOUT_S = 120.0
GRACE_S = 300.0  # --grace: how long --fix waits for a PodDisruptionBudget to allow a GPU pod's eviction


def _admission(kube: Kube) -> dict[str, set[str]]:
    """kind -> names, for the fence's and the tolerations' kinds the server serves."""
    found: dict[str, set[str]] = {}
    for kind in FENCE_KINDS + TOLERATION_KINDS:
        try:
            found[kind] = {o.name for o in kube.list(ADMISSION_API, kind, what=f"listing {kind}s")}
        except KubeNotFound:
            continue  # not served by this API server
    return found


def _namespace(policies: list[KubeObject], deployments: list[KubeObject]) -> str:
    """The GPU Operator's namespace, where its operands run and gpuctl's records are."""
    return config_namespace_of(configured_of(find_operators([], policies, deployments)))


def read_snapshot(kube: Kube, nodegroup: str | None = None, node: str | None = None,
                  with_xids: bool = True) -> Snapshot:
    """The cluster as the checks read it; --nodegroup and --node narrow the nodes (the stack and the tenants'
    policies are the cluster's). `with_xids`: name a failed GPU's XID from Prometheus (evidence only; False leaves it
    unknown and reaches no Prometheus)."""
    nodes = gpu_nodes(kube, nodegroup)
    if node is not None:
        nodes = [n for n in nodes if n.name == node]
        if not nodes:
            where = f" in node group {nodegroup!r}" if nodegroup else ""
            raise UsageError("--node", f"no GPU node {node!r}{where}", "see 'gpuctl status' for the GPU nodes")
    policies, deployments = read_policies(kube), read_operator_deployments(kube)
    namespace = _namespace(policies, deployments)
    tenants = kube.list("v1", "Namespace", labels=TENANT_LABEL, what="listing tenant namespaces")
    sizes = {} if node is not None else {g: n for g, n in read_group_sizes(kube, namespace).items()
                                         if nodegroup in (None, g)}
    xids, xids_read = read_xids(kube) if with_xids and any(unhealthy_gpus(n) for n in nodes) else ({}, False)
    dra = dra_mode(kube)
    return Snapshot(
        nodes=nodes,
        plugin_pods=pods_by_node(kube, PLUGIN_SELECTOR, "device-plugin"),
        daemon_sets=kube.list("apps/v1", "DaemonSet", what="listing DaemonSets"),
        deployments=deployments,
        policies=policies,
        plans=read_group_plans(kube, namespace),
        tenants=sorted(n.name for n in tenants if not n.deleting),
        admission=_admission(kube),
        now=datetime.now(timezone.utc),
        releases=tuple(read_releases(kube)),
        stack_recorded="stack.json" in (read_config_map_data(kube, namespace, STACK_CONFIGMAP) or {}),
        sizes=sizes,
        namespace=namespace,
        xids=xids,
        xids_read=xids_read,
        dra=dra,
        slices=list_slices(kube) if dra else [],
        taint_rules=read_own_rules(kube) if dra else [])


def doctor(kube: Kube, nodegroup: str | None = None, node: str | None = None,
           with_xids: bool = True) -> list[Finding]:
    """What is wrong with the GPU platform, read-only."""
    snap = read_snapshot(kube, nodegroup, node, with_xids)
    return diagnose(snap) + diagnose_dra(snap)


def fix(kube: Kube, findings: list[Finding], nodegroup: str | None = None, node: str | None = None,
        timeout: float = FIX_TIMEOUT_S, grace: float = GRACE_S, taint_effect: str = NO_SCHEDULE) -> list[Finding]:
    """Do the safe repairs among `findings` (each said first), wait until they took, and read the findings
    again; a node gpuctl cordoned whose GPUs came back meanwhile is uncordoned in the same run, and gpuctl's
    DeviceTaintRule of a device that came back is deleted. `taint_effect`: of gpuctl's new DeviceTaintRules."""
    check_effect_applies(kube, taint_effect)
    restarted: list[str] = []
    tenants: list[str] = []
    failed_gpus: dict[str, list[Finding]] = {}
    failed_devices: dict[str, list[tuple[str, str]]] = {}
    for finding in findings:
        if finding.action and finding.action[0] == "drain-gpus":
            failed_gpus.setdefault(finding.action[1], []).append(finding)
        elif finding.action[:1] == ("taint-device",):
            _, name, device, xid = finding.action
            failed_devices.setdefault(name, []).append((device, xid))
    recovered = _repair_failed_gpus(kube, failed_gpus, grace, timeout)
    healthy_devices = repair_failed_devices(kube, failed_devices, taint_effect, grace, timeout)
    namespace = None
    for finding in findings:
        if finding.action[:1] == ("repair-mig",):
            namespace = namespace or _namespace(read_policies(kube), read_operator_deployments(kube))
            repair_mig(kube, MigRepair.of_action(finding.action), namespace, timeout)  # failed again: found again
    for finding in findings:
        if not finding.action:
            continue
        kind, *args = finding.action
        if kind == "uncordon":
            uncordon(kube, args[0])
        elif kind == "remove-taint-rule":
            remove_rule(kube, *args)
        elif kind == "restart-plugin":
            name, namespace, pod = args
            info(f"fix: {finding.object}: restarting device-plugin pod {namespace}/{pod} "
                 f"(its DaemonSet starts a new one)")
            with requesting(f"deleting device-plugin pod {namespace}/{pod}"):
                kube.delete("v1", "Pod", pod, namespace)  # gone already: its successor registers
            restarted.append(name)
        elif kind == "ensure-fence":
            tenants = finding.evidence["tenants"]
            info(f"fix: re-applying the GPU fence ({', '.join(finding.evidence['missing'])})")
            ensure_fence(kube)
            wait_fence_in_force(kube, tenants[0])
        elif kind == "ensure-tolerations":
            tenants = finding.evidence["tenants"]
            info(f"fix: re-applying the GPU tolerations ({', '.join(finding.evidence['missing'])})")
            converge_tolerations(kube, cluster_groups(kube), tenants[0], new_namespace=True)
    if restarted:
        wait_serving(kube, restarted, timeout)
    after = doctor(kube, nodegroup, node)
    back = [f for f in after if f.action[:1] == ("uncordon",) and f.node in recovered]
    for finding in back:
        uncordon(kube, finding.action[1])
    untaint = [f for f in after if f.action[:1] == ("remove-taint-rule",) and tuple(f.action[2:]) in healthy_devices]
    for finding in untaint:
        remove_rule(kube, *finding.action[1:])
    back += untaint
    return doctor(kube, nodegroup, node) if back else after


def _repair_failed_gpus(kube: Kube, failed: dict[str, list[Finding]], grace: float, timeout: float) -> list[str]:
    """Per node with failed GPUs: a node gpuctl had cordoned before this run gets its device plugin restarted
    (the GPU may have been reset or replaced since; the plugin checks afresh); any other is cordoned; then its GPU
    pods are evicted. The nodes whose GPUs came back healthy."""
    recovered = []
    for name, found in sorted(failed.items()):
        current = kube.get_or_none("v1", "Node", name)
        if current is None:
            continue
        if cordoned_by_gpuctl(current):
            drain_gpu_pods(kube, name, grace)
            if restart_plugin(kube, name, timeout):
                recovered.append(name)
            continue
        gpus = sorted({f"GPU {f.gpu} XID {f.evidence.get('xid')}" for f in found if f.gpu is not None})
        why = "gpu-failed: " + (", ".join(gpus) if gpus else f"unhealthy {found[0].evidence.get('unhealthy')}")
        cordon(kube, current, why)
        drain_gpu_pods(kube, name, grace)
    return recovered


def wait_serving(kube: Kube, names: list[str], timeout: float) -> None:
    """Until each of the nodes `names` advertises GPUs again (its new device-plugin pod registered them)."""
    def look() -> Look:
        nodes: list[KubeObject] = [n for n in gpu_nodes(kube) if n.name in names]
        serving = [n.name for n in nodes if gpu_resources(n)]
        waiting = sorted(set(names) - set(serving))
        return Look(not waiting, (Count("nodes serve GPUs again", len(serving), len(names)),),
                    f"still none on {', '.join(waiting)}" if waiting else "")

    wait_until("device plugins restarted", look, "see 'gpuctl status -o wide' (column DEVICE_PLUGIN)",
               timeout=timeout)
