"""`gpuctl tenant add|list|remove`: a namespace with GPU quotas per team."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl.cli.options import Yes
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.cli.types import count
from gpuctl.util.output import emit, info

app = typer.Typer(help="Onboard teams onto the shared GPU pool.", no_args_is_help=True)
TenantName = Annotated[str, typer.Argument(help="Team name; also the namespace.")]


@app.command()
def add(
    ctx: typer.Context,
    name: TenantName,
    gpus: Annotated[int, typer.Option("--gpus", parser=count, help="Quota on requests.nvidia.com/gpu (with NVIDIA's DRA driver: also on claimed gpu.nvidia.com devices). Omitted: 0, as in a spec file; every omitted flag means its default, also for an existing tenant.")] = 0,
    mig: Annotated[Optional[list[str]], typer.Option("--mig", help="MIG quota PROFILE=COUNT (repeatable), e.g. 3g.20gb=2. Omitted: no MIG quota.")] = None,
    group: Annotated[Optional[str], typer.Option("--group", help="Group bound to the 'edit' role in the namespace.")] = None,
    adopt: Annotated[bool, typer.Option("--adopt", help="Take over an existing namespace gpuctl did not create; 'tenant remove' then deletes only gpuctl's objects in it.")] = False,
    borrow: Annotated[int, typer.Option("--borrow", parser=count, help="Kueue: how much the team may borrow from its cohort's idle quota, per resource (default 0; refused where Kueue is not installed).")] = 0,
    lend: Annotated[Optional[int], typer.Option("--lend", parser=count, help="Kueue: how much of the team's idle quota others may borrow (default: all of it).")] = None,
    cohort: Annotated[Optional[str], typer.Option("--cohort", help="Kueue cohort the team's ClusterQueue shares quota in (default: gpuctl).")] = None,
) -> None:
    """Create or update a tenant, to exactly these flags (an omitted flag means its default): Namespace, ResourceQuota on GPU resources, RoleBinding, the GPU fence and GPU tolerations,
    where Kueue runs, the team's ClusterQueue, its LocalQueues (the team's and `default`, where Jobs without a queue label go) and the cluster's GPU ResourceFlavors and, where
    NVIDIA's DRA driver serves the GPUs, ResourceClaimTemplates (gpu-<model>, mig-<profile>)."""
    from gpuctl import api
    from gpuctl.cli.documents import tenant_document
    from gpuctl.model.specfile import load_tenant

    tenant = load_tenant(*tenant_document(name, gpus, mig or [], group, adopt, borrow, lend, cohort))
    opts = settings(ctx)
    change, quota = api.ensure_tenant(tenant, opts.kubeconfig, opts.context, warn=lambda w: info(f"warning: {w}"))
    info(f"tenant {name!r}: {change.value}")
    emit({"tenant": name, "change": change.value, "quota": quota}, opts.output,
         ("tenant", "change", "quota"))


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """Tenants with their GPU quota and current use; with Kueue, per flavor: admitted use, nominal quota
    and what the team borrows from its cohort."""
    from gpuctl import api

    opts = settings(ctx)
    rows = api.list_tenants(opts.kubeconfig, opts.context)
    if opts.output == "table":  # one cell per team: flavor/resource=used/nominal(+borrowed)
        rows = [{**r, "queue": {f"{flavor}/{res}": f"{u['used']}/{u['nominal']}(+{u['borrowed']})"
                                for flavor, resources in (r.get("queue") or {}).items()
                                for res, u in resources.items()}} for r in rows]
    emit(rows, opts.output, ("tenant", "group", "quota", "used", "cohort", "queue"))


@app.command()
def remove(ctx: typer.Context, name: TenantName, yes: Yes = False) -> None:
    """Delete what gpuctl made for a tenant: its namespace (and everything in it), or in an adopted
    namespace only gpuctl's quota and binding."""
    from gpuctl import api
    from gpuctl.model.tenant import check_tenant_name

    check_tenant_name(name, "NAME")
    confirm_or_refuse(yes, f"Delete tenant {name!r}?")
    opts = settings(ctx)
    change = api.remove_tenant(name, opts.kubeconfig, opts.context)
    info(f"tenant {name!r}: {change.value}")
