"""Prove the platform works: allocatable matches the configuration, one device plugin, `gpuctl doctor`'s checks
find no error (check `doctor`), and a CUDA smoke-test pod passes on the GPU nodes.

In DRA mode (gpuctl.kube.dra.dra_mode: NVIDIA's DRA driver serves the GPUs) the same checks read the
driver's side: the devices each node's ResourceSlice publishes against the configuration (and no device
plugin advertising the same GPUs), the driver's kubelet plugin ready on every node, and a smoke-test pod
that gets its GPU through a ResourceClaim, which the scheduler must have allocated on a node of the group.
Where gpuctl's driver serves only some node groups, a run with no node group checks each group the way it is
served (mixed_groups).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuctl.kube.dra import dra_mode
from gpuctl.kube.errors import KubeApiError, KubeNotFound, requesting
from gpuctl.kube.gpu_nodes import GPU_NODE_SELECTOR, NODEGROUP_LABELS, gpu_nodes, gpu_resources, model_of, nodegroup_of
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import ensure_namespace, read_config_map_data
from gpuctl.model import labels as L
from gpuctl.model.dra import API_VERSION, DRIVER, GPU_CLASS, MIG_CLASS
from gpuctl.model.mig import (
    MigLayout,
    advertised_resources,
    layout_from_counts,
    layout_of_config_name,
    parse_mig_parted_config,
)
from gpuctl.model.sharing import CONFIG_LABEL, NO_SHARING, parse_plugin_config
from gpuctl.model.spec import SMOKE_IMAGE
from gpuctl.model.taints import node_taint
from gpuctl.model.taints import tolerations as tolerations_of
from gpuctl.ops.devices import DRA_PLUGIN_SELECTOR, NodeDevices, plugin_state, pods_by_node, read_node_devices
from gpuctl.ops.doctor.doctor import doctor
from gpuctl.ops.group_records import intended_labels, node_drift, read_group_plans
from gpuctl.ops.smoke import (
    SMOKE_NAMESPACE,
    SMOKE_TIMEOUT_S,
    Check,
    await_default_service_account,
    await_smoke_test,
    delete_smoke_pod,
    diagnostics,
    run_smoke_test,
    smoke_claim,
    smoke_pod,
    unschedulable,
)
from gpuctl.stack.dra_driver import serves_groups_only
from gpuctl.stack.existing import CLUSTER_POLICY, config_namespace
from gpuctl.stack.karpenter import advertised
from gpuctl.stack.owners import is_device_plugin
from gpuctl.stack.values import DEVICE_PLUGIN_CONFIGMAP, MIG_CONFIGMAP
from gpuctl.util.errors import UsageError
from gpuctl.util.words import noun, pairs, plural

# doctor's errors that do not fail validate: a version below NVIDIA's security floor (see check_doctor)
ADVISORY_CHECKS = frozenset({"security-floor"})

if TYPE_CHECKING:
    from gpuctl.model.catalog import GpuModel
    from gpuctl.model.spec import GroupPlan


@dataclass(frozen=True)
class DeviceConfigs:
    """What the device plugin is configured with, cluster-wide: its sharing configs (key -> config), mig-parted's
    layouts, and the ClusterPolicy's MIG strategy (read only where there are MIG layouts: nothing else needs it)."""
    plugin: dict[str, str]
    mig: dict[str, Any]
    mig_strategy: str


def expected_resources(node: KubeObject, configs: DeviceConfigs,
                       intended: dict[str, str | None] | None = None) -> dict[str, int]:
    """What the device plugin should advertise on `node`, from its labels (with its group's `intended`
    labels over them: a node that lacks its group's configuration is expected to have it all the same) and
    the operator's configs."""
    labels = {k: v for k, v in {**node.labels, **(intended or {})}.items() if v is not None}
    gpus = int(labels.get(L.GPU_COUNT, "0"))
    mig_config = labels.get(L.MIG_CONFIG, "")
    layout = layout_from_counts(mig_config, configs.mig[mig_config]) if mig_config in configs.mig else None
    if layout is not None and layout.enabled:
        # GFD labels the strategy the plugin runs with, on its own schedule (a minute apart): a node MIG manager
        # has just answered has none yet, or the one before a change; the ClusterPolicy's is what it will run
        try:
            advertised = advertised_resources(layout, gpus, labels.get(L.MIG_STRATEGY) or configs.mig_strategy)
        except UsageError:  # a label from before the change: the layout needs the strategy the policy sets now
            advertised = advertised_resources(layout, gpus, configs.mig_strategy)
        return {k: v for k, v in advertised.items() if v}
    key = labels.get(CONFIG_LABEL)
    sharing = parse_plugin_config(configs.plugin[key]) if key and key in configs.plugin else NO_SHARING
    return {L.GPU_RESOURCE: gpus * sharing.replicas}


