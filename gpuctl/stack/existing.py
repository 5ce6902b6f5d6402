"""The GPU stack a cluster already has before gpuctl writes anything: GPU Operator releases and their
ClusterPolicies, device-plugin and NFD DaemonSets, and nodes whose GPUs a plugin on the host advertises.

Observed only; the rules that decide what gpuctl does with it live in owners.py. The finding itself
(`find_stack`) is pure, on plain Kubernetes objects (dicts as the API returns them), so it is tested
without a cluster; `read_stack` gathers those objects.

Upstream facts relied on (gpu-facts.md "Upstream as of 2026-11"; NVIDIA/gpu-operator v26.7.0 chart):
- Helm stores a release as a Secret labelled owner=helm, name=<release>, status=<status>; its `release`
  value is base64 of gzip of the release JSON (`chart.metadata.name`), and Kubernetes base64s it again.
- Helm annotates what it creates with meta.helm.sh/release-name and release-namespace, the
  ClusterPolicy of the chart included; the operator's own DaemonSets carry no such annotation, only
  an owner reference to the ClusterPolicy.
- The operator runs its operands (and reads their ConfigMaps) in its own namespace: OPERATOR_NAMESPACE
  is the operator Deployment's metadata.namespace (templates/operator.yaml); that Deployment is
  labelled app.kubernetes.io/component=gpu-operator.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuctl.kube.errors import KubeApiError, KubeNotFound
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.taints import Taint
from gpuctl.stack.values import MIG_CONFIGMAP, NAMESPACE

RELEASE_ANNOTATION = "meta.helm.sh/release-name"
RELEASE_NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"
OPERATOR_CHART = "gpu-operator"
NFD_CHART = "node-feature-discovery"
OUR_OPERATOR = ("gpu-operator", NAMESPACE)  # (release, namespace) of gpuctl's own releases
OUR_NFD = ("node-feature-discovery", NAMESPACE)
OURS = {OUR_OPERATOR, OUR_NFD}
POLICY_API = "nvidia.com/v1"  # the GPU Operator's ClusterPolicy
CLUSTER_POLICY = ("nvidia.com", "v1", "clusterpolicies")
OPERATOR_SELECTOR = "app.kubernetes.io/component=gpu-operator"
HELM_RELEASES = "owner=helm,status=deployed"
# DaemonSets named like a device plugin that are not one: the operator always creates the MPS control
# daemon beside the plugin, and the sandbox plugin serves VMs (gpu-operator assets/state-*).
NOT_DEVICE_PLUGINS = ("nvidia-device-plugin-mps-control-daemon", "nvidia-sandbox-device-plugin-daemonset")
# Default tolerations of the operator's DaemonSets when the ClusterPolicy sets none (assets/state-*).
OPERAND_TOLERATIONS = ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},)
# Taints the DaemonSet controller tolerates on every DaemonSet pod (node lifecycle and pressure).
DAEMONSET_TOLERATED = "node.kubernetes.io/"
KARPENTER_INITIALIZED = "karpenter.sh/initialized"  # Karpenter initialized the node (its resources registered)


def is_device_plugin(name: str) -> bool:
    """Whether a DaemonSet of this name runs an NVIDIA device plugin that advertises GPUs."""
    return "nvidia-device-plugin" in name and name not in NOT_DEVICE_PLUGINS


def is_nfd(name: str) -> bool:
    return "node-feature-discovery" in name


@dataclass(frozen=True)
class HelmRelease:
    name: str
    namespace: str
    chart: str


@dataclass(frozen=True)
class Operator:
    """A GPU Operator: its Helm release (None when not installed by Helm) and the namespace it runs in."""

    release: str | None
    release_namespace: str | None
    namespace: str  # OPERATOR_NAMESPACE: where its operands run and its ConfigMaps must be
    policy: str | None  # its ClusterPolicy; None: nothing gpuctl could configure it through
    tolerations: tuple[dict[str, Any], ...] = OPERAND_TOLERATIONS
    uses_gpuctl_configs: bool = False  # its ClusterPolicy points the MIG manager at gpuctl's ConfigMap

    @property
    def ours(self) -> bool:
        return (self.release, self.release_namespace) == OUR_OPERATOR

    def describe(self) -> str:
        if self.release is None:
            return f"ClusterPolicy {self.policy} (not installed by Helm), operator in {self.namespace}"
        return f"release {self.release} in {self.release_namespace}"

    def summary(self) -> str:
        """One line for `gpuctl status`: whose operator it is and how gpuctl configures it."""
        if self.ours:
            return f"GPU Operator: {self.describe()} (gpuctl's)"
        how = f"; sharing configured through its ClusterPolicy {self.policy}" if self.uses_gpuctl_configs else \
            "; not configured by gpuctl"
        return f"GPU Operator: {self.describe()} (not gpuctl's{how})"

    def as_dict(self) -> dict[str, Any]:
        return {"release": self.release, "namespace": self.release_namespace, "operator_namespace": self.namespace,
                "cluster_policy": self.policy, "owner": "gpuctl" if self.ours else "other",
                "configured_by_gpuctl": self.ours or self.uses_gpuctl_configs, "summary": self.summary()}


@dataclass(frozen=True)
class Workload:
    """A device-plugin or NFD DaemonSet and who made it."""

    namespace: str
    name: str
    release: str | None = None  # the Helm release that made it
    release_namespace: str | None = None
    operated: bool = False  # made by a GPU Operator from its ClusterPolicy

    @property
    def where(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ours(self) -> bool:
        return (self.release, self.release_namespace) in OURS

    def describe(self) -> str:
        made = f", Helm release {self.release} in {self.release_namespace}" if self.release else ""
        return f"DaemonSet {self.where}{made}"


@dataclass(frozen=True)
class ExistingStack:
    operators: tuple[Operator, ...] = ()
    plugins: tuple[Workload, ...] = ()  # device-plugin DaemonSets (the MPS control daemon is not one)
    nfds: tuple[Workload, ...] = ()
    host_plugin_nodes: tuple[str, ...] = ()  # advertise GPUs where no device-plugin DaemonSet can run

    @property
    def foreign_operators(self) -> tuple[Operator, ...]:
        return tuple(o for o in self.operators if not o.ours)


def decode_release(value: str) -> dict[str, Any]:
    """The release JSON of a Helm release Secret's `release` value (as the API returns it: base64)."""
    data = base64.b64decode(base64.b64decode(value))
    if data[:3] == b"\x1f\x8b\x08":  # helm gzips unless the body is tiny (pkg/storage/driver/util.go)
        data = gzip.decompress(data)
    return json.loads(data)


