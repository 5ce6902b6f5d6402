"""Entry point: global options, command groups, and the one error boundary."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from importlib import import_module
from pathlib import Path
from typing import Annotated, Any, Optional

# Only typer's public names: its app, the `cls=` hook (a TyperGroup subclass: help.Group), and its exceptions
# (click's, vendored since typer 0.26, are typer.TyperException and typer.BadParameter to the outside).
import typer

from gpuctl import __version__
from gpuctl.cli.help import Group, NoArgs, adopt, argument_usage, metavar, one_of
from gpuctl.cli.settings import make_settings
from gpuctl.cli.types import path
from gpuctl.util.errors import ExitCode, GpuctlError
from gpuctl.util.output import FORMAT
from gpuctl.util.redact import RedactingStream, redact

# Each subcommand: the module under gpuctl.cli and its typer app (a group) or function (a command),
# in the order `gpuctl --help` lists them (typer lists commands before groups). A module is imported
# only when its command runs or help lists it, so `gpuctl gpus` never loads the others (`make_app`).
COMMANDS: dict[str, tuple[str, str]] = {
    "apply": ("apply", "apply"),
    "plan": ("apply", "plan"),
    "render": ("apply", "render"),
    "gpus": ("gpus", "gpus"),
    "status": ("status", "status"),
    "validate": ("validate", "validate"),
    "doctor": ("doctor", "doctor"),
    "top": ("top", "top"),
    "advise": ("advise", "advise"),
    "cluster": ("cluster", "app"),
    "nodegroup": ("nodegroup", "app"),
    "mig": ("mig", "app"),
    "sim": ("sim", "app"),
    "tenant": ("tenant", "app"),
}


HELP = """Turn a cloud account into a working, shared GPU platform on Kubernetes.

Examples:
  # A local simulated cluster with one T4 node, each GPU shared 4 ways
  gpuctl cluster create --gpu t4 --slices 4
  # Give team-a a quota of 4 GPUs in its own namespace
  gpuctl tenant add team-a --gpus 4
  # The GPU nodes, as JSON
  gpuctl status -o json
  # Converge a cluster to a spec file
  gpuctl apply -f gpu-platform.yaml
"""


def _new_app(**kwargs: object) -> typer.Typer:
    return typer.Typer(
        name="gpuctl",
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
        **kwargs,  # type: ignore[arg-type]
    )


class _Root(Group):
    """The root command typer builds (`Typer(cls=...)`): every command in it gets gpuctl's help (`adopt`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        adopt(self)

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # `app(built=True)`: typer's app, called as the click command it builds, hands that command back.
        return self if kwargs.pop("built", False) else super().main(*args, **kwargs)


def make_app(names: Iterable[str] = tuple(COMMANDS)) -> typer.Typer:
    """gpuctl's typer app with the subcommands `names` only: typer builds every command it holds, so a command
    line that names one command gets an app that holds just that one (`asked_for`)."""
    app = _new_app(cls=_Root)
    app.callback()(root)
    for name in names:
        module, attr = COMMANDS[name]
        # lazy seam: the CLI -> command-module seam; a command line loads only the module of the command it names
        target = getattr(import_module(f"gpuctl.cli.{module}"), attr)
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
        else:
            app.command(name)(target)
    return app


def command(names: Iterable[str] = tuple(COMMANDS)) -> Any:
    """The click command typer builds for `make_app(names)`: the whole CLI by default."""
    return make_app(names)(built=True)


def _version(value: bool) -> None:
    if value:
        print(f"gpuctl {__version__}")
        raise typer.Exit()


