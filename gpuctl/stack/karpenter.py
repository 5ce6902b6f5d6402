"""Karpenter v1 GPU capacity, whichever cloud launches it: a NodePool per node group, and where the group
shares its GPUs a NodeOverlay saying what its nodes will advertise. The node class (EC2NodeClass on EKS,
KWOKNodeClass on the sim) is the one thing that differs: one renderer, two classes.

Rendered from nodepools/ (strict Jinja, every value through tojson), then applied with server-side apply
only where the cluster's objects differ: a converged cluster gets no write.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from gpuctl.kube.errors import KubeNotFound
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.kube.objects import MANAGED
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.mig import advertised_resources, config_name
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.model.spec import GroupPlan, PlatformSpec
from gpuctl.model.taints import Taint
from gpuctl.util.errors import ClusterError, WaitTimeout
from gpuctl.util.output import info
from gpuctl.util.templating import render_template

KARPENTER = "karpenter.sh"
NODEPOOL_API = f"{KARPENTER}/v1"  # NodePool, NodeClaim
OVERLAY_API = f"{KARPENTER}/v1alpha1"  # NodeOverlay
CAPACITY_TYPES = ("on-demand", "spot")
CONSOLIDATE_AFTER = "10m"  # an empty GPU node is expensive, but not worth churning for a short gap
EXPIRE_AFTER = "720h"  # Karpenter's default: nodes are replaced (and re-imaged) monthly
# An overlay's weight: the first overlay (by weight) to set a resource wins, two of equal weight that set one
# are a Conflict (pkg/apis/v1alpha1/nodeoverlay.go OrderByWeight; nodeoverlay/controller.go). gpuctl's match
# one NodePool each, so they never meet; a weight above the default 0 wins over a user's unweighted one.
OVERLAY_WEIGHT = 10


@dataclass(frozen=True)
class NodeClass:
    """What a NodePool's nodeClassRef names: the cloud's node class kind."""

    group: str
    kind: str
    name: str = "gpuctl-gpu"


def nodepool_name(group: str) -> str:
    return f"gpuctl-{group}"


def advertised(plan: GroupPlan, mig_strategy: str) -> dict[str, int]:
    """The extended resources each node of the group advertises once the device plugin serves it (0 whole GPUs
    on a node whose GPUs are all MIG-partitioned: the instance type's count must not stand)."""
    gpus = plan.spec.gpus_per_node
    if plan.mig is not None:
        return advertised_resources(plan.mig, gpus, mig_strategy)
    return {L.GPU_RESOURCE: gpus * plan.sharing.replicas}


def render_nodepool(plan: GroupPlan, max_nodes: int, group_label: str, node_class: NodeClass,
                    mig_strategy: str, consolidate_after: str = CONSOLIDATE_AFTER,
                    startup_taints: tuple[Taint, ...] = ()) -> dict[str, Any]:
    """The NodePool for the node group's GPU, limited to `max_nodes` nodes (and their GPUs, counted as the nodes
    advertise them). The nodes it launches join as the group's: its `group_label` (what status and validate
    select on), taints and labels, and its device-plugin or MIG config label, so the plugin serves the group's
    sharing as soon as a node registers."""
    group = plan.spec
    node_labels = {**plan.labels, group_label: group.name, L.NODEGROUP: group.name, L.GPU_MODEL: group.gpu.name,
                   L.GPUS_PER_NODE: str(group.gpus_per_node)}
    if plan.sharing.config_key:
        node_labels[CONFIG_LABEL] = plan.sharing.config_key
    if plan.mig is not None:
        node_labels[L.MIG_CONFIG] = config_name(plan.mig)
    # `nodes` is the limit that holds whatever a node advertises (Karpenter >= v1.14 enforces it when it
    # provisions: pkg/controllers/provisioning/scheduling/scheduler.go addToNewNodeClaim); the GPU limit is in
    # the nodes' own currency, so that an overlaid time-sliced node (4 GPUs on 1) counts as it advertises.
    limits: dict[str, int] = {"nodes": max_nodes}
    if plan.mig is None:
        limits[L.GPU_RESOURCE] = max_nodes * advertised(plan, mig_strategy)[L.GPU_RESOURCE]
    return yaml.safe_load(render_template(
        "gpu-nodepool.yaml.j2", directory="nodepools", resource_name=nodepool_name(group.name),
        managed_labels=MANAGED, node_labels=node_labels, node_class=node_class,
        gpu_name=group.gpu.karpenter_name, gpu_memory_mib=group.gpu.karpenter_memory_mib,
        gpus_per_node=group.gpus_per_node, capacity_types=list(CAPACITY_TYPES),
        taints=[t.as_dict() for t in group.taints], startup_taints=[t.as_dict() for t in startup_taints],
        expire_after=EXPIRE_AFTER, limits=limits, consolidate_after=consolidate_after))


def render_nodeoverlay(plan: GroupPlan, mig_strategy: str) -> dict[str, Any] | None:
    """The NodeOverlay (karpenter.sh/v1alpha1) that tells Karpenter what a node of a sharing group advertises:
    GPUs x replicas (time-slicing, MPS), or the MIG layout's devices. Without it Karpenter sizes nodes by
    physical GPUs and launches one node per one-slice pod (kubernetes-sigs/karpenter #729). None where the
    nodes advertise what the instance type says. Its capacity replaces the instance type's value of the same
    resource (pkg/cloudprovider/types.go ApplyCapacityOverlay: lo.Assign), for this NodePool's types only."""
    if plan.mig is None and plan.sharing.replicas == 1:
        return None
    name = nodepool_name(plan.spec.name)
    return {
        "apiVersion": f"{KARPENTER}/v1alpha1", "kind": "NodeOverlay",
        "metadata": {"name": name, "labels": dict(MANAGED)},
        "spec": {"requirements": [{"key": L.KARPENTER_NODEPOOL, "operator": "In", "values": [name]}],
                 "capacity": {k: str(v) for k, v in advertised(plan, mig_strategy).items()},
                 "weight": OVERLAY_WEIGHT},
    }


def pool_objects(spec: PlatformSpec, group_label: str, node_class: NodeClass,
                 consolidate_after: str = CONSOLIDATE_AFTER, startup_taints: tuple[Taint, ...] = ()
                 ) -> list[dict[str, Any]]:
    """The NodePool of each node group of the run, each followed by its NodeOverlay where it has one."""
    objects: list[dict[str, Any]] = []
    strategy = spec.stack.mig_strategy
    for plan in spec.groups:
        objects.append(render_nodepool(plan, plan.spec.bounds()[1], group_label, node_class, strategy,
                                       consolidate_after, startup_taints))
        if (overlay := render_nodeoverlay(plan, strategy)) is not None:
            objects.append(overlay)
    return objects


# Karpenter reads the gate from --feature-gates or FEATURE_GATES (pkg/operator/options/options.go), off by default.
OVERLAY_GATE_NOTE = ("a NodeOverlay sizes shared nodes by what they advertise only where Karpenter runs with its "
                     "alpha NodeOverlay feature gate on (FEATURE_GATES=NodeOverlay=true); without it Karpenter "
                     "launches a node per physical GPU requested")


def nodepool_step(kube: Kube, objects: Callable[[], list[dict[str, Any]]], note: str = "") -> Step:
    """The step that applies `objects` (the node class, then pool_objects): plan observes, apply ensures, saying
    `note` first where the objects hold a NodeOverlay."""
    def act() -> Change:
        wanted = objects()
        if note and any(o["kind"] == "NodeOverlay" for o in wanted):
            info(f"  {note}")
        return ensure_objects(kube, wanted)

    return Step("apply-karpenter-nodepool", lambda: observe_objects(kube, objects()), act)


def is_subset(want: Any, have: Any) -> bool:
    """Whether `have` holds everything in `want` (the server may add defaults and metadata)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and is_subset(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(is_subset, want, have))
    return want == have


def _with_current(kube: Kube, objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], KubeObject | None]]:
    """Each object with the cluster's copy of it (None where it, or its kind, is missing)."""
    return [(obj, kube.get_or_none(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])) for obj in objects]


