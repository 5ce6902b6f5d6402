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
from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.kube.client import get_or_none
from gpuctl.kube.errors import KubeNotFound, requesting
from gpuctl.kube.objects import MANAGED, apply
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.mig import advertised_resources, config_name
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.model.spec import GroupPlan, PlatformSpec
from gpuctl.model.taints import Taint
from gpuctl.util.errors import ClusterError, WaitTimeout
from gpuctl.util.output import info
from gpuctl.util.templating import render_template

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

KARPENTER = "karpenter.sh"
PLURALS = {"NodePool": "nodepools", "NodeOverlay": "nodeoverlays", "EC2NodeClass": "ec2nodeclasses",
           "KWOKNodeClass": "kwoknodeclasses"}
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


def nodepool_step(client: ApiClient, objects: Callable[[], list[dict[str, Any]]], note: str = "") -> Step:
    """The step that applies `objects` (the node class, then pool_objects): plan observes, apply ensures, saying
    `note` first where the objects hold a NodeOverlay."""
    def act() -> Change:
        wanted = objects()
        if note and any(o["kind"] == "NodeOverlay" for o in wanted):
            info(f"  {note}")
        return ensure_objects(client, wanted)

    return Step("apply-karpenter-nodepool", lambda: observe_objects(client, objects()), act)


def is_subset(want: Any, have: Any) -> bool:
    """Whether `have` holds everything in `want` (the server may add defaults and metadata)."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(k in have and is_subset(v, have[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(want) == len(have) and all(map(is_subset, want, have))
    return want == have


def _target(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    group, version = obj["apiVersion"].split("/")
    return group, version, PLURALS[obj["kind"]], obj["metadata"]["name"]


def _with_current(api: Any, objects: list[dict[str, Any]]) -> list[tuple[dict[str, Any], tuple[str, ...], Any]]:
    """Each object with its API target and the cluster's copy of it (None where it is missing)."""
    found: list[tuple[dict[str, Any], tuple[str, ...], Any]] = []
    for obj in objects:
        target = _target(obj)
        with requesting(f"reading {obj['kind']} {target[-1]}"):
            found.append((obj, target, get_or_none(api.get_cluster_custom_object, *target)))
    return found


def _outcome(created: list[bool], total: int) -> Change:
    """CREATED where every object was missing, UPDATED where some differed, else NO_CHANGE."""
    if not created:
        return Change.NO_CHANGE
    return Change.CREATED if len(created) == total and all(created) else Change.UPDATED


def observe_objects(client: ApiClient, objects: list[dict[str, Any]]) -> Observed:
    """What ensure_objects would do, without its write."""
    from kubernetes.client import CustomObjectsApi

    pending = [(obj, current is None) for obj, _, current in _with_current(CustomObjectsApi(client), objects)
               if current is None or not is_subset(obj, current)]
    pending.sort(key=lambda p: not p[1])  # the missing ones first
    return Observed(_outcome([missing for _, missing in pending], len(objects)),
                    ", ".join(f"{obj['kind']} {obj['metadata']['name']}" for obj, _ in pending))


def ensure_objects(client: ApiClient, objects: list[dict[str, Any]]) -> Change:
    """Server-side apply each cluster-scoped Karpenter object that is missing or differs."""
    from kubernetes.client import CustomObjectsApi

    api = CustomObjectsApi(client)
    created = []
    for obj, target, current in _with_current(api, objects):
        if current is not None and is_subset(obj, current):
            continue
        kind = obj["kind"]
        try:
            with requesting(f"applying {kind} {target[-1]}"):
                apply(api.patch_cluster_custom_object, *target, obj)
        except KubeNotFound:  # the resource type itself is unknown
            if kind == "NodeOverlay":  # the pools work without it; Karpenter then sizes by physical GPUs
                info(f"  the cluster's Karpenter has no NodeOverlay resource ({target[0]}/{target[1]}): "
                     f"{target[-1]} not applied, so Karpenter launches a node per physical GPU requested; "
                     "install a Karpenter release that serves it to size shared nodes by what they advertise")
                continue
            raise ClusterError(f"the cluster has no {kind} resource ({target[0]}/{target[1]}): Karpenter v1 is "
                               "not installed", "install Karpenter (https://karpenter.sh) or drop --karpenter"
                               ) from None
        created.append(current is None)
    return _outcome(created, len(objects))


