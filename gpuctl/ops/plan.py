"""`gpuctl plan`: what each step of `apply` would do, with a diff of what changes; writes nothing.

It reads the cloud through the provider and the cluster through the kubeconfig gpuctl wrote
before (never by asking the cloud for new credentials, which would be a write).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuctl.model import labels as L
from gpuctl.util.errors import ClusterError, GpuctlError
from gpuctl.kube.client import api_client, api_error, core
from gpuctl.kube.nodes import list_nodes_json, node_patch
from gpuctl.kube.objects import read_config_map_data
from gpuctl.model.mig import config_name, parse_mig_parted_config
from gpuctl.model.spec import PlatformSpec
from gpuctl.ops.platform import gpu_config_data, read_recorded_groups, with_cluster_groups
from gpuctl.providers import get_provider
from gpuctl.model.change import Change
from gpuctl.model.sharing import CONFIG_LABEL
from gpuctl.stack.dra_driver import check_dra_mode, dra_release
from gpuctl.stack.existing import read_stack
from gpuctl.stack.helm import HelmTarget, plan_release
from gpuctl.stack.owners import StackPlan, check_single_owners
from gpuctl.stack.releases import nfd_release, operator_release
from gpuctl.stack.values import MIG_CONFIGMAP
from gpuctl.model.stack_spec import StackSpec
from gpuctl.ops.tenancy.tenants import BINDING, QUOTA, holds, read_or_none, tenant_manifests



@dataclass(frozen=True)
class PlannedStep:
    step: str
    action: Change
    detail: str = ""
    diff: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"step": self.step, "action": self.action.value, "detail": self.detail, "diff": self.diff}


def _diff(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), f"{name} (cluster)", f"{name} (spec)",
                                 lineterm="", n=1)
    return "\n".join(lines)


def plan_platform(spec: PlatformSpec, kubeconfig: Path | None) -> list[PlannedStep]:
    provider = get_provider(spec.cloud, spec.options)
    provider.check_credentials()
    planned: list[PlannedStep] = []
    exists = provider.get_cluster(spec.name) is not None
    planned.append(PlannedStep("ensure-cluster", Change.NO_CHANGE if exists else Change.CREATED))
    for group in spec.groups:
        current = provider.get_node_group(spec.name, group.spec.name) if exists else None
        if current is None:
            planned.append(PlannedStep(f"ensure-nodegroup/{group.spec.name}", Change.CREATED,
                                       f"{group.spec.nodes} x {group.spec.gpu.name}"))
        elif current.nodes != group.spec.nodes:
            planned.append(PlannedStep(f"ensure-nodegroup/{group.spec.name}", Change.UPDATED,
                                       f"nodes {current.nodes} -> {group.spec.nodes}"))
        else:
            planned.append(PlannedStep(f"ensure-nodegroup/{group.spec.name}", Change.NO_CHANGE))
    if not exists:
        planned.append(PlannedStep("cluster-side steps", Change.CREATED, "everything, once the cluster exists"))
        return planned
    try:
        client = api_client(kubeconfig, provider.context_name(spec.name))
    except ClusterError as exc:
        planned.append(PlannedStep("cluster-side steps", Change.UPDATED, f"unknown: {exc.message}"))
        return planned
    spec = with_cluster_groups(spec, read_recorded_groups(client))  # as apply sees it
    planned += plan_cluster(spec, client, {g.spec.name: provider.node_selector(g.spec.name) for g in spec.groups},
                            HelmTarget(kubeconfig, provider.context_name(spec.name)))
    return planned


def plan_cluster(spec: PlatformSpec, client: Any, selectors: dict[str, str], helm: HelmTarget,
                 stack_plan: StackPlan | None = None) -> list[PlannedStep]:
    """The cluster-side steps of apply, observed only. A GPU stack gpuctl cannot configure is refused
    here as in apply (exit 2); one it configures through shows in the steps."""
    if stack_plan is None:
        stack_plan = check_single_owners(read_stack(client), spec.stack)
    dra_owner = check_dra_mode(client, spec.stack)
    namespace = stack_plan.namespace
    v1 = core(client)
    planned = []
    for group in spec.groups:
        nodes = list_nodes_json(v1, selectors[group.spec.name])
        labels = {CONFIG_LABEL: group.sharing.config_key, **group.labels}
        patches = {n["metadata"]["name"]: p for n in nodes if (p := node_patch(n, labels, group.spec.taints))}
        diff = "\n".join(f"{name}: {yaml.safe_dump(p, default_flow_style=True).strip()}"
                         for name, p in sorted(patches.items())[:5])
        planned.append(PlannedStep(f"configure-nodes/{group.spec.name}",
                                   Change.UPDATED if patches else Change.NO_CHANGE,
                                   f"{len(patches)} of {len(nodes)} nodes" if patches else "", diff))
    text = (read_config_map_data(v1, namespace, MIG_CONFIGMAP) or {}).get("config.yaml")
    wanted = gpu_config_data(spec, parse_mig_parted_config(text) if text else {})
    diffs, action = [], Change.NO_CHANGE
    for name, data in wanted.items():
        current = read_config_map_data(v1, namespace, name)
        for key, value in data.items():
            before = (current or {}).get(key)
            if before != value:
                action = Change.UPDATED
                diffs.append(_diff(before or "", value, f"{name}/{key}"))
    planned.append(PlannedStep("write-gpu-config", action, "", "\n".join(diffs)))
    if stack_plan.nfd is not None:
        planned.append(PlannedStep("use-existing-nfd", Change.NO_CHANGE, stack_plan.nfd_note()))
    releases = ([nfd_release(spec.stack)] if spec.stack.nfd == "standalone" and stack_plan.nfd is None else []) + \
        ([operator_release(spec.stack)] if stack_plan.operator is None else [])
    if stack_plan.operator is not None:
        planned.append(_plan_cluster_policy(client, stack_plan, spec.stack))
    for release in releases:
        try:
            change, why = plan_release(helm, release)
        except GpuctlError as exc:
            change, why = Change.UPDATED, f"unknown: {exc.message}"
        title = "install-nfd" if release.name == "node-feature-discovery" else "install-gpu-operator"
        planned.append(PlannedStep(title, change, why.splitlines()[0] if why else "", why))
    if spec.stack.dra:
        planned.append(_plan_dra_driver(helm, spec, dra_owner))
    for group in spec.groups:
        if group.mig is not None:
            name = config_name(group.mig)
            nodes = list_nodes_json(v1, selectors[group.spec.name])
            moving = [n["metadata"]["name"] for n in nodes if (n["metadata"].get("labels") or {}).get(L.MIG_CONFIG) != name]
            planned.append(PlannedStep(f"apply-mig/{group.spec.name}", Change.UPDATED if moving else Change.NO_CHANGE,
                                       f"{name} on {', '.join(moving)}" if moving else ""))
    if spec.kueue:
        planned.append(_plan_kueue(client, helm, spec))
    for tenant in spec.tenants:  # DRA mode is spec.stack.dra: check_dra_mode refused a cluster where it is not
        planned.append(_plan_tenant(client, tenant, spec.stack.dra))
    return planned


def _plan_dra_driver(helm: HelmTarget, spec: PlatformSpec, owner: str | None) -> PlannedStep:
    if owner is not None:
        return PlannedStep("install-dra-driver", Change.NO_CHANGE, f"uses the DRA driver of {owner}")
    try:
        change, why = plan_release(helm, dra_release(spec.stack))
    except GpuctlError as exc:
        change, why = Change.UPDATED, f"unknown: {exc.message}"
    return PlannedStep("install-dra-driver", change, why.splitlines()[0] if why else "", why)


def _plan_kueue(client: Any, helm: HelmTarget, spec: PlatformSpec) -> PlannedStep:
    """Clouds: Kueue's chart as any release; the sim runs Kueue itself once its API is served."""
    from gpuctl.ops.tenancy.queues import Queues
    from gpuctl.stack.kueue import kueue_release

    if spec.cloud == "sim":
        served = Queues(client).installed()
        return PlannedStep("install-kueue", Change.NO_CHANGE if served else Change.CREATED,
                           "" if served else "Kueue's CRDs and controller, run by the sim")
    try:
        change, why = plan_release(helm, kueue_release(spec.stack.charts))
    except GpuctlError as exc:
        change, why = Change.UPDATED, f"unknown: {exc.message}"
    return PlannedStep("install-kueue", change, why.splitlines()[0] if why else "", why)