# NVIDIA/k8s-device-plugin #1645 (open since v0.18.2): on a node whose config label comes from a NodePool template
# the config-manager races the plugin's start, and the plugin registers nvidia.com/gpu=0 until its pod restarts.
CONFIG_RACE = ("launched by Karpenter and advertising no GPU: the device plugin's config-manager start-up race "
               "(NVIDIA/k8s-device-plugin #1645); 'gpuctl apply' restarts its plugin pod once")


def raced_plugin_nodes(nodes: list[KubeObject], expected: dict[str, dict[str, int]]) -> list[str]:
    """The nodes Karpenter launched that advertise no nvidia.com/gpu where their configuration promises some."""
    return [n.name for n in nodes if L.KARPENTER_NODEPOOL in n.labels
            and expected[n.name].get(L.GPU_RESOURCE) and not gpu_resources(n).get(L.GPU_RESOURCE)]


def check_capacity(nodes: list[KubeObject], expected: dict[str, dict[str, int]]) -> Check:
    raced = set(raced_plugin_nodes(nodes, expected))
    wrong = [f"{n.name} has {pairs(gpu_resources(n))}, expected {pairs(expected[n.name])}"
             + (f" ({CONFIG_RACE})" if n.name in raced else "")
             for n in nodes if gpu_resources(n) != expected[n.name]]
    if wrong:
        return Check("capacity", False, "; ".join(wrong[:5]) + (f" (+{len(wrong) - 5} more)" if len(wrong) > 5 else ""))
    total: dict[str, int] = {}
    for per_node in expected.values():
        for k, v in per_node.items():
            total[k] = total.get(k, 0) + v
    return Check("capacity", True, f"{plural(len(nodes), 'node')} {noun(len(nodes), 'advertises', 'advertise')} "
                                     f"what was configured: {pairs(total)}")


@dataclass(frozen=True)
class Rollout:
    """A DaemonSet's rollout as `kubectl rollout status` judges it (k8s.io/kubectl v0.36
    pkg/polymorphichelpers/rollout_status.go:95-117, DaemonSetStatusViewer.Status: done when
    status.observedGeneration >= metadata.generation, updatedNumberScheduled and numberAvailable both
    reach desiredNumberScheduled), and its pods as they are now: the controller's counts lag a pod that
    was just deleted (a device-plugin restart), so the nodes with a ready pod not being deleted count too."""

    name: str  # namespace/name
    desired: int
    updated: int
    available: int
    ready: int  # status.numberReady
    pods_ready: int  # nodes with a ready pod of it that is not being deleted
    observed: bool  # the controller has seen the current spec
    rolling: bool  # RollingUpdate: OnDelete pods take a new template only when deleted

    def waiting_for(self) -> str | None:
        """What the rollout still waits for (kubectl's words where it has them), None when it is done."""
        if not self.observed:
            return "waiting for the DaemonSet spec update to be observed"
        if self.desired == 0:  # none scheduled yet: no node advertises GPUs from this plugin
            return "0 of 0 pods ready (no node runs it yet)"
        if self.rolling and self.updated < self.desired:
            return f"rollout: {self.updated} of {self.desired} pods updated"
        if self.available < self.desired:
            return f"rollout: {self.available} of {self.desired} updated pods available"
        if min(self.ready, self.pods_ready) < self.desired:
            return f"{min(self.ready, self.pods_ready)} of {self.desired} pods ready"
        return None


