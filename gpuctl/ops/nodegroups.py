"""`gpuctl nodegroup`: a node group is whatever makes a GPU model's nodes under one name: a cloud's node group
(the sim's, EKS's, Magnum's), a Karpenter NodePool gpuctl rendered for it, or both. Listing, scaling and deleting
read and change both halves; adding one configures it as `apply` would (its record, sharing or MIG layout,
labels, the GPU stack's settings that every group shapes). The workflows gpuctl.api calls (add_node_group,
scale_node_group, delete_node_group) run here, each reaching the cluster through a ClusterTarget, else through
the kubeconfig the provider gives for it."""

from __future__ import annotations

import atexit
import os
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from functools import cache
from pathlib import Path

import yaml

from gpuctl.kube.dra import dra_mode
from gpuctl.kube.kube import Kube
from gpuctl.kube.lock import cluster_lock
from gpuctl.kube.objects import remove_config_map_key
from gpuctl.model.change import Change
from gpuctl.model.cloud_options import CloudOptions
from gpuctl.model.spec import GroupPlan, PlatformSpec, all_taints
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.target import ClusterTarget
from gpuctl.ops.group_records import (
    GROUPS_CONFIGMAP,
    forget_dra_group,
    read_recorded_groups,
    read_recorded_stack,
    record_size,
    with_recorded,
)
from gpuctl.ops.platform.capacity import wait_capacity
from gpuctl.ops.platform.dra_groups import move_group
from gpuctl.ops.platform.mig import apply_mig_layout
from gpuctl.ops.platform.nodes import configure_nodes
from gpuctl.ops.platform.results import Reporter, StepResult, run_step
from gpuctl.ops.platform.run import Run
from gpuctl.ops.platform.steps import cluster_steps, read_cluster
from gpuctl.ops.tenancy.tolerations import any_tenant, cluster_groups, converge_tolerations, in_place
from gpuctl.ops.validation_record import forget_validated
from gpuctl.providers.base import NodeGroupInfo, Provider
from gpuctl.stack.existing import config_namespace
from gpuctl.stack.helm import HelmTarget
from gpuctl.stack.karpenter import Pool, read_pools, remove_pool, set_pool_limit
from gpuctl.util.errors import GpuctlError, UsageError
from gpuctl.util.output import info
from gpuctl.util.words import plural

Client = Callable[[], Kube]
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


def recorded_stack(client: Kube, plan: GroupPlan, unstated: frozenset[str]) -> StackSpec | None:
    """The cluster's GPU stack as gpuctl set it up, checked before anything is written: None where gpuctl has
    not (a group can then be added, but not given sharing, a MIG layout or labels by gpuctl)."""
    stack = read_recorded_stack(client)
    if stack is None:
        if wants := cluster_side(plan, unstated):
            flag, what = wants[0]
            raise UsageError(flag, f"the cluster has no GPU stack gpuctl set up, to give node group "
                             f"{plan.spec.name!r} {what}", "set it up first: gpuctl cluster create (or apply -f)")
    return stack


def resolved(client: Kube, plan: GroupPlan, unstated: frozenset[str], stack: StackSpec,
             cloud: str, cluster: str, options: CloudOptions) -> PlatformSpec:
    """The one-group spec of `nodegroup add`: the cluster's recorded stack, with what the command left unsaid
    of an existing group as recorded (so the cloud registers its nodes with the group's own taints)."""
    spec = PlatformSpec(cluster, cloud, (plan,), replace(stack, taints=all_taints((plan,)),
                                                          shares_gpus=bool(plan.sharing.config_key)),
                        validate=False, options=options, unstated=unstated | {"migStrategy"})
    return with_recorded(spec, read_recorded_groups(client), stack.mig_strategy)


