"""The GPU tolerations of tenant namespaces: a MutatingAdmissionPolicy and its binding
(templates/policies/gpu-tolerations.yaml) with which the API server gives a pod that asks for GPUs the
tolerations of the node groups that offer them, so workloads land on the tainted pool as written.
Cluster-scoped and shared by every tenant, like the fence: applied with the first tenant, rewritten when the
node groups or their taints change, deleted with the last tenant.

What a group offers: nvidia.com/gpu (whole, time-sliced or MPS GPUs, and MIG instances under the single
strategy), the resource of every MIG profile its GPU model has (mixed strategy: `gpuctl mig apply` may give
it any of them at any time, and a toleration without capacity behind it schedules nothing), and the devices
of ResourceClaims (DRA mode; the fence takes a claim as a GPU request in every mode, and so does this).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.kube.admission_objects import ensure_objects, observe_objects, read_object, remove_objects
from gpuctl.kube.errors import KubeApiError
from gpuctl.kube.gpu_nodes import gpu_nodes, nodegroup_of
from gpuctl.kube.objects import is_managed
from gpuctl.model import labels as L
from gpuctl.model.catalog import GPUS
from gpuctl.model.change import Change
from gpuctl.model.mig import resource_name
from gpuctl.model.spec import GroupPlan, NodeGroupSpec
from gpuctl.model.taints import TRANSIENT_TAINTS, Taint, node_taint
from gpuctl.model.tenant import TENANT_LABEL
from gpuctl.ops.group_records import read_recorded_groups
from gpuctl.util.errors import WaitTimeout
from gpuctl.util.output import detail, info
from gpuctl.util.resources import data_dir

if TYPE_CHECKING:
    from gpuctl.kube.kube import Kube
    from gpuctl.kube.kube_object import KubeObject

NAME = "gpuctl-gpu-tolerations"  # the policy's and the binding's
POLICY_API = "admissionregistration.k8s.io/v1"
IN_FORCE_TIMEOUT_S = 30.0
_POLL_S = 0.05
PROBE_CLAIM = "gpuctl-toleration-probe"


@dataclass(frozen=True)
class Offer:
    """What one node group offers a pod, and the node labels gpuctl knows its nodes carry."""

    resources: tuple[str, ...]
    labels: dict[str, str]


def offer_of(plan: GroupPlan) -> Offer:
    model = plan.spec.gpu
    profiles = [p.name for p in model.mig.profiles] if model.mig else []
    labels = {L.NODEGROUP: plan.spec.name, L.GPU_MODEL: model.name, L.GPU_PRODUCT: model.product, **plan.labels}
    return Offer((L.GPU_RESOURCE, *(resource_name(p) for p in profiles)), labels)


def entries(groups: Iterable[GroupPlan]) -> list[dict[str, Any]]:
    """One entry per toleration: the toleration and the offers of the groups whose taint it is. A label key
    gpuctl sets on some group's nodes and not on another's is null in the other's offer: a pod selecting it
    is not that group's. (Keys gpuctl sets on no group, a zone's, say, cannot tell groups apart.)"""
    plans = sorted(groups, key=lambda g: g.spec.name)
    offers = {plan.spec.name: offer_of(plan) for plan in plans}
    keys = {k for o in offers.values() for k in o.labels}
    found: dict[Taint, list[Offer]] = {}
    for plan in plans:
        for taint in plan.spec.taints:
            found.setdefault(taint, []).append(offers[plan.spec.name])
    return [{"toleration": {"value": "", **taint.toleration()},
             "offers": [{"resources": list(o.resources), "claims": True,
                         "labels": {**dict.fromkeys(sorted(keys - o.labels.keys())), **o.labels}} for o in found]}
            for taint, found in sorted(found.items())]


def cel_literal(value: Any) -> str:
    """`value` as a CEL literal. The API server's CEL wants literals of one type per list or map
    (cel.HomogeneousAggregateLiterals, k8s.io/apiserver pkg/cel/environment/base.go): every element of a
    mixed aggregate is wrapped in dyn()."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: dyn({cel_literal(v)})" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(f"dyn({cel_literal(v)})" for v in value) + "]"
    return json.dumps(value)


def policy_manifests(groups: Iterable[GroupPlan]) -> list[dict[str, Any]]:
    """The policy, with the groups' tolerations written in, and its binding, labelled as gpuctl's."""
    docs = list(yaml.safe_load_all((data_dir("templates") / "policies" / "gpu-tolerations.yaml").read_text()))
    for doc in docs:
        doc["metadata"]["labels"] = {L.MANAGED_BY: L.MANAGER}
    [variable] = [v for v in docs[0]["spec"]["variables"] if v["name"] == "groups"]
    variable["expression"] = cel_literal(entries(groups))
    return docs


def served(kube: Kube) -> bool:
    """Whether the API server serves MutatingAdmissionPolicy v1 (Kubernetes 1.36 and later)."""
    return kube.serves(POLICY_API, "MutatingAdmissionPolicy")


def by_hand(groups: Iterable[GroupPlan]) -> str:
    """What a team adds to its GPU pods where the API server cannot: the tolerations of every group's taints."""
    taints = sorted({t for g in groups for t in g.spec.taints})
    return ", ".join(json.dumps(t.toleration(), separators=(",", ":")) for t in taints)


def in_place(kube: Kube) -> bool:
    """Whether gpuctl's policy is on the cluster (a tenant has been onboarded)."""
    return is_managed(read_object(kube, "MutatingAdmissionPolicy", NAME))


def observe_tolerations(kube: Kube, groups: Iterable[GroupPlan]) -> Change:
    """What ensure_tolerations would do."""
    return observe_objects(kube, policy_manifests(groups))


