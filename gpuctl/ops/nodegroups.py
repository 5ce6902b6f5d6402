"""`gpuctl nodegroup`: a node group is whatever makes a GPU model's nodes under one name: a cloud's node group
(the sim's, EKS's, Magnum's), a Karpenter NodePool gpuctl rendered for it, or both. Listing, scaling and deleting
read and change both halves; adding one configures it as `apply` would (its record, sharing or MIG layout,
labels, the GPU stack's settings that every group shapes)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuctl.kube.client import core
from gpuctl.model.change import Change
from gpuctl.model.spec import GroupPlan, PlatformSpec, all_taints
from gpuctl.ops.converge import read_recorded_groups, read_recorded_stack
from gpuctl.ops.group_records import with_recorded
from gpuctl.ops.steps import Reporter, StepResult, run_step
from gpuctl.providers.base import NodeGroupInfo
from gpuctl.stack.karpenter import Pool, read_pools, remove_pool, set_pool_limit
from gpuctl.util.errors import GpuctlError, UsageError
from gpuctl.util.output import info
from gpuctl.util.words import plural

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpuctl.model.cloud_options import CloudOptions
    from gpuctl.model.stack_spec import StackSpec
    from gpuctl.providers.base import Provider
    from gpuctl.stack.helm import HelmTarget

Client = Callable[[], "ApiClient"]
KARPENTER_DELETE_TIMEOUT_S = 600.0  # Karpenter drains a node, then terminates its instance (a minute or two)
LOCK_TIMEOUT_S = 300.0


def with_pool(cluster: str, fixed: NodeGroupInfo | None, pool: Pool | None) -> NodeGroupInfo:
    """One row for a node group: its cloud half, its Karpenter half, or both (nodes and bounds added up)."""
    if pool is None:
        assert fixed is not None
        return fixed
    if fixed is None:
        return NodeGroupInfo(pool.group, cluster, pool.gpu, pool.launched, pool.ready, pool.gpus_per_node,
                             scaling="karpenter", min_nodes=0, max_nodes=pool.max_nodes, launched=pool.launched)
    high = None if fixed.max_nodes is None else fixed.max_nodes + pool.max_nodes
    return replace(fixed, nodes=fixed.nodes + pool.launched, ready_nodes=fixed.ready_nodes + pool.ready,
                   scaling="cloud+karpenter", max_nodes=high, launched=pool.launched)


def pools(provider: Provider, client: Client) -> dict[str, Pool]:
    """gpuctl's Karpenter NodePools by node group; none where the cloud has no Karpenter pools."""
    return read_pools(client()) if provider.capabilities.karpenter else {}


def list_groups(provider: Provider, cluster: str, client: Client) -> list[NodeGroupInfo]:
    """Every node group, Karpenter's included (a cluster that cannot be read for them is said, and skipped)."""
    fixed = {g.name: g for g in provider.list_node_groups(cluster)}
    try:
        found = pools(provider, client)
    except GpuctlError as exc:
        info(f"warning: the Karpenter NodePools of cluster {cluster!r} were not read ({exc.message})")
        found = {}
    return [with_pool(cluster, fixed.get(name), found.get(name)) for name in sorted(fixed.keys() | found.keys())]


def get_group(provider: Provider, cluster: str, name: str, client: Client) -> NodeGroupInfo | None:
    fixed = provider.get_node_group(cluster, name)
    pool = pools(provider, client).get(name)
    return None if fixed is None and pool is None else with_pool(cluster, fixed, pool)


def scale_group(provider: Provider, cluster: str, name: str, nodes: int | None, min_nodes: int | None,
                max_nodes: int | None, client: Client) -> Change:
    """A cloud node group to `nodes` (bounds as given, else widened to hold it); a Karpenter one's NodePool
    limited to `max_nodes` (or `nodes`: Karpenter keeps no count, only a most); both halves of a group with
    both (its NodePool's limit follows --max-nodes)."""
    pool = pools(provider, client).get(name)
    if pool is None:  # the cloud's alone: its own NotFound names the group
        return provider.scale_node_group(cluster, name, _needed(nodes, name), min_nodes, max_nodes)
    fixed = provider.get_node_group(cluster, name)
    if fixed is not None:
        change = provider.scale_node_group(cluster, name, _needed(nodes, name), min_nodes, max_nodes)
        if max_nodes is not None and set_pool_limit(client(), name, max_nodes) is not Change.NO_CHANGE:
            change = Change.UPDATED
        return change
    if min_nodes not in (None, 0):
        raise UsageError("--min-nodes", f"node group {name!r} is Karpenter's: it keeps no minimum, it launches "
                         "nodes for pending pods only", "drop --min-nodes (or pass 0)")
    if nodes is not None and max_nodes is not None and nodes != max_nodes:
        raise UsageError("--nodes", f"on Karpenter's node group {name!r}, --nodes and --max-nodes both set the "
                         "most nodes it may launch", "pass one of them")
    limit = max_nodes if max_nodes is not None else nodes
    if limit is None:
        raise UsageError("--max-nodes", f"no new limit for Karpenter's node group {name!r}",
                         "pass --max-nodes N (the most nodes Karpenter may launch for it)")
    change = set_pool_limit(client(), name, limit)
    info(f"  Karpenter may launch up to {plural(limit, 'node')} for {name!r}; {pool.launched} launched now")
    if pool.launched > limit:
        info(f"  the {pool.launched - limit} above the limit stay until Karpenter consolidates them (once empty)")
    return change


