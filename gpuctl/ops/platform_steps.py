"""The one list of steps of `apply -f`, which `plan` observes and `apply` acts on (eksctl's task tree with
its plan mode): node groups -> kubeconfig -> taints, labels and sharing -> GPU config -> NFD + GPU Operator
-> device-plugin restart when its config changed -> MIG layouts -> capacity -> tenants -> smoke test.

Each Step pairs a read-only observe() (ops.observe) with an idempotent act() (ops.converge), which observes
again and writes only a difference, so a second apply reports no change."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.mig import MigLayout, config_name
from gpuctl.model.spec import GroupPlan, NodeGroupSpec, PlatformSpec
from gpuctl.model.tenant import Tenant
from gpuctl.ops import observe
from gpuctl.ops.converge import (
    configs_in_use,
    configure_nodes,
    ensure_cluster_policy,
    install_kueue,
    read_recorded_groups,
    restart_device_plugin,
    with_cluster_groups,
    write_gpu_config,
)
from gpuctl.util.output import info

if TYPE_CHECKING:
    from gpuctl.ops.smoke import Check
    from gpuctl.providers.base import Provider
    from gpuctl.stack.helm import HelmTarget, Release
    from gpuctl.stack.owners import StackPlan

ABSENT = Observed(Change.CREATED, "once the cluster exists")


@dataclass(frozen=True)
class Cluster:
    """What the cluster-side steps depend on, read once before the first of them (reach)."""

    spec: PlatformSpec  # with the cluster's other recorded node groups
    selectors: dict[str, str]  # node group -> the label selector of its nodes
    stack_plan: StackPlan
    dra_owner: str | None = None  # another's DRA driver, used as it is
    validated: bool = False  # this spec passed its smoke test here, and nothing was written since
    tenant: str | None = None  # a tenant namespace the cluster has (its GPU tolerations follow the node groups)
    client: Kube = None  # type: ignore[assignment]  # None where unreached: none of its steps then runs
    helm: HelmTarget = None  # type: ignore[assignment]
    absent: Observed | None = None  # not reached (plan only): what each change step says instead
    unqueued: tuple[str, ...] = ()  # with spec.kueue: tenants on the cluster without Kueue queues yet


def _no_begin(steps: list[Step]) -> None:
    """plan: nothing to do before the cluster-side steps."""


@dataclass
class Run:
    """One apply or plan of a spec: how it reaches the cluster, and what its steps tell the later ones."""

    reach: Callable[[PlatformSpec], Cluster]  # called once write-kubeconfig is done (or observed)
    begin: Callable[[list[Step]], None] = _no_begin  # sees every cluster-side step before the first runs
    kubeconfig: Path | None = None  # the file write-kubeconfig merges into (None: the default one)
    context: str | None = None  # the context it writes (plan: would), then reads through (None: the provider's name)
    checks: list[Check] = field(default_factory=list)
    changed: bool = False  # a step so far changed something (apply) or would (plan)
    exists: bool = True  # the cluster exists (set by observing ensure-cluster)
    written: Path | None = None  # where write-kubeconfig wrote, and the context it made current
    written_context: str | None = None
    cluster: Cluster | None = None

    def note(self, change: Change) -> None:
        """A step's outcome (apply) or observed action (plan): whether to smoke-test depends on it."""
        if change not in (Change.NO_CHANGE, Change.PASSED, Change.CHECK):
            self.changed = True


def selectors(spec: PlatformSpec, provider: Provider) -> dict[str, str]:
    return {g.spec.name: provider.node_selector(g.spec.name) for g in spec.groups}