def root(
    ctx: typer.Context,
    kubeconfig: Annotated[Optional[Path], typer.Option("--kubeconfig", parser=path, metavar="PATH", help="Kubeconfig to write or read (default: $KUBECONFIG or ~/.kube/config).")] = None,
    context: Annotated[Optional[str], typer.Option("--context", metavar="NAME", help="Kubeconfig context to use.")] = None,
    output: Annotated[str, typer.Option("-o", "--output", metavar=one_of(FORMAT.names), help="Output format.")] = "table",
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
    return sum(split_global_options(args), [])


def split_global_options(args: list[str]) -> tuple[list[str], list[str]]:
    """(global options with their values, the rest in order)."""
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
    return hoisted, rest


def asked_for(rest: list[str]) -> tuple[str, ...]:
    """The subcommands a command line needs once its global options are hoisted: the one it names first, else
    all (root help, a typo that suggestions need every name for, an option typer will refuse)."""
    return (rest[0],) if rest and rest[0] in COMMANDS else tuple(COMMANDS)


MAX_ERROR_LINE = 1000


def _fail(message: str, code: int) -> int:
    """Print the one error line: redacted, on one line, control characters escaped, bounded."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(redact(message).split()))
    line = line.replace(".;", ";").replace("?;", "?")  # a sentence's own stop before the fix: one mark only
    if len(line) > MAX_ERROR_LINE:
        line = f"{line[:MAX_ERROR_LINE]}..."
    print(f"error: {line}", file=sys.stderr)
    return code


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; errors become one line on stderr.

    stderr goes through gpuctl.util.redact for the whole command: no line printed there (errors, logs,
    --debug tracebacks) carries a registered credential. --debug adds the traceback and keeps the code.
    """
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


def _see(ctx: Any) -> str:
    return f"see '{ctx.command_path if ctx else 'gpuctl'} --help'"


def _usage(ctx: Any) -> str:
    if ctx is None:
        return _see(ctx)
    return f"usage: {ctx.command_path} {' '.join(ctx.command.collect_usage_pieces(ctx))}"


def _field(param: object) -> str:
    """How a user names a parameter: its flags (`-o/--output`), or an argument's metavar (`NAME`)."""
    if getattr(param, "param_type_name", None) == "argument":
        return argument_usage(param).strip("[]")
    return "/".join(getattr(param, "opts", None) or [str(getattr(param, "name", "value"))])


_NO_COMMAND = re.compile(r"No such command '(?P<word>.*)'\.(?: Did you mean (?P<close>.*)\?)?", re.S)
_EXTRA = re.compile(r"Got unexpected extra arguments?(?:\(s\))? \((?P<words>.*)\)", re.S)


def _either(words: list[str]) -> str:
    return " or ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} or {words[-1]}"


def usage_error_line(exc: Any) -> str:
    """click's and typer's usage errors in gpuctl's one style, `<field>: <problem>; <fix>`, the field being
    what the user typed (a flag, an argument's NAME, a command word). typer names none of click's error classes
    but BadParameter: the others are told by the fields click documents for them (`possibilities` of
    NoSuchOption, `param_type` of MissingParameter, `option_name` of BadOptionUsage)."""
    ctx, message = exc.ctx, exc.message.replace("Value error, ", "").strip().rstrip(".")
    see = _see(ctx)
    if hasattr(exc, "possibilities"):
        close = _either([repr(p) for p in exc.possibilities or ()])
        return f"{exc.option_name}: no such option; " + (f"did you mean {close}? ({see})" if close else see)
    if isinstance(exc, typer.BadParameter) and hasattr(exc, "param_type") and exc.param is not None:
        field = _field(exc.param)
        if exc.param.param_type_name == "argument":
            return f"{field}: required; {_usage(ctx)}"
        return f"{field}: required; pass {exc.param.opts[-1]} {metavar(exc.param)} ({see})"
    if isinstance(exc, typer.BadParameter) and exc.param is not None:
        return f"{_field(exc.param)}: {message}" + ("" if "; " in message else f"; {see}")
    if hasattr(exc, "option_name"):
        flag = exc.option_name
        if "requires" in message:
            params = [p for p in (ctx.command.params if ctx else ()) if flag in getattr(p, "opts", ())]
            return f"{flag}: needs a value; pass {flag} {metavar(params[0]) if params else 'VALUE'} ({see})"
        if "does not take a value" in message:
            return f"{flag}: takes no value; pass {flag} alone ({see})"
        return f"{flag}: {message.replace(f'Option {flag!r} ', '')}; {see}"
    if found := _NO_COMMAND.fullmatch(message + "." if not message.endswith("?") else message):
        where = ctx.command_path if ctx else "gpuctl"
        close = found["close"]
        return (f"{found['word']}: not a '{where}' command; "
                + (f"did you mean {_either(close.split(', '))}? ({see})" if close else see))
    if found := _EXTRA.fullmatch(message):
        words = found["words"].split()
        noun = "argument" if len(words) == 1 else "arguments"
        return f"{' '.join(words)}: unexpected {noun}; {_usage(ctx)}"
    if message == "Missing command" and ctx is not None:
        return f"{ctx.command_path}: missing command; {see}"
    where = ctx.command_path if ctx else "gpuctl"
    return f"{where}: {message[:1].lower()}{message[1:]}; {see}"


def _traceback(debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc(file=sys.stderr)


def _run(args: list[str], debug: bool) -> int:
    names = asked_for(split_global_options(args)[1])  # `args` come hoisted: the command word leads the rest
    try:
        result = command(names).main(args=args, prog_name="gpuctl", standalone_mode=False)
        return result if isinstance(result, int) else ExitCode.OK
    except GpuctlError as exc:
        _traceback(debug)
        return _fail(exc.one_line(), exc.exit_code)
    except NoArgs as exc:  # a group without its command: the group's help
        print(exc.help, file=sys.stderr)
        return ExitCode.USAGE
    except typer.TyperException as exc:  # click's errors: a usage error (exit 2, with its context) or another
        if exc.exit_code == ExitCode.USAGE and hasattr(exc, "ctx"):
            return _fail(usage_error_line(exc), ExitCode.USAGE)
        message = " ".join(exc.format_message().split()).rstrip(".")
        return _fail(f"gpuctl: {message[:1].lower()}{message[1:]}", exc.exit_code)
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        _traceback(debug)
        return _fail("interrupted", ExitCode.INTERRUPTED)
    except Exception as exc:  # noqa: BLE001 - the one boundary: never a traceback unless asked
        _traceback(debug)
        hint = "" if debug else "; rerun with --debug for the traceback"
        return _fail(" ".join(f"unexpected {type(exc).__name__}: {exc}".split()) + hint, ExitCode.FAILURE)
