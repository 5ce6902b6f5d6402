"""The read-only half of each step of `apply`: what it would change, with a diff, for `gpuctl plan`.

Each function reads the cloud, the kubeconfig or the cluster and writes nothing (ops.platform_steps pairs
each with its action in ops.converge)."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gpuctl.kube.errors import requesting
from gpuctl.kube.kube import Kube
from gpuctl.kube.nodes import list_nodes_json, node_patch
from gpuctl.kube.objects import read_config_map_data
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed
from gpuctl.model.mig import MigLayout, config_name
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.model.spec import GroupPlan, NodeGroupSpec, PlatformSpec
from gpuctl.model.stack_spec import StackSpec
from gpuctl.model.tenant import Tenant
from gpuctl.ops.converge import cluster_policy_drift, read_cluster_policy, wanted_gpu_config
from gpuctl.stack.values import DEVICE_PLUGIN_CONFIGMAP
from gpuctl.util.errors import GpuctlError

if TYPE_CHECKING:
    from gpuctl.providers.base import Provider
    from gpuctl.stack.helm import HelmTarget, Release
    from gpuctl.stack.owners import StackPlan


def diff_text(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"{name} (cluster)", f"{name} (spec)",
                                 lineterm="", n=1)
    return "\n".join(lines)


def subset(current: Any, wanted: Any) -> Any:
    """The part of `current` that `wanted` speaks about, for a readable diff."""
    if isinstance(wanted, dict) and isinstance(current, dict):
        return {k: subset(current.get(k), v) for k, v in wanted.items()}
    return current


def unknown(error: GpuctlError) -> Observed:
    """What a step would do where reading what it depends on failed: it may well change something."""
    return Observed(Change.UPDATED, f"unknown: {error.message}")


def or_unknown(observe: Callable[[], Observed]) -> Observed:
    """`observe()`, or `unknown` where it fails (a release Helm cannot read, a cluster not reached)."""
    try:
        return observe()
    except GpuctlError as exc:
        return unknown(exc)


def node_group(provider: Provider, cluster: str, spec: NodeGroupSpec, exists: bool) -> Observed:
    current = provider.get_node_group(cluster, spec.name) if exists else None
    if current is None:
        return Observed(Change.CREATED, f"{spec.nodes} x {spec.gpu.name}")
    if current.nodes != spec.nodes:
        return Observed(Change.UPDATED, f"nodes {current.nodes} -> {spec.nodes}")
    return Observed(Change.NO_CHANGE)


def kubeconfig(path: Path | None, context: str) -> Observed:
    """Whether write_kubeconfig would add the context or make it current. Credentials that the cloud would
    hand out anew are not compared: asking for them can be a write."""
    from gpuctl.kube.kubeconfig import default_path, read_kubeconfig

    target = path or default_path()
    doc = read_kubeconfig(target) if target.exists() else {}
    if not any(c.get("name") == context for c in doc.get("contexts") or []):
        return Observed(Change.UPDATED, f"adds context {context} to {target}")
    if doc.get("current-context") != context:
        return Observed(Change.UPDATED, f"makes {context} the current context of {target}")
    return Observed(Change.NO_CHANGE)


def nodes(kube: Kube, selector: str, group: GroupPlan) -> Observed:
    found = list_nodes_json(kube, selector)
    labels = {CONFIG_LABEL: group.sharing.config_key, **group.labels}
    patches = {n["metadata"]["name"]: p for n in found if (p := node_patch(n, labels, group.spec.taints))}
    if not patches:
        return Observed(Change.NO_CHANGE)
    diff = "\n".join(f"{name}: {yaml.safe_dump(p, default_flow_style=True).strip()}"
                     for name, p in sorted(patches.items())[:5])
    return Observed(Change.UPDATED, f"{len(patches)} of {len(found)} nodes", diff)


def gpu_config(kube: Kube, spec: PlatformSpec, namespace: str) -> tuple[Observed, set[str]]:
    """What write_gpu_config would change, and the device-plugin keys whose existing content it would
    change (as write_gpu_config returns them)."""
    diffs, changed = [], set()
    for name, data in wanted_gpu_config(kube, spec, namespace).items():
        current = read_config_map_data(kube, namespace, name) or {}
        for key, value in data.items():
            if current.get(key) != value:
                diffs.append(diff_text(current.get(key) or "", value, f"{name}/{key}"))
                if name == DEVICE_PLUGIN_CONFIGMAP and key in current:
                    changed.add(key)
    return Observed(Change.UPDATED if diffs else Change.NO_CHANGE, "", "\n".join(diffs)), changed


def restart(changed_in_use: set[str]) -> Observed:
    if not changed_in_use:
        return Observed(Change.NO_CHANGE)
    return Observed(Change.UPDATED, f"restarts the device-plugin pods: write-gpu-config changes "
                                    f"{', '.join(sorted(changed_in_use))}, in use")


def release(helm: HelmTarget, wanted: Release) -> Observed:
    from gpuctl.stack.helm import plan_release

    def observe() -> Observed:
        change, why = plan_release(helm, wanted)
        return Observed(change, why.splitlines()[0] if why else "", why)

    return or_unknown(observe)


def dra_driver(helm: HelmTarget, stack: StackSpec, owner: str | None) -> Observed:
    from gpuctl.stack.dra_driver import dra_release

    if owner is not None:
        return Observed(Change.NO_CHANGE, f"uses the DRA driver of {owner}")
    return release(helm, dra_release(stack))


def kueue(provider: Provider, kube: Kube, helm: HelmTarget, charts: str) -> Observed:
    """Clouds: Kueue's chart as any release; the sim runs Kueue itself once its API is served."""
    from gpuctl.ops.tenancy.queues import Queues
    from gpuctl.stack.kueue import kueue_release

    if provider.capabilities.runs_kueue:
        served = Queues(kube).installed()
        return Observed(Change.NO_CHANGE if served else Change.CREATED,
                        "" if served else "Kueue's CRDs and controller, run by the sim")
    return release(helm, kueue_release(charts))


