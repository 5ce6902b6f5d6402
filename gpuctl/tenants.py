"""Team onboarding on a shared GPU pool: a Namespace, a GPU ResourceQuota and a RoleBinding per team."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuctl import labels as L
from gpuctl.errors import NotFound, UsageError
from gpuctl.kube.client import api_error, is_not_found
from gpuctl.kube.objects import APPLY_PATCH
from gpuctl.mig import resource_name
from gpuctl.naming import check_name
from gpuctl.providers.base import Change

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

TENANT_LABEL = "gpuctl.dev/tenant"
QUOTA = "gpuctl-gpu-quota"
BINDING = "gpuctl-tenant"
TENANT_ROLE = "edit"  # the built-in ClusterRole for a team's own namespace
_PROFILE = re.compile(r"^\d+g\.\d+gb(\+me)?$")


@dataclass(frozen=True)
class Tenant:
    name: str
    gpus: int
    mig: dict[str, int] = field(default_factory=dict)  # profile -> instances
    group: str | None = None

    def hard(self) -> dict[str, str]:
        quota = {f"requests.{L.GPU_RESOURCE}": str(self.gpus)}
        quota.update({f"requests.{resource_name(p)}": str(n) for p, n in sorted(self.mig.items())})
        return quota


def tenant_from_flags(name: str, gpus: int, mig: list[str], group: str | None) -> Tenant:
    check_name(name, "NAME")
    if gpus < 0:
        raise UsageError("--gpus", f"must be at least 0, got {gpus}", "pass --gpus 0 or more")
    profiles: dict[str, int] = {}
    for item in mig:
        profile, sep, count = item.partition("=")
        if not sep or not _PROFILE.match(profile) or not count.isdigit() or int(count) < 1:
            raise UsageError("--mig", f"{item!r} is not PROFILE=COUNT", "write e.g. --mig 3g.20gb=2")
        profiles[profile] = int(count)
    if group is not None and not group.strip():
        raise UsageError("--group", "must not be empty", "pass the identity group of the team")
    return Tenant(name, gpus, profiles, group)


def tenant_manifests(tenant: Tenant) -> list[tuple[str, dict[str, Any]]]:
    """(kind, object) of the tenant: namespace, quota and, with a group, binding."""
    labels = {L.MANAGED_BY: L.MANAGER, TENANT_LABEL: tenant.name}
    objects = [
        ("namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": tenant.name, "labels": labels}}),
        ("quota", {"apiVersion": "v1", "kind": "ResourceQuota",
                   "metadata": {"name": QUOTA, "namespace": tenant.name, "labels": labels},
                   "spec": {"hard": tenant.hard()}}),
    ]
    if tenant.group:
        objects.append(("binding", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": BINDING, "namespace": tenant.name, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": TENANT_ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": tenant.group}]}))
    return objects


def ensure_tenant(client: ApiClient, tenant: Tenant) -> Change:
    """Observe the three objects; apply (server-side, field manager gpuctl) only those that differ."""
    from kubernetes.client import CoreV1Api, RbacAuthorizationV1Api

    v1, rbac = CoreV1Api(client), RbacAuthorizationV1Api(client)
    calls = {
        "namespace": (lambda: v1.read_namespace(tenant.name),
                      lambda body: v1.patch_namespace(tenant.name, body, field_manager=L.MANAGER, force=True,
                                                      _content_type=APPLY_PATCH)),
        "quota": (lambda: v1.read_namespaced_resource_quota(QUOTA, tenant.name),
                  lambda body: v1.patch_namespaced_resource_quota(QUOTA, tenant.name, body, field_manager=L.MANAGER,
                                                                  force=True, _content_type=APPLY_PATCH)),
        "binding": (lambda: rbac.read_namespaced_role_binding(BINDING, tenant.name),
                    lambda body: rbac.patch_namespaced_role_binding(BINDING, tenant.name, body,
                                                                    field_manager=L.MANAGER, force=True,
                                                                    _content_type=APPLY_PATCH)),
    }
    created = updated = False
    for kind, body in tenant_manifests(tenant):
        read, apply = calls[kind]
        current = read_or_none(read, kind, tenant.name)
        if current is None:
            created = True
        elif contains(client.sanitize_for_serialization(current), body):
            continue
        else:
            updated = True
        try:
            apply(body)
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc, f"applying the {kind} of tenant {tenant.name}") from None
    if created:
        return Change.CREATED
    return Change.UPDATED if updated else Change.NO_CHANGE


def read_or_none(read: Any, kind: str, name: str) -> Any:
    try:
        return read()
    except Exception as exc:  # noqa: BLE001
        if is_not_found(exc):
            return None
        raise api_error(exc, f"reading the {kind} of tenant {name}") from None


def contains(current: Any, wanted: Any) -> bool:
    """True if every field of `wanted` is in `current` with the same value (others may add fields)."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(contains(current.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(current, list) and len(current) == len(wanted) and all(
            contains(c, w) for c, w in zip(current, wanted))
    return current == wanted


def list_tenants(client: ApiClient) -> list[dict[str, Any]]:
    """Each tenant's quota against what its pods request now."""
    from kubernetes.client import CoreV1Api, RbacAuthorizationV1Api

    v1, rbac = CoreV1Api(client), RbacAuthorizationV1Api(client)
    rows = []
    try:
        namespaces = v1.list_namespace(label_selector=TENANT_LABEL).items
        for ns in namespaces:
            quotas = v1.list_namespaced_resource_quota(ns.metadata.name, field_selector=f"metadata.name={QUOTA}").items
            hard = (quotas[0].status.hard or quotas[0].spec.hard or {}) if quotas else {}
            used = (quotas[0].status.used or {}) if quotas else {}
            bindings = [s.name for rb in rbac.list_namespaced_role_binding(ns.metadata.name).items
                        if rb.metadata.name == BINDING for s in rb.subjects or []]
            rows.append({
                "tenant": ns.metadata.name,
                "group": ",".join(bindings) or None,
                "quota": {k.removeprefix("requests."): int(v) for k, v in sorted(hard.items())},
                "used": {k.removeprefix("requests."): int(used.get(k, 0)) for k in sorted(hard)},
            })
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, "listing tenants") from None
    return rows


def remove_tenant(client: ApiClient, name: str) -> Change:
    from kubernetes.client import CoreV1Api

    v1 = CoreV1Api(client)
    ns = read_or_none(lambda: v1.read_namespace(name), "namespace", name)
    if ns is None or (ns.metadata.labels or {}).get(TENANT_LABEL) != name:
        raise NotFound(f"no gpuctl tenant {name!r}", "see 'gpuctl tenant list'")
    try:
        v1.delete_namespace(name)
    except Exception as exc:  # noqa: BLE001
        raise api_error(exc, f"deleting namespace {name}") from None
    return Change.DELETED


def over_allocatable(client: ApiClient, tenant: Tenant) -> list[str]:
    """Quotas above what the cluster's GPU nodes offer in total: allowed, but worth a warning."""
    from kubernetes.client import CoreV1Api

    from gpuctl.gpu_nodes import gpu_nodes, gpu_resources

    totals: dict[str, int] = {}
    for node in gpu_nodes(CoreV1Api(client)):
        for resource, count in gpu_resources(node).items():
            totals[resource] = totals.get(resource, 0) + count
    warnings = []
    for key, value in tenant.hard().items():
        resource = key.removeprefix("requests.")
        if int(value) > totals.get(resource, 0):
            warnings.append(f"{resource} quota {value} is above the cluster's allocatable {totals.get(resource, 0)}")
    return warnings