def daemon_set_rollout(kube: Kube, daemon_set: KubeObject) -> Rollout:
    """The Rollout of `daemon_set`, its pods read now."""
    namespace, name = daemon_set.namespace, daemon_set.name
    spec, status = daemon_set.spec, daemon_set.get("status")
    match = (spec.get("selector") or {}).get("matchLabels") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
    pods = kube.list("v1", "Pod", namespace, labels=selector,
                     what=f"listing the pods of DaemonSet {namespace}/{name}")
    ready_on = {p.spec.get("nodeName") for p in pods if not p.deleting
                and any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in p.status.get("conditions") or [])}
    strategy = (spec.get("updateStrategy") or {}).get("type")
    counts = status or {}
    return Rollout(
        name=f"{namespace}/{name}",
        desired=counts.get("desiredNumberScheduled") or 0,
        updated=counts.get("updatedNumberScheduled") or 0,
        available=counts.get("numberAvailable") or 0,
        ready=counts.get("numberReady") or 0,
        pods_ready=len(ready_on - {None}),
        observed=status is not None and (daemon_set.metadata.get("generation") or 0)
        <= (counts.get("observedGeneration") or 0),
        rolling=strategy in (None, "RollingUpdate"))


def device_plugin_rollouts(kube: Kube) -> tuple[list[str], Rollout | None]:
    """The device-plugin DaemonSets (namespace/name; the MPS control daemon is not one) and, when there is
    exactly one, its Rollout."""
    plugins = [d for d in kube.list("apps/v1", "DaemonSet", what="listing DaemonSets") if is_device_plugin(d.name)]
    names = [f"{d.namespace}/{d.name}" for d in plugins]
    return names, (daemon_set_rollout(kube, plugins[0]) if len(plugins) == 1 else None)


def check_node_config(nodes: list[KubeObject], plans: dict[str, GroupPlan]) -> Check:
    """Each node carries its node group's recorded configuration (sharing or MIG config, labels, taints):
    a node added later (scaled, autoscaled) without it advertises less than its siblings."""
    drift: list[str] = []
    for node in nodes:
        plan = plans.get(nodegroup_of(node) or "")
        if plan is not None:
            taints = {(t["key"], t.get("value") or "", t["effect"]) for t in node.spec.get("taints") or []}
            drift += node_drift(node.name, node.labels, taints, plan)
    if drift:
        more = f" (+{len(drift) - 5} more)" if len(drift) > 5 else ""
        return Check("node-config", False, "; ".join(drift[:5]) + more + "; rerun 'gpuctl apply'")
    return Check("node-config", True, f"{plural(len(nodes), 'node')} {noun(len(nodes), 'carries', 'carry')} "
                                        "their node group's configuration")


def check_device_plugins(kube: Kube, found: tuple[list[str], Rollout | None] | None = None) -> Check:
    """Exactly one device-plugin DaemonSet (the MPS control daemon is not one), rolled out (as `kubectl
    rollout status` says) with every pod ready. `found`: device_plugin_rollouts(kube), when read already."""
    names, rollout = found if found is not None else device_plugin_rollouts(kube)
    if rollout is None:
        return Check("device-plugin", False, f"expected exactly one device-plugin DaemonSet, found {len(names)}: "
                     f"{', '.join(names) or 'none'}")
    namespace, name = rollout.name.split("/", 1)
    if (waiting_for := rollout.waiting_for()) is not None:
        return Check("device-plugin", False, f"{rollout.name}: {waiting_for}; "
                     f"see 'kubectl rollout status -n {namespace} ds/{name}' and "
                     f"'kubectl logs -n {namespace} ds/{name}'")
    return Check("device-plugin", True, f"exactly one device-plugin DaemonSet: {rollout.name} "
                 f"({rollout.ready} pods ready, rolled out)")


def read_configs(kube: Kube) -> DeviceConfigs:
    """The operator's device-plugin configs and mig-parted configs (in the namespace of the GPU Operator
    gpuctl configures, which may be another's), and its ClusterPolicy's MIG strategy."""
    namespace = config_namespace(kube)
    plugin = read_config_map_data(kube, namespace, DEVICE_PLUGIN_CONFIGMAP) or {}
    mig_text = (read_config_map_data(kube, namespace, MIG_CONFIGMAP) or {}).get("config.yaml", "")
    mig = parse_mig_parted_config(mig_text) if mig_text else {}
    return DeviceConfigs(plugin, mig, _mig_strategy(kube) if mig else "single")


def smoke_resource(nodes: list[KubeObject]) -> str:
    """A MIG resource when the nodes advertise one (mixed strategy), else nvidia.com/gpu."""
    for node in nodes:
        mig = sorted(k for k in gpu_resources(node) if k.startswith("nvidia.com/mig-"))
        if mig:
            return mig[0]
    return L.GPU_RESOURCE