def _outcome(created: list[bool], total: int) -> Change:
    """CREATED where every object was missing, UPDATED where some differed, else NO_CHANGE."""
    if not created:
        return Change.NO_CHANGE
    return Change.CREATED if len(created) == total and all(created) else Change.UPDATED


def observe_objects(kube: Kube, objects: list[dict[str, Any]]) -> Observed:
    """What ensure_objects would do, without its write."""
    pending = [(obj, current is None) for obj, current in _with_current(kube, objects)
               if current is None or not is_subset(obj, current)]
    pending.sort(key=lambda p: not p[1])  # the missing ones first
    return Observed(_outcome([missing for _, missing in pending], len(objects)),
                    ", ".join(f"{obj['kind']} {obj['metadata']['name']}" for obj, _ in pending))


def ensure_objects(kube: Kube, objects: list[dict[str, Any]]) -> Change:
    """Server-side apply each cluster-scoped Karpenter object that is missing or differs."""
    created = []
    for obj, current in _with_current(kube, objects):
        if current is not None and is_subset(obj, current):
            continue
        kind, name, api = obj["kind"], obj["metadata"]["name"], obj["apiVersion"]
        try:
            kube.apply(obj)
        except KubeNotFound:  # the resource type itself is unknown
            if kind == "NodeOverlay":  # the pools work without it; Karpenter then sizes by physical GPUs
                info(f"  the cluster's Karpenter has no NodeOverlay resource ({api}): "
                     f"{name} not applied, so Karpenter launches a node per physical GPU requested; "
                     "install a Karpenter release that serves it to size shared nodes by what they advertise")
                continue
            raise ClusterError(f"the cluster has no {kind} resource ({api}): Karpenter v1 is "
                               "not installed", "install Karpenter (https://karpenter.sh) or drop --karpenter"
                               ) from None
        created.append(current is None)
    return _outcome(created, len(objects))


