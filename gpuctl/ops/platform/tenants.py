"""The tenants' steps: ensure-gpu-tolerations (the tenants' GPU tolerations follow the node groups),
ensure-tenant/<name> and ensure-queues/<name> (a tenant added before Kueue). Thin: the work lives in ops.tenancy."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import yaml

from gpuctl.kube.errors import requesting
from gpuctl.kube.gpu_nodes import gpu_nodes
from gpuctl.kube.kube import Kube
from gpuctl.kube.kube_object import KubeObject
from gpuctl.model import labels as L
from gpuctl.model.change import Change, Observed, Step
from gpuctl.model.spec import GroupPlan
from gpuctl.model.tenant import Tenant
from gpuctl.ops.platform.diffs import diff_text, subset
from gpuctl.ops.tenancy.queues import NodeShape, Queues, observe_queues
from gpuctl.ops.tenancy.tenant_claims import claim_templates, claim_templates_differ, models_of
from gpuctl.ops.tenancy.tenants import (
    BINDING,
    QUOTA,
    ensure_tenant,
    ensure_tenant_queues,
    granted,
    holds,
    observe_tenant_queues,
    tenant_manifests,
)
from gpuctl.ops.tenancy.tolerations import converge_tolerations, observe_tolerations, served, with_unrecorded


def tolerations_step(client: Kube, groups: tuple[GroupPlan, ...], tenant: str | None) -> Step:
    def look() -> Observed:
        if not served(client):
            return Observed(Change.NO_CHANGE, "MutatingAdmissionPolicy not served: teams add tolerations by hand")
        return Observed(observe_tolerations(client, with_unrecorded(client, groups)))

    return Step("ensure-gpu-tolerations", look,
                lambda: converge_tolerations(client, with_unrecorded(client, groups), tenant))


def tenant_step(client: Kube, tenant: Tenant, adopt_field: str, dra: bool,
                kueue: Callable[[list[KubeObject]], list[NodeShape]] | None) -> Step:
    """`kueue`: where the spec runs Kueue, the shapes of the GPU nodes given (gpu_nodes) that the team's queues
    will come from (None: no Kueue)."""
    return Step(f"ensure-tenant/{tenant.name}", lambda: observe_tenant(client, tenant, dra, kueue),
                lambda: ensure_tenant(client, tenant, adopt_field=adopt_field))


def queues_step(client: Kube, name: str, dra: bool) -> Step:
    """A tenant added before Kueue was installed: its queues, with the quota it holds now."""
    return Step(f"ensure-queues/{name}",
                lambda: Observed(observe_tenant_queues(client, name, dra), "the ClusterQueue and LocalQueues of "
                                 f"tenant {name}, added before Kueue, with its current quota"),
                lambda: ensure_tenant_queues(client, name, dra))


def observe_tenant(kube: Kube, wanted: Tenant, dra: bool,
                   kueue: Callable[[list[KubeObject]], list[NodeShape]] | None) -> Observed:
    @cache
    def nodes() -> list[KubeObject]:  # read once, for the claim templates and the queues alike
        return gpu_nodes(kube)

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
    # the templates of the GPU models on the cluster now, as ensure_tenant reads them when it runs
    templates = claim_templates(wanted, models_of(nodes())) if dra else []
    if claim_templates_differ(kube, wanted.name, templates):
        names = ", ".join(t["metadata"]["name"] for t in templates) or "none"
        return Observed(Change.UPDATED, f"ResourceClaimTemplates: {names}", "\n".join(diffs))
    if kueue is not None and (not Queues(kube).installed() or observe_queues(kube, wanted, kueue(nodes()), dra)
                              is not Change.NO_CHANGE):
        return Observed(Change.UPDATED, "its Kueue flavors and queues", "\n".join(diffs))
    return Observed(action, "", "\n".join(diffs))