def validate_cluster(kube: Kube, nodegroup: str | None, image: str = SMOKE_IMAGE,
                     timeout: float = SMOKE_TIMEOUT_S) -> list[Check]:
    """Capacity against configuration, exactly one device plugin, and the CUDA smoke test (in DRA mode:
    the driver's devices against configuration, its kubelet plugin on every node, a smoke test through a
    ResourceClaim)."""
    try:
        nodes = gpu_nodes(kube, nodegroup)
    except UsageError:  # a node group of no nodes: Karpenter's (then launched here), else the error stands
        launched = _launch_a_node(kube, nodegroup or "", image, timeout)
        if launched is None:
            raise
        if not launched.ok:
            return [launched]
        nodes = gpu_nodes(kube, nodegroup)
    if not nodes:
        return [Check("gpu-nodes", False, f"no GPU nodes (label {GPU_NODE_SELECTOR})")]
    if nodegroup is None and (groups := mixed_groups(kube, nodes)):
        # some groups on DRA, the others on the device plugin: each group checked the way it is served, as
        # apply's validate/<group> steps do; each check named after its group
        return [replace(c, name=f"{c.name}/{g}") for g in groups for c in validate_cluster(kube, g, image, timeout)]
    configs = read_configs(kube)
    labels = nodes[0].labels
    node_labels = {k: nodegroup for k in NODEGROUP_LABELS if nodegroup and labels.get(k) == nodegroup}
    pin = dict(list(node_labels.items())[:1])
    tolerations = tolerations_of(sorted({node_taint(t) for n in nodes for t in n.spec.get("taints") or []}))
    if dra_serves(kube, nodes):
        return validate_dra(kube, nodes, configs.mig, image, pin, tolerations, timeout, nodegroup)
    plans = read_group_plans(kube, config_namespace(kube))
    intended = {n.name: intended_labels(plans[g]) if (g := nodegroup_of(n) or "") in plans else None
                for n in nodes}
    checks = [check_node_config(nodes, plans),
              check_capacity(nodes, {n.name: expected_resources(n, configs, intended[n.name]) for n in nodes}),
              check_device_plugins(kube), check_doctor(kube, nodegroup)]
    checks.append(run_smoke_test(kube, image, smoke_resource(nodes), pin, tolerations, timeout))
    return checks


def dra_serves(kube: Kube, nodes: list[KubeObject]) -> bool:
    """Whether the DRA driver serves `nodes`: the cluster is in DRA mode, and where gpuctl's driver serves only the
    node groups marked dra: true (stack.dra_driver.serves_groups_only), these nodes are of them (L.DRA_GROUP)."""
    if not dra_mode(kube):
        return False
    return all(n.labels.get(L.DRA_GROUP) == "true" for n in nodes) or not serves_groups_only(kube)


def mixed_groups(kube: Kube, nodes: list[KubeObject]) -> list[str]:
    """The node groups of `nodes` where gpuctl's DRA driver serves some of them (L.DRA_GROUP) and the device
    plugin the others (stack.dra_driver.serves_groups_only); [] where one agent serves them all, or where a node
    is of no group (then checked as one set, as before)."""
    on_dra = {n.labels.get(L.DRA_GROUP) == "true" for n in nodes}
    groups = {nodegroup_of(n) for n in nodes}
    if len(on_dra) < 2 or None in groups or not dra_mode(kube) or not serves_groups_only(kube):
        return []
    return sorted(g for g in groups if g is not None)


def check_doctor(kube: Kube, nodegroup: str | None) -> Check:
    """`gpuctl doctor`'s checks (gpuctl.ops.doctor), read-only: its errors fail validate and are listed. Its
    warnings (a taint out of place, a node gpuctl cordoned that is healthy again) and a stack below NVIDIA's
    security floor (`security-floor`: an upgrade to make, not a platform that does not work; a chart pinned to
    an older release must still validate, so that it can be upgraded) are counted, not failed."""
    found = doctor(kube, nodegroup, with_xids=False)  # the checks; no XID evidence, no Prometheus reached
    errors = [f for f in found if f.severity == "error" and f.check not in ADVISORY_CHECKS]
    notes = [f for f in found if f not in errors]
    noted = f"; not failing validate: {', '.join(sorted({f.check for f in notes}))} (see 'gpuctl doctor')" \
        if notes else ""
    if errors:
        listed = "; ".join(f"{f.check} on {f.object}: {f.cause}" for f in errors[:5])
        more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
        return Check("doctor", False, f"{listed}{more}{noted}; 'gpuctl doctor' names each repair")
    return Check("doctor", True, f"no errors found{noted}")


