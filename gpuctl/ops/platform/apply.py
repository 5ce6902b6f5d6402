"""`gpuctl apply -f`: act on every step of ops.platform.steps, in order (`gpuctl plan` observes the same
list): the cloud's steps, then the cluster read once (steps.read_cluster), then the cluster's steps. Each step
observes first and acts only on a difference, so a second run reports no change."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from gpuctl.kube.kube import Kube
from gpuctl.kube.kubeconfig import check_kubeconfig
from gpuctl.kube.lock import clear_dead_holder, cluster_lock
from gpuctl.model.change import Change, Step
from gpuctl.model.naming import check_duration
from gpuctl.model.spec import PlatformSpec
from gpuctl.model.target import ClusterTarget, check_context
from gpuctl.ops.platform.results import Reporter, StepResult, run_step
from gpuctl.ops.platform.run import Cluster, Run
from gpuctl.ops.platform.steps import cloud_steps, cluster_steps, read_cluster
from gpuctl.ops.smoke import Check
from gpuctl.ops.unfinished import forget_unfinished, record_step
from gpuctl.ops.validation_record import forget_validated, record_validated, spec_digest
from gpuctl.providers import get_provider
from gpuctl.stack.helm import HelmTarget
from gpuctl.util.errors import Interrupted
from gpuctl.util.interrupts import recording_interrupts
from gpuctl.util.output import info

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
    check_duration(lock_timeout, "--lock-timeout")
    if write_context is not None:
        check_context(write_context)
    check_kubeconfig(target.kubeconfig)
    provider = get_provider(spec.cloud, spec.options)
    for group in spec.groups:  # every input checked before anything is touched
        provider.check_node_group(group.spec)
    provider.check_credentials()  # exit 3 with the fix

    def read_written() -> Cluster:
        """The cluster through the target's context, else the one write-kubeconfig wrote; what apply refuses
        is refused there, before any write to the cluster."""
        kubeconfig, context = (target.kubeconfig, target.context) if target.context else (run.written,
                                                                                           run.written_context)
        client = Kube.connect(kubeconfig, context)
        cluster = read_cluster(spec, provider, client, HelmTarget(kubeconfig, context))
        cleared = clear_dead_holder(client)  # converged or not: no later apply waits out a killed one's lock
        if cleared:
            info(f"  cleared the apply lock of {cleared}: that gpuctl is no longer running")
        return cluster

    def begin(cluster: Cluster, steps: list[Step]) -> None:
        """Under the lock, before the first cluster-side write: the smoke test's record of this spec goes (the
        platform changes), unless there is nothing to write after all (another apply wrote this very spec)."""
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

    def act(step: Step, first: bool) -> StepResult:
        nonlocal where, created
        interrupts.check()  # a Ctrl-C that code on the way swallowed still stops the run here
        where = f"in step {step.name}"
        if not first:  # ensure-cluster done: the cloud's (the sim's) own record says what comes before
            record_step(spec.cloud, spec.name, step.name)
        done = run_step(step.name, guarded(step), report_done)
        if step.name == "ensure-cluster" and done.outcome is Change.CREATED:
            created = True
        run.note(done.outcome)
        return done

    try:
        with ExitStack() as held:
            interrupts = held.enter_context(recording_interrupts())
            while True:
                run = Run(kubeconfig=target.kubeconfig, context=write_context, checks=[], changed=created)
                steps: list[StepResult] = []
                try:
                    for step in cloud_steps(spec, provider, run):
                        steps.append(act(step, first=not steps))
                    cluster = read_written()  # the cluster read once, between the cloud's steps and its own
                    on_cluster = cluster_steps(provider, cluster, run)
                    begin(cluster, on_cluster)
                    for step in on_cluster:
                        steps.append(act(step, first=False))
                except _Unlocked:  # the first write: lock, then every step again, under the lock
                    client = Kube.connect(config_dict=provider.kubeconfig(spec.name))
                    cleared = clear_dead_holder(client)
                    if cleared:
                        info(f"  cleared the apply lock of {cleared}: that gpuctl is no longer running")
                    held.enter_context(cluster_lock(client, spec.name, lock_timeout))
                    locked = True
                    continue
                break
            interrupts.check()
            # An unlocked pass's first lines stand where the locked pass found the same (ensure-cluster's created).
            result.steps = [reported[s.name] if s.outcome is Change.NO_CHANGE and s.name in reported else s
                            for s in steps]
            result.checks = run.checks
            result.kubeconfig = run.written
            if any(s.name.startswith("validate/") and s.outcome is Change.PASSED
                   for s in result.steps):  # (a failed validation raised)
                record_validated(cluster.client, cluster.stack_plan.namespace, spec_digest(cluster.spec))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted {where}; cluster {spec.name!r} is incomplete",
                          "re-run the same command to resume (the steps already done find nothing to do)") from None
    forget_unfinished(spec.cloud, spec.name)
    return result


class _Unlocked(Exception):
    """A step found something to write on an existing cluster while apply did not hold its lock."""
