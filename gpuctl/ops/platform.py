"""`gpuctl apply -f`: act on every step of ops.platform_steps, in order (`gpuctl plan` observes the same
list). Each step observes first and acts only on a difference, so a second run reports no change."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuctl.kube.client import core
from gpuctl.model.change import Change
from gpuctl.model.naming import check_duration, check_text
from gpuctl.model.spec import GroupPlan, PlatformSpec
from gpuctl.ops.converge import configure_nodes, read_recorded_groups
from gpuctl.ops.smoke import Check
from gpuctl.ops.steps import Reporter, StepResult, run_step
from gpuctl.ops.unfinished import forget_unfinished, record_step
from gpuctl.providers import get_provider
from gpuctl.util.errors import Interrupted

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from gpuctl.model.change import Step
    from gpuctl.ops.platform_steps import Cluster

LOCK_TIMEOUT_S = 300.0


@dataclass
class PlatformResult:
    steps: list[StepResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    kubeconfig: Path | None = None


def apply_platform(spec: PlatformSpec, kubeconfig: Path | None, report: Reporter,
                   lock_timeout: float = LOCK_TIMEOUT_S, context: str | None = None) -> PlatformResult:
    """Converge the cluster to `spec`. `context`: the name of the context write-kubeconfig merges into
    `kubeconfig` (else the default file), and so the one the cluster is then reached through (the global
    --context of `create` and `apply`); None: the provider's name.

    From ensure-cluster until every step is done the cluster is recorded as unfinished (ops.unfinished:
    `cluster list` says `incomplete`); Ctrl-C raises Interrupted (exit 130) naming the step it stopped in."""
    # The lock, kubeconfig and Helm machinery load here: `render` and `--export-spec` never need them.
    from gpuctl.kube.client import api_client
    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.kube.lock import clear_dead_holder, cluster_lock
    from gpuctl.ops.platform_steps import Run, platform_steps, reach
    from gpuctl.ops.validation_record import forget_validated, record_validated, spec_digest
    from gpuctl.stack.helm import HelmTarget
    from gpuctl.util.output import info

    check_duration(lock_timeout, "--lock-timeout")
    if context is not None:
        check_text(context, "--context", maximum=253)
    check_kubeconfig(kubeconfig)
    provider = get_provider(spec.cloud, spec.options)
    result = PlatformResult()
    for group in spec.groups:  # every input checked before anything is touched
        provider.check_node_group(group.spec)
    provider.check_credentials()  # exit 3 with the fix

    def reach_written(spec: PlatformSpec) -> Cluster:
        """The cluster through the kubeconfig write-kubeconfig wrote; what apply refuses is refused there,
        before any write to the cluster."""
        client = api_client(run.written, run.written_context)
        cluster = reach(spec, provider, client, HelmTarget(run.written, run.written_context))
        cleared = clear_dead_holder(client)  # converged or not: no later apply waits out a killed one's lock
        if cleared:
            info(f"  cleared the apply lock of {cleared}: that gpuctl is no longer running")
        return cluster

    def begin(steps: list[Step]) -> None:
        """Another apply may be writing: lock, unless there is nothing to write (a re-apply stays write-free)."""
        cluster = run.cluster
        assert cluster is not None
        if run.changed or any(s.observe().action is not Change.NO_CHANGE for s in steps if not s.check):
            held.enter_context(cluster_lock(cluster.client, spec.name, lock_timeout))
            forget_validated(core(cluster.client), cluster.stack_plan.namespace)

    run = Run(reach_written, begin, kubeconfig=kubeconfig, context=context, checks=result.checks)
    where = "before ensure-cluster"  # what the run is doing, for the line Ctrl-C prints

    def report_done(done: StepResult) -> None:
        nonlocal where
        where = f"after step {done.name}"  # its line may be half-printed when Ctrl-C comes: it is done
        report(done)

    try:
        with ExitStack() as held:
            for step in platform_steps(spec, provider, run):
                where = f"in step {step.name}"
                if result.steps:  # ensure-cluster done: the cloud's (the sim's) own record says what comes before
                    record_step(spec.cloud, spec.name, step.name)
                done = run_step(step.name, step.act, report_done)
                result.steps.append(done)
                run.note(done.outcome)
            result.kubeconfig = run.written
            if run.cluster is not None and any(s.name.startswith("validate/") and s.outcome is Change.PASSED
                                               for s in result.steps):  # (a failed validation raised)
                record_validated(core(run.cluster.client), run.cluster.stack_plan.namespace,
                                 spec_digest(run.cluster.spec))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted {where}; cluster {spec.name!r} is incomplete",
                          "re-run the same command to resume (the steps already done find nothing to do)") from None
    forget_unfinished(spec.cloud, spec.name)
    return result


def configure_recorded_group(client: ApiClient, selector: str, name: str) -> Change:
    """Bring the nodes of node group `name` (a scaled one's new nodes) to its recorded configuration: taints,
    labels, sharing, and its MIG layout applied, and wait until they advertise it. NO_CHANGE where nothing is
    recorded for the group."""
    plan = read_recorded_groups(client).get(name)
    if plan is None:
        return Change.NO_CHANGE
    from gpuctl.kube.dra import dra_mode
    from gpuctl.ops.capacity import wait_capacity
    from gpuctl.ops.platform_steps import apply_mig_layout

    v1 = core(client)
    change = configure_nodes(v1, selector, plan.sharing, plan.spec.taints, plan.labels)
    if plan.mig is not None and apply_mig_layout(v1, selector, plan.mig) is not Change.NO_CHANGE:
        change = Change.UPDATED
    wait_capacity(client, selector, [], dra_mode(client))  # done means advertised, as after apply
    return change


def forget_recorded_group(client: ApiClient, name: str) -> Change:
    from gpuctl.kube.objects import remove_config_map_key
    from gpuctl.ops.group_records import GROUPS_CONFIGMAP
    from gpuctl.stack.existing import config_namespace

    return remove_config_map_key(core(client), config_namespace(client), GROUPS_CONFIGMAP, name)


def refresh_tolerations(client: ApiClient, added: GroupPlan | None = None) -> Change:
    """After a node group came (`added`, whose nodes may not have joined yet) or went: the tenants' GPU
    tolerations follow, where gpuctl put them."""
    from gpuctl.ops.tenancy.tolerations import any_tenant, cluster_groups, converge_tolerations, in_place

    if not in_place(client):
        return Change.NO_CHANGE
    groups = cluster_groups(client)
    if added is not None and added.spec.name not in {g.spec.name for g in groups}:
        groups += (added,)
    return converge_tolerations(client, groups, any_tenant(client))