def _launch_a_node(kube: Kube, nodegroup: str, image: str, timeout: float) -> Check | None:
    """For a node group of no nodes that Karpenter launches (recorded with 0 fixed nodes): the smoke test first,
    pinned to the group, so that Karpenter launches a node for it and the checks have one to look at; what it
    proves then holds for every node the pool launches. None where the group is not such a group."""
    plan = read_group_plans(kube, config_namespace(kube)).get(nodegroup)
    if plan is None or plan.spec.nodes != 0:
        return None
    wanted = advertised(plan, _mig_strategy(kube))
    resource = next((k for k, v in sorted(wanted.items()) if v and k != L.GPU_RESOURCE), L.GPU_RESOURCE)
    check = run_smoke_test(kube, image, resource, {L.NODEGROUP: nodegroup}, tolerations_of(plan.spec.taints),
                           timeout, launch=True)
    if check.ok:  # the node is in; the checks that follow look at it once it has joined as configured
        _await_configured(kube, nodegroup, timeout)
    return replace(check, detail=f"launched by Karpenter: {check.detail}") if check.ok else check


def _await_configured(kube: Kube, nodegroup: str, timeout: float) -> None:
    """Until the group's nodes advertise what their configuration says, or `timeout`: a node Karpenter has just
    launched runs pods before its device plugin has applied the group's sharing."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        configs = read_configs(kube)
        nodes = gpu_nodes(kube, nodegroup)
        if check_capacity(nodes, {n.name: expected_resources(n, configs) for n in nodes}).ok:
            return
        time.sleep(0.5)


def _mig_strategy(kube: Kube) -> str:
    """The ClusterPolicy's MIG strategy (the device plugin's MIG_STRATEGY); the operator's default, single."""
    try:
        policies = kube.list("/".join(CLUSTER_POLICY[:2]), "ClusterPolicy", what="reading the ClusterPolicy")
    except KubeNotFound:  # no ClusterPolicy CRD
        policies = []
    spec = policies[0].spec if policies else {}
    return str((spec.get("mig") or {}).get("strategy") or "single")


# -- DRA mode -------------------------------------------------------------------------------------------


def configured_layout(labels: dict[str, str], model: GpuModel | None,
                      mig_configs: dict[str, Any]) -> MigLayout | None:
    """The MIG layout a node is configured for: its nvidia.com/mig.config, from the MIG manager's configs
    when they name it, else read back from the name gpuctl gave it (custom-<layout> or a named config).
    None without MIG. ValueError for a name that is neither."""
    name = labels.get(L.MIG_CONFIG, "")
    if not name or name == "all-disabled":
        return None
    if name in mig_configs:
        return layout_from_counts(name, mig_configs[name])
    if model is None:
        raise ValueError(f"cannot read MIG config {name}: no known GPU model")
    return layout_of_config_name(name, model)


def expected_devices(node: KubeObject, mig_configs: dict[str, Any]) -> int:
    """How many devices the DRA driver should publish on `node`: one per GPU (gpuctl.dev/gpus-per-node,
    else GFD's nvidia.com/gpu.count), or with a MIG layout configured, its MIG devices on every GPU (the
    driver publishes a MIG-enabled GPU's MIG devices, not the GPU). ValueError for an unreadable layout."""
    labels = node.labels
    gpus = int(labels.get(L.GPUS_PER_NODE) or labels.get(L.GPU_COUNT) or 0)
    layout = configured_layout(labels, model_of(labels), mig_configs)
    return gpus * len(layout.profiles) if layout is not None and layout.enabled else gpus