def _needed(nodes: int | None, name: str) -> int:
    if nodes is None:
        raise UsageError("--nodes", f"node group {name!r} has nodes of its own: say how many",
                         "pass --nodes N (0 allowed)")
    return nodes


def delete_group(provider: Provider, cluster: str, name: str, client: Client) -> Change:
    """Karpenter's half first (its NodePool and NodeOverlay, then its NodeClaims, terminated by Karpenter while
    it runs), then the cloud's."""
    try:
        pool = pools(provider, client).get(name)
    except GpuctlError as exc:
        info(f"warning: the Karpenter NodePools of cluster {cluster!r} were not read ({exc.message}); deleting "
             f"the cloud's node group {name!r} only")
        pool = None
    if pool is None:
        return provider.delete_node_group(cluster, name)
    claims = remove_pool(client(), name, KARPENTER_DELETE_TIMEOUT_S)
    info(f"  NodePool and NodeOverlay of {name!r} deleted; Karpenter terminated {plural(claims, 'NodeClaim')}")
    if provider.get_node_group(cluster, name) is not None:
        provider.delete_node_group(cluster, name)
    return Change.DELETED


# -- adding a node group: configured as `apply` would -------------------------------------------------------


def cluster_side(plan: GroupPlan, unstated: frozenset[str]) -> list[tuple[str, str]]:
    """What the command asks of the group that only the cluster can hold (flag, what): sharing, a MIG layout,
    labels."""
    return [(flag, what) for flag, what, given in (
        ("--slices", "sharing", bool(plan.sharing.config_key) and "sharing" not in unstated),
        ("--mig-layout", "a MIG layout", plan.mig is not None and "sharing" not in unstated),
        ("--label", "labels", bool(plan.labels) and "labels" not in unstated)) if given]


def recorded_stack(client: ApiClient, plan: GroupPlan, unstated: frozenset[str]) -> StackSpec | None:
    """The cluster's GPU stack as gpuctl set it up, checked before anything is written: None where gpuctl has
    not (a group can then be added, but not given sharing, a MIG layout or labels by gpuctl)."""
    stack = read_recorded_stack(client)
    if stack is None:
        if wants := cluster_side(plan, unstated):
            flag, what = wants[0]
            raise UsageError(flag, f"the cluster has no GPU stack gpuctl set up, to give node group "
                             f"{plan.spec.name!r} {what}", "set it up first: gpuctl cluster create (or apply -f)")
    return stack


def resolved(client: ApiClient, plan: GroupPlan, unstated: frozenset[str], stack: StackSpec,
             cloud: str, cluster: str, options: CloudOptions) -> PlatformSpec:
    """The one-group spec of `nodegroup add`: the cluster's recorded stack, with what the command left unsaid
    of an existing group as recorded (so the cloud registers its nodes with the group's own taints)."""
    spec = PlatformSpec(cluster, cloud, (plan,), replace(stack, taints=all_taints((plan,)),
                                                          shares_gpus=bool(plan.sharing.config_key)),
                        validate=False, options=options, unstated=unstated | {"migStrategy"})
    return with_recorded(spec, read_recorded_groups(client), stack.mig_strategy)


def configure_group(provider: Provider, spec: PlatformSpec, client: ApiClient, helm: HelmTarget,
                    report: Reporter) -> list[StepResult]:
    """The cluster-side steps of `apply` for the spec's one node group, once its nodes exist: its nodes' labels,
    taints and sharing, the GPU configs and its record, the GPU stack's settings where this group changes them
    (tolerations, sharing, MIG strategy), its MIG layout, its capacity, the tenants' tolerations. Under the
    cluster's apply lock where anything is to be written."""
    from contextlib import ExitStack

    from gpuctl.kube.lock import cluster_lock
    from gpuctl.ops.platform_steps import Run, cluster_steps, reach
    from gpuctl.ops.validation_record import forget_validated

    cluster = reach(spec, provider, client, helm)
    run = Run(lambda _: cluster)
    steps = cluster_steps(provider, cluster, run)
    results = []
    with ExitStack() as held:
        if any(s.observe().action is not Change.NO_CHANGE for s in steps if not s.check):
            held.enter_context(cluster_lock(client, spec.name, LOCK_TIMEOUT_S))
            forget_validated(core(client), cluster.stack_plan.namespace)  # the platform changed: validate again
        for step in steps:
            results.append(run_step(step.name, step.act, report))
            run.note(results[-1].outcome)
    return results