def configure_group(provider: Provider, spec: PlatformSpec, client: Kube, helm: HelmTarget,
                    report: Reporter) -> list[StepResult]:
    """The cluster-side steps of `apply` for the spec's one node group, once its nodes exist: its nodes' labels,
    taints and sharing, the GPU configs and its record, the GPU stack's settings where this group changes them
    (tolerations, sharing, MIG strategy), its MIG layout, its capacity, the tenants' tolerations. Under the
    cluster's apply lock where anything is to be written."""
    cluster = read_cluster(spec, provider, client, helm)
    run = Run()
    steps = cluster_steps(provider, cluster, run)
    results = []
    with ExitStack() as held:
        if any(s.observe().action is not Change.NO_CHANGE for s in steps if not s.check):
            held.enter_context(cluster_lock(client, spec.name, LOCK_TIMEOUT_S))
            forget_validated(client, cluster.stack_plan.namespace)  # the platform changed: validate again
        for step in steps:
            results.append(run_step(step.name, step.act, report))
            run.note(results[-1].outcome)
    return results


# -- a node group's recorded configuration, its record, the tenants' tolerations -----------------------------


def configure_recorded_group(client: Kube, selector: str, name: str) -> Change:
    """Bring the nodes of node group `name` (a scaled one's new nodes) to its recorded configuration: taints,
    labels, sharing, and its MIG layout applied, and wait until they advertise it. NO_CHANGE where nothing is
    recorded for the group."""
    plan = read_recorded_groups(client).get(name)
    if plan is None:
        return Change.NO_CHANGE
    change = configure_nodes(client, selector, plan.sharing, plan.spec.taints, plan.labels)
    if plan.mig is not None and apply_mig_layout(client, selector, plan.mig) is not Change.NO_CHANGE:
        change = Change.UPDATED
    stack = read_recorded_stack(client)
    by_dra = dra_mode(client) if stack is None else stack.by_dra(name)
    if stack is not None and not stack.dra and name in stack.dra_groups:  # its new nodes to DRA, as apply moves
        if move_group(client, selector, name, True) is not Change.NO_CHANGE:
            change = Change.UPDATED
    wait_capacity(client, selector, [], by_dra)  # done means advertised, as after apply
    return change


def forget_recorded_group(client: Kube, name: str) -> Change:
    """The group's record, and its mark among the recorded stack's DRA groups."""
    forget_dra_group(client, name)
    return remove_config_map_key(client, config_namespace(client), GROUPS_CONFIGMAP, name)


def refresh_tolerations(client: Kube, added: GroupPlan | None = None) -> Change:
    """After a node group came (`added`, whose nodes may not have joined yet) or went: the tenants' GPU
    tolerations follow, where gpuctl put them."""
    if not in_place(client):
        return Change.NO_CHANGE
    groups = cluster_groups(client)
    if added is not None and added.spec.name not in {g.spec.name for g in groups}:
        groups += (added,)
    return converge_tolerations(client, groups, any_tenant(client))


# -- the workflows of `gpuctl nodegroup add|scale|delete` (gpuctl.api's) ---------------------------------------


def cluster_client(provider: Provider, cluster: str, target: ClusterTarget) -> Kube:
    """The cluster through the target's kubeconfig and context (else the provider's context name); where that
    file holds no such context, through the kubeconfig the provider gives for the cluster."""
    try:
        return Kube.connect(target.kubeconfig, target.context or provider.context_name(cluster))
    except GpuctlError:
        return Kube.connect(config_dict=provider.kubeconfig(cluster))


def helm_target(provider: Provider, cluster: str, target: ClusterTarget) -> HelmTarget:
    """Helm's way to the cluster, as cluster_client's: the target's kubeconfig and context (else the provider's
    context name); where that file has no such context, the provider's kubeconfig in a private file removed
    when gpuctl exits."""
    name = target.context or provider.context_name(cluster)
    try:
        Kube.connect(target.kubeconfig, name)
        return HelmTarget(target.kubeconfig, name)
    except GpuctlError:
        doc = provider.kubeconfig(cluster)
    handle, path = tempfile.mkstemp(prefix="gpuctl-kubeconfig-", suffix=".yaml")  # mode 0600
    atexit.register(lambda: Path(path).unlink(missing_ok=True))
    with os.fdopen(handle, "w") as out:
        yaml.safe_dump(doc, out)
    return HelmTarget(Path(path), doc["current-context"])