def remove_capacity(client: ApiClient, timeout: float) -> int:
    """Delete gpuctl's NodePools and NodeOverlays and wait until Karpenter has terminated the NodeClaims (and
    so the nodes and instances) the pools launched: what must go before a cluster does, while Karpenter still
    runs, since each carries Karpenter's termination finalizer. Returns how many NodeClaims there were; 0
    where Karpenter is not installed."""
    from kubernetes.client import CustomObjectsApi

    api = CustomObjectsApi(client)
    selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
    pools: list[str] = []
    for kind, version in (("NodeOverlay", "v1alpha1"), ("NodePool", "v1")):
        with requesting(f"listing gpuctl's {kind}s"):
            found = get_or_none(api.list_cluster_custom_object, KARPENTER, version, PLURALS[kind],
                                label_selector=selector)
        for item in (found or {}).get("items", []):
            name = item["metadata"]["name"]
            if kind == "NodePool":
                pools.append(name)
            with requesting(f"deleting {kind} {name}"):
                get_or_none(api.delete_cluster_custom_object, KARPENTER, version, PLURALS[kind], name)
    return wait_for_claims_gone(api, pools, timeout) if pools else 0


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


def _pool_of(item: dict[str, Any], claims: list[dict[str, Any]], nodes: list[Any]) -> Pool | None:
    """A Pool from a NodePool gpuctl rendered (its nodes carry the group's labels); None for any other."""
    labels = (((item.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    group = labels.get(L.NODEGROUP)
    name = item["metadata"]["name"]
    if not group or name != nodepool_name(group):
        return None
    limit = str(((item.get("spec") or {}).get("limits") or {}).get("nodes", "0"))
    mine = lambda labels: (labels or {}).get(L.KARPENTER_NODEPOOL) == name  # noqa: E731
    ready = sum(1 for n in nodes if mine(n.metadata.labels)
                and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []))
    return Pool(group, labels.get(L.GPU_MODEL, "?"), int(labels.get(L.GPUS_PER_NODE) or 0),
                int(limit) if limit.isdigit() else 0, sum(1 for c in claims if mine(c["metadata"].get("labels"))),
                ready)


def read_pools(client: ApiClient) -> dict[str, Pool]:
    """gpuctl's NodePools by node group, with their NodeClaims and nodes; {} where Karpenter is not installed."""
    from kubernetes.client import CoreV1Api, CustomObjectsApi

    api = CustomObjectsApi(client)
    selector = ",".join(f"{k}={v}" for k, v in MANAGED.items())
    with requesting("listing gpuctl's NodePools"):
        found = get_or_none(api.list_cluster_custom_object, KARPENTER, "v1", PLURALS["NodePool"],
                            label_selector=selector)
    items = (found or {}).get("items", [])
    if not items:
        return {}
    with requesting("listing Karpenter's NodeClaims"):
        claims = (get_or_none(api.list_cluster_custom_object, KARPENTER, "v1", "nodeclaims",
                              label_selector=L.KARPENTER_NODEPOOL) or {}).get("items", [])
    with requesting("listing the nodes Karpenter launched"):
        nodes = CoreV1Api(client).list_node(label_selector=L.KARPENTER_NODEPOOL).items
    pools = (_pool_of(item, claims, nodes) for item in items)
    return {p.group: p for p in pools if p is not None}


def set_pool_limit(client: ApiClient, group: str, max_nodes: int) -> Change:
    """Limit node group `group`'s NodePool to `max_nodes` nodes (and their GPUs, as its nodes advertise them:
    the ratio its limits hold, or its NodeOverlay's capacity). Nodes launched beyond a lowered limit stay
    until Karpenter consolidates them: a limit only stops new launches."""
    from kubernetes.client import CustomObjectsApi

    from gpuctl.kube.objects import MERGE_PATCH

    api = CustomObjectsApi(client)
    name = nodepool_name(group)
    with requesting(f"reading NodePool {name}"):
        pool = get_or_none(api.get_cluster_custom_object, KARPENTER, "v1", PLURALS["NodePool"], name)
    if pool is None:
        raise ClusterError(f"NodePool {name} of node group {group!r} is gone", "rerun 'gpuctl nodegroup list'")
    limits = dict((pool.get("spec") or {}).get("limits") or {})
    wanted: dict[str, Any] = {"nodes": max_nodes}
    if L.GPU_RESOURCE in limits:  # none with MIG: a MIG node's whole GPUs are 0
        wanted[L.GPU_RESOURCE] = max_nodes * _advertised_gpus(api, pool)
    if all(str(limits.get(k)) == str(v) for k, v in wanted.items()):
        return Change.NO_CHANGE
    with requesting(f"setting the limits of NodePool {name}"):
        api.patch_cluster_custom_object(KARPENTER, "v1", PLURALS["NodePool"], name, {"spec": {"limits": wanted}},
                                        field_manager=L.MANAGER, _content_type=MERGE_PATCH)
    return Change.UPDATED


def _advertised_gpus(api: Any, pool: dict[str, Any]) -> int:
    """nvidia.com/gpu one node of the NodePool advertises: its NodeOverlay's capacity where it has one
    (a shared GPU counts as its slices), else its GPUs per node."""
    name = pool["metadata"]["name"]
    with requesting(f"reading NodeOverlay {name}"):
        overlay = get_or_none(api.get_cluster_custom_object, KARPENTER, "v1alpha1", PLURALS["NodeOverlay"], name)
    capacity = ((overlay or {}).get("spec") or {}).get("capacity") or {}
    if str(capacity.get(L.GPU_RESOURCE, "")).isdigit():
        return int(capacity[L.GPU_RESOURCE])
    labels = ((pool["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
    return int(labels.get(L.GPUS_PER_NODE) or 0)


def remove_pool(client: ApiClient, group: str, timeout: float) -> int:
    """Delete node group `group`'s NodeOverlay and NodePool and wait until Karpenter has terminated the
    NodeClaims it launched; how many there were."""
    from kubernetes.client import CustomObjectsApi

    api = CustomObjectsApi(client)
    name = nodepool_name(group)
    for kind, version in (("NodeOverlay", "v1alpha1"), ("NodePool", "v1")):
        with requesting(f"deleting {kind} {name}"):
            get_or_none(api.delete_cluster_custom_object, KARPENTER, version, PLURALS[kind], name)
    return wait_for_claims_gone(api, [name], timeout)


def wait_for_claims_gone(api: Any, pools: list[str], timeout: float) -> int:
    """Until no NodeClaim of `pools` is left (Karpenter drains and terminates each); how many there were."""
    claims_of = f"{L.KARPENTER_NODEPOOL} in ({','.join(pools)})"
    deadline = time.monotonic() + timeout
    first: int | None = None
    while True:
        with requesting("listing Karpenter's NodeClaims"):
            found = get_or_none(api.list_cluster_custom_object, KARPENTER, "v1", "nodeclaims",
                                label_selector=claims_of)
        left = sorted(c["metadata"]["name"] for c in (found or {}).get("items", []))
        first = len(left) if first is None else first
        if not left:
            return first
        if time.monotonic() > deadline:
            raise WaitTimeout(f"Karpenter has not terminated NodeClaims {', '.join(left)} after {timeout:.0f}s",
                              "check Karpenter's log; rerun the delete once they are gone")
        time.sleep(0.5)