def _list_or_none(kube: Kube, api_version: str, kind: str, labels: str, what: str) -> list[KubeObject]:
    """The objects; none where Karpenter (the kind) is not installed."""
    try:
        return kube.list(api_version, kind, labels=labels, what=what)
    except KubeNotFound:
        return []


def remove_capacity(kube: Kube, timeout: float) -> int:
    """Delete gpuctl's NodePools and NodeOverlays and wait until Karpenter has terminated the NodeClaims (and
    so the nodes and instances) the pools launched: what must go before a cluster does, while Karpenter still
    runs, since each carries Karpenter's termination finalizer. Returns how many NodeClaims there were; 0
    where Karpenter is not installed."""
    selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
    pools: list[str] = []
    for kind, api in (("NodeOverlay", OVERLAY_API), ("NodePool", NODEPOOL_API)):
        for item in _list_or_none(kube, api, kind, selector, f"listing gpuctl's {kind}s"):
            if kind == "NodePool":
                pools.append(item.name)
            kube.delete(api, kind, item.name)
    return wait_for_claims_gone(kube, pools, timeout) if pools else 0


# -- a NodePool as a node group: what `nodegroup list|scale|delete` read and change -------------------------


@dataclass(frozen=True)
class Pool:
    """gpuctl's NodePool of node group `group`: its GPU, its limit on the nodes it launches, and those nodes."""

    group: str
    gpu: str
    gpus_per_node: int
    max_nodes: int  # spec.limits.nodes: the most nodes Karpenter may launch for it
    launched: int  # its NodeClaims (launched instances, joined or not)
    ready: int  # its nodes that are Ready


def _pool_of(item: KubeObject, claims: list[KubeObject], nodes: list[KubeObject]) -> Pool | None:
    """A Pool from a NodePool gpuctl rendered (its nodes carry the group's labels); None for any other."""
    labels = item.at("spec", "template", "metadata", "labels", default={})
    group = labels.get(L.NODEGROUP)
    name = item.name
    if not group or name != nodepool_name(group):
        return None
    limit = str(item.at("spec", "limits", "nodes", default="0"))
    ready = sum(1 for n in nodes if n.labels.get(L.KARPENTER_NODEPOOL) == name
                and (n.condition("Ready") or {}).get("status") == "True")
    return Pool(group, labels.get(L.GPU_MODEL, "?"), int(labels.get(L.GPUS_PER_NODE) or 0),
                int(limit) if limit.isdigit() else 0,
                sum(1 for c in claims if c.labels.get(L.KARPENTER_NODEPOOL) == name), ready)


