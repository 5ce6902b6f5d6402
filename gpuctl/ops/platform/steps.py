"""The one list of steps of `apply -f`, which `plan` observes and `apply` acts on (eksctl's task tree with
its plan mode): node groups -> kubeconfig -> GPU config -> taints, labels and sharing -> NFD + GPU Operator
-> device-plugin restart when its config changed -> MIG layouts -> capacity -> tenants -> smoke test.

The list comes in two parts, and the flow (ops.platform.apply, ops.platform.plan) reads the cluster between
them: cloud_steps (the cluster, its node groups, the kubeconfig), then read_cluster (a Cluster value: what the
cluster holds, and what apply refuses), then cluster_steps, built from that value. Each Step pairs a read-only
observe() with an idempotent act() that observes again and writes only a difference, side by side in the
module of its concern, so a second apply reports no change."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.spec import PlatformSpec
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.taints import Taint
from gpuctl.ops.group_records import read_recorded_groups, read_recorded_stack, with_cluster_groups, with_recorded
from gpuctl.ops.platform.capacity import capacity_step
from gpuctl.ops.platform.cloud import cluster_step, node_group_step
from gpuctl.ops.platform.dra_groups import dra_move_steps
from gpuctl.ops.platform.dra_removal import removal_steps
from gpuctl.ops.platform.gpu_config import gpu_config_steps
from gpuctl.ops.platform.gpu_stack import kueue_step, stack_steps
from gpuctl.ops.platform.kubeconfig import kubeconfig_step
from gpuctl.ops.platform.mig import mig_step
from gpuctl.ops.platform.nodes import nodes_step
from gpuctl.ops.platform.run import Cluster, Run
from gpuctl.ops.platform.tenants import queues_step, tenant_step, tolerations_step
from gpuctl.ops.platform.validation import validation_step
from gpuctl.ops.tenancy.queues import planned_shapes
from gpuctl.ops.tenancy.tenants import check_ownership, tenants_off_mode, unqueued_tenants
from gpuctl.ops.tenancy.tolerations import any_tenant
from gpuctl.ops.validation_record import read_validated, spec_digest
from gpuctl.providers.base import Provider
from gpuctl.stack.dra_driver import check_dra_mode, serves_groups_only
from gpuctl.stack.existing import read_stack
from gpuctl.stack.helm import HelmTarget
from gpuctl.stack.owners import StackPlan, check_single_owners

ABSENT = Observed(Change.CREATED, "once the cluster exists")


def cloud_steps(spec: PlatformSpec, provider: Provider, run: Run) -> list[Step]:
    """The steps before the cluster can be read: the cluster, its node groups, the kubeconfig."""
    name = spec.name
    return [cluster_step(provider, name, run), *(node_group_step(provider, name, g.spec, run) for g in spec.groups),
            kubeconfig_step(provider, name, run)]


def selectors(spec: PlatformSpec, provider: Provider) -> dict[str, str]:
    return {g.spec.name: provider.node_selector(g.spec.name) for g in spec.groups}


def read_cluster(spec: PlatformSpec, provider: Provider, client: Kube, helm: HelmTarget) -> Cluster:
    """Read what the cluster-side steps depend on, and refuse (exit 2) before any write what apply refuses,
    for plan and apply alike: a tenant on another's namespace, a GPU stack gpuctl cannot configure, a DRA
    mode the cluster does not serve."""
    recorded, recorded_stack = read_recorded_groups(client), read_recorded_stack(client)
    if spec.unstated:  # a command line's: what it left unsaid of a recorded group stays as recorded
        spec = with_recorded(spec, recorded, recorded_stack.mig_strategy if recorded_stack else None)
    spec = with_cluster_groups(spec, recorded, recorded_stack)
    for index, tenant in enumerate(spec.tenants):
        check_ownership(client, tenant, f"spec.tenants[{index}].adopt", kueue_coming=spec.kueue)
    stack_plan = check_single_owners(read_stack(client, spec.stack.taints), spec.stack)
    dra_owner = check_dra_mode(client, spec.stack)
    groups_only = dra_owner is None and not spec.stack.dra and serves_groups_only(client)
    validated = read_validated(client, stack_plan.namespace) == spec_digest(spec)
    unqueued = tuple(unqueued_tenants(client)) if spec.kueue else ()
    listed = {t.name for t in spec.tenants}
    off_mode = tuple(t for t in tenants_off_mode(client, spec.stack.dra_driver) if t.name not in listed)
    dropped = dropped_taints(recorded_stack, spec.stack) if stack_plan.operator is None else ()
    return Cluster(spec, selectors(spec, provider), stack_plan, dra_owner, validated, any_tenant(client), client,
                   helm, unqueued=unqueued, dra_groups_only=groups_only, off_mode=off_mode, dropped=dropped)


def dropped_taints(recorded: StackSpec | None, stack: StackSpec) -> tuple[Taint, ...]:
    """The GPU taints gpuctl's GPU Operator tolerated as last set up (`recorded`) and does not under `stack`: the
    operator takes them off its DaemonSets a moment after the upgrade, restarting the device plugin's pods."""
    return tuple(t for t in recorded.taints if t not in stack.taints) if recorded is not None else ()