def check_dra_capacity(nodes: list[KubeObject], published: dict[str, NodeDevices],
                       mig_configs: dict[str, Any]) -> Check:
    """Each node's slices publish the devices its configuration gives, and no device plugin advertises
    the same GPUs (they would be handed out twice: to nvidia.com/gpu limits and to claims)."""
    wrong, total = [], 0
    for node in nodes:
        name, labels = node.name, node.labels
        try:
            expected = expected_devices(node, mig_configs)
        except ValueError as exc:
            wrong.append(f"{name}: {exc}")
            continue
        have = published.get(name)
        count = len(have.devices) if have is not None else 0
        total += count
        if have is None:
            wrong.append(f"{name} publishes no ResourceSlice, expected {expected} devices (is the DRA driver's "
                         f"kubelet plugin running there?)")
        elif count != expected:
            mig = f" (MIG config {labels[L.MIG_CONFIG]}, state {labels.get(L.MIG_STATE, 'none')})" \
                if labels.get(L.MIG_CONFIG) else ""
            wrong.append(f"{name} publishes {count} devices, expected {expected}{mig}")
        if plugin := gpu_resources(node):
            wrong.append(f"{name} also advertises {plugin} from a device plugin: the same GPUs would be handed "
                         f"out twice (turn the device plugin off: GPU Operator devicePlugin.enabled=false)")
    if wrong:
        return Check("capacity", False, "; ".join(wrong[:5]) + (f" (+{len(wrong) - 5} more)" if len(wrong) > 5 else ""))
    allocated = sum(published[n.name].in_use for n in nodes)
    return Check("capacity", True, f"{plural(len(nodes), 'node')} {noun(len(nodes), 'publishes', 'publish')} "
                 f"what was configured: {plural(total, 'device')} of "
                 f"driver gpu.nvidia.com ({allocated} allocated)")


def check_kubelet_plugins(nodes: list[KubeObject], pods: dict[str, KubeObject]) -> Check:
    """The DRA driver's kubelet plugin (`pods`: node -> its pod) is ready on every node."""
    states = {n.name: plugin_state(pods.get(n.name)) for n in nodes}
    bad = [f"{node}: {state}" for node, state in states.items() if state != "ready"]
    ready = len(states) - len(bad)
    if bad:
        return Check("dra-driver", False, f"kubelet plugin ready on {ready} of {len(states)} nodes; "
                     f"{', '.join(bad[:5])}; see 'kubectl get pods -A -l {DRA_PLUGIN_SELECTOR}'")
    namespaces = sorted({p.namespace or "" for p in pods.values()})
    return Check("dra-driver", True, f"DRA kubelet plugin ready on {ready} of {ready} nodes "
                 f"(namespace {', '.join(namespaces)})")


def validate_dra(kube: Kube, nodes: list[KubeObject], mig_configs: dict[str, Any], image: str,
                 pin: dict[str, str], tolerations: list[dict[str, str]], timeout: float,
                 nodegroup: str | None = None) -> list[Check]:
    published = read_node_devices(kube)
    mine = [published.get(n.name, NodeDevices((), frozenset())) for n in nodes]
    # full GPUs where any node has one; MIG devices only where the nodes publish nothing else
    device_class = MIG_CLASS if any(m.devices for m in mine) and all(m.mig_only for m in mine if m.devices) \
        else GPU_CLASS
    return [check_dra_capacity(nodes, published, mig_configs),
            check_kubelet_plugins(nodes, pods_by_node(kube, DRA_PLUGIN_SELECTOR, "DRA kubelet-plugin")),
            check_doctor(kube, nodegroup),
            run_dra_smoke_test(kube, image, device_class, pin, tolerations, {n.name for n in nodes}, timeout)]


class ClaimWatch:
    """The first allocation a ResourceClaim had, seen by a watch from the claim's creation on. Reading the
    claim after the smoke test is not enough: the resource claim controller clears the allocation as soon
    as the pod is done (Kubernetes v1.36.3 pkg/controller/resourceclaim/controller.go:1461-1490)."""

    def __init__(self, kube: Kube, name: str, resource_version: str) -> None:
        self.kube = kube
        self.name = name
        self.resource_version = resource_version
        self.allocation: dict[str, Any] | None = None

    def _seen(self, claim: KubeObject) -> None:
        self.resource_version = claim.resource_version
        if self.allocation is None:
            self.allocation = claim.status.get("allocation")

    def follow(self, seconds: int = 1) -> None:
        """Take the claim's changes for up to `seconds` (the server ends the watch then)."""
        try:
            with requesting(f"watching ResourceClaim {SMOKE_NAMESPACE}/{self.name}"):
                for kind, claim in self.kube.watch(API_VERSION, "ResourceClaim", SMOKE_NAMESPACE,
                                                   fields=f"metadata.name={self.name}",
                                                   resource_version=self.resource_version, seconds=seconds):
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._seen(claim)
        except KubeApiError as exc:
            if exc.status != 410:
                raise
            self.read()  # 410 Gone (the watch's ERROR event): too old a version; read the claim instead

    def read(self) -> None:
        self._seen(self.kube.get(API_VERSION, "ResourceClaim", self.name, SMOKE_NAMESPACE))