def ensure_tolerations(kube: Kube, groups: Iterable[GroupPlan]) -> Change:
    """Apply (server-side, field manager gpuctl) the policy and binding where they differ."""
    return ensure_objects(kube, policy_manifests(groups))


def remove_tolerations(kube: Kube) -> Change:
    """Delete the policy and binding if gpuctl made them (binding first)."""
    return remove_objects(kube, policy_manifests(()))


def probe_pod() -> dict[str, Any]:
    """A pod that asks for GPUs through a ResourceClaim (which need not exist): no quota counts it, so the API
    server's answer to its dry run shows the policy's tolerations whatever the team's quota holds."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "gpuctl-toleration-probe", "labels": {L.MANAGED_BY: L.MANAGER}},
            "spec": {"automountServiceAccountToken": False,
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": PROBE_CLAIM}],
                     "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"claims": [{"name": "gpu"}]}}]}}


def wait_tolerations_in_force(kube: Kube, namespace: str, groups: Iterable[GroupPlan],
                              timeout: float = IN_FORCE_TIMEOUT_S) -> float:
    """Dry-run-create the probe pod in `namespace` until the API server gives it exactly the groups'
    tolerations (besides the ones Kubernetes adds: a removed group's must be gone too); the seconds waited.
    WaitTimeout (exit 7) when the policy is not in force by `timeout`."""
    import time

    def spelled(toleration: dict[str, Any]) -> tuple[str, str, str, str]:
        return (toleration.get("key", ""), toleration.get("operator", "Equal"), toleration.get("value", ""),
                toleration.get("effect", ""))

    wanted = {spelled(t.toleration()) for g in groups for t in g.spec.taints}
    probe = probe_pod()
    probe["metadata"]["namespace"] = namespace
    started = time.monotonic()
    while True:
        try:
            pod = kube.create(probe, dry_run=True)
            got = pod.spec.get("tolerations") or []
            # (the DefaultTolerationSeconds plugin gives every pod not-ready and unreachable tolerations)
            if {spelled(t) for t in got if not t.get("key", "").startswith(L.KUBERNETES_TAINTS)} == wanted:
                return time.monotonic() - started
        except KubeApiError as exc:  # the namespace's default ServiceAccount not made yet
            if not (exc.status in (403, 404) and "serviceaccount" in (exc.body or "").lower()):
                raise
        waited = time.monotonic() - started
        if waited >= timeout:
            raise WaitTimeout(f"the GPU tolerations ({NAME}) are not in force in namespace {namespace} after "
                              f"{timeout:.0f}s: a pod asking for GPUs is created without them",
                              f"check 'kubectl get mutatingadmissionpolicy {NAME} -o yaml' (status) and the "
                              "kube-apiserver's log, then rerun")
        time.sleep(_POLL_S)


def with_unrecorded(kube: Kube, groups: tuple[GroupPlan, ...]) -> tuple[GroupPlan, ...]:
    """`groups` and the node groups whose GPU nodes carry gpuctl's group label without a record (made by
    `nodegroup add`), each with the taints all its nodes carry."""
    known = {g.spec.name for g in groups}
    found: dict[str, list[KubeObject]] = {}
    for node in gpu_nodes(kube):
        name = nodegroup_of(node)
        if name and name not in known and node.labels.get(L.GPU_MODEL) in GPUS:
            found.setdefault(name, []).append(node)
    extra = []
    for name, nodes in sorted(found.items()):
        taints = set.intersection(*({node_taint(t) for t in n.spec.get("taints") or []
                                     if not t["key"].startswith(TRANSIENT_TAINTS)} for n in nodes))
        model = GPUS[nodes[0].labels[L.GPU_MODEL]]
        spec = NodeGroupSpec(name, model, 0, model.default_gpus_per_node, taints=tuple(sorted(taints)))
        extra.append(GroupPlan(spec))
    return groups + tuple(extra)


def cluster_groups(kube: Kube) -> tuple[GroupPlan, ...]:
    """The cluster's node groups: recorded, and made without a record."""
    return with_unrecorded(kube, tuple(read_recorded_groups(kube).values()))


_TOLD: set[str] = set()  # API servers whose teams were told what to add by hand (once per command)


def converge_tolerations(kube: Kube, groups: tuple[GroupPlan, ...], probe: str | None,
                         new_namespace: bool = False) -> Change:
    """Where the API server serves MutatingAdmissionPolicy: apply the policy for `groups` and, when it changed
    or `probe` is a namespace `new_namespace` to it, return once it is in force in namespace `probe` (None: no
    tenant namespace yet). Where it does not: say, once, what teams add to their GPU pods by hand."""
    if not served(kube):
        server = kube.server
        if server not in _TOLD and (hint := by_hand(groups)):
            _TOLD.add(server)
            info("warning: this API server does not serve MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, "
                 f"Kubernetes 1.36): teams add to their GPU pods the tolerations {hint}")
        return Change.NO_CHANGE
    change = ensure_tolerations(kube, groups)
    if probe is not None and (change is not Change.NO_CHANGE or new_namespace):
        waited = wait_tolerations_in_force(kube, probe, groups)
        detail(f"GPU tolerations in force in namespace {probe!r} (waited {waited:.1f}s)")
    return change


def any_tenant(kube: Kube) -> str | None:
    """A tenant namespace of the cluster (not one being deleted), to probe the policy in."""
    namespaces = kube.list("v1", "Namespace", labels=TENANT_LABEL, what="listing tenant namespaces")
    return next((n.name for n in namespaces if not n.deleting), None)