def unreached(spec: PlatformSpec, provider: Provider, absent: Observed = ABSENT) -> Cluster:
    """A cluster not reached (plan before it exists, or where the kubeconfig does not reach it): its steps
    are those of a fresh cluster, each observed as `absent` says, computed from the spec alone."""
    return Cluster(spec, selectors(spec, provider), StackPlan(), absent=absent)


def cluster_steps(provider: Provider, cluster: Cluster, run: Run) -> list[Step]:
    """The steps that run through the kubeconfig, built without a request (their observe and act read). Of a
    cluster not reached, each is listed from the spec alone and observed as cluster.absent says."""
    spec, client = cluster.spec, cluster.client
    namespace, stack = cluster.stack_plan.namespace, spec.stack
    # the configs before any label names them (the nodes', a Karpenter NodePool template's): the device plugin's
    # config-manager exits on a label naming a key its ConfigMap lacks (k8s-device-plugin
    # cmd/config-manager/main.go updateConfigName, "specified config %v does not exist"); keys are only added
    write_config, restart_plugin = gpu_config_steps(client, spec, namespace)
    steps = [write_config, *provider.cluster_steps(spec, client)]
    for group in spec.groups:
        steps.append(nodes_step(client, cluster.selectors[group.spec.name], group, run))
    steps.extend(stack_steps(cluster))
    steps.append(restart_plugin)
    steps.extend(dra_move_steps(cluster))  # one node group at a time, in spec order, before the next
    steps.extend(removal_steps(cluster))  # the driver goes once no group asks for DRA: after the moves
    for group in spec.groups:
        if group.mig is not None:
            steps.append(mig_step(client, cluster.selectors[group.spec.name], group.spec.name, group.mig, run))
    for group in spec.groups:  # checks: they wait and count, and change nothing
        steps.append(capacity_step(client, cluster.selectors[group.spec.name], group.spec.name,
                                   stack.by_dra(group.spec.name), run, cluster.dropped))
    if spec.tenants or cluster.tenant is not None:  # the tenants' GPU tolerations follow the node groups
        steps.append(tolerations_step(client, spec.every_group, cluster.tenant))
    if spec.kueue:  # before the tenants: their queues need Kueue's API
        steps.append(kueue_step(provider, cluster))
        listed = {t.name for t in spec.tenants}  # (their own steps give them their queues)
        steps.extend(queues_step(client, name, stack.dra_driver) for name in cluster.unqueued if name not in listed)
    # what a team's queues come from, once apply has configured the groups (plan says whether they change)
    shapes = partial(planned_shapes, spec.every_group, stack.mig_strategy) if spec.kueue else None
    for index, tenant in enumerate(spec.tenants):
        steps.append(tenant_step(client, tenant, f"spec.tenants[{index}].adopt", stack.dra_driver, shapes))
    for tenant in cluster.off_mode:  # a team of `tenant add`: its quota and claim templates follow the DRA mode
        steps.append(tenant_step(client, tenant, "--adopt", stack.dra_driver, shapes))
    if spec.validate:
        for group in spec.groups:
            steps.append(validation_step(group.spec.name, cluster, run))
    if (absent := cluster.absent) is not None:  # listed from the spec alone, none observed: one rule for all
        checking = Observed(Change.CHECK, absent.detail)
        steps = [replace(s, observe=partial(_said, checking if s.check else absent)) for s in steps]
    return steps


def _said(observed: Observed) -> Observed:
    return observed