def cluster_policy(kube: Kube, stack_plan: StackPlan, stack: StackSpec) -> Observed:
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


def mig(kube: Kube, selector: str, layout: MigLayout) -> Observed:
    name = config_name(layout)
    moving = [n["metadata"]["name"] for n in list_nodes_json(kube, selector)
              if (n["metadata"].get("labels") or {}).get(L.MIG_CONFIG) != name]
    return Observed(Change.UPDATED, f"{name} on {', '.join(moving)}") if moving else Observed(Change.NO_CHANGE)


def capacity(kube: Kube, selector: str, dra: bool, after_changes: bool) -> Observed:
    """What wait-capacity checks, and whether it would wait: a check, no change. `after_changes`: a step
    before it changes something, so it waits for the nodes to come back, whatever they offer now."""
    from gpuctl.ops.capacity import capacity_check

    state = capacity_check(kube, selector, dra)
    now = ", ".join(map(str, state.counts))
    if state.ok and not after_changes:
        return Observed(Change.NO_CHANGE, now)
    what = "publish their DRA devices" if dra else "advertise their GPUs"
    return Observed(Change.CHECK, f"waits until the nodes {what} and their plugin is ready (now {now})")


def tenant(kube: Kube, wanted: Tenant, dra: bool) -> Observed:
    from gpuctl.ops.tenancy.tenants import BINDING, QUOTA, granted, holds, tenant_manifests

    def read(kind: str) -> Any:
        api_version, what, name = {"namespace": ("v1", "Namespace", wanted.name),
                                   "quota": ("v1", "ResourceQuota", QUOTA),
                                   "binding": ("rbac.authorization.k8s.io/v1", "RoleBinding", BINDING)}[kind]
        with requesting(f"reading the {kind} of tenant {wanted.name}"):
            return kube.get_or_none(api_version, what, name, None if what == "Namespace" else wanted.name)

    action, diffs = Change.NO_CHANGE, []
    for kind, body in tenant_manifests(wanted, dra):
        current = read(kind)
        if current is None:
            return Observed(Change.CREATED, f"namespace, quota {granted(wanted.hard(dra))}")
        if not holds(current, body):
            action = Change.UPDATED
            diffs.append(diff_text(yaml.safe_dump(subset(current, body), sort_keys=True),
                                   yaml.safe_dump(body, sort_keys=True), f"{kind}/{wanted.name}"))
    binding = read("binding") if wanted.group is None else None
    if binding is not None and L.managed_by_gpuctl(binding.labels):  # no group any more: it goes
        return Observed(Change.UPDATED, f"removes RoleBinding {BINDING}", "\n".join(diffs))
    return Observed(action, "", "\n".join(diffs))