def reach(spec: PlatformSpec, provider: Provider, client: Kube, helm: HelmTarget) -> Cluster:
    """Read what the cluster-side steps depend on, and refuse (exit 2) before any write what apply refuses,
    for plan and apply alike: a tenant on another's namespace, a GPU stack gpuctl cannot configure, a DRA
    mode the cluster does not serve."""
    from gpuctl.ops.tenancy.tenants import check_ownership, unqueued_tenants
    from gpuctl.ops.tenancy.tolerations import any_tenant
    from gpuctl.ops.validation_record import read_validated, spec_digest
    from gpuctl.stack.dra_driver import check_dra_mode
    from gpuctl.stack.existing import read_stack
    from gpuctl.stack.owners import check_single_owners

    recorded = read_recorded_groups(client)
    if spec.unstated:  # a command line's: what it left unsaid of a recorded group stays as recorded
        from gpuctl.ops.converge import read_recorded_stack
        from gpuctl.ops.group_records import with_recorded

        stack = read_recorded_stack(client)
        spec = with_recorded(spec, recorded, stack.mig_strategy if stack else None)
    spec = with_cluster_groups(spec, recorded)
    for index, tenant in enumerate(spec.tenants):
        check_ownership(client, tenant, f"spec.tenants[{index}].adopt", kueue_coming=spec.kueue)
    stack_plan = check_single_owners(read_stack(client), spec.stack)
    dra_owner = check_dra_mode(client, spec.stack)
    validated = read_validated(client, stack_plan.namespace) == spec_digest(spec)
    unqueued = tuple(unqueued_tenants(client)) if spec.kueue else ()
    return Cluster(spec, selectors(spec, provider), stack_plan, dra_owner, validated, any_tenant(client), client,
                   helm, unqueued=unqueued)


def unreached(spec: PlatformSpec, provider: Provider, absent: Observed = ABSENT) -> Cluster:
    """A cluster not reached (plan before it exists, or where the kubeconfig does not reach it): its steps
    are those of a fresh cluster, each observed as `absent` says, computed from the spec alone."""
    from gpuctl.stack.owners import StackPlan

    return Cluster(spec, selectors(spec, provider), StackPlan(), absent=absent)


def platform_steps(spec: PlatformSpec, provider: Provider, run: Run) -> Iterator[Step]:
    """Every step of `apply -f`, in its order: plan observes each, apply acts on each. A generator: which
    steps follow write-kubeconfig depends on what the cluster holds, read (run.reach) only once the steps
    before are done (apply) or observed (plan); run.begin sees them all before the first one runs."""
    name = spec.name

    def observe_cluster() -> Observed:
        run.exists = provider.get_cluster(name) is not None
        return Observed(Change.NO_CHANGE if run.exists else Change.CREATED)

    yield Step("ensure-cluster", observe_cluster, lambda: provider.ensure_cluster(name))
    for group in spec.groups:
        yield _node_group_step(provider, name, group.spec, run)
    yield Step("write-kubeconfig",
               lambda: observe.kubeconfig(run.kubeconfig, run.context or provider.context_name(name)),
               lambda: _write_kubeconfig(provider, name, run))
    cluster = run.cluster = run.reach(spec)
    steps = cluster_steps(provider, cluster, run)
    if (absent := cluster.absent) is not None:  # listed from the spec alone, none observed: one rule for all
        checking = Observed(Change.CHECK, absent.detail)
        steps = [replace(s, observe=partial(_said, checking if s.check else absent)) for s in steps]
    run.begin(steps)
    yield from steps