def check_allocation(allocation: dict[str, Any] | None, node: str | None, group: set[str]) -> str | None:
    """None when the claim's `allocation` gave the pod (bound to `node`) a device of the GPU driver on that
    node, and the node is one of the `group`; else what is wrong."""
    if allocation is None:
        return "its ResourceClaim was never allocated"
    results = (allocation.get("devices") or {}).get("results") or []
    ours = [r for r in results if r.get("driver") == DRIVER]
    if not ours:
        return f"its ResourceClaim holds no device of driver {DRIVER}: {results}"
    pools = sorted({r.get("pool") for r in ours})
    if node not in group:
        return f"it ran on {node}, which is not a node of the node group"
    if pools != [node]:
        return f"its ResourceClaim was allocated devices of {', '.join(map(str, pools))}, not of {node}"
    return None


def run_dra_smoke_test(kube: Kube, image: str, device_class: str, node_labels: dict[str, str],
                       tolerations: list[dict[str, str]], group: set[str], timeout: float = SMOKE_TIMEOUT_S) -> Check:
    """The CUDA sample with its GPU from a ResourceClaim of `device_class` made next to it (deleted with
    it); it passes when the pod passes and the scheduler allocated the claim a device on the pod's node,
    a node of `group`."""
    ensure_namespace(kube, SMOKE_NAMESPACE)
    await_default_service_account(kube)
    name = f"gpuctl-smoke-{uuid.uuid4().hex[:6]}"
    with requesting("creating the smoke test's ResourceClaim"):
        created = kube.create(smoke_claim(name, device_class))
    claims = ClaimWatch(kube, name, created.resource_version)
    try:
        with requesting("creating the smoke-test pod"):
            kube.create(smoke_pod(name, image, device_class, node_labels, tolerations, claim=name))
        try:
            check, pod = await_smoke_test(kube, name, f"1 {device_class} device from ResourceClaim {name}", timeout,
                                          pause=claims.follow,
                                          pending=lambda p: _unallocatable(kube, p, device_class, group))
            if not check.ok:
                return check
            if claims.allocation is None:
                claims.follow()  # changes up to now that the last watch did not reach
            allocation = claims.allocation
            node = pod.spec.get("nodeName")
            wrong = check_allocation(allocation, node, group)
            if wrong is not None or allocation is None:  # (no allocation is a wrong one)
                return Check("smoke-test", False, f"pod {name} passed on {node}, but {wrong}")
            devices = ", ".join(sorted(r["device"] for r in allocation["devices"]["results"]))
            return Check("smoke-test", True, f"{check.detail} (allocated by the scheduler: {devices} of {node})")
        finally:
            delete_smoke_pod(kube, name)
    finally:
        with requesting("deleting the smoke test's ResourceClaim"):
            kube.delete(API_VERSION, "ResourceClaim", name, SMOKE_NAMESPACE)  # gone already is done too


def _unallocatable(kube: Kube, pod: KubeObject, device_class: str, group: set[str]) -> str:
    """Why the smoke-test pod stayed unscheduled, and the fix, in one line: when the scheduler found no
    free device, how many of the group's devices are allocated."""
    if (said := unschedulable(pod)) is None:
        return diagnostics(kube, pod)
    published = read_node_devices(kube)
    total = sum(len(published[n].devices) for n in group if n in published)
    used = sum(published[n].in_use for n in group if n in published)
    if total and used >= total:
        return (f"no free {device_class} device on the node group ({used} of {total} allocated to ResourceClaims; "
                f"scheduler: {said}); free one (delete a pod that holds a claim, see 'kubectl get resourceclaims "
                f"-A') or add nodes ('gpuctl nodegroup scale')")
    return (f"the scheduler cannot allocate a {device_class} device on the node group's nodes ({used} of "
            f"{total} allocated; scheduler: {said}); see 'gpuctl status' and 'kubectl describe pod -n "
            f"{SMOKE_NAMESPACE} {pod.name}'")
