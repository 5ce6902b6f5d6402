"""The GPU stack's steps: NFD, the GPU Operator (gpuctl's release, or another's ClusterPolicy pointed at
gpuctl's configs), the DRA driver and Kueue, each installed or upgraded as a Helm release where gpuctl owns it
and used as it is where another does (a line says whose)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import yaml

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.objects import contains
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.dra import KUEUE_MAX_MAPPINGS, unmapped_profiles
from gpuctl.model.stack_spec import StackSpec
from gpuctl.ops.platform.diffs import diff_text, or_unknown, subset
from gpuctl.ops.platform.run import Cluster
from gpuctl.ops.tenancy.queues import Queues
from gpuctl.providers.base import Provider, RunsKueue
from gpuctl.stack.dra_classes import ensure_mig_classes, observe_mig_classes
from gpuctl.stack.dra_driver import dra_release, install_dra_driver
from gpuctl.stack.existing import CLUSTER_POLICY, Operator
from gpuctl.stack.helm import HelmTarget, Release, ensure_release, plan_release
from gpuctl.stack.kueue import kueue_release, mig_class_profiles
from gpuctl.stack.owners import StackPlan
from gpuctl.stack.releases import nfd_release, operator_release
from gpuctl.stack.values import DEVICE_PLUGIN_CONFIGMAP, cluster_policy_fields
from gpuctl.util.output import info


def stack_steps(cluster: Cluster) -> list[Step]:
    """NFD (another's used as it is, else gpuctl's standalone release where the spec asks for it), the GPU
    Operator (another's ClusterPolicy configured, else gpuctl's release), and with DRA the DRA driver."""
    spec, client, helm, stack_plan = cluster.spec, cluster.client, cluster.helm, cluster.stack_plan
    stack = spec.stack
    steps = []
    if stack_plan.nfd is not None:
        nfd_note = stack_plan.nfd_note()
        steps.append(Step("use-existing-nfd", lambda: Observed(Change.NO_CHANGE, nfd_note),
                          lambda: _noted(nfd_note, lambda: Change.NO_CHANGE)))
    elif stack.nfd == "standalone":
        steps.append(release_step("install-nfd", helm, lambda: nfd_release(stack)))
    if (operator := stack_plan.operator) is not None:
        operator_note = stack_plan.operator_note()
        steps.append(Step("configure-gpu-operator", lambda: observe_cluster_policy(client, stack_plan, stack),
                          lambda: _noted(operator_note, lambda: ensure_cluster_policy(client, operator, stack))))
    else:
        steps.append(release_step("install-gpu-operator", helm, lambda: operator_release(stack)))
    if stack.dra_driver:  # DRA mode, or node groups DRA serves (a group's dra: true)
        owner = cluster.dra_owner
        steps.append(Step("install-dra-driver", lambda: observe_dra_driver(helm, stack, owner),
                          lambda: _noted(f"uses the DRA driver of {owner}" if owner else "",
                                         lambda: install_dra_driver(helm, stack, owner))))
        # an unmodified pod's nvidia.com/mig-<profile>, served by DRA as nvidia.com/gpu is (stack/dra_classes.py)
        models = [g.spec.gpu for g in spec.every_group]  # (Kueue maps the same: mig_class_profiles)
        steps.append(Step("apply-mig-device-classes", lambda: or_unknown(lambda: observe_mig_classes(client, models)),
                          lambda: ensure_mig_classes(client, models)))
    return steps


def kueue_step(provider: Provider, cluster: Cluster) -> Step:
    """install-kueue. Clouds: Kueue's chart as any release; the sim instead runs Kueue's CRDs and controller
    itself (Capabilities.kueue_chart: the spec's check and `render` ask it too), done once its API is served."""
    kube, charts = cluster.client, cluster.spec.stack.charts
    profiles = mig_class_profiles(cluster.spec)
    if unmapped := unmapped_profiles(profiles):
        info(f"warning: Kueue takes at most {KUEUE_MAX_MAPPINGS} DeviceClass mappings: the MIG profiles "
             f"{', '.join(unmapped)} are left out, so Kueue admits no job claiming them by a tenant's template "
             "(asking for nvidia.com/mig-<profile> works)")
    if provider.capabilities.kueue_chart(cluster.spec.kueue):
        return release_step("install-kueue", cluster.helm, lambda: kueue_release(charts, profiles=profiles))

    runs = cast("RunsKueue", provider)

    def observe() -> Observed:
        if not Queues(kube).installed():
            return Observed(Change.CREATED, "Kueue's CRDs and controller, run by the sim")
        if not runs.kueue_maps(cluster.spec.name, profiles):
            mapped = ", ".join(profiles) or "none"
            return Observed(Change.UPDATED, f"Kueue's controller, started again to map MIG profiles: {mapped}")
        return Observed(Change.NO_CHANGE)

    return Step("install-kueue", observe, lambda: runs.ensure_kueue(cluster.spec.name))


def release_step(name: str, helm: HelmTarget, release: Callable[[], Release]) -> Step:
    return Step(name, lambda: observe_release(helm, release()), lambda: ensure_release(helm, release()))


def observe_release(helm: HelmTarget, wanted: Release) -> Observed:
    def observe() -> Observed:
        change, why = plan_release(helm, wanted)
        return Observed(change, why.splitlines()[0] if why else "", why)

    return or_unknown(observe)


def observe_dra_driver(helm: HelmTarget, stack: StackSpec, owner: str | None) -> Observed:
    if owner is not None:
        return Observed(Change.NO_CHANGE, f"uses the DRA driver of {owner}")
    return observe_release(helm, dra_release(stack))


def _noted(note: str, act: Callable[[], Change]) -> Change:
    """`act()`, after a line saying whose component the step uses."""
    if note:
        info(f"  {note}")
    return act()


# -- another's GPU Operator: its ClusterPolicy pointed at gpuctl's configs ------------------------------------


def observe_cluster_policy(kube: Kube, stack_plan: StackPlan, stack: StackSpec) -> Observed:
    assert stack_plan.operator is not None and stack_plan.operator.policy is not None  # see check_single_owners
    name = stack_plan.operator.policy
    current = read_cluster_policy(kube, name)
    wanted = cluster_policy_drift(current, stack)
    note = stack_plan.operator_note()
    if wanted is None:
        return Observed(Change.NO_CHANGE, note)
    diff = diff_text(yaml.safe_dump(subset(current, wanted), sort_keys=True), yaml.safe_dump(wanted, sort_keys=True),
                     f"clusterpolicy/{name}")
    return Observed(Change.UPDATED, note, diff)


def cluster_policy_drift(spec: dict[str, Any], stack: StackSpec) -> dict[str, Any] | None:
    """The fields gpuctl applies to another's ClusterPolicy when `spec` lacks one of them, else None.
    Without sharing gpuctl applies no devicePlugin.config, so server-side apply drops the one it set."""
    wanted = cluster_policy_fields(stack)
    gone = "devicePlugin" not in wanted and \
        ((spec.get("devicePlugin") or {}).get("config") or {}).get("name") == DEVICE_PLUGIN_CONFIGMAP
    return None if contains(spec, wanted) and not gone else wanted


def read_cluster_policy(kube: Kube, name: str) -> dict[str, Any]:
    """The spec of ClusterPolicy `name`."""
    return kube.get("/".join(CLUSTER_POLICY[:2]), "ClusterPolicy", name).spec


def ensure_cluster_policy(kube: Kube, operator: Operator, stack: StackSpec) -> Change:
    """Point another's GPU Operator at gpuctl's configs: server-side apply of only the fields gpuctl
    sets (field manager gpuctl), so the owner's other settings stay as they are."""
    name = operator.policy
    assert name is not None  # check_single_owners refuses an operator without one
    wanted = cluster_policy_drift(read_cluster_policy(kube, name), stack)
    if wanted is None:
        return Change.NO_CHANGE
    body = {"apiVersion": "/".join(CLUSTER_POLICY[:2]), "kind": "ClusterPolicy", "metadata": {"name": name},
            "spec": wanted}
    with requesting(f"configuring ClusterPolicy {name}"):
        kube.apply(body)
    return Change.UPDATED
