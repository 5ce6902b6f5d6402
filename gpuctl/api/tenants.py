"""Tenants: a namespace with GPU quotas per team (gpuctl.ops.tenancy.tenants)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuctl.api.reach import client
from gpuctl.kube.dra import dra_mode
from gpuctl.model import specfile
from gpuctl.model.change import Change
from gpuctl.model.naming import check_duration
from gpuctl.model.tenant import TenantUpdate, check_tenant_name, merged_entry, tenant_changes
from gpuctl.ops.tenancy.tenants import check_shrink, over_allocatable, read_quota, read_tenant, wait_namespace_gone
from gpuctl.ops.tenancy.tenants import ensure_tenant as ensure
from gpuctl.ops.tenancy.tenants import list_tenants as tenants
from gpuctl.ops.tenancy.tenants import remove_tenant as remove

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from gpuctl.model.target import ClusterTarget
    from gpuctl.model.tenant import Tenant


def ensure_tenant(tenant: Tenant, target: ClusterTarget | None = None,
                  warn: Callable[[str], None] | None = None) -> tuple[Change, dict[str, int]]:
    """Create or update the tenant to exactly `tenant`; `warn` hears first of quotas above what the cluster's
    GPU nodes offer (allowed). Returns the change and the quota the cluster now holds."""
    kube = client(target)
    for warning in over_allocatable(kube, tenant, dra_mode(kube)):
        if warn is not None:
            warn(warning)
    return ensure(kube, tenant), read_quota(kube, tenant.name)


def add_tenant(given: Mapping[str, Any], flags: Mapping[str, str], target: ClusterTarget | None = None,
               warn: Callable[[str], None] | None = None, shrink: bool = False) -> TenantUpdate:
    """`gpuctl tenant add`: create tenant `given["name"]`, or update it keeping every field `given` does not
    name (model.tenant.merged_entry, the one place of that rule; a spec's tenants go through ensure_tenant,
    exactly). `given` is a `spec.tenants[]` entry of the fields named (None: back to the default), `flags`
    maps its fields to the flags for errors. A quota lowered below what the team's pods request now is
    refused (exit 2) unless `shrink`. Every input is judged before the cluster is read."""
    specfile.load_tenant(merged_entry(None, given), flags)  # the flags alone, before any request
    kube = client(target)
    before = read_tenant(kube, given["name"])
    tenant = specfile.load_tenant(merged_entry(before, given), flags)
    if before is not None and not shrink:
        check_shrink(kube, before, tenant, dra_mode(kube))
    change, quota = ensure_tenant(tenant, target, warn)
    return TenantUpdate(change, before, tenant, tuple(tenant_changes(before, tenant)), quota)


def list_tenants(target: ClusterTarget | None = None) -> list[dict[str, Any]]:
    return tenants(client(target))


def remove_tenant(name: str, target: ClusterTarget | None = None, timeout: float | None = 300.0,
                  confirm: Callable[[], None] | None = None) -> Change:
    """Delete what gpuctl made for tenant `name` (its namespace, or in an adopted one only gpuctl's objects),
    then wait up to `timeout` seconds until its namespace is gone (None: do not wait; exit 7 when it is still
    terminating then). NO_CHANGE where there is no such tenant: nothing to remove. `confirm` is called once
    every input is judged, before the cluster is read (it raises to stop)."""
    check_tenant_name(name, "NAME")
    if timeout is not None:
        check_duration(timeout, "--timeout")
    if confirm is not None:
        confirm()
    kube = client(target)
    change = remove(kube, name)
    if change is Change.DELETED and timeout is not None:
        wait_namespace_gone(kube, name, timeout)
    return change