def cluster_steps(provider: Provider, cluster: Cluster, run: Run) -> list[Step]:
    """The steps that run through the kubeconfig, built without a request (their observe and act read)."""
    from gpuctl.stack.dra_driver import install_dra_driver
    from gpuctl.stack.releases import nfd_release, operator_release

    spec, client, helm, stack_plan = cluster.spec, cluster.client, cluster.helm, cluster.stack_plan
    namespace, stack = stack_plan.namespace, spec.stack
    steps = list(provider.cluster_steps(spec, client))
    for group in spec.groups:
        steps.append(_nodes_step(client, cluster.selectors[group.spec.name], group))
    would: set[str] = set()  # the device-plugin configs write-gpu-config would change (observed)
    did: set[str] = set()  # ... changed (acted)

    def observe_config() -> Observed:
        observed, keys = observe.gpu_config(client, spec, namespace)
        would.clear()
        would.update(keys)
        return observed

    def write_config() -> Change:
        change, keys = write_gpu_config(client, spec, namespace)
        did.update(keys)
        return change

    steps.append(Step("write-gpu-config", observe_config, write_config))
    if stack_plan.nfd is not None:
        nfd_note = stack_plan.nfd_note()
        steps.append(Step("use-existing-nfd", lambda: Observed(Change.NO_CHANGE, nfd_note),
                          lambda: _noted(nfd_note, lambda: Change.NO_CHANGE)))
    elif stack.nfd == "standalone":
        steps.append(_release_step("install-nfd", helm, lambda: nfd_release(stack)))
    if (operator := stack_plan.operator) is not None:
        operator_note = stack_plan.operator_note()
        steps.append(Step("configure-gpu-operator", lambda: observe.cluster_policy(client, stack_plan, stack),
                          lambda: _noted(operator_note, lambda: ensure_cluster_policy(client, operator, stack))))
    else:
        steps.append(_release_step("install-gpu-operator", helm, lambda: operator_release(stack)))
    if stack.dra:
        owner = cluster.dra_owner
        steps.append(Step("install-dra-driver", lambda: observe.dra_driver(helm, stack, owner),
                          lambda: _noted(f"uses the DRA driver of {owner}" if owner else "",
                                         lambda: install_dra_driver(helm, stack, owner))))
    in_use = configs_in_use(spec)
    steps.append(Step("restart-device-plugin", lambda: observe.restart(would & in_use),
                      lambda: restart_device_plugin(client, did & in_use, namespace)))
    for group in spec.groups:
        if group.mig is not None:
            steps.append(_mig_step(client, cluster.selectors[group.spec.name], group.spec.name, group.mig))
    for group in spec.groups:  # checks: they wait and count, and change nothing
        steps.append(_capacity_step(client, cluster.selectors[group.spec.name], group.spec.name, stack.dra, run))
    if spec.tenants or cluster.tenant is not None:  # the tenants' GPU tolerations follow the node groups
        steps.append(_tolerations_step(client, spec.every_group, cluster.tenant))
    if spec.kueue:  # before the tenants: their queues need Kueue's API
        steps.append(Step("install-kueue", lambda: observe.kueue(provider, client, helm, stack.charts),
                          lambda: install_kueue(provider, spec.name, helm, stack.charts)))
        listed = {t.name for t in spec.tenants}  # (their own steps give them their queues)
        steps.extend(_queues_step(client, name, stack.dra) for name in cluster.unqueued if name not in listed)
    for index, tenant in enumerate(spec.tenants):
        steps.append(_tenant_step(client, tenant, f"spec.tenants[{index}].adopt", stack.dra))
    if spec.validate:
        for group in spec.groups:
            steps.append(Step(f"validate/{group.spec.name}",
                              partial(_observe_validation, group.spec.name, cluster, run),
                              partial(_validate, group.spec.name, cluster, run), check=True))
    return steps


def _said(observed: Observed) -> Observed:
    return observed


def _node_group_step(provider: Provider, cluster: str, group: NodeGroupSpec, run: Run) -> Step:
    name = f"ensure-nodegroup/{group.name}"
    if group.nodes == 0:  # only Karpenter launches its nodes (spec passes: 0 needs it): no cloud node group
        launched = Observed(Change.NO_CHANGE, f"0 fixed nodes: Karpenter launches up to {group.bounds()[1]}")
        return Step(name, lambda: launched, lambda: Change.NO_CHANGE)
    return Step(name, lambda: observe.node_group(provider, cluster, group, run.exists),
                lambda: provider.ensure_node_group(cluster, group))


def _nodes_step(client: Kube, selector: str, group: GroupPlan) -> Step:
    return Step(f"configure-nodes/{group.spec.name}", lambda: observe.nodes(client, selector, group),
                lambda: configure_nodes(client, selector, group.sharing, group.spec.taints, group.labels))


def _mig_step(client: Kube, selector: str, group: str, layout: MigLayout) -> Step:
    return Step(f"apply-mig/{group}", lambda: observe.mig(client, selector, layout),
                lambda: apply_mig_layout(client, selector, layout))


def _capacity_step(client: Kube, selector: str, group: str, dra: bool, run: Run) -> Step:
    from gpuctl.ops.capacity import wait_capacity

    return Step(f"wait-capacity/{group}", lambda: observe.capacity(client, selector, dra, run.changed),
                lambda: wait_capacity(client, selector, run.checks, dra, restart_raced=True), check=True)


