"""Entry point: global options, command groups, and the one error boundary."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from gpuctl import __version__
from gpuctl.cli import apply, cluster, gpus, mig, nodegroup, sim, status, tenant, validate
from gpuctl.cli.settings import make_settings
from gpuctl.errors import ExitCode, GpuctlError

try:  # typer >= 0.22 vendors click; older releases use click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef]

app = typer.Typer(
    name="gpuctl",
    help="Turn a cloud account into a working, shared GPU platform on Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(cluster.app, name="cluster")
app.add_typer(nodegroup.app, name="nodegroup")
app.add_typer(mig.app, name="mig")
app.add_typer(sim.app, name="sim")
app.add_typer(tenant.app, name="tenant")
app.command("apply")(apply.apply)
app.command("plan")(apply.plan)
app.command("render")(apply.render)
app.command("gpus")(gpus.gpus)
app.command("status")(status.status)
app.command("validate")(validate.validate)


def _version(value: bool) -> None:
    if value:
        print(f"gpuctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    kubeconfig: Annotated[Optional[Path], typer.Option("--kubeconfig", help="Kubeconfig to write or read (default: $KUBECONFIG or ~/.kube/config).")] = None,
    context: Annotated[Optional[str], typer.Option("--context", help="Kubeconfig context to use.")] = None,
    output: Annotated[str, typer.Option("-o", "--output", help="Output format: table, json or yaml.")] = "table",
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="More logging (repeat for more).")] = 0,
    debug: Annotated[bool, typer.Option("--debug", envvar="GPUCTL_DEBUG", help="Show tracebacks.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")] = False,
) -> None:
    ctx.obj = make_settings(kubeconfig, context, output, verbose, debug)
    if verbose:
        import logging

        logging.basicConfig(level=logging.DEBUG if verbose > 1 else logging.INFO, stream=sys.stderr)


_GLOBAL_WITH_VALUE = ("--kubeconfig", "--context", "-o", "--output")
_GLOBAL_FLAGS = ("-v", "-vv", "-vvv", "--verbose", "--debug")


def hoist_global_options(args: list[str]) -> list[str]:
    """Move global options to the front, so `gpuctl gpus -o json` works as in kubectl."""
    hoisted: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name = arg.split("=", 1)[0]
        if arg in _GLOBAL_FLAGS or (name in _GLOBAL_WITH_VALUE and "=" in arg):
            hoisted.append(arg)
        elif arg in _GLOBAL_WITH_VALUE and i + 1 < len(args):
            hoisted += args[i:i + 2]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return hoisted + rest


def _fail(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; errors become one line on stderr."""
    args = hoist_global_options(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("GPUCTL_DEBUG", "") not in ("", "0")
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="gpuctl", standalone_mode=False)
        return result if isinstance(result, int) else ExitCode.OK
    except GpuctlError as exc:
        if debug:
            raise
        return _fail(exc.one_line(), exc.exit_code)
    except click_exceptions.UsageError as exc:
        where = f"; see '{exc.ctx.command_path} --help'" if exc.ctx else ""
        return _fail(" ".join(exc.format_message().split()).rstrip(".") + where, ExitCode.USAGE)
    except click_exceptions.ClickException as exc:
        return _fail(" ".join(exc.format_message().split()), exc.exit_code)
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        return _fail("interrupted", ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the one boundary: never a traceback unless asked
        if debug:
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc}; rerun with --debug for the traceback",
                     ExitCode.FAILURE)