def release_of_secret(secret: dict[str, Any]) -> HelmRelease | None:
    labels = secret.get("metadata", {}).get("labels") or {}
    try:
        body = decode_release((secret.get("data") or {})["release"])
        chart = body["chart"]["metadata"]["name"]
    except (KeyError, ValueError, TypeError, OSError):
        return None
    return HelmRelease(labels.get("name") or body.get("name", ""), secret["metadata"].get("namespace", ""), chart)


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def _operator_namespace(release_namespace: str | None, deployments: Sequence[dict[str, Any]]) -> str:
    """The namespace of the operator Deployment (its OPERATOR_NAMESPACE): the release's own when it has
    one there, else the only one, else the release's namespace."""
    spaces = [d["metadata"]["namespace"] for d in deployments]
    if release_namespace in spaces or (not spaces and release_namespace):
        return release_namespace  # type: ignore[return-value]
    return spaces[0] if spaces else NAMESPACE


def find_operators(releases: list[HelmRelease], policies: Sequence[dict[str, Any]],
                   deployments: Sequence[dict[str, Any]]) -> tuple[Operator, ...]:
    """GPU Operators: one per ClusterPolicy (named by its Helm annotations), and one per GPU Operator
    release whose ClusterPolicy is not there."""
    found: list[Operator] = []
    for policy in sorted(policies, key=lambda p: p["metadata"].get("creationTimestamp") or ""):
        notes = _annotations(policy)
        release, space = notes.get(RELEASE_ANNOTATION), notes.get(RELEASE_NAMESPACE_ANNOTATION)
        spec = policy.get("spec") or {}
        tolerations = tuple((spec.get("daemonsets") or {}).get("tolerations") or OPERAND_TOLERATIONS)
        configured = ((spec.get("migManager") or {}).get("config") or {}).get("name") == MIG_CONFIGMAP
        found.append(Operator(release, space if release else None, _operator_namespace(space, deployments),
                              policy["metadata"]["name"], tolerations, configured))
    named = {(o.release, o.release_namespace) for o in found}
    for rel in releases:
        if rel.chart == OPERATOR_CHART and (rel.name, rel.namespace) not in named:
            found.append(Operator(rel.name, rel.namespace, _operator_namespace(rel.namespace, deployments), None))
    return tuple(found)