def _tolerations_step(client: Kube, groups: tuple[GroupPlan, ...], tenant: str | None) -> Step:
    from gpuctl.ops.tenancy.tolerations import converge_tolerations, observe_tolerations, served, with_unrecorded

    def look() -> Observed:
        if not served(client):
            return Observed(Change.NO_CHANGE, "MutatingAdmissionPolicy not served: teams add tolerations by hand")
        return Observed(observe_tolerations(client, with_unrecorded(client, groups)))

    return Step("ensure-gpu-tolerations", look,
                lambda: converge_tolerations(client, with_unrecorded(client, groups), tenant))


def _tenant_step(client: Kube, tenant: Tenant, adopt_field: str, dra: bool) -> Step:
    from gpuctl.ops.tenancy.tenants import ensure_tenant

    return Step(f"ensure-tenant/{tenant.name}", lambda: observe.tenant(client, tenant, dra),
                lambda: ensure_tenant(client, tenant, adopt_field=adopt_field))


def _queues_step(client: Kube, name: str, dra: bool) -> Step:
    """A tenant added before Kueue was installed: its queues, with the quota it holds now."""
    from gpuctl.ops.tenancy.tenants import ensure_tenant_queues, observe_tenant_queues

    return Step(f"ensure-queues/{name}",
                lambda: Observed(observe_tenant_queues(client, name, dra), "the ClusterQueue and LocalQueues of "
                                 f"tenant {name}, added before Kueue, with its current quota"),
                lambda: ensure_tenant_queues(client, name, dra))


def _noted(note: str, act: Callable[[], Change]) -> Change:
    """`act()`, after a line saying whose component the step uses."""
    if note:
        info(f"  {note}")
    return act()


def _release_step(name: str, helm: HelmTarget, release: Callable[[], Release]) -> Step:
    def act() -> Change:
        from gpuctl.stack.helm import ensure_release

        return ensure_release(helm, release())

    return Step(name, lambda: observe.release(helm, release()), act)


def _write_kubeconfig(provider: Provider, name: str, run: Run) -> Change:
    """Merge the cluster's context (named run.context, else the provider's name) into run.kubeconfig."""
    from gpuctl.kube.kubeconfig import named, write_kubeconfig

    entry = named(provider.kubeconfig(name), run.context)
    run.written, changed = write_kubeconfig(entry, run.kubeconfig)
    run.written_context = entry["current-context"]
    return Change.UPDATED if changed else Change.NO_CHANGE


def apply_mig_layout(kube: Kube, selector: str, layout: MigLayout) -> Change:
    """Point the nodes at the layout's mig-parted config and wait until the MIG manager applied it."""
    from gpuctl.kube.nodes import list_nodes_json
    from gpuctl.ops.mig_apply import label_mig_config, wait_for_mig_state

    nodes = list_nodes_json(kube, selector)
    name = config_name(layout)
    change = label_mig_config(kube, nodes, name)
    wait_for_mig_state(kube, [n["metadata"]["name"] for n in nodes], name, None)  # until progress stalls, or --timeout
    return change


def _must_validate(cluster: Cluster, run: Run) -> bool:
    """The smoke test proves a change, or a platform not validated since its last one (a killed run); a
    converged, validated cluster is left alone (`gpuctl validate` re-checks it)."""
    return run.changed or not cluster.validated


def _observe_validation(group: str, cluster: Cluster, run: Run) -> Observed:
    if not _must_validate(cluster, run):
        return Observed(Change.NO_CHANGE, "validated already: skipped")
    how = " through a ResourceClaim" if cluster.spec.stack.dra else ""
    return Observed(Change.CHECK, f"runs the CUDA smoke test{how} on node group {group}")


def _validate(group: str, cluster: Cluster, run: Run) -> Change:
    from gpuctl.ops.validate import validate_cluster
    from gpuctl.util.errors import ValidationFailed

    if not _must_validate(cluster, run):
        return Change.NO_CHANGE
    new = validate_cluster(cluster.client, group, cluster.spec.smoke_image)
    run.checks.extend(c for c in new if c not in run.checks)  # wait-capacity's check is listed once
    failed = [c for c in new if not c.ok]
    if failed:
        raise ValidationFailed(f"validation failed: {failed[0].name}: {failed[0].detail}")
    return Change.PASSED
