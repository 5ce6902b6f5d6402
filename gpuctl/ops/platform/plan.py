"""`gpuctl plan`: what each step of `apply` would do, with a diff of what changes; writes nothing.

It observes the very steps apply acts on (ops.platform.steps), reading the cloud through the provider
and the cluster through the kubeconfig gpuctl wrote before (never by asking the cloud for new
credentials, which would be a write). Before the cluster exists, or where that kubeconfig does not
reach it, every step is still listed, from the spec alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.kube.kube import Kube
from gpuctl.model.change import Change, Step
from gpuctl.model.spec import PlatformSpec
from gpuctl.model.target import ClusterTarget
from gpuctl.ops.platform.diffs import unknown
from gpuctl.ops.platform.run import Cluster, Run
from gpuctl.ops.platform.steps import cloud_steps, cluster_steps, read_cluster, unreached
from gpuctl.providers import get_provider
from gpuctl.stack.helm import HelmTarget
from gpuctl.util.errors import GpuctlError


@dataclass(frozen=True)
class PlannedStep:
    step: str
    action: Change
    detail: str = ""
    diff: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"step": self.step, "action": self.action.value, "detail": self.detail, "diff": self.diff}


def plan_platform(spec: PlatformSpec, target: ClusterTarget, write_context: str | None = None) -> list[PlannedStep]:
    """Every step `apply -f` would run for `spec`, in its order, each with what it would change. The cluster is
    read as apply reads it: through `target` (its kubeconfig, its context), else, with no context there, through
    the one apply would write (`write_context`, else the provider's name)."""
    provider = get_provider(spec.cloud, spec.options)
    for group in spec.groups:  # refused as apply refuses them, before any call
        provider.check_node_group(group.spec)
    provider.check_credentials()

    def read_existing() -> Cluster:
        if not run.exists:
            return unreached(spec, provider)
        through = target.context or run.context or provider.context_name(spec.name)
        try:
            client = Kube.connect(target.kubeconfig, through)
        except GpuctlError as exc:  # no such context (apply would write it), or one that cannot be loaded
            return unreached(spec, provider, unknown(exc))
        return read_cluster(spec, provider, client, HelmTarget(target.kubeconfig, through))

    run = Run(kubeconfig=target.kubeconfig, context=write_context)
    planned = []

    def observe(step: Step) -> None:
        observed = step.observe()
        run.note(observed.action)
        planned.append(PlannedStep(step.name, observed.action, observed.detail, observed.diff))

    for step in cloud_steps(spec, provider, run):
        observe(step)
    for step in cluster_steps(provider, read_existing(), run):  # the cluster read once, as apply reads it
        observe(step)
    return planned
