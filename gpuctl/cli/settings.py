"""Global options, parsed once by the root callback and read by every command."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import typer

from gpuctl.model.target import ClusterTarget
from gpuctl.util.errors import UsageError
from gpuctl.util.output import FORMAT, info, set_verbosity


@dataclass(frozen=True)
class Settings:
    kubeconfig: Path | None
    context: str | None
    output: str
    verbose: int
    debug: bool
    target: ClusterTarget  # the cluster the global --kubeconfig and --context name, judged once


def make_settings(kubeconfig: Path | None, context: str | None, output: str, verbose: int,
                  debug: bool) -> Settings:
    """The global options, judged before any command runs (what a command adds, e.g. that the kubeconfig
    it merges into can be written, it judges before its own first write)."""
    output = FORMAT.check(output, "-o/--output")
    target = ClusterTarget(kubeconfig, context)
    set_verbosity(verbose)
    return Settings(kubeconfig, context, output, verbose, debug, target)


def settings(ctx: typer.Context) -> Settings:
    return ctx.find_root().obj


def confirm_or_refuse(yes: bool, question: str) -> None:
    """Go on with `--yes` or an interactive 'y'; refuse (exit 2) on a script without --yes; a declined
    prompt says `nothing changed` and exits 1."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UsageError("--yes", "this deletes resources and needs confirmation", "pass --yes to go ahead")
    if not typer.confirm(question, default=False, err=True):
        info("nothing changed")
        raise typer.Exit(1)