def _plan_cluster_policy(client: Any, stack_plan: StackPlan, stack: StackSpec) -> PlannedStep:
    from kubernetes.client import CustomObjectsApi

    from gpuctl.ops.platform import cluster_policy_drift
    from gpuctl.stack.existing import CLUSTER_POLICY

    name = stack_plan.operator.policy  # type: ignore[union-attr]
    try:
        current = (CustomObjectsApi(client).get_cluster_custom_object(*CLUSTER_POLICY, name).get("spec") or {})
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, f"reading ClusterPolicy {name}") from None
    wanted = cluster_policy_drift(current, stack)
    note = stack_plan.operator_note()
    if wanted is None:
        return PlannedStep("configure-gpu-operator", Change.NO_CHANGE, note)
    diff = _diff(yaml.safe_dump(_subset(current, wanted), sort_keys=True), yaml.safe_dump(wanted, sort_keys=True),
                 f"clusterpolicy/{name}")
    return PlannedStep("configure-gpu-operator", Change.UPDATED, note, diff)


def _plan_tenant(client: Any, tenant: Any, dra: bool) -> PlannedStep:
    from kubernetes.client import CoreV1Api, RbacAuthorizationV1Api


    v1, rbac = CoreV1Api(client), RbacAuthorizationV1Api(client)
    reads = {"namespace": lambda: v1.read_namespace(tenant.name),
             "quota": lambda: v1.read_namespaced_resource_quota(QUOTA, tenant.name),
             "binding": lambda: rbac.read_namespaced_role_binding(BINDING, tenant.name)}
    action, diffs = Change.NO_CHANGE, []
    for kind, body in tenant_manifests(tenant, dra):
        current = read_or_none(reads[kind], kind, tenant.name)
        if current is None:
            return PlannedStep(f"ensure-tenant/{tenant.name}", Change.CREATED, f"namespace, quota {tenant.hard(dra)}")
        observed = client.sanitize_for_serialization(current)
        if not holds(observed, body):
            action = Change.UPDATED
            diffs.append(_diff(yaml.safe_dump(_subset(observed, body), sort_keys=True),
                               yaml.safe_dump(body, sort_keys=True), f"{kind}/{tenant.name}"))
    return PlannedStep(f"ensure-tenant/{tenant.name}", action, "", "\n".join(diffs))


def _subset(current: Any, wanted: Any) -> Any:
    """The part of `current` that `wanted` speaks about, for a readable diff."""
    if isinstance(wanted, dict) and isinstance(current, dict):
        return {k: _subset(current.get(k), v) for k, v in wanted.items()}
    return current
