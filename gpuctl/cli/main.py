"""Entry point: global options, command groups, and the one error boundary."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

# typer vendors click (0.26 on) and exports UsageError and ClickException nowhere public: typer._click is
# private, like the coercion gpuctl.cli.lazy patches. pyproject.toml admits only the typer releases on which
# tests/unit/test_lazy_imports.py::test_typers_private_interface_is_the_one_gpuctl_uses passes.
import typer
from typer._click import exceptions as click_exceptions

from gpuctl import __version__
from gpuctl.cli.lazy import LazyGroup, install_fast_coercion
from gpuctl.cli.settings import make_settings
from gpuctl.cli.types import path
from gpuctl.util.errors import ExitCode, GpuctlError

# Each subcommand: the module under gpuctl.cli and its typer app (a group) or function (a command),
# in the order `gpuctl --help` lists them (typer lists commands before groups). A module is imported
# only when its command runs or help lists it, so `gpuctl gpus` never loads the others.
COMMANDS: dict[str, tuple[str, str]] = {
    "apply": ("apply", "apply"),
    "plan": ("apply", "plan"),
    "render": ("apply", "render"),
    "gpus": ("gpus", "gpus"),
    "status": ("status", "status"),
    "validate": ("validate", "validate"),
    "top": ("top", "top"),
    "advise": ("advise", "advise"),
    "cluster": ("cluster", "app"),
    "nodegroup": ("nodegroup", "app"),
    "mig": ("mig", "app"),
    "sim": ("sim", "app"),
    "tenant": ("tenant", "app"),
}


def _new_app(**kwargs: object) -> typer.Typer:
    return typer.Typer(
        name="gpuctl",
        help="Turn a cloud account into a working, shared GPU platform on Kubernetes.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
        **kwargs,  # type: ignore[arg-type]
    )


def load_command(name: str) -> typer.core.TyperGroup | typer.core.TyperCommand:
    """Subcommand `name`, built exactly as under a root app that registered it alone."""
    from importlib import import_module

    module, attr = COMMANDS[name]
    target = getattr(import_module(f"gpuctl.cli.{module}"), attr)
    holder = _new_app()
    holder.callback()(lambda: None)  # a callback makes the holder a group, as the root is
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name)(target)
    return typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]


class _RootGroup(LazyGroup):
    names = tuple(COMMANDS)

    def load(self, name: str) -> typer.core.TyperGroup | typer.core.TyperCommand:
        return load_command(name)


install_fast_coercion()
app = _new_app(cls=_RootGroup)


def _version(value: bool) -> None:
    if value:
        print(f"gpuctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    kubeconfig: Annotated[Optional[Path], typer.Option("--kubeconfig", parser=path, metavar="PATH", help="Kubeconfig to write or read (default: $KUBECONFIG or ~/.kube/config).")] = None,
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


MAX_ERROR_LINE = 1000


def _fail(message: str, code: int) -> int:
    """Print the one error line: redacted, on one line, control characters escaped, bounded."""
    from gpuctl.util.redact import redact

    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(redact(message).split()))
    if len(line) > MAX_ERROR_LINE:
        line = f"{line[:MAX_ERROR_LINE]}..."
    print(f"error: {line}", file=sys.stderr)
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; errors become one line on stderr.

    stderr goes through gpuctl.util.redact for the whole command: no line printed there (errors, logs,
    --debug tracebacks) carries a registered credential. --debug adds the traceback and keeps the code.
    """
    from gpuctl.util.redact import RedactingStream

    args = hoist_global_options(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args or os.environ.get("GPUCTL_DEBUG", "") not in ("", "0")
    stderr = sys.stderr
    sys.stderr = RedactingStream(stderr)
    try:
        return _run(args, debug)
    finally:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to say
            pass
        sys.stderr = stderr


def _traceback(debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)


def _run(args: list[str], debug: bool) -> int:
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="gpuctl", standalone_mode=False)
        return result if isinstance(result, int) else ExitCode.OK
    except GpuctlError as exc:
        _traceback(debug)
        return _fail(exc.one_line(), exc.exit_code)
    except click_exceptions.UsageError as exc:
        where = f"; see '{exc.ctx.command_path} --help'" if exc.ctx else ""
        # typer reports a `parser=` refusal through pydantic, which prefixes "Value error, "
        message = exc.format_message().replace("Value error, ", "")
        return _fail(message.rstrip(".") + where, ExitCode.USAGE)
    except click_exceptions.ClickException as exc:
        return _fail(" ".join(exc.format_message().split()), exc.exit_code)
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        _traceback(debug)
        return _fail("interrupted", ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the one boundary: never a traceback unless asked
        _traceback(debug)
        hint = "" if debug else "; rerun with --debug for the traceback"
        return _fail(" ".join(f"unexpected {type(exc).__name__}: {exc}".split()) + hint, ExitCode.FAILURE)