def refresh_group_tolerations(client: Kube, group: str, added: GroupPlan | None = None) -> None:
    """The tenants' GPU tolerations after node group `group` came (`added`) or went; a warning where that
    failed."""
    try:
        refresh_tolerations(client, added)
    except GpuctlError as e:  # the node group is done either way
        info(f"warning: the tenants' GPU tolerations were not updated for node group {group!r} ({e}); "
             "rerun the command once the cluster answers")


def add_node_group(provider: Provider, cloud: str, cluster: str, plan: GroupPlan, target: ClusterTarget,
                   unstated: frozenset[str], report: Reporter, options: CloudOptions) -> Change:
    """Make or converge the node group, then configure it as `apply` would where gpuctl set up the cluster's GPU
    stack (configure_group); on a cluster gpuctl cannot read yet, the cloud's node group alone (with a
    warning) unless the command asks what only the cluster holds (cluster_side)."""
    try:
        client = cluster_client(provider, cluster, target)
    except GpuctlError as exc:  # a cluster not readable yet (no CA): the cloud's node group, unless asked more
        if cluster_side(plan, unstated):
            raise
        info(f"warning: cluster {cluster!r} was not read ({exc.message}); node group {plan.spec.name!r} is made "
             "in the cloud only: rerun 'gpuctl nodegroup add' once the cluster answers, to configure it")
        return provider.ensure_node_group(cluster, plan.spec)
    stack = recorded_stack(client, plan, unstated)  # refused before any write where it cannot be configured
    if stack is None:  # no GPU stack of gpuctl's: the cloud's node group, and the tenants' tolerations
        change = provider.ensure_node_group(cluster, plan.spec)
        refresh_group_tolerations(client, plan.spec.name, plan)
        return change
    platform = resolved(client, plan, unstated, stack, cloud, cluster, options)
    change = provider.ensure_node_group(cluster, platform.groups[0].spec)
    steps = configure_group(provider, platform, client, helm_target(provider, cluster, target), report)
    configured = any(s.outcome not in (Change.NO_CHANGE, Change.PASSED) for s in steps)
    return Change.UPDATED if change is Change.NO_CHANGE and configured else change


def scale_node_group(provider: Provider, cluster: str, name: str, nodes: int | None, min_nodes: int | None,
                     max_nodes: int | None, target: ClusterTarget) -> Change:
    """scale_group, then the group's recorded configuration given to its nodes (new nodes join without the
    sharing or MIG layout gpuctl set on their siblings)."""
    client = cache(lambda: cluster_client(provider, cluster, target))  # made once, where needed
    change = scale_group(provider, cluster, name, nodes, min_nodes, max_nodes, client)
    if nodes is not None and provider.get_node_group(cluster, name) is not None:  # its own nodes, not Karpenter's
        record_size(client(), name, nodes)  # what `doctor` holds the group's nodes against
    configured = configure_recorded_group(client(), provider.node_selector(name), name)
    return Change.UPDATED if change is Change.NO_CHANGE and configured is not Change.NO_CHANGE else change


def delete_node_group(provider: Provider, cluster: str, name: str, target: ClusterTarget) -> Change:
    """delete_group, then the group's record on the cluster (its taints and sharing no longer shape the GPU
    stack's settings) and the tenants' tolerations; the cluster's half a warning where it does not answer."""
    client = cache(lambda: cluster_client(provider, cluster, target))  # made once, where needed
    change = delete_group(provider, cluster, name, client)
    try:
        forget_recorded_group(client(), name)
    except GpuctlError as e:  # the group is gone either way; a record left behind only widens tolerations
        info(f"warning: node group {name!r} deleted, but its record on the cluster was not removed ({e}); "
             f"rerun 'gpuctl nodegroup delete' once the cluster answers")
        return change
    refresh_group_tolerations(client(), name)
    return change
