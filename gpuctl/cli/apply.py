"""`gpuctl apply|render -f gpu-platform.yaml`: converge a cluster to a GpuCluster spec, or render it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuctl import api
from gpuctl.cli.results import print_step, show_result
from gpuctl.cli.settings import settings
from gpuctl.cli.types import path, seconds
from gpuctl.model.change import Change
from gpuctl.util.output import emit, emit_manifests, info, is_table, section

SpecFile = Annotated[Path, typer.Option("-f", "--filename", parser=path, metavar="PATH", help="GpuCluster spec file.")]


def apply(
    ctx: typer.Context,
    filename: SpecFile,
    lock_timeout: Annotated[float, typer.Option("--lock-timeout", parser=seconds, help="Seconds to wait for another apply on the same cluster.")] = 300.0,
    timeout: Annotated[Optional[float], typer.Option("--timeout", parser=seconds, help="Seconds any one wait (capacity, MIG) may take; without it a wait gives up when nothing converges for 120 s.")] = None,
) -> None:
    """Create or converge the cluster, node groups, GPU stack and tenants a GpuCluster spec describes.

    Examples:
      gpuctl apply -f gpu-platform.yaml
      # Wait up to 10 minutes for another apply on the same cluster, then go on
      gpuctl apply -f gpu-platform.yaml --lock-timeout 600 -o json
    """
    doc, groups = api.load_spec(filename)  # every value checked before any cloud or cluster call
    spec = api.to_platform(doc, groups)
    opts = settings(ctx)
    result = api.apply_platform(spec, opts.target, report=print_step, lock_timeout=lock_timeout,
                               write_context=opts.context, timeout=timeout)
    changed = any(s.outcome not in (Change.NO_CHANGE, Change.PASSED) for s in result.steps)
    info(f"cluster {spec.name!r} matches {filename}" + ("" if changed else " (no change)"))
    show_result(spec, result, changed, opts.output, opts.context)


def render(
    ctx: typer.Context,
    filename: SpecFile,
    out: Annotated[Optional[Path], typer.Option("--out", parser=path, metavar="DIR", help="Write manifests/, helm/<release>.values.yaml and grafana/ (a dashboard of the GPUs at work) here (default: the manifests on stdout).")] = None,
    helm_values: Annotated[Optional[str], typer.Option("--helm-values", metavar="RELEASE", help="Print the values file of this Helm release (gpu-operator, node-feature-discovery, ...) instead of the manifests, for helm's -f -.")] = None,
) -> None:
    """Every Kubernetes object apply writes for a spec, GitOps-ready; touches no cluster.

    stdout holds only manifests (pipe into kubectl apply -f - or kubectl diff -f -); Helm values go under --out,
    or one release's with --helm-values.

    Examples:
      gpuctl render -f gpu-platform.yaml | kubectl diff -f -
      gpuctl render -f gpu-platform.yaml --out rendered/
      gpuctl render -f gpu-platform.yaml --helm-values gpu-operator > gpu-operator.values.yaml
    """
    result = api.render(api.to_platform(*api.load_spec(filename)), out, helm_values=helm_values)
    fmt = settings(ctx).output
    if isinstance(result, str):  # manifests (or one release's values): YAML, or with -o json one JSON document
        emit_manifests(result, fmt)
        return
    for written in result:
        info(f"wrote {written}")
    if not is_table(fmt):
        emit({"files": [str(w) for w in result]}, fmt)


def plan(ctx: typer.Context, filename: SpecFile) -> None:
    """Show what `apply -f` would do, step by step, with a diff of each change; writes nothing.

    Examples:
      gpuctl plan -f gpu-platform.yaml
      gpuctl plan -f gpu-platform.yaml -o json
    """
    opts = settings(ctx)
    planned = api.plan_platform(api.to_platform(*api.load_spec(filename)), opts.target, write_context=opts.context)
    if not is_table(opts.output):
        emit([p.as_dict() for p in planned], opts.output)
        return
    emit([{"step": p.step, "action": p.action.value, "detail": p.detail} for p in planned], opts.output,
         ("step", "action", "detail"), fit="detail")
    for p in planned:
        if p.diff:
            section(f"--- {p.step}\n{p.diff}")
