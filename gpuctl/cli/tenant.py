"""`gpuctl tenant add|list|remove`: a namespace with GPU quotas per team."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl.cli.options import Yes
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.output import emit, info

app = typer.Typer(help="Onboard teams onto the shared GPU pool.", no_args_is_help=True)
TenantName = Annotated[str, typer.Argument(help="Team name; also the namespace.")]


@app.command()
def add(
    ctx: typer.Context,
    name: TenantName,
    gpus: Annotated[int, typer.Option("--gpus", help="Quota on requests.nvidia.com/gpu.")] = 0,
    mig: Annotated[Optional[list[str]], typer.Option("--mig", help="MIG quota PROFILE=COUNT (repeatable), e.g. 3g.20gb=2.")] = None,
    group: Annotated[Optional[str], typer.Option("--group", help="Group bound to the 'edit' role in the namespace.")] = None,
) -> None:
    """Create or update a tenant: Namespace, ResourceQuota on GPU resources, RoleBinding."""
    from gpuctl.kube.client import api_client
    from gpuctl.tenants import ensure_tenant, over_allocatable, tenant_from_flags

    tenant = tenant_from_flags(name, gpus, mig or [], group)
    opts = settings(ctx)
    client = api_client(opts.kubeconfig, opts.context)
    for warning in over_allocatable(client, tenant):
        info(f"warning: {warning}")
    change = ensure_tenant(client, tenant)
    info(f"tenant {name!r}: {change.value}")
    emit({"tenant": name, "change": change.value, "quota": tenant.hard()}, opts.output, ("tenant", "change", "quota"))


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """Tenants with their GPU quota and current use."""
    from gpuctl.kube.client import api_client
    from gpuctl.tenants import list_tenants

    opts = settings(ctx)
    emit(list_tenants(api_client(opts.kubeconfig, opts.context)), opts.output, ("tenant", "group", "quota", "used"))


@app.command()
def remove(ctx: typer.Context, name: TenantName, yes: Yes = False) -> None:
    """Delete a tenant's namespace (and everything in it)."""
    from gpuctl.kube.client import api_client
    from gpuctl.naming import check_name
    from gpuctl.tenants import remove_tenant

    check_name(name, "NAME")
    confirm_or_refuse(yes, f"Delete tenant {name!r} and its namespace?")
    opts = settings(ctx)
    change = remove_tenant(api_client(opts.kubeconfig, opts.context), name)
    info(f"tenant {name!r}: {change.value}")
