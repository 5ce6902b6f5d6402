"""`gpuctl apply -f`: act on every step of ops.platform_steps, in order (`gpuctl plan` observes the same
list). Each step observes first and acts only on a difference, so a second run reports no change."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change
from gpuctl.model.naming import check_duration
from gpuctl.model.spec import GroupPlan, PlatformSpec
from gpuctl.model.target import ClusterTarget, check_context
from gpuctl.ops.converge import configure_nodes, read_recorded_groups
from gpuctl.ops.smoke import Check
from gpuctl.ops.steps import Reporter, StepResult, run_step
from gpuctl.ops.unfinished import forget_unfinished, record_step
from gpuctl.providers import get_provider
from gpuctl.util.errors import Interrupted

if TYPE_CHECKING:
    from gpuctl.model.change import Step
    from gpuctl.ops.platform_steps import Cluster

LOCK_TIMEOUT_S = 300.0


@dataclass
class PlatformResult:
    steps: list[StepResult] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    kubeconfig: Path | None = None


def apply_platform(spec: PlatformSpec, target: ClusterTarget, report: Reporter, lock_timeout: float = LOCK_TIMEOUT_S,
                   write_context: str | None = None) -> PlatformResult:
    """Converge the cluster to `spec`. write-kubeconfig merges the cluster's context, named `write_context`
    (else the provider's name), into `target.kubeconfig` (else the default file); the cluster is then read
    through `target.context`, else through the context it wrote.

    On an existing cluster every step that writes, the cloud's node-group changes included, runs under the
    cluster's apply lock (a Lease): the steps run unlocked only while each finds nothing to do; at the first
    that would write, apply takes the lock (waiting for another apply to finish) and runs the steps again from
    the first, so that what it converges to is its spec entirely, never half another's. A converged re-apply
    takes no lock and writes nothing. On a first create the cluster is not there to hold a lock: the cloud's
    own create is the serialisation (one create makes it, the other finds it), and the lock is taken as soon
    as the cluster exists, before its node groups.

    From ensure-cluster until every step is done the cluster is recorded as unfinished (ops.unfinished:
    `cluster list` says `incomplete`); Ctrl-C raises Interrupted (exit 130) naming the step it stopped in."""
    # The lock, kubeconfig and Helm machinery load here: `render` and `--export-spec` never need them.
    from gpuctl.kube.kubeconfig import check_kubeconfig
    from gpuctl.kube.lock import clear_dead_holder, cluster_lock
    from gpuctl.ops.platform_steps import Run, platform_steps, reach
    from gpuctl.ops.validation_record import forget_validated, record_validated, spec_digest
    from gpuctl.stack.helm import HelmTarget
    from gpuctl.util.output import info

    check_duration(lock_timeout, "--lock-timeout")
    if write_context is not None:
        check_context(write_context)
    check_kubeconfig(target.kubeconfig)
    provider = get_provider(spec.cloud, spec.options)
    for group in spec.groups:  # every input checked before anything is touched
        provider.check_node_group(group.spec)
    provider.check_credentials()  # exit 3 with the fix

    def reach_written(spec: PlatformSpec) -> Cluster:
        """The cluster through the target's context, else the one write-kubeconfig wrote; what apply refuses
        is refused there, before any write to the cluster."""
        kubeconfig, context = (target.kubeconfig, target.context) if target.context else (run.written,
                                                                                           run.written_context)
        client = Kube.connect(kubeconfig, context)
        cluster = reach(spec, provider, client, HelmTarget(kubeconfig, context))
        cleared = clear_dead_holder(client)  # converged or not: no later apply waits out a killed one's lock
        if cleared:
            info(f"  cleared the apply lock of {cleared}: that gpuctl is no longer running")
        return cluster

    def begin(steps: list[Step]) -> None:
        """Under the lock, before the first cluster-side write: the smoke test's record of this spec goes (the
        platform changes), unless there is nothing to write after all (another apply wrote this very spec)."""
        cluster = run.cluster
        assert cluster is not None
        if locked and (run.changed or any(s.observe().action is not Change.NO_CHANGE for s in steps if not s.check)):
            forget_validated(cluster.client, cluster.stack_plan.namespace)

    def guarded(step: Step) -> Callable[[], Change]:
        """The step's act, run unlocked only where it finds nothing to write (or where no cluster exists yet to
        hold the lock: ensure-cluster creating it)."""
        def act() -> Change:
            if locked or step.check:
                return step.act()
            observed = step.observe()  # (ensure-cluster's says whether the cluster exists)
            if observed.action is Change.NO_CHANGE or (not run.exists and not created):
                return step.act()
            raise _Unlocked
        return act

    result = PlatformResult()
    where = "before ensure-cluster"  # what the run is doing, for the line Ctrl-C prints
    reported: dict[str, StepResult] = {}  # the unlocked pass's lines: the locked pass says only what differs

    def report_done(done: StepResult) -> None:
        nonlocal where
        where = f"after step {done.name}"  # its line may be half-printed when Ctrl-C comes: it is done
        said = reported.get(done.name)
        if locked and said is not None and done.outcome is Change.NO_CHANGE:
            return  # already said, by the unlocked pass
        if not locked:
            reported[done.name] = done
        report(done)

    locked = created = False
    try:
        with ExitStack() as held:
            while True:
                run = Run(reach_written, begin, kubeconfig=target.kubeconfig, context=write_context,
                          checks=[], changed=created)
                steps: list[StepResult] = []
                try:
                    for step in platform_steps(spec, provider, run):
                        where = f"in step {step.name}"
                        if steps:  # ensure-cluster done: the cloud's (the sim's) own record says what comes before
                            record_step(spec.cloud, spec.name, step.name)
                        done = run_step(step.name, guarded(step), report_done)
                        if step.name == "ensure-cluster" and done.outcome is Change.CREATED:
                            created = True
                        steps.append(done)
                        run.note(done.outcome)
                except _Unlocked:  # the first write: lock, then every step again, under the lock
                    client = Kube.connect(config_dict=provider.kubeconfig(spec.name))
                    cleared = clear_dead_holder(client)
                    if cleared:
                        info(f"  cleared the apply lock of {cleared}: that gpuctl is no longer running")
                    held.enter_context(cluster_lock(client, spec.name, lock_timeout))
                    locked = True
                    continue
                break
            # An unlocked pass's first lines stand where the locked pass found the same (ensure-cluster's created).
            result.steps = [reported[s.name] if s.outcome is Change.NO_CHANGE and s.name in reported else s
                            for s in steps]
            result.checks = run.checks
            result.kubeconfig = run.written
            if run.cluster is not None and any(s.name.startswith("validate/") and s.outcome is Change.PASSED
                                               for s in result.steps):  # (a failed validation raised)
                record_validated(run.cluster.client, run.cluster.stack_plan.namespace,
                                 spec_digest(run.cluster.spec))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted {where}; cluster {spec.name!r} is incomplete",
                          "re-run the same command to resume (the steps already done find nothing to do)") from None
    forget_unfinished(spec.cloud, spec.name)
    return result


class _Unlocked(Exception):
    """A step found something to write on an existing cluster while apply did not hold its lock."""


def configure_recorded_group(client: Kube, selector: str, name: str) -> Change:
    """Bring the nodes of node group `name` (a scaled one's new nodes) to its recorded configuration: taints,
    labels, sharing, and its MIG layout applied, and wait until they advertise it. NO_CHANGE where nothing is
    recorded for the group."""
    plan = read_recorded_groups(client).get(name)
    if plan is None:
        return Change.NO_CHANGE
    from gpuctl.kube.dra import dra_mode
    from gpuctl.ops.capacity import wait_capacity
    from gpuctl.ops.platform_steps import apply_mig_layout

    change = configure_nodes(client, selector, plan.sharing, plan.spec.taints, plan.labels)
    if plan.mig is not None and apply_mig_layout(client, selector, plan.mig) is not Change.NO_CHANGE:
        change = Change.UPDATED
    wait_capacity(client, selector, [], dra_mode(client))  # done means advertised, as after apply
    return change


def forget_recorded_group(client: Kube, name: str) -> Change:
    from gpuctl.kube.objects import remove_config_map_key
    from gpuctl.ops.group_records import GROUPS_CONFIGMAP
    from gpuctl.stack.existing import config_namespace

    return remove_config_map_key(client, config_namespace(client), GROUPS_CONFIGMAP, name)


def refresh_tolerations(client: Kube, added: GroupPlan | None = None) -> Change:
    """After a node group came (`added`, whose nodes may not have joined yet) or went: the tenants' GPU
    tolerations follow, where gpuctl put them."""
    from gpuctl.ops.tenancy.tolerations import any_tenant, cluster_groups, converge_tolerations, in_place

    if not in_place(client):
        return Change.NO_CHANGE
    groups = cluster_groups(client)
    if added is not None and added.spec.name not in {g.spec.name for g in groups}:
        groups += (added,)
    return converge_tolerations(client, groups, any_tenant(client))