def read_pools(kube: Kube) -> dict[str, Pool]:
    """gpuctl's NodePools by node group, with their NodeClaims and nodes; {} where Karpenter is not installed."""
    selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
    items = _list_or_none(kube, NODEPOOL_API, "NodePool", selector, "listing gpuctl's NodePools")
    if not items:
        return {}
    claims = _list_or_none(kube, NODEPOOL_API, "NodeClaim", L.KARPENTER_NODEPOOL, "listing Karpenter's NodeClaims")
    nodes = kube.list("v1", "Node", labels=L.KARPENTER_NODEPOOL, what="listing the nodes Karpenter launched")
    pools = (_pool_of(item, claims, nodes) for item in items)
    return {p.group: p for p in pools if p is not None}


def set_pool_limit(kube: Kube, group: str, max_nodes: int) -> Change:
    """Limit node group `group`'s NodePool to `max_nodes` nodes (and their GPUs, as its nodes advertise them:
    the ratio its limits hold, or its NodeOverlay's capacity). Nodes launched beyond a lowered limit stay
    until Karpenter consolidates them: a limit only stops new launches."""
    name = nodepool_name(group)
    pool = kube.get_or_none(NODEPOOL_API, "NodePool", name)
    if pool is None:
        raise ClusterError(f"NodePool {name} of node group {group!r} is gone", "rerun 'gpuctl nodegroup list'")
    limits = dict(pool.at("spec", "limits", default={}))
    wanted: dict[str, Any] = {"nodes": max_nodes}
    if L.GPU_RESOURCE in limits:  # none with MIG: a MIG node's whole GPUs are 0
        wanted[L.GPU_RESOURCE] = max_nodes * _advertised_gpus(kube, pool)
    if all(str(limits.get(k)) == str(v) for k, v in wanted.items()):
        return Change.NO_CHANGE
    kube.patch(NODEPOOL_API, "NodePool", name, {"spec": {"limits": wanted}})
    return Change.UPDATED


def _advertised_gpus(kube: Kube, pool: KubeObject) -> int:
    """nvidia.com/gpu one node of the NodePool advertises: its NodeOverlay's capacity where it has one
    (a shared GPU counts as its slices), else its GPUs per node."""
    overlay = kube.get_or_none(OVERLAY_API, "NodeOverlay", pool.name)
    capacity = (overlay or KubeObject()).at("spec", "capacity", default={})
    if str(capacity.get(L.GPU_RESOURCE, "")).isdigit():
        return int(capacity[L.GPU_RESOURCE])
    labels = pool.at("spec", "template", "metadata", "labels", default={})
    return int(labels.get(L.GPUS_PER_NODE) or 0)


def remove_pool(kube: Kube, group: str, timeout: float) -> int:
    """Delete node group `group`'s NodeOverlay and NodePool and wait until Karpenter has terminated the
    NodeClaims it launched; how many there were."""
    name = nodepool_name(group)
    for kind, api in (("NodeOverlay", OVERLAY_API), ("NodePool", NODEPOOL_API)):
        kube.delete(api, kind, name)  # (False: gone already, or Karpenter serves no such kind)
    return wait_for_claims_gone(kube, [name], timeout)


def wait_for_claims_gone(kube: Kube, pools: list[str], timeout: float) -> int:
    """Until no NodeClaim of `pools` is left (Karpenter drains and terminates each); how many there were."""
    claims_of = f"{L.KARPENTER_NODEPOOL} in ({','.join(pools)})"
    deadline = time.monotonic() + timeout
    first: int | None = None
    while True:
        found = _list_or_none(kube, NODEPOOL_API, "NodeClaim", claims_of, "listing Karpenter's NodeClaims")
        left = sorted(c.name for c in found)
        first = len(left) if first is None else first
        if not left:
            return first
        if time.monotonic() > deadline:
            raise WaitTimeout(f"Karpenter has not terminated NodeClaims {', '.join(left)} after {timeout:.0f}s",
                              "check Karpenter's log; rerun the delete once they are gone")
        time.sleep(0.5)
