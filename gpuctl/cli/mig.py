"""`gpuctl mig validate|plan|apply`: MIG layouts checked against each GPU's real geometry."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.help import one_of
from gpuctl.cli.options import Gpu
from gpuctl.cli.results import print_step
from gpuctl.cli.settings import settings
from gpuctl.cli.types import seconds
from gpuctl.model.catalog import get_gpu
from gpuctl.model.mig import parse_layout, plan_rows, render_plan
from gpuctl.model.stack_spec import MIG_STRATEGY
from gpuctl.util.output import emit, is_table, out

app = typer.Typer(help="""Validate, plan and apply MIG layouts.

Examples:
  gpuctl mig validate 3g.20gb-2x2g.10gb --gpu a100-40gb
  gpuctl mig plan all-1g.10gb --gpu h100-80gb
  gpuctl mig apply 3g.20gb-2x2g.10gb --nodegroup gpu
""", no_args_is_help=True)

Layout = Annotated[str, typer.Argument(metavar="LAYOUT", help="Profiles joined by '-' with optional Nx repeats (3g.20gb-2x2g.10gb), "
                                            "or a named config (all-disabled, all-balanced, all-1g.5gb).")]


@app.command("validate")
def validate_(ctx: typer.Context, layout: Layout, gpu: Gpu) -> None:
    """Check that a MIG layout fits one GPU of a model: exit 0 if it does, exit 2 with the reason if not.

    Examples:
      gpuctl mig validate 3g.20gb-2x2g.10gb --gpu a100-40gb
      gpuctl mig validate all-balanced --gpu h100-80gb -o json
    """
    model = get_gpu(gpu)
    parsed = parse_layout(layout, model)
    fmt = settings(ctx).output
    if is_table(fmt):
        out(f"{parsed.name} fits on {model.name}\n")
    else:
        emit({"layout": parsed.name, "gpu": model.name, "fits": True, "profiles": list(parsed.profiles)}, fmt)


@app.command()
def plan(ctx: typer.Context, layout: Layout, gpu: Gpu) -> None:
    """Show where each MIG instance of a layout sits on the GPU's memory slots.

    Examples:
      gpuctl mig plan 3g.20gb-2x2g.10gb --gpu a100-40gb
      gpuctl mig plan 2x3g.40gb --gpu h100-80gb -o yaml
    """
    model = get_gpu(gpu)
    parsed = parse_layout(layout, model)
    fmt = settings(ctx).output
    if is_table(fmt):
        out(render_plan(parsed, model) + "\n")
    else:
        emit({"layout": parsed.name, "gpu": model.name, "instances": plan_rows(parsed, model)}, fmt)


@app.command()
def apply(
    ctx: typer.Context,
    layout: Layout,
    nodegroup: Annotated[Optional[str], typer.Option("--nodegroup", metavar="NAME", help="Node group to configure (default, without --selector: the one node group whose GPUs take LAYOUT).")] = None,
    selector: Annotated[Optional[str], typer.Option("--selector", "-l", metavar="SELECTOR", help="Label selector of the nodes.")] = None,
    strategy: Annotated[Optional[str], typer.Option("--strategy", metavar=one_of(MIG_STRATEGY.names), help="MIG strategy (default: the operator's).")] = None,
    timeout: Annotated[float, typer.Option("--timeout", parser=seconds, help="Seconds to wait for the MIG manager.")] = 300.0,
) -> None:
    """Apply a MIG layout to GPU nodes, validated for every node's GPU before any write.

    With neither --nodegroup nor --selector: to the one node group whose GPUs take LAYOUT (named on stderr);
    several or none: exit 2 naming them.

    Examples:
      gpuctl mig apply 3g.20gb-2x2g.10gb --nodegroup gpu
      # Every node labelled for the training pool, MIG disabled again
      gpuctl mig apply all-disabled -l pool=training --timeout 600
    """
    opts = settings(ctx)
    steps, expected = api.apply_mig(layout, nodegroup, selector, strategy, timeout, print_step, opts.target)
    rows = [{"node": n, "allocatable": r} for n, r in sorted(expected.items())]
    emit(rows if is_table(opts.output) else {"layout": layout, "steps": [s.as_dict() for s in steps], "nodes": rows},
         opts.output, ("node", "allocatable"))