def workload_of(ds: dict[str, Any]) -> Workload:
    meta = ds["metadata"]
    notes = _annotations(ds)
    operated = any(ref.get("kind") == "ClusterPolicy" for ref in meta.get("ownerReferences") or [])
    release = notes.get(RELEASE_ANNOTATION)
    return Workload(meta["namespace"], meta["name"], release,
                    notes.get(RELEASE_NAMESPACE_ANNOTATION, meta["namespace"]) if release else None, operated)


def gpu_allocatable(node: dict[str, Any]) -> dict[str, int]:
    """nvidia.com/gpu and nvidia.com/mig-* a node offers the scheduler, non-zero only."""
    values = (node.get("status") or {}).get("allocatable") or {}
    out = {}
    for key, value in values.items():
        if key == "nvidia.com/gpu" or key.startswith("nvidia.com/mig-"):
            try:
                amount = int(str(value))
            except ValueError:
                continue
            if amount > 0:
                out[key] = amount
    return out


def _term_matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    for expr in term.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op in ("Gt", "Lt"):
            try:
                have, bound = int(labels[key]), int(values[0])
            except (KeyError, IndexError, ValueError):
                return False
            if (op == "Gt" and not have > bound) or (op == "Lt" and not have < bound):
                return False
    return True


def tolerates(tolerations: list[dict[str, Any]] | tuple[dict[str, Any], ...], taint: dict[str, Any]) -> bool:
    """Kubernetes' Toleration.ToleratesTaint."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        if tol.get("operator") == "Exists":
            if not tol.get("key") or tol["key"] == taint.get("key"):
                return True
        elif tol.get("key") == taint.get("key") and (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def can_run_on(pod_spec: dict[str, Any], node: dict[str, Any]) -> bool:
    """Whether a DaemonSet with this pod template would place a pod on `node`: node selector, required
    node affinity, and the node's NoSchedule/NoExecute taints (the DaemonSet controller's own
    node.kubernetes.io/* tolerations included)."""
    labels = _labels(node)
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if terms and not any(_term_matches(t, labels) for t in terms):
        return False
    tolerations = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") == "PreferNoSchedule" or str(taint.get("key", "")).startswith(DAEMONSET_TOLERATED):
            continue
        if not tolerates(tolerations, taint):
            return False
    return True


def registering(node: dict[str, Any]) -> bool:
    """A node Karpenter launched and has not initialized: Karpenter marks it initialized only once every
    extended resource its NodeClaim asked for is allocatable (kubernetes-sigs/karpenter
    pkg/controllers/nodeclaim/lifecycle/initialization.go RequestedResourcesRegistered); until then the GPUs in its
    status may be the NodeClaim's (the kwok provider writes them: cloudprovider.go toNode), not a plugin's."""
    labels = _labels(node)
    return L.KARPENTER_NODEPOOL in labels and labels.get(KARPENTER_INITIALIZED) != "true"


def host_plugin_nodes(nodes: Sequence[dict[str, Any]], plugin_sets: Sequence[dict[str, Any]],
                      tolerated: Sequence[Taint]) -> tuple[str, ...]:
    """Nodes that offer GPUs where no device-plugin DaemonSet can run: a plugin on the host advertises them.
    Offer as the kubelet does: allocatable above 0. A plugin that went away (the GPU Operator's release
    uninstalled, its pod evicted) leaves its GPUs in capacity with allocatable 0, then capacity 0 after 5 minutes
    (Kubernetes pkg/kubelet/cm/devicemanager manager.go PluginDisconnected, GetCapacity; types.go
    endpointStopGracePeriod): that is no host plugin, and a re-run apply reinstalls the stack.
    `tolerated`: the GPU taints the run gives a GPU Operator's DaemonSets (its ClusterPolicy's tolerations), held
    as tolerated already: a cloud puts a group's new taint on its nodes before the run gets that far (EKS's
    UpdateNodegroupConfig), and the running plugin pod stays (a DaemonSet keeps its pod past a NoSchedule taint)."""
    more = [{"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect} for t in tolerated]
    templates = [_with_tolerations(((d.get("spec") or {}).get("template") or {}).get("spec") or {},
                                   more if workload_of(d).operated else []) for d in plugin_sets]
    return tuple(sorted(n["metadata"]["name"] for n in nodes
                        if gpu_allocatable(n) and not registering(n) and not any(can_run_on(t, n) for t in templates)))


def _with_tolerations(pod_spec: dict[str, Any], more: list[dict[str, str]]) -> dict[str, Any]:
    return {**pod_spec, "tolerations": [*(pod_spec.get("tolerations") or []), *more]} if more else pod_spec


def find_stack(releases: list[HelmRelease], policies: Sequence[dict[str, Any]], deployments: Sequence[dict[str, Any]],
               daemon_sets: Sequence[dict[str, Any]], nodes: Sequence[dict[str, Any]],
               tolerated: Sequence[Taint] = ()) -> ExistingStack:
    """The GPU stack found; `tolerated`: host_plugin_nodes'."""
    plugin_sets = [d for d in daemon_sets if is_device_plugin(d["metadata"]["name"])]
    host = host_plugin_nodes(nodes, plugin_sets, tolerated)
    return ExistingStack(
        operators=find_operators(releases, policies, deployments),
        plugins=tuple(workload_of(d) for d in plugin_sets),
        nfds=tuple(workload_of(d) for d in daemon_sets if is_nfd(d["metadata"]["name"])),
        host_plugin_nodes=host)


# -- reading the cluster ---------------------------------------------------------------------------


def read_releases(kube: Kube) -> list[HelmRelease]:
    """Deployed Helm releases; none where Secrets may not be listed (the ClusterPolicy still names its own)."""
    try:
        secrets = kube.list("v1", "Secret", labels=HELM_RELEASES, what="listing Helm releases")
    except KubeApiError as exc:
        if exc.status in (401, 403):
            return []
        raise
    return [r for r in (release_of_secret(s) for s in secrets) if r is not None]


def read_policies(kube: Kube) -> list[KubeObject]:
    try:
        return kube.list(POLICY_API, "ClusterPolicy", what="listing ClusterPolicies")
    except KubeNotFound:
        return []  # no ClusterPolicy CRD: no GPU Operator


def read_operator_deployments(kube: Kube) -> list[KubeObject]:
    return kube.list("apps/v1", "Deployment", labels=OPERATOR_SELECTOR, what="listing GPU Operator Deployments")


def read_operators(kube: Kube) -> tuple[Operator, ...]:
    return find_operators(read_releases(kube), read_policies(kube), read_operator_deployments(kube))


def read_stack(kube: Kube, tolerated: Sequence[Taint]) -> ExistingStack:
    """The GPU stack on the cluster; `tolerated`: the GPU taints the run's stack tolerates (host_plugin_nodes)."""
    daemon_sets = kube.list("apps/v1", "DaemonSet", what="listing DaemonSets and nodes")
    nodes = kube.list("v1", "Node", what="listing DaemonSets and nodes")
    return find_stack(read_releases(kube), read_policies(kube), read_operator_deployments(kube),
                      daemon_sets, nodes, tolerated)


def configured_operator(kube: Kube) -> Operator | None:
    """Another's GPU Operator that gpuctl configures through its ClusterPolicy (none when gpuctl's own
    release is there, or no operator is)."""
    # The ClusterPolicies' own Helm annotations say whose they are: no need to read release Secrets here.
    return configured_of(find_operators([], read_policies(kube), read_operator_deployments(kube)))


def configured_of(operators: Sequence[Operator]) -> Operator | None:
    """Of `operators`, another's that gpuctl configures through its ClusterPolicy (none beside gpuctl's own)."""
    foreign = [o for o in operators if not o.ours and o.policy]
    return foreign[0] if foreign and not any(o.ours for o in operators) else None


def config_namespace(kube: Kube) -> str:
    """Where the device plugin and MIG manager read gpuctl's ConfigMaps: the namespace of the GPU
    Operator gpuctl configures (its own release's, or the one it found), gpu-operator without one."""
    return config_namespace_of(configured_operator(kube))


def config_namespace_of(operator: Operator | None) -> str:
    return operator.namespace if operator else NAMESPACE
