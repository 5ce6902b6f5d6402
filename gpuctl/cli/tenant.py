"""`gpuctl tenant add|list|remove`: a namespace with GPU quotas per team."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.documents import tenant_document
from gpuctl.cli.options import Yes
from gpuctl.cli.settings import confirm_or_refuse, settings
from gpuctl.cli.types import count, seconds
from gpuctl.model.change import Change
from gpuctl.model.dra import requested_only
from gpuctl.model.tenant import tenant_entry
from gpuctl.util.output import emit, info, is_table

app = typer.Typer(help="""Onboard teams onto the shared GPU pool.

Examples:
  gpuctl tenant add team-a --gpus 4
  gpuctl tenant list
  gpuctl tenant remove team-a --yes
""", no_args_is_help=True)
TenantName = Annotated[str, typer.Argument(metavar="NAME", help="Team name; also the namespace.")]


@app.command()
def add(
    ctx: typer.Context,
    name: TenantName,
    gpus: Annotated[Optional[int], typer.Option("--gpus", parser=count, help="Quota on requests.nvidia.com/gpu (with NVIDIA's DRA driver: also on claimed gpu.nvidia.com devices); 0 for none. Omitted: the team's current quota (a new team: 0).")] = None,
    mig: Annotated[Optional[list[str]], typer.Option("--mig", metavar="PROFILE=COUNT", help="MIG quota (repeatable), e.g. 3g.20gb=2; merged into the team's current MIG quota per profile, PROFILE=0 drops one, --mig none drops all. Omitted: unchanged (a new team: none).")] = None,
    group: Annotated[Optional[str], typer.Option("--group", metavar="NAME", help="Group bound to the 'edit' role in the namespace; --group none removes the binding. Omitted: unchanged (a new team: none).")] = None,
    adopt: Annotated[bool, typer.Option("--adopt", help="Take over an existing namespace gpuctl did not create; 'tenant remove' then deletes only gpuctl's objects in it.")] = False,
    borrow: Annotated[Optional[int], typer.Option("--borrow", parser=count, help="Kueue: how much the team may borrow from its cohort's idle quota, per resource; refused where Kueue is not installed. Omitted: unchanged (a new team: 0).")] = None,
    lend: Annotated[Optional[str], typer.Option("--lend", metavar="N|all", help="Kueue: how much of the team's idle quota others may borrow; 'all' (the default) lends all of it. Omitted: unchanged.")] = None,
    cohort: Annotated[Optional[str], typer.Option("--cohort", metavar="NAME", help="Kueue cohort the team's ClusterQueue shares quota in. Omitted: unchanged (a new team: gpuctl).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Lower a quota even below what the team's pods request now (refused without it).")] = False,
) -> None:
    """Create a tenant, or update one keeping what the flags do not name.

    As `kubectl label` and `helm upgrade --reuse-values` (a spec file's `tenants:` entry instead states the
    whole tenant). A tenant is its Namespace,
    ResourceQuota on GPU resources, RoleBinding, the GPU fence and GPU tolerations, where Kueue runs, the
    team's ClusterQueue, its LocalQueues (the team's and `default`, where Jobs without a queue label go) and
    the cluster's GPU ResourceFlavors and, where NVIDIA's DRA driver serves the GPUs, ResourceClaimTemplates
    (gpu-<model>, mig-<profile>). Each changed field is printed as `before -> after`.

    Examples:
      # A team with a quota of 4 whole GPUs, edited by its group
      gpuctl tenant add team-a --gpus 4 --group team-a-devs
      # Two 3g.20gb MIG instances, no whole GPU
      gpuctl tenant add team-b --gpus 0 --mig 3g.20gb=2
      # With Kueue: borrow up to 2 GPUs from the cohort's idle quota
      gpuctl tenant add team-a --borrow 2 --lend all
    """
    given, flags = tenant_document(name, gpus, mig, group, adopt, borrow, lend, cohort)
    opts = settings(ctx)
    update = api.add_tenant(given, flags, opts.target, warn=lambda w: info(f"warning: {w}"), shrink=yes)
    for line in update.changes:
        info(f"  {line}")
    info(f"tenant {name!r}: {update.change.value}")
    before = tenant_entry(update.before) if update.before is not None else None
    result = {"tenant": name, "change": update.change.value, "quota": update.quota, "before": before,
              "after": tenant_entry(update.after), "changes": list(update.changes)}
    shown = {**result, "quota": requested_only(update.quota)} if opts.output == "table" else result
    emit(result, opts.output, ("tenant", "change", "quota"), rows=[shown])


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """List the tenants with their GPU quota and current use.

    With Kueue, per flavor: admitted use, nominal quota and what the team borrows from its cohort.

    Examples:
      gpuctl tenant list
      gpuctl tenant list -o json
    """
    opts = settings(ctx)
    rows = api.list_tenants(opts.target)
    if is_table(opts.output):  # one cell per team: flavor/resource=used/nominal(+borrowed)
        rows = [{**r, "queue": {f"{flavor}/{res}": f"{u['used']}/{u['nominal']}(+{u['borrowed']})"
                                for flavor, resources in (r.get("queue") or {}).items()
                                for res, u in resources.items()}} for r in rows]
    if opts.output == "table":  # in 80 columns; -o wide adds the claimed devices' twins
        rows = [{**r, "quota": requested_only(r["quota"]), "used": requested_only(r["used"])} for r in rows]
    emit(rows, opts.output, ("tenant", "quota", "used"), ("group", "cohort", "queue"))


@app.command()
def remove(
    ctx: typer.Context,
    name: TenantName,
    yes: Yes = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Wait until the namespace is gone (as kubectl delete); --no-wait returns while it terminates.")] = True,
    timeout: Annotated[float, typer.Option("--timeout", parser=seconds, help="Seconds to wait for the namespace to go; then exit 7, saying it is still terminating.")] = 300.0,
) -> None:
    """Delete what gpuctl made for a tenant.

    That is its namespace (and everything in it; waits until it is gone), or in an adopted namespace only
    gpuctl's quota and binding. A tenant that does not exist: nothing to remove (exit 0, as `kubectl delete
    --ignore-not-found`).

    Examples:
      gpuctl tenant remove team-a --yes
      gpuctl tenant remove team-b --yes --no-wait
    """
    opts = settings(ctx)
    change = api.remove_tenant(name, opts.target, timeout if wait else None,
                              confirm=lambda: confirm_or_refuse(yes, f"Delete tenant {name!r}?"))
    if change is Change.NO_CHANGE:
        info(f"tenant {name!r}: nothing to remove (no gpuctl tenant of that name; see 'gpuctl tenant list')")
    else:
        info(f"tenant {name!r}: {change.value}" + ("" if wait else "; its namespace is terminating"))
    if not is_table(opts.output):
        emit({"tenant": name, "change": change.value, "terminating": change is Change.DELETED and not wait},
             opts.output)
